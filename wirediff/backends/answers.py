"""Decide what a stand-in answers from the request alone, so output is repeatable.

A request with tools gets one function call (the scenario models below ask for others);
one asking for structured output gets an object its schema accepts: a `json_schema`
response format (`response_format`, Responses' `text.format`) that schema's placeholder,
JSON mode (`json_object`) the placeholder of the schema the prompt carries, as instructor's
JSON mode sends it, else an empty object; otherwise the answer echoes the input. A call's
arguments are fixed placeholder values built from the tool's JSON schema, never text from
the request: clients execute tool calls (the Codex CLI runs `exec_command` and `shell`
arguments as commands), so echoing a prompt into them would run it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from wirediff.profiles import Profile

__all__ = [
    "PLACEHOLDER_TEXT",
    "SCENARIO_MODELS",
    "Call",
    "Plan",
    "chat_plan",
    "placeholder",
    "placeholder_arguments",
    "plan_for",
    "responses_plan",
]

JSONDict = dict[str, Any]

PLACEHOLDER_TEXT = "example"
"""Every string a tool call's arguments need: a plain word that runs nothing useful."""

SCENARIO_MODELS: dict[str, str] = {
    "scenario-parallel-tools": "one call to each offered tool, in one answer",
    "scenario-text-and-tool": "a text, then a call to the first offered tool, in one answer",
    "scenario-context-overflow": "the profile's answer to a prompt longer than the context",
}
"""Model names that choose what an answer holds; every profile accepts them."""

_BY_TYPE: dict[str, Any] = {
    "string": PLACEHOLDER_TEXT,
    "integer": 1,
    "number": 1,
    "boolean": True,
    "null": None,
}
_FORMATS = {
    "date-time": "2025-01-01T00:00:00Z",
    "date": "2025-01-01",
    "time": "00:00:00Z",
    "email": "example@example.com",
    "uri": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "127.0.0.1",
    "hostname": "example.com",
}
_DEPTH = 16
"""How deep placeholders follow `$ref`s (a recursive schema stops there)."""


@dataclass
class Call:
    """Hold one function call: the tool's name and its arguments.

    The arguments are a JSON string, or a dict where the profile or `fault-args-object` says
    so."""

    name: str
    arguments: Any


@dataclass
class Plan:
    """Hold the answer's content, independent of the provider's shape for it."""

    kind: str
    """`text`, `tool` for calls only, or `text+tool` for a text, then calls."""
    text: str = ""
    reasoning: str = ""
    calls: list[Call] = field(default_factory=list)
    prompt_tokens: int = 1

    @property
    def says(self) -> bool:
        return self.kind != "tool"

    def pieces(self) -> list[str]:
        """Split the text into stream deltas, word by word, spaces kept."""
        return re.findall(r"\S+\s*", self.text) or [self.text]


