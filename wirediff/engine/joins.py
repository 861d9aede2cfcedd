"""Steps over every row that join a replay with the original it names, a bucket of id
digests at a time (`Buckets`): the replays whose original is in the captures, the replays
of replays, the originals a replay was compared with and their first replay. Each step
reads its columns a piece at a time and holds one bucket of the join and what it keeps:
never an array of every row."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from wirediff.engine.columns import Buckets, looked_up
from wirediff.engine.index import Index

__all__ = ["SKIPPED", "ReplayJoin", "deep_replays", "replay_join"]

SKIPPED = "skipped"
"""The error kind of a replay that was not sent."""
_ORIGINAL, _REPLAY = 0, 1


@dataclass
class ReplayJoin:
    """One bucket of the join: each original (`row`, `keep`: its columns asked for) named
    by at least one replay, and the first (smallest `at`) replay naming it; `replays`: the
    rows of the replays whose original is in the captures (and the places, from the
    index's length on, of the `also` digests that are)."""

    row: np.ndarray
    first: np.ndarray
    keep: dict[str, np.ndarray]
    replays: np.ndarray


def replay_join(
    index: Index,
    keep: tuple[str, ...] = (),
    *,
    sent: bool = False,
    originals: bool = False,
    also: np.ndarray | None = None,
) -> Iterator[ReplayJoin]:
    """The join of every row's id with every replay's `replay_of`, a bucket at a time: with
    `sent`, only replays that were sent; with `originals`, only originals are joined (a
    replay's own id is not); `also`: original id digests named after every replay (a
    content link's baseline, its `at` the index's length and on)."""
    n = len(index)
    names = ["id_digest", "replay_digest", "replay", *keep]
    if sent:
        names.append("error_kind")
    kinds: dict[str, np.dtype] = {}
    with Buckets(2 * n) as buckets:
        for start, f in index.pieces(*dict.fromkeys(names)):
            rows = np.arange(start, start + len(f), dtype=np.int64)
            ids = f["id_digest"].to_numpy(dtype=np.uint64)
            of = f["replay_digest"].to_numpy(dtype=np.uint64)
            replay = f["replay"].to_numpy(dtype=bool)
            side = ~replay if originals else np.ones(len(f), dtype=bool)
            values = {k: _values(f[k])[side] for k in keep}
            kinds.update((k, v.dtype) for k, v in values.items())
            buckets.add(ids[side], role=_roles(_ORIGINAL, side.sum()), row=rows[side], **values)
            named = replay & (of != 0)
            if sent:
                named &= (f["error_kind"] != SKIPPED).to_numpy(dtype=bool)
            none = {k: np.zeros(named.sum(), dtype=v.dtype) for k, v in values.items()}
            buckets.add(of[named], role=_roles(_REPLAY, named.sum()), row=rows[named], **none)
        if also is not None and len(also):
            at = n + np.arange(len(also), dtype=np.int64)
            none = {k: np.zeros(len(also), dtype=kinds.get(k, np.int64)) for k in keep}
            buckets.add(also, role=_roles(_REPLAY, len(also)), row=at, **none)
        for bucket in buckets:
            yield _joined(bucket, keep)


def _roles(role: int, count: int) -> np.ndarray:
    return np.full(count, role, dtype=np.int8)


def _values(column: pd.Series) -> np.ndarray:
    """A column's values as the join carries them: a category's by code."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy()
    return column.to_numpy()


def _joined(bucket: dict[str, np.ndarray], keep: tuple[str, ...]) -> ReplayJoin:
    role, key, row = bucket["role"], bucket["key"], bucket["row"]
    mine = role == _ORIGINAL
    orig_key, orig_row = key[mine], row[mine]
    ref_key, ref_row = key[~mine], row[~mine]
    order = np.lexsort((ref_row, ref_key))  # each key's replays by row: its first first
    ref_key, ref_row = ref_key[order], ref_row[order]
    begins = np.r_[True, ref_key[1:] != ref_key[:-1]] if len(ref_key) else ref_key.astype(bool)
    first_key, first_row = ref_key[begins], ref_row[begins]
    if len(first_key):
        at, hit = looked_up(first_key, orig_key)
    else:
        at, hit = np.zeros(len(orig_key), dtype=np.int64), np.zeros(len(orig_key), dtype=bool)
    found = np.isin(ref_key, orig_key)
    return ReplayJoin(
        orig_row[hit],
        first_row[at[hit]],
        {k: bucket[k][mine][hit] for k in keep},
        ref_row[found],
    )


def deep_replays(index: Index) -> tuple[np.ndarray, np.ndarray]:
    """The id and `replay_of` digests of every replay in a chain of replays (one that a
    replay names, or that names a replay): what a replay's root is looked up in beyond its
    own `replay_of`. Most captures have none."""
    ids_out, parents_out = [np.zeros(0, dtype=np.uint64)], [np.zeros(0, dtype=np.uint64)]
    with Buckets(2 * len(index)) as buckets:
        for _, f in index.pieces("id_digest", "replay_digest", "replay"):
            of = f["replay_digest"].to_numpy(dtype=np.uint64)
            replay = f["replay"].to_numpy(dtype=bool) & (of != 0)
            ids = f["id_digest"].to_numpy(dtype=np.uint64)[replay]
            of = of[replay]
            buckets.add(ids, role=_roles(_ORIGINAL, len(ids)), own=ids, parent=of)
            buckets.add(of, role=_roles(_REPLAY, len(of)), own=ids, parent=of)
        for bucket in buckets:
            mine = bucket["role"] == _ORIGINAL
            both = np.intersect1d(bucket["key"][mine], bucket["key"][~mine])
            if not len(both):
                continue
            chained = np.isin(bucket["key"], both)  # a replay named, or naming one
            ids_out.append(bucket["own"][chained])
            parents_out.append(bucket["parent"][chained])
    return np.concatenate(ids_out), np.concatenate(parents_out)
