"""Compute the report's content once from an analysis: what every section shows.

It is plain dataclasses built with pandas; the templates only lay them out and `summary.json`
serialises them. Repeats are folded: identical findings in `wirediff.reports.findings`, identical
stream alignments, identical failing chains, and skipped steps with the same reason. Only the
first `max_examples` of each are named, and only the first is laid out, within a size budget kept
by `wirediff.reports.examples`. So the size of a report grows with the number of *distinct*
findings, not of exchanges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from wirediff.analysis.comparison.impact import clients
from wirediff.analysis.comparison.kinds import SEVERITIES, severity_rank
from wirediff.analysis.comparison.pairing import CONTENT, REPLAY, text
from wirediff.analysis.comparison.verdicts import FAMILIES, STOPPED, roles_of, verdict_frame
from wirediff.analysis.comparison.verdicts import VERDICTS as COMPAT_VERDICTS
from wirediff.analysis.index.analyze import CONFORMANCE, Analysis, Diagnosed
from wirediff.probe.drive import ProbeResult
from wirediff.reports import DEFAULT_MAX_EXAMPLES
from wirediff.reports.bottom_line import bottom_line, cell_name
from wirediff.reports.captures import (
    SKIPPED,
    Capture,
    SkippedGroup,
    UnmatchedGroup,
    captures_of,
    skipped_of,
    unmatched_groups,
)
from wirediff.reports.examples import lay_out
from wirediff.reports.findings import (
    Finding,
    KindGroup,
    Listed,
    collect_folds,
    finish_folds,
    group_findings,
    kind_order,
    listed,
    one_per_problem,
)
from wirediff.reports.formatters import anchor, missing, redact, status_class
from wirediff.reports.hops import NO_ENDPOINT, ChainGroup, chain_groups
from wirediff.reports.latency import Latency, latency
from wirediff.reports.timeline import Alignments, Timeline, collect_alignments, finish_alignments

__all__ = [
    "DEFAULT_MAX_EXAMPLES",
    "MAX_CELL_DIAGNOSES",
    "MAX_CELL_FINDINGS",
    "MAX_TIMELINES",
    "OUTCOMES",
    "VERDICTS",
    "ReportModel",
    "Verdict",
    "build",
    "verdict_rows",
]


VERDICTS = (*COMPAT_VERDICTS, "untested")
"""Drop-in verdicts, best to worst, and `untested` for a cell nothing exercised.

The verdicts are those of `wirediff.analysis.comparison.verdicts`."""
OUTCOMES = ("ok", *SEVERITIES[::-1], "unsupported", SKIPPED, STOPPED)
"""What one exchange came to.

No finding, `ok`; its worst finding's severity; a route-level failure; a replay step not
sent; or an exchange our own stop cut: the capture's, or a replay's Ctrl-C."""
MAX_TIMELINES = 60
"""Stream alignments drawn; the rest are counted."""
MAX_CELL_DIAGNOSES = 8
"""Diagnoses listed under one matrix cell's evidence; the rest are counted."""
MAX_CELL_FINDINGS = 10
"""Findings listed under one matrix cell's evidence; the rest are counted."""


# --- verdicts, the matrix -------------------------------------------------------------


@dataclass(slots=True)
class Verdict:
    """Hold one backend's drop-in verdict for one endpoint family and transport."""

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
    headline: str
    anchor: str = ""

    @property
    def name(self) -> str:
        return cell_name(self.family, self.transport)


def verdict_rows(frame: pd.DataFrame) -> list[Verdict]:
    """Turn the rows of a verdict frame into `Verdict`s; a frame without headlines gives ""."""
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
            str(r.get("headline", "")),
        )
        for r in frame.to_dict("records")
    ]


