"""The probe's bundled data and its grading rules, without a server: each feature's requests
are there and are what the feature says; clients' needs are features; no key in the data;
the checks and the readiness rules on answers built for them."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

import pytest

from tests.fixtures.records import make_record
from wirediff.probe.drive import _not_openai
from wirediff.probe.expect import answered, check, final_text, tool_calls
from wirediff.probe.features import Client, features_of, load_probe, needs_of
from wirediff.probe.matrix import FeatureRow, readiness
from wirediff.replay.targets import Target

DATA = load_probe()


def test_every_feature_names_requests_of_the_bundle_that_match_it() -> None:
    for f in DATA.features:
        assert f.exchanges, f.id
        records = [DATA.by_id[i] for i in f.exchanges]
        # the feature's own request (the last: what it continues comes first) matches it
        assert f.id in features_of(records[-1], [f]), f.id
        assert f.client.split(",")[0] in f.prefer, f.id


def test_clients_need_features_and_their_needs_are_derivable() -> None:
    needed = {f.id for f in DATA.features if f.need}
    assert [c.name for c in DATA.clients] == [
        "Codex CLI", "OpenAI Agents SDK", "Vercel AI SDK", "Vercel AI SDK, openai.chat()",
        "LangChain", "LangChain, use_responses_api", "LlamaIndex", "LlamaIndex, OpenAIResponses",
        "openai-python", "openai-python, WebSocket mode", "openai-node",
    ]  # fmt: skip
    for c in DATA.clients:
        assert c.needs and set(c.needs) <= needed, c.id
    # the bundle's own requests, taken from one client, are needs of that client
    for f in DATA.features:
        if f.need and "," not in f.client:
            own = needs_of([DATA.by_id[f.exchanges[-1]]], DATA.features)
            client = next(c for c in DATA.clients if c.id == f.client)
            assert f.id in own and set(own) <= set(client.needs), f.id


def test_the_bundle_holds_no_key() -> None:
    raw = resources.files("wirediff.probe").joinpath("data", "probe.jsonl").read_bytes()
    assert not re.search(rb"sk-(?!\*)[A-Za-z0-9-]{8,}", raw)  # only masked ones, in messages
    for rec in DATA.records:
        for name, value in rec["request"]["headers"]:
            if name.lower() in ("authorization", "api-key", "x-api-key", "cookie"):
                assert re.fullmatch(r"(Bearer )?sha256:[0-9a-f]+", value), (name, value)


def _chat(body: dict[str, Any], request: dict[str, Any] | None = None) -> Any:
    return make_record(
        id="c1", path="/v1/chat/completions", request_body=request or {"messages": []},
        status=200, body=body,
    )  # fmt: skip


def test_tool_calls_and_structured_output_checks() -> None:
    two = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}},
    ]}}]}  # fmt: skip
    assert tool_calls(_chat(two)) == 2
    one_call = {"tool_calls": {"at_least": 2, "severity": "deviation"}}
    assert check(one_call, [_chat(two)]) == []
    text = _chat({"choices": [{"message": {"role": "assistant", "content": "Echo: x"}}]})
    [p] = check(one_call, [text])
    assert p.severity == "deviation" and "0 tool calls where the request asked for 2" in p.evidence
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    asked = {"messages": [], "response_format": {"type": "json_schema",
             "json_schema": {"name": "x", "schema": schema, "strict": True}}}  # fmt: skip
    good = _chat({"choices": [{"message": {"content": json.dumps({"n": 1})}}]}, asked)
    assert final_text(good) == '{"n": 1}' and check({"structured": {}}, [good]) == []
    [p] = check({"structured": {}}, [_chat(text["response"]["body"], asked)])
    assert p.severity == "breaking" and "not JSON" in p.evidence
    # no call at all where two were required: worse than one where two were allowed
    parallel = {"tool_calls": {"at_least": 2, "severity": "deviation", "none": "breaking"}}
    [p] = check(parallel, [text])
    assert p.severity == "breaking" and "it answered in text: 'Echo: x'" in p.evidence
    first_call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    one = {"choices": [{"message": {"role": "assistant", "tool_calls": [first_call]}}]}
    [p] = check(parallel, [_chat(one)])
    assert p.severity == "deviation"
    wrong = _chat({"choices": [{"message": {"content": '{"n": "one"}'}}]}, asked)
    [p] = check({"structured": {}}, [wrong])
    assert "breaks the request's schema" in p.evidence


@pytest.mark.parametrize(
    ("status", "body", "want"),
    [
        (404, {"error": {"message": "Invalid URL", "type": "invalid_request_error"}}, None),
        (200, {"error": "Unexpected endpoint or method."}, "breaking"),
        (405, {"detail": "Method Not Allowed"}, "deviation"),
    ],
)
def test_the_error_check(status: int, body: Any, want: str | None) -> None:
    rec = make_record(
        id="e1", method="GET", path="/v1/wirediff/no-such-route", request_body=None,
        status=status, body=body,
    )  # fmt: skip
    if status == 200:
        rec["tags"]["soft_error"] = True
    found = check(
        {"error": {"status": 404, "accepted": "breaking", "other_status": "deviation"}}, [rec]
    )
    assert [p.severity for p in found] == ([want] if want else [])


def test_readiness_follows_the_needs_and_strict() -> None:
    rows = {
        "a": FeatureRow("a", "A", "pass", "", ""),
        "b": FeatureRow("b", "B", "deviation", "", ""),
        "c": FeatureRow("c", "C", "unsupported", "", ""),
    }
    mine = [Client("x", "X", ("a", "b")), Client("y", "Y", ("a", "c", "z"))]
    mine.append(Client("w", "W", ("a", "z")))
    ready = {c.id: c for c in readiness(mine, rows)}
    assert ready["x"].ready and not ready["y"].ready and ready["y"].blocking == ["c"]
    assert ready["y"].untested == ["z"] and ready["y"].state == "NOT READY"
    # nothing it needs fails, but `z` was not probed: the probe cannot say it is ready
    assert ready["w"].state == "NOT PROBED" and not ready["w"].ready and not ready["w"].blocking
    strict = {c.id: c for c in readiness(mine, rows, strict=True)}
    assert strict["x"].blocking == ["b"] and strict["x"].state == "NOT READY"


def test_a_break_only_openai_node_sees_stops_openai_node_alone() -> None:
    """A chat stream ends with no finish_reason (llama-cpp-python's, when another request cuts
    it short): openai-node's `.stream()` raises, the Python clients read it. The feature is
    breaking, and only openai-node is not ready."""
    node_only = [("breaking", "openai-node"), ("deviation", "")]
    rows = {"s": FeatureRow("s", "S", "breaking", "", "", whose=node_only)}
    mine = [Client("openai-node", "openai-node", ("s",)), Client("openai-python", "py", ("s",))]
    ready = {c.id: c.state for c in readiness(mine, rows)}
    assert ready == {"openai-node": "NOT READY", "openai-python": "READY"}
    strict = {c.id: c.state for c in readiness(mine, rows, strict=True)}
    assert strict == {"openai-node": "NOT READY", "openai-python": "NOT READY"}


def test_a_stream_under_another_content_type() -> None:
    """A whole event stream labeled application/json is read by the SDKs (a deviation, its
    tool calls counted); one that ends without its `[DONE]`, is cut or fails, fails as it
    would under its own type, and says so; a body of no event is a stream not given."""

    def answer(text: str) -> Any:
        return make_record(
            id="s1", path="/v1/chat/completions",
            request_body={"messages": [], "stream": True, "tools": [{"type": "function"}]},
            text=text, headers=[["content-type", "application/json"]],
        )  # fmt: skip

    call = {"index": 0, "id": "c", "function": {"name": "f", "arguments": "{}"}}
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    whole = answer(f"data: {chunk}\n\ndata: [DONE]\n\n")
    expect = {"answered": {}, "tool_calls": {"at_least": 1}}
    [p] = check(expect, [whole])
    assert (
        p.severity == "deviation" and "an event stream answered as application/json" in p.evidence
    )
    assert tool_calls(whole) == 1
    [p] = check(expect, [answer(f"data: {chunk}\n\n")])
    assert p.severity == "failed"
    said = "200, an event stream answered as application/json, no [DONE] after 1 event"
    assert p.evidence == said
    # `[DONE]` before the last event ends the stream, as under its own type
    [p] = check(expect, [answer(f"data: {chunk}\n\ndata: [DONE]\n\ndata: {chunk}\n\n")])
    assert p.severity == "deviation"
    cut = answer(f"data: {chunk}\n\n")
    cut["error"] = {"kind": "upstream_disconnect", "message": "server disconnected mid-answer"}
    cut["response"]["complete"] = False
    [p] = check(expect, [cut])
    assert p.evidence == said and p.severity == "failed"
    cut["response"]["text"] = ""
    [p] = check(expect, [cut])
    assert p.evidence == "200, cut before its end (upstream_disconnect)"
    failed = make_record(
        id="r1", path="/v1/responses", request_body={"input": "hi", "stream": True},
        text='data: {"type":"response.failed","response":{"error":{"message":"no GPU"}}}\n\n',
        headers=[["content-type", "application/json"]],
    )  # fmt: skip
    [p] = check({"answered": {}}, [failed])
    assert p.severity == "failed", p
    assert p.evidence.startswith("200, an event stream answered as application/json, "), p
    [p] = check(expect, [answer(json.dumps({"choices": []}))])
    assert p.severity == "failed"
    assert (
        p.evidence == "200, a stream asked for and application/json answered, not an event stream"
    )


def test_a_body_no_client_reads_is_said_so() -> None:
    """Not "the stream did not end well": no stream was asked for."""
    rec = make_record(
        id="s1", path="/v1/chat/completions", request_body={"messages": []},
        text='{"id":"chatcmpl-1","obj', headers=[["content-type", "application/json"]],
    )  # fmt: skip
    [p] = check({"answered": {}}, [rec])
    assert (p.severity, p.evidence) == (
        "failed",
        "200, a body that is not JSON, which no client reads",
    )


@pytest.mark.parametrize(
    ("method", "status", "graded"),
    [("GET", 301, "deviation"), ("POST", 308, "deviation"), ("POST", 307, "deviation"),
     ("POST", 301, "failed"), ("POST", 302, "failed")],
)  # fmt: skip
def test_a_redirect_kept_as_sent_is_followed_one_turned_into_a_get_fails(
    method: str, status: int, graded: str
) -> None:
    """httpx, under both SDKs' clients, follows a redirect; a 301-303 turns a POST into a GET."""
    rec = make_record(
        id="r", path="/v1/chat/completions", method=method, status=status, text="",
        request_body=None if method == "GET" else {"model": "m", "messages": []},
        headers=[["Location", "https://api.example/v1/chat/completions"]],
    )  # fmt: skip
    [problem] = answered([rec], {})
    assert problem.severity == graded, problem
    if graded == "deviation":
        assert problem.evidence == (
            f"answered {status} to https://api.example/v1/chat/completions: clients follow it "
            "there, unprobed"
        )


def test_a_model_list_redirected_elsewhere_than_a_model_list_is_no_api() -> None:
    """A login page, say: no server to suggest probing."""
    rec = make_record(
        id="m", path="/v1/models", method="GET", status=302, text="", request_body=None,
        headers=[["Location", "https://sso.example/login?next=/v1/models"]],
    )  # fmt: skip
    said = _not_openai(rec, Target(label="x", url="http://h:1/v1"))
    assert said == (
        "http://h:1/v1 redirects: GET /models answered 302 to "
        "https://sso.example/login?next=/v1/models, not a list of models; give --model to "
        "probe the redirect"
    )
