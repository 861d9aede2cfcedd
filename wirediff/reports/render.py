"""Rendering: the one jinja2 Environment, and the report's three outputs.

- `report.html`: one file, CSS and JS inlined by `{% include %}`, nothing fetched at view
  time (a Content-Security-Policy with `default-src 'none'` and hashes of the inlined
  style and script says so to the browser, and keeps any injected markup inert).
- `summary.json`: the summary, every divergence and diagnosis (`summary.schema.json`).
- `divergences.csv`: the divergence table, conformance rows included.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import stat
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
from jinja2 import Environment, PackageLoader, StrictUndefined

from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.comparison.kinds import SEVERITIES
from wirediff.analysis.diagnosis.explain import CODES
from wirediff.probe.matrix import STATUSES
from wirediff.probe.run import result_summary
from wirediff.reports.captures import MAX_CARD_CAPTURES, MAX_CARD_CLIENTS
from wirediff.reports.examples import LAID_OUT
from wirediff.reports.findings import KINDS
from wirediff.reports.formatters import FILTERS
from wirediff.reports.hops import MAX_CHAIN_GROUPS
from wirediff.reports.items import diagnosis_rows, finding_text, item_text, write_list
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
    "write_csv",
    "write_json",
    "write_summary",
]

SCHEMA_PATH = Path(__file__).resolve().parent / "summary.schema.json"
SUMMARY_FORMAT = "wirediff-summary/1"

ENV = Environment(
    loader=PackageLoader("wirediff.reports", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
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
    """The CSP source (`'sha256-…'`) of an asset exactly as `{% include %}` inlines it."""
    text = ENV.get_template(name).render()
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render_html(model: ReportModel, out_path: str | os.PathLike[str]) -> Path:
    """Write the report for an already built model; streamed, never held whole in memory."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    template = ENV.get_template("report.html.j2")
    context = {
        "m": model,
        "style_hash": asset_hash("assets/report.css"),
        "script_hash": asset_hash("assets/report.js"),
    }
    with out.open("w", encoding="utf-8") as fh:
        fh.writelines(template.generate(**context))
    return out


# --- summary.json -----------------------------------------------------------------------


def verdict_item(v: Verdict) -> dict[str, Any]:
    """One drop-in verdict as `summary.schema.json`'s `verdict_row`."""
    return {
        "label": v.label,
        "role": v.role,
        "family": v.family,
        "transport": v.transport,
        "verdict": v.verdict,
        "reasons": v.reasons,
        "breaking": v.breaking,
        "deviations": v.deviations,
        "cosmetic": v.cosmetic,
        "exchanges": v.exchanges,
    }


def summary_from(model: ReportModel, *, rows: bool = True) -> dict[str, Any]:
    """`summary.json` for a built model (see `summary.schema.json`); without `rows`, the
    `divergences` and `diagnoses` lists are left empty (`write_summary` streams them)."""
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
        "baseline": [label for label, role in model.roles.items() if role == "baseline"],
        "baseline_chosen_by": model.baseline_chosen_by,
        "baseline_flawed": model.baseline_flawed,
        "totals": model.totals,
        "bottom_line": model.bottom_line,
        "verdicts": [verdict_item(v) for v in model.verdicts],
        "backends": backends,
        "matrix": matrix,
        "findings": findings,
        "divergences": list(finding_items(model)) if rows else [],
        "diagnoses": list(diagnosis_items(model)) if rows else [],
        "unmatched": model.unmatched_rows,
        "contract": {
            "kinds": list(KINDS),
            "codes": list(CODES),
            "verdicts": list(VERDICTS[:-1]),
            "severities": list(SEVERITIES),
        },
        **probe,
    }


def finding_items(model: ReportModel) -> Iterator[dict[str, Any]]:
    """Every finding row as `to_dict("records")` gives it (columns read whole: faster)."""
    for frame in model.findings_rows.frames():
        if len(frame):
            columns = [frame[c].tolist() for c in DIVERGENCE_COLUMNS]
            for values in zip(*columns, strict=True):
                yield dict(zip(DIVERGENCE_COLUMNS, values, strict=True))


def diagnosis_items(model: ReportModel) -> Iterator[dict[str, Any]]:
    for frame in model.diagnoses.frames():
        if len(frame):
            yield from diagnosis_rows(frame)


def write_json(summary: dict[str, Any], out_path: str | os.PathLike[str]) -> Path:
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        json.dump(summary, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    return out


def finding_texts(model: ReportModel) -> Iterator[str]:
    """Every finding's item text (`wirediff.reports.items`): as the engine's workers wrote
    them, or made here from the rows."""
    rows = model.findings_rows
    if rows.texts is not None:
        yield from rows.texts()
        return
    for frame in rows.frames():
        if len(frame):
            columns = [frame[c].tolist() for c in DIVERGENCE_COLUMNS]
            yield from map(finding_text, zip(*columns, strict=True))


def diagnosis_texts(model: ReportModel) -> Iterator[str]:
    rows = model.diagnoses
    if rows.texts is not None:
        yield from rows.texts()
        return
    yield from map(item_text, diagnosis_items(model))


_STREAMED = {"divergences": finding_texts, "diagnoses": diagnosis_texts}


def write_summary(model: ReportModel, out_path: str | os.PathLike[str]) -> Path:
    """`write_json(summary_from(model))`, byte for byte, with the lists of every finding and
    every diagnosis streamed: never all in memory. `-`: to stdout."""
    if str(out_path) == "-":
        sys.stdout.flush()
        utf8 = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="\n")
        try:
            _summary_into(model, utf8, None)
            utf8.flush()
        finally:
            utf8.detach()  # stdout stays open
        return Path("-")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        _summary_into(model, fh, str(out) if _regular(fh) else None)
    return out


def _summary_into(model: ReportModel, fh: TextIO, path: str | None) -> None:
    """The summary written to `fh`; the findings list merged straight into the file at
    `path` when it is one written in place (`Rows.list_into`)."""
    summary = summary_from(model, rows=False)
    marks = {key: f"\x00{key}\x00" for key in _STREAMED}
    summary.update(marks)
    text = json.dumps(summary, ensure_ascii=False, indent=1)
    for key, items in _STREAMED.items():
        head, text = text.split(json.dumps(marks[key]), 1)
        fh.write(head)
        list_into = model.findings_rows.list_into if key == "divergences" else None
        if list_into is None or path is None:
            write_list(fh, items(model))
            continue
        fh.flush()
        list_into(path, fh.tell())  # write-only UTF-8: the byte it is at
        fh.seek(0, os.SEEK_END)
    fh.write(text + "\n")


def _regular(fh: TextIO) -> bool:
    """A file written in place (not a pipe, a terminal or `/dev/stdout`)."""
    return fh.seekable() and stat.S_ISREG(os.fstat(fh.fileno()).st_mode)


def write_csv(model: ReportModel, out_path: str | os.PathLike[str]) -> Path:
    """The divergence table (conformance rows included), one finding per line."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = True
    with out.open("w", encoding="utf-8", newline="") as fh:
        for frame in model.findings_rows.frames():
            if len(frame) or header:
                frame.reindex(columns=DIVERGENCE_COLUMNS).to_csv(fh, index=False, header=header)
                header = False
        if header:
            pd.DataFrame(columns=DIVERGENCE_COLUMNS).to_csv(fh, index=False)
    return out
