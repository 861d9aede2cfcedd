"""The report's content, computed once from an analysis: what every section shows.

Plain dataclasses built with pandas; the templates only lay them out and `summary.json`
serialises them. Repeats are folded (identical findings: `wirediff.reports.findings`,
identical stream alignments, identical failing chains, skipped steps with the same reason),
only the first `max_examples` of each are named and only the first is laid out, within a size
budget (`wirediff.reports.examples`), so the size of a report grows with the number of
*distinct* findings, not of exchanges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import pandas as pd

from wirediff._types import Record
from wirediff.analysis.comparison.kinds import SEVERITIES, severity_rank
from wirediff.analysis.comparison.pairing import CONTENT, REPLAY, Baseline
from wirediff.analysis.comparison.verdicts import FAMILIES, exchange_outcomes, roles, verdicts
from wirediff.analysis.comparison.verdicts import VERDICTS as COMPAT_VERDICTS
from wirediff.analysis.diagnosis.diagnose import DIAGNOSIS_COLUMNS
from wirediff.reports.captures import (
    SKIPPED,
    Capture,
    SkippedGroup,
    UnmatchedGroup,
    captures,
    skipped_groups,
    unmatched_groups,
)
from wirediff.reports.chains import NO_ENDPOINT, ChainGroup, chain_groups
from wirediff.reports.examples import lay_out
from wirediff.reports.findings import (
    Finding,
    KindGroup,
    findings_frame,
    fold_findings,
    group_findings,
    kind_order,
)
from wirediff.reports.formatters import anchor, status_class
from wirediff.reports.latency import Latency, latency
from wirediff.reports.timeline import Timeline, timelines

__all__ = [
    "DEFAULT_MAX_EXAMPLES",
    "MAX_CELL_DIAGNOSES",
    "MAX_CELL_FINDINGS",
    "MAX_TIMELINES",
    "OUTCOMES",
    "VERDICTS",
    "AnalysisLike",
    "ReportModel",
    "Verdict",
    "build",
]


VERDICTS = (*COMPAT_VERDICTS, "untested")
"""Drop-in verdicts (`wirediff.analysis.comparison.verdicts`), best to worst, and `untested`
for a cell nothing exercised."""
OUTCOMES = ("ok", *SEVERITIES[::-1], "unsupported", SKIPPED)
"""What one exchange came to: no finding (`ok`), its worst finding's severity, a route-level
failure, or a replay step not sent."""
DEFAULT_MAX_EXAMPLES = 3
"""Examples kept with per-exchange detail for each folded finding, chain and alignment."""
MAX_TIMELINES = 60
"""Stream alignments drawn; the rest are counted."""
MAX_CELL_DIAGNOSES = 8
"""Diagnoses listed under one matrix cell's evidence; the rest are counted."""
MAX_CELL_FINDINGS = 10
"""Findings listed under one matrix cell's evidence; the rest are counted."""


class AnalysisLike(Protocol):
    """What the report reads from `wirediff.analysis.comparison.analyze.Analysis`."""

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
    def verdicts(self) -> pd.DataFrame: ...
    @property
    def unmatched(self) -> pd.DataFrame: ...
    @property
    def baseline(self) -> Baseline: ...


# --- verdicts, the matrix -------------------------------------------------------------


@dataclass(slots=True)
class Verdict:
    """One backend's drop-in verdict for one endpoint family (and transport)."""

    label: str
    role: str
    family: str
    transport: str
    verdict: str
    reasons: list[str]
    breaking: int
    deviations: int
    cosmetic: int
    exchanges: int
    anchor: str = ""

    @property
    def name(self) -> str:
        return self.family if self.transport == "http" else f"{self.family} ({self.transport})"


def verdict_rows(frame: pd.DataFrame) -> list[Verdict]:
    return [
        Verdict(
            str(r["label"]),
            str(r["role"]),
            str(r["family"]),
            str(r["transport"]),
            str(r["verdict"]),
            [str(x) for x in r["reasons"]],
            int(r["breaking"]),
            int(r["deviations"]),
            int(r["cosmetic"]),
            int(r["exchanges"]),
        )
        for r in frame.to_dict("records")
    ]


@dataclass(slots=True)
class Cell:
    """One endpoint on one backend: its verdict and links to the evidence."""

    anchor: str
    label: str
    endpoint: str
    family: str
    outcomes: dict[str, int]
    findings: list[Finding] = field(default_factory=list)
    chains: list[ChainGroup] = field(default_factory=list)
    skipped: list[SkippedGroup] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Exchanges judged (skipped replay steps are not)."""
        return sum(n for v, n in self.outcomes.items() if v != SKIPPED)

    verdict: str = "untested"


@dataclass(slots=True)
class Backend:
    label: str
    role: str
    exchanges: int
    endpoints: list[str]
    status_mix: list[tuple[str, int, str]]
    by_kind: dict[str, int]
    families: list[Verdict]
    outcomes: dict[str, int]
    captures: list[Capture]
    skipped: list[SkippedGroup]
    pairing: dict[str, int] = field(default_factory=dict)
    """As a candidate: its exchanges paired with the baseline's, by `replay` and `content`."""
    unmatched: dict[str, int] = field(default_factory=dict)
    """As a candidate of independent captures: calls only one side made, by side."""


