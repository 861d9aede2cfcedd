"""What a `wirediff/1` record must look like before anything analyses it.

A capture file may come from anywhere (another tool, an edit, a hostile upstream's echo):
every key the analysis relies on is checked for its type when the record is loaded, so a
bad record is one line naming file:line instead of a traceback deep in pandas. Bodies
nested deeper than `MAX_DEPTH` are kept as their JSON text, marked `depth_limited`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from wirediff import FORMAT
from wirediff._types import Record

__all__ = ["MAX_DEPTH", "depth_exceeds", "limit_depth", "problem"]

MAX_DEPTH = 64
"""Nesting levels a body or an event's data may have; deeper is kept as text."""

_NUMBER = (int, float)


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


def _number(v: Any) -> bool:
    return isinstance(v, _NUMBER) and not isinstance(v, bool)


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _pairs(v: Any) -> bool:
    return isinstance(v, list) and all(
        isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) and isinstance(h[1], str)
        for h in v
    )


_TOP: list[tuple[str, Callable[[Any], bool], str]] = [
    ("id", _str, "a string"),
    ("session", _opt(_str), "a string"),
    ("label", _str, "a string"),
    ("seq", _opt(_int), "an integer"),
    ("replay_of", _opt(_str), "a string or null"),
    ("listener", _opt(_str), "a string or null"),
    ("started", _opt(_number), "a number"),
    ("ttfb_ms", _opt(_number), "a number or null"),
    ("duration_ms", _opt(_number), "a number or null"),
]
_MESSAGE: list[tuple[str, Callable[[Any], bool], str]] = [
    ("headers", _opt(_pairs), "a list of [name, value] string pairs"),
    ("text", _opt(_str), "a string or null"),
    ("b64", _opt(_str), "a string or null"),
    ("size", _opt(_number), "a number"),
]
_REQUEST = [
    ("method", _opt(_str), "a string"),
    ("url", _opt(_str), "a string"),
    ("path", _opt(_str), "a string"),
    ("forwarded_headers", _opt(_pairs), "a list of [name, value] string pairs"),
    *_MESSAGE,
]
_RESPONSE = [
    ("status", _opt(_int), "an integer"),
    ("reason", _opt(_str), "a string"),
    ("events", _opt(lambda v: isinstance(v, list)), "a list or null"),
    ("complete", _opt(lambda v: isinstance(v, bool)), "true or false"),
    ("websocket", _opt(lambda v: isinstance(v, dict)), "an object or null"),
    *_MESSAGE,
]
_EVENT = [
    ("t_ms", _opt(_number), "a number or null"),
    ("event", _opt(_str), "a string or null"),
    ("direction", _opt(_str), "a string or null"),
]
_ERROR = [("kind", _opt(_str), "a string"), ("message", _opt(_str), "a string")]
_TAGS = [
    ("family", _str, "a string"),
    ("endpoint", _str, "a string"),
    ("prefix", _opt(_str), "a string"),
    ("method", _opt(_str), "a string"),
    ("model", _opt(_str), "a string or null"),
    ("signature", _opt(_str), "a string or null"),
    ("sdk", _opt(lambda v: isinstance(v, dict)), "an object or null"),
    ("auth", _opt(lambda v: isinstance(v, dict)), "an object or null"),
    ("retry", _opt(_int), "an integer"),
    ("stream", _opt(lambda v: isinstance(v, bool)), "true or false"),
    ("soft_error", _opt(lambda v: isinstance(v, bool)), "true or false"),
    ("transport", _opt(_str), "a string or null"),
]


def _fields(where: str, obj: dict[str, Any], spec: list[tuple[str, Any, str]]) -> str | None:
    for key, check, what in spec:
        if key in obj and not check(obj[key]):
            return f"{where}{key} must be {what}, not {type(obj[key]).__name__}"
    return None


def problem(rec: Any) -> str | None:
    """The first way `rec` is not a record the analysis can read, or None."""
    if not isinstance(rec, dict):
        return f"not a {FORMAT} record (format={type(rec).__name__!r})"
    if rec.get("format") != FORMAT:
        return f"not a {FORMAT} record (format={rec.get('format')!r})"
    if "id" not in rec:
        return "id is missing"
    found = _fields("", rec, _TOP)
    if found:
        return found
    req = rec.get("request")
    if not isinstance(req, dict):
        return "request must be an object"
    found = _fields("request.", req, _REQUEST)
    if found:
        return found
    resp = rec.get("response")
    if resp is not None:
        if not isinstance(resp, dict):
            return "response must be an object or null"
        found = _fields("response.", resp, _RESPONSE)
        if found:
            return found
        for i, ev in enumerate(resp.get("events") or ()):
            if not isinstance(ev, dict) or "data" not in ev:
                return f"response.events[{i}] must be an object with data"
            found = _fields(f"response.events[{i}].", ev, _EVENT)
            if found:
                return found
    for key, spec in (("error", _ERROR), ("tags", _TAGS)):
        value = rec.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            return f"{key} must be an object or null"
        found = _fields(f"{key}.", value, spec)
        if found:
            return found
    return None
