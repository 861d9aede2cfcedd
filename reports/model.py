"""The report's content, computed once from an analysis: what every section shows.

Plain dataclasses built with pandas; the templates only lay them out and `summary.json`
serialises them. Repeats are folded (identical findings, identical stream alignments,
identical diagnoses) and only the first `max_examples` of each keep per-exchange detail,
so the size of a report grows with the number of *distinct* findings, not of exchanges.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np
import pandas as pd

from wirediff._types import Record
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.comparison.kinds import kind_names
from wirediff.analysis.diagnosis.diagnose import DIAGNOSIS_COLUMNS
from wirediff.reports.chains import NO_ENDPOINT, ChainGroup, chain_groups
from wirediff.reports.formatters import anchor, missing, redact, status_class
from wirediff.reports.latency import Latency, latency
from wirediff.reports.timeline import Timeline, timelines

KINDS = kind_names()
"""Divergence kinds (contract, DESIGN.md), in the order the report lists them."""


VERDICTS = ("pass", "diverges", "soft-error", "error", "unsupported")
"""Compatibility verdicts, from best to worst; a cell shows the worst of its exchanges."""
RANK = {v: i for i, v in enumerate(VERDICTS)}
SKIPPED = "skipped"
SEVERITIES = ("error", "warning", "info")
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
UNSUPPORTED_CODES = frozenset({"endpoint_not_implemented", "method_not_allowed"})
ERROR_CODES = frozenset(
    {
        "auth_missing",
        "auth_rejected",
        "auth_dropped_by_hop",
        "path_prefix",
        "model_not_found",
        "redirect_method_change",
        "upstream_unreachable",
        "previous_response_not_found",
    }
)
UNSUPPORTED_STATUS = frozenset({404, 405, 501})
_POSITION = re.compile(r"#\d+|\b\d+ events\b|\b(?:position|at) \d+\b")
"""Event positions: findings that differ only there are the same finding."""
DEFAULT_MAX_EXAMPLES = 3
"""Examples kept with per-exchange detail for each folded finding, chain and alignment."""
MAX_FINDINGS = 2000
"""Distinct findings listed in the HTML (worst first); the rest are counted there and all
are in summary.json and divergences.csv."""
MAX_LAID_OUT = 400
"""Examples laid out side by side in the whole HTML; later ones are named by pair id.
With MAX_FINDINGS this bounds the report's size whatever the traffic."""
MAX_TIMELINES = 60
"""Stream alignments drawn; the rest are counted."""


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


# --- findings ---------------------------------------------------------------------------


def map_unique(s: pd.Series, fn: Callable[[str], str]) -> pd.Series:
    """`fn` over a column of strings, once per distinct value (findings repeat a lot)."""
    unique = s.unique().tolist()
    return s.map(dict(zip(unique, map(fn, unique), strict=True)))


def redact_series(s: pd.Series) -> pd.Series:
    return map_unique(s, redact)


def position_free(text: str) -> str:
    return _POSITION.sub("#n", text)


def findings_frame(analysis: AnalysisLike) -> pd.DataFrame:
    """Divergences and conformance rows in one table of strings, credentials scrubbed."""
    frames = [f for f in (analysis.divergences, analysis.conformance) if f is not None and len(f)]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DIVERGENCE_COLUMNS})
    df = pd.concat([f.reindex(columns=DIVERGENCE_COLUMNS) for f in frames], ignore_index=True)
    for col in DIVERGENCE_COLUMNS:
        df[col] = df[col].astype(object).where(df[col].notna(), "").astype(str)
    for col in ("baseline", "candidate", "message", "path"):
        df[col] = redact_series(df[col])
    df["endpoint"] = df["endpoint"].replace("", NO_ENDPOINT)
    return df


@dataclass(slots=True)
class Example:
    pair_id: str
    baseline_id: str
    candidate_id: str
    timeline: str | None = None


@dataclass(slots=True)
class Finding:
    """Identical findings folded: same kind, path, backends, endpoint, values and message."""

    anchor: str
    kind: str
    path: str
    label: str
    baseline_label: str
    endpoint: str
    family: str
    severity: str
    message: str
    baseline: str
    candidate: str
    count: int
    examples: list[Example]
    shown: bool = True
    laid_out: int = 0
    """How many of `examples` are laid out side by side (the report's size budget)."""


