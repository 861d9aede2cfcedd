"""Diagnoses, one code at a time: a healthy base exchange plus one change from provider-facts.

Each row says which codes that one change must produce, and which provider it names.
The `unprofiled` rows say the same things in other words, on a server no profile
describes: the rules must still find the code, and name no provider.
"""

from __future__ import annotations

import base64
import json
import re
from http import HTTPStatus
from pathlib import Path
from typing import Any

import httpx
import openai
import pandas as pd
import pytest

from tests.fixtures.analysed import diagnose, format_diagnoses
from tests.fixtures.chain_records import (
    ANSWERS,
    INNER_LISTENER,
    JSON_CT,
    KEY,
    OTHER_KEY,
    SSE_CT,
    T0,
    chat_body,
    chat_completion,
    chat_events,
    record,
    redirected_post,
    responses_body,
    responses_events,
    sdk_headers,
)
from wirediff._types import Event, Record
from wirediff.analysis.diagnosis.explain import CODES, DIAGNOSIS_COLUMNS
from wirediff.analysis.index.analyze import analyze
from wirediff.profiles import load_profiles, load_remedies
from wirediff.record.store import load_records

RESPONSES: dict[str, Any] = {"path": "/v1/responses", "body": responses_body()}
NO_KEY: dict[str, Any] = {"headers": sdk_headers(key=None)}
STREAM: dict[str, Any] = {"body": chat_body(stream=True)}
SSE: dict[str, Any] = {**STREAM, "content_type": SSE_CT, "resp_body": None}
DISCONNECT = {"kind": "client_disconnect", "message": "Client disconnected."}
STOPPED = {"kind": "proxy_shutdown", "message": "the proxy stopped before the exchange ended"}
"""The error of an exchange the capture addon records at a stop (`record.flow.PROXY_SHUTDOWN`)."""
U = "unknown"
WS: dict[str, Any] = {
    "method": "GET", "path": "/v1/responses", "body": None,
    "headers": [*sdk_headers(), ("Connection", "Upgrade"), ("Upgrade", "websocket"),
                ("Sec-WebSocket-Version", "13"), ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")],
}  # fmt: skip

# (case id, change to the healthy base, expected codes, expected provider)
CASES: list[tuple[str, dict[str, Any], set[str], str | None]] = [
    ("healthy", {}, set(), U),
    ("healthy-stream", {**SSE, "events": chat_events()}, set(), U),
    ("healthy-disconnect-after-done",
     {**SSE, "events": chat_events(), "complete": False, "error": DISCONNECT}, set(), U),
    ("healthy-responses-stream",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": responses_events()}, set(), U),
    # endpoint_not_implemented / soft_error_200
    ("lmstudio-responses", {**RESPONSES, **ANSWERS["lmstudio.unexpected_endpoint"]},
     {"soft_error_200", "endpoint_not_implemented"}, "lmstudio"),
    ("lmstudio-responses-stream",
     {**RESPONSES, "body": responses_body(stream=True), **ANSWERS["lmstudio.unexpected_endpoint"]},
     {"soft_error_200", "endpoint_not_implemented"}, "lmstudio"),
    ("unprofiled-soft-endpoint",
     {**RESPONSES, "status": 200, "resp_body": {"error": "no handler for POST /v1/responses"}},
     {"soft_error_200", "endpoint_not_implemented"}, U),
    ("unprofiled-soft-other", {"status": 200, "resp_body": {"error": "quota exhausted"}},
     {"soft_error_200"}, U),
    # Go's and FastAPI's default answers name a framework, not a product
    ("ollama-responses-404", {**RESPONSES, **ANSWERS["ollama.page_not_found"]},
     {"endpoint_not_implemented"}, U),
    ("vllm-responses-404", {**RESPONSES, **ANSWERS["vllm.not_found"]},
     {"endpoint_not_implemented"}, U),
    ("unprofiled-404-text", {**RESPONSES, "status": 404, "content_type": "text/plain",
                             "resp_text": "nothing here"}, {"endpoint_not_implemented"}, U),
    ("unprofiled-501", {**RESPONSES, "status": 501, "resp_body": {"error": {"message": "nope"}}},
     {"endpoint_not_implemented"}, U),
    ("404-outside-the-known-families", {"path": "/v1/ask", "status": 404,
                                        "resp_body": {"detail": "Not Found"}},
     {"endpoint_not_implemented"}, U),
    ("nestjs-cannot-post", {**RESPONSES, "status": 404,
                            "resp_headers": [("x-powered-by", "Express")],
                            "resp_body": {"message": "Cannot POST /v1/responses",
                                          "error": "Not Found", "statusCode": 404}},
     {"endpoint_not_implemented"}, U),
    ("llamacpp-embeddings-off", {"path": "/v1/embeddings", "body": {"model": "m", "input": "x"},
                                 "status": 501, "resp_body": {"error": {
                                     "code": 501, "type": "not_supported_error",
                                     "message": "This server does not support embeddings. "
                                                "Start it with `--embeddings`"}}},
     {"endpoint_not_implemented"}, U),
    # stream_error_event: the server ended the stream on purpose (not stream_truncated)
    ("vllm-stream-error-event",
     {**SSE, "events": [{"t_ms": 1.0, "event": None, "data": {"error": {"message": "boom"}}},
                        {"t_ms": 2.0, "event": None, "data": "[DONE]"}]},
     {"stream_error_event"}, U),
    ("responses-error-event",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": responses_events(terminal="error")}, {"stream_error_event"}, U),
    ("responses-failed-event",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": responses_events(terminal="response.failed")}, {"stream_error_event"}, U),
    ("ors-error-frame-only",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": [{"t_ms": 3.0, "event": None, "data": {
          "type": "error", "error": {"message": "Error from LLM API: 401"}}}]},
     {"stream_error_event"}, U),
    ("ors-upstream-gone-frame",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": [{"t_ms": 3.0, "event": None, "data": {
          "type": "error", "error": {"message": "All connection attempts failed"}}}]},
     {"stream_error_event", "upstream_unreachable"}, U),
    # method_not_allowed, also when a route answers 404 (or LM Studio's 200) for a method it
    # never takes
    ("ollama-405", {"method": "GET", "body": None, **ANSWERS["ollama.method_not_allowed"]},
     {"method_not_allowed"}, U),
    ("vllm-405", {"method": "GET", "body": None, **ANSWERS["vllm.method_not_allowed"]},
     {"method_not_allowed"}, U),
    ("unprofiled-405", {"method": "PUT", "status": 405, "content_type": None, "resp_body": None},
     {"method_not_allowed"}, U),
    ("wrong-method-answered-404", {"method": "GET", "body": None, "status": 404,
                                   "resp_body": {"detail": "Not Found"}},
     {"method_not_allowed"}, U),
    ("lmstudio-wrong-method", {"method": "GET", "body": None,
                               **ANSWERS["lmstudio.unexpected_endpoint"],
                               "resp_body": {"error": "Unexpected endpoint or method. "
                                                      "(GET /v1/chat/completions)"}},
     {"method_not_allowed", "soft_error_200"}, "lmstudio"),
    # auth
    ("openai-no-key", {**NO_KEY, **ANSWERS["openai.no_api_key"]}, {"auth_missing"}, "openai"),
    ("replayed-without-a-key", {**NO_KEY, **ANSWERS["openai.no_api_key"], "replay_of": "o1"},
     {"auth_missing"}, "openai"),
    ("openai-wrong-key", ANSWERS["openai.invalid_api_key"], {"auth_rejected"}, "openai"),
    ("lmstudio-wrong-key", ANSWERS["lmstudio.invalid_api_key"], {"auth_rejected"}, "lmstudio"),
    ("vllm-no-key", {**NO_KEY, **ANSWERS["vllm.unauthorized"]}, {"auth_missing"}, "vllm"),
    ("unprofiled-403-no-key", {**NO_KEY, "status": 403, "content_type": "text/html",
                               "resp_text": "<h1>Forbidden</h1>"}, {"auth_missing"}, U),
    ("unprofiled-401-key", {"status": 401, "resp_body": {"message": "denied"}},
     {"auth_rejected"}, U),
    ("llama-cpp-python-401", {**NO_KEY, "status": 401, "resp_headers": [("server", "uvicorn")],
                              "resp_body": {"detail": "Invalid API key"}}, {"auth_missing"}, U),
    # path_prefix
    ("openai-doubled-v1", {"path": "/v1/v1/chat/completions", **ANSWERS["openai.invalid_url"]},
     {"path_prefix"}, "openai"),
    ("openai-missing-v1", {"path": "/chat/completions", **ANSWERS["openai.unknown_url"]},
     {"path_prefix"}, "openai"),
    ("vllm-missing-v1", {"path": "/chat/completions", **ANSWERS["vllm.not_found"]},
     {"path_prefix"}, U),
    ("unprofiled-doubled-v1", {"path": "/v1/v1/models", "method": "GET", "body": None,
                               "status": 404, "content_type": None, "resp_body": None},
     {"path_prefix"}, U),
    # previous_response_not_found (stateless servers): by param, by echoed id, by code
    ("vllm-no-store", {"path": "/v1/responses",
                       "body": {**responses_body(), "previous_response_id": "resp_abc"},
                       "status": 404, "resp_headers": [("server", "uvicorn")],
                       "resp_body": {"error": {"message": "Response with id 'resp_abc' not found.",
                                               "type": "invalid_request_error",
                                               "param": "response_id", "code": 404}},
                       "signature": "vllm.response_not_found"},
     {"previous_response_not_found"}, "vllm"),
    ("unprofiled-lookup-404", {"path": "/v1/responses/resp_xyz", "method": "GET", "body": None,
                               "status": 404, "resp_body": {"error": {"message": "no resp_xyz here"}}},
     {"previous_response_not_found"}, U),
    ("openai-previous-not-found", {"path": "/v1/responses",
                                   "body": {**responses_body(), "previous_response_id": "resp_q"},
                                   "status": 400, "resp_body": {"error": {
                                       "message": "Previous response not found.",
                                       "type": "invalid_request_error", "param": None,
                                       "code": "previous_response_not_found"}}},
     {"previous_response_not_found"}, "openai"),
    # request_rejected: not what the words or the path suggest (review F17); the parameter
    # named when the answer names one
    ("missing-v1-but-rate-limited", {"path": "/chat/completions", "status": 429,
                                     "resp_body": {"error": {"message": "Rate limit reached",
                                                             "type": "requests", "code": None}}},
     {"request_rejected"}, U),
    ("bad-parameter-mentions-model", {"status": 400, "resp_body": {"error": {
        "message": "Invalid value for 'temperature': model supports only 1.",
        "type": "invalid_request_error", "param": "temperature", "code": None}}},
     {"request_rejected"}, U),
    ("403-region-with-a-key", {"status": 403, "resp_body": {"error": {
        "message": "Country, region, or territory not supported",
        "type": "request_forbidden", "code": "unsupported_country_region_territory"}}},
     {"request_rejected"}, U),
    ("openai-unsupported-max-tokens", {"body": {**chat_body(), "max_tokens": 5}, "status": 400,
                                       "resp_body": {"error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                   "Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}}},
     {"request_rejected"}, U),
    ("previous-response-id-unsupported",
     {"path": "/v1/responses", "body": {**responses_body(), "previous_response_id": "resp_q"},
      "status": 400, "resp_body": {"detail": "Unsupported parameter: previous_response_id"}},
     {"request_rejected"}, U),
    ("fastapi-422", {"body": {**chat_body(), "max_tokens": "ten"}, "status": 422,
                     "resp_body": {"detail": [{"type": "int_parsing", "loc": ["body", "max_tokens"],
                                               "msg": "Input should be a valid integer"}]}},
     {"request_rejected"}, U),
    ("llama-cpp-python-context-400", {"status": 400, "resp_body": {"error": {
        "message": "This model's maximum context length is 256 tokens. However, you requested "
                   "1029 tokens (1029 in the messages, None in the completion). Please reduce "
                   "the length of the messages or completion.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}},
     {"request_rejected"}, U),
    # llama.cpp says it by its type (ERROR_TYPE_EXCEED_CONTEXT_SIZE), vLLM in its words
    ("llamacpp-exceed-context-size", {"status": 400, "resp_body": {"error": {
        "code": 400, "message": "request (4476 tokens) exceeds the available context size "
                                "(4096 tokens), try increasing it",
        "type": "exceed_context_size_error", "n_prompt_tokens": 4476, "n_ctx": 4096}}},
     {"request_rejected"}, U),
    ("vllm-decoder-prompt-too-long", {"status": 400, "resp_body": {"error": {
        "message": "The decoder prompt (length 5000) is longer than the maximum model length "
                   "of 4096. Make sure that `max_model_len` is no smaller than the number of "
                   "text tokens.", "type": "BadRequestError", "param": None, "code": 400}}},
     {"request_rejected"}, U),
    ("request-without-a-model", {"body": {"messages": [{"role": "user", "content": "hi"}]},
                                 "status": 400, "resp_body": {"error": {
        "message": "/chat/completions: Invalid model name passed in model=None.",
        "type": "invalid_request_error", "param": None, "code": "400"}}},
     {"request_rejected"}, U),
    ("gateway-500-operation-unsupported", {"path": "/v1/responses/compact",
                                           "body": responses_body(), "status": 500,
                                           "resp_body": {"error": {
        "message": "litellm.APIConnectionError: APIConnectionError: Custom_openaiException - "
                   "COMPACT responses is not supported for custom_openai",
        "type": "internal_server_error", "param": None, "code": "500"}}},
     {"endpoint_not_implemented"}, U),
    # model_not_found
    ("openai-model", {"body": chat_body("gpt-9"), **ANSWERS["openai.model_not_found"]},
     {"model_not_found"}, "openai"),
    ("ollama-model", {"body": chat_body("llama9"), **ANSWERS["ollama.model_not_found"]},
     {"model_not_found"}, "ollama"),
    ("vllm-model", {"body": chat_body("gpt-9"), **ANSWERS["vllm.model_not_found"]},
     {"model_not_found"}, "vllm"),
    ("lmstudio-model", {"body": chat_body("o4-mini"), **ANSWERS["lmstudio.invalid_model"]},
     {"model_not_found"}, "lmstudio"),
    ("lmstudio-no-models", ANSWERS["lmstudio.no_models_loaded"], {"model_not_found"}, "lmstudio"),
    ("unprofiled-model-named", {"body": chat_body("qwen-x"), "status": 404,
                                "resp_body": {"error": {"message": "qwen-x: no such thing"}}},
     {"model_not_found"}, U),
    ("model-echoed-in-a-stream-is-no-error",
     {**SSE, "events": [*chat_events(done=False),
                        {"t_ms": 30.0, "event": None, "data": {"error": {"message": "boom"}}}]},
     {"stream_error_event"}, U),
    # stream_not_honoured
    ("stream-answered-json", STREAM, {"stream_not_honoured"}, U),
    # stream_truncated: cut, or ended with no terminal and no error
    ("chat-no-done", {**SSE, "events": chat_events(done=False)}, {"stream_truncated"}, U),
    ("chat-disconnect-before-done",
     {**SSE, "events": chat_events(done=False), "complete": False, "error": DISCONNECT},
     {"stream_truncated"}, U),
    ("chat-partial-tail", {**SSE, "events": chat_events(partial_tail=True)},
     {"stream_truncated"}, U),
    ("chat-upstream-cut", {**SSE, "events": chat_events(), "complete": False,
                           "error": {"kind": "upstream_disconnect", "message": "peer closed"}},
     {"stream_truncated"}, U),
    ("responses-no-completed",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": responses_events(terminal=None)}, {"stream_truncated"}, U),
    ("llama-cpp-python-empty-stream", {**SSE, "events": []}, {"stream_truncated"}, U),
    ("responses-completed-without-its-blank-line",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": [*responses_events()[:-1], {**responses_events()[-1], "partial": True}]},
     {"stream_truncated"}, U),
    ("done-without-its-blank-line",
     {**SSE, "events": [*chat_events()[:-1], {**chat_events()[-1], "partial": True}]}, set(), U),
    # upstream_unreachable, upstream_tls
    ("no-response", {"status": None, "error": {"kind": "upstream_unreachable",
                                               "message": "Connection refused"}},
     {"upstream_unreachable"}, U),
    ("no-response-timeout", {"status": None, "error": {"kind": "timeout",
                                                       "message": "Upstream timed out"}},
     {"upstream_unreachable"}, U),
    ("plain-answer-cut", {"resp_body": None, "resp_text": '{"id":"chatcmpl-1","object":"chat.comp',
                          "complete": False, "error": {
        "kind": "upstream_disconnect", "message": "server disconnected mid-answer"}},
     {"upstream_unreachable"}, U),
    ("error-answer-cut-keeps-its-status", {**NO_KEY, **ANSWERS["openai.no_api_key"], "complete": False,
                                           "error": {"kind": "upstream_disconnect", "message": "x"}},
     {"auth_missing"}, "openai"),
    ("plain-answer-left-by-the-client", {"complete": False, "error": {
        "kind": "client_disconnect", "message": "client disconnected"}}, set(), U),
    ("plain-answer-not-json", {"resp_body": None, "resp_text": '{"id":"chatcmpl-1","object":"chat.comp'},
     {"answer_unreadable"}, U),
    ("proxy-502-html", {"status": 502, "content_type": "text/html",
                        "resp_text": "<html><body>502 Bad Gateway</body></html>"},
     {"upstream_unreachable"}, U),
    ("gateway-500-connect", {"status": 500, "resp_body": {"error": {
        "message": "litellm.APIConnectionError: Connection refused"}}},
     {"upstream_unreachable"}, U),
    ("ors-proxy-500", {"status": 500, "resp_body": {
        "detail": "Error proxying request: All connection attempts failed"}},
     {"upstream_unreachable"}, U),
    ("ors-soft-upstream-gone", {"status": 200, "resp_body": {
        "error": "All connection attempts failed"}}, {"soft_error_200", "upstream_unreachable"}, U),
    ("mitmproxy-tls", {"status": None, "error": {
        "kind": "tls", "message": "TLS handshake failed: certificate verify failed"}},
     {"upstream_tls"}, U),
    # server_error: a 5xx the server wrote itself, with its message
    ("server-500-is-not-an-endpoint-miss",
     {"status": 500, "resp_body": {"error": {"message": "endpoint crashed"}}}, {"server_error"}, U),
    ("405-on-a-multi-method-route", {"method": "DELETE", "path": "/v1/responses/resp_1",
                                     "body": None, "status": 405, "resp_body": None,
                                     "content_type": None}, {"method_not_allowed"}, U),
    ("server-503-json-is-not-a-proxy", {"status": 503, "resp_body": {"error": {
        "message": "overloaded", "type": "server_error"}}}, {"server_error"}, U),
    ("llamacpp-context-500", {"status": 500, "resp_body": {"error": {
        "code": 500, "message": "Context size has been exceeded.", "type": "server_error"}}},
     {"server_error"}, U),
    ("llama-cpp-python-embeddings-500", {"path": "/v1/embeddings", "body": {"model": "m", "input": "x"},
                                         "status": 500, "resp_body": {"error": {
        "message": "Llama model must be created with embedding=True to call this method",
        "type": "internal_server_error", "param": None, "code": None}}}, {"server_error"}, U),
    ("ors-500-detail", {"path": "/responses", "body": responses_body(), "status": 500,
                        "resp_body": {"detail": "Error processing request: Expecting value: "
                                                "line 1 column 10 (char 9)"}}, {"server_error"}, U),
    ("plain-500", {"status": 500, "content_type": "text/plain; charset=utf-8",
                   "resp_text": "Internal Server Error"}, {"server_error"}, U),
    # websocket_not_supported: an upgrade answered like any GET
    ("ws-refused-404", {**WS, "status": 404, "resp_body": {"detail": "Not Found"}},
     {"websocket_not_supported"}, U),
    ("ws-refused-405", {**WS, **ANSWERS["vllm.method_not_allowed"]},
     {"websocket_not_supported"}, U),
    ("ws-refused-lmstudio", {**WS, **ANSWERS["lmstudio.unexpected_endpoint"]},
     {"websocket_not_supported", "soft_error_200"}, "lmstudio"),
    ("ws-refused-needs-a-key", {**WS, **ANSWERS["openai.no_api_key"]}, {"auth_rejected"},
     "openai"),
    # capture_stopped: mitmdump stopped mid-way (as the addon records it), no server fault
    ("stopped-mid-stream", {**SSE, "events": chat_events(done=False), "complete": False,
                            "error": STOPPED}, {"capture_stopped"}, U),
    ("stopped-before-any-event", {**SSE, "events": [], "complete": False, "error": STOPPED},
     {"capture_stopped"}, U),
    ("stopped-waiting-for-headers", {"status": None, "error": STOPPED}, {"capture_stopped"}, U),
    ("stopped-mid-401", {**ANSWERS["openai.no_api_key"], "complete": False, "error": STOPPED},
     {"capture_stopped", "auth_rejected"}, "openai"),
]  # fmt: skip


def rows(records: list[Record]) -> pd.DataFrame:
    df = diagnose(records)
    assert list(df.columns) == DIAGNOSIS_COLUMNS
    return df


@pytest.mark.parametrize(
    ("change", "codes", "provider"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_one_change_one_diagnosis(
    change: dict[str, Any], codes: set[str], provider: str | None
) -> None:
    df = rows([record(**change)])
    assert set(df["code"]) == codes
    assert set(df["code"]) <= set(CODES)
    if codes:
        assert set(df["provider"]) == {provider}
        assert df["chain_id"].nunique() == 1
        for r in df.to_dict("records"):
            assert r["exchange_ids"] == ["x1"] and r["evidence"] and r["summary"] and r["remedy"]
            assert "\n" not in r["summary"] and "\n" not in r["remedy"]


def test_every_code_is_covered_by_a_case_or_a_chain_test() -> None:
    chain_codes = {"redirect_method_change", "auth_dropped_by_hop"}
    assert set(CODES) == set().union(*(c[2] for c in CASES)) | chain_codes


def test_the_prose_data_covers_every_code_and_names_known_providers() -> None:
    prose = load_remedies()
    assert list(prose) == list(CODES)
    for code, entry in prose.items():
        assert isinstance(entry["summary"], str) and entry["remedies"], code
        for item in entry["remedies"]:
            assert set(item) <= {"provider", "variant", "text"} and isinstance(item["text"], str)
            assert item.get("provider", "openai") in load_profiles(), (code, item)


def test_lmstudio_remedy_names_the_fix() -> None:
    df = rows([record(**RESPONSES, **ANSWERS["lmstudio.unexpected_endpoint"])])
    by_code = {r["code"]: r for r in df.to_dict("records")}
    assert "0.3.29" in by_code["endpoint_not_implemented"]["remedy"]
    assert by_code["endpoint_not_implemented"]["endpoint"] == "/v1/responses"
    assert any("Unexpected endpoint" in e for e in by_code["soft_error_200"]["evidence"])


def test_what_clients_do_is_quoted_where_it_was_measured() -> None:
    """On /v1/responses, where profiles/clients.yaml measured it; not of a chat completion."""
    soft = {"status": 200, "resp_body": {"error": {"message": "boom", "type": "server_error"}}}
    measured = {"/v1/responses": {**RESPONSES, **soft}, "/v1/chat/completions": soft}
    for endpoint, fields in measured.items():
        [row] = rows([record(**fields)]).to_dict("records")
        assert (row["code"], row["endpoint"]) == ("soft_error_200", endpoint)
        quoted = "What clients do with such an answer (measured): openai-python: " in row["remedy"]
        assert quoted == (endpoint == "/v1/responses"), row["remedy"]


NESTJS_404: dict[str, Any] = {
    **RESPONSES,
    "status": 404,
    "resp_body": {"message": "Cannot POST /v1/responses", "error": "Not Found", "statusCode": 404},
}


@pytest.mark.parametrize(
    ("headers", "body", "provider", "evidence"),
    [
        # a framework's marks are shared by every server built on it: no product
        ([("x-powered-by", "Express")], None, U, "x-powered-by: Express"),
        ([("server", "uvicorn")], {"detail": "Not Found"}, U, "server: uvicorn"),
        ([], {"detail": "Not Found"}, U, "FastAPI's default answer (signature vllm.not_found)"),
        ([], {"detail": "No route"}, U, 'FastAPI-style {"detail": …} body'),
        ([("server", "nginx/1.25.3")], None, U, "server: nginx/1.25.3"),
        ([("server", "awselb/2.0")], None, U, "server: awselb/2.0"),
        ([("server", "hypercorn-h11")], None, U, "server: hypercorn-h11"),
        ([], None, U, "no header or answer names the server"),
        # a server that names itself (llama.cpp's server sets `Server: llama.cpp`), or a
        # product's own header
        ([("server", "llama.cpp")], None, "llama.cpp", "server: llama.cpp"),
        ([("server", "ollama/0.13.3")], None, "ollama", "server: ollama/0.13.3"),
        ([("x-litellm-version", "1.108.7")], None, "litellm", "x-litellm-version: 1.108.7"),
        ([("openai-version", "2020-10-01")], None, "openai", "openai-version: 2020-10-01"),
    ],
)
def test_provider_from_marks_with_evidence_and_confidence(
    headers: list[tuple[str, str]], body: Any, provider: str, evidence: str
) -> None:
    change = {**NESTJS_404, "resp_headers": headers}
    if body is not None:
        change["resp_body"] = body
    (row,) = rows([record(**change)]).to_dict("records")
    said = [e for e in row["evidence"] if e.startswith("provider ")]
    assert row["provider"] == provider and len(said) == 1 and evidence in said[0]
    if provider == U:
        assert row["summary"].startswith("the server does not implement")
    else:
        assert "high confidence" in said[0]


def test_remedies_stay_generic_unless_the_provider_is_identified() -> None:
    lm = rows([record(**RESPONSES, **ANSWERS["lmstudio.unexpected_endpoint"])])
    assert "LM Studio" in lm.iloc[0]["remedy"]
    express = {**RESPONSES, "status": 200, "resp_headers": [("x-powered-by", "Express")],
               "resp_body": {"error": "route POST /v1/responses unknown"}}  # fmt: skip
    for row in rows([record(**express)]).to_dict("records"):
        assert row["provider"] == U and "LM Studio" not in row["remedy"] + row["summary"]
    ollama_model = rows([record(**{**ANSWERS["ollama.model_not_found"], "body": chat_body("x")})])
    assert "ollama pull" in ollama_model.iloc[0]["remedy"]


def test_provider_from_another_exchange_of_the_same_backend() -> None:
    """A chain without marks takes its backend's: here a healthy Ollama chat elsewhere."""
    healthy = record(id="ok", resp_body={**chat_completion(), "system_fingerprint": "fp_ollama"})
    failing = record(id="bad", started=T0 + 1, **RESPONSES, **ANSWERS["ollama.page_not_found"])
    (row,) = rows([healthy, failing]).to_dict("records")
    assert row["provider"] == "ollama" and "Ollama" in row["remedy"]
    assert any("fp_ollama (on POST /v1/chat/completions)" in e for e in row["evidence"])
    other = record(id="other", label="elsewhere", **RESPONSES, **ANSWERS["ollama.page_not_found"])
    assert rows([healthy, other]).iloc[0]["provider"] == U


def test_a_string_error_is_read_with_its_sibling_message() -> None:
    """`{"error": "Not Found", "message": "Cannot POST …"}`: the answer names the route, which
    beats what the model list suggests (the request's model is not listed)."""
    listing = record(
        id="m", method="GET", path="/v1/models", body=None,
        resp_body={"object": "list", "data": [{"id": "llama3", "object": "model"}]},
    )  # fmt: skip
    df = rows([listing, record(id="r", started=T0 + 1, **NESTJS_404)])
    assert list(df["code"]) == ["endpoint_not_implemented"]
    assert any("Cannot POST /v1/responses" in e for e in df.iloc[0]["evidence"])


@pytest.mark.parametrize(
    ("streamed", "code"), [(False, "soft_error_200"), (True, "stream_error_event")]
)
def test_an_error_body_tagged_as_none_is_read_as_the_error_it_is(
    streamed: bool, code: str, tmp_path: Path
) -> None:
    """Another tool's record may tag a 200's error body `soft_error: false`: loading reads the
    answer, so the comparison, the verdict and the diagnoses read it as if it were tagged."""
    error = {"error": "Unexpected endpoint or method. (POST /v1/chat/completions)"}
    change: dict[str, Any] = (
        {**SSE, "events": [{"t_ms": 1.0, "event": None, "data": error}]}
        if streamed
        else {"resp_body": error}
    )
    base = record(id="b", label="openai")
    tagged = record(id="c", label="other", replay_of="b", started=T0 + 1, **change)
    assert tagged["tags"]["soft_error"]
    untagged = {**tagged, "tags": {**tagged["tags"], "soft_error": False}}
    seen = []
    for i, cand in enumerate((tagged, untagged)):
        path = tmp_path / f"{i}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in (base, cand)))
        records = load_records([path])
        analysis = analyze(records)
        v = analysis.verdicts
        seen.append(
            (
                records[1]["tags"],
                sorted(rows(records[1:])["code"]),
                sorted(set(analysis.divergences["kind"])),
                v.loc[v["label"] == "other", "verdict"].tolist(),
            )
        )
    assert seen[0] == seen[1]
    assert code in seen[0][1] and "soft_error" in seen[0][2]
    assert seen[0][3] == ["unsupported"]  # the server says it has no such endpoint


@pytest.mark.parametrize(
    ("message", "replay_of", "fix"),
    [
        ("TLS handshake failed: certificate verify failed", None, "ssl_verify_upstream_trusted_ca"),
        ("cannot connect to h:443: [SSL: CERTIFICATE_VERIFY_FAILED]", "o1", "SSL_CERT_FILE"),
        ("The remote server does not speak TLS.", None, "name it with http://"),
        ("cannot connect to h:80: [SSL: WRONG_VERSION_NUMBER] wrong version number", "o1",
         "name it with http://"),
    ],
    ids=["capture", "sent by wirediff", "capture, plain HTTP", "sent, plain HTTP"],
)  # fmt: skip
def test_a_failed_tls_handshake_names_the_fix_of_who_sent_it(
    message: str, replay_of: str | None, fix: str
) -> None:
    """mitmproxy's options fix the capture's trust; SSL_CERT_FILE fixes what wirediff sends."""
    rec = record(status=None, error={"kind": "tls", "message": message}, replay_of=replay_of)
    (row,) = rows([rec]).to_dict("records")
    assert row["code"] == "upstream_tls" and fix in row["remedy"]


def sse_text(events: list[Any]) -> str:
    """The decoded stream as the record keeps it (`response.text`)."""
    return "".join(f"data: {e['data'] if isinstance(e['data'], str) else json.dumps(e['data'])}\n\n"
                   for e in events)  # fmt: skip


def test_a_stream_error_is_read_from_the_error_event_not_the_stream_text() -> None:
    """The stream echoes the model id in every chunk: reading the text as the message made
    this `model_not_found`, quoting the first event."""
    error = {"error": {"message": "Context size has been exceeded.", "type": "server_error"}}
    events: list[Event] = [*chat_events(done=False), {"t_ms": 30.0, "event": None, "data": error}]
    rec = record(**SSE, events=events, resp_text=sse_text(events))
    (row,) = rows([rec]).to_dict("records")
    assert row["code"] == "stream_error_event"
    assert (
        'error event 4 of 4: "Context size has been exceeded." (type server_error)'
        in row["evidence"]
    )
    assert not any("chatcmpl" in e for e in row["evidence"])
    assert "max_tokens" in row["remedy"]


def test_a_stream_ended_with_an_error_event_is_not_truncated() -> None:
    events = responses_events(terminal=None)[:2]
    events.append({"t_ms": 20.0, "event": "error", "data": {
        "type": "error", "code": "server_error", "message": "The server had an error",
        "param": None, "sequence_number": 2}})  # fmt: skip
    change: dict[str, Any] = {**RESPONSES, "body": responses_body(stream=True),
                              "content_type": SSE_CT, "resp_body": None, "events": events}  # fmt: skip
    df = rows([record(**change)])
    assert list(df["code"]) == ["stream_error_event"]
    assert "proxy" not in df.iloc[0]["remedy"]


def test_the_servers_own_hint_is_part_of_the_remedy() -> None:
    change: dict[str, Any] = {"path": "/v1/embeddings", "body": {"model": "m", "input": "x"}, "status": 501,
              "resp_body": {"error": {"code": 501, "type": "not_supported_error",
                                      "message": "This server does not support embeddings. "
                                                 "Start it with `--embeddings`"}}}  # fmt: skip
    (row,) = rows([record(**change)]).to_dict("records")
    assert row["code"] == "endpoint_not_implemented"
    assert row["remedy"].endswith("(the server says: Start it with `--embeddings`)")


@pytest.mark.parametrize(
    ("case", "summary", "remedy"),
    [
        ("openai-unsupported-max-tokens", "over max_tokens", "does not support max_tokens"),
        ("previous-response-id-unsupported", "over previous_response_id",
         "send the whole conversation as input"),
        ("fastapi-422", "over max_tokens", "fix max_tokens"),
        ("llama-cpp-python-context-400", "the context length is exceeded", "set max_tokens"),
        ("missing-v1-but-rate-limited", "(answered 429", "slow down"),
        ("llamacpp-context-500", "Context size has been exceeded", "set max_tokens"),
        ("mitmproxy-tls", "TLS handshake", "ssl_verify_upstream_trusted_ca"),
        ("ws-refused-404", "refused the WebSocket upgrade", "client.responses.connect()"),
        ("wrong-method-answered-404", "answered 404: GET is not accepted", "send POST"),
        ("llama-cpp-python-empty-stream", "no [DONE] after 0 events", "server's log"),
        ("openai-no-key", "no API key was sent", "set OPENAI_API_KEY"),
        ("replayed-without-a-key", "no API key was sent", "with --api-key-env VAR"),
        ("plain-answer-cut", "the answer stopped before its end (server disconnected mid-answer)",
         "began its answer and did not finish it"),
        ("no-response", "the upstream could not be reached (Connection refused)",
         "start the server"),
    ],
)  # fmt: skip
def test_new_codes_name_what_the_answer_says(case: str, summary: str, remedy: str) -> None:
    change = next(c[1] for c in CASES if c[0] == case)
    (row,) = rows([record(**change)]).to_dict("records")
    assert summary in row["summary"] and remedy in row["remedy"], row
    if case == "mitmproxy-tls":
        assert "ssl_insecure" in row["remedy"]


@pytest.mark.parametrize(("n", "said"), [(1, "after 1 event of"), (3, "after 3 events of")])
def test_a_stop_mid_stream_counts_its_events_in_words(n: int, said: str) -> None:
    change = {**next(c[1] for c in CASES if c[0] == "stopped-mid-stream")}
    change["events"] = change["events"][:n]
    (row,) = rows([record(**change)]).to_dict("records")
    assert said in row["summary"], row["summary"]


def test_a_long_reason_is_quoted_with_an_ellipsis_where_it_is_cut() -> None:
    said = (
        "server disconnected mid-answer: peer closed connection without sending complete "
        "message body (received 290 bytes, expected 580)"
    )
    change = {**next(c[1] for c in CASES if c[0] == "plain-answer-cut")}
    change["error"] = {"kind": "upstream_disconnect", "message": said}
    (row,) = rows([record(**change)]).to_dict("records")
    assert (
        "(server disconnected mid-answer: peer closed connection without sending complete…)"
        in (row["summary"])
    ), row["summary"]


@pytest.mark.parametrize("status", [s.value for s in HTTPStatus if s.value >= 400])
@pytest.mark.parametrize(
    "body",
    [None, {"error": {"message": "x"}}, {"error": "x"}, {"detail": "x"}, {"message": "x"}, {}],
)
def test_any_failing_answer_gets_a_diagnosis(status: int, body: Any) -> None:
    rec = record(status=status, resp_body=body, content_type=None if body is None else JSON_CT)
    assert not rows([rec]).empty


@pytest.mark.parametrize(
    ("path", "fix"),
    [("/v1/v1/chat/completions", "drop one /v1"), ("/chat/completions", "append /v1")],
)
def test_path_prefix_remedies(path: str, fix: str) -> None:
    df = rows([record(path=path, status=404, resp_body={"error": {"message": "x"}})])
    assert list(df["code"]) == ["path_prefix"] and fix in df.iloc[0]["remedy"]


@pytest.mark.parametrize("websocket", [False, True])
def test_no_missing_v1_where_the_same_prefix_answered(websocket: bool) -> None:
    """A server that serves `POST /responses` at its root (open-responses-server) answers
    404 to what it lacks there: compact, or a WebSocket upgrade. It answered under the same
    prefix, so the prefix is right: the route or the upgrade is what it lacks."""
    served = record(id="ok", path="/responses", body=responses_body(),
                    resp_body={"id": "resp_1", "object": "response", "output": []})  # fmt: skip
    if websocket:
        asked: dict[str, Any] = {"method": "GET", "path": "/responses", "body": None,
                                 "headers": [*sdk_headers(), ("Upgrade", "websocket")]}  # fmt: skip
    else:
        asked = {"path": "/responses/compact", "body": responses_body()}
    missing = record(id="miss", started=T0 + 1, status=404, resp_body={"detail": "Not Found"},
                     **asked)  # fmt: skip
    assert list(rows([missing])["code"]) == ["path_prefix"]  # alone, the prefix is suspect
    code = "websocket_not_supported" if websocket else "endpoint_not_implemented"
    assert list(rows([served, missing])["code"]) == [code]


def test_model_not_found_from_the_servers_model_list() -> None:
    listing = record(
        id="m",
        method="GET",
        path="/v1/models",
        body=None,
        resp_body={"object": "list", "data": [{"id": "llama3", "object": "model"}]},
    )
    call = record(
        id="c", started=T0 + 1, status=400, resp_body={"error": {"message": "bad request"}}
    )
    df = rows([listing, call])
    assert list(df["code"]) == ["model_not_found"] and df.iloc[0]["exchange_ids"] == ["c"]
    assert "llama3" in df.iloc[0]["remedy"]
    # without the list the same answer is a rejected request, not a guessed model
    assert list(rows([call])["code"]) == ["request_rejected"]


def test_secrets_never_reach_the_output() -> None:
    recs = [
        record(**ANSWERS["openai.invalid_api_key"]),
        record(
            id="x2",
            **NO_KEY,
            status=401,
            resp_body={"error": {"message": f"bad token Bearer {KEY}"}},
            started=T0 + 9,
        ),
    ]
    df = rows(recs)
    text = format_diagnoses(df) + df.to_json(orient="records")
    assert KEY not in text and "lm-studio" not in text
    assert "sha256:" in text  # auth is shown by fingerprint


# ---- chains ---------------------------------------------------------------------------------


def test_redirect_method_change_explains_the_405() -> None:
    recs = redirected_post()
    df = rows(recs)
    assert list(df["code"]) == ["redirect_method_change"]
    row = df.iloc[0]
    assert row["exchange_ids"] == ["p", "g"]
    assert any("301" in e for e in row["evidence"]) and any("405" in e for e in row["evidence"])
    assert "https://api.test/v1/chat/completions" in row["remedy"]


def test_redirect_not_followed_in_capture() -> None:
    rec = record(
        status=302,
        content_type=None,
        resp_body=None,
        resp_headers=[("location", "https://api.test/v1/chat/completions")],
    )
    assert list(rows([rec])["code"]) == ["redirect_method_change"]


def test_redirect_keeping_the_method_is_fine() -> None:
    recs = [
        record(
            id="p",
            url="http://api.test/v1/chat/completions",
            status=308,
            content_type=None,
            resp_body=None,
            resp_headers=[("location", "https://api.test/v1/chat/completions")],
        ),
        record(id="q", url="https://api.test/v1/chat/completions", started=T0 + 0.1),
    ]
    assert rows(recs).empty


def two_hop(inner_key: str | None, status: int = 401) -> list[Record]:
    err: dict[str, Any] = {"status": status, "resp_body": {"error": "Unauthorized"}}
    return [
        record(id="outer", label="gateway", duration_ms=200.0, **err),
        record(
            id="inner",
            label="upstream",
            listener=INNER_LISTENER,
            started=T0 + 0.02,
            duration_ms=100.0,
            headers=sdk_headers(key=inner_key),
            **err,
        ),
    ]


@pytest.mark.parametrize("inner_key", [None, OTHER_KEY])
def test_auth_dropped_by_hop(inner_key: str | None) -> None:
    df = rows(two_hop(inner_key))
    assert list(df["code"]) == ["auth_dropped_by_hop"]
    row = df.iloc[0]
    assert row["exchange_ids"] == ["outer", "inner"] and "forward Authorization" in row["remedy"]
    assert row["label"] == "gateway"
    assert not any(KEY in e or OTHER_KEY in e for e in row["evidence"])


def test_hop_with_the_same_key_rejected_is_auth_rejected() -> None:
    assert list(rows(two_hop(KEY))["code"]) == ["auth_rejected"]


def test_proxy_that_did_not_forward_the_key() -> None:
    upstream = [h for h in sdk_headers() if h[0] != "Authorization"]
    rec = record(upstream_headers=upstream, status=401, resp_body={"error": "Unauthorized"})
    assert list(rows([rec])["code"]) == ["auth_dropped_by_hop"]


def test_fallback_chain_is_diagnosed_as_recovered() -> None:
    recs = [
        record(id="resp", **RESPONSES, **ANSWERS["ollama.page_not_found"]),
        record(id="chat", started=T0 + 0.2),
    ]
    df = rows(recs)
    assert list(df["code"]) == ["endpoint_not_implemented"]
    assert df.iloc[0]["exchange_ids"] == ["resp"] and df.iloc[0]["recovered"]


def test_two_hops_report_one_row_per_code() -> None:
    lm: dict[str, Any] = {**RESPONSES, **ANSWERS["lmstudio.unexpected_endpoint"]}
    recs = [
        record(id="o", duration_ms=200.0, **lm),
        record(id="i", listener=INNER_LISTENER, started=T0 + 0.02, duration_ms=100.0, **lm),
    ]
    df = rows(recs)
    assert sorted(df["code"]) == ["endpoint_not_implemented", "soft_error_200"]
    assert all(ids == ["o", "i"] for ids in df["exchange_ids"])


# ---- text ----------------------------------------------------------------------------------


def test_format_diagnoses() -> None:
    df = rows([record(**RESPONSES, **ANSWERS["lmstudio.unexpected_endpoint"])])
    text = format_diagnoses(df)
    assert "soft_error_200" in text and "endpoint_not_implemented" in text
    assert "fix: LM Studio" in text and "provider lmstudio" in text
    assert text.endswith("2 diagnoses in 1 chain\n")
    assert format_diagnoses(rows([record()])).startswith("no failing chains")


def test_json_round_trip_formats_too() -> None:
    df = rows([record(**ANSWERS["openai.no_api_key"], **NO_KEY)])
    back = pd.DataFrame(json.loads(df.to_json(orient="records")))
    assert format_diagnoses(back) == format_diagnoses(df)


# ---- WebSocket sessions -----------------------------------------------------------------


def ws_session(*server: list[Any], close: dict[str, Any] | None = None) -> Record:
    """A Responses WebSocket session as the capture records it: per turn a client
    `response.create`, then what the server sent."""
    events: list[Any] = []
    for turn in server:
        events.append({"t_ms": 1.0, "direction": "client", "event": "response.create",
                       "data": {"type": "response.create", "model": "gpt-4o-mini"}})  # fmt: skip
        events.extend({**e, "direction": "server"} for e in turn)
    rec = record(**{**WS, "status": 101, "content_type": None, "resp_body": None,
                    "events": events, **(close or {})})  # fmt: skip
    rec["tags"]["transport"] = "websocket"
    return rec


WS_ERROR = {"t_ms": 5.0, "event": "error", "data": {"type": "error", "status": 404, "error": {
    "type": "invalid_request_error", "code": "model_not_found", "param": "model",
    "message": "The model `gpt-9` does not exist or you do not have access to it."}}}  # fmt: skip


@pytest.mark.parametrize(
    ("session", "codes"),
    [
        (ws_session(), set()),
        (ws_session(responses_events(), responses_events()), set()),
        (ws_session(responses_events(), [WS_ERROR]), {"stream_error_event", "model_not_found"}),
        (ws_session(responses_events(terminal=None), close={
            "complete": False, "error": {"kind": "upstream_disconnect",
                                         "message": "WebSocket closed without a close handshake"}}),
         {"stream_truncated"}),
    ],
)  # fmt: skip
def test_websocket_sessions(session: Record, codes: set[str]) -> None:
    assert set(rows([session])["code"]) == codes


def test_the_documented_table_names_the_codes_in_order() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    table = text.split("| code | evidence it rests on |", 1)[1].split("\n\n", 1)[0]
    named = [c for row in table.splitlines()[2:] for c in re.findall(r"`(\w+)`", row.split("|")[1])]
    assert named == list(CODES)


def test_the_command_prints_chains_diagnosed_alike_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three calls refused alike, a second apart (separate chains), told apart only by
    their ids: one chain printed, with the three named; the count in words that agree."""
    from wirediff.cli import main
    from wirediff.record.store import RecordWriter

    lm: dict[str, Any] = {**RESPONSES, **ANSWERS["lmstudio.unexpected_endpoint"]}
    path = tmp_path / "s.jsonl"
    with RecordWriter(path) as w:
        for n in range(3):
            w.write(record(id=f"lm-{n:032x}", started=T0 + 600 * n, seq=n, **lm))
    assert main(["diagnose", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("3 chains diagnosed alike (ch-lm-")
    assert text.count("endpoint_not_implemented:") == 1
    assert text.endswith("6 diagnoses in 3 chains, 1 distinct\n")
    path.write_text(path.read_text().splitlines(keepends=True)[0])
    assert main(["diagnose", str(path)]) == 0
    assert capsys.readouterr().out.endswith("2 diagnoses in 1 chain\n")


def test_cut_answers_that_differ_only_by_how_much_came_fold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from wirediff.cli import main
    from wirediff.record.store import RecordWriter

    cut = {**next(c[1] for c in CASES if c[0] == "plain-answer-cut")}
    path = tmp_path / "s.jsonl"
    with RecordWriter(path) as w:
        for n, size in enumerate((290, 359)):
            said = (
                "server disconnected mid-answer: peer closed connection without sending complete "
                f"message body (received {size} bytes, expected {2 * size})"
            )
            error = {"kind": "upstream_disconnect", "message": said}
            w.write(
                record(id=f"cut-{n:032x}", started=T0 + 600 * n, seq=n, **{**cut, "error": error})
            )
    assert main(["diagnose", str(path)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("2 chains diagnosed alike (ch-cut-"), text
    assert "(received 290 bytes, expected 580)" in text  # the first chain's, as it came
    assert text.endswith("in 2 chains, 1 distinct\n"), text
    # and the report's failing chains, alike
    from wirediff.reports.hops import chain_groups

    written = load_records([path])
    [group] = chain_groups(rows(written), {r["id"]: r for r in written})
    assert group.count == 2


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


UNREADABLE = [
    ("JSON cut short", {"text": '{"id":"chatcmpl-1","object":"chat.comp'}, "a body that is not JSON"),
    ("empty", {"text": ""}, "an empty body"),
    ("not UTF-8", {"b64": _b64(b"\x89\xff\xfe wirediff \x80\x81")}, "a body of 15 bytes that is not UTF-8"),
    ("JSON after a newline", {"text": "\n" + json.dumps(chat_completion())}, None),
    ("UTF-16 JSON", {"b64": _b64(json.dumps(chat_completion()).encode("utf-16"))}, None),
    ("JSON with a NaN", {"text": json.dumps(chat_completion()).replace("1", "NaN", 1)}, None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kept", "said"), [c[1:] for c in UNREADABLE], ids=[c[0] for c in UNREADABLE]
)
def test_a_2xx_answer_the_sdk_cannot_read_is_diagnosed(
    kept: dict[str, Any], said: str | None
) -> None:
    """Graded as the real openai SDK reads the same bytes: it raises on those diagnosed."""
    rec = record(resp_body=None)
    resp = rec["response"]
    assert resp is not None
    resp["text"] = kept.get("text")
    if "b64" in kept:
        resp["b64"] = kept["b64"]
    raw = base64.b64decode(kept["b64"]) if "b64" in kept else kept["text"].encode()
    transport = httpx.MockTransport(
        lambda _: httpx.Response(200, headers={"content-type": JSON_CT}, content=raw)
    )
    client = openai.OpenAI(api_key="k", base_url="http://x/v1", max_retries=0,
                           http_client=httpx.Client(transport=transport))  # fmt: skip
    raised = None
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raised = e
    assert (raised is not None) == (said is not None), raised
    df = rows([rec])
    if said is None:
        assert df.empty
        return
    (row,) = df.to_dict("records")
    assert row["code"] == "answer_unreadable"
    assert row["summary"] == f"POST /v1/chat/completions: the server answered 200 with {said}"


@pytest.mark.parametrize(
    "change",
    [{"truncated": True}, {"path": "/v1/files/file-1/content", "method": "GET"}, {"status": 204},
     {"method": "OPTIONS"}, {"path": "/v1/responses/resp_1", "method": "DELETE"}],
    ids=["cut at the capture's cap", "a file's content", "a 204", "a CORS preflight",
         "a stored response deleted"],
)  # fmt: skip
def test_an_answer_that_need_not_be_json_is_not_judged(change: dict[str, Any]) -> None:
    """Nor does the SDK read it: `client.responses.delete()` takes an empty 200 (below)."""
    rec = record(resp_body=None, resp_text="OK", method=change.get("method", "POST"),
                 path=change.get("path", "/v1/chat/completions"), status=change.get("status", 200))  # fmt: skip
    resp = rec["response"]
    assert resp is not None
    if change.get("truncated"):
        resp["truncated"] = True
    assert rows([rec]).empty
    if change.get("method") == "DELETE":
        transport = httpx.MockTransport(lambda _: httpx.Response(200, content=b""))
        client = openai.OpenAI(api_key="k", base_url="http://x/v1", max_retries=0,
                               http_client=httpx.Client(transport=transport))  # fmt: skip
        client.responses.delete("resp_1")  # reads no body: nothing raised


def test_a_stream_asked_for_is_not_judged_as_json() -> None:
    """An event stream labeled application/json is read by the SDKs as the stream it is."""
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "x"}}]})
    rec = record(body={**chat_body(), "stream": True}, resp_body=None,
                 resp_text=f"data: {chunk}\n\ndata: [DONE]\n\n")  # fmt: skip
    assert "answer_unreadable" not in set(rows([rec])["code"])
