"""JSON shapes: a body flattened to `path → set of JSON types`, with arrays as `[]`.

Two backends answering the same request say different words, so bodies are compared by
shape, never by value; only constant fields (`object`, `type`, `role`, `status`,
`finish_reason`) keep their values, because a different constant is a different protocol.
Tool-call `arguments` strings are parsed and their shape goes under `<path>@json`, so an
object where a string belongs, or arguments that no longer parse, show up as shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from analysis._types import JSON

Shape = set[tuple[str, str]]
"""`(path, JSON type)` pairs, merged over array items (and over events, when shared).

A set of pairs rather than a dict of sets: one C-level `add` per node keeps flattening
cheap enough for streams of thousands of chunks."""

Values = set[tuple[str, str]]
"""`(path, value)` pairs of the constant fields."""

CONSTANT_KEYS = frozenset({"object", "type", "role", "status", "finish_reason"})
ARGUMENTS_KEY = "arguments"
PARSED = "@json"
INVALID_JSON = "invalid JSON"

_TYPE_NAMES: dict[type, str] = {
    dict: "object",
    list: "array",
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
_BOUNDARIES = ".[@"


def json_type(value: JSON) -> str:
    """The JSON Schema name of a parsed value's type."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def flatten(
    value: JSON,
    prefix: str = "",
    shape: Shape | None = None,
    values: Values | None = None,
    *,
    parse_arguments: bool = True,
) -> tuple[Shape, Values]:
    """Add the shape of `value` under `prefix` to `shape` (and constants to `values`).

    Passing the same sets for many values merges them, which is how a stream of chunks
    becomes one shape.
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
                shape.add((sub, _TYPE_NAMES.get(item_kind, "unknown")))
    elif kind is list:
        shape.add((path, "array"))
        sub = path + "[]"
        for item in value:
            _walk(item, sub, shape, values, parse_arguments)
    else:
        shape.add((path, _TYPE_NAMES.get(kind, "unknown")))


def add_parsed(text: str, path: str, shape: Shape, values: Values) -> None:
    """The shape of a JSON document held in a string, under `<path>@json`."""
    try:
        parsed = json.loads(text)
    except ValueError:
        shape.add((path + PARSED, INVALID_JSON))
        return
    # Generated arguments: their shape is compared, never their values (`{"type": "celsius"}`).
    _walk(parsed, path + PARSED, shape, set(), False)


def by_path(pairs: Iterable[tuple[str, str]], paths: set[str]) -> dict[str, set[str]]:
    """The second members of `pairs`, grouped by path, for the given paths only."""
    out: dict[str, set[str]] = {}
    for path, item in pairs:
        if path in paths:
            out.setdefault(path, set()).add(item)
    return out


def ancestors(path: str) -> Iterable[str]:
    """Every enclosing path: `a.b[].c@json` → `a`, `a.b`, `a.b[]`, `a.b[].c`."""
    for i, ch in enumerate(path):
        if ch in _BOUNDARIES and i:
            yield path[:i]


def type_label(types: set[str] | frozenset[str]) -> str:
    """A stable short name for a set of types: `null|string`."""
    return "|".join(sorted(types))
