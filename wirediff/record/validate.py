"""What a `wirediff/1` record must look like before anything analyses it.

A capture file may come from anywhere (another tool, an edit, a hostile upstream's echo):
when a record is loaded, every key `wirediff._types.Record` describes is checked, that it
is there (or may be absent) and has its type, so a bad record is one line naming
file:line instead of a traceback deep in pandas, and what passes is the typed record the
rest of wirediff reads. Bodies nested deeper than `MAX_DEPTH` are kept as their JSON text,
marked `depth_limited`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from types import UnionType
from typing import Any, NotRequired, get_args, get_origin, get_type_hints, is_typeddict

from wirediff import FORMAT
from wirediff._types import (
    Auth,
    Directions,
    Event,
    ExchangeError,
    HeaderList,
    Record,
    RecordRequest,
    RecordResponse,
    Sdk,
    Tags,
    WebSocketSummary,
)

__all__ = [
    "AUTH",
    "DIRECTIONS",
    "ERROR",
    "EVENT",
    "MAX_DEPTH",
    "MAX_EVENTS",
    "RECORD",
    "REQUEST",
    "RESPONSE",
    "SDK",
    "TAGS",
    "WEBSOCKET",
    "Shape",
    "depth_exceeds",
    "limit_depth",
    "problem",
    "shape_of",
]

MAX_DEPTH = 64
"""Nesting levels a body or an event's data may have; deeper is kept as text."""
MAX_EVENTS = 100_000
"""Events one record holds at most: what the capture keeps of a stream or a WebSocket
session (more are counted in `events_dropped`), and what loading reads."""


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests lists and objects more than `limit` levels deep (no recursion:
    level by level)."""
    if limit < 1:
        return True
    level = [value] if isinstance(value, _NESTING) else []
    for _ in range(limit):
        if not level:
            return False
        below: list[Any] = []
        for node in level:
            below += [
                v
                for v in (node.values() if isinstance(node, dict) else node)
                if isinstance(v, _NESTING)
            ]
        level = below
    return bool(level)


_NESTING = (dict, list)
"""What nests (a tuple: `isinstance` checks one faster than a union)."""


def _as_text(part: dict[str, Any], key: str, text_key: str) -> None:
    part[text_key] = json.dumps(part[key], ensure_ascii=False)
    part[key] = None
    part["depth_limited"] = True


def limit_depth(rec: Record) -> bool:
    """Bodies and event data nested beyond `MAX_DEPTH` become their JSON text, marked;
    whether there were any."""
    limited = False
    for name in ("request", "response"):
        part = rec.get(name)
        if not isinstance(part, dict):
            continue
        if depth_exceeds(part.get("body")):
            _as_text(part, "body", "text")
            limited = True
        events = part.get("events")
        if not isinstance(events, list):
            continue
        data = [ev.get("data") for ev in events if isinstance(ev, dict)]
        if not depth_exceeds(data, MAX_DEPTH + 1):  # all events at once: the list is a level
            continue
        for ev in events:
            if isinstance(ev, dict) and depth_exceeds(ev.get("data")):
                ev["data"] = json.dumps(ev["data"], ensure_ascii=False)
                ev["depth_limited"] = True
                limited = True
    return limited


_NULL = frozenset({type(None)})
_PAIRS = "a list of [name, value] string pairs"
_WORDS = {str: "a string", int: "an integer", float: "a number", dict: "an object", list: "a list"}


def _pairs(v: list[Any]) -> bool:
    for h in v:
        if type(h) is not list or len(h) != 2 or type(h[0]) is not str or type(h[1]) is not str:
            return False
    return True


Field = tuple[str, frozenset[type] | None, str]
"""A key, the types its value may have (None: any JSON), and what that is in words. Values
come from `json.loads`: exact types (a bool is not an integer, an integer is a number)."""


@dataclass(frozen=True)
class Shape:
    """The keys of one object of a record (`wirediff._types`): `required` ones are in every
    record the builder writes; `optional` ones may be absent or null; `pairs` are header
    lists (`[[name, value], ...]`)."""

    required: tuple[Field, ...]
    optional: tuple[Field, ...] = ()
    pairs: tuple[str, ...] = ()


def _field(key: str, hint: Any, *, optional: bool) -> tuple[Field, bool]:
    """The check of one annotated key, and whether it holds a header list."""
    args = get_args(hint)
    null = optional or type(None) in args
    (core,) = [a for a in args if a is not type(None)] if get_origin(hint) is UnionType else [hint]
    if core is Any:
        return (key, None, "JSON"), False
    pairs = core == HeaderList
    base = get_origin(core) or core
    types: frozenset[type]
    if base is bool:
        types, what = frozenset({bool}), "true, false or null" if null else "true or false"
    else:
        base = dict if is_typeddict(base) else base
        types = frozenset({int, float}) if base is float else frozenset({base})
        what = _PAIRS if pairs else _WORDS[base]
        what = f"{what} or null" if null else what
    return (key, types if optional or not null else types | _NULL, what), pairs


def shape_of(typed: Any) -> Shape:
    """The checks a TypedDict of `wirediff._types` describes, in its keys' order."""
    required: list[Field] = []
    optional: list[Field] = []
    pairs: list[str] = []
    for key, hint in get_type_hints(typed, include_extras=True).items():
        is_optional = get_origin(hint) is NotRequired
        field, is_pairs = _field(
            key, get_args(hint)[0] if is_optional else hint, optional=is_optional
        )
        (optional if is_optional else required).append(field)
        pairs += [key] if is_pairs else []
    return Shape(tuple(required), tuple(optional), tuple(pairs))


