"""Drop-in verdicts: can this backend replace the baseline for this traffic, per endpoint
family (and transport, where a family has several), and why not.

`compatible` (nothing above cosmetic), `compatible with deviations`, `breaking` (any breaking
finding, one endpoint of the family not implemented while others work, or nothing in the cell
succeeded), `unsupported`
(nothing in the cell succeeded and every failure is route-level: 404/405/501 not about a
model, an error in a 2xx, a refused WebSocket upgrade). Each verdict carries its top reasons,
worst and most frequent first, headers last, in the server's or the SDK's words. The
baseline is judged too, by its conformance alone: every comparison inherits its flaws.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from wirediff._support import error_kind, response_status, statuses_2xx
from wirediff._types import Record
from wirediff.analysis.comparison.breaks import server_words
from wirediff.analysis.comparison.kinds import SEVERITIES, severity_rank

__all__ = [
    "FAMILIES",
    "ROLES",
    "VERDICTS",
    "VERDICT_COLUMNS",
    "exchange_outcomes",
    "roles",
    "route_failure",
    "verdicts",
]

VERDICTS = ("compatible", "compatible with deviations", "breaking", "unsupported")
"""Best to worst (a contract)."""
VERDICT_COLUMNS = [
    "label",
    "role",
    "family",
    "transport",
    "verdict",
    "reasons",
    "breaking",
    "deviations",
    "cosmetic",
    "exchanges",
]
ROLES = ("baseline", "candidate", "capture")
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
    "realtime",
    "other",
)
"""The order families are listed in."""
MAX_REASONS = 3
SKIPPED = "skipped"
RANKS = {s: severity_rank(s) for s in SEVERITIES}
UNSUPPORTED = "unsupported"
ROUTE_STATUSES = frozenset({404, 405, 501})
_POSITION = re.compile(r" \((?:event #\d+|\d+ events, first #\d+)\)")


def roles(exchanges: pd.DataFrame, pairs: pd.DataFrame) -> dict[str, str]:
    """`baseline` for labels compared with (replayed from, or the baseline of independent
    captures), `candidate` for labels compared (replayed to, or paired by content), else
    `capture`; in that order, then by label."""
    base = set(pairs["baseline_label"].dropna().astype(str)) if len(pairs) else set()
    cand = set(pairs["label"].dropna().astype(str)) if len(pairs) else set()
    out = {}
    for label in exchanges["label"].fillna("").astype(str).unique():
        out[label] = "baseline" if label in base else "candidate" if label in cand else "capture"
    return dict(sorted(out.items(), key=lambda kv: (ROLES.index(kv[1]), kv[0])))


def route_failure(record: Record | None) -> bool:
    """The answer says "not here": 404/405/501 not about a model, an error where a 2xx
    answer belongs (nothing else in it), or a WebSocket upgrade refused."""
    resp = record["response"] if record is not None else None
    if record is None or resp is None:
        return False
    status = resp["status"]
    tags = record["tags"]
    upgrade = (tags.get("transport") == "websocket") or any(
        str(k).lower() == "upgrade" for k, _ in record["request"].get("headers") or ()
    )
    if upgrade and isinstance(status, int) and status != 101 and status < 500:
        return True
    if status in ROUTE_STATUSES:
        return "model" not in server_words(record).lower()
    if tags.get("soft_error"):
        events = resp.get("events") or []
        return not any(
            isinstance(ev.get("data"), dict) and "error" not in ev["data"] for ev in events
        )
    return False


def _route_status(status: Any) -> bool:
    """A status that may say "not here" (a frame's missing status is `pd.NA`: not one)."""
    return isinstance(status, int) and (status in ROUTE_STATUSES or status == 426)


def exchange_outcomes(
    exchanges: pd.DataFrame, findings: pd.DataFrame, records_by_id: Mapping[str, Record]
) -> list[str]:
    """Per exchange: `skipped`, `unsupported` (a route-level failure), else the worst
    severity of its findings, or `ok`."""
    worst: dict[Any, int] = {}
    if len(findings):
        ranks = findings["severity"].map(RANKS).fillna(len(SEVERITIES))
        worst = ranks.groupby(findings["candidate_id"].to_numpy()).min().astype(int).to_dict()
    out = []
    for rid, kind, status, soft in zip(
        exchanges["id"].tolist(),
        exchanges["error_kind"].tolist(),
        exchanges["status"].tolist(),
        exchanges["soft_error"].tolist(),
        strict=True,
    ):
        if kind == SKIPPED:
            out.append(SKIPPED)
        elif (soft is True or _route_status(status)) and route_failure(records_by_id.get(rid)):
            out.append(UNSUPPORTED)
        elif rid in worst:
            out.append(SEVERITIES[worst[rid]])
        else:
            out.append("ok")
    return out


def _finding_reasons(cell: pd.DataFrame) -> list[str]:
    """One line per (severity, kind, path), worst and most frequent first, headers last;
    the evidence (the SDK's or the server's words) where there is some."""
    if cell.empty:
        return []
    top = (
        cell.assign(
            _rank=cell["severity"].map(RANKS).fillna(len(SEVERITIES)),
            _header=cell["kind"] == "header",
            _text=cell["evidence"].where(cell["evidence"] != "", cell["message"]),
        )
        .groupby(["_rank", "_header", "kind", "path"], sort=False)
        .agg(n=("kind", "size"), text=("_text", "min"))
        .reset_index()
        .sort_values(["_rank", "_header", "n"], ascending=[True, True, False], kind="stable")
    )
    out: list[str] = []
    for text, n in zip(top["text"].tolist(), top["n"].tolist(), strict=True):
        line = _POSITION.sub("", str(text))
        if all(not r.startswith(line) for r in out):
            out.append(f"{line} (x{n})" if n > 1 else line)
        if len(out) == MAX_REASONS:
            break
    return out


def _first_answer(part: pd.DataFrame, records_by_id: Mapping[str, Record]) -> str:
    first = records_by_id.get(part["id"].iloc[0])
    if first is None:
        return "no answer"
    status = response_status(first) or error_kind(first) or "no answer"
    words = server_words(first)
    return f"{status}" + (f": {words}" if words else "")


def _unsupported(ex: pd.DataFrame, records_by_id: Mapping[str, Record]) -> list[str]:
    return [
        f"{method} {endpoint}: not here ({_first_answer(part, records_by_id)})"
        for (method, endpoint), part in ex.groupby(["method", "endpoint"], sort=True)
    ][:MAX_REASONS]


def _failed(ex: pd.DataFrame, records_by_id: Mapping[str, Record]) -> list[str]:
    """Nothing in the cell succeeded: what each endpoint answered."""
    return [
        f"{method} {endpoint}: failed ({_first_answer(part, records_by_id)})"
        for (method, endpoint), part in ex.groupby(["method", "endpoint"], sort=True)
    ]


def _not_implemented(
    ex: pd.DataFrame,
    records_by_id: Mapping[str, Record],
    baseline_ok: set[str] | None,
    baseline_of: Mapping[str, str],
) -> list[str]:
    """`POST /v1/responses/compact: not implemented (404: …)` for each endpoint of the cell
    that failed route-level every time while another endpoint of the cell worked (and, for a
    candidate, the baseline's answers to it did not fail so)."""
    if ex["route_failure"].all():
        return []
    out = []
    for (method, endpoint), part in ex.groupby(["method", "endpoint"], sort=True):
        if not part["route_failure"].all():
            continue
        if baseline_ok is not None and not any(
            baseline_of.get(r) in baseline_ok for r in part["id"].tolist()
        ):
            continue
        first = records_by_id.get(part["id"].iloc[0])
        status = response_status(first) if first is not None else None
        words = server_words(first) if first is not None else ""
        out.append(
            f"{method} {endpoint}: not implemented ({status}" + (f": {words})" if words else ")")
        )
    return out


def verdicts(
    exchanges: pd.DataFrame,
    findings: pd.DataFrame,
    records_by_id: Mapping[str, Record],
    pairs: pd.DataFrame,
    by: Sequence[str] = ("family", "transport"),
) -> pd.DataFrame:
    """One verdict per label and `by` (family and transport; or endpoint, for the report's
    matrix), with its reasons and counts, baseline first."""
    if exchanges.empty:
        return pd.DataFrame(columns=["label", "role", *by, *VERDICT_COLUMNS[4:]])
    role_of = roles(exchanges, pairs)
    keys = ["label", *by]
    ex = exchanges.assign(
        label=exchanges["label"].fillna("").astype(str),
        family=exchanges["family"].fillna("other").astype(str),
        endpoint=exchanges["endpoint"].fillna("(none)").astype(str),
        transport=exchanges["transport"].fillna("http").astype(str),
        method=exchanges["method"].fillna("").astype(str),
    )
    ex = ex.assign(outcome=exchange_outcomes(ex, findings, records_by_id))
    ex = ex[ex["outcome"] != SKIPPED]
    status = pd.to_numeric(ex["status"], errors="coerce")
    ex = ex.assign(
        route_failure=ex["outcome"] == UNSUPPORTED,
        succeeded=(statuses_2xx(status) | (status == 101)).fillna(False).astype(bool)
        & ~ex["soft_error"].eq(True),
    )
    baseline_ok = set(ex.loc[~ex["route_failure"], "id"].tolist())
    baseline_of = (
        dict(zip(pairs["candidate_id"].tolist(), pairs["baseline_id"].tolist(), strict=True))
        if len(pairs)
        else {}
    )
    place = ex.set_index("id")[list(by)]
    located = (
        findings.drop(columns=[c for c in by if c in findings.columns]).merge(
            place, left_on="candidate_id", right_index=True, how="inner"
        )
        if len(findings)
        else findings
    )
    for col in by:
        if col not in located.columns:
            located = located.assign(**{col: pd.Series(dtype=object)})
    grouped = dict(tuple(located.groupby(keys, sort=False))) if len(located) else {}
    rows = []
    for key, cell_ex in ex.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        label = str(key[0])
        cell = grouped.get(key, located.iloc[0:0])
        counts = [int((cell["severity"] == s).sum()) for s in SEVERITIES]
        role = role_of.get(label, "capture")
        if cell_ex["route_failure"].all():
            verdict = UNSUPPORTED
            reasons = _unsupported(cell_ex, records_by_id)
        else:
            missing = _not_implemented(cell_ex, records_by_id, baseline_ok, baseline_of)
            missing = missing if role == "candidate" else []
            if not cell_ex["succeeded"].any():
                missing = _failed(cell_ex, records_by_id) + missing
            verdict = (
                "breaking"
                if missing or counts[0]
                else "compatible with deviations"
                if counts[1]
                else "compatible"
            )
            reasons = (missing + _finding_reasons(cell))[:MAX_REASONS]
        rows.append((*key, role, verdict, reasons, *counts, len(cell_ex)))
    out = pd.DataFrame.from_records(
        rows,
        columns=[
            "label",
            *by,
            "role",
            "verdict",
            "reasons",
            "breaking",
            "deviations",
            "cosmetic",
            "exchanges",
        ],
    )
    out["_role"] = out["role"].map(ROLES.index)
    order = ["_role", "label", *by]
    if "family" in by:
        out["_family"] = out["family"].map(lambda f: FAMILIES.index(f) if f in FAMILIES else 99)
        order = ["_role", "label", "_family", *by]
    out = out.sort_values(order, kind="stable").drop(columns=["_role", "_family"], errors="ignore")
    return out[["label", "role", *by, *VERDICT_COLUMNS[4:]]].reset_index(drop=True)
