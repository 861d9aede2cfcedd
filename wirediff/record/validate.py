"""Check what a `wirediff/1` record must look like before anything analyses it.

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
    "JSON_TYPES",
    "MAX_CONTAINERS",
    "MAX_DEPTH",
    "MAX_EVENTS",
    "MAX_KEYS",
    "MAX_LINE_BYTES",
    "RECORD",
    "REQUEST",
    "RESPONSE",
    "SDK",
    "TAGS",
    "WEBSOCKET",
    "Shape",
    "containers",
    "depth_exceeds",
    "json_type",
    "limit_depth",
    "line_past_bounds",
    "past_bounds",
    "problem",
    "shape_of",
]

MAX_DEPTH = 64
"""Nesting levels a body or an event's data may have; deeper is kept as text."""
MAX_EVENTS = 100_000
"""Events one record holds at most, and what loading reads.

What the capture keeps of a stream or a WebSocket session; more are counted in
`events_dropped`."""
MAX_KEYS = 1 << 18
"""Keys one object of a record holds at most, and what loading reads.

A body or an event's data keeps 1 MiB, `capture_body_cap`, and each key of an object takes 6
bytes or more, as in `"k":0,`: no object of a capture holds even 175,000."""
MAX_LINE_BYTES = 256 << 20
"""Bytes of one record's line at most, and what loading reads.

More than a capture writes with its default body cap: a stream keeps 32 MiB of events, which
JSON may escape six-fold, and a body 1 MiB."""
MAX_CONTAINERS = 15 * MAX_EVENTS
"""Objects and lists one record's line holds at most, and what loading parses.

Parsing costs memory by them, not by bytes. An event of an API's stream holds a few: a chat
chunk's tool call delta holds nine. Only a stream of tiny ones, `[{},{},…]`, would need more."""


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Tell whether `value` nests lists and objects more than `limit` levels deep.

    It goes level by level, with no recursion."""
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


def line_past_bounds(line: bytes, size: int | None = None) -> str | None:
    """Say why the JSON text `line` is no record a capture writes, before it is parsed, or None.

    It may be too long to read, or hold too many objects and lists to parse. `size`: the line's
    length, when only its start was read."""
    size = len(line) if size is None else size
    if size > MAX_LINE_BYTES:
        return f"a line of {size:,} bytes, past the {MAX_LINE_BYTES >> 20} MiB a capture writes"
    if size < 2 * MAX_CONTAINERS or line.count(b"{") + line.count(b"[") <= MAX_CONTAINERS:
        return None  # every object or list takes two bytes at least
    found = containers(line)
    if found <= MAX_CONTAINERS:
        return None
    return f"a record of {found:,} objects and lists, past the {MAX_CONTAINERS:,} a capture writes"


_ESCAPE_RUN = 1 << 20
"""Bytes of a line counted at a time by `containers`."""


def containers(line: bytes) -> int:
    """Count the objects and lists of the JSON text `line`: its `{` and `[` outside strings.

    They are counted a piece at a time, each piece ending after an escape, never inside one; so
    the count costs no more memory than a piece, however the line is made."""
    found, inside, at = 0, False, 0
    while at < len(line):
        end = min(at + _ESCAPE_RUN, len(line))
        while end < len(line) and line[end - 1] == 0x5C:  # a backslash: take what it escapes
            end += 1
        piece = line[at:end].replace(b"\\\\", b"").replace(b'\\"', b"")
        parts = piece.split(b'"')
        outside = b"".join(parts[1 if inside else 0 :: 2])
        found += outside.count(b"{") + outside.count(b"[")
        inside ^= len(parts) % 2 == 0
        at = end
    return found


def past_bounds(line: bytes, rec: Any) -> str | None:
    """Say why `rec`, parsed from `line`, holds more than a capture writes, or None.

    More is `MAX_EVENTS` events, or an object of `MAX_KEYS` keys. Cheap for all but big records:
    no list or object of `line` holds more values than it has commas, plus one."""
    commas = line.count(b",")
    if commas < MAX_EVENTS or not isinstance(rec, dict):
        return None
    resp = rec.get("response")
    events = resp.get("events") if isinstance(resp, dict) else None
    if isinstance(events, list) and len(events) > MAX_EVENTS:
        return f"a record of {len(events):,} events, past the {MAX_EVENTS:,} a capture writes"
    keys = _most_keys(rec) if commas >= MAX_KEYS else 0
    if keys > MAX_KEYS:
        return f"an object of {keys:,} keys, past the {MAX_KEYS:,} a capture writes"
    return None


def _most_keys(value: Any) -> int:
    """Count the most keys any object in `value` holds, with no recursion."""
    most, stack = 0, [value]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            most = max(most, len(node))
            node = node.values()
        stack += [v for v in node if isinstance(v, _NESTING)]
    return most


def _as_text(part: dict[str, Any], key: str, text_key: str) -> None:
    part[text_key] = json.dumps(part[key], ensure_ascii=False)
    part[key] = None
    part["depth_limited"] = True


def limit_depth(rec: Record) -> bool:
    """Turn bodies and event data nested beyond `MAX_DEPTH` into their JSON text, marked.

    Return whether there were any."""
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


def _is_header_list(v: list[Any]) -> bool:
    for h in v:
        if type(h) is not list or len(h) != 2 or type(h[0]) is not str or type(h[1]) is not str:
            return False
    return True


Field = tuple[str, frozenset[type] | None, str]
"""A key, the types its value may have, and those types in words.

