"""The stand-in's answer plan: tool-call arguments are placeholders from the schema."""

from __future__ import annotations

import json
from typing import Any

import pytest

from wirediff.backends.answers import PLACEHOLDER_TEXT, placeholder_arguments, plan_for


@pytest.mark.parametrize(
    ("schema", "want"),
    [
        (
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            {"city": PLACEHOLDER_TEXT},
        ),
        (
            {
                "type": "object",
                "properties": {
                    "n": {"type": "integer"},
                    "x": {"type": "number"},
                    "ok": {"type": "boolean"},
                },
                "required": ["n", "x", "ok"],
            },
            {"n": 1, "x": 1, "ok": True},
        ),
        (
            {
                "type": "object",
                "properties": {"unit": {"type": "string", "enum": ["celsius", "kelvin"]}},
                "required": ["unit"],
            },
            {"unit": "celsius"},
        ),
        (
            {
                "type": "object",
                "properties": {"argv": {"type": "array", "items": {"type": "string"}}},
                "required": ["argv"],
            },
            {"argv": []},
        ),
        (
            {
                "type": "object",
                "properties": {
                    "opt": {"type": ["null", "string"]},
                    "any": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                },
                "required": ["opt", "any"],
            },
            {"opt": PLACEHOLDER_TEXT, "any": 1},
        ),
        (
            {
                "type": "object",
                "required": ["where"],
                "properties": {
                    "where": {
                        "type": "object",
                        "required": ["lat"],
                        "properties": {"lat": {"type": "number"}, "label": {"type": "string"}},
                    }
                },
            },
            {"where": {"lat": 1}},
        ),
        ({"type": "object", "properties": {"city": {"type": "string"}}}, {}),  # nothing required
        (
            {"type": "object", "required": ["untyped"], "properties": {}},
            {"untyped": PLACEHOLDER_TEXT},
        ),
        (None, {}),
        ("not a schema", {}),
    ],
)
def test_placeholder_arguments_follow_the_schema(schema: Any, want: dict[str, Any]) -> None:
    assert placeholder_arguments(schema) == want


def test_a_tool_call_never_carries_the_prompt() -> None:
    prompt = "rm -rf / --no-preserve-root"
    params = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}
    plan = plan_for(prompt, None, [("exec_command", params)], "auto", "gpt-4o-mini", False)
    assert plan.kind == "tool" and plan.tool_name == "exec_command"
    assert json.loads(plan.arguments) == {"cmd": PLACEHOLDER_TEXT}
