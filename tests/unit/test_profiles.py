"""Provider profiles as data: they load, their signatures compile and name the provider
behind each documented answer, and the stand-in's builders follow them. No sockets."""

from __future__ import annotations

import json
import re
from itertools import groupby
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

from wirediff.backends.answers import Call, Plan
from wirediff.backends.payloads import (
    build_response,
    chat_chunks,
    chat_completion,
    response_events,
)
from wirediff.backends.server import mask_key
from wirediff.profiles import (
    answer_for,
    answer_variants,
    fill,
    load_profiles,
    match_signature,
    profile,
    render_answer,
)

PROFILES = sorted(load_profiles())
REQUIRED = ("name", "title", "signatures", "models", "content_types", "endpoints", "auth",
            "error_shape", "answers", "chat", "responses", "streaming")  # fmt: skip
VALUES = {"method": "POST", "path": "/v1/ask_url", "model": "o4-mini", "key_hint": "sk-***abcd",
          "response_id": "resp_123", "allowed": "POST"}  # fmt: skip

# [pf] "A Response object … carries" — the OpenAI reference must have every one of them.
OPENAI_RESPONSE_FIELDS = {
    "id", "object", "created_at", "status", "model", "output", "usage", "error",
    "incomplete_details", "instructions", "metadata", "parallel_tool_calls", "temperature",
    "top_p", "tool_choice", "tools", "truncation", "text", "presence_penalty",
    "frequency_penalty", "top_logprobs", "store", "background", "service_tier", "completed_at",
    "previous_response_id", "reasoning", "max_output_tokens", "max_tool_calls",
    "safety_identifier", "prompt_cache_key",
}  # fmt: skip

ANSWER_KINDS = (
    "unknown_endpoint",
    "wrong_method",
    "missing_key",
    "wrong_key",
    "unknown_model",
    "no_models",
    "unknown_previous_response",
    "context_length_exceeded",
)
"""The answer names a profile may document, each of which the stand-ins and diagnoses use."""

DOCUMENTED = [
    (name, kind, i)
    for name in PROFILES
    for kind in ANSWER_KINDS
    for i, _ in enumerate(answer_variants(profile(name), kind))
]

TEXT = Plan("text", text="Echo: hello there world", prompt_tokens=3)
CALL = Call("get_weather", '{"city":"Paris"}')
TOOL = Plan("tool", calls=[CALL], prompt_tokens=3)


def served(name: str) -> str:
    return str(profile(name)["models"]["served"][0])


@pytest.mark.parametrize("name", PROFILES)
def test_profile_has_every_section(name: str) -> None:
    prof = profile(name)
    assert prof["name"] == name and set(REQUIRED) <= set(prof)
    assert {"chat", "responses"} <= set(prof["streaming"])
    for ep in prof["endpoints"]:
        assert ep["method"] in {"GET", "POST", "PUT", "PATCH", "DELETE"}
        assert ep["path"].startswith("/")
    assert ("POST", "/v1/chat/completions") in {(e["method"], e["path"]) for e in prof["endpoints"]}


def test_the_four_providers_are_there() -> None:
    assert {"openai", "lmstudio", "ollama", "vllm"} <= set(PROFILES)


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known: lmstudio, ollama, openai, vllm"):
        profile("nope")


@pytest.mark.parametrize("name", PROFILES)
def test_signatures_compile_and_are_namespaced(name: str) -> None:
    ids = []
    for sig in profile(name)["signatures"]:
        assert sig["id"].startswith(f"{name}.")
        when = sig["when"]
        assert set(when) <= {"status", "content_type", "header", "body"} and when
        if "body" in when:
            re.compile(when["body"])
        ids.append(sig["id"])
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("name", "kind", "i"), DOCUMENTED)
def test_documented_answer_carries_its_signature(name: str, kind: str, i: int) -> None:
    """Table: every documented answer, rendered, is recognised as this provider's — both as
    sent and as the record stores it (parsed JSON dumped back, with spaces)."""
    ans = answer_variants(profile(name), kind)[i]
    status, headers, data = render_answer(ans, VALUES)
    assert "{" + "model}" not in data.decode()  # placeholders are filled
    sig = match_signature(status, headers, data.decode())
    assert sig is not None and sig == ans["signature"] and sig.startswith(f"{name}.")
    if ans["content_type"].startswith("application/json"):
        as_recorded = json.dumps(json.loads(data))
        assert match_signature(status, headers, as_recorded) == sig


@pytest.mark.parametrize("name", PROFILES)
def test_every_signature_is_produced_by_some_answer_or_documented_elsewhere(name: str) -> None:
    produced = {
        a["signature"] for kind in ANSWER_KINDS for a in answer_variants(profile(name), kind)
    }
    assert {s["id"] for s in profile(name)["signatures"]} <= produced


@pytest.mark.parametrize("name", PROFILES)
def test_success_bodies_match_no_signature(name: str) -> None:
    prof = profile(name)
    ctype = [("content-type", prof["content_types"]["json"])]
    for plan in (TEXT, TOOL):
        body = json.dumps(chat_completion(prof, served(name), plan))
        assert match_signature(200, ctype, body) is None
        if prof["streaming"]["responses"]["supported"]:
            obj = build_response(prof, {}, served(name), plan, None, 1).obj
            assert match_signature(200, ctype, json.dumps(obj)) is None


