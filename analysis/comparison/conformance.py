"""Conformance without a baseline: each 2xx answer against the official openai SDK types,
the keys the OpenAI spec requires, and the streaming grammar.

The SDK's pydantic models are lenient (extra keys allowed, many fields optional), so the
keys the spec marks required are checked on top (`REQUIRED_KEYS`), and the event order
the SDK's stream helpers rely on is checked by `chat_grammar` and `responses_grammar`.
Findings within one record are merged by path, so a quirk repeated in every chunk is one
row that says how often it occurred.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import pandas as pd
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter, ValidationError

from wirediff._support import is_2xx
from wirediff._types import JSON, Event, Record
from wirediff.analysis.comparison.compare import short
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.comparison.observe import DONE, EMBEDDED, RESPONSE_TERMINALS
from wirediff.analysis.comparison.shapes import structure
from wirediff.record.tags import is_error_body

CONFORMANCE_COLUMNS = DIVERGENCE_COLUMNS
EMBEDDED_EVENTS = f"events[{EMBEDDED}]"

RESPONSE_KEYS = (
    "id",
    "object",
    "created_at",
    "status",
    "model",
    "output",
    "usage",
    "error",
    "incomplete_details",
    "instructions",
    "metadata",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "tool_choice",
    "tools",
    "truncation",
    "text",
    "presence_penalty",
    "frequency_penalty",
    "top_logprobs",
    "store",
    "background",
    "service_tier",
    "completed_at",
    "previous_response_id",
    "reasoning",
    "max_output_tokens",
    "max_tool_calls",
    "safety_identifier",
    "prompt_cache_key",
)
"""A Response object's keys as OpenAI sends them (provider-facts.md, Open Responses)."""

REQUIRED_KEYS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    "chat.completion": (
        ("", ("id", "object", "created", "model", "choices")),
        ("choices[]", ("index", "message", "finish_reason", "logprobs")),
        ("choices[].message", ("role", "content", "refusal")),
    ),
    "chat.completion.chunk": (
        ("", ("id", "object", "created", "model", "choices")),
        ("choices[]", ("index", "delta", "finish_reason")),
    ),
    "response": (("", RESPONSE_KEYS),),
    "error": (("", ("type", "code", "message", "param", "sequence_number")),),
}
"""Keys the OpenAI spec requires (present, possibly null) where the SDK would default them."""


class ModelList(BaseModel):
    """`GET /v1/models`: the SDK pages over it without a model of its own."""

    object: Literal["list"]
    data: list[Model]


@dataclass(frozen=True, slots=True)
class Problem:
    """One way a record departs from what the OpenAI SDK and spec expect."""

    path: str
    message: str
    severity: str
    position: int | None = None


# --- the SDK types ----------------------------------------------------------------------


@cache
def adapter(model: Any) -> TypeAdapter[Any]:
    """One TypeAdapter per type for the life of the process: building them is the cost."""
    return TypeAdapter(model)


@cache
def response_event_types() -> dict[str, Any]:
    """`type` literal → event model. The SDK's union carries its discriminator in openai's
    own metadata, which pydantic does not see, so dispatch here instead of trying all ~50."""
    union = typing.get_args(ResponseStreamEvent)[0]
    out: dict[str, Any] = {}
    for member in typing.get_args(union):
        for literal in typing.get_args(member.model_fields["type"].annotation):
            out[literal] = member
    return out


def body_model(family: str | None, endpoint: str | None, method: str | None) -> Any:
    """The SDK type a JSON answer to this route must parse as, if wirediff knows one."""
    routes: dict[tuple[str | None, str | None], Any] = {
        ("POST", "/v1/chat/completions"): ChatCompletion,
        ("GET", "/v1/chat/completions/{id}"): ChatCompletion,
        ("POST", "/v1/responses"): Response,
        ("GET", "/v1/responses/{id}"): Response,
        ("POST", "/v1/responses/{id}/cancel"): Response,
        ("GET", "/v1/models"): ModelList,
        ("GET", "/v1/models/{id}"): Model,
        ("POST", "/v1/completions"): Completion,
        ("POST", "/v1/embeddings"): CreateEmbeddingResponse,
    }
    return routes.get((method, endpoint))


