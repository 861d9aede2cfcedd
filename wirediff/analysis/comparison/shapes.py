"""Flatten a JSON body to its shape, `path → set of JSON types`, with arrays as `[]`.

Two backends answering the same request say different words, so bodies are compared by shape,
never by value; only constant fields such as `object`, `type`, `role`, `status` and
`finish_reason` keep their values, because a different constant is a different protocol.
Tool-call `arguments` strings are parsed and their shape goes under `<path>@json`, so an object
where a string belongs, or arguments that do not parse, show up as shape.

Answers of one kind repeat one structure with other words, so `structure` names a value's
structure once, and what depends only on it is worked out once per structure: `flat`, and the
verdicts in `wirediff.analysis.comparison.conformance`. A structure keeps what a verdict reads of
numbers and free text: the values of numbers the OpenAPI document bounds, in `BOUNDED_NUMBERS`,
and the length class of free text it bounds, in `BOUNDED_TEXT`.
"""

from __future__ import annotations

import json
import re
import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import count
from typing import Any

from wirediff._types import JSON
from wirediff.record.validate import JSON_TYPES, json_type

__all__ = [
    "BOUNDED_NUMBERS",
    "BOUNDED_TEXT",
    "FREE_TEXT",
    "NAME_PATTERN",
    "TEXT_BOUNDS",
    "Frozen",
    "Shape",
    "Values",
    "add_parsed",
    "ancestors",
    "by_path",
    "flat",
    "flatten",
    "json_type",
    "known_structures",
    "spell",
    "structure",
    "type_label",
]

Shape = set[tuple[str, str]]
"""`(path, JSON type)` pairs, merged over array items (and over events, when shared).

A set of pairs rather than a dict of sets: one C-level `add` per node keeps flattening
cheap enough for streams of thousands of chunks."""

Values = set[tuple[str, str]]
"""`(path, value)` pairs of the constant fields."""

Frozen = frozenset[tuple[str, str]]
"""A shape or its constants, frozen: shared between the values of one structure."""

CONSTANT_KEYS = frozenset({"object", "type", "role", "status", "finish_reason"})
ARGUMENTS_KEY = "arguments"
PARSED = "@json"
INVALID_JSON = "invalid JSON"

_BOUNDARIES = ".[@"


def flatten(
    value: JSON,
    prefix: str = "",
    shape: Shape | None = None,
    values: Values | None = None,
    *,
    parse_arguments: bool = True,
) -> tuple[Shape, Values]:
    """Add the shape of `value` under `prefix` to `shape`, and its constants to `values`.

    Passing the same sets for many values merges them, which is how a stream of chunks becomes
    one shape.
    """
    shape = set() if shape is None else shape
    values = set() if values is None else values
    _walk(value, prefix, shape, values, parse_arguments)
    return shape, values


def _walk(value: JSON, path: str, shape: Shape, values: Values, parse_arguments: bool) -> None:
    kind = type(value)
    if kind is dict:
        shape.add((path, "object"))
        for key, item in value.items():
            sub = f"{path}.{key}" if path else key
            item_kind = type(item)
            if item_kind is str:
                shape.add((sub, "string"))
                if key in CONSTANT_KEYS:
                    values.add((sub, item))
                elif key == ARGUMENTS_KEY and parse_arguments:
                    add_parsed(item, sub, shape, values)
            elif item_kind is dict or item_kind is list:
                _walk(item, sub, shape, values, parse_arguments)
            else:
                shape.add((sub, JSON_TYPES.get(item_kind, "unknown")))
    elif kind is list:
        shape.add((path, "array"))
        sub = path + "[]"
        for item in value:
            _walk(item, sub, shape, values, parse_arguments)
    else:
        shape.add((path, JSON_TYPES.get(kind, "unknown")))


def add_parsed(text: str, path: str, shape: Shape, values: Values) -> None:
    """Add the shape of a JSON document held in a string, under `<path>@json`."""
    try:
        parsed = json.loads(text)
    except ValueError:
        shape.add((path + PARSED, INVALID_JSON))
        return
    # Generated arguments: their shape is compared, never their values (`{"type": "celsius"}`).
    _walk(parsed, path + PARSED, shape, set(), False)


def by_path(pairs: Iterable[tuple[str, str]], paths: set[str]) -> dict[str, set[str]]:
    """Group the second members of `pairs` by path, for the given paths only."""
    out: dict[str, set[str]] = {}
    for path, item in pairs:
        if path in paths:
            out.setdefault(path, set()).add(item)
    return out


def ancestors(path: str) -> Iterable[str]:
    """Yield every enclosing path: `a.b[].c@json` → `a`, `a.b`, `a.b[]`, `a.b[].c`."""
    for i, ch in enumerate(path):
        if ch in _BOUNDARIES and i:
            yield path[:i]


