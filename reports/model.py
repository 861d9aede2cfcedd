"""The report's content, computed once from an analysis: what every section shows.

Plain dataclasses built with pandas; the templates only lay them out and `summary.json`
serialises them. Repeats are folded (identical findings: `wirediff.reports.findings`,
identical stream alignments, identical diagnoses) and only the first `max_examples` of each
keep per-exchange detail, so the size of a report grows with the number of *distinct*
findings, not of exchanges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import pandas as pd

from wirediff._types import Record
from wirediff.analysis.diagnosis.diagnose import DIAGNOSIS_COLUMNS
from wirediff.reports.chains import NO_ENDPOINT, ChainGroup, chain_groups
from wirediff.reports.findings import (
    Finding,
    KindGroup,
    findings_frame,
    fold_findings,
    group_findings,
    kind_order,
)
from wirediff.reports.formatters import anchor, missing, status_class
from wirediff.reports.latency import Latency, latency
from wirediff.reports.timeline import Timeline, timelines

__all__ = [
    "DEFAULT_MAX_EXAMPLES",
    "MAX_CELL_DIAGNOSES",
    "MAX_CELL_FINDINGS",
    "MAX_TIMELINES",
    "VERDICTS",
    "AnalysisLike",
    "ReportModel",
    "build",
]


VERDICTS = ("pass", "diverges", "soft-error", "error", "unsupported")
"""Compatibility verdicts, from best to worst; a cell shows the worst of its exchanges."""
RANK = {v: i for i, v in enumerate(VERDICTS)}
SKIPPED = "skipped"
DIVERGING = frozenset({"error", "warning"})
"""Severities that make an exchange `diverges`; `info` findings are shown, not counted."""


FAMILIES = (
    "chat.completions",
    "responses",
    "completions",
    "models",
    "embeddings",
    "files",
    "audio",
    "images",
    "moderations",
    "batches",
    "other",
)
UNSUPPORTED_CODES = frozenset(
    {"endpoint_not_implemented", "method_not_allowed", "websocket_not_supported"}
)
ERROR_CODES = frozenset(
    {
        "auth_missing",
        "auth_rejected",
        "auth_dropped_by_hop",
        "path_prefix",
        "model_not_found",
        "redirect_method_change",
        "upstream_unreachable",
        "upstream_tls",
        "server_error",
        "request_rejected",
        "previous_response_not_found",
    }
)
UNSUPPORTED_STATUS = frozenset({404, 405, 501})
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


# --- outcomes, verdicts, the matrix -----------------------------------------------------


def codes_by_exchange(diagnoses: pd.DataFrame) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    if diagnoses.empty:
        return out
    for ids, code in zip(diagnoses["exchange_ids"], diagnoses["code"], strict=True):
        for rid in ids if isinstance(ids, list | tuple | np.ndarray) else ():
            out.setdefault(str(rid), set()).add(str(code))
    return out


def _int(value: Any) -> int | None:
    return None if missing(value) else int(value)


def outcome(
    status: int | None,
    baseline_status: int | None,
    soft: bool,
    codes: set[str] | frozenset[str],
    diverging: bool,
    error_kind: str | None = None,
) -> str:
    """One exchange's verdict; a replay is judged against what the baseline got.

    `skipped` (a replay step that was planned but not sent) is counted, never judged.
    """
    if error_kind == SKIPPED:
        return SKIPPED
    if status is None:
        return "error"
    if codes & UNSUPPORTED_CODES:
        return "unsupported"
    if soft or "soft_error_200" in codes:
        return "soft-error"
    if status != baseline_status and (status >= 400 or codes & ERROR_CODES):
        if codes & ERROR_CODES or status not in UNSUPPORTED_STATUS:
            return "error"
        return "unsupported"
    return "diverges" if diverging else "pass"


def outcomes(ex: pd.DataFrame, findings: pd.DataFrame, diagnoses: pd.DataFrame) -> list[str]:
    """`outcome` for every row of the exchanges frame."""
    ids = ex["id"].tolist()
    status = {rid: _int(s) for rid, s in zip(ids, ex["status"].tolist(), strict=True)}
    codes = codes_by_exchange(diagnoses)
    diverging = set(findings.loc[findings["severity"].isin(DIVERGING), "candidate_id"].tolist())
    none: frozenset[str] = frozenset()
    return [
        outcome(
            status[rid],
            status.get(base) if isinstance(base, str) else None,
            soft is True,
            codes.get(rid, none),
            rid in diverging,
            kind if isinstance(kind, str) else None,
        )
        for rid, base, soft, kind in zip(
            ids,
            ex["replay_of"].tolist(),
            ex["soft_error"].tolist(),
            ex["error_kind"].tolist(),
            strict=True,
        )
    ]


def worst(verdicts: Iterable[str]) -> str:
    """The worst verdict; `skipped` does not count."""
    return max((v for v in verdicts if v in RANK), key=RANK.__getitem__, default="pass")


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

    @property
    def total(self) -> int:
        """Exchanges judged (skipped replay steps are not)."""
        return sum(n for v, n in self.outcomes.items() if v != SKIPPED)

    @property
    def verdict(self) -> str:
        return worst(self.outcomes) if self.total else "untested"


@dataclass(slots=True)
class Backend:
    label: str
    role: str
    exchanges: int
    endpoints: list[str]
    status_mix: list[tuple[str, int, str]]
    by_kind: dict[str, int]
    families: list[tuple[str, str, str]]
    """(family, verdict, anchor of its worst cell)"""
    outcomes: dict[str, int]


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
    findings: list[Finding]
    kinds: list[KindGroup]
    timelines: list[Timeline]
    chains: list[ChainGroup]
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
        return [k.kind for k in self.kinds]


def roles(ex: pd.DataFrame, pairs: pd.DataFrame) -> dict[str, str]:
    """`baseline` for labels replayed from, `candidate` for labels replayed to, else `capture`."""
    base = set(pairs["baseline_label"].dropna().astype(str)) if len(pairs) else set()
    cand = set(pairs["label"].dropna().astype(str)) if len(pairs) else set()
    out = {}
    for label in ex["label"].fillna("").astype(str).unique():
        out[label] = "baseline" if label in base else "candidate" if label in cand else "capture"
    rank = {"baseline": 0, "candidate": 1, "capture": 2}
    return dict(sorted(out.items(), key=lambda kv: (rank[kv[1]], kv[0])))


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

    ffr = findings_frame(analysis.divergences, analysis.conformance)
    tls, timeline_of = timelines(pairs, records, max_examples=max_examples, anchor=anchor)
    drawn = {t.anchor for t in tls[:MAX_TIMELINES]}
    timeline_of = {pid: a for pid, a in timeline_of.items() if a in drawn}
    folded = fold_findings(ffr, max_examples, timeline_of)
    chains = chain_groups(diagnoses, records, max_examples)

    ex = ex.assign(outcome=outcomes(ex, ffr, diagnoses))
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
    for lab, endpoint, verdict, n in zip(
        *(sizes[c].astype(str).tolist() for c in ("label", "endpoint", "outcome")),
        sizes["n"].tolist(),
        strict=True,
    ):
        cells[(lab, endpoint)].outcomes[verdict] = int(n)
    for f in folded:
        cell = cells.get((f.label, f.endpoint))
        if cell is not None:
            cell.findings.append(f)
    for g in chains:
        cell = cells.get((g.label, g.endpoint))
        if cell is not None:
            cell.chains.append(g)

    kind_counts: dict[str, dict[str, int]] = {}
    if len(ffr):
        per = ffr.groupby(["label", "kind"]).size().reset_index(name="n")
        for lab, kind, n in zip(
            per["label"].tolist(), per["kind"].tolist(), per["n"].tolist(), strict=True
        ):
            kind_counts.setdefault(str(lab), {})[str(kind)] = int(n)
    backends = []
    for label in labels:
        part = ex[ex["label"] == label]
        no_answer = part["error_kind"].where(part["error_kind"] == SKIPPED, "none")
        status = part["status"].astype(object).where(part["status"].notna(), no_answer)
        mix = status.astype(str).value_counts()
        fams: dict[str, list[Cell]] = {}
        for (lab, _), cell in cells.items():
            if lab == label and cell.total:
                fams.setdefault(cell.family, []).append(cell)
        families = []
        for fam in sorted(fams, key=lambda f: fam_rank.get(f, len(fam_rank))):
            worst_cell = max(fams[fam], key=lambda c: RANK[c.verdict])
            families.append((fam, worst_cell.verdict, worst_cell.anchor))
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
                {str(k): int(v) for k, v in part["outcome"].value_counts().items()},
            )
        )

    totals = {
        "exchanges": len(ex),
        "pairs": len(pairs),
        "divergences": int((ffr["kind"] != "conformance").sum()),
        "conformance": int((ffr["kind"] == "conformance").sum()),
        "findings": len(folded),
        "diagnoses": len(diagnoses),
        "streams": len(tls),
    }
    return ReportModel(
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        labels=labels,
        roles=role_of,
        totals=totals,
        backends=backends,
        endpoints=endpoints,
        cells=cells,
        findings=folded,
        kinds=group_findings(folded),
        timelines=tls,
        chains=chains,
        latency=latency(ex, analysis.events, labels),
        findings_frame=ffr,
        diagnoses=diagnoses,
        records_by_id=records,
        max_examples=max_examples,
    )
