"""What the real openai SDK makes of a server, feature by feature of the probe: the premises
its matrix stands on, checked apart from the probe's own grading.

For each feature the SDK makes the call an app makes for it (`client.chat.completions.parse`,
the stream helpers, `client.responses.connect`, …) and says whether the app got what it
asked for (`Outcome.ok`), or what the server answered an error feature's request with.
`disagreement` then holds the probe's status against that: `pass` and `deviation` where the
app got what it asked for, `breaking` and `unsupported` where it did not, and for the error
features the status and shape the SDK saw.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from pydantic import BaseModel

from tests.conftest import NOT_PROXIED

__all__ = ["Outcome", "disagreement", "sdk_outcomes"]

ASK: Any = [{"role": "user", "content": "Say hi"}]
ERRORS = {
    "chat.bad_parameter": 400,
    "errors.unknown_route": 404,
    "errors.wrong_method": 405,
    "errors.bad_key": 401,
}
"""The error features and the status OpenAI answers each with."""
ACCEPTED_BREAKS = {"errors.unknown_route", "errors.wrong_method"}
"""Error features where a success breaks the client (it reads an answer that is not there)."""
TERMINAL = ("response.completed", "response.failed", "response.incomplete", "error")


class City(BaseModel):
    name: str
    country: str
    population: int


@dataclass
class Outcome:
    ok: bool
    """The app got what it asked for (for an error feature: the SDK raised an API error)."""
    said: str
    """What happened, in a few words."""
    status: int | None = None
    """The status of the API error the SDK raised."""
    shaped: bool = False
    """That error's body is OpenAI's error object (`error.message`)."""
    calls: int = 0
    """Tool calls in the answer."""


def _tool(name: str) -> Any:
    parameters = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def _flat(tool: Any) -> Any:
    """A chat tool as the Responses API takes it."""
    return {"type": "function", **tool["function"]}


WEATHER, CLOCK = _tool("get_weather"), _tool("get_time")
NAMED: Any = {"type": "function", "function": {"name": "get_weather"}}


def _text(got: str | None) -> Outcome:
    return Outcome(bool(got), f"text {got!r:.40}")


def _calls(n: int, want: int = 1) -> Outcome:
    return Outcome(n >= want, f"{n} tool call{'s' if n != 1 else ''}", calls=n)


def _chat_calls(c: openai.OpenAI, model: str, tools: Any, **kw: Any) -> Outcome:
    answer = c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=tools,
        **kw,
    )
    return _calls(len(answer.choices[0].message.tool_calls or []))


def _streamed_calls(c: openai.OpenAI, model: str) -> Outcome:
    with c.chat.completions.stream(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER],
        tool_choice=NAMED,
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    args = [json.loads(t.function.arguments) for t in calls if t.type == "function"]
    return Outcome(
        bool(calls), f"{len(calls)} streamed tool calls, arguments {args}", calls=len(calls)
    )


def _usage(c: openai.OpenAI, model: str) -> Outcome:
    chunks = list(
        c.chat.completions.create(
            model=model, messages=ASK, stream=True, stream_options={"include_usage": True}
        )
    )
    usage = [ch.usage for ch in chunks if ch.usage is not None]
    return Outcome(bool(usage), f"{len(usage)} usage chunk(s) in {len(chunks)}")


def _chat_stream(c: openai.OpenAI, model: str) -> Outcome:
    text = "".join(
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(model=model, messages=ASK, stream=True)
        if ch.choices
    )
    return _text(text)


def _chat_parse(c: openai.OpenAI, model: str) -> Outcome:
    parsed = c.chat.completions.parse(
        model=model,
        messages=[{"role": "user", "content": "Describe Paris as a city record."}],
        response_format=City,
    )
    return Outcome(parsed.choices[0].message.parsed is not None, "parsed")


def _responses_text(c: openai.OpenAI, model: str) -> Outcome:
    return _text(c.responses.create(model=model, input="Say hi").output_text)


def _responses_stream(c: openai.OpenAI, model: str) -> Outcome:
    with c.responses.stream(model=model, input="Say hi") as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    return Outcome(bool(final.output_text), f"{len(kinds)} events, then {final.output_text!r:.30}")


def _responses_calls(c: openai.OpenAI, model: str) -> Outcome:
    answer = c.responses.create(
        model=model, input="What is the weather in Paris?", tools=[_flat(WEATHER)]
    )
    return _calls(sum(1 for item in answer.output if item.type == "function_call"))


def _round_trip(c: openai.OpenAI, model: str) -> Outcome:
    """A function call, its output sent back by `call_id`, and the answer to that."""
    ask: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.responses.create(model=model, input=ask, tools=[_flat(WEATHER)])
    calls = [item for item in first.output if item.type == "function_call"]
    if not calls:
        return Outcome(False, "no function call to answer")
    done: Any = [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}]
    again: Any = [*ask, *first.output, *done]
    second = c.responses.create(model=model, input=again, tools=[_flat(WEATHER)])
    return _text(second.output_text)


def _previous(c: openai.OpenAI, model: str) -> Outcome:
    first = c.responses.create(model=model, input="My name is Ada. Say hi.")
    second = c.responses.create(
        model=model, input="What is my name?", previous_response_id=first.id
    )
    return _text(second.output_text)


def _responses_parse(c: openai.OpenAI, model: str) -> Outcome:
    city = c.responses.parse(
        model=model, input="Describe Paris as a city record.", text_format=City
    )
    return Outcome(city.output_parsed is not None, "parsed")


def _websocket(c: openai.OpenAI, model: str) -> Outcome:
    with c.responses.connect(websocket_connection_options=NOT_PROXIED) as conn:
        conn.response.create(model=model, input="Say hi")
        kinds = []
        for event in conn:
            kinds.append(event.type)
            if event.type in TERMINAL:
                break
    return Outcome(kinds[-1:] == ["response.completed"], f"events {kinds}")


def _embeddings(c: openai.OpenAI, model: str) -> Outcome:
    vectors = c.embeddings.create(model=model, input="Say hi")
    return Outcome(bool(vectors.data and vectors.data[0].embedding), "a vector")


CALLS: dict[str, Callable[[openai.OpenAI, str], Outcome]] = {
    "models": lambda c, m: Outcome(bool(c.models.list().data), "a list"),
    "chat.text": lambda c, m: _text(
        c.chat.completions.create(model=m, messages=ASK).choices[0].message.content
    ),
    "chat.stream": _chat_stream,
    "chat.usage_chunk": _usage,
    "chat.tools": lambda c, m: _chat_calls(c, m, [WEATHER], tool_choice=NAMED),
    "chat.parallel_tools": lambda c, m: _chat_calls(
        c, m, [WEATHER, CLOCK], tool_choice="required", parallel_tool_calls=True
    ),
    "chat.streamed_tool_calls": _streamed_calls,
    "chat.structured_output": _chat_parse,
    "chat.bad_parameter": lambda c, m: _text(
        c.chat.completions.create(model=m, messages=ASK, temperature=5).choices[0].message.content
    ),
    "responses.text": _responses_text,
    "responses.stream": _responses_stream,
    "responses.tools": _responses_calls,
    "responses.function_call_round_trip": _round_trip,
    "responses.previous_response_id": _previous,
    "responses.structured_output": _responses_parse,
    "responses.stream_grammar": _responses_stream,
    "responses.websocket": _websocket,
    "errors.unknown_route": lambda c, m: Outcome(
        True, str(c.get("/wirediff/no-such-route", cast_to=httpx.Response).status_code)
    ),
    "errors.wrong_method": lambda c, m: Outcome(
        True, str(c.get("/chat/completions", cast_to=httpx.Response).status_code)
    ),
}


def _shaped(e: openai.APIStatusError) -> bool:
    body = e.body
    return isinstance(body, dict) and isinstance(body.get("message"), str)


def sdk_outcomes(
    base_url: str, model: str, key: str = "x", embedding_model: str | None = None
) -> dict[str, Outcome]:
    """Each feature's call made with the real SDK against `base_url` (`…/v1`)."""
    http = openai.DefaultHttpxClient(trust_env=False)
    out: dict[str, Outcome] = {}
    with openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, http_client=http) as c:
        bad = openai.OpenAI(base_url=base_url, api_key="sk-wirediff-probe-not-a-valid-key",
                            max_retries=0, http_client=openai.DefaultHttpxClient(trust_env=False))  # fmt: skip
        calls: dict[str, Callable[[openai.OpenAI, str], Outcome]] = {
            **CALLS,
            "embeddings": lambda c, m: _embeddings(c, embedding_model or m),
            "errors.bad_key": lambda c, m: Outcome(True, f"{len(bad.models.list().data)} models"),
        }
        with bad:
            for feature, call in calls.items():
                try:
                    out[feature] = call(c, model)
                except openai.APIStatusError as e:
                    out[feature] = Outcome(
                        False,
                        f"raised {type(e).__name__} {e.status_code}",
                        e.status_code,
                        _shaped(e),
                    )
                except Exception as e:  # what the SDK raises on an answer it cannot read
                    out[feature] = Outcome(False, f"raised {type(e).__name__}: {e}"[:200])
    for feature in ERRORS:  # the SDK raising is what these features want
        o = out[feature]
        out[feature] = Outcome(o.status is not None, o.said, o.status, o.shaped)
    return out


def disagreement(feature: str, status: str, o: Outcome) -> str | None:
    """Why the probe's `status` does not follow from what the SDK saw (None: it does)."""
    if feature in ERRORS:
        want = ERRORS[feature]
        if not o.ok:  # the server accepted the request
            expected = "breaking" if feature in ACCEPTED_BREAKS else "deviation"
        elif o.status == want and o.shaped:
            expected = "pass"
        else:
            expected = "deviation"
        return None if status == expected else f"SDK: {o.said}, so {expected}"
    if feature == "chat.parallel_tools" and o.ok:
        expected = "pass" if o.calls >= 2 else "deviation"
        return None if status == expected else f"SDK: {o.said}, so {expected}"
    if (status in ("pass", "deviation")) != o.ok:
        return f"SDK: {o.said} ({'works' if o.ok else 'fails'})"
    return None