def _text_of(content: Any) -> str:
    """Return the text of a chat/responses content value: a string or a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


def _words(text: str, n: int = 12) -> str:
    return " ".join(text.split()[:n])


def _resolve(schema: Any, root: Any, depth: int) -> Any:
    """Follow a local `$ref` of `schema`: `#/$defs/X`, `#/definitions/X`."""
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and depth > 0:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target.get(part) if isinstance(target, dict) and part else target
        if target is schema or not isinstance(target, dict):
            break
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        depth -= 1
    return schema


def _string(schema: JSONDict) -> str:
    text = _FORMATS.get(str(schema.get("format")), PLACEHOLDER_TEXT)
    low = schema.get("minLength")
    if isinstance(low, int) and len(text) < low:
        text = text + "x" * (low - len(text))
    high = schema.get("maxLength")
    return text[:high] if isinstance(high, int) else text


def _number(schema: JSONDict, kind: str) -> Any:
    value: Any = 1
    for bound, step in (("minimum", 0), ("exclusiveMinimum", 1)):
        low = schema.get(bound)
        if isinstance(low, int | float) and not isinstance(low, bool) and value < low + step:
            value = low + step
    for bound, step in (("maximum", 0), ("exclusiveMaximum", 1)):
        high = schema.get(bound)
        if isinstance(high, int | float) and not isinstance(high, bool) and value > high - step:
            value = high - step
    return int(value) if kind == "integer" else value


def placeholder(schema: Any, root: Any = None, depth: int = _DEPTH) -> Any:
    """Make a fixed value that satisfies one JSON schema.

    It is a `const`, an enum's or a union's first choice, all of an `allOf`, an object's
    required properties, an array of its minimum length, a string in its format and length, a
    number within its bounds; `$ref`s to the schema's own definitions are followed."""
    root = schema if root is None else root
    schema = _resolve(schema, root, depth)
    if not isinstance(schema, dict) or depth <= 0:
        return PLACEHOLDER_TEXT
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for union in ("anyOf", "oneOf"):
        if isinstance(schema.get(union), list) and schema[union]:
            return placeholder(schema[union][0], root, depth - 1)
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        merged: JSONDict = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            part = _resolve(part, root, depth - 1)
            if not isinstance(part, dict):
                continue
            props = {**(merged.get("properties") or {}), **(part.get("properties") or {})}
            required = [*(merged.get("required") or []), *(part.get("required") or [])]
            merged = {**merged, **part, "properties": props, "required": required}
        return placeholder(merged, root, depth - 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        return _object(schema, root, depth)
    if kind == "array":
        low = schema.get("minItems")
        count = low if isinstance(low, int) and low > 0 else 0
        return [placeholder(schema.get("items"), root, depth - 1) for _ in range(count)]
    if kind == "string":
        return _string(schema)
    if kind in ("integer", "number"):
        return _number(schema, kind)
    return _BY_TYPE.get(str(kind), PLACEHOLDER_TEXT)


def _object(schema: JSONDict, root: Any, depth: int) -> JSONDict:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = schema.get("required")
    names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
    return {name: placeholder(props.get(name), root, depth - 1) for name in names}


def placeholder_arguments(parameters: Any) -> JSONDict:
    """Make a function call's arguments: the schema's required properties, each a placeholder."""
    if not isinstance(parameters, dict):
        return {}
    return _object(parameters, parameters, _DEPTH)


def plan_for(
    last_text: str,
    tool_output: str | None,
    tools: list[tuple[str, Any]],
    tool_choice: Any,
    model: str,
    reasoning: bool,
    object_arguments: bool = False,
) -> Plan:
    """Plan a tool call when tools are offered and not refused, else an echo of the input.

    `object_arguments` gives arguments as a JSON object, not a string, as `fault-args-object`
    does."""
    prompt_tokens = max(len(last_text.split()), 1)
    if tool_output is not None:
        return Plan(
            "text",
            text=f"Tool said: {_words(tool_output) or 'nothing'}",
            prompt_tokens=prompt_tokens,
        )
    echo = f"Echo: {_words(last_text) or 'hello'}"
    if tools and tool_choice != "none":
        chosen = tools if model == "scenario-parallel-tools" else tools[:1]
        as_object = object_arguments or model == "fault-args-object"
        calls = [
            Call(
                name,
                placeholder_arguments(params)
                if as_object
                else json.dumps(placeholder_arguments(params), separators=(",", ":")),
            )
            for name, params in chosen
        ]
        if model == "scenario-text-and-tool":
            return Plan("text+tool", text=echo, calls=calls, prompt_tokens=prompt_tokens)
        return Plan("tool", calls=calls, prompt_tokens=prompt_tokens)
    plan = Plan("text", text=echo, prompt_tokens=prompt_tokens)
    if reasoning:
        plan.reasoning = f"The user wrote {len(last_text.split())} words."
    return plan


_SCHEMA_START = re.compile(r"\{")


def _schema_in(text: str) -> Any:
    """Find the first JSON object in a prompt that is a JSON Schema, or None.

    instructor's JSON mode puts the model's schema in its prompt."""
    decoder = json.JSONDecoder()
    for match in _SCHEMA_START.finditer(text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict) and ("properties" in value or value.get("type") == "object"):
            return value
    return None


def _json_format(fmt: Any, prompts: list[str]) -> Any:
    """Find the schema an answer must follow; None when no structured output is asked.

    It is a `json_schema` format's: chat's `response_format.json_schema`, Responses'
    `text.format`. Or it is JSON mode's from the prompt, else any object."""
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_object":
        found = next((s for s in map(_schema_in, prompts) if s is not None), None)
        return found if found is not None else {"type": "object"}
    if fmt.get("type") != "json_schema":
        return None
    inner: dict[str, Any] = fmt["json_schema"] if isinstance(fmt.get("json_schema"), dict) else fmt
    schema = inner.get("schema")
    return schema if isinstance(schema, dict) else None


def _structured(plan: Plan, schema: Any) -> Plan:
    """Answer in the requested schema: its placeholder object, as JSON text."""
    if schema is None or plan.kind != "text" or plan.text.startswith("Tool said:"):
        return plan
    plan.text = json.dumps(placeholder(schema), separators=(",", ":"))
    return plan


def chat_plan(body: JSONDict, prof: Profile) -> Plan:
    raw = body.get("messages")
    messages: list[Any] = raw if isinstance(raw, list) else []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    user = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    tools = [
        (str(t["function"].get("name", "tool")), t["function"].get("parameters"))
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    tool_output = _text_of(last.get("content")) if last.get("role") == "tool" else None
    reasoning = bool(prof["streaming"]["chat"].get("reasoning_field"))
    plan = plan_for(
        _text_of(user[-1].get("content")) if user else "",
        tool_output,
        tools,
        body.get("tool_choice"),
        str(body.get("model")),
        reasoning,
        prof["chat"].get("tool_arguments") == "object",
    )
    prompts = [_text_of(m.get("content")) for m in messages if isinstance(m, dict)]
    return _structured(plan, _json_format(body.get("response_format"), prompts))


def responses_plan(body: JSONDict) -> Plan:
    inp = body.get("input")
    last_text, tool_output = "", None
    prompts = [str(body.get("instructions") or "")]
    if isinstance(inp, str):
        last_text = inp
        prompts.append(inp)
    elif isinstance(inp, list) and inp:
        items = [i for i in inp if isinstance(i, dict)]
        users = [i for i in items if i.get("role") == "user"]
        last_text = _text_of(users[-1].get("content")) if users else ""
        prompts += [_text_of(i.get("content")) for i in items]
        if items and items[-1].get("type") == "function_call_output":
            tool_output = _text_of(items[-1].get("output"))
    tools = [
        (str(t.get("name", "tool")), t.get("parameters"))
        for t in body.get("tools") or []
        if isinstance(t, dict) and t.get("type") == "function"
    ]
    plan = plan_for(
        last_text, tool_output, tools, body.get("tool_choice"), str(body.get("model")), False
    )
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    return _structured(plan, _json_format(fmt, prompts))
