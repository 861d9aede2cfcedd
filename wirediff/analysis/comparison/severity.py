"""Severity by client impact: how much each divergence matters, and the `client` findings of
each pair.

A divergence is `breaking` when a break of its pair implicates it (`breaks.implicates`: the
candidate's answer makes the real SDK raise, fail or lose data, and this difference is why);
else `cosmetic` for headers, for a value the references allow (no conformance problem of the
candidate's answer at or below its path: `reasoning: null`, an extra key), for event
differences no grammar rule of the candidate's stream complains about, and where the
candidate answered well and the baseline did not; else `deviation`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from wirediff._support import is_2xx, says_of_server
from wirediff._types import Record
from wirediff.analysis.comparison.breaks import RAISES, Break, implicates, pair_breaks
from wirediff.analysis.comparison.conformance import RecordCheck
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS, PAIR_META
from wirediff.analysis.comparison.impact import Outcome
from wirediff.analysis.comparison.observe import MEMO_LIMIT

__all__ = ["judge", "severity_of"]

SCHEMA_KINDS = frozenset({"schema_missing", "schema_extra", "schema_type", "enum"})
EVENT_KINDS = frozenset({"event_missing", "event_extra", "event_order"})
GRAMMAR_KINDS = frozenset({"event_terminal", "event_sequence"})
ANSWER_KINDS = frozenset({"status", "soft_error", "transport", "error_shape"})
_BOUNDARIES = ".[@"
_NO_CHECK = RecordCheck(Outcome(judged=False))
_judged: dict[tuple[Any, ...], tuple[str, str]] = {}


def _at_or_below(path: str, paths: frozenset[str]) -> bool:
    if path in paths:
        return True
    return any(
        p.startswith(path) and p[len(path)] in _BOUNDARIES for p in paths if len(p) > len(path)
    )


def _label(path: str) -> str:
    return path[7:].split("]", 1)[0].rstrip("+") if path.startswith("events[") else ""


def severity_of(
    row: tuple[str, str, str, str],
    breaks: tuple[Break, ...],
    check: RecordCheck,
    candidate_better: bool,
) -> tuple[str, str]:
    """`(severity, evidence)` of a divergence `(kind, path, baseline, candidate)`."""
    kind, path, baseline, candidate = row
    for brk in breaks:
        if implicates(brk, kind, path, baseline, candidate):
            return "breaking", brk.message
    if kind == "header":
        return "cosmetic", ""
    if kind in SCHEMA_KINDS:
        return ("deviation" if _at_or_below(path, check.paths) else "cosmetic"), ""
    if kind in EVENT_KINDS or kind in GRAMMAR_KINDS:
        label = "terminal" if kind == "event_terminal" else _label(path)
        named = any(label and label in text for text in check.grammar)
        return ("deviation" if named else "cosmetic"), ""
    if kind in ANSWER_KINDS and candidate_better:
        return "cosmetic", ""
    return "deviation", ""


def _failed(record: Record | None) -> bool:
    resp = record["response"] if record is not None else None
    if resp is None or record is None:
        return True
    return not is_2xx(resp["status"]) or record["tags"]["soft_error"]


_pairs: dict[tuple[Outcome, Outcome], tuple[Break, ...]] = {}


def _pair_breaks(base: Record, cand: Record, b: RecordCheck, c: RecordCheck) -> tuple[Break, ...]:
    """`pair_breaks`, remembered per pair of outcomes unless a break quotes the server."""
    if not cand.get("response"):
        return pair_breaks(base, cand, b.outcome, c.outcome)
    key = (b.outcome, c.outcome)
    found = _pairs.get(key)
    if found is None:
        found = pair_breaks(base, cand, b.outcome, c.outcome)
        if any(brk.rule == RAISES or brk.key.endswith("error.message") for brk in found):
            return found  # they quote the server
        if len(_pairs) >= MEMO_LIMIT:
            _pairs.clear()
        _pairs[key] = found
    return found


def _client_row(meta: tuple[Any, ...], brk: Break) -> tuple[Any, ...]:
    finding = (brk.probe, brk.baseline, brk.candidate, "breaking", brk.client, "", brk.message)
    return (*meta, "client", *finding, brk.message)


def judge(
    divergences: pd.DataFrame,
    pairs: pd.DataFrame,
    records_by_id: dict[str, Record],
    checks: dict[str, RecordCheck],
) -> pd.DataFrame:
    """The divergences with their severity and evidence, and a `client` row for each break
    of a pair that its candidate's answer does not show alone (those are conformance rows)."""
    context: dict[str, tuple[tuple[Break, ...], RecordCheck, bool]] = {}
    client_rows: list[tuple[Any, ...]] = []
    for meta in zip(*(pairs[c].tolist() for c in PAIR_META), strict=True):
        pair_id, bid, cid = (
            meta[PAIR_META.index(c)] for c in ("pair_id", "baseline_id", "candidate_id")
        )
        base, cand = records_by_id.get(bid), records_by_id.get(cid)
        if base is None or cand is None or not (says_of_server(base) and says_of_server(cand)):
            continue
        b_check, c_check = checks.get(bid, _NO_CHECK), checks.get(cid, _NO_CHECK)
        alone = {(b.rule, b.probe) for b in c_check.breaks}
        found = tuple(
            b for b in _pair_breaks(base, cand, b_check, c_check) if (b.rule, b.probe) not in alone
        )
        client_rows += [_client_row(meta, brk) for brk in found]
        context[pair_id] = (c_check.breaks + found, c_check, _failed(base) and not _failed(cand))
    if divergences.empty:
        judged = divergences.reindex(columns=DIVERGENCE_COLUMNS)
    else:
        severities: list[str] = []
        evidence: list[str] = []
        rows = zip(
            *(
                divergences[c].tolist()
                for c in ("pair_id", "kind", "path", "baseline", "candidate")
            ),
            strict=True,
        )
        for pair_id, *finding in rows:
            breaks, check, better = context.get(pair_id, ((), _NO_CHECK, False))
            key = (*finding, breaks, check.paths, check.grammar, better)
            verdict = _judged.get(key)
            if verdict is None:
                if len(_judged) >= MEMO_LIMIT:
                    _judged.clear()
                kind, path, base_value, cand_value = finding
                verdict = _judged[key] = severity_of(
                    (kind, path, base_value, cand_value), breaks, check, better
                )
            severities.append(verdict[0])
            evidence.append(verdict[1])
        judged = divergences.assign(severity=severities, evidence=evidence)
    if not client_rows:
        return judged
    client = pd.DataFrame.from_records(client_rows, columns=DIVERGENCE_COLUMNS)
    frames = [f for f in (judged, client) if len(f)]
    return pd.concat(frames, ignore_index=True)[DIVERGENCE_COLUMNS]
