"""llama-cpp-python's OpenAI-compatible server (the real one, from PyPI, on a tiny model
written at test time) behind `mitmdump -s addons/capture.py`, driven by the real openai SDK:
what it puts on the wire, and what wirediff diagnoses.

Observed with llama-cpp-python 0.3.36 (pinned in scripts/install-peers.sh), started with
`--n_ctx 2048`: a FastAPI app on uvicorn that serves chat completions, completions, models
and (with `--embedding`) embeddings; no Responses API, no WebSocket; any model name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from websockets.exceptions import InvalidStatus

from tests.conftest import NOT_PROXIED, Mitmdump
from tests.fixtures.analysed import diagnose
from tests.fixtures.records import answer, events_of
from tests.peers.conftest import LLAMA_CTX, LLAMA_KEY, TINY_ANSWER, Llama, sdk
from wirediff._types import Record
from wirediff.record.tags import header_get

pytestmark = pytest.mark.peers

HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]
PROMPT_TOKENS = 31  # "Hi" (2 bytes, one token each) in the ChatML template
TOO_LONG: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "a" * LLAMA_CTX}
]  # LLAMA_CTX + 29 tokens


@pytest.fixture
def front(mitmdump: Callable[..., Mitmdump], llama: Llama) -> Mitmdump:
    return mitmdump([f"reverse:{llama.url}"], label="llama")


def header(rec: Record, name: str) -> str | None:
    return header_get(answer(rec)["headers"], name)


def by_code(records: list[Record]) -> dict[str, dict[Hashable, Any]]:
    return {str(r["code"]): r for r in diagnose(records).to_dict("records")}


def test_chat_completions_and_models(front: Mitmdump, llama: Llama) -> None:
    with sdk(front.url + "/v1") as client:
        out = client.chat.completions.create(model="tiny", messages=HI)
        chunks = list(
            client.chat.completions.create(
                model="tiny", messages=HI, stream=True, stream_options={"include_usage": True}
            )
        )
        text = client.completions.create(model="tiny", prompt="Hi")
        models = client.models.list()
    assert out.choices[0].message.content == TINY_ANSWER and out.model == "tiny"
    assert out.choices[0].finish_reason == "stop" and out.usage is not None
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (PROMPT_TOKENS, 3)
    # a role chunk, a chunk per token, the finish chunk, and no usage chunk although asked
    assert [c.choices[0].delta.content for c in chunks] == [None, "Hello", " tiny", " world!", None]
    assert (
        chunks[0].choices[0].delta.role == "assistant"
        and chunks[-1].choices[0].finish_reason == "stop"
    )
    assert all(c.usage is None for c in chunks)
    assert text.choices[0].text == TINY_ANSWER and text.object == "text_completion"
    assert [m.id for m in models.data] == [str(llama.model_path)]  # the --model argument

    plain, stream, completion, listing = front.records(4)
    for rec in (plain, stream, completion, listing):
        assert answer(rec)["status"] == 200 and header(rec, "server") == "uvicorn"
        assert re.fullmatch(r"[0-9a-f]{32}", header(rec, "x-request-id") or "")
    assert header(stream, "content-type") == "text/event-stream; charset=utf-8"
    assert header(stream, "x-accel-buffering") == "no"
    assert [e["event"] for e in events_of(stream)] == [None] * 6  # no `event:` lines
    assert events_of(stream)[-1]["data"] == "[DONE]"
    assert '"object": "chat.completion.chunk"' in (answer(stream)["text"] or "")  # json.dumps


def test_what_it_does_not_serve(front: Mitmdump) -> None:
    """`/v1/responses`: FastAPI's 404; a GET on chat completions: 405 with `allow: POST`;
    the Responses WebSocket upgrade: the same 404 (uvicorn without a WebSocket library)."""
    with sdk(front.url + "/v1") as client:
        with pytest.raises(openai.NotFoundError) as missing:
            client.responses.create(model="tiny", input="Hi")
        with pytest.raises(openai.APIStatusError) as wrong_method:
            client.get("/chat/completions", cast_to=object)
        with pytest.raises(InvalidStatus) as upgrade:
            client.responses.connect(websocket_connection_options=NOT_PROXIED).enter()
    assert missing.value.body == {"detail": "Not Found"}
    assert wrong_method.value.status_code == 405
    assert upgrade.value.response.status_code == 404

    responses, get_chat, ws = front.records(3)
    assert (answer(responses)["status"], answer(responses)["body"]) == (
        404,
        {"detail": "Not Found"},
    )
    assert header(get_chat, "allow") == "POST"
    assert answer(get_chat)["body"] == {"detail": "Method Not Allowed"}
    assert ws["request"]["method"] == "GET" and answer(ws)["status"] == 404

    assert set(by_code([responses])) == {"endpoint_not_implemented"}
    row = by_code([get_chat])["method_not_allowed"]
    assert "send POST /v1/chat/completions" in row["remedy"]
    row = by_code([ws])["websocket_not_supported"]
    assert set(by_code([ws])) == {"websocket_not_supported"}
    # uvicorn and FastAPI's body are a framework's marks: no product is named
    assert row["provider"] == "unknown" and "LM Studio" not in row["remedy"]
    assert any("server: uvicorn" in e and "names no product" in e for e in row["evidence"])


def test_a_prompt_over_the_context(front: Mitmdump) -> None:
    """A 400 `context_length_exceeded` without streaming; with streaming, a 200 SSE stream
    with no event at all (the error goes only to the server's log)."""
    with sdk(front.url + "/v1") as client:
        with pytest.raises(openai.BadRequestError) as rejected:
            client.chat.completions.create(model="tiny", messages=TOO_LONG)
        streamed = list(
            client.chat.completions.create(model="tiny", messages=TOO_LONG, stream=True)
        )
    assert streamed == []  # the SDK yields nothing and raises nothing
    err = rejected.value.body
    assert isinstance(err, dict)
    assert (err["type"], err["param"], err["code"]) == (
        "invalid_request_error",
        "messages",
        "context_length_exceeded",
    )
    assert err["message"].startswith(f"This model's maximum context length is {LLAMA_CTX} tokens.")

    plain, stream = front.records(2)
    assert answer(stream)["status"] == 200 and answer(stream)["events"] == []
    assert answer(stream)["complete"] is True

    row = by_code([plain])["request_rejected"]
    assert set(by_code([plain])) == {"request_rejected"}
    assert "the context length is exceeded" in row["summary"] and "set max_tokens" in row["remedy"]
    assert "(the server says: Please reduce the length of the messages" in row["remedy"]
    row = by_code([stream])["stream_truncated"]
    assert set(by_code([stream])) == {"stream_truncated"}
    assert "no [DONE] after 0 events" in row["summary"] and "server's log" in row["remedy"]


def test_a_completion_prompt_over_the_context(front: Mitmdump) -> None:
    """`/v1/completions` words it its own way (`… however you requested 4112 tokens (4096 in
    your prompt; 16 for the completion)`), under the same code: context_length_exceeded."""
    with sdk(front.url + "/v1") as client, pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="a " * LLAMA_CTX)
    (rec,) = front.records(1)
    err = answer(rec)["body"]["error"]
    assert err["code"] == "context_length_exceeded" and "in your prompt" in err["message"]
    row = by_code([rec])["request_rejected"]
    assert "the context length is exceeded" in row["summary"] and "set max_tokens" in row["remedy"]


