"""Pairing: each candidate exchange against the baseline exchange it answers the same call as.

A replay (or a shadow mirror) names its original (`replay_of`): one pair per (original,
target label), `pairing = "replay"`. Independent captures of one app against different
backends name nothing: their exchanges pair by content (`pairing = "content"`). Per label,
the exchanges in order (sessions by when they started, then `seq`, then start time) give a
sequence of request fingerprints (`wirediff.record.keys.request_fingerprint`); the baseline's
is aligned with each candidate's (`difflib.SequenceMatcher`, no junk heuristic), its equal
blocks pair, then what is left pairs by equal fingerprint in order (a repeat, or calls a
concurrent client sent in another order); the rest is unmatched, listed per candidate as
`only in the baseline` or `only in the candidate`. SDK retries (`tags.retry > 0`) are one
call with the attempt before them, and left out.

The baseline label: the label replays point at; else the one asked for (`--baseline`); else
the label of the first capture loaded.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

import pandas as pd

from wirediff._types import Record
from wirediff.errors import UsageError
from wirediff.record.keys import request_fingerprint

__all__ = [
    "ALIGN_LIMIT",
    "CONTENT",
    "ONLY_BASELINE",
    "ONLY_CANDIDATE",
    "PAIR_COLUMNS",
    "REPLAY",
    "UNMATCHED_COLUMNS",
    "Baseline",
    "ContentLinks",
    "Pairing",
    "align",
    "choose_baseline",
    "content_links",
    "first_event_ms",
    "pair_exchanges",
    "pairs_frame",
    "with_fingerprints",
]

REPLAY, CONTENT = "replay", "content"
ONLY_BASELINE, ONLY_CANDIDATE = "only in the baseline", "only in the candidate"
ALIGN_LIMIT = 4_000_000
"""Cells (baseline times candidate exchanges, once a common head and tail are set aside) above
which the sequences are not aligned block by block: equal fingerprints then pair in order."""

PAIR_COLUMNS = [
    "pair_id",
    "label",
    "baseline_label",
    "baseline_id",
    "candidate_id",
    "family",
    "endpoint",
    "method",
    "stream",
    "baseline_status",
    "candidate_status",
    "baseline_ttfb_ms",
    "candidate_ttfb_ms",
    "baseline_duration_ms",
    "candidate_duration_ms",
    "baseline_first_event_ms",
    "candidate_first_event_ms",
    "pairing",
]
UNMATCHED_COLUMNS = ["label", "baseline_label", "side", "id", "session", "method", "endpoint"]

_SIDE_COLUMNS = ["id", "label", "status", "ttfb_ms", "duration_ms", "first_event_ms"]
_REQUEST_COLUMNS = ["family", "endpoint", "method", "stream"]


@dataclass(frozen=True)
class Baseline:
    label: str | None
    """None: no exchange is an original."""
    chosen_by: str
    """`replays` (the label they were replayed from), `option` (`--baseline`), `first
    capture` (the label of the first original loaded), `none`."""


@dataclass(frozen=True)
class Pairing:
    pairs: pd.DataFrame
    """`PAIR_COLUMNS`, one row per candidate exchange paired."""
    unmatched: pd.DataFrame
    """`UNMATCHED_COLUMNS`: exchanges of independent captures that found no counterpart."""
    baseline: Baseline


def first_event_ms(events: pd.DataFrame) -> pd.Series:
    """Time of each exchange's first SSE event, indexed by exchange id."""
    if events.empty:
        return pd.Series(dtype="float64", name="first_event_ms")
    return events.groupby("id", sort=False)["t_ms"].min().rename("first_event_ms")


