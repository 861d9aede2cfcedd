"""Read what a request asks of its answer, and judge whether a value delivers it.

A request offers function tools, each with the JSON Schema of its arguments, and may ask for
structured output: `response_format` on Chat Completions, `json_schema` with a schema or
`json_object`, and `text.format` on Responses. An app runs a tool call's arguments through
`json.loads` and hands the object to the tool, and parses structured content the same way; the
SDKs' `parse()` validates it against the schema. The verdicts here are what that gives, in words
without generated values: `object`, `not JSON`, `rejected by the schema at /unit (enum)`.
Validation is jsonschema's, one validator per distinct schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import jsonschema

__all__ = [
    "OBJECT",
    "VALID",
    "Asked",
    "arguments_kind",
    "asked",
    "asks_structured",
    "parsed_kind",
    "structured_kind",
]

OBJECT = "object"
"""The verdict on arguments (and structured content) an app can use."""
VALID = "valid"
NOT_JSON = "not JSON"


@dataclass(frozen=True, slots=True)
class Asked:
    """Hold what one request asks of its answer; `key` spells it for memo keys."""

    tools: tuple[tuple[str, str], ...] = ()
    """Offered function tools: `(name, parameters schema as canonical JSON)`."""
    structured: str | None = None
    """`json_schema`, `json_object`, or None (no structured output asked)."""
    schema: str | None = None
    """The structured output's JSON Schema, as canonical JSON."""

    @property
    def names(self) -> frozenset[str]:
        return frozenset(name for name, _ in self.tools)

    def tool_schema(self, name: Any) -> str | None:
        return next((s for n, s in self.tools if n == name), None)

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.tools, self.structured, self.schema)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _function_tools(body: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Read the function tools a request offers as `(name, parameters schema)` pairs.

    Chat spells one `{"type": "function", "function": {name, parameters}}`, Responses `{"type":
    "function", name, parameters}`."""
    tools = body.get("tools")
    out = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict) or tool.get("type") != "function":
            continue
        inner = tool.get("function")
        fn: dict[str, Any] = inner if isinstance(inner, dict) else tool
        name = fn.get("name")
        if isinstance(name, str):
            out.append((name, _canonical(fn.get("parameters"))))
    return tuple(out)


def _format(body: dict[str, Any]) -> Any:
    """Return the structured-output format asked.

    Chat Completions asks with `response_format`, Responses with `text.format`."""
    fmt = body.get("response_format")
    if fmt is None and isinstance(body.get("text"), dict):
        fmt = body["text"].get("format")
    return fmt if isinstance(fmt, dict) else None


def asks_structured(body: Any) -> bool:
    """Tell whether the request `body` asks for structured output, as `Asked.structured` says."""
    fmt = _format(body) if isinstance(body, dict) else None
    return fmt is not None and fmt.get("type") in ("json_schema", "json_object")


def asked(body: Any) -> Asked:
    """Read what the request `body` asks of its answer."""
    if not isinstance(body, dict):
        return Asked()
    tools = _function_tools(body)
    fmt = _format(body)
    kind = fmt.get("type") if fmt is not None else None
    if kind == "json_schema":
        inner = fmt.get("json_schema") if isinstance(fmt.get("json_schema"), dict) else fmt
        schema = inner.get("schema")
        return Asked(tools, "json_schema", _canonical(schema) if isinstance(schema, dict) else None)
    if kind == "json_object":
        return Asked(tools, "json_object")
    return Asked(tools)


@lru_cache(maxsize=256)
def _validator(schema: str) -> jsonschema.protocols.Validator | None:
    """Build a validator for a schema given as canonical JSON.

    It is None when the schema is not valid, and then nothing is judged against it."""
    try:
        doc = json.loads(schema)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    cls = jsonschema.validators.validator_for(doc, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(doc)
    except jsonschema.SchemaError:
        return None
    return cls(doc)


def _rejection(value: Any, schema: str | None) -> str | None:
    """Say where and by which rule the schema rejects `value`, without the generated values."""
    validator = _validator(schema) if schema else None
    if validator is None:
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "/" + "/".join(str(p) for p in error.absolute_path)
    return f"rejected by the schema at {where} ({error.validator})"


def arguments_kind(arguments: Any, schema: str | None = None) -> str:
    """Judge tool-call arguments as an app reads them.

    `json.loads` must give an object, which the tool's schema accepts when the request gave one."""
    if not isinstance(arguments, str):
        return f"not a string ({type(arguments).__name__})"
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return NOT_JSON
    if not isinstance(parsed, dict):
        return f"JSON {type(parsed).__name__}"
    return _rejection(parsed, schema) or OBJECT


def structured_kind(content: Any, ask: Asked) -> str | None:
    """Judge structured content as the app parses it: `valid`, else why not.

    `valid` is an object the schema accepts, or any object in JSON mode. None when no structured
    output was asked."""
    if ask.structured is None:
        return None
    if not isinstance(content, str):
        return "no content" if content is None else f"not a string ({type(content).__name__})"
    try:
        parsed = json.loads(content)
    except (ValueError, RecursionError):
        return NOT_JSON
    return parsed_kind(parsed, ask)


def parsed_kind(value: Any, ask: Asked) -> str:
    """Judge parsed structured content against what was asked.

    JSON mode takes any object, a schema what it accepts."""
    if ask.structured == "json_object":
        return VALID if isinstance(value, dict) else f"JSON {type(value).__name__}"
    return _rejection(value, ask.schema) or VALID