def type_label(types: set[str] | frozenset[str]) -> str:
    """Name a set of types stably and shortly, as in `null|string`."""
    return "|".join(sorted(types))


# --- structures -------------------------------------------------------------------------

FREE_TEXT = frozenset(
    {
        "id",
        "text",
        "delta",
        "content",
        "name",
        "call_id",
        "item_id",
        "model",
        "instructions",
        "refusal",
        "message",
        "previous_response_id",
        "prompt_cache_key",
        "safety_identifier",
        "user",
        "description",
        "system_fingerprint",
        "encrypted_content",
        "obfuscation",
        "token",
        "param",
    }
)
"""Keys whose string values are generated or chosen by the caller.

No SDK type constrains their value, only that it is a string, and no shape keeps it.
`arguments` is not among them: its text is parsed for its shape."""

BOUNDED_NUMBERS = frozenset(
    {"temperature", "top_p", "top_logprobs", "output_compression", "partial_images"}
)
"""Keys whose numbers OpenAI's OpenAPI document bounds in an answer, by `minimum` or `maximum`.

A structure keeps their value, since the schema's verdict depends on it."""
BOUNDED_TEXT = frozenset(
    {"call_id", "description", "encrypted_content", "name", "safety_identifier", "text"}
)
"""Free-text keys whose length the document bounds somewhere in an answer.

The bounds are `minLength` and `maxLength`. A structure keeps which of `TEXT_BOUNDS` their
length stays within, and for `name` whether it matches `NAME_PATTERN`."""
TEXT_BOUNDS = (64, 128, 255, 10_485_760)
NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")

STRUCTURE_LIMIT = 1 << 14
STRUCTURE_TOKENS = 1 << 21
"""Tokens the remembered structures may spell together: 16 MB of references.

`STRUCTURE_LIMIT` caps how many structures are remembered; a structure of more than a 64th of
these tokens is not kept."""
FLAT_LIMIT = 1 << 14


class _Mark:
    """Mark a token of a structure that no JSON string or number can be mistaken for."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_OPEN, _CLOSE, _ARRAY, _END, _TEXT, _EMPTY = (_Mark(m) for m in ("{", "}", "[", "]", "…", "∅"))
_TRUE, _FALSE, _FLOAT = _Mark("true"), _Mark("false"), _Mark("float")
_structures: dict[tuple[Any, ...], int] = {}
_stored_tokens = 0
_numbers = count()
_flat: dict[tuple[int, str, bool], tuple[Frozen, Frozen]] = {}


class _Known(threading.local):
    """Hold, per thread, the structures worked out within `known_structures`, by value identity.

    The values themselves are held too, so that no other value takes over their identity."""

    memo: tuple[dict[int, int], list[JSON]] | None = None


_known = _Known()


@contextmanager
def known_structures() -> Iterator[None]:
    """Work out each value's structure once within this block, however often it is asked for.

    The divergences and the conformance checks of one analysis look at the same bodies and
    events. The values are held until the block ends."""
    if _known.memo is not None:
        yield
        return
    _known.memo = ({}, [])
    try:
        yield
    finally:
        _known.memo = None


def structure(value: JSON) -> int:
    """Number the structure of `value`.

    The number is the same for values that differ only in the text of `FREE_TEXT` strings, though
    not in whether one is empty, and in numbers, though not in whether a float is integral.
    Values with one number flatten alike under any prefix, a schema validates them alike, and the
    SDK reads them alike."""
    memo = _known.memo
    if memo is None:
        return _structure(value)
    numbers, values = memo
    number = numbers.get(id(value))
    if number is None:
        number = numbers[id(value)] = _structure(value)
        values.append(value)
    return number


def _structure(value: JSON) -> int:
    global _stored_tokens
    tokens: list[Any] = []
    _tokens(value, tokens)
    key = tuple(tokens)
    number = _structures.get(key)
    if number is None:
        number = next(_numbers)
        if len(key) > STRUCTURE_TOKENS >> 6:  # e.g. a batch of embeddings: not worth keeping
            return number
        if len(_structures) >= STRUCTURE_LIMIT or _stored_tokens > STRUCTURE_TOKENS:
            _structures.clear()  # numbers are never reused: what was keyed on one stays true
            _stored_tokens = 0
        _structures[key] = number
        _stored_tokens += len(key)
    return number


def _bounded(key: str, text: str) -> tuple[Any, ...]:
    mark = _TEXT if text else _EMPTY
    within = bisect_left(TEXT_BOUNDS, len(text))
    return (mark, within, NAME_PATTERN.match(text) is not None) if key == "name" else (mark, within)


def _tokens(value: JSON, out: list[Any]) -> None:
    """Spell the structure of a value unambiguously as tokens.

    The tokens are keys; the text of strings that are not free text, and of free text whether it
    is empty; the type of every other scalar, and for floats whether they are integral; and marks
    for where objects and arrays open and close."""
    kind = type(value)
    if kind is dict:
        out.append(_OPEN)
        for key, item in value.items():
            out.append(key)
            item_kind = type(item)
            if item_kind is str:
                if key not in FREE_TEXT:
                    out.append(item)
                elif key in BOUNDED_TEXT:
                    out.append(_bounded(key, item))
                else:
                    out.append(_TEXT if item else _EMPTY)
            elif item_kind is dict or item_kind is list:
                _tokens(item, out)
            elif key in BOUNDED_NUMBERS and (item_kind is int or item_kind is float):
                out.append((item_kind, item))
            elif item_kind is float:
                out.append(item.is_integer())
            else:
                out.append(item_kind)
        out.append(_CLOSE)
    elif kind is list:
        out.append(_ARRAY)
        for item in value:
            item_kind = type(item)
            if item_kind is dict or item_kind is list:
                _tokens(item, out)
            elif item_kind is float:
                out.append(item.is_integer())
            else:
                out.append(item if item_kind is str else item_kind)
        out.append(_END)
    elif kind is float:
        out.append(value.is_integer())
    else:
        out.append(value if kind is str else kind)


VARYING_NUMBERS = frozenset(
    {"t_ms", "created", "created_at", "completed_at", "expires_at", "logprob"}
)
"""Keys whose numbers no check reads but for their type, as `*_tokens` too: times and counts.

