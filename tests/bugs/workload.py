"""The real openai SDK traffic of the bug-report tier: one call per step, each one an app
makes, tagged with its step's name (header `x-wirediff-step`) so a case finds its exchange.

Scenario models (`wirediff.backends.answers.SCENARIO_MODELS`) ask every stand-in for the
same kind of answer: parallel tool calls, a text and a call, an over-long prompt.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import openai
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam
from openai.types.responses import FunctionToolParam
from pydantic import BaseModel

STEP_HEADER = "x-wirediff-step"
MODEL = "gpt-4o-mini"
PROMPT: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the weather in Paris?"}
]


def function_tool(name: str, prop: str) -> ChatCompletionFunctionToolParam:
    """A chat function tool with one required string argument `prop`."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"Look up {prop}",
            "parameters": {
                "type": "object",
                "properties": {prop: {"type": "string"}},
                "required": [prop],
            },
        },
    }


WEATHER = function_tool("get_weather", "city")
TIME = function_tool("get_time", "zone")
RESPONSES_WEATHER: FunctionToolParam = {
    "type": "function",
    "name": WEATHER["function"]["name"],
    "parameters": WEATHER["function"].get("parameters"),
    "strict": False,
}


class Day(BaseModel):
    date: str
    high: float


class Forecast(BaseModel):
    """Nested models, an enum and an optional: `$defs`, `$ref`, `anyOf` in the schema."""

    city: str
    unit: Literal["celsius", "fahrenheit"]
    days: list[Day]
    note: str | None


def _instructor_prompt() -> str:
    """The system prompt of instructor's JSON mode: the model's schema, in words."""
    schema = json.dumps(Forecast.model_json_schema(), indent=2)
    return (
        "As a genius expert, your task is to understand the content and provide the parsed "
        f"objects in json that match the following json_schema:\n\n{schema}\n\n"
        "Make sure to return an instance of the JSON, not the schema itself"
    )


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


def steps(client: openai.OpenAI) -> dict[str, Callable[[], Any]]:
    """Each step's call, by name (the order is the capture's)."""
    chat = client.chat.completions

    def tagged(step: str) -> dict[str, Any]:
        return {"extra_headers": {STEP_HEADER: step}}

    def responses_chain() -> None:
        first = client.responses.create(model=MODEL, input="Hi", **tagged("responses-turn"))
        with client.responses.stream(
            model=MODEL,
            input="And again?",
            previous_response_id=first.id,
            **tagged("responses-stream-continued"),
        ) as stream:
            _drain(stream)

    def chat_streamed(step: str, **kw: Any) -> None:
        with chat.stream(model=kw.pop("model", MODEL), messages=PROMPT, **kw, **tagged(step)) as s:
            _drain(s)

    return {
        "chat": lambda: chat.create(model=MODEL, messages=PROMPT, **tagged("chat")),
        "chat-stream": lambda: chat_streamed("chat-stream", stream_options={"include_usage": True}),
        "chat-tool": lambda: chat.create(
            model=MODEL, messages=PROMPT, tools=[WEATHER], **tagged("chat-tool")
        ),
        "chat-stream-tools": lambda: chat_streamed(
            "chat-stream-tools", model="scenario-parallel-tools", tools=[WEATHER, TIME]
        ),
        "chat-stream-overflow": lambda: _drain(
            chat.create(
                model="scenario-context-overflow",
                messages=PROMPT,
                stream=True,
                **tagged("chat-stream-overflow"),
            )
        ),
        "chat-overflow": lambda: chat.create(
            model="scenario-context-overflow", messages=PROMPT, **tagged("chat-overflow")
        ),
        "chat-unknown-model": lambda: chat.create(
            model="no-such-model", messages=PROMPT, **tagged("chat-unknown-model")
        ),
        "chat-structured": lambda: chat.parse(
            model=MODEL, messages=PROMPT, response_format=Forecast, **tagged("chat-structured")
        ),
        "chat-json-mode": lambda: chat.create(
            model=MODEL,
            messages=[{"role": "system", "content": _instructor_prompt()}, *PROMPT],
            response_format={"type": "json_object"},
            **tagged("chat-json-mode"),
        ),
        "responses-stream": lambda: _drain(
            client.responses.create(
                model=MODEL, input="Hi", stream=True, **tagged("responses-stream")
            )
        ),
        "responses-stream-text-tool": lambda: _drain(
            client.responses.create(
                model="scenario-text-and-tool",
                input="Hi",
                tools=[RESPONSES_WEATHER],
                stream=True,
                **tagged("responses-stream-text-tool"),
            )
        ),
        "responses-chain": responses_chain,
        "responses-structured": lambda: client.responses.parse(
            model=MODEL, input="Hi", text_format=Forecast, **tagged("responses-structured")
        ),
    }


def run_workload(base_url: str) -> dict[str, str]:
    """Every step against `base_url` (…/v1): what each raised, if it did (the baseline's
    errors are the over-long prompt's and the unknown model's)."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-bugs-tier", max_retries=0)
    raised: dict[str, str] = {}
    with client:
        for name, call in steps(client).items():
            try:
                call()
            except openai.APIError as e:
                raised[name] = type(e).__name__
    return raised
