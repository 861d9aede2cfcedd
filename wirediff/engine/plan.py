"""From the index to the work: the comparison partitions (and what each partition's task
reads), content pairing, the repeated requests whose noise is learned first.

Partitions keep each original with all its replays (a replay of a replay too): a record's
partition is a range of the 64-bit digest of its root id (the original it was replayed from,
or itself), so partitions are even whatever the traffic, and a dataset written sorted by that
digest (`wirediff export`) is read a few row groups per partition.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from wirediff.analysis.comparison.noise import NOISE_SAMPLES
from wirediff.analysis.comparison.pairing import (
    UNMATCHED_COLUMNS,
    Baseline,
    choose_baseline,
    content_links,
)
from wirediff.engine.columns import Buckets, Columns, bucket_of, looked_up
from wirediff.engine.index import Index
from wirediff.engine.joins import deep_replays, replay_join
from wirediff.engine.scan import plain

__all__ = [
    "COMPARING_ONLY",
    "NO_LINKS",
    "PAIRING_ONLY",
    "ROOT_INPUTS",
    "ByContent",
    "Parts",
    "content_pairing",
    "first_rows",
    "noise_samples",
    "paired_scopes",
    "pieces_of",
    "root_pieces",
    "split",
]

NO_LINKS = np.zeros((0, 2), dtype=np.uint64)


def pieces_of(index: Index, groups: Sequence[np.ndarray], names: Sequence[str]) -> Columns:
    """These columns at each group of rows (`row`: their places in the index), a piece a
    group: what each task reads, made a column at a time and kept on disk while the tasks
    run (a piece's categories only those it holds)."""
    every = np.concatenate(groups) if len(groups) else np.zeros(0, dtype=np.int64)
    bounds = np.cumsum([0, *map(len, groups)]).tolist()
    out = Columns()
    for name in names:
        values = pd.Series(every) if name == "row" else index.load(name, rows=every)[name]
        kept = isinstance(values.dtype, pd.CategoricalDtype)
        for k in range(len(groups)):
            piece = values.iloc[bounds[k] : bounds[k + 1]].reset_index(drop=True)
            out.add(name, piece.cat.remove_unused_categories() if kept else piece)
        del values
    return out


@dataclass
class Parts:
    """What each comparison partition's task reads, on disk: its rows (`row`, in index
    order) and the columns asked for at them."""

    columns: Columns
    names: list[str]
    parts: list[int]
    """The partitions that have rows."""

    def read(self, k: int) -> dict[str, np.ndarray]:
        """The `k`th listed partition's columns."""
        p = self.parts[k]
        return {n: self.columns.column(f"{n}/{p}").to_numpy() for n in self.names}

    def close(self) -> None:
        self.columns.close()


def split(
    index: Index,
    count: int,
    names: Sequence[str],
    links: np.ndarray = NO_LINKS,
    *,
    roots: bool = False,
) -> Parts:
    """Each record's comparison partition, of `count` (a range of its root's digest:
    `root_pieces`), and what each partition reads (`row` and `names`, with `roots` its
    rows' `root` digests), written a piece of the index at a time."""
    out = Columns(prefix="wirediff-parts-")
    found: set[int] = set()
    rooted = root_pieces(index, links) if count > 1 or roots else None
    try:
        for start, f in index.pieces(*names):
            root = next(rooted)[1] if rooted is not None else None
            part = np.zeros(len(f), dtype=np.int64)
            if root is not None and count > 1:
                part = bucket_of(root, count)
            order = np.argsort(part, kind="stable")
            bounds = np.searchsorted(part[order], np.arange(count + 1))
            for p in np.flatnonzero(np.diff(bounds)).tolist():
                at = order[bounds[p] : bounds[p + 1]]
                out.add(f"row/{p}", pd.Series(start + at))
                for name in names:
                    out.add(f"{name}/{p}", f[name].iloc[at].reset_index(drop=True))
                if root is not None and roots:
                    out.add(f"root/{p}", pd.Series(root[at]))
                found.add(p)
    except BaseException:
        out.close()
        raise
    finally:
        if rooted is not None:
            rooted.close()
    listed = ["row", *names, *(["root"] if roots else [])]
    return Parts(out, listed, sorted(found))


def root_pieces(index: Index, links: np.ndarray = NO_LINKS) -> Generator[tuple[int, np.ndarray]]:
    """Per record, a piece of the index at a time, the digest of the original it goes
    back to through `replay_of` (itself for an original; a replay of a replay goes back
    further, the replays in chains found first by buckets: `deep_replays`; a missing
    original's id); for an original paired by content (`links`: candidate and baseline id
    digests, a row each) and its replays, the baseline's original, so that both sides of
    a pair land in one partition."""
    ids, up = _replay_ancestors(*deep_replays(index))
    cand, base = _by_candidate(links)
    for start, f in index.pieces(*ROOT_INPUTS):
        yield start, _roots(f, ids, up, cand, base)


def _by_candidate(links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(links[:, 0], kind="stable")
    return links[order, 0], links[order, 1]


def _roots(
    frame: pd.DataFrame, ids: np.ndarray, up: np.ndarray, cand: np.ndarray, base: np.ndarray
) -> np.ndarray:
    """The root digests of these rows, given the replays of chains (`ids`, sorted, and the
    original each goes back to) and the content links by candidate."""
    own = frame["id_digest"].to_numpy(dtype=np.uint64)
    parent = frame["replay_digest"].to_numpy(dtype=np.uint64)
    replay = frame["replay"].to_numpy(dtype=bool) & (parent != 0)
    root = np.where(replay, parent, own)
    if len(ids):
        at, hit = looked_up(ids, root)
        root[hit] = up[at[hit]]
    if len(cand):
        at, hit = looked_up(cand, root)
        root = np.where(hit, base[at], root)
    return root


def _replay_ancestors(ids: np.ndarray, parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each replay's id (sorted; the first row of an id names its parent) and the original
    it goes back to through replays of replays, however many: pointers doubled until none
    lands on a replay. A cycle of `replay_of` has no original: its members, and what leads
    into it, go back to its smallest id, so that they all land in one partition."""
    if not len(ids):
        return ids, parents
    order = np.argsort(ids, kind="stable")
    ids, parents = ids[order], parents[order]
    del order
    first = np.r_[True, ids[1:] != ids[:-1]]
    ids, parents = ids[first], parents[first]
    up = parents.copy()
    active = np.arange(len(ids))  # the rows whose pointer still lands on a replay
    for _ in range(64):  # 2**64 steps: what still lands on a replay is in a cycle
        at, hit = looked_up(ids, up[active])
        active, at = active[hit], at[hit]
        if not len(active):
            return ids, up
        up[active] = up[at]
    parent_of = dict(zip(ids.tolist(), parents.tolist(), strict=True))
    smallest: dict[int, int] = {}
    for k in active.tolist():
        on = int(up[k])  # on its cycle, after that many doublings
        if on not in smallest:
            cycle, x = [on], parent_of[on]
            while x != on:
                cycle.append(x)
                x = parent_of[x]
            smallest.update(dict.fromkeys(cycle, min(cycle)))
        up[k] = smallest[on]
    return ids, up


PAIRING_INPUTS = [
    "label",
    "session",
    "seq",
    "started",
    "retry",
    "method",
    "endpoint",
    "fingerprint",
]
"""The index columns `choose_baseline` and `content_links` read, besides ids."""
ROOT_INPUTS = ["id_digest", "replay_digest", "replay"]
"""The index columns `root_pieces` reads."""
PAIRING_ONLY = ("fingerprint", "seq")
"""Index columns only pairing by content reads."""
COMPARING_ONLY = ("nbytes", "request_digest", "replay_digest")
"""Index columns only the comparison (its partitions, its noise) reads, after pairing."""


@dataclass
class ByContent:
    """Originals of independent captures paired by content (`content_links`), by digest."""

    links: np.ndarray
    """Candidate and baseline id digests, a row each (uint64)."""
    unmatched: pd.DataFrame
    """`UNMATCHED_COLUMNS`, each `id` the digest of one (`Run` names them)."""


def content_pairing(index: Index, requested: str | None) -> tuple[Baseline, ByContent]:
    """The baseline label (`choose_baseline`) and the originals of other labels paired with
    its own by content (`content_links`), once over the whole index: a partition takes the
    links of its candidates and never aligns a part of the captures (it would list calls
    whose counterpart is in another part as unmatched). Ids are their digests here; what
    pairing reads besides is read for the rows it decides from."""
    deciding, labels = _deciding(index)
    chosen = choose_baseline(_pairing_frame(index, deciding), requested)
    none = ByContent(NO_LINKS, pd.DataFrame(columns=UNMATCHED_COLUMNS))
    if chosen.label is None or labels < 2:
        return chosen, none  # one label of originals: nothing to pair by content
    originals = np.concatenate(
        [
            start + np.flatnonzero(~f["replay"].to_numpy(dtype=bool))
            for start, f in index.pieces("replay")
        ]
    )
    found = content_links(_pairing_frame(index, originals), chosen.label)
    links = np.array([[int(c), int(b)] for c, b in found.links], dtype=np.uint64)
    unmatched = found.unmatched.assign(id=[int(i) for i in found.unmatched["id"].tolist()])
    return chosen, ByContent(links.reshape(-1, 2), unmatched)


def _label_codes(categories: pd.Index[Any]) -> np.ndarray:
    """Each label code's label as pairing compares them (missing as empty, as text), by
    code: index it with a category's codes (-1, missing, the last)."""
    values = ["" if pd.isna(v) else str(v) for v in categories.tolist()]
    return pd.factorize(pd.Index([*values, ""], dtype=object))[0].astype(np.int32)


def _deciding(index: Index) -> tuple[np.ndarray, int]:
    """The rows `choose_baseline` decides from alike, in order: of the originals, each
    label's first and its first one replayed, with the first replay of each taken; and
    how many labels the originals have. A piece, then a bucket of the replay join, at a
    time."""
    same: np.ndarray | None = None
    first: dict[int, int] = {}
    for start, f in index.pieces("replay", "label"):
        if same is None:
            same = _label_codes(f["label"].cat.categories)
        label = same[f["label"].cat.codes.to_numpy()]
        at = np.flatnonzero(~f["replay"].to_numpy(dtype=bool))
        codes, place = np.unique(label[at], return_index=True)
        for code, row in zip(codes.tolist(), (start + at[place]).tolist(), strict=True):
            first.setdefault(code, row)
    if same is None:
        return np.zeros(0, dtype=np.int64), 0
    replayed: dict[int, int] = {}
    for join in replay_join(index, ("label",), originals=True):
        label = same[join.keep["label"]]
        order = np.lexsort((join.row, label))
        codes, place = np.unique(label[order], return_index=True)
        for code, row in zip(codes.tolist(), join.row[order][place].tolist(), strict=True):
            replayed[code] = min(row, replayed.get(code, row))
    taken = np.unique(np.array([*first.values(), *replayed.values()], dtype=np.int64))
    asked = np.unique(index.load("id_digest", rows=taken)["id_digest"].to_numpy(np.uint64))
    seen: dict[int, int] = {}
    for start, f in index.pieces("replay_digest", "replay"):
        of = f["replay_digest"].to_numpy(dtype=np.uint64)
        at = np.flatnonzero(f["replay"].to_numpy(dtype=bool) & np.isin(of, asked))
        named, place = np.unique(of[at], return_index=True)
        for digest_, row in zip(named.tolist(), (start + at[place]).tolist(), strict=True):
            seen.setdefault(digest_, row)
    rows = np.array([*taken.tolist(), *seen.values()], dtype=np.int64)
    return np.unique(rows), len(first)


def _pairing_frame(index: Index, rows: np.ndarray) -> pd.DataFrame:
    """These rows as pairing reads them, ids and `replay_of` as digests."""
    part = index.load(*ROOT_INPUTS, rows=rows)
    ex = plain(index.load(*PAIRING_INPUTS, rows=rows), PAIRING_INPUTS)
    replay = part["replay"].to_numpy(dtype=bool)
    of = part["replay_digest"].to_numpy(dtype=np.uint64)
    ex.insert(0, "id", part["id_digest"].to_numpy(dtype=np.uint64))
    ex["replay_of"] = pd.arrays.IntegerArray(np.where(replay, of, 0), ~replay)
    return ex


def first_rows(
    pairs: Iterable[tuple[np.ndarray, np.ndarray]], shape: tuple[int, int], limit: int
) -> np.ndarray:
    """The rows, in order, that are among the first `limit` of those with their pair of
    category codes (`pairs`: the codes `a`, `b` of a piece of rows after another, -1:
    missing; `shape`: how many categories each has) — a `groupby(...).cumcount() < limit`
    made a piece at a time, which holds a few arrays of a piece, and a count per pair of
    codes (categories of few values: labels, listeners)."""
    width = shape[1] + 1
    seen = np.zeros((shape[0] + 1) * width, dtype=np.int64)
    out = []
    start = 0
    for a, b in pairs:
        key = (a.astype(np.int64) + 1) * width + b.astype(np.int64) + 1
        if not (seen[key] >= limit).all():
            order = np.argsort(key, kind="stable")
            ordered = key[order]
            begins = np.r_[0, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1]
            lengths = np.diff(np.r_[begins, len(ordered)])
            rank = np.arange(len(ordered)) - np.repeat(begins, lengths)
            out.append(np.sort(order[rank + seen[ordered] < limit]) + start)
            seen += np.bincount(key, minlength=len(seen))
        start += len(a)
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def noise_samples(index: Index, links: np.ndarray = NO_LINKS) -> list[tuple[int, list[int]]]:
    """The repeated requests whose noise is learned before comparing: `(request digest,
    rows of its first 1 + NOISE_SAMPLES originals)` for each request that at least two
    compared originals repeat — in the order a whole analysis meets them (by the first
    replay of each original that was sent, then the baseline's originals paired by
    content, `links`, in their order). By buckets of the originals' ids (the replay
    join), then of their requests."""
    found: list[tuple[int, int, list[int]]] = []
    limit = 1 + NOISE_SAMPLES
    with Buckets(len(index)) as by_request:
        for join in replay_join(index, ("request_digest",), sent=True, also=links[:, 1]):
            requests = join.keep["request_digest"].astype(np.uint64)
            kept, count = _first_by_key(requests, join.first, limit)  # a bucket's first few
            by_request.add(requests[kept], at=join.first[kept], row=join.row[kept], n=count)
        for bucket in by_request:
            kept, _ = _first_by_key(bucket["key"], bucket["at"], limit)
            key, at, row = bucket["key"][kept], bucket["at"][kept], bucket["row"][kept]
            seen = pd.Series(bucket["n"]).groupby(bucket["key"]).sum()
            begins = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
            ends = np.r_[begins[1:], len(key)]
            for b, e in zip(begins.tolist(), ends.tolist(), strict=True):
                if seen[key[b]] >= 2:
                    found.append((int(at[b]), int(key[b]), row[b:e].tolist()))
    found.sort()  # by each request's first original
    return [(request, rows) for _, request, rows in found]


def _first_by_key(key: np.ndarray, at: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The places of the first `limit` entries of each key by `at`, by key then `at`, and
    beside each how many entries its key has (on its key's first place, 0 on the others):
    what a bucket passes on of a key however many entries it has."""
    order = np.lexsort((at, key))
    if not len(order):
        return order, np.zeros(0, dtype=np.int64)
    ordered = key[order]
    begins = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    sizes = np.diff(np.r_[begins, len(ordered)])
    rank = np.arange(len(ordered)) - np.repeat(begins, sizes)
    count = np.zeros(len(ordered), dtype=np.int64)
    count[begins] = sizes
    kept = rank < limit
    return order[kept], count[kept]


def paired_scopes(index: Index, links: np.ndarray = NO_LINKS) -> set[int]:
    """The scopes (`check`'s arguments) with an exchange that pairs: a replay of a record
    in the captures, or an original paired by content (`links`)."""
    paired: set[int] = set()
    for join in replay_join(index):
        paired.update(np.unique(index.scope[join.replays]).tolist())
    for start, f in index.pieces("id_digest"):
        hit = np.isin(f["id_digest"].to_numpy(dtype=np.uint64), links[:, 0])
        paired.update(np.unique(index.scope[start + np.flatnonzero(hit)]).tolist())
    return paired