@dataclass(slots=True)
class Cell:
    """Hold one endpoint on one backend: its verdict and links to the evidence."""

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
        """Count the exchanges judged; skipped replay steps and exchanges a stop cut are not."""
        return sum(n for v, n in self.outcomes.items() if v not in (SKIPPED, STOPPED))

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
    bottom_line: list[str]
    """One sentence per candidate: can it replace the baseline, or what stops it."""
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
    """How the baseline label is chosen, as `wirediff.analysis.comparison.pairing.Baseline` says."""
    latency: Latency
    listed: Listed
    """Every finding, for `--findings` and the CSV."""
    diagnoses: pd.DataFrame
    """Every diagnosis (`DIAGNOSIS_COLUMNS`)."""
    max_examples: int
    verdict_frame: pd.DataFrame
    """The drop-in verdicts as `wirediff.analysis.comparison.verdicts.verdicts` frames them."""
    measured_by: list[str] = field(default_factory=list)
    """The clients the impact harness ran (and why one did not): `openai-node: not measured …`."""
    probe: ProbeResult | None = None
    """A probe's feature matrix and client readiness, which the report then opens with."""

    def cell(self, label: str, endpoint: str) -> Cell:
        return self.cells[(label, endpoint)]

    @property
    def filter_endpoints(self) -> list[str]:
        return [endpoint for _, endpoint in self.endpoints]

    @property
    def filter_kinds(self) -> list[str]:
        return sorted((k.kind for k in self.kinds), key=kind_order)

    def examples_to_lay_out(self) -> list[str]:
        """List the ids of the records `lay_out` reads, to fetch them when they are not at hand.

        They are at most the first example of each finding it lays out."""
        ids: dict[str, None] = {}
        for k in self.kinds:
            for p in k.paths:
                for f in p.findings:
                    if f.shown and f.examples:
                        e = f.examples[0]
                        ids.update(dict.fromkeys(i for i in (e.baseline_id, e.candidate_id) if i))
        return list(ids)


def agreeing(outcomes: dict[str, int], verdict: str) -> dict[str, int]:
    """Count a cell's outcomes as its verdict counts them.

    A route-level failure is `unsupported` in a cell that is, and `breaking` in one where other
    calls work, since the client loses what it asked for."""
    if verdict == "unsupported" or "unsupported" not in outcomes:
        return outcomes
    moved = Counter(outcomes)
    moved["breaking"] += moved.pop("unsupported")
    return _in_order(moved)


def _counted(counts: pd.Series) -> list[tuple[Any, int]]:
    """Turn `value_counts` into `(key, count)` pairs."""
    return list(zip(counts.index.tolist(), counts.tolist(), strict=True))


def _status_mix(ex: pd.DataFrame) -> Counter[tuple[str, str]]:
    """Count each label's exchanges by what they were answered, as the report says it.

    That is the status, `skipped` or `none` when there was none, and `error body` after it for
    an error in a success. Counted by value first: a text per exchange is a million strings."""
    counts = pd.DataFrame(
        {
            "label": ex["label"],
            "status": ex["status"],
            "skipped": ex["error_kind"] == SKIPPED,
            "soft": ex["soft_error"].eq(True).fillna(False).to_numpy(dtype=bool),
        }
    ).value_counts(sort=False, dropna=False)
    out: Counter[tuple[str, str]] = Counter()
    for (label, status, skipped, soft), n in _counted(counts):
        said = str(status) if not missing(status) else SKIPPED if skipped else "none"
        out[(label, f"{said} error body" if soft else said)] += int(n)
    return out


def _in_order(counts: Mapping[Any, Any]) -> dict[str, int]:
    """Count exchange outcomes in `OUTCOMES` order."""
    return {o: int(counts[o]) for o in OUTCOMES if o in counts}


