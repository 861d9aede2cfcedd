"""What a stand-in answers, decided from the request alone, so output is repeatable.

A request with tools gets one function call; otherwise the answer echoes the input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from wirediff.profiles import Profile

__all__ = [
    "Plan",
    "chat_plan",
    "plan_for",
    "responses_plan",
]

JSONDict = dict[str, Any]


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


def _tool_arguments(parameters: Any, text: str) -> dict[str, Any]:
    """Deterministic arguments for a function's JSON schema: required properties filled by type."""
    props = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
    required = parameters.get("required") if isinstance(parameters, dict) else None
    names = list(required) if isinstance(required, list) and required else list(props)[:1]
    by_type: dict[str, Any] = {
        "integer": 1,
        "number": 1,
        "boolean": True,
        "array": [],
        "object": {},
    }
    args: dict[str, Any] = {}
    for name in names:
        kind = props.get(name, {}).get("type", "string") if isinstance(props, dict) else "string"
        args[name] = by_type.get(kind, _words(text, 5) or "wirediff")
    return args


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
        args: Any = _tool_arguments(params, last_text)
        if model != "fault-args-object":
            args = json.dumps(args, separators=(",", ":"))
        return Plan("tool", tool_name=name, arguments=args, prompt_tokens=prompt_tokens)
    plan = Plan("text", text=f"Echo: {_words(last_text) or 'hello'}", prompt_tokens=prompt_tokens)
    if reasoning:
        plan.reasoning = f"The user wrote {len(last_text.split())} words."
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
    return plan_for(
        _text_of(user[-1].get("content")) if user else "",
        tool_output,
        tools,
        body.get("tool_choice"),
        str(body.get("model")),
        reasoning,
    )


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
    return plan_for(
        last_text, tool_output, tools, body.get("tool_choice"), str(body.get("model")), False
    )
