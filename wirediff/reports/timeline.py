"""Align a pair's two SSE event sequences as a stream timeline, with per-event timing.

Events are labelled exactly as `wirediff.analysis.comparison.observe` labels them, so a timeline
row and an `events[label]` finding name the same thing. Runs of deltas collapse into one row, as
in `response.output_text.delta+` x14, because how many deltas arrive is generated, not protocol.
Pairs whose two collapsed sequences are the same fold into one timeline. A replay step that was
skipped, never sent, has no stream to align: `wirediff.reports.captures` lists it with its
reason, and it is not drawn as every event missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

import pandas as pd

from wirediff._types import Event, Record
from wirediff.analysis.comparison.observe import event_label

__all__ = [
    "Alignment",
    "Alignments",
    "Timeline",
    "collect_alignments",
    "finish_alignments",
]

CHAT_FAMILIES = frozenset({"chat.completions", "completions"})
MAX_TICKS = 400
"""Event ticks drawn per lane; a longer stream is sampled evenly."""
MARK_KINDS = {"missing": "event_missing", "extra": "event_extra", "moved": "event_order"}


@dataclass(slots=True)
class Run:
    """Hold one event, or a run of deltas of one type, with its timing and sequence numbers."""

    label: str
    n: int = 1
    t_first: float | None = None
    t_last: float | None = None
    seq_first: int | None = None
    seq_last: int | None = None
    partial: bool = False

    @property
    def seq(self) -> str:
        if self.seq_first is None:
            return ""
        if self.seq_last is None or self.seq_last == self.seq_first:
            return str(self.seq_first)
        return f"{self.seq_first}-{self.seq_last}"


@dataclass(slots=True)
class Row:
    """Hold one aligned row: `same`, `missing`, `extra` or `moved`.

    `missing` is on the baseline only, `extra` on the candidate only."""

    mark: str
    baseline: Run | None
    candidate: Run | None


@dataclass(slots=True)
class Timeline:
    """Hold the aligned streams of one or more pairs with the same event sequences."""

    anchor: str
    label: str
    baseline_label: str
    endpoint: str
    pair_ids: list[str]
    count: int
    rows: list[Row]
    baseline_ticks: list[float] = field(default_factory=list)
    candidate_ticks: list[float] = field(default_factory=list)

    @property
    def marks(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.rows:
            out[row.mark] = out.get(row.mark, 0) + 1
        return out

    @property
    def diverges(self) -> bool:
        return any(row.mark != "same" for row in self.rows)

    @property
    def kinds(self) -> list[str]:
        return sorted({MARK_KINDS[r.mark] for r in self.rows if r.mark in MARK_KINDS})

    @property
    def t_max(self) -> float:
        return max([*self.baseline_ticks, *self.candidate_ticks, 1.0])


def _events(record: Record | None) -> list[Event] | None:
    resp = record.get("response") if record is not None else None
    return resp["events"] if resp is not None else None


def is_chat(record: Record | None) -> bool:
    return record is not None and record["tags"].get("family") in CHAT_FAMILIES


def runs(record: Record | None) -> list[Run]:
    """Group the record's events into runs, with timing and sequence numbers."""
    chat = is_chat(record)
    out: list[Run] = []
    for ev in _events(record) or ():
        label = event_label(ev, chat)
        if label.endswith(".delta"):
            label += "+"
        data = ev.get("data")
        seqno = data.get("sequence_number") if isinstance(data, dict) else None
        seqno = seqno if isinstance(seqno, int) else None
        t = ev.get("t_ms")
        t = float(t) if isinstance(t, int | float) else None
        if out and out[-1].label == label and label.endswith("+"):
            last = out[-1]
            last.n += 1
            last.t_last = t
            last.seq_last = seqno if seqno is not None else last.seq_last
            last.partial = last.partial or bool(ev.get("partial"))
            continue
        out.append(Run(label, 1, t, t, seqno, seqno, bool(ev.get("partial"))))
    return out


def align(base: Sequence[Run], cand: Sequence[Run]) -> list[Row]:
    """Align two run sequences by label; a label both dropped and added has moved."""
    bl = [r.label for r in base]
    cl = [r.label for r in cand]
    ops = SequenceMatcher(None, bl, cl, autojunk=False).get_opcodes()
    dropped = {bl[i] for tag, i1, i2, _, _ in ops if tag != "equal" for i in range(i1, i2)}
    added = {cl[j] for tag, _, _, j1, j2 in ops if tag != "equal" for j in range(j1, j2)}
    moved = dropped & added
    rows: list[Row] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            rows.extend(Row("same", base[i1 + k], cand[j1 + k]) for k in range(i2 - i1))
            continue
        rows.extend(
            Row("moved" if bl[i] in moved else "missing", base[i], None) for i in range(i1, i2)
        )
        rows.extend(
            Row("moved" if cl[j] in moved else "extra", None, cand[j]) for j in range(j1, j2)
        )
    return rows