def build(
    analysis: Analysis, diagnosed: Diagnosed, *, max_examples: int = DEFAULT_MAX_EXAMPLES
) -> ReportModel:
    """Build everything the report shows from the analysis of the captures and their diagnoses.

    The diagnoses are those of the captures' failing chains. The examples are laid out, their
    records read again."""
    rows = analysis.index.rows
    ex = rows.assign(
        label=text(rows["label"]),
        family=rows["family"].astype("str").fillna("other"),
        endpoint=rows["endpoint"].astype("str").fillna(NO_ENDPOINT),
    )
    labels_of = ex["label"].to_numpy(dtype=object)
    role_of = roles_of(set(labels_of.tolist()), *analysis.pair_labels())
    labels = list(role_of)
    frame = verdict_frame(analysis.cells(), role_of)
    # judged before the findings are listed and drawn, while less is held: at 1M its peak
    # on top of what they hold was the command's
    by_endpoint = verdict_frame(
        analysis.cells(("endpoint",), endpoint=NO_ENDPOINT, said=redact), role_of, by=("endpoint",)
    )
    drop_in = verdict_rows(frame)
    fam_order = {f: i for i, f in enumerate(FAMILIES)}
    drop_in.sort(
        key=lambda v: (labels.index(v.label), fam_order.get(v.family, len(fam_order)), v.transport)
    )
    found = _listed_findings(analysis)
    alignments, timeline_of = _alignments(analysis, max_examples)
    tls, anchors = finish_alignments(alignments, anchor)
    drawn = {t.anchor for t in tls[:MAX_TIMELINES]}
    folds = collect_folds(found, max_examples, timeline_of)
    folded = one_per_problem(finish_folds(folds, {k: a for k, a in anchors.items() if a in drawn}))
    chains = chain_groups(diagnosed.frame, diagnosed.evidence)
    skipped = skipped_of(ex, max_examples)

    pairs_ex = ex[["family", "endpoint"]].drop_duplicates()
    endpoints = sorted(
        zip(pairs_ex["family"].tolist(), pairs_ex["endpoint"].tolist(), strict=True),
        key=lambda fe: (fam_order.get(fe[0], len(fam_order)), fe[1]),
    )
    family_of = {e: f for f, e in endpoints}
    cells = {
        (label, endpoint): Cell(
            anchor("cell", label, endpoint), label, endpoint, family_of[endpoint], {}
        )
        for label in labels
        for _, endpoint in endpoints
    }
    outcomes = pd.DataFrame(
        {"label": labels_of, "endpoint": ex["endpoint"].to_numpy(), "what": analysis.outcomes}
    ).value_counts(sort=False)
    for (lab, endpoint, what), n in sorted(
        _counted(outcomes), key=lambda kv: (kv[0][0], kv[0][1], OUTCOMES.index(kv[0][2]))
    ):
        cells[(lab, endpoint)].outcomes[what] = int(n)
    for lab, endpoint, verdict, reasons in zip(
        *(by_endpoint[c].tolist() for c in ("label", "endpoint", "verdict", "reasons")),
        strict=True,
    ):
        cell = cells.get((str(lab), str(endpoint)))
        if cell is not None:
            cell.verdict, cell.reasons = str(verdict), list(reasons)
    for cell in cells.values():
        cell.outcomes = agreeing(cell.outcomes, cell.verdict)
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
    captures_of_label = captures_of(ex)

    kind_counts = found.kind_counts()
    unmatched = analysis.unmatched
    unmatched_groups_ = unmatched_groups(unmatched, max_examples)
    by_side: dict[tuple[str, str], int] = {}
    for lab, side in zip(unmatched["label"], unmatched["side"], strict=True):
        by_side[(str(lab), str(side))] = by_side.get((str(lab), str(side)), 0) + 1
    status_mix = _status_mix(ex)
    paired = (
        pd.DataFrame(
            {
                "label": rows["label"].astype(object).to_numpy()[analysis.pairs["c"].to_numpy()],
                "how": analysis.pairs["pairing"].astype(str).to_numpy(),
            }
        )
        .astype(str)
        .value_counts(sort=False)
    )
    label_endpoints = ex[["label", "endpoint"]].drop_duplicates()
    backends = []
    for label in labels:
        mix = {s: n for (lab, s), n in status_mix.items() if lab == label}
        families = [v for v in drop_in if v.label == label]
        kinds_of = kind_counts.get(label, {})
        counted: Counter[str] = Counter()
        for c in cells.values():
            if c.label == label:
                counted.update(c.outcomes)
        backends.append(
            Backend(
                label,
                role_of[label],
                sum(mix.values()),
                sorted(label_endpoints.loc[label_endpoints["label"] == label, "endpoint"]),
                [(str(s), int(n), status_class(s)) for s, n in sorted(mix.items())],
                {k: kinds_of[k] for k in sorted(kinds_of, key=kind_order)},
                families,
                _in_order(counted),
                captures_of_label.get(label, []),
                [s for s in skipped if s.label == label],
                {how: int(paired.get((label, how), 0)) for how in (REPLAY, CONTENT)}
                if role_of[label] == "candidate"
                else {},
                {side: n for (lab, side), n in by_side.items() if lab == label},
            )
        )

    kind_groups = group_findings(folded)
    group = analysis.findings["group"].to_numpy()
    totals = {
        "exchanges": len(rows),
        "pairs": len(analysis.pairs),
        "divergences": int((group != CONFORMANCE).sum()),
        "conformance": int((group == CONFORMANCE).sum()),
        "findings": len(folded),
        "diagnoses": len(diagnosed.frame),
        "streams": len(tls),
        "skipped": sum(s.count for s in skipped),
        "unmatched": len(unmatched),
    }
    model = ReportModel(
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        measured_by=list(clients()),
        labels=labels,
        roles=role_of,
        totals=totals,
        backends=backends,
        endpoints=endpoints,
        cells=cells,
        verdicts=drop_in,
        bottom_line=bottom_line(frame),
        baseline_flawed=any(v.role == "baseline" and (v.breaking or v.deviations) for v in drop_in),
        findings=folded,
        kinds=kind_groups,
        timelines=tls,
        chains=chains,
        skipped=skipped,
        unmatched=unmatched_groups_,
        unmatched_rows=[
            {str(k): (None if pd.isna(v) else str(v)) for k, v in row.items()}
            for row in unmatched.to_dict("records")
        ],
        baseline_chosen_by=analysis.baseline.chosen_by,
        latency=latency(ex, labels),
        listed=found,
        diagnoses=diagnosed.frame,
        max_examples=max_examples,
        verdict_frame=frame,
    )
    # found by Arrow, not by an index of a million ids made Python strings
    at = np.flatnonzero(rows["id"].isin(model.examples_to_lay_out()).to_numpy(dtype=bool))
    lay_out(model.kinds, {r["id"]: r for r in analysis.index.read(at.tolist())})
    return model


