"""The failing chains over the whole index, without its records or its ids: links found in
the command (a chain may join sessions: a gateway's hop between two proxies), each chain as
the positions of its exchanges, handed to the diagnosis tasks in batches of whole chains,
which name them (`chain_rows` tuples) from the records they read anyway."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from wirediff._types import Record
from wirediff.analysis.diagnosis.chains import (
    FALLBACK_KEYS,
    RETRY_KEYS,
    Links,
    assemble,
    chain_links,
    chain_roots,
    fallback_sources,
    normalize_url,
    prepared,
    redirect_targets,
)
from wirediff.engine.columns import Buckets, looked_up
from wirediff.engine.index import Index
from wirediff.engine.scan import CATEGORIES
from wirediff.record.keys import digest

__all__ = [
    "BATCH_INPUTS",
    "CHAIN_INPUTS",
    "ChainBatch",
    "Failing",
    "chain_batch",
    "failing_chains",
    "linkable_rows",
]

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
    "ask_digest",
]
"""The index columns links are found from (`chain_links`), besides `replay`."""
NAMED_INPUTS = ["started", "duration_ms", "retry", "label", "session", "method", "path"]
NAMED_INPUTS += ["status", "error_kind"]
"""The index columns a batch's chains are written from (`assemble`), besides ids."""
LINK_INPUTS = [*CHAIN_INPUTS, "replay", "location", "body_digest", "hop_digest"]
"""The index columns links are found from, at the rows that can have one."""
BATCH_INPUTS = [*NAMED_INPUTS, "replay", "id_digest", "ok", "src", "a", "b", "careful"]
"""The index columns a batch of chains is read with (`chain_batch`, and its records')."""


@dataclass
class Failing:
    """The failing chains, in the order `chain_rows` lists them, in batches."""

    count: int
    """Chains."""
    batches: list[tuple[int, np.ndarray, list[tuple[str, int, int]]]]
    """`(first, rows, links)`: the place of a batch's first chain among all, the index
    rows of its chains' exchanges in start order, and the links between them (by place
    in `rows`)."""


def failing_chains(index: Index, batch_records: int, linkable: np.ndarray | None = None) -> Failing:
    """The chains with an exchange that did not succeed, in batches of whole chains of
    `batch_records` exchanges or more (the last one fewer). Links are looked for among the
    rows that can have one (`linkable`, by default `linkable_rows`)."""
    n = len(index)
    if not n:
        return Failing(0, [])
    links = _links(index, linkable_rows(index) if linkable is None else linkable)
    root_of = _chain_roots(links)
    bad = np.concatenate(
        [start + np.flatnonzero(~f["ok"].to_numpy(dtype=bool)) for start, f in index.pieces("ok")]
    )
    failing = np.unique(root_of(bad))
    joined, heads = root_of.nodes, root_of.heads
    alone = bad[~np.isin(bad, joined)]  # its own chain
    listed = np.union1d(alone, joined[np.isin(heads, failing)])
    del bad, alone
    if not len(listed):
        return Failing(0, [])
    started = index.load("started", rows=listed)["started"].astype("float64").fillna(0.0)
    keep = listed[np.lexsort((listed, started.to_numpy()))]  # by start, ties by row
    del listed, started
    heads, first, chain = np.unique(root_of(keep), return_index=True, return_inverse=True)
    rank = np.empty(len(heads), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(heads))
    chain = rank[chain]  # each listed exchange's chain, numbered as chains are listed
    ends = root_of(np.array([a for _, a, _ in links], dtype=np.int64))
    of = np.searchsorted(heads, ends)
    listed_links = np.isin(ends, failing)
    linked = sorted(  # the links of listed chains, by chain, each chain's in the order found
        (int(rank[c]), k)
        for k, c in zip(
            np.flatnonzero(listed_links).tolist(), of[listed_links].tolist(), strict=True
        )
    )
    del failing, ends
    ends = np.cumsum(np.bincount(chain, minlength=len(heads)))  # each chain's end, in order
    grouped = np.argsort(chain, kind="stable")  # places in `keep`, chain by chain
    del chain
    out = Failing(len(heads), [])
    c0 = taken = e = 0
    while c0 < len(heads):  # a batch: whole chains up to `batch_records` exchanges or more
        c = min(int(np.searchsorted(ends, taken + batch_records)), len(heads) - 1)
        rows = keep[np.sort(grouped[taken : ends[c]])]
        place = {r: k for k, r in enumerate(rows.tolist())}
        mine = []
        while e < len(linked) and linked[e][0] <= c:
            kind, a, b = links[linked[e][1]]
            mine.append((kind, place[a], place[b]))
            e += 1
        out.batches.append((c0, rows, mine))
        c0, taken = c + 1, int(ends[c])
    return out


