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
from wirediff.analysis.diagnosis.chains import (
    FALLBACK_KEYS,
    RETRY_KEYS,
    Links,
    assemble,
    chain_links,
    chain_roots,
    fallback_sources,
    normalize_url,
    origin_of,
    prepared,
    redirect_targets,
)
from wirediff.engine.index import Index
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
    roots = chain_roots(n, links)
    failing = np.zeros(n, dtype=bool)
    failing[roots[~index.column("ok").to_numpy(dtype=bool)]] = True
    listed = np.flatnonzero(failing[roots])
    if not len(listed):
        return Failing(0, [])
    started = index.load("started", rows=listed)["started"].astype("float64").fillna(0.0)
    keep = listed[np.lexsort((listed, started.to_numpy()))]  # by start, ties by row
    del listed, started
    heads, first, chain = np.unique(roots[keep], return_index=True, return_inverse=True)
    rank = np.empty(len(heads), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(heads))
    chain = rank[chain]  # each listed exchange's chain, numbered as chains are listed
    ends = np.array([a for _, a, _ in links], dtype=np.int64)
    of = np.searchsorted(heads, roots[ends])
    listed_links = failing[roots[ends]]
    linked = sorted(  # the links of listed chains, by chain, each chain's in the order found
        (int(rank[c]), k)
        for k, c in zip(
            np.flatnonzero(listed_links).tolist(), of[listed_links].tolist(), strict=True
        )
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


def linkable_rows(index: Index) -> np.ndarray:
    """The rows a link can join (in order), found from a few columns at a time: every
    exchange of a client and route that retried, of a client that may have fallen back,
    each hop candidate whose request was seen on two listeners or more, each redirect and
    each exchange at a URL one leads to. `chain_links` among these finds every link: what
    it groups and looks back over is here whole."""
    n = len(index)
    replay = index.column("replay").to_numpy(dtype=bool)
    linkable = np.zeros(n, dtype=bool)
    retried = (index.column("retry").fillna(0) > 0).to_numpy(dtype=bool)
    if retried.any():
        group = _groups(index, RETRY_KEYS, replay)
        linkable |= np.isin(group, np.unique(group[retried]))
    asked = index.load("status", "family", "soft_error").assign(is_replay=replay)
    sources = fallback_sources(asked)
    del asked
    if sources.any():
        group = _groups(index, FALLBACK_KEYS, replay)
        linkable |= np.isin(group, np.unique(group[sources]))
    del sources
    linkable[_hop_candidates(index, replay)] = True
    linkable[_redirected(index)] = True
    return np.flatnonzero(linkable)


def _codes(column: pd.Series) -> np.ndarray:
    """Equal values, equal codes (missing ones -1): a category's own codes."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy().astype(np.int64)
    return pd.factorize(column, use_na_sentinel=True)[0].astype(np.int64)


def _groups(index: Index, keys: Sequence[str], replay: np.ndarray) -> np.ndarray:
    """Each row's group of `keys` (`is_replay`: `replay`; `origin`: the URL's), a column
    read at a time, as `groupby(keys, dropna=False)` numbers them."""
    group = np.zeros(len(index), dtype=np.int64)
    for key in keys:
        if key == "is_replay":
            codes = replay.astype(np.int64)
        elif key == "origin":
            url = index.column("url")
            of_value = _codes(origin_of(pd.Series(url.cat.categories, dtype=object)))
            at = url.cat.codes.to_numpy()
            codes = np.where(at >= 0, of_value[np.maximum(at, 0)] if len(of_value) else -1, -1)
        else:
            codes = _codes(index.column(key))
        group = group * (int(codes.max(initial=-1)) + 2) + codes + 1
        group = pd.factorize(group)[0].astype(np.int64)
    return group


def _hop_candidates(index: Index, replay: np.ndarray) -> np.ndarray:
    """The originals on named listeners whose hop key is seen on two listeners or more."""
    listener = index.column("listener")
    codes = listener.cat.codes.to_numpy()
    named_code = np.array([isinstance(v, str) for v in listener.cat.categories], dtype=bool)
    named = (codes >= 0) & named_code[np.maximum(codes, 0)] if len(named_code) else codes < -1
    cand = np.flatnonzero(named & ~replay)
    if not len(cand):
        return cand
    keys = index.column("hop_digest").to_numpy(dtype=np.uint64)[cand]
    where = codes[cand]
    order = np.lexsort((where, keys))
    k, w = keys[order], where[order]
    pairs = k[np.r_[True, (k[1:] != k[:-1]) | (w[1:] != w[:-1])]]  # a key once a listener
    shared = pairs[1:][pairs[1:] == pairs[:-1]]
    return cand[np.isin(keys, shared)]


def _redirected(index: Index) -> np.ndarray:
    """The redirects and the exchanges at the URLs they lead to."""
    location = index.column("location")
    codes = location.cat.codes.to_numpy()
    values = location.cat.categories.tolist()
    at: np.ndarray = np.flatnonzero(codes >= 0)
    at = at[np.array([bool(values[c]) for c in codes[at].tolist()], dtype=bool)]
    if not len(at):
        return at
    urls = index.load("url", rows=at)["url"].tolist()
    targets = set(redirect_targets(urls, [values[c] for c in codes[at].tolist()]))
    url = index.column("url")  # each URL once: a category
    hit = np.array([normalize_url(str(u)) in targets for u in url.cat.categories], dtype=bool)
    on = url.cat.codes.to_numpy()
    led = np.flatnonzero((on >= 0) & hit[np.maximum(on, 0)]) if len(hit) else on[:0]
    return np.asarray(np.union1d(at, led), dtype=np.int64)


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