RECORD = shape_of(Record)
REQUEST = shape_of(RecordRequest)
RESPONSE = shape_of(RecordResponse)
EVENT = shape_of(Event)
DIRECTIONS = shape_of(Directions)
WEBSOCKET = shape_of(WebSocketSummary)
ERROR = shape_of(ExchangeError)
TAGS = shape_of(Tags)
SDK = shape_of(Sdk)
AUTH = shape_of(Auth)
_MISSING = object()


def _fields(where: str, obj: dict[str, Any], shape: Shape) -> str | None:
    for key, types, what in shape.required:
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            return f"{where}{key} is missing"
        if types is not None and (
            type(value) not in types or (type(value) is int and not _I64 <= value < -_I64)
        ):
            found = _mistyped(value, types, what)
            if found:
                return f"{where}{key} {found}"
    if len(obj) > len(shape.required):  # an optional key (or one of no concern) is there
        for key, types, what in shape.optional:
            value = obj.get(key)
            if value is None or types is None:
                continue
            if type(value) not in types or (type(value) is int and not _I64 <= value < -_I64):
                found = _mistyped(value, types, what)
                if found:
                    return f"{where}{key} {found}"
    for key in shape.pairs:
        value = obj.get(key)
        if value is not None and not _pairs(value):
            return f"{where}{key} must be {_PAIRS}"
    return None


def _mistyped(value: Any, types: frozenset[type], what: str) -> str | None:
    """How `value` is not of `types`. JSON allows any integer, the analysis's columns do
    not: an integer must fit 64 bits, one where a number is asked for a double."""
    if type(value) not in types:
        return f"must be {what}, not {type(value).__name__}"
    if type(value) is not int:
        return None
    if float in types:
        return None if -_LARGEST <= value <= _LARGEST else "must be a number a double holds"
    return None if _I64 <= value < -_I64 else "must be an integer of 64 bits"


_LARGEST = sys.float_info.max
_I64 = -(1 << 63)
"""The smallest 64-bit integer: an integer in `[_I64, -_I64)` fits any column."""


def _response(resp: dict[str, Any]) -> str | None:
    found = _fields("response.", resp, RESPONSE)
    if found:
        return found
    if not 0 <= resp["status"] <= 999:  # an HTTP status has three digits
        return "response.status must be an HTTP status, from 0 to 999"
    for i, ev in enumerate(resp["events"] or ()):
        if not isinstance(ev, dict):
            return f"response.events[{i}] must be an object"
        found = _fields("", ev, EVENT)  # where, only when there is something to say
        if found:
            return f"response.events[{i}].{found}"
    ws = resp.get("websocket")
    if ws is None:
        return None
    found = _fields("response.websocket.", ws, WEBSOCKET)
    for key in ("messages", "bytes"):
        found = found or _fields(f"response.websocket.{key}.", ws[key], DIRECTIONS)
    return found


def _tags(tags: dict[str, Any]) -> str | None:
    found = _fields("tags.", tags, TAGS)
    for key, shape in (("sdk", SDK), ("auth", AUTH)):
        if not found and tags[key] is not None:
            found = _fields(f"tags.{key}.", tags[key], shape)
    return found


def problem(rec: Any) -> str | None:
    """The first way `rec` is not a record as `wirediff._types.Record` describes it, or
    None: then it is one, every key where it belongs, with its type."""
    if not isinstance(rec, dict):
        return f"not a {FORMAT} record (format={type(rec).__name__!r})"
    if rec.get("format") != FORMAT:
        return f"not a {FORMAT} record (format={rec.get('format')!r})"
    found = _fields("", rec, RECORD) or _fields("request.", rec["request"], REQUEST)
    if not found and rec["response"] is not None:
        found = _response(rec["response"])
    if not found and rec["error"] is not None:
        found = _fields("error.", rec["error"], ERROR)
    return found or _tags(rec["tags"])
