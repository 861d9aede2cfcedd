"""Divergences: how a candidate backend's answer differs on the wire from the baseline's.

Each record is first reduced to what it shows (`observe`): status, error, content type,
the headers clients rely on, the body's shape, and for streams the event-type sequence
with delta runs collapsed. Pairs are then compared kind by kind (`compare`). Generated
text, ids and timestamps never reach a comparison: shapes hold types, and only constant
fields keep values.

Noise control follows Diffy: whatever differs between two answers that *should* be the
same — two replays of one original to the same label, a replay to the baseline's own
label, or repeated originals of one request — is noise and dropped from every pair of
that original.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

import pandas as pd

from wirediff._support import is_2xx
from wirediff._types import JSON, Event, Record
from wirediff.analysis.comparison.kinds import kind_names
from wirediff.analysis.comparison.shapes import (
    Frozen,
    Shape,
    Values,
    add_parsed,
    ancestors,
    by_path,
    flat,
    flatten,
    json_type,
    structure,
    type_label,
)
from wirediff.record.tags import is_error_body, soft_error

DIVERGENCE_COLUMNS = [
    "pair_id", "label", "baseline_label", "baseline_id", "candidate_id", "family", "endpoint",
    "kind", "path", "baseline", "candidate", "severity", "message",
]  # fmt: skip
PAIR_META = DIVERGENCE_COLUMNS[:7]

KINDS = kind_names(compared_only=True)

DONE = "[DONE]"
CHUNK = "chunk"
RESPONSE_TERMINALS = frozenset(
    {"response.completed", "response.failed", "response.incomplete", "error"}
)
ERROR_FIELDS = (
    ("message", frozenset({"string"})),
    ("type", frozenset({"string"})),
    ("param", frozenset({"string", "null"})),
    ("code", frozenset({"string", "null"})),
)
CHUNK_ARGUMENTS = f"events[{CHUNK}].choices[].delta.tool_calls[].function.arguments"
RESPONSE_ARGUMENTS_DELTA = "response.function_call_arguments.delta"
EMBEDDED = "response.*"
EMBEDDED_PREFIX = f"events[{EMBEDDED}].response"
"""Where the Response objects carried by stream events are compared, merged."""
NOISE_SAMPLES = 8
"""How many repeats of one answer are compared to learn its noise (Diffy samples too)."""

SHORT = 120

CHUNK_PREFIX = f"events[{CHUNK}]"
CHUNK_TOOL_CALLS = (f"{CHUNK_PREFIX}.choices[].delta.tool_calls", "array")
"""A chunk without this in its shape carries no tool-call argument fragments."""
MEMO_LIMIT = 1 << 14
"""How many entries each table of remembered shapes and comparisons keeps (then it starts
over): what is remembered depends only on its key, so forgetting costs only time."""
_compared: dict[tuple[Frozen, Frozen, Frozen, Frozen], tuple[Finding, ...]] = {}
EventShape = tuple[Frozen, Frozen, Frozen | None, Frozen | None]
_event_shapes: dict[tuple[int, str], EventShape] = {}
_unions: dict[frozenset[Frozen], Frozen] = {}


@dataclass(frozen=True, slots=True)
class Finding:
    """One difference between a baseline and a candidate answer."""

    kind: str
    path: str
    baseline: str
    candidate: str
    severity: str
    message: str


@dataclass(slots=True)
class Observed:
    """What one record shows on the wire, reduced to what gets compared."""

    responded: bool
    failure: str = ""
    status: int | None = None
    content_type: str = ""
    media_type: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    rate_limits: frozenset[str] = frozenset()
    asked_stream: bool = False
    is_stream: bool = False
    failed: bool = False
    soft_error: bool = False
    error_doc: JSON = None
    error_prefix: str = ""
    shape: Frozen = frozenset()
    values: Frozen = frozenset()
    event_shapes: dict[str, tuple[Frozen, Frozen]] = field(default_factory=dict)
    embedded: dict[str, tuple[Frozen, Frozen]] = field(default_factory=dict)
    labels: list[str] = field(default_factory=list)
    terminal: str | None = None
    sequence_fault: tuple[str, str] | None = None


# --- observing one record ---------------------------------------------------------------


def short(value: JSON) -> str:
    """A value as a short JSON string for the baseline/candidate columns."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHORT else text[: SHORT - 1] + "…"


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def normalize_content_type(content_type: str) -> str:
    return ";".join(part.strip() for part in content_type.lower().split(";"))


