"""Client breakages: what the real SDK made of an answer (`impact`), judged.

On one answer alone (`record_breaks`): the SDK raised; tool-call arguments do not give an
object to `json.loads`; usage asked for with `stream_options.include_usage` never came; a
stream was asked for and nothing was streamed. A candidate against its baseline
(`pair_breaks`): the candidate makes the SDK fail where the baseline does not; it raises
where the baseline did not, or another class; streamed chunks or events, models or an
embedding the baseline gave are gone; tool arguments that parsed no longer do; usage the
baseline gave is absent. Generated content (an empty text) is not judged.

A break is `breaking` itself (a `client` finding, in the SDK's words), and it makes the
findings that explain it breaking (`implicates`): a changed status, a soft error or another
transport for a raise, a loss or a failure; a `usage` path for lost usage; an `arguments`/`tool_calls`
path for arguments; a key or event the failure names (`no attribute 'output'`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wirediff._support import clip, error_kind, is_2xx, response_status
from wirediff._types import Record
from wirediff.analysis.comparison.compare import error_message
from wirediff.analysis.comparison.impact import Failure, Outcome
from wirediff.record.tags import is_error_body

__all__ = [
    "ARGUMENTS",
    "FAILURE",
    "LOST",
    "RAISES",
    "USAGE",
    "Break",
    "implicates",
    "pair_breaks",
    "record_breaks",
    "server_words",
]

FAILURE, RAISES, LOST, ARGUMENTS, USAGE = "failure", "raises", "lost", "arguments", "usage"
STREAMED = ("chunks", "events", "models", "embedding")
"""What a probe counts as received (`some`/`vector`) or not."""
WORDS = 160
"""Characters of the server's own error message quoted in a break."""
_NAMED = re.compile(r"'([A-Za-z_][\w.]*)'|`([^`]+)`")
_ATTRIBUTE = re.compile(r"\.([A-Za-z_]\w*)")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_LABEL = re.compile(r"^events\[([^\]]*)\]")


@dataclass(frozen=True, slots=True)
class Break:
    """The client loses something on an answer: which call, in whose words, and what it
    explains."""

    rule: str
    probe: str
    message: str
    baseline: str = ""
    candidate: str = ""
    names: frozenset[str] = frozenset()
    """Keys and event types a failure names: the findings at them are its cause."""


def server_words(record: Record) -> str:
    """The server's own error message in an answer (an error object's `message`, a bare
    `message` or FastAPI's `detail`, an error event, or the text), shortened."""
    resp = record.get("response")
    if resp is None:
        return ""
    doc = resp.get("body")
    for ev in resp.get("events") or ():
        if isinstance(ev, dict) and is_error_body(ev.get("data")):
            doc = ev["data"]
            break
    if isinstance(doc, dict) and "error" not in doc:
        said = doc.get("message") or doc.get("detail")
        doc = said if isinstance(said, str) else None
    if doc is None:
        doc = resp.get("text")
    return clip(error_message(doc), WORDS) if doc not in (None, "") else ""


def _names(failure: Failure) -> frozenset[str]:
    code = failure.where.split(": ", 1)[1] if ": " in failure.where else ""
    found = {a or b for a, b in _NAMED.findall(failure.error)}
    found |= set(_ATTRIBUTE.findall(code))
    return frozenset(found)


def failure_break(failure: Failure) -> Break:
    return Break(
        FAILURE, failure.probe, failure.evidence, candidate=failure.error, names=_names(failure)
    )


def _arguments(probe: str, kind: str, baseline: str = "") -> Break:
    message = f"`{probe}`: tool-call arguments are {kind}, `json.loads` gives no object"
    return Break(ARGUMENTS, probe, message, baseline, kind)


def _usage(probe: str, baseline: str = "") -> Break:
    message = f"`{probe}`: no usage, though `stream_options.include_usage` asked for it"
    return Break(USAGE, probe, message, baseline, "absent")


def _lost(probe: str, key: str, kind: str, baseline: str = "") -> Break:
    message = f"`{probe}`: {key} {kind}, a stream was asked for"
    return Break(LOST, probe, message, baseline, kind)