@dataclass
class _ChainRoots:
    """Each row's chain, as `chain_roots` names it, held for the rows links join only."""

    nodes: np.ndarray
    """The rows links join, sorted."""
    heads: np.ndarray
    """Each one's chain."""

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        out = np.asarray(rows, dtype=np.int64).copy()
        if len(self.nodes):
            at, hit = looked_up(self.nodes, out)
            out[hit] = self.heads[at[hit]]
        return out


def _chain_roots(links: Links) -> _ChainRoots:
    """`chain_roots` of the rows links join (the others are each a chain of their own)."""
    ends = np.array([(a, b) for _, a, b in links], dtype=np.int64).reshape(-1, 2)
    nodes, at = np.unique(ends, return_inverse=True)
    at = at.reshape(ends.shape)
    among = [
        (kind, int(a), int(b)) for (kind, _, _), (a, b) in zip(links, at.tolist(), strict=True)
    ]
    return _ChainRoots(nodes, nodes[chain_roots(len(nodes), among)])


def _links(index: Index, rows: np.ndarray) -> Links:
    """`chain_links` among these rows, by row of the index."""
    if not len(rows):
        return []
    frame = index.load(*LINK_INPUTS, rows=rows)
    f = prepared(pd.DataFrame({c: frame[c] for c in CHAIN_INPUTS}, copy=False), frame["replay"])
    codes = frame["location"].cat.codes.to_numpy()
    targets = frame["location"].cat.categories.tolist()
    at = np.flatnonzero(codes >= 0)
    locations = {i: targets[c] for i, c in zip(at.tolist(), codes[at].tolist(), strict=True)}
    bodies = frame["body_digest"].to_numpy(dtype=np.uint64)
    hops = frame["hop_digest"].to_numpy(dtype=np.uint64)
    del frame
    found = chain_links(f, hops, locations, lambda i: int(bodies[i]))
    return [(kind, int(rows[a]), int(rows[b])) for kind, a, b in found]


_GROUP_INPUTS = list(dict.fromkeys(c for c in (*RETRY_KEYS, *FALLBACK_KEYS) if c in CATEGORIES))
_LINKABLE_INPUTS = [*_GROUP_INPUTS, "replay", "retry", "status", "soft_error", "ask_digest"]
_MIX = np.uint64(0x9E3779B97F4A7C15)


def linkable_rows(index: Index) -> np.ndarray:
    """The rows a link can join (in order), a piece of the index at a time: every exchange
    of a client and route that retried, of a client that asked again what it was refused,
    each hop candidate whose request was seen on two listeners or more, each redirect and
    each exchange at a URL one leads to. `chain_links` among these finds every link: what
    it groups and looks back over is here whole. A group is known by a digest of its keys'
    codes: two groups with one digest only add rows, never leave one out."""
    retried: list[np.ndarray] = []
    sources: list[np.ndarray] = []
    for _, f in index.pieces(*_LINKABLE_INPUTS):
        at = (f["retry"].fillna(0) > 0).to_numpy(dtype=bool)
        if at.any():
            retried.append(np.unique(_group_digests(f, RETRY_KEYS)[at]))
        asked = f[["status", "soft_error", "ask_digest"]].assign(is_replay=f["replay"])
        at = fallback_sources(asked)
        if at.any():
            sources.append(np.unique(_group_digests(f, FALLBACK_KEYS)[at]))
    found = [_hop_candidates(index), _redirected(index)]
    if retried or sources:
        retry_groups = np.unique(np.concatenate(retried or [np.zeros(0, np.uint64)]))
        source_groups = np.unique(np.concatenate(sources or [np.zeros(0, np.uint64)]))
        for start, f in index.pieces(*_LINKABLE_INPUTS):
            hit = np.isin(_group_digests(f, RETRY_KEYS), retry_groups)
            hit |= np.isin(_group_digests(f, FALLBACK_KEYS), source_groups)
            found.append(start + np.flatnonzero(hit))
    return np.unique(np.concatenate(found)).astype(np.int64)


