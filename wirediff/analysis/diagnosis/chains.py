"""Group the exchanges that one client call turned into as a chain.

An SDK call can leave several exchanges on the wire: its own retries, which the
`x-stainless-retry-count` header counts; a redirect it followed, a `3xx` with `Location`,
sometimes with the method changed on the way; the same call seen again on a second listener when
a gateway sits between two capture points, a hop, where the gateway's request asks the same
thing, maybe under another model name or route, while the client waits; and a client asking the
same thing of another endpoint or backend after a refusal, a fallback such as from
`/v1/responses` to `/v1/chat/completions`. Each of these is a *link*; the connected exchanges are
one chain, and every exchange is in exactly one chain.

Links are found by grouping and sorting with pandas and one sweep in time order with a bounded
look-back, never by comparing all pairs, so the cost stays O(n log n).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any
from urllib.parse import urljoin, urlsplit

import numpy as np
import pandas as pd

from wirediff._support import statuses_2xx
from wirediff._types import Record
from wirediff.record.keys import HOP_LOOKBACK, HOP_SLACK_S, HOP_WINDOW_S
from wirediff.record.tags import header_get

__all__ = [
    "CHAIN_COLUMNS",
    "FALLBACK_KEYS",
    "RETRY_KEYS",
    "assemble",
    "chain_links",
    "chain_roots",
    "chain_rows",
    "fallback_sources",
    "prepared",
    "redirect_location",
    "redirect_targets",
]

CHAIN_COLUMNS = [
    "chain_id",
    "exchange_ids",
    "kinds",
    "label",
    "ok",
    "session",
    "final_id",
    "failed",
    "links",
    "title",
]
"""The columns of a chain: exchanges linked by retries, redirects, fallbacks and hops.

`exchange_ids`: in start order. `kinds`: the sorted link kinds, of `fallback`, `hop`,
`redirect` and `retry`. `label`: the backend label of the first exchange. `final_id`: the
exchange the client finally got; `ok`: whether it succeeded. `failed`: the ids of exchanges
that did not succeed. `links`: `(kind, from_id, to_id)` triples, a hop going outer → inner.
`title`: one line for humans."""

FOLLOW_WINDOW_S = 60.0  # a redirect target or a fallback starts at most this long after
FALLBACK_LOOKAHEAD = 3  # a fallback is among the client's next few requests
FALLBACK_FROM = frozenset({404, 405, 501})
RETRY_KEYS = ["session", "label", "listener", "is_replay", "method", "path"]
"""A retry repeats a call of the same client and route (and body)."""
FALLBACK_KEYS = ["session", "is_replay", "sdk_lang", "sdk_version", "ask_digest"]
"""What a fallback shares with the call it follows: the same client asking the same thing.

It asks it again of another endpoint or backend, soon after the refusal. `ask_digest` is the
same conversation, whichever API carries it. A later call that asks something else is a call
of its own, however close."""


def normalize_url(url: str) -> str:
    """Normalize a URL so it compares across clients.

    The scheme and host are lower-cased and a default port dropped. A URL that does not parse,
    with a port that is no number or a bracket left open, is kept as it is: it is the same as
    itself only."""
    try:
        p = urlsplit(url)
        port = p.port
    except ValueError:
        return url
    host = (p.hostname or "").lower()
    scheme = p.scheme.lower()
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return f"{scheme}://{host}{p.path or '/'}" + (f"?{p.query}" if p.query else "")


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        parent = self.parent
        root = i
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:
            parent[i], i = root, parent[i]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if ra < rb:
                self.parent[rb] = ra
            else:
                self.parent[ra] = rb


Links = list[tuple[str, int, int]]


def _prev_in_group(f: pd.DataFrame, keys: list[str], k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Sort positions by group and start, and find for each the position `k` before it in its group.

    The earlier position is -1 when there is none."""
    g = f.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    order = np.lexsort((f["pos"].to_numpy(), f["started"].to_numpy(), g))
    gs = g[order]
    prev = np.full(len(order), -1, dtype=np.int64)
    if len(order) > k:
        same = gs[k:] == gs[:-k]
        prev[k:] = np.where(same, order[:-k], -1)
    return order, prev