# --- the whole report -------------------------------------------------------------------


@dataclass(slots=True)
class ReportModel:
    generated_at: str
    labels: list[str]
    roles: dict[str, str]
    totals: dict[str, int]
    backends: list[Backend]
    endpoints: list[tuple[str, str]]
    cells: dict[tuple[str, str], Cell]
    verdicts: list[Verdict]
    baseline_flawed: bool
    """The baseline itself breaks a reference: every comparison inherits its flaws."""
    findings: list[Finding]
    kinds: list[KindGroup]
    timelines: list[Timeline]
    chains: list[ChainGroup]
    skipped: list[SkippedGroup]
    unmatched: list[UnmatchedGroup]
    unmatched_rows: list[dict[str, Any]]
    """Every unmatched exchange (`pairing.UNMATCHED_COLUMNS`), for summary.json."""
    baseline_chosen_by: str
    """How the baseline label was chosen (`wirediff.analysis.comparison.pairing.Baseline`)."""
    latency: Latency
    findings_frame: pd.DataFrame
    diagnoses: pd.DataFrame
    records_by_id: Mapping[str, Record]
    max_examples: int

    def cell(self, label: str, endpoint: str) -> Cell:
        return self.cells[(label, endpoint)]

    @property
    def filter_endpoints(self) -> list[str]:
        return [endpoint for _, endpoint in self.endpoints]

    @property
    def filter_kinds(self) -> list[str]:
        return sorted((k.kind for k in self.kinds), key=kind_order)


def _in_order(counts: Mapping[Any, Any]) -> dict[str, int]:
    """Exchange outcomes counted, in `OUTCOMES` order."""
    return {o: int(counts[o]) for o in OUTCOMES if o in counts}