def observe(record: Record) -> Observed:
    """Reduce a record to the facts `compare` looks at."""
    resp = record.get("response")
    if not resp:
        failure = (record.get("error") or {}).get("kind") or "no response"
        return Observed(responded=False, failure=str(failure))
    # The first of repeated headers counts: it is set last, going backwards.
    headers = {name.lower(): value for name, value in reversed(resp.get("headers") or ())}
    status = resp.get("status")
    body, events = resp.get("body"), resp.get("events")
    request_body = (record.get("request") or {}).get("body")
    obs = Observed(
        responded=True,
        status=status,
        content_type=headers.get("content-type", ""),
        media_type=media_type(headers.get("content-type", "")),
        headers=headers,
        rate_limits=frozenset(n for n in headers if n.startswith("x-ratelimit-")),
        asked_stream=isinstance(request_body, dict) and request_body.get("stream") is True,
        is_stream=events is not None,
        soft_error=soft_error(status, body, events),
    )
    obs.failed = obs.soft_error or not is_2xx(status)
    if obs.failed:
        _observe_error(obs, resp)
        return obs
    family = (record.get("tags") or {}).get("family")
    if events is not None:
        _observe_stream(obs, events, chat=family in ("chat.completions", "completions"))
    elif body is not None:
        obs.shape, obs.values = flat(body)
    return obs


def _observe_error(obs: Observed, resp: dict[str, Any]) -> None:
    """The document to hold against the OpenAI `Error` object: the body, or the stream's
    error event."""
    events = resp.get("events")
    if events is not None:
        for ev in events:
            data = ev.get("data")
            if is_error_body(data):
                obs.error_doc, obs.error_prefix = data, "events[error]."
                return
    if resp.get("body") is not None:
        obs.error_doc = resp["body"]
    elif resp.get("text"):
        obs.error_doc = resp["text"]


def chunk_label(data: dict[str, Any]) -> str:
    """Name a chat chunk by what it carries, so chunk sequences can be aligned."""
    if "error" in data:
        return "error"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        return "chunk.usage" if data.get("usage") else CHUNK
    choice = choices[0] if isinstance(choices[0], dict) else {}
    if choice.get("finish_reason"):
        return "chunk.finish"
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return "chunk.text.delta" if "text" in choice else CHUNK
    calls = delta.get("tool_calls")
    if calls:
        # The head of a call carries its id; what follows are argument fragments.
        heads = isinstance(calls, list) and any(isinstance(c, dict) and "id" in c for c in calls)
        return "chunk.tool_call" if heads else "chunk.tool_calls.delta"
    if any(v for k, v in delta.items() if k != "role"):
        return "chunk.content.delta"
    return "chunk.role" if "role" in delta else "chunk.empty"


def event_label(ev: Event, chat: bool) -> str:
    data = ev.get("data")
    if data == DONE:
        return DONE
    if not isinstance(data, dict):
        return "text"
    if chat:
        return chunk_label(data)
    typ = data.get("type")
    if isinstance(typ, str):
        return typ
    name = ev.get("event")
    return name if isinstance(name, str) and name else "message"


def collapse(labels: Iterable[str]) -> list[str]:
    """`a.delta, a.delta, b` → `a.delta+, b`: how many deltas is generated, not protocol."""
    out: list[str] = []
    for label in labels:
        if label.endswith(".delta"):
            label += "+"
            if out and out[-1] == label:
                continue
        out.append(label)
    return out


def split_terminal(labels: list[str], chat: bool) -> tuple[list[str], str | None]:
    """Separate the terminal event (`[DONE]`, `response.completed`, …) from the rest."""
    if chat:
        if labels and labels[-1] == DONE:
            return labels[:-1], DONE
        return labels, None
    trailer: list[str] = []
    body = list(labels)
    while body and body[-1] == DONE:
        trailer.append(body.pop())
    if body and body[-1] in RESPONSE_TERMINALS:
        terminal = body.pop()
        return body + trailer, terminal
    return labels, None