Everything else a check may compare by value: statuses, indices, `sequence_number`."""
NUMBERED_TEXT = frozenset({"id", "call_id", "item_id", "tool_call_id", "previous_response_id"})
"""Free-text keys whose values a check compares with one another within an answer.

A stream's helper joins a call's argument pieces by `item_id` and checks that the calls it
announced are those its last event holds, by `call_id`."""


def spell(value: JSON, out: list[Any], ids: dict[str, int]) -> None:
    """Spell what any check reads of a value as tokens, for equal spellings to read alike.

    Like `structure`'s tokens, they leave out the words of free text, but keep the name of a
    tool, the pieces of a call's arguments, every number but those in `VARYING_NUMBERS`, and
    every boolean, since some check reads each by value. An id in `NUMBERED_TEXT` is spelled
    by the order in which `ids` first met it, so that ids equal within one answer stay equal."""
    kind = type(value)
    if kind is dict:
        out.append(_OPEN)
        typ = value.get("type")
        pieces = type(typ) is str and "arguments" in typ
        for key, item in value.items():
            out.append(key)
            item_kind = type(item)
            if item_kind is str:
                if key not in FREE_TEXT or key == "name" or (pieces and key == "delta"):
                    out.append(item)
                elif key in NUMBERED_TEXT:
                    out.append((ids.setdefault(item, len(ids)), *_bounded(key, item)))
                elif key in BOUNDED_TEXT:
                    out.append(_bounded(key, item))
                else:
                    out.append(_TEXT if item else _EMPTY)
            elif item_kind is dict or item_kind is list:
                spell(item, out, ids)
            elif (item_kind is int or item_kind is float) and (
                key in VARYING_NUMBERS or key.endswith("_tokens")
            ):
                out.append(_FLOAT if item_kind is float and not item.is_integer() else item_kind)
            else:
                out.append(_scalar(item, item_kind))
        out.append(_CLOSE)
    elif kind is list:
        out.append(_ARRAY)
        for item in value:
            item_kind = type(item)
            if item_kind is dict or item_kind is list:
                spell(item, out, ids)
            else:
                out.append(_scalar(item, item_kind))
        out.append(_END)
    else:
        out.append(_scalar(value, kind))


def _scalar(value: Any, kind: type) -> Any:
    """Spell a string, an integer or None as itself, others apart from the values they equal."""
    if kind is float:
        return (value,)
    if kind is bool:
        return _TRUE if value else _FALSE
    return value


def flat(value: JSON, prefix: str = "", *, parse_arguments: bool = True) -> tuple[Frozen, Frozen]:
    """Call `flatten`, frozen and worked out once per structure."""
    key = (structure(value), prefix, parse_arguments)
    found = _flat.get(key)
    if found is None:
        shape, values = flatten(value, prefix, parse_arguments=parse_arguments)
        if len(_flat) >= FLAT_LIMIT:
            _flat.clear()
        found = _flat[key] = (frozenset(shape), frozenset(values))
    return found