def choose_baseline(exchanges: pd.DataFrame, requested: str | None = None) -> Baseline:
    """The baseline label (see the module); a `requested` label that no original has, or
    that contradicts what the replays were replayed from, is a `UsageError`."""
    ex = exchanges.drop_duplicates("id")
    originals = ex.loc[ex["replay_of"].isna(), ["id", "label"]]
    labels = list(dict.fromkeys(originals["label"].fillna("").astype(str)))
    replayed = set(ex["replay_of"].dropna().astype(str))
    from_replays = list(
        dict.fromkeys(
            originals.loc[originals["id"].astype(str).isin(replayed), "label"]
            .fillna("")
            .astype(str)
        )
    )
    if requested is not None and requested not in labels:
        known = ", ".join(labels) or "none"
        raise UsageError(f"--baseline {requested}: no capture has that label (labels: {known})")
    if from_replays:
        if requested is not None and requested not in from_replays:
            raise UsageError(
                f"--baseline {requested}: the replays in these files were replayed from "
                f"{', '.join(from_replays)}"
            )
        return Baseline(requested or from_replays[0], "replays")
    if requested is not None:
        return Baseline(requested, "option")
    if labels:
        return Baseline(labels[0], "first capture")
    return Baseline(None, "none")


def align(a: Sequence[str], b: Sequence[str]) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """`(pairs, only_a, only_b)`: positions of `a` and `b` holding the same call.

    A common head and tail pair as they are; the middle is aligned block by block (equal
    blocks pair; `ALIGN_LIMIT` bounds the work), then what is left pairs by equal value in
    order. Positions ascending."""
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    pairs = [(i, i) for i in range(head)]
    pairs += [(len(a) - 1 - k, len(b) - 1 - k) for k in range(tail)]
    mid_a, mid_b = range(head, len(a) - tail), range(head, len(b) - tail)
    left_a: list[int] = []
    left_b: list[int] = []
    if mid_a and mid_b and len(mid_a) * len(mid_b) <= ALIGN_LIMIT:
        matcher = SequenceMatcher(
            None, a[mid_a.start : mid_a.stop], b[mid_b.start : mid_b.stop], autojunk=False
        )
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                pairs += zip(range(head + i1, head + i2), range(head + j1, head + j2), strict=True)
            else:
                left_a += range(head + i1, head + i2)
                left_b += range(head + j1, head + j2)
    else:
        left_a, left_b = list(mid_a), list(mid_b)
    waiting: dict[str, deque[int]] = defaultdict(deque)
    for j in left_b:
        waiting[b[j]].append(j)
    only_a = []
    for i in left_a:
        queue = waiting.get(a[i])
        if queue:
            pairs.append((i, queue.popleft()))
        else:
            only_a.append(i)
    only_b = sorted(j for queue in waiting.values() for j in queue)
    return sorted(pairs), only_a, only_b


def _in_call_order(originals: pd.DataFrame) -> pd.DataFrame:
    """Sessions by when they started, then `seq`, then start time; SDK retries left out."""
    retry = pd.to_numeric(originals["retry"], errors="coerce").fillna(0) > 0
    ex = originals.loc[~retry]
    started = pd.to_numeric(ex["started"], errors="coerce").fillna(0.0)
    session = ex["session"].fillna("").astype(str)
    return ex.assign(
        _session=session,
        _began=started.groupby(session).transform("min"),
        _seq=pd.to_numeric(ex["seq"], errors="coerce").fillna(0),
        _started=started,
    ).sort_values(["_began", "_session", "_seq", "_started"], kind="stable")


@dataclass(frozen=True)
class ContentLinks:
    """Exchanges of independent captures paired by content (`content_links`)."""

    links: list[tuple[str, str]]
    """`(candidate id, baseline id)`."""
    unmatched: pd.DataFrame
    """`UNMATCHED_COLUMNS`."""