def _observe_stream(obs: Observed, events: list[Event], chat: bool) -> None:
    complete = [ev for ev in events if not ev.get("partial")]
    labels = [event_label(ev, chat) for ev in complete]
    obs.labels, obs.terminal = split_terminal(collapse(labels), chat)
    if chat:
        _chat_shapes(obs, complete, labels)
    else:
        _typed_shapes(obs, complete, labels)
        obs.sequence_fault = sequence_fault(complete, labels)


def _chat_shapes(obs: Observed, events: list[Event], labels: list[str]) -> None:
    """All chunks merged into one shape; tool-call arguments reassembled from deltas."""
    shapes: set[Frozen] = set()
    values: set[Frozen] = set()
    fragments: dict[tuple[Any, Any], list[str]] = {}
    broken: set[tuple[Any, Any]] = set()
    for ev, label in zip(events, labels, strict=True):
        data = ev["data"]
        if label in (DONE, "error", "text"):
            continue
        chunk_shape, chunk_values = flat(data, CHUNK_PREFIX, parse_arguments=False)
        shapes.add(chunk_shape)
        values.add(chunk_values)
        if CHUNK_TOOL_CALLS not in chunk_shape:
            continue
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            for call in (delta.get("tool_calls") or ()) if isinstance(delta, dict) else ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and "arguments" in fn:
                    key = (choice.get("index"), call.get("index"))
                    if isinstance(fn["arguments"], str):
                        fragments.setdefault(key, []).append(fn["arguments"])
                    else:
                        broken.add(key)
    texts = ["".join(parts) for key, parts in fragments.items() if key not in broken]
    if texts:
        _add_arguments(texts, CHUNK_ARGUMENTS, shapes, values)
    shape = _union(shapes)
    if shape:
        obs.event_shapes[CHUNK] = (shape, _union(values))


def _add_arguments(texts: list[str], path: str, shapes: set[Frozen], values: set[Frozen]) -> None:
    """The shapes of reassembled tool-call arguments, as one more part of a merged shape."""
    shape: Shape = set()
    found: Values = set()
    for text in texts:
        add_parsed(text, path, shape, found)
    shapes.add(frozenset(shape))
    values.add(frozenset(found))


def _union(parts: set[Frozen]) -> Frozen:
    """The union of the shapes (or constants) of several events, one object per distinct
    union: the events of one stream share a few structures, and the streams of one kind
    their unions, so remembered comparisons find them by identity."""
    if len(parts) == 1:
        return next(iter(parts))
    key = frozenset(parts)
    found = _unions.get(key)
    if found is None:
        if len(_unions) >= MEMO_LIMIT:
            _unions.clear()
        found = _unions[key] = frozenset().union(*parts)
    return found


def _typed_shapes(obs: Observed, events: list[Event], labels: list[str]) -> None:
    """One shape per event type; the Response object that `response.created`, `.completed`
    and the like carry merged into one shape (a missing field is one finding, not one per
    event); function-call argument deltas reassembled per item."""
    arguments: dict[Any, list[str]] = {}
    parts: dict[str, tuple[set[Frozen], set[Frozen]]] = {}
    embedded_parts: dict[str, tuple[set[Frozen], set[Frozen]]] = {}
    for ev, label in zip(events, labels, strict=True):
        data = ev["data"]
        if not isinstance(data, dict):
            continue
        ev_shape, ev_values, r_shape, r_values = _event_shape(data, label)
        shapes, values = parts.setdefault(label, (set(), set()))
        shapes.add(ev_shape)
        values.add(ev_values)
        if r_shape is not None and r_values is not None:
            shapes, values = embedded_parts.setdefault(label, (set(), set()))
            shapes.add(r_shape)
            values.add(r_values)
        if label == RESPONSE_ARGUMENTS_DELTA and isinstance(data.get("delta"), str):
            arguments.setdefault(data.get("item_id"), []).append(data["delta"])
    if arguments:
        shapes, values = parts[RESPONSE_ARGUMENTS_DELTA]
        texts = ["".join(pieces) for pieces in arguments.values()]
        _add_arguments(texts, f"events[{RESPONSE_ARGUMENTS_DELTA}].delta", shapes, values)
    obs.event_shapes = {label: (_union(s), _union(v)) for label, (s, v) in parts.items()}
    obs.embedded = {label: (_union(s), _union(v)) for label, (s, v) in embedded_parts.items()}