@dataclass(slots=True)
class PathGroup:
    anchor: str
    kind: str
    path: str
    findings: list[Finding]

    @property
    def count(self) -> int:
        return sum(f.count for f in self.findings)

    @property
    def not_shown(self) -> int:
        return sum(not f.shown for f in self.findings)

    @property
    def visible(self) -> bool:
        return any(f.shown for f in self.findings)


@dataclass(slots=True)
class KindGroup:
    anchor: str
    kind: str
    paths: list[PathGroup]

    @property
    def count(self) -> int:
        return sum(p.count for p in self.paths)

    @property
    def n_findings(self) -> int:
        return sum(len(p.findings) for p in self.paths)

    @property
    def hidden_paths(self) -> list[PathGroup]:
        """Paths none of whose findings fit in the report's budget."""
        return [p for p in self.paths if not p.visible]


def fold_findings(
    df: pd.DataFrame, max_examples: int, timeline_of: Mapping[str, str]
) -> list[Finding]:
    """One `Finding` per distinct finding, with its count and its first examples."""
    if df.empty:
        return []
    keyed = df.assign(
        _b=map_unique(df["baseline"], position_free),
        _c=map_unique(df["candidate"], position_free),
        _m=map_unique(df["message"], position_free),
    )
    keys = ["kind", "path", "label", "baseline_label", "endpoint", "severity", "_b", "_c", "_m"]
    group = keyed.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    sizes = np.bincount(group)
    rank = keyed.groupby(group).cumcount().to_numpy()
    shown = keyed[rank < max_examples]
    examples: dict[int, list[Example]] = {}
    for g, pid, bid, cid in zip(
        group[rank < max_examples].tolist(),
        shown["pair_id"].tolist(),
        shown["baseline_id"].tolist(),
        shown["candidate_id"].tolist(),
        strict=True,
    ):
        examples.setdefault(int(g), []).append(Example(pid, bid, cid, timeline_of.get(pid)))
    firsts = keyed[rank == 0]
    out = []
    for g, row in zip(group[rank == 0], firsts.itertuples(index=False), strict=True):
        out.append(
            Finding(
                anchor=anchor("f", row.kind, row.path, row.label, row.endpoint, int(g)),
                kind=row.kind,
                path=row.path,
                label=row.label,
                baseline_label=row.baseline_label,
                endpoint=row.endpoint,
                family=row.family,
                severity=row.severity,
                message=row.message,
                baseline=row.baseline,
                candidate=row.candidate,
                count=int(sizes[g]),
                examples=examples[int(g)],
            )
        )
    return out


def kind_order(kind: str) -> tuple[int, str]:
    """Sort key: the registry's order (an unregistered kind last)."""
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), kind)


def group_findings(findings: Iterable[Finding]) -> list[KindGroup]:
    """Findings by kind (contract order) and path; worst and most frequent first."""
    by_kind: dict[str, dict[str, list[Finding]]] = {}
    for f in findings:
        by_kind.setdefault(f.kind, {}).setdefault(f.path, []).append(f)
    sev = {s: i for i, s in enumerate(SEVERITIES)}
    out = []
    for kind in sorted(by_kind, key=kind_order):
        paths = [
            PathGroup(
                anchor("p", kind, path),
                kind,
                path,
                sorted(fs, key=lambda f: (sev.get(f.severity, 3), -f.count)),
            )
            for path, fs in by_kind[kind].items()
        ]
        paths.sort(
            key=lambda p: (min(sev.get(f.severity, 3) for f in p.findings), -p.count, p.path)
        )
        out.append(KindGroup(anchor("k", kind), kind, paths))
    budget_findings, budget_examples = MAX_FINDINGS, MAX_LAID_OUT
    for k in out:
        for p in k.paths:
            for f in p.findings:
                f.shown = budget_findings > 0
                budget_findings -= 1
                f.laid_out = min(len(f.examples), budget_examples) if f.shown else 0
                budget_examples -= f.laid_out
    return out


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

    ffr = findings_frame(analysis)
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
