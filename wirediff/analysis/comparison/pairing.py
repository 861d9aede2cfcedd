"""Pair each candidate exchange with the baseline exchange that answers the same call.

A replay, or a shadow mirror, names its original in `replay_of`: one pair per original and target
label, with `pairing = "replay"`. A replay that names another replay, itself, or an id not loaded
pairs with nothing. Independent captures of one app against different backends name
nothing: their exchanges pair by content, with `pairing = "content"`. Per label, the exchanges in
order give a sequence of request fingerprints: sessions by when they started, then `seq`, then
start time; the fingerprint is the index's `fingerprint`, from
`wirediff.record.keys.request_fingerprint`. The baseline's sequence is aligned with each
candidate's by `difflib.SequenceMatcher` without its junk heuristic, and its equal blocks pair.
What is left then pairs by equal fingerprint in order, which catches a repeat, or calls a
concurrent client sent in another order. The rest is unmatched, listed per candidate as `only in
the baseline` or `only in the candidate`. An SDK retry, with `tags.retry > 0`, is one call with
the attempt before it, and left out.

The baseline label is the label replays point at; else the one asked for with `--baseline`; else
the label of the first capture loaded.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from wirediff.errors import UsageError

__all__ = [
    "ALIGN_LIMIT",
    "CONTENT",
    "ONLY_BASELINE",
    "ONLY_CANDIDATE",
    "PAIR_COLUMNS",
    "REPLAY",
    "UNMATCHED_COLUMNS",
    "Baseline",
    "Pairing",
    "align",
    "choose_baseline",
    "content_links",
    "factorize_together",
    "index_in",
    "pair_exchanges",
    "sorted_codes",
    "text",
    "text_codes",
    "unreplayed",
]

REPLAY, CONTENT = "replay", "content"
ONLY_BASELINE, ONLY_CANDIDATE = "only in the baseline", "only in the candidate"
ALIGN_LIMIT = 4_000_000
"""Cells above which the sequences are not aligned block by block.

A cell is a baseline exchange times a candidate exchange, after a common head and tail are
set aside. Past the limit, equal fingerprints pair in order."""

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


@dataclass(frozen=True)
class Baseline:
    label: str | None
    """The baseline's label; None: no exchange is an original."""
    chosen_by: str
    """How the baseline label is chosen: `replays`, `option`, `first capture` or `none`.

    `replays`: the label the replays came from. `option`: `--baseline`. `first capture`: the
    label of the first original loaded."""


@dataclass(frozen=True)
class Pairing:
    pairs: pd.DataFrame
    """One row per candidate exchange paired, in the order the analysis meets them.

    `c` and `b` are the candidate's and the baseline's rows in the index. `place` is the
    pair's place among all: for a replay, its candidate's row; for a pair by content, the
    index's length plus its link's number. `pairing` says how it is paired."""
    unmatched: pd.DataFrame
    """`UNMATCHED_COLUMNS`: exchanges of independent captures that found no counterpart."""
    baseline: Baseline


def text(column: pd.Series) -> pd.Series:
    """Read a column of the index as text, a missing value empty."""
    return column.astype("str").fillna("")


def text_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Read a column as `text` does, each distinct value once: a code per row, and the texts.

    A million exchanges of a few labels are then a million numbers, not a million strings."""
    codes, values = pd.factorize(column, use_na_sentinel=False)
    merged, texts = pd.factorize(text(pd.Series(values)))
    return merged[codes], np.asarray(texts, dtype=object)


def factorize_together(
    *columns: pd.Series | np.ndarray,
) -> tuple[np.ndarray, list[tuple[Any, ...]]]:
    """Number the distinct rows of these columns in order of appearance, and list them.

    It gives what factorizing a `MultiIndex` of them gives, without the tuple of every row
    that a `MultiIndex` builds: a second a million rows. The distinct rows are read back from
    the numbers, so no column is turned into Python objects but for those rows."""
    codes = np.zeros(len(columns[0]), dtype=np.int64)
    steps = []
    for column in columns:
        own, values = pd.factorize(column, use_na_sentinel=False)
        codes *= len(values)  # in place: the columns may have millions of rows
        codes += own
        codes, seen = pd.factorize(codes)
        steps.append((np.asarray(values, dtype=object), len(values), seen))
    picked = []
    at = np.arange(len(steps[-1][2]))
    for values, size, seen in reversed(steps):
        place, own = np.divmod(seen[at], size)
        firsts = values[own]
        firsts[pd.isna(firsts)] = np.nan  # as a MultiIndex keeps a missing value
        picked.append(firsts.tolist())
        at = place
    return codes, list(zip(*reversed(picked), strict=True))


def sorted_codes(column: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Number a column's texts in their sorted order, missing ones -1, and list them so.

    The column is read as objects: a category's own order is not the texts'."""
    codes, values = pd.factorize(column.to_numpy(dtype=object), sort=True)
    return codes, np.asarray(values, dtype=object)