def _retry_links(f: pd.DataFrame, body_keys: Callable[[int], Hashable]) -> Links:
    """Link each SDK retry to the attempt before it.

    A retry has the same client, route and body, and a higher `x-stainless-retry-count`. Bodies
    are compared only where some request is a retry."""
    keys = RETRY_KEYS
    retried = f["retry"].to_numpy() > 0
    if not retried.any():
        return []
    g = f.groupby(keys, dropna=False, sort=False).ngroup().to_numpy()
    sub = f[np.isin(g, np.unique(g[retried]))]
    keyed: list[Any] = [body_keys(i) for i in sub["pos"].tolist()]
    sub = sub.assign(body_key=keyed)
    order, prev = _prev_in_group(sub.reset_index(drop=True), [*keys, "body_key"])
    pos = sub["pos"].to_numpy()
    retry = sub["retry"].to_numpy()
    cur_retry = retry[order]
    prev_retry = np.where(prev >= 0, retry[np.maximum(prev, 0)], 0)
    hit = (prev >= 0) & (cur_retry > 0) & (cur_retry > prev_retry)
    return [("retry", int(pos[a]), int(pos[b])) for a, b in zip(prev[hit], order[hit], strict=True)]


def _hop_links(f: pd.DataFrame, content: Sequence[Hashable] | np.ndarray) -> Links:
    """Link outer → inner each exchange that a gateway made while serving another one.

    The inner exchange came through another listener, asked the same thing by `hop_key`, started
    after the outer one and ended before it, with `HOP_SLACK_S` of clock slack. One sweep in
    start order: each exchange looks back at the last `HOP_LOOKBACK` exchanges with its content
    on each other listener, and takes the latest-started one that contains it, preferring one
    that has no inner exchange yet, for concurrent equal calls. Replays are never hops: the
    replayer records its own requests, and one original sent to several targets at once is the
    same prompt on several listeners, nested in time.
    """
    # listeners by code: a category's values made into a string a row would be most of
    # the memory the chains take over a million exchanges
    listener = f["listener"]
    if isinstance(listener.dtype, pd.CategoricalDtype):  # the engine's index: its codes are made
        codes, values = listener.cat.codes.to_numpy(), listener.cat.categories
    else:
        codes, values = pd.factorize(listener, use_na_sentinel=True)
    named_code = np.array([isinstance(v, str) for v in values.tolist()], dtype=bool)
    named = (codes >= 0) & named_code[np.maximum(codes, 0)] if len(values) else codes < -1
    replay = f["is_replay"].to_numpy(dtype=bool)
    started = f["started"].to_numpy(dtype=np.float64)
    cand = np.flatnonzero(named & ~replay)
    if len(np.unique(codes[cand])) < 2:  # one listener: nothing came through another
        return []
    cand = cand[np.argsort(started[cand], kind="stable")]  # in start order, ties by row
    # compact columns of the candidates only: a million exchanges' floats as objects
    # would be most of the memory the chains take
    keys: Any = (
        array("Q", content[cand].astype(np.uint64).tobytes())
        if isinstance(content, np.ndarray)
        else [content[i] for i in cand.tolist()]
    )
    where = array("i", codes[cand].astype(np.int32).tobytes())
    dur = f["duration_s"].to_numpy(dtype=np.float64)[cand]
    begun = started[cand]
    outer_end = array(
        "d", (begun + np.where(np.isnan(dur), HOP_WINDOW_S, dur) + HOP_SLACK_S).tobytes()
    )
    inner_end = array("d", (begun + np.where(np.isnan(dur), 0.0, dur)).tobytes())
    start = array("d", begun.tobytes())
    del dur, begun
    seen: dict[Hashable, dict[int, list[int]]] = {}
    has_inner = bytearray(len(cand))
    found: list[tuple[int, int]] = []
    for i in range(len(cand)):
        here = where[i]
        by_listener = seen.setdefault(keys[i], {})
        best, best_free = -1, False
        for other, prior in by_listener.items():
            if other == here:
                continue
            for j in reversed(prior):
                if inner_end[i] > outer_end[j]:
                    continue
                free = not has_inner[j]
                if best < 0 or (free, start[j]) > (best_free, start[best]):
                    best, best_free = j, free
                if free:
                    break  # the latest free container on this listener
        if best >= 0:
            found.append((best, i))
            has_inner[best] = True
        mine = by_listener.setdefault(here, [])
        mine.append(i)
        if len(mine) > HOP_LOOKBACK:  # only the last ones are ever looked back at
            del mine[0]
    ends = np.asarray(found, dtype=np.int64).reshape(-1, 2)
    outer, inner = cand[ends[:, 0]].tolist(), cand[ends[:, 1]].tolist()
    return [("hop", j, i) for j, i in zip(outer, inner, strict=True)]


