"""From the index to the work: the comparison partitions (and what each partition's task
reads), content pairing, the repeated requests whose noise is learned first.

Partitions keep each original with all its replays (a replay of a replay too): a record's
partition is a range of the 64-bit digest of its root id (the original it was replayed from,
or itself), so partitions are even whatever the traffic, and a dataset written sorted by that
digest (`wirediff export`) is read a few row groups per partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from wirediff.analysis.comparison.noise import NOISE_SAMPLES
from wirediff.analysis.comparison.pairing import (
    UNMATCHED_COLUMNS,
    Baseline,
    choose_baseline,
    content_links,
)
from wirediff.engine.columns import Columns
from wirediff.engine.index import Index
from wirediff.engine.scan import plain

__all__ = [
    "COMPARING_ONLY",
    "NO_LINKS",
    "PAIRING_ONLY",
    "ROOT_INPUTS",
    "ByContent",
    "content_pairing",
    "first_rows",
    "id_rows",
    "noise_samples",
    "partition_of",
    "partitions",
    "pieces_of",
    "root_digests",
    "split",
]

SKIPPED = "skipped"
NO_LINKS = np.zeros((0, 2), dtype=np.uint64)
PIECE = 1 << 16
"""Rows a step that works row by row takes at once: it holds a few arrays of a piece, not
of the whole index."""


def pieces_of(index: Index, groups: Sequence[np.ndarray], names: Sequence[str]) -> Columns:
    """These columns at each group of rows (`row`: their places in the index), a piece a
    group: what each task reads, made a column at a time and kept on disk while the tasks
    run (a piece's categories only those it holds)."""
    every = np.concatenate(groups) if len(groups) else np.zeros(0, dtype=np.int64)
    bounds = np.cumsum([0, *map(len, groups)]).tolist()
    out = Columns()
    for name in names:
        values = pd.Series(every) if name == "row" else index.column(name).take(every)
        values = values.reset_index(drop=True)
        kept = isinstance(values.dtype, pd.CategoricalDtype)
        for k in range(len(groups)):
            piece = values.iloc[bounds[k] : bounds[k + 1]].reset_index(drop=True)
            out.add(name, piece.cat.remove_unused_categories() if kept else piece)
        del values
    return out


def split(index: Index, part_of: np.ndarray, names: Sequence[str]) -> tuple[Columns, list[int]]:
    """`pieces_of` each partition that has rows (listed), its rows in index order."""
    order = np.argsort(part_of, kind="stable")
    sizes = np.bincount(part_of, minlength=1)
    parts = np.flatnonzero(sizes)
    bounds = np.r_[0, np.cumsum(sizes[parts])]
    groups = [order[bounds[k] : bounds[k + 1]] for k in range(len(parts))]
    return pieces_of(index, groups, ["row", *names]), parts.tolist()


def root_digests(frame: pd.DataFrame, links: np.ndarray = NO_LINKS) -> np.ndarray:
    """Per record, the digest of the original it goes back to through `replay_of` (itself
    for an original; a replay of a replay goes back further; a missing original's id); for
    an original paired by content (`links`: candidate and baseline id digests, a row each)
    and its replays, the baseline's original, so that both sides of a pair land in one
    partition."""
    root = _replay_roots(frame)
    if not len(links):
        return root
    cand, base = links[:, 0], links[:, 1]
    order = np.argsort(cand, kind="stable")
    cand, base = cand[order], base[order]
    at, hit = looked_up(cand, root)
    return np.where(hit, base[at], root)


def looked_up(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each of `values` looked up in `keys` (sorted, not empty): its place there, and
    whether it is there — a dict lookup over digests, in arrays."""
    at = np.searchsorted(keys, values)
    np.minimum(at, len(keys) - 1, out=at)
    return at, keys[at] == values


def _replay_roots(frame: pd.DataFrame) -> np.ndarray:
    own = frame["id_digest"].to_numpy(dtype=np.uint64)
    parent = frame["replay_digest"].to_numpy(dtype=np.uint64)
    replay = frame["replay"].to_numpy(dtype=bool) & (parent != 0)
    root = np.where(replay, parent, own)
    ids, up = _replay_ancestors(own[replay], parent[replay])
    if not len(ids):
        return root
    for start in range(0, len(root), PIECE):  # a row's root depends on it alone: by pieces
        piece = root[start : start + PIECE]
        at, hit = looked_up(ids, piece)
        piece[hit] = up[at[hit]]
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


def partitions(frame: pd.DataFrame, count: int, links: np.ndarray = NO_LINKS) -> np.ndarray:
    """Each record's comparison partition, of `count`: a range of its root's digest."""
    return partition_of(root_digests(frame, links), count)


def partition_of(root: np.ndarray, count: int) -> np.ndarray:
    """The partition, of `count`, of each root digest."""
    part = root >> np.uint64(32)
    part *= np.uint64(count)
    part >>= np.uint64(32)
    return part.view(np.int64)  # below `count`: the same bits


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
"""The index columns `root_digests` reads."""
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
    frame = index.load(*ROOT_INPUTS, "label")
    original = ~frame["replay"].to_numpy(dtype=bool)
    label = _label_codes(frame["label"])
    deciding = _deciding(frame, original, label)
    chosen = choose_baseline(_pairing_frame(index, frame, deciding), requested)
    none = ByContent(NO_LINKS, pd.DataFrame(columns=UNMATCHED_COLUMNS))
    if chosen.label is None or len(np.unique(label[original])) < 2:
        return chosen, none  # one label of originals: nothing to pair by content
    found = content_links(_pairing_frame(index, frame, np.flatnonzero(original)), chosen.label)
    links = np.array([[int(c), int(b)] for c, b in found.links], dtype=np.uint64)
    unmatched = found.unmatched.assign(id=[int(i) for i in found.unmatched["id"].tolist()])
    return chosen, ByContent(links.reshape(-1, 2), unmatched)


def _label_codes(labels: pd.Series) -> np.ndarray:
    """Each row's label as pairing compares them (missing as empty, as text), by code."""
    values = ["" if pd.isna(v) else str(v) for v in labels.cat.categories.tolist()]
    same = pd.factorize(pd.Index([*values, ""], dtype=object))[0]
    return same.astype(np.int32)[labels.cat.codes.to_numpy()]  # -1: the last


def _deciding(frame: pd.DataFrame, original: np.ndarray, label: np.ndarray) -> np.ndarray:
    """The rows `choose_baseline` decides from alike, in order: of the originals, each
    label's first and its first one replayed, with a replay of each replayed one taken."""
    ids = frame["id_digest"].to_numpy(dtype=np.uint64)
    of = frame["replay_digest"].to_numpy(dtype=np.uint64)
    replays = np.flatnonzero(frame["replay"].to_numpy(dtype=bool))
    asked = np.unique(of[replays])
    replayed = original & looked_up(asked, ids)[1] if len(asked) else np.zeros_like(original)
    rows = [
        _first_per(np.flatnonzero(original), label),
        _first_per(np.flatnonzero(replayed), label),
    ]
    taken = np.unique(np.concatenate(rows))
    asked = ids[taken[replayed[taken]]]
    mine = replays[np.isin(of[replays], asked)]
    rows.append(mine[np.unique(of[mine], return_index=True)[1]])
    return np.unique(np.concatenate(rows))


def _first_per(rows: np.ndarray, label: np.ndarray) -> np.ndarray:
    return rows[np.unique(label[rows], return_index=True)[1]]


def _pairing_frame(index: Index, frame: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """These rows as pairing reads them, ids and `replay_of` (from `frame`) as digests."""
    part = frame.iloc[rows]
    ex = plain(index.load(*PAIRING_INPUTS, rows=rows), PAIRING_INPUTS)
    replay = part["replay"].to_numpy(dtype=bool)
    of = part["replay_digest"].to_numpy(dtype=np.uint64)
    ex.insert(0, "id", part["id_digest"].to_numpy(dtype=np.uint64))
    ex["replay_of"] = pd.arrays.IntegerArray(np.where(replay, of, 0), ~replay)
    return ex


def first_rows(a: np.ndarray, b: np.ndarray, limit: int) -> np.ndarray:
    """The rows, in order, that are among the first `limit` of those with their pair of
    category codes (`a`, `b`; -1: missing) — a `groupby(...).cumcount() < limit` made
    in pieces of `PIECE` rows, which holds a few arrays of a piece, not of the index, and
    a count per pair of codes (categories of few values: labels, listeners)."""
    width = int(b.max(initial=-1)) + 2
    seen = np.zeros((int(a.max(initial=-1)) + 2) * width, dtype=np.int64)
    out = []
    for start in range(0, len(a), PIECE):
        key = (a[start : start + PIECE].astype(np.int64) + 1) * width
        key += b[start : start + PIECE].astype(np.int64) + 1
        if (seen[key] >= limit).all():
            continue
        order = np.argsort(key, kind="stable")
        ordered = key[order]
        begins = np.r_[0, np.flatnonzero(ordered[1:] != ordered[:-1]) + 1]
        lengths = np.diff(np.r_[begins, len(ordered)])
        rank = np.arange(len(ordered)) - np.repeat(begins, lengths)
        taken = np.sort(order[rank + seen[ordered] < limit])
        out.append(taken + start)
        seen += np.bincount(key, minlength=len(seen))
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def id_rows(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each id digest in order and its row (the index holds an id once: `first_of_each`)."""
    order = np.argsort(ids, kind="stable")
    return ids[order], order


def noise_samples(index: Index, links: np.ndarray = NO_LINKS) -> list[tuple[int, list[int]]]:
    """The repeated requests whose noise is learned before comparing: `(request digest,
    rows of its first 1 + NOISE_SAMPLES originals)` for each request that at least two
    compared originals repeat — in the order a whole analysis meets them (by the first
    replay of each original that was sent, then the baseline's originals paired by
    content, `links`, in their order)."""
    if not len(index):
        return []
    frame = index.load(*ROOT_INPUTS, "error_kind")
    unique_ids, row_of = id_rows(frame["id_digest"].to_numpy(dtype=np.uint64))
    of = frame["replay_digest"].to_numpy(dtype=np.uint64)
    sent = frame["replay"].to_numpy(dtype=bool) & (frame["error_kind"] != SKIPPED).to_numpy()
    replays = np.flatnonzero(sent & (of != 0))
    del sent
    replays = replays[looked_up(unique_ids, of[replays])[1]]
    linked = links[:, 1][looked_up(unique_ids, links[:, 1])[1]]
    if not len(replays) and not len(linked):
        return []
    at = np.r_[replays, len(frame) + np.arange(len(linked))]
    compared = np.r_[of[replays], linked]
    del replays, linked
    originals, first = np.unique(compared, return_index=True)  # each one's first pair
    del compared
    rows = row_of[np.searchsorted(unique_ids, originals)]
    del unique_ids, row_of, originals
    rows = rows[np.argsort(at[first], kind="stable")]
    del at, first
    del frame
    requests = index.load("request_digest", rows=rows)["request_digest"].to_numpy(dtype=np.uint64)
    code, request = pd.factorize(requests)  # by each request's first original
    sizes = np.bincount(code)
    grouped = np.argsort(code, kind="stable")
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    return [
        (int(request[c]), rows[grouped[starts[c] : starts[c] + min(n, 1 + NOISE_SAMPLES)]].tolist())
        for c, n in zip(
            np.flatnonzero(sizes >= 2).tolist(), sizes[sizes >= 2].tolist(), strict=True
        )
    ]