def _event_shape(data: dict[str, Any], label: str) -> EventShape:
    """One typed event's shape and constants, and those of the Response it carries (if it
    does), worked out once per structure and label."""
    key = (structure(data), label)
    found = _event_shapes.get(key)
    if found is not None:
        return found
    shape: Shape = set()
    values: Values = set()
    r_shape: Frozen | None = None
    r_values: Frozen | None = None
    embedded = data.get("response")
    if isinstance(embedded, dict):
        data = {k: v for k, v in data.items() if k != "response"}
        shape.add((f"events[{label}].response", "object"))
        r_shape, r_values = flat(embedded, EMBEDDED_PREFIX)
    flatten(data, f"events[{label}]", shape, values)
    values.discard((f"events[{label}].type", label))  # the label says it
    if len(_event_shapes) >= MEMO_LIMIT:
        _event_shapes.clear()
    found = _event_shapes[key] = (frozenset(shape), frozenset(values), r_shape, r_values)
    return found


def sequence_fault(events: list[Event], labels: list[str]) -> tuple[str, str] | None:
    """The first event whose `sequence_number` is missing or not the previous plus one."""
    expected = 0
    for ev, label in zip(events, labels, strict=True):
        data = ev["data"]
        if not isinstance(data, dict):
            continue
        number = data.get("sequence_number")
        path = f"events[{label}].sequence_number"
        if not isinstance(number, int) or isinstance(number, bool):
            return path, "missing" if number is None else json_type(number)
        if number != expected:
            return path, f"{number} where {expected} expected"
        expected = number + 1
    return None


# --- comparing two observations ---------------------------------------------------------


def compare(b: Observed, c: Observed) -> list[Finding]:
    """Every difference between a baseline and a candidate observation."""
    if not (b.responded and c.responded):
        return _compare_responded(b, c)
    out: list[Finding] = []
    if b.status != c.status:
        out.append(
            Finding(
                "status",
                "status",
                str(b.status),
                str(c.status),
                "error",
                f"status {b.status} became {c.status}",
            )
        )
    out += _compare_soft_error(b, c)
    out += _compare_headers(b, c)
    if c.failed and (c.soft_error or (c.status or 0) >= 400):
        out += _compare_error_shape(b, c)
    transport = _compare_transport(b, c) if is_2xx(b.status) and is_2xx(c.status) else []
    out += transport
    if b.failed or c.failed or transport:
        return out
    if b.is_stream:
        out += _compare_events(b, c)
        for label, (b_shape, b_values) in b.event_shapes.items():
            if label in c.event_shapes:
                c_shape, c_values = c.event_shapes[label]
                out += compare_shapes(b_shape, c_shape, b_values, c_values)
        out += _compare_embedded(b, c)
    else:
        out += compare_shapes(b.shape, c.shape, b.values, c.values)
    return out


def _compare_embedded(b: Observed, c: Observed) -> list[Finding]:
    """The Response objects carried by the event types both streams have, merged."""
    common = [label for label in b.embedded if label in c.embedded]
    if not common:
        return []
    merged = [
        (_union({o.embedded[t][0] for t in common}), _union({o.embedded[t][1] for t in common}))
        for o in (b, c)
    ]
    return compare_shapes(merged[0][0], merged[1][0], merged[0][1], merged[1][1])


def _compare_responded(b: Observed, c: Observed) -> list[Finding]:
    if b.responded == c.responded:
        return []
    if not c.responded:
        return [
            Finding(
                "transport",
                "response",
                str(b.status),
                c.failure,
                "error",
                f"no response from the candidate ({c.failure})",
            )
        ]
    return [
        Finding(
            "transport",
            "response",
            b.failure,
            str(c.status),
            "info",
            f"the baseline got no response ({b.failure}); the candidate answered {c.status}",
        )
    ]


def _compare_soft_error(b: Observed, c: Observed) -> list[Finding]:
    if b.soft_error == c.soft_error:
        return []
    if c.soft_error:
        return [
            Finding(
                "soft_error",
                "error",
                "",
                short(c.error_doc),
                "error",
                f"a {c.status} answer that carries an error: {error_message(c.error_doc)}",
            )
        ]
    return [
        Finding(
            "soft_error",
            "error",
            short(b.error_doc),
            "",
            "info",
            f"the baseline's {b.status} carried an error; the candidate's does not",
        )
    ]