_FIELD = re.compile(r"[a-z_][a-z0-9_]*")


def _is_union_tag(segment: object) -> bool:
    """pydantic puts the member's name in an error's location inside a union."""
    return isinstance(segment, str) and not _FIELD.fullmatch(segment)


def prune_union_errors(errors: list[dict[str, Any]], depth: int = 0) -> list[dict[str, Any]]:
    """Keep the errors of the union member the input meant (its `type` literal matched),
    not the complaints of every member it was never meant to be."""
    plain: list[dict[str, Any]] = []
    unions: dict[tuple[Any, ...], dict[str, list[dict[str, Any]]]] = {}
    for err in errors:
        loc = err["loc"]
        k = next((i for i in range(depth, len(loc)) if _is_union_tag(loc[i])), None)
        if k is None:
            plain.append(err)
        else:
            unions.setdefault(tuple(loc[:k]), {}).setdefault(loc[k], []).append(err)
    for point, branches in unions.items():
        k = len(point)
        viable = {tag: errs for tag, errs in branches.items() if not _rejects(errs, k)}
        if viable:
            errs = min(viable.values(), key=len)
            plain += prune_union_errors(
                [{**e, "loc": e["loc"][:k] + e["loc"][k + 1 :]} for e in errs], k
            )
        else:
            plain.append({"loc": point, "msg": _no_member_message(branches)})
    return plain


def _rejects(errs: list[dict[str, Any]], k: int) -> bool:
    """A member rejects the input outright: wrong kind of value, or a different `type`."""
    for err in errs:
        rest = err["loc"][k + 1 :]
        if not rest or (rest == ("type",) and err.get("type") == "literal_error"):
            return True
    return False


def _no_member_message(branches: dict[str, list[dict[str, Any]]]) -> str:
    expected = sorted(
        {
            str(err.get("ctx", {}).get("expected"))
            for errs in branches.values()
            for err in errs
            if err.get("type") == "literal_error" and err["loc"][-1] == "type"
        }
    )
    if expected:
        return f"`type` is none of {', '.join(expected)}"
    return f"matches none of the allowed forms ({', '.join(sorted(branches))})"


def loc_path(loc: Sequence[Any]) -> str:
    """`("choices", 0, "message")` → `choices[].message`."""
    path = ""
    for seg in loc:
        if isinstance(seg, int):
            path += "[]"
        else:
            path = f"{path}.{seg}" if path else str(seg)
    return path


Check = tuple[str, str, str]
"""`(path inside the checked value, message, severity)`."""

SPEC_KEYS: dict[Any, str] = {
    ChatCompletion: "chat.completion",
    ChatCompletionChunk: "chat.completion.chunk",
    Response: "response",
}
CACHE_LIMIT = 4096
_cache: dict[tuple[Any, int], tuple[Check, ...]] = {}


def validate(model: Any, data: JSON) -> list[Check]:
    """The SDK type's complaints about `data`, one per distinct path."""
    try:
        adapter(model).validate_python(data)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        return [
            (loc_path(err["loc"]), f"{err['msg']} ({model.__name__})", "error")
            for err in prune_union_errors([dict(err) for err in errors])
        ]
    return []


def _join(prefix: str, path: str) -> str:
    if not prefix:
        return path
    return f"{prefix}.{path}" if path else prefix


def missing_keys(data: JSON, kind: str, prefix: str = "") -> list[Check]:
    """Keys the OpenAI spec requires that `data` lacks."""
    out: list[Check] = []
    for where, keys in REQUIRED_KEYS[kind]:
        for obj in _objects_at(data, where):
            for key in keys:
                if key not in obj:
                    path = _join(prefix, f"{where}.{key}" if where else key)
                    out.append((path, "required key missing (OpenAI spec)", "warning"))
    return out


