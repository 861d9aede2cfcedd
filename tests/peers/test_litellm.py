"""LiteLLM proxy (the real one, from PyPI) behind `mitmdump -s addons/capture.py`, driven by
the real openai SDK: what it puts on the wire, and that the records say so.

Observed with litellm 1.108.7 (pinned in scripts/install-peers.sh); each assertion below
is what that version really does, not what OpenAI does.
"""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import Mitmdump
from tests.fixtures.records import answer, events_of, sdk_of
from tests.peers.conftest import CLIENT_KEY, UPSTREAM_KEY, LiteLLM, sdk
from wirediff._types import Record
from wirediff.record.redact import fingerprint
from wirediff.record.tags import header_get

pytestmark = pytest.mark.peers

MOCK_TEXT = "Hello from the LiteLLM mock."  # mock_response of model mock-chat (litellm.yaml)
MSG: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def front(mitmdump: Callable[..., Mitmdump], litellm: LiteLLM) -> Mitmdump:
    """A capturing reverse proxy in front of the session's LiteLLM."""
    return mitmdump([f"reverse:{litellm.url}"], label="litellm")


def assert_tags(
    rec: Record, family: str, endpoint: str, stream: bool, model: str | None, key: str = CLIENT_KEY
) -> None:
    t = rec["tags"]
    assert (t["family"], t["endpoint"], t["stream"], t["model"]) == (
        family,
        endpoint,
        stream,
        model,
    )
    assert sdk_of(rec)["lang"] == "python" and sdk_of(rec)["version"] == openai.__version__
    assert sdk_of(rec)["async"] is False and t["retry"] == 0
    assert t["auth"] == {
        "header": "authorization",
        "scheme": "Bearer",
        "fingerprint": fingerprint(key),
        "forwarded": True,
    }
    assert rec["label"] == "litellm" and (rec["listener"] or "").startswith(
        "reverse:http://127.0.0.1:"
    )


def header(rec: Record, name: str) -> str | None:
    return header_get(answer(rec)["headers"], name)


def test_mock_chat_completions(front: Mitmdump, litellm: LiteLLM) -> None:
    with sdk(front.url + "/v1") as client:
        out = client.chat.completions.create(model="mock-chat", messages=MSG)
        chunks = list(client.chat.completions.create(model="mock-chat", messages=MSG, stream=True))
    assert out.choices[0].message.content == MOCK_TEXT
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == MOCK_TEXT

    plain, streamed = front.records(2)
    assert_tags(plain, "chat.completions", "/v1/chat/completions", False, "mock-chat")
    assert answer(plain)["status"] == 200 and plain["error"] is None
    assert header(plain, "content-type") == "application/json"
    assert header(plain, "x-litellm-version") == litellm.version
    body = answer(plain)["body"]
    assert body["object"] == "chat.completion" and body["model"] == "mock-chat"
    assert body["choices"][0]["message"] == {"content": MOCK_TEXT, "role": "assistant"}

    assert_tags(streamed, "chat.completions", "/v1/chat/completions", True, "mock-chat")
    res = answer(streamed)
    assert res["status"] == 200 and res["body"] is None
    assert header(streamed, "content-type") == "text/event-stream; charset=utf-8"
    assert header(streamed, "x-accel-buffering") == "no"  # so nginx in front would not buffer
    events = [e["data"] for e in events_of(streamed)]
    assert events[-1] == "[DONE]" and all(isinstance(d, dict) for d in events[:-1])
    # Unlike OpenAI: the first delta already carries text (OpenAI's is `content: ""`), the
    # mock text comes in 3-character pieces, and chunks have no `usage` key at all.
    first, last = events[0]["choices"][0], events[-2]["choices"][0]
    assert first["delta"] == {"role": "assistant", "content": MOCK_TEXT[:3]}
    assert last == {"index": 0, "delta": {}, "finish_reason": "stop"}
    assert not any("usage" in d for d in events[:-1])
    text = "".join(d["choices"][0]["delta"].get("content", "") for d in events[:-1])
    assert text == MOCK_TEXT
    assert streamed["error"] is None or streamed["error"]["kind"] == "client_disconnect"


def test_mock_responses_stream_is_a_500_inside_sse(front: Mitmdump) -> None:
    with sdk(front.url + "/v1") as client:
        out = client.responses.create(model="mock-chat", input="Say hello.")
        with pytest.raises(openai.InternalServerError) as exc:
            client.responses.create(model="mock-chat", input="Say hello.", stream=True)
    assert out.output_text == MOCK_TEXT and out.status == "completed"
    assert exc.value.status_code == 500

    plain, streamed = front.records(2)
    assert_tags(plain, "responses", "/v1/responses", False, "mock-chat")
    assert answer(plain)["status"] == 200
    assert answer(plain)["body"]["object"] == "response"

    # A mocked Responses stream: status 500, yet an event stream: one `data: {"error": …}`
    # (chat-style, no `event:` line, no sequence_number) and then chat's `[DONE]`.
    assert_tags(streamed, "responses", "/v1/responses", True, "mock-chat")
    res = answer(streamed)
    assert res["status"] == 500
    assert header(streamed, "content-type") == "text/event-stream; charset=utf-8"
    assert [(e["event"], e["data"]) for e in events_of(streamed)] == [
        (None, {"error": {"message": "Error processing stream start",
                          "type": "internal_server_error", "param": None, "code": "500"}}),
        (None, "[DONE]"),
    ]  # fmt: skip
    assert streamed["tags"]["soft_error"] is False  # a 5xx is a plain error, not a soft one


