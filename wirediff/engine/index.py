"""The index of every record to analyse, in load order: built from the scanned chunks a
column and a piece at a time, on disk (`Columns`, in pieces of `PIECE_ROWS` rows), the
first record of each id kept (found by buckets of the id digest) and failed replay attempts
tried again left out, as loading leaves them out."""

from __future__ import annotations

import contextlib
import ctypes
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import pandas as pd

import wirediff.engine.columns as on_disk
from wirediff import FORMAT
from wirediff.engine.columns import Buckets, Columns
from wirediff.engine.scan import CATEGORIES, DIGESTS, INDEX_COLUMNS, Scanned
from wirediff.engine.sources import DATASET_MARK, Source, open_binary
from wirediff.errors import CaptureError
from wirediff.record.keys import digest
from wirediff.record.store import RETRIED_KINDS, warn_repeated_ids

__all__ = [
    "LEAN_COLUMNS",
    "Index",
    "build_index",
    "give_back",
    "lean",
    "line_number",
    "repeated_ids",
]

log = logging.getLogger("wirediff.record.store")
LEAN_CATEGORIES = ("location", "models")
"""Index columns of few values besides `CATEGORIES`: redirect targets, models listed."""
LEAN_COLUMNS = [
    "src",
    "a",
    "b",
    "nbytes",
    "ordinal",
    *(c for c in INDEX_COLUMNS if c not in ("id", "replay_of")),
    "replay",
    "careful",
]
"""The index's columns (`lean`; `ordinal` only until its rows are in order)."""
NARROWED = ("src", "a", "b", "nbytes", "ordinal", "retry", "seq")
"""Integer columns kept in the narrowest type that holds a chunk's values (the index
widens them as it concatenates chunks)."""


def lean(scanned: Scanned) -> Scanned:
    """A chunk's index rows as the command keeps them, made where they were scanned: ids
    and `replay_of` only as their digests (a string a row is most of what the index of
    every exchange would hold) and whether a record is a replay; redirect targets and the
    models a `/v1/models` answer lists (as JSON) in categories."""
    frame = scanned.frame
    if not len(frame):
        scanned.frame = pd.DataFrame(columns=LEAN_COLUMNS)
        return scanned
    frame["replay"] = frame["replay_of"].notna().to_numpy()
    listed = [
        orjson.dumps(list(m)).decode() if isinstance(m, (list, tuple, np.ndarray)) else None
        for m in frame["models"].tolist()
    ]
    frame["models"] = pd.Series(listed, index=frame.index, dtype=object).astype("category")
    frame["location"] = frame["location"].astype("category")
    for name in NARROWED:
        if frame[name].dtype.kind in "iu":
            frame[name] = pd.to_numeric(frame[name], downcast="integer")
    scanned.frame = frame[LEAN_COLUMNS]
    return scanned


def line_number(url: str, offset: int) -> int:
    """The line of a file that starts at byte `offset` (counting newlines before it)."""
    n = 1
    with open_binary(url) as fh:
        left = offset
        while left > 0:
            block = fh.read(min(left, 1 << 20))
            if not block:
                break
            n += block.count(b"\n")
            left -= len(block)
    return n


def _say(sources: Sequence[Source], scans: Sequence[Scanned]) -> None:
    """Warn about torn lines and raise the first problem, file by file, as loading each
    file whole would (`wirediff.record.store.iter_records`)."""
    by_src: dict[int, list[Scanned]] = {}
    for s in sorted(scans, key=lambda s: (s.src, s.start)):  # as they come: in any order
        by_src.setdefault(s.src, []).append(s)
    for src, parts in sorted(by_src.items()):
        url, name = sources[src].url, sources[src].name
        error = next((s.error for s in parts if s.error is not None), None)
        torn = [t for s in parts for t in s.torn]
        if error is not None:
            torn = [t for t in torn if t[0] < error[0]]
        if any(s.records for s in parts):
            for offset, why in torn:
                log.warning(f"{name}:{line_number(url, offset)}: {why}")
        if error is not None:
            raise CaptureError(f"{name}:{line_number(url, error[0])}: {error[1]}")
        if sum(s.lines for s in parts) and not sum(s.records for s in parts):
            raise CaptureError(f"{name}: not a {FORMAT} capture (no line is a JSON record)")
        said, held = sources[src].exchanges, sum(s.records for s in parts)
        if said is not None and held != said:
            raise CaptureError(
                f"{name}: {held:,} exchanges where its {DATASET_MARK} says {said:,}: "
                "a file of the dataset was changed"
            )


