"""The stand-in's answer plan: tool-call arguments and structured output are placeholders
its schema accepts."""

from __future__ import annotations

import datetime
import json
from typing import Annotated, Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from wirediff.backends.answers import (
    PLACEHOLDER_TEXT,
    SCENARIO_MODELS,
    chat_plan,
    placeholder,
    placeholder_arguments,
    plan_for,
    responses_plan,
)
from wirediff.profiles import profile


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
    (call,) = plan.calls
    assert plan.kind == "tool" and call.name == "exec_command"
    assert json.loads(call.arguments) == {"cmd": PLACEHOLDER_TEXT}


class Day(BaseModel):
    date: datetime.date
    high: float = Field(ge=-90, le=60)


class Forecast(BaseModel):
    """What structured-output clients send: `$defs`, `$ref`, enums, optionals, bounds."""

    city: str = Field(min_length=12)
    unit: Literal["celsius", "fahrenheit"]
    days: list[Day] = Field(min_length=2)
    note: str | None
    at: datetime.datetime
    mood: Annotated[int, Field(gt=3)]


STRICT = openai.lib._pydantic.to_strict_json_schema(Forecast)
SCHEMAS = [
    Forecast.model_json_schema(),
    STRICT,
    {"type": "object"},
    {"type": "object", "properties": {}},
]


@pytest.mark.parametrize(
    "schema", SCHEMAS, ids=["pydantic", "strict", "any object", "no properties"]
)
def test_a_placeholder_is_valid_for_the_schemas_clients_send(schema: dict[str, Any]) -> None:
    jsonschema.validate(placeholder(schema), schema)


def test_json_mode_answers_the_schema_in_the_prompt() -> None:
    """instructor's JSON mode: `json_object`, and the model's schema in the system prompt."""
    prompt = f"Answer in json that matches the following json_schema:\n\n{json.dumps(STRICT, indent=2)}\n\nok"
    user = {"role": "user", "content": "hi"}
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": prompt}, user],
        "response_format": {"type": "json_object"},
    }
    plan = chat_plan(body, profile("openai"))
    Forecast.model_validate_json(plan.text)
    assert json.loads(chat_plan({**body, "messages": [user]}, profile("openai")).text) == {}


def test_responses_text_format_gets_its_schema() -> None:
    body = {
        "model": "gpt-4o-mini",
        "input": "hi",
        "text": {"format": {"type": "json_schema", "name": "f", "schema": STRICT, "strict": True}},
    }
    Forecast.model_validate_json(responses_plan(body).text)


def test_scenario_models_ask_for_parallel_calls_or_a_text_and_a_call() -> None:
    tools = [("a", {"type": "object"}), ("b", {"type": "object"})]
    parallel = plan_for("hi", None, tools, "auto", "scenario-parallel-tools", False)
    assert parallel.kind == "tool" and [c.name for c in parallel.calls] == ["a", "b"]
    both = plan_for("hi", None, tools, "auto", "scenario-text-and-tool", False)
    assert both.kind == "text+tool" and both.text and [c.name for c in both.calls] == ["a"]
    assert set(SCENARIO_MODELS) >= {"scenario-parallel-tools", "scenario-text-and-tool"}
