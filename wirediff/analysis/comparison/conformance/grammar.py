"""Check stream grammars on one answer alone.

The grammars are what the SDK's stream helpers and every client that reads the stream rely on.

Responses, an SSE stream or the server's events on a WebSocket, need exactly one
`response.created`, first; `sequence_number` 0, 1, 2, …; exactly one terminal, last, which is
`response.completed`, `.failed`, `.incomplete` or `error`; output items opened with
`response.output_item.added` before their deltas and closed with `.done` after, content parts
likewise; and a text's deltas ending with its `response.output_text.done` before its part closes,
which Llama Stack leaves out in ogx-ai/ogx #5309. Chat Completions need `data: [DONE]` last; a
usage chunk, with `choices: []` and `usage`, if and only if `stream_options.include_usage` was
asked; and tool-call arguments, joined per call, that parse as JSON. Each rule has a stable id,
such as `grammar:responses/one-created`, reported as the problem's pointer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wirediff._types import Event
from wirediff.analysis.comparison.compare import short
from wirediff.analysis.comparison.conformance.problems import GRAMMAR, Problem
from wirediff.analysis.comparison.observe import (
    CHUNK_ARGUMENTS,
    DONE,
    RESPONSE_TERMINALS,
    json_key,
)

__all__ = ["RULES", "chat_grammar", "responses_grammar"]

RULES = {
    "cut": "grammar:stream/cut",
    "empty": "grammar:stream/empty",
    "json": "grammar:stream/json",
    "done-last": "grammar:chat/done-last",
    "usage-chunk": "grammar:chat/usage-chunk",
    "tool-arguments": "grammar:chat/tool-arguments",
    "created-first": "grammar:responses/created-first",
    "one-created": "grammar:responses/one-created",
    "sequence": "grammar:responses/sequence",
    "one-terminal": "grammar:responses/one-terminal",
    "event-name": "grammar:responses/event-name",
    "no-done": "grammar:responses/no-done",
    "items": "grammar:responses/items",
    "text-done": "grammar:responses/text-done",
}
USAGE_CHUNK = "events[chunk.usage]"
_PER_PART = frozenset(
    {
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.delta",
        "response.refusal.done",
    }
)


def _problem(rule: str, path: str, message: str, position: int | None = None) -> Problem:
    return Problem(path, message, GRAMMAR, RULES[rule], position)


def _cut(events: list[Event]) -> list[Problem]:
    if events and events[-1].get("partial"):
        return [
            _problem("cut", "events[terminal]", "the stream ends inside an event", len(events) - 1)
        ]
    return []


# --- chat -------------------------------------------------------------------------------


def chat_grammar(events: list[Event], include_usage: bool) -> list[Problem]:
    """Check a chat stream: `[DONE]` last, usage iff asked, arguments that parse.

    Nothing may follow `[DONE]`.

    The usage chunk is not required when an error event ended the stream."""
    out = _cut(events)
    done = next((i for i, ev in enumerate(events) if ev.get("data") == DONE), None)
    if done is None and not out:
        out.append(_problem("done-last", "events[terminal]", "no `data: [DONE]` at the end"))
    elif done is not None and done != len(events) - 1:
        after = len(events) - 1 - done
        out.append(
            _problem("done-last", "events[terminal]", f"{after} events after [DONE]", done + 1)
        )
    chunks = [
        (i, ev["data"])
        for i, ev in enumerate(events)
        if isinstance(ev.get("data"), dict) and "error" not in ev["data"]
    ]
    ended = len(chunks) < sum(isinstance(ev.get("data"), dict) for ev in events)
    usage = [i for i, data in chunks if data.get("choices") == [] and data.get("usage")]
    if include_usage and not usage and chunks and not out and not ended:
        out.append(
            _problem(
                "usage-chunk",
                USAGE_CHUNK,
                "`stream_options.include_usage` was asked and no usage chunk came",
            )
        )
    elif usage and not include_usage:
        out.append(_problem("usage-chunk", USAGE_CHUNK, "a usage chunk nobody asked for", usage[0]))
    return out + _arguments(chunks)


def _arguments(chunks: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    joined: dict[tuple[Any, Any], list[str]] = {}
    first: dict[tuple[Any, Any], int] = {}
    broken: dict[tuple[Any, Any], str] = {}
    for i, data in chunks:
        choices = data.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            calls = delta.get("tool_calls") if isinstance(delta, dict) else None
            for call in calls if isinstance(calls, list) else ():
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or "arguments" not in fn:
                    continue
                key = (str(choice.get("index")), str(call.get("index")))
                first.setdefault(key, i)
                if isinstance(fn["arguments"], str):
                    joined.setdefault(key, []).append(fn["arguments"])
                else:
                    broken.setdefault(key, f"arguments are {short(fn['arguments'])}, not a string")
    for key, parts in joined.items():
        if key not in broken:
            try:
                json.loads("".join(parts))
            except ValueError:
                broken[key] = "the joined arguments are not JSON"
    return [
        _problem("tool-arguments", CHUNK_ARGUMENTS, message, first[key])
        for key, message in broken.items()
    ]


# --- responses --------------------------------------------------------------------------


def responses_grammar(events: list[Event], *, terminal: bool = True) -> list[Problem]:
    """Check a Responses stream: one `response.created` first, one terminal last, items in order.

    `sequence_number` must run 0, 1, 2, …; items and parts must be opened before use and closed
    after. Without `terminal`, the events are those before a WebSocket error frame, which ends
    the turn itself, so no terminal is required."""
    out = _cut(events)
    cut = bool(out)
    typed: list[tuple[int, dict[str, Any]]] = []
    for i, ev in enumerate(events):
        data = ev.get("data")
        if ev.get("partial"):
            continue
        if data == DONE:
            out.append(
                _problem(
                    "no-done",
                    "events[[DONE]]",
                    "`data: [DONE]` is not part of a Responses stream",
                    i,
                )
            )
        elif not isinstance(data, dict) or not isinstance(data.get("type"), str):
            # an object is named by its keys: its values may be generated words
            said = (
                short(data) if not isinstance(data, dict) else f"an object of {short(list(data))}"
            )
            out.append(_problem("json", "events[text]", f"not a typed JSON event: {said}", i))
        else:
            typed.append((i, data))
            name = ev.get("event")
            if name is not None and name != data["type"]:
                out.append(
                    _problem(
                        "event-name",
                        f"events[{data['type']}]",
                        f"SSE `event: {name}` names another type",
                        i,
                    )
                )
    if not typed:
        return [*out, _problem("empty", "events", "no events")]
    out += _created(typed)
    if terminal and not cut:
        out += _terminal(typed)
    out += _sequence(typed)
    out += _items(typed)
    return out


def _created(typed: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    created = [i for i, data in typed if data["type"] == "response.created"]
    first_i, first = typed[0]
    out = []
    if first["type"] != "response.created":
        out.append(
            _problem(
                "created-first",
                f"events[{first['type']}]",
                f"the first event is {first['type']}, not response.created",
                first_i,
            )
        )
    if len(created) > 1:
        out.append(
            _problem(
                "one-created",
                "events[response.created]",
                f"response.created came {len(created)} times",
                created[1],
            )
        )
    return out


def _terminal(typed: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    ends = [n for n, (_, data) in enumerate(typed) if data["type"] in RESPONSE_TERMINALS]
    if not ends:
        last = typed[-1][1]["type"]
        message = f"ends with {last}, no response.completed/failed/incomplete/error"
        return [_problem("one-terminal", "events[terminal]", message)]
    if ends[0] != len(typed) - 1:
        i, data = typed[ends[0] + 1]
        after = typed[ends[0]][1]["type"]
        return [_problem("one-terminal", f"events[{data['type']}]", f"an event after {after}", i)]
    return []


def _sequence(typed: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    expected = 0
    for i, data in typed:
        number = data.get("sequence_number")
        path = f"events[{data['type']}].sequence_number"
        if not isinstance(number, int) or isinstance(number, bool):
            return [_problem("sequence", path, "`sequence_number` missing", i)]
        if number != expected:
            message = f"`sequence_number` is {number} where {expected} follows"
            return [_problem("sequence", path, message, i)]
        expected = number + 1
    return []


@dataclass
class _Items:
    """Track which output items and content parts are open while a stream is read."""

    ids: dict[int, Any] = field(default_factory=dict)
    closed: set[int] = field(default_factory=set)
    parts: set[tuple[int, Any]] = field(default_factory=set)
    closed_parts: set[tuple[int, Any]] = field(default_factory=set)
    texted: set[tuple[int, Any]] = field(default_factory=set)
    """Parts that got `response.output_text.delta`s, until their `.done`."""


def _items(typed: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    state = _Items()
    out: list[Problem] = []
    for i, data in typed:
        typ, index = data["type"], data.get("output_index")
        if not isinstance(index, int):
            if typ == "response.completed":
                out += [
                    _problem(
                        "items",
                        "events[response.output_item.done]",
                        f"output item {k} never closed",
                        i,
                    )
                    for k in sorted(set(state.ids) - state.closed)
                ]
            continue
        part = (index, json_key(data.get("content_index")))
        if typ == "response.content_part.done" and part in state.texted:
            unclosed = f"content part {part[1]} of item {index} closed without its text's .done"
            out.append(_problem("text-done", "events[response.output_text.done]", unclosed, i))
        message = _item_event(state, typ, index, data)
        if message:
            out.append(_problem("items", f"events[{typ}]", message, i))
        if typ == "response.output_text.delta":
            state.texted.add(part)
        elif typ == "response.output_text.done":
            state.texted.discard(part)
    return out


def _item_event(state: _Items, typ: str, index: int, data: dict[str, Any]) -> str | None:
    item = data.get("item")
    if typ == "response.output_item.added":
        if index in state.ids:
            return f"output item {index} added twice"
        state.ids[index] = item.get("id") if isinstance(item, dict) else None
        return None
    if index not in state.ids:
        return f"output item {index} used before response.output_item.added"
    if index in state.closed:
        return f"output item {index} used after response.output_item.done"
    if typ == "response.output_item.done":
        state.closed.add(index)
        return None
    item_id = data.get("item_id")
    known = state.ids[index]
    if isinstance(item_id, str) and isinstance(known, str) and item_id != known:
        return f"`item_id` is not the id of output item {index}"  # ids are generated: not said
    part = (index, json_key(data.get("content_index")))
    if typ == "response.content_part.added":
        state.parts.add(part)
    elif typ == "response.content_part.done":
        if part not in state.parts:
            return f"content part {part[1]} closed before it was added"
        state.closed_parts.add(part)
    elif typ in _PER_PART and (part not in state.parts or part in state.closed_parts):
        return f"content part {part[1]} of item {index} is not open"
    return None
