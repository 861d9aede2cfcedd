"""The top-level members of a JSON object of which only the start and the end were kept.

A request over the body cap (an image or a file inlined as base64) is kept as its first
bytes, no JSON then. What tagging reads of it (`model`, `stream`) is a top-level member,
written before the long value or after it (the openai SDK writes `messages` and `input`
first): the members the kept start holds whole are read forward, those the kept end holds
whole are read backward, and a member cut off is not read at all.
"""

from __future__ import annotations

import json
import re

from wirediff._types import JSON

__all__ = ["cut_members"]

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
_SCALAR = frozenset("-+.0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
"""What numbers, true, false and null are written with."""


def cut_members(head: str, tail: str = "") -> dict[str, JSON]:
    """The scalar top-level members (text, numbers, true, false, null) of a JSON object
    whose text starts with `head` and ends with `tail` (either may be cut anywhere); on a
    name read in both, the one nearer the end wins, as a JSON parser's would."""
    return {**_forward(head), **_backward(tail)}


def _forward(text: str) -> dict[str, JSON]:
    found: dict[str, JSON] = {}
    at = _SPACE.match(text).end()  # type: ignore[union-attr]
    if text[at : at + 1] != "{":
        return found
    at += 1
    try:
        while True:
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            name, at = _DECODER.raw_decode(text, at)
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            if not isinstance(name, str) or text[at : at + 1] != ":":
                return found
            at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
            value, at = _DECODER.raw_decode(text, at)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not isinstance(value, dict | list) and (at < len(text) or not number):
                found[name] = value  # a number the start ends with may be cut short
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
            if text[at : at + 1] != ",":
                return found
            at += 1
    except ValueError:  # cut here
        return found


def _string_start(text: str, end: int) -> int:
    """Where the string whose closing quote is at `end` opens, or -1: a quote no odd run
    of backslashes escapes (inside a string, every quote is escaped)."""
    at = end
    while True:
        at = text.rfind('"', 0, at)
        if at < 0:
            return -1
        before = at - 1
        while before >= 0 and text[before] == "\\":
            before -= 1
        if (at - 1 - before) % 2 == 0:
            return at


def _value_start(text: str, end: int) -> int:
    """Where the value ending at `end` (its last character) starts, or -1 if it does not
    start within `text`."""
    last = text[end]
    if last == '"':
        return _string_start(text, end)
    if last not in "]}":
        at = end
        while at >= 0 and text[at] in _SCALAR:
            at -= 1
        return at + 1 if at < end else -1
    depth, at = 0, end
    while at >= 0:
        c = text[at]
        if c == '"':
            at = _string_start(text, at)
            if at < 0:
                return -1
        elif c in "]}":
            depth += 1
        elif c in "[{":
            depth -= 1
            if depth == 0:
                return at
        at -= 1
    return -1


def _before(text: str, at: int) -> int:
    """The last character before `at` that is no space, or -1."""
    while at >= 0 and text[at] in " \t\n\r":
        at -= 1
    return at


def _backward(text: str) -> dict[str, JSON]:
    found: dict[str, JSON] = {}
    at = _before(text, len(text) - 1)
    if at < 0 or text[at] != "}":
        return found
    at = _before(text, at - 1)
    while at >= 0:
        start = _value_start(text, at)
        colon = _before(text, start - 1) if start >= 0 else -1
        if colon < 0 or text[colon] != ":":
            return found
        name_end = _before(text, colon - 1)
        name_start = _string_start(text, name_end) if text[name_end : name_end + 1] == '"' else -1
        if name_start < 0:
            return found
        try:
            name = json.loads(text[name_start : name_end + 1])
            value = json.loads(text[start : at + 1])
        except ValueError:
            return found
        if not isinstance(value, dict | list):
            found.setdefault(name, value)  # the last of a name is the one read
        at = _before(text, name_start - 1)
        if at < 0 or text[at] != ",":
            return found
        at = _before(text, at - 1)
    return found
