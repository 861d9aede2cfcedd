"""fakellm (a rule-driven mock server from PyPI) behind the capture addon, driven by the real
openai SDK. Rules are in tests/peers/fakellm.yaml.

Observed with fakellm 0.3.5 (pinned in scripts/install-peers.sh): chat completions only,
FastAPI's 404/405 for everything else, no key check, and a rule's error status that holds
for a plain answer but not for a stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from tests.conftest import Mitmdump
from tests.fixtures.records import answer, auth_of, events_of, sdk_of
from tests.peers.conftest import CLIENT_KEY, Fakellm, sdk
from wirediff._types import Record
from wirediff.record.redact import fingerprint

pytestmark = pytest.mark.peers

GREETING: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello there"}]
TOOLS: list[ChatCompletionToolParam] = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
RATE_LIMITED = {"x-test-scenario": "rate_limit"}


@pytest.fixture
def front(mitmdump: Callable[..., Mitmdump], fakellm: Fakellm) -> Mitmdump:
    return mitmdump([f"reverse:{fakellm.url}"], label="fakellm")


def chunks_of(rec: Record) -> list[dict[str, Any]]:
    *chunks, done = (e["data"] for e in events_of(rec))
    assert done == "[DONE]" and all(isinstance(c, dict) for c in chunks)
    return chunks


def test_chat_plain_stream_and_tool_call(front: Mitmdump) -> None:
    with sdk(front.url + "/v1") as client:
        out = client.chat.completions.create(model="m", messages=GREETING)
        streamed = list(client.chat.completions.create(model="m", messages=GREETING, stream=True))
        tool = list(
            client.chat.completions.create(model="m", messages=GREETING, tools=TOOLS, stream=True)
        )
    assert out.choices[0].message.content == "Hi there from fakellm."
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == "Hi there from fakellm."
    assert tool[-1].choices[0].finish_reason == "tool_calls"

    plain, stream, calls = front.records(3)
    for rec, is_stream in ((plain, False), (stream, True), (calls, True)):
        t = rec["tags"]
        assert (t["family"], t["endpoint"], t["stream"], t["model"]) == (
            "chat.completions", "/v1/chat/completions", is_stream, "m",
        )  # fmt: skip
        assert sdk_of(rec)["lang"] == "python" and sdk_of(rec)["version"] == openai.__version__
        assert auth_of(rec)["fingerprint"] == fingerprint(CLIENT_KEY)  # sent, never checked
        assert rec["label"] == "fakellm" and answer(rec)["status"] == 200
    assert answer(plain)["body"]["choices"][0]["message"] == {
        "role": "assistant",
        "content": "Hi there from fakellm.",
    }
    # Streams: the first delta has no `content` (OpenAI's is ""), chunks carry no `usage`
    # key at all, and words arrive one per chunk.
    chunks = chunks_of(stream)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert not any("usage" in c for c in chunks)
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]] == [
        "Hi",
        " there",
        " from",
        " fakellm.",
    ]
    # A tool call: the id and name first, then the arguments in fragments.
    deltas = [c["choices"][0]["delta"] for c in chunks_of(calls)[1:-1]]
    head, *rest = (d["tool_calls"][0] for d in deltas)
    assert head["function"] == {"name": "get_weather", "arguments": ""} and head["id"]
    assert len(rest) > 1 and json.loads("".join(r["function"]["arguments"] for r in rest)) == {
        "city": "Paris"
    }


def test_a_rule_error_holds_for_plain_answers_but_not_for_streams(front: Mitmdump) -> None:
    with sdk(front.url + "/v1") as client:
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="m", messages=GREETING, extra_headers=RATE_LIMITED)
        streamed = list(
            client.chat.completions.create(
                model="m", messages=GREETING, stream=True, extra_headers=RATE_LIMITED
            )
        )
    plain, stream = front.records(2)
    # The error object has no `param` (OpenAI's always has one, possibly null).
    assert answer(plain)["status"] == 429
    assert answer(plain)["body"] == {
        "error": {"message": "Rate limit exceeded (mock)", "type": "mock_error", "code": None}
    }
    # Streamed, the same rule answers 200 with the fallback echo text: no error at all.
    assert answer(stream)["status"] == 200
    text = "".join(c.choices[0].delta.content or "" for c in streamed)
    assert text.startswith("[mock response for m, fingerprint ")
    assert stream["tags"]["soft_error"] is False


def test_unimplemented_endpoints_are_fastapi_404_and_405(front: Mitmdump) -> None:
    with sdk(front.url + "/v1") as client:
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model="m", input="hello")
        with pytest.raises(openai.NotFoundError):
            client.models.list()
        with pytest.raises(openai.APIStatusError) as wrong_method:
            client.get("/chat/completions", cast_to=object)
    assert wrong_method.value.status_code == 405

    responses, models, get = front.records(3)
    assert (responses["tags"]["family"], responses["tags"]["endpoint"]) == (
        "responses", "/v1/responses",
    )  # fmt: skip
    assert (models["tags"]["family"], models["request"]["method"]) == ("models", "GET")
    for rec in (responses, models):
        assert (answer(rec)["status"], answer(rec)["body"]) == (
            404,
            {"detail": "Not Found"},
        )
    assert (answer(get)["status"], answer(get)["body"]) == (
        405, {"detail": "Method Not Allowed"},
    )  # fmt: skip
    assert ["allow", "POST"] in answer(get)["headers"]
