"""Grade each divergence by its client impact, and find the `client` findings of each pair.

A divergence is `breaking` when a break of its pair implicates it, as `breaks.implicates` says:
the candidate's answer makes the real SDK raise, fail or lose data, and this difference is why.
Else it is `cosmetic` for headers; for a value the references allow, that is with no conformance
problem of the candidate's answer at or below its path, such as `reasoning: null` or an extra
key; for event differences no grammar rule of the candidate's stream complains about; and where
the candidate answered well and the baseline did not. Else it is `deviation`.
"""

from __future__ import annotations

from wirediff._support import is_2xx
from wirediff._types import Record
from wirediff.analysis.comparison.breaks import Break, implicates, pair_breaks
from wirediff.analysis.comparison.conformance import RecordCheck

__all__ = ["answer_failed", "judging_breaks", "severity_of"]

SCHEMA_KINDS = frozenset({"schema_missing", "schema_extra", "schema_type", "enum"})
EVENT_KINDS = frozenset({"event_missing", "event_extra", "event_order"})
GRAMMAR_KINDS = frozenset({"event_terminal", "event_sequence"})
ANSWER_KINDS = frozenset({"status", "soft_error", "transport", "error_shape"})
_BOUNDARIES = ".[@"


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
    """Return the `(severity, evidence)` of a divergence `(kind, path, baseline, candidate)`."""
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


def answer_failed(record: Record) -> bool:
    """Tell whether a record got no answer, no 2xx, or an error in a 2xx.

    A candidate that answered well where such a baseline did not is no worse for what else
    differs."""
    resp = record["response"]
    return resp is None or not is_2xx(resp["status"]) or bool(record["tags"]["soft_error"])


def judging_breaks(
    b: RecordCheck, c: RecordCheck, words: str, no_answer: str | None
) -> tuple[tuple[Break, ...], tuple[Break, ...]]:
    """Return the breaks a candidate's divergences are judged by, and the pair's own breaks.

    The first are its answer's own and the pair's. The pair's own are those its answer does not
    show alone, each a `client` row of the pair, since its answer's are conformance rows. `words`
    and `no_answer` are as in `pair_breaks`."""
    alone = {(x.rule, x.probe) for x in c.breaks}
    found = tuple(
        x
        for x in pair_breaks(b.outcome, c.outcome, words, no_answer)
        if (x.rule, x.probe) not in alone
    )
    return c.breaks + found, found