def build(
    analysis: AnalysisLike,
    diagnoses: pd.DataFrame,
    *,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
) -> ReportModel:
    """Everything the report shows, from an analysis and its diagnoses."""
    ex = analysis.exchanges.assign(
        label=analysis.exchanges["label"].fillna("").astype(str),
        family=analysis.exchanges["family"].fillna("other").astype(str),
        endpoint=analysis.exchanges["endpoint"].fillna(NO_ENDPOINT).astype(str),
    )
    pairs = analysis.pairs
    diagnoses = diagnoses if diagnoses is not None else pd.DataFrame(columns=DIAGNOSIS_COLUMNS)
    role_of = roles(ex, pairs)
    labels = list(role_of)
    records = analysis.records_by_id
    drop_in = verdict_rows(analysis.verdicts)
    fam_order = {f: i for i, f in enumerate(FAMILIES)}
    drop_in.sort(
        key=lambda v: (labels.index(v.label), fam_order.get(v.family, len(fam_order)), v.transport)
    )

    ffr = findings_frame(analysis.divergences, analysis.conformance)
    tls, timeline_of = timelines(pairs, records, max_examples=max_examples, anchor=anchor)
    drawn = {t.anchor for t in tls[:MAX_TIMELINES]}
    timeline_of = {pid: a for pid, a in timeline_of.items() if a in drawn}
    folded = fold_findings(ffr, max_examples, timeline_of)
    chains = chain_groups(diagnoses, records)
    skipped = skipped_groups(ex, records, max_examples)

    ex = ex.assign(outcome=exchange_outcomes(ex, ffr, records))
    fam_rank = {f: i for i, f in enumerate(FAMILIES)}
    distinct = ex[["family", "endpoint"]].drop_duplicates()
    endpoints = sorted(
        zip(distinct["family"].tolist(), distinct["endpoint"].tolist(), strict=True),
        key=lambda fe: (fam_rank.get(fe[0], len(fam_rank)), fe[1]),
    )
    family_of = {e: f for f, e in endpoints}
    cells = {
        (label, endpoint): Cell(
            anchor("cell", label, endpoint), label, endpoint, family_of[endpoint], {}
        )
        for label in labels
        for _, endpoint in endpoints
    }
    sizes = ex.groupby(["label", "endpoint", "outcome"]).size().reset_index(name="n")
    sizes = sizes.assign(_o=sizes["outcome"].map(OUTCOMES.index)).sort_values(
        ["label", "endpoint", "_o"]
    )
    for lab, endpoint, what, n in zip(
        *(sizes[c].astype(str).tolist() for c in ("label", "endpoint", "outcome")),
        sizes["n"].tolist(),
        strict=True,
    ):
        cells[(lab, endpoint)].outcomes[what] = int(n)
    by_endpoint = verdicts(ex, ffr, records, pairs, by=("endpoint",))
    for lab, endpoint, verdict, reasons in zip(
        *(by_endpoint[c].tolist() for c in ("label", "endpoint", "verdict", "reasons")),
        strict=True,
    ):
        cell = cells.get((str(lab), str(endpoint)))
        if cell is not None:
            cell.verdict, cell.reasons = str(verdict), list(reasons)
    for v in drop_in:
        mine = [
            c for c in cells.values() if c.label == v.label and c.family == v.family and c.total
        ]
        same = [c for c in mine if c.verdict == v.verdict] or mine
        v.anchor = same[0].anchor if same else ""
    for f in sorted(folded, key=lambda f: (severity_rank(f.severity), -f.count)):
        cell = cells.get((f.label, f.endpoint))
        if cell is not None:
            cell.findings.append(f)
    for g in chains:
        cell = cells.get((g.label, g.endpoint))
        if cell is not None:
            cell.chains.append(g)
    for s in skipped:
        cells[(s.label, s.endpoint)].skipped.append(s)
    captures_of = captures(ex, records)

    kind_counts: dict[str, dict[str, int]] = {}
    if len(ffr):
        per = ffr.groupby(["label", "kind"]).size().reset_index(name="n")
        for lab, kind, n in zip(
            per["label"].tolist(), per["kind"].tolist(), per["n"].tolist(), strict=True
        ):
            kind_counts.setdefault(str(lab), {})[str(kind)] = int(n)
    unmatched = unmatched_groups(analysis.unmatched, max_examples)
    by_side: dict[tuple[str, str], int] = {}
    for lab, side in zip(analysis.unmatched["label"], analysis.unmatched["side"], strict=True):
        by_side[(str(lab), str(side))] = by_side.get((str(lab), str(side)), 0) + 1
    paired: dict[tuple[str, str], int] = {}
    for lab, how in zip(pairs["label"], pairs["pairing"], strict=True):
        paired[(str(lab), str(how))] = paired.get((str(lab), str(how)), 0) + 1
    backends = []
    for label in labels:
        part = ex[ex["label"] == label]
        no_answer = part["error_kind"].where(part["error_kind"] == SKIPPED, "none")
        status = part["status"].astype(object).where(part["status"].notna(), no_answer)
        mix = status.astype(str).value_counts()
        families = [v for v in drop_in if v.label == label]
        kinds = kind_counts.get(label, {})
        backends.append(
            Backend(
                label,
                role_of[label],
                len(part),
                sorted(part["endpoint"].unique().tolist()),
                [(str(s), int(n), status_class(s)) for s, n in sorted(mix.items())],
                {k: kinds[k] for k in sorted(kinds, key=kind_order)},
                families,
                _in_order(part["outcome"].value_counts().to_dict()),
                captures_of.get(label, []),
                [s for s in skipped if s.label == label],
                {how: paired.get((label, how), 0) for how in (REPLAY, CONTENT)}
                if role_of[label] == "candidate"
                else {},
                {side: n for (lab, side), n in by_side.items() if lab == label},
            )
        )

    kind_groups = group_findings(folded)
    lay_out(kind_groups, records)
    totals = {
        "exchanges": len(ex),
        "pairs": len(pairs),
        "divergences": len(analysis.divergences),
        "conformance": len(analysis.conformance),
        "findings": len(folded),
        "diagnoses": len(diagnoses),
        "streams": len(tls),
        "skipped": sum(s.count for s in skipped),
        "unmatched": len(analysis.unmatched),
    }
    return ReportModel(
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        labels=labels,
        roles=role_of,
        totals=totals,
        backends=backends,
        endpoints=endpoints,
        cells=cells,
        verdicts=drop_in,
        baseline_flawed=any(v.role == "baseline" and (v.breaking or v.deviations) for v in drop_in),
        findings=folded,
        kinds=kind_groups,
        timelines=tls,
        chains=chains,
        skipped=skipped,
        unmatched=unmatched,
        unmatched_rows=[
            {str(k): (None if pd.isna(v) else str(v)) for k, v in row.items()}
            for row in analysis.unmatched.to_dict("records")
        ],
        baseline_chosen_by=analysis.baseline.chosen_by,
        latency=latency(ex, analysis.events, labels),
        findings_frame=ffr,
        diagnoses=diagnoses,
        records_by_id=records,
        max_examples=max_examples,
    )