def error_message(doc: JSON) -> str:
    """The human part of an error document, shortened, for one-line messages."""
    err = doc.get("error") if isinstance(doc, dict) else doc
    if isinstance(err, dict):
        err = err.get("message", err)
    return short(err)[:80]


_header_findings: dict[tuple[Any, ...], tuple[Finding, ...]] = {}


def _compare_headers(b: Observed, c: Observed) -> list[Finding]:
    """What the headers of a pair differ in, worked out once per distinct set of facts."""
    key = (
        "x-request-id" in b.headers,
        "x-request-id" in c.headers,
        b.rate_limits,
        c.rate_limits,
        b.media_type,
        c.media_type,
        b.content_type,
        c.content_type,
    )
    found = _header_findings.get(key)
    if found is None:
        if len(_header_findings) >= MEMO_LIMIT:
            _header_findings.clear()
        found = _header_findings[key] = tuple(_header_differences(b, c))
    return list(found)


def _header_differences(b: Observed, c: Observed) -> list[Finding]:
    out: list[Finding] = []
    for name in ("x-request-id",):
        if (name in b.headers) != (name in c.headers):
            side = "candidate" if name in b.headers else "baseline"
            out.append(
                Finding(
                    "header",
                    f"headers.{name}",
                    _presence(b.headers, name),
                    _presence(c.headers, name),
                    "warning",
                    f"`{name}` is missing in the {side}",
                )
            )
    b_limits, c_limits = b.rate_limits, c.rate_limits
    if b_limits != c_limits:
        only_b, only_c = sorted(b_limits - c_limits), sorted(c_limits - b_limits)
        what = f"missing {', '.join(only_b)}" if only_b else f"extra {', '.join(only_c)}"
        out.append(
            Finding(
                "header",
                "headers.x-ratelimit-*",
                ",".join(only_b),
                ",".join(only_c),
                "info",
                f"rate-limit headers differ: {what}",
            )
        )
    if (
        b.media_type == c.media_type
        and b.content_type != c.content_type
        and normalize_content_type(b.content_type) != normalize_content_type(c.content_type)
    ):
        out.append(
            Finding(
                "header",
                "headers.content-type",
                b.content_type,
                c.content_type,
                "info",
                f"content-type parameters differ: {c.content_type!r}",
            )
        )
    return out


def _presence(headers: dict[str, str], name: str) -> str:
    """Request ids differ by nature: only whether one is there is compared."""
    return "present" if name in headers else ""


def error_faults(doc: JSON, prefix: str = "") -> list[tuple[str, str, str]]:
    """How a document departs from OpenAI's `{"error": Error}`: (path, expected, got)."""
    if not isinstance(doc, dict) or "error" not in doc:
        got = short(doc) if doc is not None else ""
        return [(f"{prefix}error", "object", got)]
    err = doc["error"]
    if not isinstance(err, dict):
        return [(f"{prefix}error", "object", json_type(err))]
    faults = []
    for key, allowed in ERROR_FIELDS:
        expected = type_label(allowed)
        if key not in err:
            faults.append((f"{prefix}error.{key}", expected, ""))
        elif json_type(err[key]) not in allowed:
            faults.append((f"{prefix}error.{key}", expected, json_type(err[key])))
    return faults


def _compare_error_shape(b: Observed, c: Observed) -> list[Finding]:
    known = (
        {path for path, _, _ in error_faults(b.error_doc, b.error_prefix)} if b.failed else set()
    )
    out = [
        Finding(
            "error_shape",
            path,
            expected,
            got,
            "warning",
            f"the error is not OpenAI-shaped: `{path}` should be {expected}, "
            + (f"got {got[:80]}" if got else "is absent"),
        )
        for path, expected, got in error_faults(c.error_doc, c.error_prefix)
        if path not in known
    ]
    if b.failed:
        b_type, c_type = _error_type(b.error_doc), _error_type(c.error_doc)
        if b_type is not None and c_type is not None and b_type != c_type:
            path = f"{c.error_prefix}error.type"
            out.append(
                Finding(
                    "enum",
                    path,
                    short(b_type),
                    short(c_type),
                    "warning",
                    f"`{path}` is {c_type!r}, the baseline says {b_type!r}",
                )
            )
    return out


