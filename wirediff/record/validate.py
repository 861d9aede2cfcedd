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
from dataclasses import dataclass
from typing import Any

from wirediff import FORMAT
from wirediff._types import Record

__all__ = [
    "AUTH",
    "DIRECTIONS",
    "ERROR",
    "EVENT",
    "MAX_DEPTH",
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
]

MAX_DEPTH = 64
"""Nesting levels a body or an event's data may have; deeper is kept as text."""


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `value` nests lists and objects more than `limit` levels deep (no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values() if isinstance(v, dict | list))
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node if isinstance(v, dict | list))
    return False


def _as_text(part: dict[str, Any], key: str, text_key: str) -> None:
    part[text_key] = json.dumps(part[key], ensure_ascii=False)
    part[key] = None
    part["depth_limited"] = True


def limit_depth(rec: Record) -> None:
    """Bodies and event data nested beyond `MAX_DEPTH` become their JSON text, marked."""
    for name in ("request", "response"):
        part = rec.get(name)
        if not isinstance(part, dict):
            continue
        if depth_exceeds(part.get("body")):
            _as_text(part, "body", "text")
        events = part.get("events")
        if isinstance(events, list):
            for ev in events:
                if isinstance(ev, dict) and depth_exceeds(ev.get("data")):
                    ev["data"] = json.dumps(ev["data"], ensure_ascii=False)
                    ev["depth_limited"] = True


_NULL = frozenset({type(None)})
STRING = frozenset({str})
INTEGER = frozenset({int})
NUMBER = frozenset({int, float})
BOOLEAN = frozenset({bool})
OBJECT = frozenset({dict})
LIST = frozenset({list})
ANY = None
"""Any JSON value (a body, an event's data)."""


def _or_null(types: frozenset[type]) -> frozenset[type]:
    return types | _NULL


def _pairs(v: list[Any]) -> bool:
    for h in v:
        if type(h) is not list or len(h) != 2 or type(h[0]) is not str or type(h[1]) is not str:
            return False
    return True


Field = tuple[str, frozenset[type] | None, str]
"""A key, the types its value may have (`ANY`: any), and what that is in words. Values come
from `json.loads`: exact types (a bool is not an integer)."""


@dataclass(frozen=True)
class Shape:
    """The keys of one object of a record (`wirediff._types`): `required` ones are in every
    record the builder writes; `optional` ones may be absent or null; `pairs` are header
    lists (`[[name, value], ...]`)."""

    required: tuple[Field, ...]
    optional: tuple[Field, ...] = ()
    pairs: tuple[str, ...] = ()


