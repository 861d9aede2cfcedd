"""Render the report's three outputs through the one jinja2 Environment.

- `report.html`: one file, CSS and JS inlined by `{% include %}`, nothing fetched at view
  time. A Content-Security-Policy with `default-src 'none'` and hashes of the inlined style
  and script says so to the browser, and keeps any injected markup inert.
- `summary.json`: the summary, as `summary.schema.json` describes it.
- `--findings`: every finding and every diagnosis, one JSON line each, written by
  `wirediff.reports.items`.
- `divergences.csv`: the divergence table, conformance rows included.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import itertools
import json
import os
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, TextIO

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from wirediff._support import naming, printable
from wirediff.analysis.comparison.kinds import SEVERITIES
from wirediff.analysis.comparison.verdicts import VERDICT_COLUMNS
from wirediff.analysis.diagnosis.explain import CODES
from wirediff.probe.drive import result_summary
from wirediff.probe.matrix import STATUSES
from wirediff.record.scrub import scrub_output
from wirediff.reports.captures import MAX_CARD_CAPTURES, MAX_CARD_CLIENTS
from wirediff.reports.examples import LAID_OUT
from wirediff.reports.findings import KINDS
from wirediff.reports.formatters import FILTERS
from wirediff.reports.hops import MAX_CHAIN_GROUPS
from wirediff.reports.items import csv_chunks, diagnosis_lines, finding_lines
from wirediff.reports.model import (
    MAX_CELL_DIAGNOSES,
    MAX_CELL_FINDINGS,
    MAX_TIMELINES,
    OUTCOMES,
    VERDICTS,
    ReportModel,
    Verdict,
)

__all__ = [
    "SCHEMA_PATH",
    "render_html",
    "summary_from",
    "verdict_item",
    "write_csv",
    "write_findings",
    "write_json",
    "write_summary",
]

SCHEMA_PATH = Path(__file__).resolve().parent / "summary.schema.json"
SUMMARY_FORMAT = "wirediff-summary/2"
WRITTEN = 1000
"""Lines written together."""


def _scrubbed(value: Any) -> Any:
    """Scrub what a `{{ … }}` of a template shows with `scrub_output`, and make it `printable`.

    Markup stays markup: what the scrub replaces, and the escapes of control characters, hold
    none of markup's characters. Line breaks and tabs stay, for the bodies shown as they came."""
    if isinstance(value, Markup):
        return Markup(printable(scrub_output(str(value)), lines=True))
    return printable(scrub_output(value), lines=True) if isinstance(value, str) else value