def test_embeddings_without_the_flag_is_a_server_error(front: Mitmdump) -> None:
    with sdk(front.url + "/v1") as client, pytest.raises(openai.InternalServerError):
        client.embeddings.create(model="tiny", input="Hi")
    (rec,) = front.records(1)
    message = "Llama model must be created with embedding=True to call this method"
    assert answer(rec)["body"] == {"error": {
        "message": message, "type": "internal_server_error", "param": None, "code": None}}  # fmt: skip
    rows = by_code([rec])
    assert set(rows) == {"server_error"}
    assert message in rows["server_error"]["summary"]
    assert rows["server_error"]["remedy"].endswith(f"(the server says: {message})")


def test_a_wrong_or_missing_key(mitmdump: Callable[..., Mitmdump], llama: Llama) -> None:
    """With `--api_key`: FastAPI's 401 `{"detail": "Invalid API key"}`, no
    `WWW-Authenticate`, for a missing key and for a wrong one alike."""
    front = mitmdump([f"reverse:{llama.keyed.url}"], label="llama")
    with (
        sdk(front.url + "/v1", api_key="sk-not-this-one") as client,
        pytest.raises(openai.AuthenticationError),
    ):
        client.chat.completions.create(model="tiny", messages=HI)
    with httpx.Client(trust_env=False) as http:
        bare = http.post(front.url + "/v1/chat/completions", json={"model": "tiny", "messages": HI})
    with sdk(front.url + "/v1", api_key=LLAMA_KEY) as client:
        assert client.chat.completions.create(model="tiny", messages=HI).choices[0].message.content
    assert bare.status_code == 401
    wrong, missing, right = front.records(3)
    for rec in (wrong, missing):
        assert answer(rec)["body"] == {"detail": "Invalid API key"}
        assert header(rec, "www-authenticate") is None
    assert set(by_code([wrong])) == {"auth_rejected"}
    assert set(by_code([missing])) == {"auth_missing"}
    assert answer(right)["status"] == 200
    assert LLAMA_KEY not in json.dumps([wrong, missing, right])


def test_any_model_name_is_served(front: Mitmdump) -> None:
    """One model loaded: the name is not checked, and echoed back."""
    with sdk(front.url + "/v1") as client:
        out = client.chat.completions.create(model="gpt-4o-does-not-exist", messages=HI)
    assert out.model == "gpt-4o-does-not-exist" and out.choices[0].message.content == TINY_ANSWER
    assert diagnose(front.records(1)).empty