def redirect_targets(urls: Sequence[Any], locations: Sequence[Any]) -> list[str]:
    """Resolve where each redirect leads: its `Location` against its URL, normalized."""
    return [
        normalize_url(urljoin(str(u), str(loc))) for u, loc in zip(urls, locations, strict=True)
    ]


def _redirect_links(f: pd.DataFrame, locations: Mapping[int, str]) -> Links:
    at = sorted(i for i, loc in locations.items() if loc)
    if not at:
        return []
    targets = redirect_targets(f["url"].take(at).tolist(), [locations[i] for i in at])
    sources = list(zip(at, targets, strict=True))
    wanted = {urlsplit(t).path for t in targets}
    targeted = [isinstance(p, str) and p.split("?", 1)[0] in wanted for p in f["path"].tolist()]
    cand = f[np.array(targeted, dtype=bool)]
    by_url: dict[str, list[tuple[float, int]]] = {}
    for pos, url, t in zip(cand["pos"], cand["url"], cand["started"], strict=True):
        by_url.setdefault(normalize_url(str(url)), []).append((float(t), int(pos)))
    for lst in by_url.values():
        lst.sort()
    started = f["started"].to_numpy(dtype=np.float64)
    links: Links = []
    for i, target in sources:
        lst = by_url.get(target, [])
        j = bisect_left(lst, (started[i], -1))
        while j < len(lst) and lst[j][1] == i:
            j += 1
        if j < len(lst) and lst[j][0] <= started[i] + FOLLOW_WINDOW_S:
            links.append(("redirect", i, lst[j][1]))
    return links


def fallback_sources(f: pd.DataFrame) -> np.ndarray:
    """Tell whether each exchange is one a client may fall back from.

    That is an original call that asks a model something, refused with a `FALLBACK_FROM` status
    or answered with a soft error. The columns read are `status`, `soft_error`, `is_replay` and
    `ask_digest`. A replayer sends what was recorded, in its own order, so its next call is no
    fallback."""
    status = f["status"].astype("float64").to_numpy()
    soft = f["soft_error"].fillna(False).astype(bool).to_numpy()
    original = ~f["is_replay"].to_numpy(dtype=bool)
    asks = f["ask_digest"].to_numpy(dtype=np.uint64) != 0
    refused = np.isin(status, list(FALLBACK_FROM)) | (soft & statuses_2xx(status))
    return np.asarray(original & asks & refused, dtype=bool)


