"""From the scanned chunks to the work: the index of every record in load order (failed replay
attempts tried again left out, as loading leaves them out), the comparison partitions, the
repeated requests whose noise is learned first, and the failing chains.

Partitions keep each original with all its replays (a replay of a replay too): a record's
partition is a range of the 64-bit digest of its root id (the original it was replayed from,
or itself), so partitions are even whatever the traffic, and a dataset written sorted by that
digest (`wirediff export`) is read a few row groups per partition.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from wirediff import FORMAT
from wirediff.analysis.comparison.noise import NOISE_SAMPLES
from wirediff.analysis.comparison.pairing import (
    UNMATCHED_COLUMNS,
    Baseline,
    ContentLinks,
    choose_baseline,
    content_links,
)
from wirediff.engine.scan import CATEGORIES, DIGESTS, Scanned, plain
from wirediff.engine.sources import Source, open_binary
from wirediff.errors import CaptureError
from wirediff.record.keys import digest
from wirediff.record.store import RETRIED_KINDS

__all__ = [
    "Index",
    "build_index",
    "content_pairing",
    "line_number",
    "noise_samples",
    "partition_of",
    "partitions",
    "root_digests",
]

log = logging.getLogger("wirediff.record.store")
SKIPPED = "skipped"


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
    for s in scans:
        by_src.setdefault(s.src, []).append(s)
    for src, parts in sorted(by_src.items()):
        url = sources[src].url
        error = next((s.error for s in parts if s.error is not None), None)
        torn = [t for s in parts for t in s.torn]
        if error is not None:
            torn = [t for t in torn if t[0] < error[0]]
        if any(s.records for s in parts):
            for offset, why in torn:
                log.warning(f"{url}:{line_number(url, offset)}: {why}")
        if error is not None:
            raise CaptureError(f"{url}:{line_number(url, error[0])}: {error[1]}")
        if sum(s.lines for s in parts) and not sum(s.records for s in parts):
            raise CaptureError(f"{url}: not a {FORMAT} capture (no line is a JSON record)")


def _kept(frame: pd.DataFrame) -> np.ndarray:
    """`wirediff.record.store.drop_retried`: replay attempts that got no answer and were
    tried again later are left out (the newest attempt at an original and label stays);
    originals all stay. Vectorised: no Python object a row."""
    of = frame["replay_of"]
    replay = (of.astype("str").str.len().fillna(0) > 0).to_numpy(dtype=bool)
    if not replay.any():
        return np.ones(len(frame), dtype=bool)
    rows = np.flatnonzero(replay)
    started = pd.to_numeric(frame["started"], errors="coerce").fillna(0.0).to_numpy()[rows]
    of_code = pd.factorize(of.take(rows), use_na_sentinel=False)[0]
    label_code = pd.factorize(frame["label"].take(rows), use_na_sentinel=False)[0]
    key = of_code.astype(np.int64) * (int(label_code.max()) + 1) + label_code
    order = np.lexsort((rows, started, key))  # each (original, label): its attempts by time
    last = np.r_[key[order][1:] != key[order][:-1], True]
    newest = rows[order[last]]
    latest = np.zeros(len(frame), dtype=bool)
    latest[newest] = True
    retried = frame["error_kind"].isin(RETRIED_KINDS).to_numpy()
    return ~replay | latest | ~retried


@dataclass
class Index:
    """Every record to analyse, in load order (a row's position is its place among all)."""

    sources: list[Source]
    frame: pd.DataFrame
    scope: np.ndarray
    """The argument each record came from."""

    def __len__(self) -> int:
        return len(self.frame)


def build_index(
    sources: list[Source],
    scopes: Sequence[int],
    scans: Sequence[Scanned],
    *,
    retried: bool = False,
) -> Index:
    """The index of the scanned chunks (in source order, and each source's own order),
    failed replay attempts tried again left out within each scope (an argument of `check`;
    all of them else) unless `retried`."""
    _say(sources, scans)
    frames = [s.frame for s in sorted(scans, key=lambda s: (s.src, s.start)) if len(s.frame)]
    if not frames:
        return Index(sources, _empty(), np.zeros(0, dtype=np.int64))
    for f in frames:  # each chunk's digests exact before concatenating (int64 with uint64
        for name in DIGESTS:  # would make float64, and lose their low bits)
            f[name] = f[name].astype(np.uint64)
    if len(frames) > 1:
        _same_categories(frames)
        frame = pd.concat(frames, ignore_index=True)
    else:
        frame = frames[0]
    del frames
    src, ordinal = np.diff(frame["src"].to_numpy()), np.diff(frame["ordinal"].to_numpy())
    if not ((src > 0) | ((src == 0) & (ordinal >= 0))).all():  # a dataset's rows: by root
        frame = frame.sort_values(["src", "ordinal"], kind="stable").reset_index(drop=True)
    frame["status"] = frame["status"].astype("Int64")
    for name in DIGESTS:
        frame[name] = frame[name].astype(np.uint64)
    scope = np.asarray(scopes, dtype=np.int64)[frame["src"].to_numpy()]
    keep = np.ones(len(frame), dtype=bool)
    for s in [] if retried else np.unique(scope).tolist():
        mine = np.flatnonzero(scope == s)
        keep[mine] = _kept(frame[["replay_of", "started", "label", "error_kind"]].iloc[mine])
    if not keep.all():
        frame, scope = frame[keep].reset_index(drop=True), scope[keep]
    return Index(sources, frame, scope)


def _same_categories(frames: Sequence[pd.DataFrame]) -> None:
    """The chunks' categories made one (concatenating others would give plain objects)."""
    for name in CATEGORIES:
        values = list(dict.fromkeys(v for f in frames for v in f[name].cat.categories.tolist()))
        strings = all(isinstance(v, str) for v in values)
        categories = pd.Index(values, dtype="str" if strings else object)
        for f in frames:
            f[name] = f[name].cat.set_categories(categories)


def _empty() -> pd.DataFrame:
    from wirediff.engine.scan import INDEX_COLUMNS

    return pd.DataFrame(columns=["src", "a", "b", "nbytes", "ordinal", *INDEX_COLUMNS, "deep"])


def root_digests(frame: pd.DataFrame, links: Sequence[tuple[str, str]] = ()) -> np.ndarray:
    """Per record, the digest of the original it goes back to through `replay_of` (itself
    for an original; a replay of a replay goes back further; a missing original's id); for
    an original paired by content (`links`: candidate id, baseline id) and its replays, the
    baseline's original, so that both sides of a pair land in one partition."""
    root = _replay_roots(frame)
    if not links:
        return root
    cand = np.fromiter((digest(c) for c, _ in links), dtype=np.uint64, count=len(links))
    base = np.fromiter((digest(b) for _, b in links), dtype=np.uint64, count=len(links))
    order = np.argsort(cand, kind="stable")
    cand, base = cand[order], base[order]
    at = np.clip(np.searchsorted(cand, root), 0, len(cand) - 1)
    return np.where(cand[at] == root, base[at], root)


def _replay_roots(frame: pd.DataFrame) -> np.ndarray:
    own = frame["id_digest"].to_numpy(dtype=np.uint64)
    parent = frame["replay_digest"].to_numpy(dtype=np.uint64)
    replay = frame["replay_of"].notna().to_numpy() & (parent != 0)
    root = np.where(replay, parent, own)
    ids, parents = own[replay], parent[replay]
    if not len(ids):
        return root
    order = np.argsort(ids, kind="stable")
    ids, parents = ids[order], parents[order]
    for _ in range(64):  # a chain of replays of replays, followed to its original
        at = np.clip(np.searchsorted(ids, root), 0, len(ids) - 1)
        hit = (ids[at] == root) & (parents[at] != root)
        if not hit.any():
            break
        root = np.where(hit, parents[at], root)
    return root


def partitions(
    frame: pd.DataFrame, count: int, links: Sequence[tuple[str, str]] = ()
) -> np.ndarray:
    """Each record's comparison partition, of `count`: a range of its root's digest."""
    return partition_of(root_digests(frame, links), count)


def partition_of(root: np.ndarray, count: int) -> np.ndarray:
    """The partition, of `count`, of each root digest."""
    return ((root >> np.uint64(32)) * np.uint64(count) >> np.uint64(32)).astype(np.int64)


PAIRING_INPUTS = [
    "id",
    "label",
    "session",
    "seq",
    "started",
    "retry",
    "replay_of",
    "method",
    "endpoint",
    "fingerprint",
]
"""The index columns `choose_baseline` and `content_links` read."""


def content_pairing(frame: pd.DataFrame, requested: str | None) -> tuple[Baseline, ContentLinks]:
    """The baseline label (`choose_baseline`) and the originals of other labels paired with
    its own by content (`content_links`), once over the whole index: a partition takes the
    links of its candidates and never aligns a part of the captures (it would list calls
    whose counterpart is in another part as unmatched)."""
    ex = plain(frame, PAIRING_INPUTS).drop_duplicates("id")  # what pairing reads, not all
    chosen = choose_baseline(ex, requested)
    if chosen.label is None:
        return chosen, ContentLinks([], pd.DataFrame(columns=UNMATCHED_COLUMNS))
    return chosen, content_links(ex, chosen.label)


def noise_samples(
    frame: pd.DataFrame, links: Sequence[tuple[str, str]] = ()
) -> list[tuple[int, list[int]]]:
    """The repeated requests whose noise is learned before comparing: `(request digest,
    rows of its first 1 + NOISE_SAMPLES originals)` for each request that at least two
    compared originals repeat — in the order a whole analysis meets them (by the first
    replay of each original that was sent, then the baseline's originals paired by
    content, `links`, in their order)."""
    if not len(frame):
        return []
    ids = frame["id_digest"].to_numpy(dtype=np.uint64)
    of = frame["replay_digest"].to_numpy(dtype=np.uint64)
    sent = frame["replay_of"].notna().to_numpy() & (frame["error_kind"] != SKIPPED).to_numpy()
    order = np.argsort(ids, kind="stable")
    by_id = ids[order]
    last = np.r_[np.flatnonzero(by_id[1:] != by_id[:-1]), len(ids) - 1]
    unique_ids, row_of = by_id[last], order[last]  # an id's last row, as loading keeps it
    known = sent & (of != 0) & np.isin(of, unique_ids)
    linked = np.fromiter((digest(b) for _, b in links), dtype=np.uint64, count=len(links))
    linked = linked[np.isin(linked, unique_ids)]
    if not known.any() and not len(linked):
        return []
    at = np.r_[np.flatnonzero(known), len(frame) + np.arange(len(linked))]
    compared = np.r_[of[known], linked]
    originals, first = np.unique(compared, return_index=True)  # each one's first pair
    rows = row_of[np.searchsorted(unique_ids, originals)]
    requests = frame["request_digest"].to_numpy(dtype=np.uint64)[rows]
    by_first = np.argsort(at[first], kind="stable")
    groups: dict[int, list[int]] = {}
    for request, row in zip(requests[by_first].tolist(), rows[by_first].tolist(), strict=True):
        groups.setdefault(request, []).append(row)
    return [
        (request, members[: 1 + NOISE_SAMPLES])
        for request, members in groups.items()
        if len(members) >= 2
    ]