def content_links(exchanges: pd.DataFrame, baseline: str) -> ContentLinks:
    """The originals of other labels paired with the baseline's by their request
    `fingerprint` column (see the module), and what found no counterpart. Needs the columns
    id, label, session, seq, started, retry, replay_of, method, endpoint and fingerprint:
    an index of the captures is enough, not the records."""
    none = ContentLinks([], pd.DataFrame(columns=UNMATCHED_COLUMNS))
    originals = exchanges.loc[exchanges["replay_of"].isna()]
    labels = originals["label"].fillna("").astype(str)
    if labels.nunique() < 2:
        return none
    ordered = _in_call_order(originals.assign(label=labels))
    ids = ordered["id"].astype(str).tolist()
    prints = ordered["fingerprint"].tolist()
    by_label: dict[str, list[int]] = defaultdict(list)
    for pos, label in enumerate(ordered["label"].tolist()):
        by_label[label].append(pos)
    base = by_label.pop(baseline, [])
    meta = list(zip(ordered["session"], ordered["method"], ordered["endpoint"], strict=True))
    links: list[tuple[str, str]] = []
    rows = []
    for label, cand in by_label.items():
        pairs, only_base, only_cand = align([prints[p] for p in base], [prints[p] for p in cand])
        links += [(ids[cand[j]], ids[base[i]]) for i, j in pairs]
        rows += [(label, baseline, ONLY_BASELINE, ids[base[i]], *meta[base[i]]) for i in only_base]
        rows += [(label, baseline, ONLY_CANDIDATE, ids[cand[j]], *meta[cand[j]]) for j in only_cand]
    return ContentLinks(links, pd.DataFrame.from_records(rows, columns=UNMATCHED_COLUMNS))


def with_fingerprints(exchanges: pd.DataFrame, records_by_id: Mapping[str, Record]) -> pd.DataFrame:
    """`exchanges` with each original's request `fingerprint` (replays need none)."""
    original = exchanges["replay_of"].isna()
    prints = [
        request_fingerprint(records_by_id.get(i) or {}) if o else None
        for i, o in zip(exchanges["id"].astype(str).tolist(), original.tolist(), strict=True)
    ]
    return exchanges.assign(fingerprint=pd.Series(prints, index=exchanges.index, dtype=object))


def pair_exchanges(
    exchanges: pd.DataFrame,
    events: pd.DataFrame,
    records_by_id: Mapping[str, Record] | None = None,
    *,
    baseline: str | None = None,
    content: ContentLinks | None = None,
) -> Pairing:
    """Replays with their originals, and the originals of other labels with the baseline's
    by content: as `content` says (links made over all the captures, when these exchanges
    are a part of them), else worked out here (given the records); the request columns come
    from the baseline's side."""
    ex = exchanges.drop_duplicates("id")
    ex = ex.assign(first_event_ms=ex["id"].map(first_event_ms(events)).astype("float64"))
    chosen = choose_baseline(ex, baseline)
    links = ex.loc[ex["replay_of"].notna(), ["id", "replay_of"]].assign(pairing=REPLAY)
    if content is None and records_by_id is not None and chosen.label is not None:
        content = content_links(with_fingerprints(ex, records_by_id), chosen.label)
    unmatched = pd.DataFrame(columns=UNMATCHED_COLUMNS) if content is None else content.unmatched
    if content is not None and content.links:
        by_content = pd.DataFrame.from_records(content.links, columns=["id", "replay_of"])
        links = pd.concat([links, by_content.assign(pairing=CONTENT)], ignore_index=True)
    candidate = ex[_SIDE_COLUMNS].add_prefix("candidate_")
    base = ex[_SIDE_COLUMNS + _REQUEST_COLUMNS].rename(
        columns={c: f"baseline_{c}" for c in _SIDE_COLUMNS}
    )
    pairs = links.merge(candidate, left_on="id", right_on="candidate_id").merge(
        base, left_on="replay_of", right_on="baseline_id"
    )
    pairs = pairs.rename(columns={"id": "pair_id", "candidate_label": "label"})
    for side in ("baseline", "candidate"):
        pairs[f"{side}_status"] = pairs[f"{side}_status"].astype("Int64")
        for col in ("ttfb_ms", "duration_ms", "first_event_ms"):
            pairs[f"{side}_{col}"] = pairs[f"{side}_{col}"].astype("float64")
    return Pairing(pairs[PAIR_COLUMNS].reset_index(drop=True), unmatched, chosen)


def pairs_frame(
    exchanges: pd.DataFrame,
    events: pd.DataFrame,
    records_by_id: Mapping[str, Record] | None = None,
    *,
    baseline: str | None = None,
) -> pd.DataFrame:
    """The pairs of `pair_exchanges`."""
    return pair_exchanges(exchanges, events, records_by_id, baseline=baseline).pairs
