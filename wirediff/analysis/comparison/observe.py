"""Reduce one record to what a comparison looks at.

That is the status, error, content type, the headers clients rely on, the body's shape, and for
streams the event-type sequence with delta runs collapsed. Generated text, ids and timestamps
never get this far: shapes hold types, and only constant fields keep values.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from wirediff._support import error_kind, is_2xx
from wirediff._types import JSON, Event, Record, RecordResponse
from wirediff.analysis.comparison.shapes import (
    Frozen,
    Shape,
    Values,
    add_parsed,
    flat,
    flatten,
    json_type,
    structure,
)
from wirediff.record.tags import is_error_body, soft_error

__all__ = [
    "CHUNK",
    "CHUNK_ARGUMENTS",
    "DONE",
    "EMBEDDED",
    "MEMO_LIMIT",
    "RESPONSE_TERMINALS",
    "Observed",
    "chunk_label",
    "collapse",
    "event_label",
    "json_key",
    "media_type",
    "observe",
    "sequence_fault",
    "split_terminal",
    "stream_labels",
    "union",
]

DONE = "[DONE]"
CHUNK = "chunk"
RESPONSE_TERMINALS = frozenset(
    {"response.completed", "response.failed", "response.incomplete", "error"}
)
CHUNK_ARGUMENTS = f"events[{CHUNK}].choices[].delta.tool_calls[].function.arguments"
RESPONSE_ARGUMENTS_DELTA = "response.function_call_arguments.delta"
EMBEDDED = "response.*"
EMBEDDED_PREFIX = f"events[{EMBEDDED}].response"
"""Where the Response objects carried by stream events are compared, merged."""
CHUNK_PREFIX = f"events[{CHUNK}]"
CHUNK_TOOL_CALLS = (f"{CHUNK_PREFIX}.choices[].delta.tool_calls", "array")
"""A chunk without this in its shape carries no tool-call argument fragments."""
MEMO_LIMIT = 1 << 14
"""Entries each table of remembered shapes and comparisons keeps at most.

What is remembered depends only on its key, so forgetting costs only time."""
EventShape = tuple[Frozen, Frozen, Frozen | None, Frozen | None]
_event_shapes: dict[tuple[int, str], EventShape] = {}


@dataclass(slots=True)
class Observed:
    """Hold what one record shows on the wire, reduced to what gets compared."""

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


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def observe(record: Record) -> Observed:
    """Reduce a record to the facts `compare` looks at."""
    resp = record.get("response")
    if not resp:
        failure = error_kind(record) or "no response"
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


def _observe_error(obs: Observed, resp: RecordResponse) -> None:
    """Find the document to hold against the OpenAI `Error` object.

    That is the body, or the stream's error event."""
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
    """Collapse delta runs: `a.delta, a.delta, b` → `a.delta+, b`.

    How many deltas come is generated, not protocol."""
    out: list[str] = []
    for label in labels:
        if label.endswith(".delta"):
            label += "+"
            if out and out[-1] == label:
                continue
        out.append(label)
    return out


def stream_labels(record: Record) -> tuple[str, ...]:
    """Label every event of the record's stream, delta runs collapsed; empty without a stream.

    These are what a stream timeline aligns, partial events too."""
    resp = record.get("response")
    events = resp.get("events") if resp is not None else None
    if not events:
        return ()
    chat = (record.get("tags") or {}).get("family") in ("chat.completions", "completions")
    return tuple(collapse(event_label(ev, chat) for ev in events))


def json_key(value: Any) -> Any:
    """Turn a JSON value into a key: an object or a list as its text.

    An index may be any JSON."""
    return repr(value) if isinstance(value, dict | list) else value


def split_terminal(labels: list[str], chat: bool) -> tuple[list[str], str | None]:
    """Separate the terminal event, such as `[DONE]` or `response.completed`, from the rest."""
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
    """Merge all chunks into one shape, with tool-call arguments put together again from deltas."""
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
                    key = (json_key(choice.get("index")), json_key(call.get("index")))
                    if isinstance(fn["arguments"], str):
                        fragments.setdefault(key, []).append(fn["arguments"])
                    else:
                        broken.add(key)
    texts = ["".join(parts) for key, parts in fragments.items() if key not in broken]
    if texts:
        _add_arguments(texts, CHUNK_ARGUMENTS, shapes, values)
    shape = union(shapes)
    if shape:
        obs.event_shapes[CHUNK] = (shape, union(values))


def _add_arguments(texts: list[str], path: str, shapes: set[Frozen], values: set[Frozen]) -> None:
    """Add the shape of joined tool-call arguments as one more part of a merged shape."""
    shape: Shape = set()
    found: Values = set()
    for text in texts:
        add_parsed(text, path, shape, found)
    shapes.add(frozenset(shape))
    values.add(frozenset(found))


def union(parts: set[Frozen]) -> Frozen:
    """Unite the shapes or constants of several events, one object per distinct union.

    The events of one stream share a few structures, and the streams of one kind their unions, so
    remembered comparisons find them by identity."""
    if len(parts) == 1:
        return next(iter(parts))
    return _union(frozenset(parts))


@functools.lru_cache(maxsize=MEMO_LIMIT)
def _union(parts: frozenset[Frozen]) -> Frozen:
    return frozenset().union(*parts)


def _typed_shapes(obs: Observed, events: list[Event], labels: list[str]) -> None:
    """Shape each event type, merging the Response object that events carry into one shape.

    `response.created`, `.completed` and the like carry it, and a missing field is one finding,
    not one per event. Function-call argument deltas are put together again per item."""
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
    obs.event_shapes = {label: (union(s), union(v)) for label, (s, v) in parts.items()}
    obs.embedded = {label: (union(s), union(v)) for label, (s, v) in embedded_parts.items()}


def _event_shape(data: dict[str, Any], label: str) -> EventShape:
    """Work out one typed event's shape and constants, and those of the Response it carries, if any.

    This is done once per structure and label."""
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
    """Find the first event whose `sequence_number` is missing or not the previous plus one."""
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