def _objects_at(data: JSON, where: str) -> list[dict[str, Any]]:
    found = [data]
    for seg in where.split(".") if where else ():
        name, many = (seg[:-2], True) if seg.endswith("[]") else (seg, False)
        nxt: list[Any] = []
        for obj in found:
            value = obj.get(name) if isinstance(obj, dict) else None
            if many and isinstance(value, list):
                nxt.extend(value)
            elif not many and value is not None:
                nxt.append(value)
        found = nxt
    return [obj for obj in found if isinstance(obj, dict)]


def check(model: Any, data: JSON) -> tuple[Check, ...]:
    """SDK validation plus the spec's required keys for one body or event."""
    out = validate(model, data)
    if model in SPEC_KEYS:
        out += missing_keys(data, SPEC_KEYS[model])
    elif isinstance(data, dict):
        if data.get("type") == "error":
            out += missing_keys(data, "error")
        elif isinstance(data.get("response"), dict):
            out += missing_keys(data["response"], "response", "response")
    return tuple(out)


def checked(model: Any, data: JSON) -> tuple[Check, ...]:
    """`check`, remembered per structure (`wirediff.analysis.comparison.shapes.structure`: keys, types, the
    text of every string an SDK type might constrain): the same structure always gets the
    same verdict, and the bodies and events of one kind repeat a few structures."""
    key = (model, structure(data))
    found = _cache.get(key)
    if found is None:
        if len(_cache) >= CACHE_LIMIT:
            _cache.clear()
        found = _cache[key] = check(model, data)
    return found


def _problems(
    checks: Iterable[Check], prefix: str = "", position: int | None = None
) -> list[Problem]:
    return [Problem(_join(prefix, p), m, sev, position) for p, m, sev in checks]


# --- bodies -----------------------------------------------------------------------------


def body_problems(model: Any, body: JSON) -> list[Problem]:
    if is_error_body(body):
        return [Problem("error", f"an error body in a 2xx answer: {short(body)}", "error")]
    return _problems(checked(model, body))


# --- streams ----------------------------------------------------------------------------


def chat_stream_problems(events: list[Event], model: Any = ChatCompletionChunk) -> list[Problem]:
    """Each chunk against the SDK type and the spec, then the stream's grammar."""
    out: list[Problem] = []
    for i, ev in enumerate(events):
        data = ev.get("data")
        if data == DONE or ev.get("partial"):
            continue
        if not isinstance(data, dict):
            out.append(Problem("events[chunk]", f"not a JSON object: {short(data)}", "error", i))
        elif "error" in data:
            out.append(
                Problem(
                    "events[error]", f"an error event in a 2xx stream: {short(data)}", "error", i
                )
            )
        else:
            out += _problems(checked(model, data), "events[chunk]", i)
    return out + chat_grammar(events)


def chat_grammar(events: list[Event]) -> list[Problem]:
    """A chat stream ends with `data: [DONE]` and nothing after it."""
    if events and events[-1].get("partial"):
        return [
            Problem("events[terminal]", "the stream ends inside an event", "error", len(events) - 1)
        ]
    done = next((i for i, ev in enumerate(events) if ev.get("data") == DONE), None)
    if done is None:
        return [Problem("events[terminal]", "no `data: [DONE]` at the end", "error")]
    if done != len(events) - 1:
        return [
            Problem(
                "events[terminal]",
                f"{len(events) - 1 - done} events after [DONE]",
                "error",
                done + 1,
            )
        ]
    return []