def index_in(column: pd.Series, values: pd.Series) -> np.ndarray:
    """Place each text of `column` at the first of the texts `values` it equals, else -1.

    Arrow compares the two columns as they are, with no Python object made of each text:
    pandas makes one, a quarter of a second for 100k."""
    texts, value_set = (
        pa.array(c, type=pa.large_string(), from_pandas=True) for c in (column, values)
    )
    found = pc.index_in(texts, value_set=value_set)
    return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


def choose_baseline(exchanges: pd.DataFrame, requested: str | None = None) -> Baseline:
    """Choose the baseline label as the module's docstring says.

    A `requested` label that no original has, or that contradicts what the replays were replayed
    from, is a `UsageError`."""
    original = exchanges["replay_of"].isna().to_numpy()
    labels = text(exchanges["label"])[original]
    known = list(pd.unique(labels))
    replayed = index_in(exchanges["id"][original], exchanges["replay_of"].dropna()) >= 0
    from_replays = list(pd.unique(labels[replayed]))
    if requested is not None and requested not in known:
        named = ", ".join(known) or "none"
        if requested in set(text(exchanges["label"])):
            raise UsageError(
                f"--baseline {requested}: its exchanges are all replays, which are compared "
                f"with what they replay; a baseline is a label of originals ({named})"
            )
        raise UsageError(f"--baseline {requested}: no capture has that label (labels: {named})")
    if from_replays:
        if requested is not None and requested not in from_replays:
            raise UsageError(
                f"--baseline {requested}: the replays in these files were replayed from "
                f"{', '.join(from_replays)}"
            )
        return Baseline(requested or from_replays[0], "replays")
    if requested is not None:
        return Baseline(requested, "option")
    if known:
        return Baseline(known[0], "first capture")
    return Baseline(None, "none")