@pytest.mark.parametrize(
    ("status", "ctype", "body", "expected"),
    [
        (200, "application/json; charset=utf-8", '{"error":"Unexpected endpoint or method. (POST /v1/responses)"}', "lmstudio.unexpected_endpoint"),
        (404, "text/plain", "404 page not found", "ollama.page_not_found"),
        (405, "text/plain; charset=utf-8", "405 method not allowed", "ollama.method_not_allowed"),
        (404, "application/json", '{"detail":"Not Found"}', "vllm.not_found"),
        (401, "application/json", '{"error":"Unauthorized"}', "vllm.unauthorized"),
        (404, "application/json", '{"object":"error","message":"The model `x` does not exist.","code":404}', "vllm.model_not_found"),
        (404, "application/json", '{"error":{"message":"The model `x` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}', "openai.model_not_found"),
        (401, "application/json", '{"error":{"message":"Incorrect API key provided: lm-studio. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}', "openai.invalid_api_key"),
        (404, "application/json", '{"error":{"message":"Unknown request URL: POST /chat/completions. Please check the URL for typos.","type":"invalid_request_error","param":null,"code":"unknown_url"}}', "openai.unknown_url"),
        # the same words with another status or content type are not that provider's answer
        (404, "application/json", '{"error":"Unexpected endpoint or method. (POST /v1/x)"}', None),
        (404, "application/json", "404 page not found", None),
        (200, "application/json", '{"detail":"Not Found"}', None),
    ],
)  # fmt: skip
def test_facts_from_the_wild_are_recognised(
    status: int, ctype: str, body: str, expected: str | None
) -> None:
    assert match_signature(status, [("Content-Type", ctype)], body) == expected


def test_openai_unknown_endpoint_depends_on_the_prefix() -> None:
    prof = profile("openai")
    inside = answer_for(prof, "unknown_endpoint", "/v1/ask_url")
    assert inside is not None and inside["signature"] == "openai.invalid_url"
    outside = answer_for(prof, "unknown_endpoint", "/chat/completions")
    assert outside is not None and outside["signature"] == "openai.unknown_url"
    assert outside["body"]["error"]["code"] == "unknown_url"


def test_providers_without_auth_have_no_key_answers() -> None:
    assert answer_for(profile("ollama"), "missing_key") is None
    assert profile("ollama")["auth"]["required"] is False
    assert profile("vllm")["auth"]["checked"] == "before_routing"
    assert profile("openai")["auth"]["required"] is True


def test_fill_replaces_placeholders_but_keeps_json_braces() -> None:
    tpl = {"a": ["{model} {x}", 3, None], "b": '{"k": "{path}"}'}
    assert fill(tpl, {"model": "m", "path": "/p"}) == {"a": ["m {x}", 3, None], "b": '{"k": "/p"}'}


def test_render_answer_text_body_and_headers() -> None:
    status, headers, data = render_answer(
        {"status": 405, "content_type": "text/plain", "headers": {"allow": "{allowed}"},
         "body": "405 method not allowed"}, {"allowed": "POST"})  # fmt: skip
    assert (status, data) == (405, b"405 method not allowed")
    assert headers == [("Content-Type", "text/plain"), ("allow", "POST")]


@pytest.mark.parametrize("key", ["lm-studio", "sk-proj-abcdefghijklmnopqrstuvwxyz0123", "ab", "x"])
def test_mask_key_never_echoes_the_key(key: str) -> None:
    assert key not in mask_key(key) and mask_key(key)


# --- the stand-in's builders follow the profiles --------------------------------------------


def test_openai_response_object_has_every_reference_field_and_validates() -> None:
    prof = profile("openai")
    assert set(prof["responses"]["fields"]) >= OPENAI_RESPONSE_FIELDS
    for plan in (TEXT, TOOL):
        obj = build_response(prof, {"store": True}, "gpt-4o-mini", plan, None, 1).obj
        assert set(obj) >= OPENAI_RESPONSE_FIELDS
        parsed = Response.model_validate(obj)  # strict parse with the SDK's own type
        assert parsed.output_text == (plan.text if plan.kind == "text" else "")
    assert set(prof["headers"]) >= {"x-request-id", "openai-processing-ms", "openai-version",
                                    "openai-organization", "x-ratelimit-limit-requests",
                                    "x-ratelimit-remaining-tokens"}  # fmt: skip
    assert prof["headers"]["openai-version"] == "2020-10-01"