None for the types allows any JSON. Values are those `json.loads` gives
(`wirediff.record.decode`), so types are exact: a bool is not an integer, an integer is a
number."""


@dataclass(frozen=True)
class Shape:
    """Describe the keys of one object of a record (`wirediff._types`).

    `required` ones are in every record the builder writes; `optional` ones may be absent or
    null; `pairs` are header lists (`[[name, value], ...]`)."""

    required: tuple[Field, ...]
    optional: tuple[Field, ...] = ()
    pairs: tuple[str, ...] = ()


def _field(key: str, hint: Any, *, optional: bool) -> tuple[Field, bool]:
    """Make the check of one annotated key, and tell whether it holds a header list."""
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
    """Make the checks a TypedDict of `wirediff._types` describes, in its keys' order."""
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
        kind = type(value)
        if types is not None and (  # inline: a call per field costs a sixth of the check
            kind not in types
            or (kind is int and not _I64 <= value < -_I64)
            or (kind is float and not -_LARGEST <= value <= _LARGEST)
        ):
            found = _mistyped(value, types, what)
            if found:
                return f"{where}{key} {found}"
    if len(obj) > len(shape.required):  # an optional key (or one of no concern) is there
        for key, types, what in shape.optional:
            value = obj.get(key)
            if value is None or types is None:
                continue
            kind = type(value)
            if (
                kind not in types
                or (kind is int and not _I64 <= value < -_I64)
                or (kind is float and not -_LARGEST <= value <= _LARGEST)
            ):
                found = _mistyped(value, types, what)
                if found:
                    return f"{where}{key} {found}"
    for key in shape.pairs:
        value = obj.get(key)
        if value is not None and not _is_header_list(value):
            return f"{where}{key} must be {_PAIRS}"
    return None


JSON_TYPES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def json_type(value: Any) -> str:
    """Name the JSON Schema type of a parsed value."""
    return JSON_TYPES.get(type(value), type(value).__name__)


def _mistyped(value: Any, types: frozenset[type], what: str) -> str | None:
    """Say how `value` is not of `types`.

    JSON allows any number, the analysis's columns and its JSON outputs do not: an integer
    must fit 64 bits, one where a number is asked for a double, and a number be finite."""
    if type(value) not in types:
        return f"must be {what}, not {json_type(value)}"
    if type(value) is float:  # 1e999 reads as infinity: no JSON output could write it back
        return None if -_LARGEST <= value <= _LARGEST else "must be a finite number"
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
    """Find the first way `rec` is not a record as `wirediff._types.Record` describes it.

    None when it is one: every key where it belongs, with its type."""
    if not isinstance(rec, dict):
        return (
            f"not a {FORMAT} record (a JSON {json_type(rec)}; each line of a capture is one "
            "record's object)"
        )
    if rec.get("format") != FORMAT:
        return f"not a {FORMAT} record (format={rec.get('format')!r})"
    found = _fields("", rec, RECORD) or _fields("request.", rec["request"], REQUEST)
    if not found and rec["response"] is not None:
        found = _response(rec["response"])
    if not found and rec["error"] is not None:
        found = _fields("error.", rec["error"], ERROR)
    return found or _tags(rec["tags"])