def _error_type(doc: JSON) -> str | None:
    err = doc.get("error") if isinstance(doc, dict) else None
    typ = err.get("type") if isinstance(err, dict) else None
    return typ if isinstance(typ, str) else None


def _compare_transport(b: Observed, c: Observed) -> list[Finding]:
    if b.is_stream and not c.is_stream and c.asked_stream:
        message = f"asked for a stream (SSE), got {c.media_type or 'no content type'}"
    elif b.is_stream != c.is_stream or b.media_type != c.media_type:
        message = f"content type {b.media_type or 'none'} became {c.media_type or 'none'}"
    else:
        return []
    return [Finding("transport", "content-type", b.media_type, c.media_type, "error", message)]


def _compare_events(b: Observed, c: Observed) -> list[Finding]:
    out: list[Finding] = []
    if b.labels != c.labels:
        out += align_events(b.labels, c.labels)
    if b.terminal != c.terminal:
        severity = "error" if c.terminal is None else ("info" if b.terminal is None else "warning")
        out.append(
            Finding(
                "event_terminal",
                "events[terminal]",
                b.terminal or "",
                c.terminal or "",
                severity,
                f"the stream ends with {c.terminal or 'no terminal event'}, "
                f"the baseline's with {b.terminal or 'none'}",
            )
        )
    if b.sequence_fault is None and c.sequence_fault is not None:
        path, got = c.sequence_fault
        out.append(
            Finding(
                "event_sequence", path, "0, 1, 2, …", got, "warning", f"`sequence_number` is {got}"
            )
        )
    return out