def _listed_findings(analysis: Analysis) -> Listed:
    f = analysis.findings
    pair = f["pair"].to_numpy()
    # 32 bits, as the findings' own columns: millions of them
    b = analysis.pairs["b"].to_numpy().astype(np.int32)
    base = b[np.maximum(pair, 0)] if len(analysis.pairs) else pair
    return listed(
        analysis.index.rows,
        analysis.templates,
        f["template"].to_numpy(),
        f["row"].to_numpy(),
        np.where(pair >= 0, base, -1),
    )


def _alignments(analysis: Analysis, max_examples: int) -> tuple[Alignments, dict[str, Any]]:
    """Align the streams of the pairs compared: both sides sent, neither cut by our own stop."""
    rows, pairs = analysis.index.rows, analysis.pairs
    both = np.flatnonzero(pairs["sent"].to_numpy())
    c, b = pairs["c"].to_numpy()[both], pairs["b"].to_numpy()[both]
    timeline = analysis.answers("timeline")

    def named(column: str, at: np.ndarray) -> np.ndarray:
        codes, values = pd.factorize(rows[column].iloc[at], use_na_sentinel=False)
        names = np.array(["None" if missing(v) else str(v) for v in values], dtype=object)
        out: np.ndarray = names[codes]
        return out

    frame = pd.DataFrame(
        {
            "pair_id": rows["id"].to_numpy(dtype=object)[c],
            "label": named("label", c),
            "baseline_label": named("label", b),
            "endpoint": named("endpoint", b),
            "place": pairs["place"].to_numpy()[both],
            "b": b,
            "c": c,
            "b_labels": timeline[b],
            "c_labels": timeline[c],
        }
    )
    return collect_alignments(frame, analysis.index.read, max_examples=max_examples)