def _group_digests(f: pd.DataFrame, keys: Sequence[str]) -> np.ndarray:
    """Each row's group of `keys` (`is_replay`: `replay`; `ask_digest` as it is), as a
    digest of the keys' codes: a category's codes are the same in every piece of the
    index."""
    group = np.zeros(len(f), dtype=np.uint64)
    for key in keys:
        if key == "is_replay":
            codes = f["replay"].to_numpy(dtype=bool).astype(np.uint64)
        elif key == "ask_digest":
            codes = f[key].to_numpy(dtype=np.uint64)
        else:
            codes = (f[key].cat.codes.to_numpy().astype(np.int64) + 2).astype(np.uint64)
        group = group * _MIX + codes
        group ^= group >> np.uint64(29)
    return group


def _hop_candidates(index: Index) -> np.ndarray:
    """The originals on named listeners whose hop key is seen on two listeners or more:
    the keys by buckets of the hop key (each key once a listener and piece), then their
    rows a piece at a time."""
    shared = [np.zeros(0, dtype=np.uint64)]
    with Buckets(len(index)) as buckets:
        for _, keys, where in _hop_keys(index):
            pairs = np.unique(np.stack([keys, where.astype(np.uint64)]), axis=1)
            buckets.add(pairs[0], listener=pairs[1])
        for bucket in buckets:
            pairs = np.unique(np.stack([bucket["key"], bucket["listener"]]), axis=1)
            k = pairs[0]  # a key once a listener, in order
            shared.append(k[1:][k[1:] == k[:-1]])
    seen = np.unique(np.concatenate(shared))
    if not len(seen):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(
        [np.zeros(0, np.int64)] + [rows[np.isin(keys, seen)] for rows, keys, _ in _hop_keys(index)]
    )


def _hop_keys(index: Index) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A piece at a time, the originals on named listeners: rows, hop keys, listeners."""
    named_code: np.ndarray | None = None
    for start, f in index.pieces("listener", "replay", "hop_digest"):
        if named_code is None:
            values = f["listener"].cat.categories
            named_code = np.array([isinstance(v, str) for v in values], dtype=bool)
        codes = f["listener"].cat.codes.to_numpy()
        named = (codes >= 0) & named_code[np.maximum(codes, 0)] if len(named_code) else codes < -1
        cand = np.flatnonzero(named & ~f["replay"].to_numpy(dtype=bool))
        keys = f["hop_digest"].to_numpy(dtype=np.uint64)[cand]
        yield start + cand, keys, codes[cand]


def _redirected(index: Index) -> np.ndarray:
    """The redirects and the exchanges at the URLs they lead to."""
    at, values = [], []
    for start, f in index.pieces("location"):
        codes = f["location"].cat.codes.to_numpy()
        values = f["location"].cat.categories.tolist()
        some = np.flatnonzero(codes >= 0)
        some = some[np.array([bool(values[c]) for c in codes[some].tolist()], dtype=bool)]
        at.append(start + some)
    redirects = np.concatenate(at) if at else np.zeros(0, dtype=np.int64)
    if not len(redirects):
        return redirects
    asked = index.load("url", "location", rows=redirects)
    targets = set(redirect_targets(asked["url"].tolist(), asked["location"].tolist()))
    led = [redirects]
    hit: np.ndarray | None = None
    for start, f in index.pieces("url"):
        if hit is None:  # each URL once: a category
            urls = f["url"].cat.categories
            hit = np.array([normalize_url(str(u)) in targets for u in urls], dtype=bool)
        on = f["url"].cat.codes.to_numpy()
        if len(hit):
            led.append(start + np.flatnonzero((on >= 0) & hit[np.maximum(on, 0)]))
    return np.unique(np.concatenate(led)).astype(np.int64)


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


def chain_batch(part: pd.DataFrame, links: list[tuple[str, int, int]]) -> ChainBatch:
    """A batch of `Failing.batches` from its rows of the index (`BATCH_INPUTS`)."""
    return ChainBatch(
        part[NAMED_INPUTS].reset_index(drop=True),
        part["replay"].to_numpy(dtype=bool),
        part["id_digest"].to_numpy(dtype=np.uint64),
        part["ok"].to_numpy(dtype=bool),
        links,
    )