def responses_stream_problems(events: list[Event]) -> list[Problem]:
    """Each event against its SDK type and the spec, then the stream's grammar."""
    types = response_event_types()
    out: list[Problem] = []
    for i, ev in enumerate(events):
        data = ev.get("data")
        if ev.get("partial") or data == DONE:
            continue
        if not isinstance(data, dict):
            out.append(Problem("events[text]", f"not a JSON object: {short(data)}", "error", i))
            continue
        typ = data.get("type")
        label = typ if isinstance(typ, str) else "?"
        prefix = f"events[{label}]"
        name = ev.get("event")
        if name is not None and name != typ:
            out.append(Problem(prefix, f"SSE `event: {name}` names another type", "error", i))
        model = types.get(typ) if isinstance(typ, str) else None
        if model is None:
            out.append(
                Problem(prefix, f"not a Responses stream event type: {short(typ)}", "error", i)
            )
            continue
        for path, message, severity in checked(model, data):
            # The Response carried by created/in_progress/completed is one object.
            where = EMBEDDED_EVENTS if path.split(".", 1)[0] == "response" else prefix
            out.append(Problem(_join(where, path), message, severity, i))
    return out + responses_grammar(events)


_PER_PART = frozenset(
    {
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_text.annotation.added",
        "response.refusal.delta",
        "response.refusal.done",
    }
)


@dataclass
class _ItemState:
    """Which output items and content parts are open while a Responses stream is read."""

    items: dict[int, Any]
    closed: set[int]
    parts: set[tuple[int, Any]]
    closed_parts: set[tuple[int, Any]]


def responses_grammar(events: list[Event]) -> list[Problem]:
    """`response.created` first; a terminal event last; `sequence_number` 0, 1, 2, …;
    output items opened before their deltas and closed after."""
    out: list[Problem] = []
    cut = bool(events) and bool(events[-1].get("partial"))
    if cut:
        out.append(
            Problem("events[terminal]", "the stream ends inside an event", "error", len(events) - 1)
        )
    typed = [
        (i, ev["data"])
        for i, ev in enumerate(events)
        if isinstance(ev.get("data"), dict)
        and isinstance(ev["data"].get("type"), str)  # untyped events are reported above
        and not ev.get("partial")
    ]
    done = [i for i, ev in enumerate(events) if ev.get("data") == DONE]
    if done:
        out.append(
            Problem(
                "events[[DONE]]",
                "`data: [DONE]` is not part of a Responses stream",
                "error",
                done[0],
            )
        )
    if not typed:
        return [*out, Problem("events", "no events", "error")]
    first_type = typed[0][1].get("type")
    if first_type != "response.created":
        out.append(
            Problem(
                f"events[{first_type}]",
                f"the first event is {first_type}, not response.created",
                "error",
                typed[0][0],
            )
        )
    if not cut:
        out += _terminal_problems(typed)
    out += _sequence_problems(typed)
    out += _item_problems(typed)
    return out