def _fallback_links(f: pd.DataFrame) -> Links:
    """Link each refused call to the client's next call that asks the same thing of another URL.

    The other URL is another endpoint or backend. The call must start after the refusal came,
    within `FOLLOW_WINDOW_S`, and be among the client's next `FALLBACK_LOOKAHEAD` calls asking
    it."""
    source = fallback_sources(f)
    if not source.any():
        return []
    g = f.groupby(FALLBACK_KEYS, dropna=False, sort=False).ngroup().to_numpy()
    order = np.lexsort((f["pos"].to_numpy(), f["started"].to_numpy(), g))
    gs = g[order]
    started = f["started"].to_numpy(dtype=np.float64)
    answered = started + np.nan_to_num(f["duration_s"].to_numpy(dtype=np.float64)) - HOP_SLACK_S
    url = pd.factorize(f["url"], use_na_sentinel=True)[0]  # equal URLs, equal codes
    links: Links = []
    done = ~source[order]
    for k in range(1, FALLBACK_LOOKAHEAD + 1):
        if len(order) <= k:
            break
        a, b = order[:-k], order[k:]
        hit = (
            ~done[:-k]
            & (gs[:-k] == gs[k:])
            & (url[a] != url[b])
            & (started[b] >= answered[a])
            & (started[b] - started[a] <= FOLLOW_WINDOW_S)
        )
        links.extend(("fallback", int(x), int(y)) for x, y in zip(a[hit], b[hit], strict=True))
        done[:-k] |= hit
    return links


_INTEGERS = (int, np.integer)


def _step(method: Any, path: Any, status: Any, error_kind: Any) -> str:
    if isinstance(status, _INTEGERS):
        outcome = str(status)
    else:
        outcome = error_kind if isinstance(error_kind, str) else "no response"
    return f"{method} {path} → {outcome}"


def redirect_location(record: Record) -> str | None:
    """Find where a 3xx answer sends the client."""
    resp = record.get("response")
    st = resp["status"] if resp is not None else None
    if resp is not None and isinstance(st, int) and 300 <= st < 400:
        return header_get(resp.get("headers") or (), "location")
    return None


def chain_rows(exchanges: pd.DataFrame, *, failing_only: bool = False) -> list[tuple[Any, ...]]:
    """Group the index's exchanges into chains, one tuple per chain in `CHAIN_COLUMNS` order.

    With `failing_only`, only the chains with an exchange that did not succeed are kept. It reads
    what each exchange contributes to links: the `hop_digest` of a hop candidate, `ask_digest`,
    `body_digest`, the redirect `location` and whether it was `ok`."""
    if len(exchanges) == 0:
        return []
    f = prepared(exchanges)
    located = exchanges["location"].notna().to_numpy()
    targets = dict(
        zip(
            np.flatnonzero(located).tolist(),
            exchanges["location"].to_numpy()[located].tolist(),
            strict=True,
        )
    )
    bodies = exchanges["body_digest"].to_numpy()
    links = chain_links(f, exchanges["hop_digest"].to_numpy(), targets, lambda i: int(bodies[i]))
    return assemble(f, links, exchanges["ok"].tolist(), failing_only=failing_only)


def prepared(exchanges: pd.DataFrame, replay: Any = None) -> pd.DataFrame:
    """Prepare the exchanges for finding links between them.

    They are numbered in `pos`; missing start times become 0, durations are in seconds, missing
    retry counts become 0; and each says whether it is a replay, from `replay`, else from having
    a `replay_of`."""
    f = exchanges.reset_index(drop=True)
    is_replay = f["replay_of"].notna() if replay is None else np.asarray(replay, dtype=bool)
    return f.assign(
        pos=np.arange(len(f)),
        started=f["started"].astype("float64").fillna(0.0),
        duration_s=f["duration_ms"].astype("float64") / 1000.0,
        retry=f["retry"].fillna(0).astype("int64"),
        is_replay=is_replay,
    )


def chain_links(
    f: pd.DataFrame,
    contents: Sequence[Hashable] | np.ndarray,
    locations: Mapping[int, str],
    body_keys: Callable[[int], Hashable],
) -> Links:
    """Find every link between the `prepared` exchanges, `(kind, from, to)` by position.

    `locations` holds the redirect target of each exchange that has one, by position."""
    return (
        _retry_links(f, body_keys)
        + _hop_links(f, contents)
        + _redirect_links(f, locations)
        + _fallback_links(f)
    )