@pytest.mark.parametrize("name", PROFILES)
@pytest.mark.parametrize("plan", [TEXT, TOOL], ids=["text", "tool"])
def test_chat_objects_parse_with_the_sdk_types(name: str, plan: Plan) -> None:
    """The SDK's own types parse each object and read back what the plan says."""
    prof = profile(name)
    finish = "stop" if plan.kind == "text" else "tool_calls"
    (choice,) = ChatCompletion.model_validate(chat_completion(prof, served(name), plan)).choices
    chunks = [
        ChatCompletionChunk.model_validate(ch)
        for ch in chat_chunks(prof, served(name), plan, include_usage=True)
    ]
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert choice.finish_reason == deltas[-1].finish_reason == finish
    if plan.kind == "text":
        assert choice.message.content == plan.text
        assert "".join(d.delta.content or "" for d in deltas) == plan.text
        return
    (call,) = choice.message.tool_calls or []
    (planned,) = plan.calls
    assert call.model_dump()["function"] == {"name": planned.name, "arguments": planned.arguments}
    streamed = [tc for d in deltas for tc in d.delta.tool_calls or []]
    assert streamed[0].function and streamed[0].function.name == planned.name
    assert (
        "".join(tc.function.arguments or "" for tc in streamed if tc.function) == planned.arguments
    )


def test_vllm_and_ollama_differ_from_openai_where_the_facts_say() -> None:
    vllm, ollama = profile("vllm"), profile("ollama")
    # vLLM: Response object lacks OpenAI's store/error/penalties [protocol]
    assert not {"store", "error", "presence_penalty"} & set(vllm["responses"]["fields"])
    assert "cache_write_tokens" not in ollama["responses"]["usage"]["input_tokens_details"]
    assert vllm["answers"]["unknown_model"]["body"]["error"]["code"] == 404  # integer code


@pytest.mark.parametrize("name", PROFILES)
def test_chat_stream_shape_follows_the_profile(name: str) -> None:
    prof = profile(name)
    s = prof["streaming"]["chat"]
    chunks = chat_chunks(prof, served(name), TEXT, include_usage=True)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == TEXT.text
    finishing = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in finishing] == ["stop"]
    if s["usage_chunk"]:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    if s["usage_null_in_chunks"]:
        assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    if s["null_fields"] == "omitted":
        keep = set(s["kept_null"])

        def nulls(o: Any) -> set[str]:
            if isinstance(o, dict):
                return {k for k, v in o.items() if v is None} | {
                    n for v in o.values() for n in nulls(v)
                }
            if isinstance(o, list):
                return {n for v in o for n in nulls(v)}
            return set()

        assert all(nulls(c) <= keep for c in chunks)
        assert all("usage" not in c for c in chunks[:-1])
    if s["first_delta"] is not None:
        assert chunks[0]["choices"][0]["delta"] == s["first_delta"]


@pytest.mark.parametrize("name", PROFILES)
def test_chat_stream_tool_calls_whole_or_fragmented(name: str) -> None:
    prof = profile(name)
    chunks = chat_chunks(prof, served(name), TOOL, include_usage=False)
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls") or []]
    args = [tc["function"]["arguments"] for tc in calls if "arguments" in tc.get("function", {})]
    assert "".join(args) == CALL.arguments
    assert calls[0]["id"] and calls[0]["function"]["name"] == "get_weather"
    if prof["streaming"]["chat"]["tool_calls"] == "whole":
        assert len(calls) == 1
    else:
        assert len([a for a in args if a]) > 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_ollama_chat_stream_quirks() -> None:
    prof = profile("ollama")
    plan = Plan("text", text="Echo: hi", reasoning="The user wrote 1 words.", prompt_tokens=1)
    chunks = chat_chunks(prof, "llama3.2", plan, include_usage=False)
    assert chunks[0]["choices"][0]["delta"]["reasoning"] == plan.reasoning
    assert all(c["system_fingerprint"] == "fp_ollama" for c in chunks)
    assert all(c["choices"][0]["delta"]["role"] == "assistant" for c in chunks)


@pytest.mark.parametrize(
    "name", [n for n in PROFILES if profile(n)["streaming"]["responses"]["supported"]]
)
@pytest.mark.parametrize("plan", [TEXT, TOOL], ids=["text", "function_call"])
def test_response_events_follow_the_profile(name: str, plan: Plan) -> None:
    prof = profile(name)
    s = prof["streaming"]["responses"]
    rb = build_response(prof, {}, served(name), plan, None, 1)
    events = response_events(prof, rb)
    kinds = [k for k, _ in groupby(t for t, _ in events)]
    assert kinds == s["events"]["text" if plan.kind == "text" else "function_call"]
    if s["sequence_number"]:
        assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    assert events[-1][1]["response"] == rb.obj
    if plan.kind == "tool":
        (done,) = [e for t, e in events if t == "response.function_call_arguments.done"]
        assert ("name" in done) is s["done_has_name"]
        deltas = [e for t, e in events if t == "response.function_call_arguments.delta"]
        assert "".join(d["delta"] for d in deltas) == done["arguments"]
        assert (len(deltas) == 1) is (s["function_call_arguments"] == "whole")


def test_ollama_item_ids_and_statelessness() -> None:
    prof = profile("ollama")
    rb = build_response(prof, {"store": True}, "llama3.2", TOOL, None, 1)
    assert re.fullmatch(r"fc_\d+_0", rb.items[0]["id"])
    assert re.fullmatch(r"resp_\d+", rb.obj["id"])
    assert rb.obj["store"] is False and rb.obj["previous_response_id"] is None