def align_events(base: list[str], cand: list[str]) -> list[Finding]:
    """Align two collapsed event sequences; an event both dropped and added has moved."""
    missing: dict[str, int] = {}
    extra: dict[str, int] = {}
    matcher = SequenceMatcher(None, base, cand, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("delete", "replace"):
            for i in range(i1, i2):
                missing.setdefault(base[i], i)
        if tag in ("insert", "replace"):
            for j in range(j1, j2):
                extra.setdefault(cand[j], j)
    out: list[Finding] = []
    for label, i in missing.items():
        path = f"events[{label}]"
        if label in extra:
            j = extra[label]
            out.append(
                Finding(
                    "event_order",
                    path,
                    f"#{i}",
                    f"#{j}",
                    "warning",
                    f"`{label}` comes at position {j}, the baseline has it at {i}",
                )
            )
        else:
            out.append(
                Finding(
                    "event_missing",
                    path,
                    f"#{i}",
                    "",
                    "warning",
                    f"`{label}` is missing (baseline position {i})",
                )
            )
    for label, j in extra.items():
        if label not in missing:
            out.append(
                Finding(
                    "event_extra",
                    f"events[{label}]",
                    "",
                    f"#{j}",
                    "info",
                    f"`{label}` is extra (position {j})",
                )
            )
    return out


def compare_shapes(
    b_shape: AbstractSet[tuple[str, str]],
    c_shape: AbstractSet[tuple[str, str]],
    b_values: AbstractSet[tuple[str, str]],
    c_values: AbstractSet[tuple[str, str]],
) -> list[Finding]:
    """Missing, extra and retyped paths (topmost only), then changed constant values.

    Answers of one kind share a handful of shapes, so each distinct comparison is made
    once (shapes are frozen when observed, and a frozenset hashes once)."""
    key = (frozenset(b_shape), frozenset(c_shape), frozenset(b_values), frozenset(c_values))
    found = _compared.get(key)
    if found is None:
        if len(_compared) >= MEMO_LIMIT:
            _compared.clear()
        found = _compared[key] = tuple(_compare_shapes(*key))
    return list(found)


def _compare_shapes(
    b_shape: Frozen, c_shape: Frozen, b_values: Frozen, c_values: Frozen
) -> list[Finding]:
    out: list[Finding] = []
    reported: set[str] = set()
    if b_shape != c_shape:
        differing = {path for path, _ in b_shape ^ c_shape}
        b_types, c_types = by_path(b_shape, differing), by_path(c_shape, differing)
        for path in sorted(differing):
            if any(a in reported for a in ancestors(path)):
                continue
            reported.add(path)
            out.append(_shape_finding(path, b_types.get(path), c_types.get(path)))
    if b_values != c_values:
        changed = {path for path, _ in b_values ^ c_values}
        b_seen, c_seen = by_path(b_values, changed), by_path(c_values, changed)
        for path in sorted(b_seen.keys() & c_seen.keys()):
            if path in reported or any(a in reported for a in ancestors(path)):
                continue
            out.append(_enum_finding(path, b_seen[path], c_seen[path]))
    return out


def _enum_finding(path: str, bv: set[str], cv: set[str]) -> Finding:
    key = path.rsplit(".", 1)[-1]
    return Finding(
        "enum",
        path,
        short(sorted(bv)),
        short(sorted(cv)),
        "error" if key in ("object", "type") else "warning",
        f"`{path}` is {', '.join(sorted(cv))}; the baseline says {', '.join(sorted(bv))}",
    )


def _shape_finding(path: str, bt: set[str] | None, ct: set[str] | None) -> Finding:
    if ct is None:
        assert bt is not None
        severity = "info" if bt == {"null"} else "warning"
        return Finding(
            "schema_missing",
            path,
            type_label(bt),
            "",
            severity,
            f"`{path}` is missing (baseline: {type_label(bt)})",
        )
    if bt is None:
        return Finding(
            "schema_extra",
            path,
            "",
            type_label(ct),
            "info",
            f"`{path}` is extra ({type_label(ct)})",
        )
    severity = "warning" if (bt ^ ct) <= {"null"} else "error"
    return Finding(
        "schema_type",
        path,
        type_label(bt),
        type_label(ct),
        severity,
        f"`{path}` is {type_label(ct)}, the baseline has {type_label(bt)}",
    )


def compare_records(baseline: Record, candidate: Record) -> list[Finding]:
    """Every difference between two records, without noise control."""
    return compare(observe(baseline), observe(candidate))


# --- noise and ignore -------------------------------------------------------------------


def is_noise(path: str, noise: set[str] | frozenset[str]) -> bool:
    return bool(noise) and (path in noise or any(a in noise for a in ancestors(path)))


def noise_among(observed: Sequence[Observed]) -> set[str]:
    """Paths that differ between answers that should be the same (the first vs a sample)."""
    paths: set[str] = set()
    first = observed[0]
    for other in observed[1 : 1 + NOISE_SAMPLES]:
        paths.update(f.path for f in compare(first, other))
        paths.update(f.path for f in compare(other, first))
    return paths


def request_key(record: Record) -> tuple[Any, ...]:
    """What makes two originals repeats of one request (and comparable answers)."""
    req = record.get("request") or {}
    resp = record.get("response") or {}
    return (
        record.get("label"),
        req.get("method"),
        req.get("path"),
        json.dumps(req.get("body"), sort_keys=True),
        resp.get("status"),
    )


def repeated_original_noise(
    records_by_id: dict[str, Record], ids: Iterable[str]
) -> dict[str, set[str]]:
    """Noise learned from originals that repeat one request: per original id."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for rid in ids:
        rec = records_by_id.get(rid)
        if rec is not None:
            groups.setdefault(request_key(rec), []).append(rid)
    noise: dict[str, set[str]] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        sample = [observe(records_by_id[m]) for m in members[: 1 + NOISE_SAMPLES]]
        paths = noise_among(sample)
        if paths:
            for m in members:
                noise[m] = paths
    return noise


def glob_regex(patterns: Sequence[str]) -> re.Pattern[str] | None:
    """`usage.*` → matches `usage` and everything under it; `*` spans dots and brackets."""
    parts = []
    for pat in patterns:
        rx = ".*".join(re.escape(piece) for piece in pat.split("*"))
        if pat.endswith(".*"):
            rx = f"{rx}|{re.escape(pat[:-2])}"
        parts.append(f"(?:{rx})")
    return re.compile("|".join(parts)) if parts else None


_EVENT_PREFIX = re.compile(r"^events\[[^\]]*\]\.")


def drop_ignored(frame: pd.DataFrame, ignore: Sequence[str]) -> pd.DataFrame:
    """Remove rows whose path matches an ignore pattern, with or without its event prefix."""
    rx = glob_regex(ignore)
    if rx is None or frame.empty:
        return frame
    paths = frame["path"].astype(str)
    bare = paths.str.replace(_EVENT_PREFIX, "", regex=True)
    hit = paths.str.fullmatch(rx) | bare.str.fullmatch(rx)
    return frame.loc[~hit.astype(bool)].reset_index(drop=True)


# --- the frame --------------------------------------------------------------------------


def divergences(
    records_by_id: dict[str, Record], pairs: pd.DataFrame, *, ignore: Sequence[str] = ()
) -> pd.DataFrame:
    """One row per finding per pair, noise and ignored paths removed.

    Replay steps recorded as skipped (never sent: what they build on failed) are not
    compared; the failure they follow is the finding.
    """
    sent = [
        (records_by_id[c].get("error") or {}).get("kind") != "skipped"
        for c in pairs["candidate_id"].tolist()
    ]
    pairs = pairs.loc[sent] if not all(sent) else pairs
    if pairs.empty:
        return pd.DataFrame(columns=DIVERGENCE_COLUMNS)
    base_ids = pairs["baseline_id"].tolist()
    cand_ids = pairs["candidate_id"].tolist()
    labels = pairs["label"].tolist()
    base_labels = pairs["baseline_label"].tolist()
    groups: dict[str, list[int]] = {}
    for pos, bid in enumerate(base_ids):
        groups.setdefault(bid, []).append(pos)
    repeat_noise = repeated_original_noise(records_by_id, groups)

    positions: list[int] = []
    findings: list[Finding] = []
    for bid, members in groups.items():
        base = records_by_id.get(bid)
        if base is None:
            continue
        observed_base = observe(base)
        cands = {
            p: observe(records_by_id[cand_ids[p]]) for p in members if cand_ids[p] in records_by_id
        }
        found = {p: compare(observed_base, obs) for p, obs in cands.items()}
        noise, by_label = _group_noise(cands, found, labels, base_labels[members[0]])
        noise |= repeat_noise.get(bid, set())
        for p, fs in found.items():
            label_noise = noise | by_label.get(labels[p], set())
            for f in fs:
                if not is_noise(f.path, label_noise):
                    positions.append(p)
                    findings.append(f)
    return _frame(pairs, positions, findings, ignore)


def _group_noise(
    cands: dict[int, Observed], found: dict[int, list[Finding]], labels: list[str], base_label: str
) -> tuple[set[str], dict[str, set[str]]]:
    """Noise for one original: from replays to its own label (for every label) and from
    several replays to the same label (for that label)."""
    per_label: dict[str, list[int]] = {}
    for p in cands:
        per_label.setdefault(labels[p], []).append(p)
    everywhere: set[str] = set()
    by_label: dict[str, set[str]] = {}
    for label, ps in per_label.items():
        if len(ps) > 1:
            by_label[label] = noise_among([cands[p] for p in ps])
        if label == base_label:
            everywhere.update(f.path for p in ps for f in found[p])
            everywhere |= by_label.get(label, set())
    return everywhere, by_label


def _frame(
    pairs: pd.DataFrame, positions: list[int], findings: list[Finding], ignore: Sequence[str]
) -> pd.DataFrame:
    if not findings:
        return pd.DataFrame(columns=DIVERGENCE_COLUMNS)
    meta = pairs[PAIR_META].iloc[positions].reset_index(drop=True)
    # Remembered comparisons hand out the same findings again: build each one's row once.
    rows: dict[int, int] = {}
    distinct: list[Finding] = []
    which = []
    for f in findings:
        row = rows.get(id(f))
        if row is None:
            row = rows[id(f)] = len(distinct)
            distinct.append(f)
        which.append(row)
    found = pd.DataFrame.from_records(
        [(f.kind, f.path, f.baseline, f.candidate, f.severity, f.message) for f in distinct],
        columns=DIVERGENCE_COLUMNS[7:],
    )
    found = found.take(which).reset_index(drop=True)
    frame = pd.concat([meta, found], axis=1)
    return drop_ignored(frame, ignore)[DIVERGENCE_COLUMNS]
