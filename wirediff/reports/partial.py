"""What the report, `summary.json` and `check` need of one part of the captures, in a form
that merges: counts, verdict cells, folded findings with their first examples, stream
alignments, captures and their clients, skipped steps, latency sketches.

A part is any set of originals with all their replays (`wirediff.engine` splits the
captures so); every "first" is decided by the row's place among all the captures' rows
(`order`), never by the order parts are merged in, so merging is associative and
order-free, and the merge of the parts is the `Partial` of the whole. Examples and
listed ids are kept to a bound, so a `Partial` stays small whatever the traffic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pandas as pd

from wirediff._support import STOPPED_IN_FLIGHT, error_kind, merge_by_key
from wirediff._types import Record
from wirediff.analysis.comparison.analyze import findings_of
from wirediff.analysis.comparison.kinds import severity_rank
from wirediff.analysis.comparison.pairing import CONTENT, Baseline
from wirediff.analysis.comparison.verdicts import (
    Cells,
    exchange_outcomes,
    verdict_cells,
)
from wirediff.reports.captures import (
    SKIPPED,
    CaptureCounts,
    Skips,
    collect_captures,
    collect_skipped,
    merge_skipped,
)
from wirediff.reports.findings import Folds, collect_folds, findings_frame
from wirediff.reports.hops import NO_ENDPOINT
from wirediff.reports.latency import LatencyCounts, collect_latency
from wirediff.reports.timeline import Alignments, collect_alignments

__all__ = ["AnalysisLike", "Partial", "collect", "finding_order", "gate_counts", "pair_places"]


class AnalysisLike(Protocol):
    """What a `Partial` is collected from (`wirediff.analysis.comparison.analyze.Analysis`)."""

    @property
    def records_by_id(self) -> Mapping[str, Record]: ...
    @property
    def exchanges(self) -> pd.DataFrame: ...
    @property
    def events(self) -> pd.DataFrame: ...
    @property
    def pairs(self) -> pd.DataFrame: ...
    @property
    def divergences(self) -> pd.DataFrame: ...
    @property
    def conformance(self) -> pd.DataFrame: ...
    @property
    def unmatched(self) -> pd.DataFrame: ...
    @property
    def baseline(self) -> Baseline: ...


GateCounts = dict[tuple[str, str, str], tuple[int, frozenset[str]]]
"""Per (label, family, transport): the worst severity rank of its findings, and their kinds."""


@dataclass
class Partial:
    """One part of the captures, reduced to what merges (see the module's docstring)."""

    max_examples: int
    exchanges: int = 0
    pairs: int = 0
    divergences: int = 0
    conformance: int = 0
    labels: set[str] = field(default_factory=set)
    baseline_labels: set[str] = field(default_factory=set)
    candidate_labels: set[str] = field(default_factory=set)
    endpoints: set[tuple[str, str]] = field(default_factory=set)
    """(family, endpoint)"""
    label_endpoints: set[tuple[str, str]] = field(default_factory=set)
    outcomes: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    """(label, endpoint, outcome) → exchanges"""
    status_mix: Counter[tuple[str, str]] = field(default_factory=Counter)
    kinds: Counter[tuple[str, str]] = field(default_factory=Counter)
    paired: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(candidate label, `pairing`: replay or content) → pairs"""
    family_cells: Cells = field(default_factory=dict)
    """The drop-in verdicts' cells: label, family, transport."""
    endpoint_cells: Cells = field(default_factory=dict)
    """The matrix's cells: label, endpoint."""
    gate: GateCounts = field(default_factory=dict)
    captures: CaptureCounts = field(default_factory=dict)
    skipped: Skips = field(default_factory=dict)
    latency: LatencyCounts = field(default_factory=dict)
    alignments: Alignments = field(default_factory=dict)
    folds: Folds = field(default_factory=dict)

    def merge(self, other: Partial) -> Partial:
        """Add `other` into this one (and return it)."""
        n = self.max_examples
        self.exchanges += other.exchanges
        self.pairs += other.pairs
        self.divergences += other.divergences
        self.conformance += other.conformance
        self.labels |= other.labels
        self.baseline_labels |= other.baseline_labels
        self.candidate_labels |= other.candidate_labels
        self.endpoints |= other.endpoints
        self.label_endpoints |= other.label_endpoints
        self.outcomes.update(other.outcomes)
        self.status_mix.update(other.status_mix)
        self.kinds.update(other.kinds)
        self.paired.update(other.paired)
        merge_by_key(self.family_cells, other.family_cells)
        merge_by_key(self.endpoint_cells, other.endpoint_cells)
        for key, (rank, kinds) in other.gate.items():
            mine = self.gate.get(key)
            self.gate[key] = (
                (rank, kinds) if mine is None else (min(mine[0], rank), mine[1] | kinds)
            )
        merge_by_key(self.captures, other.captures)
        merge_skipped(self.skipped, other.skipped, n)
        merge_by_key(self.latency, other.latency)
        merge_by_key(self.alignments, other.alignments, lambda a, b: a.merge(b, n))
        merge_by_key(self.folds, other.folds, lambda a, b: a.merge(b, n))
        return self


def pair_places(
    pairs: pd.DataFrame, place: Mapping[str, Any], linked: Mapping[str, int] | None = None
) -> list[tuple[Any, ...]]:
    """Where each pair stands among all the captures' pairs: the replays by their places,
    then the pairs by content in the order they were linked (`linked`: candidate id → its
    link's place among all; by default as they come)."""
    content = pairs["pairing"].eq(CONTENT).tolist()
    cands = pairs["candidate_id"].tolist()
    if linked is None:
        linked = {c: n for n, c in enumerate(c for c, k in zip(cands, content, strict=True) if k)}
    return [
        (1, linked[c]) if by_content else (0, place[c])
        for c, by_content in zip(cands, content, strict=True)
    ]


def finding_order(
    analysis: AnalysisLike, place: Mapping[str, Any], linked: Mapping[str, int] | None = None
) -> list[tuple[Any, ...]]:
    """Where each row of `findings_of(divergences, conformance)` stands among all the
    captures' findings, from the places of the records (`place`: id → position) and of the
    pairs (`pair_places`): the divergences group by original, in the order of its first
    pair whose candidate was sent; then the pairs' `client` rows, by pair; then the
    conformance rows, by record."""
    pairs, records = analysis.pairs, analysis.records_by_id
    first: dict[str, Any] = {}
    at_pair = pair_places(pairs, place, linked)
    for bid, cid, at in zip(
        pairs["baseline_id"].tolist(), pairs["candidate_id"].tolist(), at_pair, strict=True
    ):
        rec = records.get(cid)
        if rec is None or error_kind(rec) != SKIPPED:
            first.setdefault(bid, at)
    keys: list[tuple[Any, ...]] = []
    div = analysis.divergences
    rows = zip(
        div["kind"].tolist(), div["baseline_id"].tolist(), div["candidate_id"].tolist(), strict=True
    )
    pair_at = dict(zip(pairs["candidate_id"].tolist(), at_pair, strict=True))
    for i, (kind, bid, cid) in enumerate(rows):
        at = place[cid]
        mine = pair_at.get(cid, (0, at))
        keys.append((1, mine, at, i) if kind == "client" else (0, first.get(bid, mine), mine, i))
    for i, rid in enumerate(analysis.conformance["candidate_id"].tolist()):
        at = place[rid]
        keys.append((2, at, at, i))
    return keys


def gate_counts(findings: pd.DataFrame, exchanges: pd.DataFrame) -> GateCounts:
    """What `wirediff check` gates on: per label, family and transport of the exchange a
    finding is about, its worst severity and the kinds found; none about an exchange the
    capture's stop cut."""
    out: GateCounts = {}
    if findings.empty or exchanges.empty:
        return out
    judged = (exchanges["error_kind"] != STOPPED_IN_FLIGHT).fillna(True)
    exchanges = exchanges[judged.to_numpy(dtype=bool)]
    place = exchanges.assign(
        family=exchanges["family"].fillna("other").astype(str),
        transport=exchanges["transport"].fillna("http").astype(str),
    ).set_index("id")[["family", "transport"]]
    located = findings.drop(columns=["family"]).merge(
        place, left_on="candidate_id", right_index=True, how="inner"
    )
    keys = ["label", "family", "transport", "kind"]
    severity = located["severity"]
    rank_of = {s: severity_rank(s) for s in severity.unique().tolist()}
    kinds = (  # each cell's kinds with their worst rank: a few rows, whatever the findings
        located[keys]
        .astype(str)
        .assign(rank=severity.map(rank_of))
        .groupby(keys, sort=False)["rank"]
        .min()
    )
    for (label, family, transport, kind), worst in zip(kinds.index, kinds.tolist(), strict=True):
        key, rank = (label, family, transport), int(worst)
        mine = out.get(key)
        out[key] = (
            (rank, frozenset({kind})) if mine is None else (min(mine[0], rank), mine[1] | {kind})
        )
    return out


def collect(
    analysis: AnalysisLike,
    positions: Sequence[Any] | None = None,
    *,
    max_examples: int,
    report: bool = True,
    linked: Mapping[str, int] | None = None,
) -> tuple[Partial, pd.DataFrame, list[tuple[Any, ...]]]:
    """The `Partial` of an analysed part of the captures whose exchanges stand at
    `positions` among all the captures' (by default: this is all of them), its pairs by
    content at `linked` among all the links (`pair_places`); and its findings
    (`findings_frame`) with their places, for the tables that list every one. Without
    `report`, only what `check` needs."""
    records = analysis.records_by_id
    ex = analysis.exchanges.assign(
        label=analysis.exchanges["label"].fillna("").astype(str),
        family=analysis.exchanges["family"].fillna("other").astype(str),
        endpoint=analysis.exchanges["endpoint"].fillna(NO_ENDPOINT).astype(str),
    )
    pos = list(range(len(ex))) if positions is None else list(positions)
    place: dict[str, Any] = {}
    for rid, at in zip(ex["id"].tolist(), pos, strict=True):
        place.setdefault(rid, at)
    pairs = analysis.pairs
    order = finding_order(analysis, place, linked)
    findings = findings_of(analysis.divergences, analysis.conformance)
    ffr = findings_frame(analysis.divergences, analysis.conformance)
    outcomes = exchange_outcomes(ex, ffr, records)
    part = Partial(
        max_examples,
        exchanges=len(ex),
        pairs=len(pairs),
        divergences=len(analysis.divergences),
        conformance=len(analysis.conformance),
        labels=set(ex["label"].tolist()),
        baseline_labels=set(pairs["baseline_label"].dropna().astype(str)) if len(pairs) else set(),
        candidate_labels=set(pairs["label"].dropna().astype(str)) if len(pairs) else set(),
        family_cells=verdict_cells(
            analysis.exchanges,
            findings,
            records,
            positions=pos,
            finding_order=order,
            outcomes=outcomes,
            pairs=pairs,
        ),
        gate=gate_counts(findings, analysis.exchanges),
        paired=Counter(
            zip(
                pairs["label"].astype(str).tolist(),
                pairs["pairing"].astype(str).tolist(),
                strict=True,
            )
        ),
    )
    if not report:
        return part, ffr, order
    part.endpoints = set(zip(ex["family"].tolist(), ex["endpoint"].tolist(), strict=True))
    part.label_endpoints = set(zip(ex["label"].tolist(), ex["endpoint"].tolist(), strict=True))
    part.outcomes = Counter(
        zip(ex["label"].tolist(), ex["endpoint"].tolist(), outcomes, strict=True)
    )
    no_answer = ex["error_kind"].where(ex["error_kind"] == SKIPPED, "none")
    status = ex["status"].astype(object).where(ex["status"].notna(), no_answer).astype(str)
    status = status.where(~ex["soft_error"].eq(True).to_numpy(), status + " error body")
    part.status_mix = Counter(zip(ex["label"].tolist(), status.tolist(), strict=True))
    if len(ffr):
        part.kinds = Counter(zip(ffr["label"].tolist(), ffr["kind"].tolist(), strict=True))
    part.endpoint_cells = verdict_cells(
        ex,
        ffr,
        records,
        by=("endpoint",),
        positions=pos,
        finding_order=order,
        outcomes=outcomes,
        pairs=pairs,
    )
    part.captures = collect_captures(ex, records, pos)
    part.skipped = collect_skipped(ex, records, max_examples, pos)
    part.latency = collect_latency(ex, analysis.events)
    pair_order = pair_places(pairs, place, linked)
    part.alignments, timeline_of = collect_alignments(
        pairs, records, max_examples=max_examples, order=pair_order
    )
    part.folds = collect_folds(ffr, order, max_examples, timeline_of)
    return part, ffr, order