def ticks(record: Record | None) -> list[float]:
    """Sample a stream's event times evenly down to MAX_TICKS."""
    times = [
        float(t) for ev in _events(record) or () if isinstance(t := ev.get("t_ms"), int | float)
    ]
    if len(times) <= MAX_TICKS:
        return times
    step = len(times) / MAX_TICKS
    return [times[int(i * step)] for i in range(MAX_TICKS)] + [times[-1]]


@dataclass(slots=True)
class Alignment:
    """Fold streamed pairs with the same backends, endpoint and event sequences.

    The first pair, by `first`, its place among all the captures' pairs, is aligned, and the
    first pair ids are kept."""

    first: Any
    pair_ids: list[tuple[Any, str]]
    count: int
    rows: list[Row]
    baseline_ticks: list[float]
    candidate_ticks: list[float]


Alignments = dict[tuple[Any, ...], Alignment]


def collect_alignments(
    pairs: pd.DataFrame, read: Callable[[Sequence[int]], Sequence[Record]], *, max_examples: int
) -> tuple[Alignments, dict[str, tuple[Any, ...]]]:
    """Fold streamed pairs by backends, endpoint and both collapsed label sequences.

    It also maps `pair_id → key` for every streamed pair. `pairs` come in their order, both sides
    sent, with `pair_id`, `label`, `baseline_label`, `endpoint`, `place`; `b` and `c`, the rows
    of baseline and candidate, whose records `read` gives; and `b_labels` and `c_labels`, each
    side's `stream_labels`. The first pair of each fold is aligned."""
    streamed = pairs[(pairs["b_labels"].map(len) + pairs["c_labels"].map(len)).to_numpy() > 0]
    if streamed.empty:
        return {}, {}
    streamed = streamed.assign(
        _b=pd.factorize(streamed["b_labels"])[0], _c=pd.factorize(streamed["c_labels"])[0]
    )
    groups: Alignments = {}
    by_pair: dict[str, tuple[Any, ...]] = {}
    folds = streamed.groupby(["label", "baseline_label", "endpoint", "_b", "_c"], sort=False)
    firsts = folds.head(1)
    records = read([r for b, c in zip(firsts["b"], firsts["c"], strict=True) for r in (b, c)])
    for n, (_, group) in enumerate(folds):
        head = group.iloc[0]
        key: tuple[Any, ...] = (head["label"], head["baseline_label"], head["endpoint"])
        key += (head["b_labels"], head["c_labels"])
        base, cand = records[2 * n], records[2 * n + 1]
        rows = align(runs(base), runs(cand))
        places, ids = group["place"].tolist(), group["pair_id"].tolist()
        groups[key] = Alignment(
            places[0],
            list(zip(places[:max_examples], ids[:max_examples], strict=True)),
            len(group),
            rows,
            ticks(base),
            ticks(cand),
        )
        by_pair.update(dict.fromkeys(ids, key))
    return groups, by_pair


def finish_alignments(
    groups: Alignments, anchor: Callable[..., str]
) -> tuple[list[Timeline], dict[tuple[Any, ...], str]]:
    """Order the timelines diverging first, then by count, and give each group's anchor."""
    out: list[Timeline] = []
    anchors: dict[tuple[Any, ...], str] = {}
    ordered = sorted(groups.items(), key=lambda kv: kv[1].first)
    for n, (key, group) in enumerate(ordered):
        label, baseline_label, endpoint, _, _ = key
        tl = Timeline(
            anchor=anchor("tl", n, label, endpoint),
            label=label,
            baseline_label=baseline_label,
            endpoint=endpoint,
            pair_ids=[pid for _, pid in group.pair_ids],
            count=group.count,
            rows=group.rows,
            baseline_ticks=group.baseline_ticks,
            candidate_ticks=group.candidate_ticks,
        )
        out.append(tl)
        anchors[key] = tl.anchor
    out.sort(key=lambda t: (not t.diverges, -t.count, t.label, t.endpoint))
    return out, anchors