def record_breaks(record: Record, outcome: Outcome) -> tuple[Break, ...]:
    """What breaks on this answer alone."""
    if not outcome.judged:
        return ()
    out = [failure_break(f) for f in outcome.failures]
    for key in ("tool_arguments", "final.tool_arguments"):
        kind = outcome.get(key)
        if kind is not None and kind != "object" and not any(b.rule == ARGUMENTS for b in out):
            out.append(_arguments(outcome.probe_of(key), kind))
    body = (record.get("request") or {}).get("body")
    body = body if isinstance(body, dict) else {}
    options = body.get("stream_options")
    if (
        isinstance(options, dict)
        and options.get("include_usage")
        and outcome.get("usage") == "absent"
    ):
        out.append(_usage(outcome.probe_of("usage")))
    if body.get("stream") is True and is_2xx(response_status(record)):
        for key in ("chunks", "events"):
            if outcome.get(key) == "none":
                out.append(_lost(outcome.probe_of(key), key, "none"))
    return tuple(out)


def _class(raised: str) -> str:
    return raised.split(":", 1)[0]


def pair_breaks(base: Record, cand: Record, b: Outcome, c: Outcome) -> tuple[Break, ...]:
    """What breaks on the candidate's answer that did not on the baseline's."""
    if not b.judged:
        return ()
    if not cand.get("response"):
        kind = error_kind(cand) or "no response"
        probe = b.probes[0][1] if b.probes else ""
        message = f"`{probe}` raises APIConnectionError: no answer ({kind})"
        return (Break(RAISES, probe, message, b.get("raises") or "", "APIConnectionError"),)
    if not c.judged:
        return ()
    out: list[Break] = []
    known = {(f.probe, f.error) for f in b.failures}
    out += [failure_break(f) for f in c.failures if (f.probe, f.error) not in known]
    b_raised, c_raised = b.get("raises"), c.get("raises")
    if c_raised is not None and (b_raised is None or _class(b_raised) != _class(c_raised)):
        probe = c.probe_of("raises")
        words = server_words(cand)
        message = f"`{probe}` raises {_class(c_raised)}" + (f": {words}" if words else "")
        out.append(Break(RAISES, probe, message, b_raised or "nothing raised", c_raised))
    for key in STREAMED:
        got, had = c.get(key), b.get(key)
        if had in ("some", "vector") and got != had:
            out.append(_lost(c.probe_of(key) or b.probe_of(key), key, got or "nothing", had))
    for key in ("tool_arguments", "final.tool_arguments"):
        got = c.get(key)
        if b.get(key) == "object" and got != "object":
            out.append(_arguments(c.probe_of(key) or b.probe_of(key), got or "absent", "object"))
    for key in ("usage", "final.usage"):
        if b.get(key) == "present" and c.get(key) == "absent":
            message = f"`{c.probe_of(key)}`: usage is absent, the baseline's answer had it"
            out.append(Break(USAGE, c.probe_of(key), message, "present", "absent"))
    return tuple(out)


def segments(path: str) -> list[str]:
    """`events[chunk].choices[].delta.tool_calls[].function.arguments@json` → `events`,
    `choices`, `delta`, `tool_calls`, `function`, `arguments`, `json`."""
    return [s for s in re.split(r"[.@]", _BRACKETS.sub("", path)) if s]


def implicates(brk: Break, kind: str, path: str, baseline: str = "", candidate: str = "") -> bool:
    """Whether a finding (of another kind than `client`) is a cause of the break."""
    if kind in ("status", "soft_error", "transport"):
        return brk.rule in (RAISES, LOST, FAILURE)
    parts = segments(path)
    if brk.rule == USAGE:
        return "usage" in parts or path == "events[chunk.usage]"
    if brk.rule == ARGUMENTS:
        return "arguments" in parts or "tool_calls" in parts
    label = _LABEL.match(path)
    if kind.startswith("event_") or (label and label.end() == len(path)):
        labels = {label.group(1) if label else "", baseline, candidate}
        return any(x.rstrip("+") in brk.names for x in labels if x)
    return bool(parts) and parts[-1] in brk.names
