"""Decide which rows of the index an analysis keeps, and where each goes back to.

An id is one exchange: a row whose id an earlier row has, such as the same capture given
twice or a capture with its export, is left out with a warning. A replay attempt that got no
answer (`RETRIED_KINDS`) and was tried again later for the same original and label is left
out: a resumed `wirediff replay` appends the new attempt, and only the newest says how the
target answers. Answered replays all stay, since two answers to one original tell noise from
a divergence."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from wirediff.analysis.comparison.pairing import index_in
from wirediff.record.keys import digest
from wirediff.record.store import RETRIED_KINDS, newest_attempts

__all__ = ["first_of_each_id", "kept_rows", "not_retried", "replay_roots"]

log = logging.getLogger(__name__)


def first_of_each_id(index: pd.DataFrame) -> np.ndarray:
    """Tell whether each row is the first of its id; the others are named in one warning."""
    first = ~index["id"].duplicated().to_numpy()
    if not first.all():
        n = int((~first).sum())
        log.warning(
            f"{n:,} record{'s repeat' if n > 1 else ' repeats'} an id read before: "
            "the first record of each id is analysed"
        )
    return first


def not_retried(index: pd.DataFrame, scope: np.ndarray | None = None) -> np.ndarray:
    """Tell whether each row is no replay attempt superseded by a later one.

    A later attempt is one at the same original and label with a greater `started`, a missing one
    counting as 0, or the later row on a tie, within each `scope`: `check`'s arguments, or by
    default all rows as one."""
    of = index["replay_of"]
    replay = (of.notna() & (of != "")).to_numpy()
    retried = replay & index["error_kind"].isin(RETRIED_KINDS).to_numpy(dtype=bool)
    keep = np.ones(len(index), dtype=bool)
    if not retried.any():
        return keep
    rows = np.flatnonzero(replay)
    scopes = np.zeros(len(rows), dtype=np.int64) if scope is None else scope[rows]
    labels = index["label"].to_numpy(dtype=object)[rows]
    labels[pd.isna(labels)] = None
    keys = list(zip(scopes.tolist(), of.to_numpy()[rows].tolist(), labels.tolist(), strict=True))
    started = index["started"].to_numpy()[rows]
    newest = np.zeros(len(index), dtype=bool)
    newest[rows] = newest_attempts(keys, np.where(np.isnan(started), 0.0, started).tolist())
    keep[retried & ~newest] = False
    return keep


def kept_rows(
    index: pd.DataFrame, scope: np.ndarray | None = None, *, retried: bool = False
) -> np.ndarray:
    """Give the rows an analysis keeps, in order.

    The first of each id, less superseded replay attempts within each `scope` (`not_retried`),
    unless `retried`."""
    at = np.flatnonzero(first_of_each_id(index))
    if not retried:
        at = at[not_retried(index.iloc[at], None if scope is None else scope[at])]
    return at


def replay_roots(index: pd.DataFrame) -> np.ndarray:
    """Find the digest of the original each row goes back to through `replay_of`.

    An original goes back to itself; a replay through replays of replays, however deep; a replay
    of a missing original to that original's id. A cycle of replays has no original: its rows go
    back to the least digest in it."""
    ids = index["id"].to_numpy()
    parent = index_in(index["replay_of"], index["id"])
    own = np.fromiter((digest(str(i)) for i in ids), dtype=np.uint64, count=len(ids))
    missing = index["replay_of"].notna().to_numpy() & (parent < 0)
    root = own.copy()
    root[missing] = np.fromiter(
        (digest(str(i)) for i in index["replay_of"].to_numpy()[missing]),
        dtype=np.uint64,
        count=int(missing.sum()),
    )
    up = np.where(parent >= 0, parent, np.arange(len(ids)))
    for _ in range(64):  # pointers doubled: 2**64 steps reach any original
        higher = up[up]
        if (higher == up).all():
            break
        up = higher
    cycled = parent[up] >= 0  # still on a replay: on a cycle
    root = np.where(missing[up], root[up], own[up])
    least: dict[int, np.uint64] = {}
    for k in np.flatnonzero(cycled).tolist():
        on = int(up[k])
        if on not in least:
            cycle, x = [on], int(parent[on])
            while x != on:
                cycle.append(x)
                x = int(parent[x])
            least.update(dict.fromkeys(cycle, min(own[c] for c in cycle)))
        root[k] = least[on]
    return root