_PAIRS = "a list of [name, value] string pairs"
_MESSAGE_MARKS: tuple[Field, ...] = (
    ("b64", STRING, "a string or null"),
    ("truncated", BOOLEAN, "true, false or null"),
    ("depth_limited", BOOLEAN, "true, false or null"),
)
RECORD = Shape(
    required=(
        ("format", STRING, "a string"),
        ("id", STRING, "a string"),
        ("session", STRING, "a string"),
        ("label", STRING, "a string"),
        ("seq", INTEGER, "an integer"),
        ("replay_of", _or_null(STRING), "a string or null"),
        ("listener", _or_null(STRING), "a string or null"),
        ("started", NUMBER, "a number"),
        ("ttfb_ms", _or_null(NUMBER), "a number or null"),
        ("duration_ms", _or_null(NUMBER), "a number or null"),
        ("request", OBJECT, "an object"),
        ("response", _or_null(OBJECT), "an object or null"),
        ("error", _or_null(OBJECT), "an object or null"),
        ("tags", OBJECT, "an object"),
    ),
    optional=(("attempt", INTEGER, "an integer or null"),),
)
REQUEST = Shape(
    required=(
        ("method", STRING, "a string"),
        ("url", STRING, "a string"),
        ("path", STRING, "a string"),
        ("http_version", STRING, "a string"),
        ("headers", LIST, _PAIRS),
        ("body", ANY, "JSON"),
        ("text", _or_null(STRING), "a string or null"),
        ("size", INTEGER, "an integer"),
    ),
    optional=(("forwarded_headers", LIST, f"{_PAIRS} or null"), *_MESSAGE_MARKS),
    pairs=("headers", "forwarded_headers"),
)
RESPONSE = Shape(
    required=(
        ("status", INTEGER, "an integer"),
        ("reason", STRING, "a string"),
        ("http_version", STRING, "a string"),
        ("headers", LIST, _PAIRS),
        ("body", ANY, "JSON"),
        ("text", _or_null(STRING), "a string or null"),
        ("size", INTEGER, "an integer"),
        ("events", _or_null(LIST), "a list or null"),
        ("complete", BOOLEAN, "true or false"),
    ),
    optional=(
        *_MESSAGE_MARKS,
        ("decode_error", STRING, "a string or null"),
        ("events_dropped", INTEGER, "an integer or null"),
        ("websocket", OBJECT, "an object or null"),
    ),
    pairs=("headers",),
)
EVENT = Shape(
    required=(("event", _or_null(STRING), "a string or null"), ("data", ANY, "JSON")),
    optional=(
        ("t_ms", NUMBER, "a number or null"),
        ("direction", STRING, "a string or null"),
        ("b64", STRING, "a string or null"),
        ("id", STRING, "a string or null"),
        ("truncated", BOOLEAN, "true, false or null"),
        ("partial", BOOLEAN, "true, false or null"),
        ("depth_limited", BOOLEAN, "true, false or null"),
    ),
)
DIRECTIONS = Shape(required=(("client", INTEGER, "an integer"), ("server", INTEGER, "an integer")))
WEBSOCKET = Shape(
    required=(
        ("close_code", _or_null(INTEGER), "an integer or null"),
        ("close_reason", STRING, "a string"),
        ("closed_by", _or_null(STRING), "a string or null"),
        ("messages", OBJECT, "an object"),
        ("bytes", OBJECT, "an object"),
    )
)
ERROR = Shape(required=(("kind", STRING, "a string"), ("message", STRING, "a string")))
TAGS = Shape(
    required=(
        ("family", STRING, "a string"),
        ("endpoint", STRING, "a string"),
        ("prefix", STRING, "a string"),
        ("method", STRING, "a string"),
        ("stream", BOOLEAN, "true or false"),
        ("model", _or_null(STRING), "a string or null"),
        ("sdk", _or_null(OBJECT), "an object or null"),
        ("retry", INTEGER, "an integer"),
        ("auth", _or_null(OBJECT), "an object or null"),
        ("soft_error", BOOLEAN, "true or false"),
        ("signature", _or_null(STRING), "a string or null"),
    ),
    optional=(("transport", STRING, "a string or null"),),
)
SDK = Shape(
    required=(("user_agent", _or_null(STRING), "a string or null"),),
    optional=(
        *(
            (key, STRING, "a string or null")
            for key in ("lang", "version", "os", "arch", "runtime", "runtime_version")
        ),
        ("async", BOOLEAN, "true, false or null"),
        ("client", STRING, "a string or null"),
        ("client_version", STRING, "a string or null"),
    ),
)
AUTH = Shape(
    required=(
        ("header", STRING, "a string"),
        ("scheme", _or_null(STRING), "a string or null"),
        ("fingerprint", _or_null(STRING), "a string or null"),
        ("forwarded", _or_null(BOOLEAN), "true, false or null"),
    )
)
_MISSING = object()


def _fields(where: str, obj: dict[str, Any], shape: Shape) -> str | None:
    for key, types, what in shape.required:
        value = obj.get(key, _MISSING)
        if value is _MISSING:
            return f"{where}{key} is missing"
        if types is not None and type(value) not in types:
            return f"{where}{key} must be {what}, not {type(value).__name__}"
    if len(obj) > len(shape.required):  # an optional key (or one of no concern) is there
        for key, types, what in shape.optional:
            value = obj.get(key)
            if value is not None and types is not None and type(value) not in types:
                return f"{where}{key} must be {what}, not {type(value).__name__}"
    for key in shape.pairs:
        value = obj.get(key)
        if value is not None and not _pairs(value):
            return f"{where}{key} must be {_PAIRS}"
    return None


def _response(resp: dict[str, Any]) -> str | None:
    found = _fields("response.", resp, RESPONSE)
    if found:
        return found
    for i, ev in enumerate(resp["events"] or ()):
        if not isinstance(ev, dict):
            return f"response.events[{i}] must be an object"
        found = _fields(f"response.events[{i}].", ev, EVENT)
        if found:
            return found
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