def chain_roots(n: int, links: Links) -> np.ndarray:
    """Name each of `n` exchanges' chain by the first position in it."""
    roots = np.arange(n, dtype=np.int64)
    if not links:
        return roots
    ends = np.array([(a, b) for _, a, b in links], dtype=np.int64)
    nodes, at = np.unique(ends, return_inverse=True)
    at = at.reshape(ends.shape)
    uf = _UnionFind(len(nodes))
    for a, b in zip(at[:, 0].tolist(), at[:, 1].tolist(), strict=True):
        uf.union(a, b)
    roots[nodes] = nodes[[uf.find(i) for i in range(len(nodes))]]
    return roots


def assemble(
    f: pd.DataFrame, links: Links, oks: Sequence[bool], *, failing_only: bool = False
) -> list[tuple[Any, ...]]:
    """Assemble the chains of the `prepared` exchanges `f` joined by `links`.

    Each is a tuple in `CHAIN_COLUMNS` order. Chains come by their first exchange's start. It
    reads `id`, `label`, `session`, `method`, `path`, `status` and `error_kind`."""
    n = len(f)
    roots = chain_roots(n, links)
    # the exchanges of the chains to list, in start order: the lists below hold only those
    keep = np.lexsort((np.arange(n), f["started"].to_numpy()))
    ok = np.fromiter(oks, dtype=bool, count=n)
    if failing_only:
        failing = np.zeros(n, dtype=bool)
        failing[roots[~ok]] = True
        keep = keep[failing[roots[keep]]]
    at = np.full(n, -1, dtype=np.int64)
    at[keep] = np.arange(len(keep))
    members: dict[int, list[int]] = {}
    for k, root in enumerate(roots[keep].tolist()):
        members.setdefault(root, []).append(k)
    by_root: dict[int, Links] = {}
    inner: set[int] = set()
    for kind, a, b in links:
        if at[a] < 0:
            continue
        link = (kind, int(at[a]), int(at[b]))
        by_root.setdefault(int(roots[a]), []).append(link)
        if kind == "hop":
            inner.add(link[2])

    def column(name: str) -> list[Any]:
        return f[name].take(keep).tolist()

    ids, labels, sessions = column("id"), column("label"), column("session")
    methods, paths = column("method"), column("path")
    statuses, errors = column("status"), column("error_kind")
    oks = ok[keep].tolist()
    rows: list[tuple[Any, ...]] = []
    for root, mem in members.items():
        if len(mem) == 1:  # most chains: one exchange, no links
            (i,) = mem
            rid = ids[i]
            title = _step(methods[i], paths[i], statuses[i], errors[i])
            failed = [] if oks[i] else [rid]
            rows.append(
                (f"ch-{rid}", [rid], [], labels[i], oks[i], sessions[i], rid, failed, [], title)
            )
            continue
        final = next(i for i in reversed(mem) if i not in inner)
        lk = by_root.get(root, [])
        if len(lk) > 1:  # by the places of their ends in the chain (start order)
            lk.sort(key=lambda link: (link[1], link[2]))
        steps = [i for i in mem if i not in inner] if len(mem) > 1 else mem
        if len(steps) == 1:
            title = _step(methods[final], paths[final], statuses[final], errors[final])
        else:
            title = " ⇒ ".join(_step(methods[i], paths[i], statuses[i], errors[i]) for i in steps)
        rows.append(
            (
                f"ch-{ids[mem[0]]}",
                [ids[i] for i in mem],
                sorted({k for k, _, _ in lk}),
                labels[mem[0]],
                oks[final],
                sessions[mem[0]],
                ids[final],
                [ids[i] for i in mem if not oks[i]],
                [(k, ids[a], ids[b]) for k, a, b in lk],
                title,
            )
        )
    return rows
