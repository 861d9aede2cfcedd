"""What a stand-in answers, decided from the request alone, so output is repeatable.

A request with tools gets one function call; one asking for structured output (a
`json_schema` response format) gets the schema's placeholder object; otherwise the answer
echoes the input. The
call's arguments are fixed placeholder values built from the tool's JSON schema, never
text from the request: clients execute tool calls (the Codex CLI runs `exec_command` and
`shell` arguments as commands), so echoing a prompt into them would run it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from wirediff.profiles import Profile

__all__ = [
    "PLACEHOLDER_TEXT",
    "Plan",
    "chat_plan",
    "placeholder_arguments",
    "plan_for",
    "responses_plan",
]

JSONDict = dict[str, Any]

PLACEHOLDER_TEXT = "example"
"""Every string a tool call's arguments need: a plain word that runs nothing useful."""

_BY_TYPE: dict[str, Any] = {
    "string": PLACEHOLDER_TEXT,
    "integer": 1,
    "number": 1,
    "boolean": True,
    "null": None,
}


@dataclass
class Plan:
    """The answer's content, independent of the provider's shape for it."""

    kind: str  # "text" or "tool"
    text: str = ""
    reasoning: str = ""
    tool_name: str = ""
    arguments: Any = ""  # a JSON string; a dict under fault-args-object
    prompt_tokens: int = 1

    def pieces(self) -> list[str]:
        """The text split into stream deltas (word by word, spaces kept)."""
        return re.findall(r"\S+\s*", self.text) or [self.text]


def _text_of(content: Any) -> str:
    """The text of a chat/responses content value (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


def _words(text: str, n: int = 12) -> str:
    return " ".join(text.split()[:n])


def _placeholder(schema: Any) -> Any:
    """A fixed value that satisfies one JSON schema: an enum's or a union's first choice,
    an object's required properties, an empty array, else by type."""
    if not isinstance(schema, dict):
        return PLACEHOLDER_TEXT
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for union in ("anyOf", "oneOf"):
        if isinstance(schema.get(union), list) and schema[union]:
            return _placeholder(schema[union][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        return placeholder_arguments(schema)
    if kind == "array":
        return []
    return _BY_TYPE.get(str(kind), PLACEHOLDER_TEXT)


def placeholder_arguments(parameters: Any) -> JSONDict:
    """A function call's arguments: the schema's required properties, each a placeholder."""
    if not isinstance(parameters, dict):
        return {}
    props = parameters.get("properties")
    props = props if isinstance(props, dict) else {}
    required = parameters.get("required")
    names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
    return {name: _placeholder(props.get(name)) for name in names}


def plan_for(
    last_text: str,
    tool_output: str | None,
    tools: list[tuple[str, Any]],
    tool_choice: Any,
    model: str,
    reasoning: bool,
) -> Plan:
    """A tool call when tools are offered (and not refused), else an echo of the input."""
    prompt_tokens = max(len(last_text.split()), 1)
    if tool_output is not None:
        return Plan(
            "text",
            text=f"Tool said: {_words(tool_output) or 'nothing'}",
            prompt_tokens=prompt_tokens,
        )
    if tools and tool_choice != "none":
        name, params = tools[0]
        args: Any = placeholder_arguments(params)
        if model != "fault-args-object":
            args = json.dumps(args, separators=(",", ":"))
        return Plan("tool", tool_name=name, arguments=args, prompt_tokens=prompt_tokens)
    plan = Plan("text", text=f"Echo: {_words(last_text) or 'hello'}", prompt_tokens=prompt_tokens)
    if reasoning:
        plan.reasoning = f"The user wrote {len(last_text.split())} words."
    return plan


def _json_schema(fmt: Any) -> Any:
    """The schema of a `json_schema` response format (chat's `response_format.json_schema`,
    Responses' `text.format`), or None."""
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    inner: dict[str, Any] = fmt["json_schema"] if isinstance(fmt.get("json_schema"), dict) else fmt
    schema = inner.get("schema")
    return schema if isinstance(schema, dict) else None


def _structured(plan: Plan, schema: Any) -> Plan:
    """A text answer in the requested schema: its placeholder object, as JSON."""
    if schema is None or plan.kind != "text" or plan.text.startswith("Tool said:"):
        return plan
    plan.text = json.dumps(_placeholder(schema), separators=(",", ":"))
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
    )
    return _structured(plan, _json_schema(body.get("response_format")))


def responses_plan(body: JSONDict) -> Plan:
    inp = body.get("input")
    last_text, tool_output = "", None
    if isinstance(inp, str):
        last_text = inp
    elif isinstance(inp, list) and inp:
        items = [i for i in inp if isinstance(i, dict)]
        users = [i for i in items if i.get("role") == "user"]
        last_text = _text_of(users[-1].get("content")) if users else ""
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
    return _structured(plan, _json_schema(text.get("format") if isinstance(text, dict) else None))