def align(a: Sequence[str], b: Sequence[str]) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Pair the positions of `a` and `b` that hold the same call, as `(pairs, only_a, only_b)`.

    A common head and tail pair as they are. The middle is aligned block by block and its equal
    blocks pair, with `ALIGN_LIMIT` bounding the work; then what is left pairs by equal value in
    order. Positions come ascending."""
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
    """Order originals as calls were made: sessions by start, then `seq`, then start time.

    SDK retries are left out."""
    retry = pd.to_numeric(originals["retry"], errors="coerce").fillna(0) > 0
    ex = originals.loc[~retry.to_numpy()]
    started = pd.to_numeric(ex["started"], errors="coerce").fillna(0.0)
    session = text(ex["session"])
    return ex.assign(
        _session=session,
        _began=started.groupby(session).transform("min"),
        _seq=pd.to_numeric(ex["seq"], errors="coerce").fillna(0),
        _started=started,
    ).sort_values(["_began", "_session", "_seq", "_started"], kind="stable")


def content_links(
    exchanges: pd.DataFrame, baseline: str
) -> tuple[list[tuple[int, int]], pd.DataFrame]:
    """Pair the originals of other labels with the baseline's by their request `fingerprint`.

    The pairs are `(candidate, baseline)` rows of `exchanges`, as the module's docstring says;
    what found no counterpart comes as `UNMATCHED_COLUMNS` rows."""
    original = exchanges["replay_of"].isna().to_numpy()
    originals = exchanges.loc[original].assign(label=text(exchanges["label"])[original])
    if originals["label"].nunique() < 2:
        return [], pd.DataFrame(columns=UNMATCHED_COLUMNS)
    ordered = _in_call_order(originals)
    rows = ordered.index.to_numpy().tolist()
    prints = ordered["fingerprint"].tolist()
    by_label: dict[str, list[int]] = defaultdict(list)
    for pos, label in enumerate(ordered["label"].tolist()):
        by_label[label].append(pos)
    base = by_label.pop(baseline, [])
    ids = ordered["id"].tolist()
    meta = list(
        zip(
            text(ordered["session"]).tolist(),
            text(ordered["method"]).tolist(),
            text(ordered["endpoint"]).tolist(),
            strict=True,
        )
    )
    links: list[tuple[int, int]] = []
    unmatched = []
    for label, cand in by_label.items():
        pairs, only_base, only_cand = align([prints[p] for p in base], [prints[p] for p in cand])
        links += [(rows[cand[j]], rows[base[i]]) for i, j in pairs]
        unmatched += [
            (label, baseline, ONLY_BASELINE, ids[base[i]], *meta[base[i]]) for i in only_base
        ]
        unmatched += [
            (label, baseline, ONLY_CANDIDATE, ids[cand[j]], *meta[cand[j]]) for j in only_cand
        ]
    return links, pd.DataFrame.from_records(unmatched, columns=UNMATCHED_COLUMNS)


def unreplayed(
    exchanges: pd.DataFrame, c: np.ndarray, b: np.ndarray, baseline: str
) -> pd.DataFrame:
    """List the baseline's originals a replayed-to label has no replay of, as unmatched rows.

    `c` and `b` are the rows of replays and of their originals. Only the originals of a session
    and listener the label has replays of count: a session not replayed, or the inner hops a
    replay leaves out, were never meant for it. The rest were, and the label never answered
    them (a replay stopped or filtered, a mirror dropped): not judged."""
    codes, labels = text_codes(exchanges["label"])
    at = np.flatnonzero(labels == baseline)
    ours = codes == at[0] if len(at) else np.zeros(len(exchanges), dtype=bool)
    scope, _ = factorize_together(exchanges["session"], exchanges["listener"])
    base = np.flatnonzero(ours & exchanges["replay_of"].isna().to_numpy())
    from_base = ours[b]
    meta = exchanges[["id", "session", "method", "endpoint"]]
    out = []
    for code in np.unique(codes[c[from_base]]).tolist():
        if labels[code] == baseline:
            continue
        replayed = b[from_base & (codes[c] == code)]
        missing = base[~np.isin(base, replayed) & np.isin(scope[base], scope[replayed])]
        rows = meta.iloc[missing]
        out.append(
            pd.DataFrame(
                {
                    "label": labels[code],
                    "baseline_label": baseline,
                    "side": ONLY_BASELINE,
                    "id": rows["id"].to_numpy(),
                    "session": text(rows["session"]).to_numpy(),
                    "method": text(rows["method"]).to_numpy(),
                    "endpoint": text(rows["endpoint"]).to_numpy(),
                },
                columns=UNMATCHED_COLUMNS,
            )
        )
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=UNMATCHED_COLUMNS)


def pair_exchanges(exchanges: pd.DataFrame, *, baseline: str | None = None) -> Pairing:
    """Pair replays with their originals, then the originals of other labels with the baseline's.

    Replays come in their order; the others pair by content through `content_links`. `exchanges`
    is the index, its ids unique, its rows numbered from 0."""
    chosen = choose_baseline(exchanges, baseline)
    replayed = exchanges["replay_of"].notna().to_numpy()
    replays = np.flatnonzero(replayed)
    of = index_in(exchanges["replay_of"].iloc[replays], exchanges["id"])
    found = (of >= 0) & ~replayed[np.maximum(of, 0)]
    c, b = replays[found], of[found]
    kinds = [REPLAY] * len(c)
    unmatched = pd.DataFrame(columns=UNMATCHED_COLUMNS)
    if chosen.label is not None:
        links, unmatched = content_links(exchanges, chosen.label)
        if links:
            linked = np.asarray(links, dtype=np.int64)
            c, b = np.concatenate([c, linked[:, 0]]), np.concatenate([b, linked[:, 1]])
            kinds += [CONTENT] * len(links)
    n = len(exchanges)
    place = np.concatenate([c[: len(replays[found])], n + np.arange(len(c) - len(replays[found]))])
    pairs = pd.DataFrame(
        {
            "c": c.astype(np.int64),
            "b": b.astype(np.int64),
            "pairing": pd.Categorical(kinds, categories=[REPLAY, CONTENT]),
            "place": place.astype(np.int64),
        }
    )
    return Pairing(pairs, unmatched, chosen)