_NO_ORIGINAL = np.uint64(digest(""))
"""An empty `replay_of`: paired as a replay, never an attempt another one supersedes."""


def _kept(index: Columns, scope: np.ndarray, keep: np.ndarray) -> None:
    """`wirediff.record.store.drop_retried` on the rows `keep` holds, within each scope:
    replay attempts that got no answer and were tried again later are left out of `keep`
    (the newest attempt at an original and label stays); originals all stay. A piece at a
    time, and only the attempts at the originals with such an attempt read whole."""
    retried_of = []
    for start, f in index.pieces("replay_digest", "error_kind"):
        of, replay = _replays(f, keep[start : start + len(f)])
        retried = replay & f["error_kind"].isin(RETRIED_KINDS).to_numpy(dtype=bool)
        if retried.any():
            retried_of.append(np.unique(of[retried]))
    if not retried_of:
        return
    asked = np.unique(np.concatenate(retried_of))
    found = []
    for start, f in index.pieces("replay_digest"):
        of, replay = _replays(f, keep[start : start + len(f)])
        found.append(start + np.flatnonzero(replay & np.isin(of, asked)))
    rows = np.concatenate(found)
    at = index.frame(["replay_digest", "started", "label", "error_kind"], rows)
    retried = at["error_kind"].isin(RETRIED_KINDS).to_numpy(dtype=bool)
    started = pd.to_numeric(at["started"], errors="coerce").fillna(0.0).to_numpy()
    of_code = pd.factorize(at["replay_digest"].to_numpy(dtype=np.uint64))[0]
    label_code = pd.factorize(at["label"], use_na_sentinel=False)[0]
    key = scope[rows].astype(np.int64)
    for code in (of_code, label_code):
        key = key * (int(code.max(initial=0)) + 1) + code
    order = np.lexsort((rows, started, key))  # each (scope, original, label): by time
    last = np.r_[key[order][1:] != key[order][:-1], True]
    latest = np.zeros(len(rows), dtype=bool)
    latest[order[last]] = True
    keep[rows[retried & ~latest]] = False