def _terminal_problems(typed: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    ends = [n for n, (_, data) in enumerate(typed) if data.get("type") in RESPONSE_TERMINALS]
    if not ends:
        last = typed[-1][1].get("type")
        return [
            Problem(
                "events[terminal]",
                f"ends with {last}, no response.completed/failed/incomplete/error",
                "error",
            )
        ]
    if ends[0] != len(typed) - 1:
        i, data = typed[ends[0] + 1]
        return [
            Problem(
                f"events[{data.get('type')}]",
                f"an event after {typed[ends[0]][1].get('type')}",
                "error",
                i,
            )
        ]
    return []


def _sequence_problems(typed: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    expected = 0
    for i, data in typed:
        number = data.get("sequence_number")
        path = f"events[{data.get('type')}].sequence_number"
        if not isinstance(number, int) or isinstance(number, bool):
            return [Problem(path, "`sequence_number` missing", "error", i)]
        if number != expected:
            return [
                Problem(path, f"`sequence_number` is {number} where {expected} follows", "error", i)
            ]
        expected = number + 1
    return []


def _item_problems(typed: list[tuple[int, dict[str, Any]]]) -> list[Problem]:
    state = _ItemState({}, set(), set(), set())
    out: list[Problem] = []
    for i, data in typed:
        typ = data.get("type")
        index = data.get("output_index")
        if not isinstance(typ, str) or not isinstance(index, int):
            if typ == "response.completed":
                out += [
                    Problem(
                        "events[response.output_item.done]",
                        f"output item {k} never closed",
                        "error",
                        i,
                    )
                    for k in sorted(set(state.items) - state.closed)
                ]
            continue
        message = _item_event_problem(state, typ, index, data)
        if message:
            out.append(Problem(f"events[{typ}]", message, "error", i))
    return out


def _item_event_problem(
    state: _ItemState, typ: str, index: int, data: dict[str, Any]
) -> str | None:
    item = data.get("item")
    if typ == "response.output_item.added":
        if index in state.items:
            return f"output item {index} added twice"
        state.items[index] = item.get("id") if isinstance(item, dict) else None
        return None
    if index not in state.items:
        return f"output item {index} used before response.output_item.added"
    if index in state.closed:
        return f"output item {index} used after response.output_item.done"
    if typ == "response.output_item.done":
        state.closed.add(index)
        return None
    item_id = data.get("item_id")
    if (
        isinstance(item_id, str)
        and isinstance(state.items[index], str)
        and item_id != state.items[index]
    ):
        return f"`item_id` {item_id} is not the id of output item {index}"
    part = (index, data.get("content_index"))
    if typ == "response.content_part.added":
        state.parts.add(part)
    elif typ == "response.content_part.done":
        if part not in state.parts:
            return f"content part {part[1]} closed before it was added"
        state.closed_parts.add(part)
    elif typ in _PER_PART and (part not in state.parts or part in state.closed_parts):
        return f"content part {part[1]} of item {index} is not open"
    return None


# --- records ----------------------------------------------------------------------------


def record_problems(record: Record) -> list[Problem]:
    """Everything wrong with one 2xx answer; other answers are not the SDK's business."""
    resp = record.get("response") or {}
    status = resp.get("status")
    if not is_2xx(status) or resp.get("truncated"):
        return []
    tags = record.get("tags") or {}
    family, endpoint = tags.get("family"), tags.get("endpoint")
    method = (record.get("request") or {}).get("method")
    events = resp.get("events")
    if events is not None:
        if family == "chat.completions":
            return chat_stream_problems(events)
        if family == "completions":
            return chat_stream_problems(events, Completion)
        if family == "responses":
            return responses_stream_problems(events)
        return []
    model = body_model(family, endpoint, method)
    if model is None:
        return []
    if resp.get("body") is None:
        if resp.get("text") is None and resp.get("b64") is None:
            return [Problem("body", "no body", "error")]
        return [Problem("body", "the body is not JSON", "error")]
    return body_problems(model, resp["body"])


def merge(problems: Iterable[Problem]) -> list[tuple[Problem, int]]:
    """One problem per path and message, with how often it occurred (first kept)."""
    seen: dict[tuple[str, str], list[Any]] = {}
    for p in problems:
        key = (p.path, p.message)
        if key in seen:
            seen[key][1] += 1
        else:
            seen[key] = [p, 1]
    return [(p, n) for p, n in seen.values()]


def _candidate_text(problem: Problem, count: int) -> str:
    if problem.position is None:
        return problem.message
    where = (
        f"event #{problem.position}" if count == 1 else f"{count} events, first #{problem.position}"
    )
    return f"{problem.message} ({where})"


def conformance(records: Iterable[Record]) -> pd.DataFrame:
    """One `conformance` row per distinct problem per record; no baseline needed."""
    rows = []
    for rec in records:
        problems = record_problems(rec)
        if not problems:
            continue
        tags = rec.get("tags") or {}
        for problem, count in merge(problems):
            text = _candidate_text(problem, count)
            rows.append(
                (
                    rec["id"],
                    rec.get("label"),
                    "",
                    "",
                    rec["id"],
                    tags.get("family"),
                    tags.get("endpoint"),
                    "conformance",
                    problem.path,
                    "",
                    text,
                    problem.severity,
                    f"`{problem.path}`: {text}",
                )
            )
    return pd.DataFrame.from_records(rows, columns=CONFORMANCE_COLUMNS)
