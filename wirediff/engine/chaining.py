"""The failing chains over the whole index, without its records or its ids: links found in
the command (a chain may join sessions: a gateway's hop between two proxies), each chain as
the positions of its exchanges, handed to the diagnosis tasks in batches of whole chains,
which name them (`chain_rows` tuples) from the records they read anyway."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from wirediff._types import Record
from wirediff.analysis.diagnosis.chains import assemble, chain_links, chain_roots, prepared
from wirediff.record.keys import digest

__all__ = ["CHAIN_INPUTS", "ChainBatch", "Failing", "failing_chains"]

CHAIN_INPUTS = [
    "session",
    "label",
    "listener",
    "started",
    "duration_ms",
    "retry",
    "method",
    "path",
    "url",
    "status",
    "error_kind",
    "family",
    "soft_error",
    "model",
    "prefix",
    "sdk_lang",
    "sdk_version",
    "auth_fingerprint",
]
"""The index columns links are found from (`chain_links`), besides `replay`."""
NAMED_INPUTS = ["started", "duration_ms", "retry", "label", "session", "method", "path"]
NAMED_INPUTS += ["status", "error_kind"]
"""The index columns a batch's chains are written from (`assemble`), besides ids."""


@dataclass
class Failing:
    """The failing chains, in the order `chain_rows` lists them, in batches."""

    count: int
    """Chains."""
    batches: list[tuple[int, np.ndarray, list[tuple[str, int, int]]]]
    """`(first, rows, links)`: the place of a batch's first chain among all, the index
    rows of its chains' exchanges in start order, and the links between them (by place
    in `rows`)."""


def failing_chains(frame: pd.DataFrame, batch_records: int) -> Failing:
    """The chains with an exchange that did not succeed, in batches of whole chains of
    `batch_records` exchanges or more (the last one fewer)."""
    n = len(frame)
    if not n:
        return Failing(0, [])
    f = prepared(pd.DataFrame({c: frame[c] for c in CHAIN_INPUTS}, copy=False), frame["replay"])
    codes = frame["location"].cat.codes.to_numpy()
    targets = frame["location"].cat.categories.tolist()
    at = np.flatnonzero(codes >= 0)
    locations = {i: targets[c] for i, c in zip(at.tolist(), codes[at].tolist(), strict=True)}
    bodies = frame["body_digest"].to_numpy(dtype=np.uint64)
    hops = frame["hop_digest"].to_numpy(dtype=np.uint64)
    links = chain_links(f, hops, locations, lambda i: int(bodies[i]))
    started = f["started"].to_numpy()
    del f, locations
    keep = np.lexsort((np.arange(n), started))
    del started
    roots = chain_roots(n, links)
    failing = np.zeros(n, dtype=bool)
    failing[roots[~frame["ok"].to_numpy(dtype=bool)]] = True
    keep = keep[failing[roots[keep]]]  # the failing chains' exchanges, in start order
    if not len(keep):
        return Failing(0, [])
    heads, first, chain = np.unique(roots[keep], return_index=True, return_inverse=True)
    rank = np.empty(len(heads), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(heads))
    chain = rank[chain]  # each listed exchange's chain, numbered as chains are listed
    ends = np.array([a for _, a, _ in links], dtype=np.int64)
    of = np.searchsorted(heads, roots[ends])
    listed = failing[roots[ends]]
    linked = sorted(  # the links of listed chains, by chain, each chain's in the order found
        (int(rank[c]), k)
        for k, c in zip(np.flatnonzero(listed).tolist(), of[listed].tolist(), strict=True)
    )
    del roots, failing
    sizes = np.bincount(chain, minlength=len(heads)).tolist()
    grouped = np.argsort(chain, kind="stable")  # places in `keep`, chain by chain
    out = Failing(len(heads), [])
    c0 = taken = held = e = 0
    for c, size in enumerate(sizes):
        held += size
        if held < batch_records and c < len(sizes) - 1:
            continue
        rows = keep[np.sort(grouped[taken : taken + held])]
        place = {r: k for k, r in enumerate(rows.tolist())}
        mine = []
        while e < len(linked) and linked[e][0] <= c:
            kind, a, b = links[linked[e][1]]
            mine.append((kind, place[a], place[b]))
            e += 1
        out.batches.append((c0, rows, mine))
        c0, taken, held = c + 1, taken + held, 0
    return out


@dataclass
class ChainBatch:
    """A batch of failing chains as a diagnosis task gets them: what their rows in the
    index say (`NAMED_INPUTS`, in start order), and the links between them."""

    frame: pd.DataFrame
    replay: np.ndarray
    ids: np.ndarray
    """Each exchange's id digest."""
    ok: np.ndarray
    links: list[tuple[str, int, int]]

    def rows(self, records: Sequence[Record]) -> list[tuple[Any, ...]]:
        """The chains as `chain_rows` gives them, named from their `records`."""
        named = {digest(r["id"]): r["id"] for r in records}
        f = self.frame.assign(id=[named[d] for d in self.ids.tolist()])
        return assemble(prepared(f, self.replay), self.links, self.ok.tolist())


def chain_batch(
    frame: pd.DataFrame, rows: np.ndarray, links: list[tuple[str, int, int]]
) -> ChainBatch:
    """A batch of `Failing.batches` from the index."""
    part = frame.iloc[rows]
    return ChainBatch(
        part[NAMED_INPUTS].reset_index(drop=True),
        part["replay"].to_numpy(dtype=bool),
        part["id_digest"].to_numpy(dtype=np.uint64),
        part["ok"].to_numpy(dtype=bool),
        links,
    )