def _replays(f: pd.DataFrame, kept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A piece's `replay_of` digests, and which of its kept rows are replays that name
    an original (a `replay_of` that is a string, not empty)."""
    of = f["replay_digest"].to_numpy(dtype=np.uint64)
    return of, (of != 0) & (of != _NO_ORIGINAL) & kept


def repeated_ids(index: Columns, rows: int) -> np.ndarray:
    """The rows whose id digest an earlier row has (`first_of_each_id` leaves them out),
    in order: by buckets of the digest, a bucket at a time."""
    out = [np.zeros(0, dtype=np.int64)]
    with Buckets(rows) as buckets:
        for start, f in index.pieces("id_digest"):
            ids = f["id_digest"].to_numpy(dtype=np.uint64)
            buckets.add(ids, row=np.arange(start, start + len(ids), dtype=np.int64))
        for bucket in buckets:
            order = np.lexsort((bucket["row"], bucket["key"]))
            key = bucket["key"][order]
            out.append(bucket["row"][order][1:][key[1:] == key[:-1]])
    return np.sort(np.concatenate(out))


@dataclass
class Index:
    """Every record to analyse, in load order (a row's position is its place among all),
    its columns on disk (`Columns`): a step reads the ones it needs."""

    sources: list[Source]
    columns: Columns
    scope: np.ndarray
    """The argument each record came from."""

    def __len__(self) -> int:
        return len(self.scope)

    def load(self, *names: str, rows: np.ndarray | None = None) -> pd.DataFrame:
        """These columns (all of them when none is named), at `rows` when given."""
        return self.columns.frame(names or self.columns.names, rows)

    def categories(self, name: str) -> pd.Index[Any]:
        """A category column's categories (every piece has them all)."""
        first = next(self.columns.read_pieces(name))
        if not isinstance(first.dtype, pd.CategoricalDtype):  # no row: no category
            return pd.Index([], dtype=object)
        categories: pd.Index[Any] = first.cat.categories
        return categories

    def labels(self, *, missing: bool = True) -> list[str]:
        """The labels, in the order rows first have them (a missing one as empty, or left
        out without `missing`)."""
        if not len(self):
            return []
        values = self.categories("label").tolist()
        seen: dict[int, None] = {}
        for _, f in self.pieces("label"):
            seen.update(dict.fromkeys(pd.unique(f["label"].cat.codes.to_numpy()).tolist()))
        named = [
            "" if c < 0 or pd.isna(values[c]) else str(values[c])
            for c in seen
            if missing or (c >= 0 and not pd.isna(values[c]))
        ]
        return list(dict.fromkeys(named))

    def pieces(self, *names: str) -> Iterator[tuple[int, pd.DataFrame]]:
        """These columns a piece at a time (`Columns.pieces`), with each piece's first row."""
        return self.columns.pieces(*names)

    def let_go(self, *names: str) -> None:
        """Columns no step ahead reads, removed."""
        self.columns.drop(*names)

    def close(self) -> None:
        self.columns.close()


def build_index(
    sources: list[Source],
    scopes: Sequence[int],
    scans: Sequence[Scanned],
    pieces: Columns,
    order: Sequence[tuple[int, int]],
    *,
    retried: bool = False,
) -> Index:
    """The index of the scanned chunks (`pieces`, a chunk's rows a piece, the `order` key
    of each: its source and where it starts) in source order, and each source's own order;
    the first record of each id over all of them (`first_of_each_id`), failed replay
    attempts tried again left out within each scope (an argument of `check`; all of them
    else) unless `retried`. The index is made a column and a piece at a time."""
    index = Columns()
    try:
        _say(sources, scans)
        scope = _columns(index, scopes, pieces, order, retried)
    except BaseException:
        index.close()
        raise
    finally:
        pieces.close()
    return Index(sources, index, scope)


def _columns(
    index: Columns,
    scopes: Sequence[int],
    pieces: Columns,
    order: Sequence[tuple[int, int]],
    retried: bool,
) -> np.ndarray:
    """`index` made from `pieces`, a piece at a time; each row's scope."""
    if not pieces.names:
        for name in (c for c in LEAN_COLUMNS if c != "ordinal"):
            index.put(name, _empty()[name])
        return np.zeros(0, dtype=np.int64)
    places = sorted(range(len(order)), key=order.__getitem__)
    for name in pieces.names:
        parts = (pieces.piece(name, k) for k in places)
        if name in DIGESTS:  # exact before concatenating: int64 with uint64 would make
            parts = (p.astype(np.uint64) for p in parts)  # float64, and lose low bits
        elif name in (*CATEGORIES, *LEAN_CATEGORIES):  # else concatenated as plain objects
            categories = _categories(pieces.piece(name, k) for k in places)
            parts = (p.cat.set_categories(categories) for p in parts)
        elif name == "status":
            parts = (p.astype("Int64") for p in parts)
        else:  # the type concatenating every chunk gives (a float start in one: all)
            kind = pd.concat([pieces.piece(name, k).iloc[:1] for k in places]).dtype
            parts = (p if p.dtype == kind else p.astype(kind) for p in parts)
        index.put_pieces(name, parts)
        pieces.drop(name)
        give_back()
    _in_order(index)
    index.drop("ordinal")  # the rows' order, once they are in it
    kind = np.min_scalar_type(max(scopes, default=0))  # an argument's number, a row: small
    of_src = np.asarray(scopes, dtype=kind)
    scope = np.concatenate([of_src[p.to_numpy()] for p in index.read_pieces("src")])
    keep = np.ones(len(scope), dtype=bool)
    repeated = repeated_ids(index, len(scope))
    if len(repeated):
        keep[repeated] = False
        warn_repeated_ids(len(repeated))
    if not retried:
        _kept(index, scope, keep)
    if not keep.all():
        for name in index.names:
            index.put_pieces(name, _kept_of(index.pieces(name), name, keep))
            give_back()
        scope = scope[keep]
    return scope


def _kept_of(
    pieces: Iterator[tuple[int, pd.DataFrame]], name: str, keep: np.ndarray
) -> Iterator[pd.Series]:
    for start, f in pieces:
        yield f[name][keep[start : start + len(f)]]


def _in_order(index: Columns) -> None:
    """The rows put in source order and each source's own order (`ordinal`). The chunks
    come by source, so only a dataset's rows (written by root) are out of their order; its
    ordinals are its rows' places, so each row's place is known and the rows are moved a
    piece at a time (`_move`). Anything else out of order is sorted whole."""
    begin: dict[int, int] = {}
    ordered: dict[int, bool] = {}
    span: dict[int, tuple[int, int]] = {}
    last: dict[int, int] = {}
    for start, f in index.pieces("src", "ordinal"):
        src, ordinal = f["src"].to_numpy(np.int64), f["ordinal"].to_numpy(np.int64)
        bounds = np.flatnonzero(np.r_[True, src[1:] != src[:-1], True])
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            s, mine = int(src[lo]), ordinal[lo:hi]
            begin.setdefault(s, start + lo)
            steps = bool((np.diff(mine) >= 0).all()) and int(mine[0]) >= last.get(s, mine[0])
            ordered[s] = ordered.get(s, True) and steps
            low, high = span.get(s, (int(mine.min()), int(mine.max())))
            span[s] = (min(low, int(mine.min())), max(high, int(mine.max())))
            last[s] = int(mine[-1])
    if all(ordered.values()):
        return
    rows = sum(len(f) for _, f in index.pieces("src"))
    sizes = dict(zip(begin, np.diff([*begin.values(), rows]).tolist(), strict=True))
    moved = [s for s, ok in ordered.items() if not ok]
    places = all(span[s][0] >= 0 and span[s][1] < sizes[s] for s in moved)
    if places:  # each row a place of its own: a byte a row, for a moment
        placed = np.zeros(rows, dtype=bool)
        for target in _places(index, begin, ordered):
            if len(np.unique(target)) < len(target) or placed[target].any():
                places = False
                break
            placed[target] = True
        del placed
    if not places:
        src, ordinal = index.column("src").to_numpy(), index.column("ordinal").to_numpy()
        _take(index, np.lexsort((ordinal, src)))  # ordinals that are no places: whole
        return
    for name in index.names:
        if name != "ordinal":
            _move(index, name, _places(index, begin, ordered), rows)
            give_back()


def _take(columns: Columns, rows: np.ndarray) -> None:
    """Every column made its values at `rows`, in their order, one column at a time."""
    for name in columns.names:
        columns.put(name, columns.column(name).take(rows).reset_index(drop=True))
        give_back()


def _places(
    index: Columns, begin: dict[int, int], ordered: dict[int, bool]
) -> Iterator[np.ndarray]:
    """Each row's place in source order, a piece at a time: a source in order keeps its
    rows' places, a dataset's row goes to its ordinal."""
    for start, f in index.pieces("src", "ordinal"):
        src, ordinal = f["src"].to_numpy(np.int64), f["ordinal"].to_numpy(np.int64)
        first = np.array([begin[s] for s in src.tolist()], dtype=np.int64)
        moved = np.array([not ordered[s] for s in src.tolist()], dtype=bool)
        yield np.where(moved, first + ordinal, start + np.arange(len(f)))


def _move(index: Columns, name: str, places: Iterator[np.ndarray], rows: int) -> None:
    """Column `name` with each row at its place: each piece's rows sent to the pieces
    they go to (on disk), then each of those put in order, one at a time."""
    count = max(1, -(-rows // on_disk.PIECE_ROWS))
    sent = Columns(prefix="wirediff-order-")
    try:
        for (_, f), target in zip(index.pieces(name), places, strict=True):
            to = target // on_disk.PIECE_ROWS
            order = np.argsort(to, kind="stable")
            bounds = np.searchsorted(to[order], np.arange(count + 1))
            for p in np.flatnonzero(np.diff(bounds)).tolist():
                at = order[bounds[p] : bounds[p + 1]]
                sent.add(f"at/{p}", pd.Series(target[at]))
                sent.add(f"values/{p}", f[name].iloc[at].reset_index(drop=True))
        index.put_pieces(name, _in_place(sent, count))
    finally:
        sent.close()


def _in_place(sent: Columns, count: int) -> Iterator[pd.Series]:
    for p in range(count):
        if f"at/{p}" in sent:
            at = sent.column(f"at/{p}").to_numpy()
            yield sent.column(f"values/{p}").take(np.argsort(at, kind="stable"))


def give_back() -> None:
    """Hand the memory freed so far back to the system: glibc would keep it (the scanned
    chunks' small arrays, once copied into the index's large ones, would stay resident
    beside them, through the phases that follow)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _categories(parts: Iterable[pd.Series]) -> pd.Index[Any]:
    """The chunks' categories of a column made one, in the order they come."""
    values = list(dict.fromkeys(v for p in parts for v in p.cat.categories.tolist()))
    strings = all(isinstance(v, str) for v in values)
    categories: pd.Index[Any] = pd.Index(values, dtype="str" if strings else object)
    return categories


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=LEAN_COLUMNS)