def test_routing_answers(front: Mitmdump) -> None:
    with sdk(front.url + "/v1") as client:
        with pytest.raises(openai.APIStatusError) as wrong_method:
            client.get("/chat/completions", cast_to=object)
        with pytest.raises(openai.NotFoundError):
            client.post("/ask_url", cast_to=object, body={"model": "mock-chat"})
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="no-such-model", messages=MSG)
    assert wrong_method.value.status_code == 405

    get, unknown, model = front.records(3)
    # FastAPI's own answers, as vLLM gives them.
    assert get["request"]["method"] == "GET" and get["tags"]["method"] == "GET"
    assert_tags(get, "chat.completions", "/v1/chat/completions", False, None)
    assert (answer(get)["status"], answer(get)["body"]) == (
        405,
        {"detail": "Method Not Allowed"},
    )
    assert header(get, "allow") == "POST"
    assert_tags(unknown, "other", "/v1/ask_url", False, "mock-chat")
    assert (answer(unknown)["status"], answer(unknown)["body"]) == (
        404,
        {"detail": "Not Found"},
    )
    # An unknown model is a 400 (OpenAI: 404 model_not_found), with a string code.
    assert answer(model)["status"] == 400
    err = answer(model)["body"]["error"]
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", None, "400")
    assert "Invalid model name passed in model=no-such-model" in err["message"]


def test_auth_answers(front: Mitmdump) -> None:
    wrong = "sk-wirediff-not-the-master-key"
    no_auth = {"Authorization": openai.omit}  # the SDK's way to send no key at all
    with sdk(front.url + "/v1") as client, pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="mock-chat", messages=MSG, extra_headers=no_auth)
    with sdk(front.url + "/v1", api_key=wrong) as stranger, pytest.raises(openai.BadRequestError):
        stranger.chat.completions.create(model="mock-chat", messages=MSG)

    missing, rejected = front.records(2)
    # No key: the auth error handler itself fails (it imports `prisma`, which
    # litellm[proxy] does not install) and Starlette answers a bare text/plain 500.
    assert missing["tags"]["auth"] is None
    assert answer(missing)["status"] == 500
    assert header(missing, "content-type") == "text/plain; charset=utf-8"
    assert answer(missing)["text"] == "Internal Server Error"
    # A key that is not the master key is looked up in a database there is none of: 400.
    assert_tags(rejected, "chat.completions", "/v1/chat/completions", False, "mock-chat", wrong)
    assert answer(rejected)["status"] == 400
    err = answer(rejected)["body"]["error"]
    assert (err["type"], err["code"], err["message"]) == (
        "no_db_connection",
        "400",
        "No connected db.",
    )


def test_custom_openai_forwards_to_the_standin(front: Mitmdump, litellm: LiteLLM) -> None:
    with sdk(front.url + "/v1") as client:
        chat = client.chat.completions.create(model="standin-chat", messages=MSG)
        resp = client.responses.create(model="standin-chat", input="Say hello.")
        kinds = [
            e.type
            for e in client.responses.create(model="standin-chat", input="Say hello.", stream=True)
        ]
    # The stand-in's answer, whichever API the client used: custom_openai/ turns a
    # Responses call into a chat completion upstream and the answer back into a Response.
    assert chat.choices[0].message.content and resp.output_text == chat.choices[0].message.content
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"

    c, r, s = front.records(3)
    assert_tags(c, "chat.completions", "/v1/chat/completions", False, "standin-chat")
    assert answer(c)["status"] == 200
    assert answer(c)["body"]["model"] == "standin-chat"  # the alias, not the upstream's id
    # The upstream's own headers come back renamed `llm_provider-*`.
    assert header(c, "llm_provider-openai-version") == "2020-10-01"
    assert header(c, "x-litellm-model-api-base") == f"{litellm.upstream}/v1"
    assert header(c, "x-litellm-model-name") == "custom_openai/gpt-4o-mini"
    assert_tags(r, "responses", "/v1/responses", False, "standin-chat")
    assert answer(r)["body"]["object"] == "response"

    # The translated stream has OpenAI's event types and sequence numbers, but no `event:`
    # lines, an extra `model` (the alias) in every event, and chat's `[DONE]` at the end.
    assert_tags(s, "responses", "/v1/responses", True, "standin-chat")
    *events, done = events_of(s)
    assert done == {"t_ms": done.get("t_ms"), "event": None, "data": "[DONE]"}
    assert [e["data"]["type"] for e in events] == kinds
    assert all(e["event"] is None for e in events)
    assert [e["data"]["sequence_number"] for e in events] == list(range(len(events)))
    assert {e["data"]["model"] for e in events} == {"standin-chat"}
    assert UPSTREAM_KEY.encode() not in front.capture_file.read_bytes()