ENV = Environment(
    loader=PackageLoader("wirediff.reports", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    finalize=_scrubbed,
)
ENV.filters.update(FILTERS)
ENV.globals.update(
    VERDICTS=VERDICTS,
    OUTCOMES=OUTCOMES,
    MAX_TIMELINES=MAX_TIMELINES,
    MAX_CHAIN_GROUPS=MAX_CHAIN_GROUPS,
    MAX_CELL_DIAGNOSES=MAX_CELL_DIAGNOSES,
    MAX_CELL_FINDINGS=MAX_CELL_FINDINGS,
    MAX_CARD_CAPTURES=MAX_CARD_CAPTURES,
    MAX_CARD_CLIENTS=MAX_CARD_CLIENTS,
    LAID_OUT=LAID_OUT,
    PROBE_STATUSES=STATUSES,
)


@cache
def asset_hash(name: str) -> str:
    """Hash an asset exactly as `{% include %}` inlines it, as a CSP source `'sha256-…'`."""
    text = ENV.get_template(name).render()
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render_html(model: ReportModel, out_path: str | os.PathLike[str]) -> Path:
    """Write the report for an already built model, streamed and never held whole in memory.

    `-` writes to stdout."""
    template = ENV.get_template("report.html.j2")
    context = {
        "m": model,
        "style_hash": asset_hash("assets/report.css"),
        "script_hash": asset_hash("assets/report.js"),
    }
    with _opened(out_path) as (fh, out):
        fh.writelines(template.generate(**context))
    return out


# --- summary.json -----------------------------------------------------------------------


def verdict_item(v: Verdict) -> dict[str, Any]:
    """Turn one drop-in verdict into `summary.schema.json`'s `verdict_row`.

    That is its columns but the headline, which only the report shows."""
    return {c: getattr(v, c) for c in VERDICT_COLUMNS if c != "headline"}


def summary_from(model: ReportModel) -> dict[str, Any]:
    """Build `summary.json` for a built model, as `summary.schema.json` describes it."""
    backends = [
        {
            "label": b.label,
            "role": b.role,
            "exchanges": b.exchanges,
            "endpoints": b.endpoints,
            "status_mix": {s: n for s, n, _ in b.status_mix},
            "divergences_by_kind": b.by_kind,
            "verdicts": {v.name: v.verdict for v in b.families},
            "outcomes": b.outcomes,
            "captures": [c.as_dict() for c in b.captures],
            "pairs": b.pairing,
            "unmatched": b.unmatched,
            "latency": {
                m: s.as_dict() for m, s in model.latency.per_label.get(b.label, {}).items()
            },
        }
        for b in model.backends
    ]
    matrix = [
        {
            "endpoint": c.endpoint,
            "family": c.family,
            "label": c.label,
            "verdict": c.verdict,
            "reasons": c.reasons,
            "exchanges": c.total,
            "outcomes": c.outcomes,
        }
        for c in model.cells.values()
    ]
    findings = [
        {
            "kind": f.kind,
            "path": f.path,
            "label": f.label,
            "baseline_label": f.baseline_label,
            "endpoint": f.endpoint,
            "family": f.family,
            "severity": f.severity,
            "message": f.message,
            "baseline": f.baseline,
            "candidate": f.candidate,
            "count": f.count,
            "examples": [e.pair_id for e in f.examples],
            "source": f.source,
            "schema_pointer": f.schema_pointer,
            "evidence": f.evidence,
            "sources": f.sources,
            "also": [
                {"kind": a.kind, "path": a.path, "source": a.source, "message": a.message}
                for a in f.also
            ],
        }
        for f in model.findings
    ]
    probe = {"probe": result_summary(model.probe)} if model.probe is not None else {}
    return {
        "format": SUMMARY_FORMAT,
        "generated_at": model.generated_at,
        "measured_by": model.measured_by,
        "baseline": [label for label, role in model.roles.items() if role == "baseline"],
        "baseline_chosen_by": model.baseline_chosen_by,
        "baseline_flawed": model.baseline_flawed,
        "totals": model.totals,
        "bottom_line": model.bottom_line,
        "verdicts": [verdict_item(v) for v in model.verdicts],
        "backends": backends,
        "matrix": matrix,
        "findings": findings,
        "unmatched": model.unmatched_rows,
        "contract": {
            "kinds": list(KINDS),
            "codes": list(CODES),
            "verdicts": list(VERDICTS[:-1]),
            "severities": list(SEVERITIES),
        },
        **probe,
    }


def diagnosis_lines_of(model: ReportModel) -> Iterator[str]:
    """Write every diagnosis's line, a chunk of diagnoses at a time."""
    rows = model.diagnoses
    for start in range(0, len(rows), WRITTEN):
        yield diagnosis_lines(rows.iloc[start : start + WRITTEN])


@contextlib.contextmanager
def _opened(out_path: str | os.PathLike[str]) -> Iterator[tuple[TextIO, Path]]:
    """Open `out_path` for UTF-8 text written as given, its folder made; `-` is stdout, kept open."""
    if str(out_path) != "-":
        out = Path(out_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        with naming(out), out.open("w", encoding="utf-8", newline="") as fh:
            yield fh, out
        return
    sys.stdout.flush()
    utf8 = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="")
    try:
        yield utf8, Path("-")
        utf8.flush()
    finally:
        utf8.detach()  # stdout stays open


def write_json(summary: dict[str, Any], out_path: str | os.PathLike[str]) -> Path:
    """Write a summary as indented JSON, scrubbed; `-` writes to stdout."""
    with _opened(out_path) as (fh, out):
        json.dump(scrub_output(summary), fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    return out


def write_summary(model: ReportModel, out_path: str | os.PathLike[str]) -> Path:
    """Write `summary.json` for a built model; `-` writes to stdout."""
    return write_json(summary_from(model), out_path)


def write_findings(model: ReportModel, out_path: str | os.PathLike[str]) -> Path:
    """Write every finding, then every diagnosis, one JSON line each, streamed, never all in memory.

    `-` writes to stdout."""
    with _opened(out_path) as (fh, out):
        fh.writelines(itertools.chain(finding_lines(model.listed), diagnosis_lines_of(model)))
    return out


def write_csv(model: ReportModel, out_path: str | os.PathLike[str]) -> Path:
    """Write the divergence table, conformance rows included, one finding per line."""
    with _opened(out_path) as (fh, out):
        fh.writelines(csv_chunks(model.listed))
    return out
