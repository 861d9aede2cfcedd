"""Diagnoses, one code at a time: a healthy base exchange plus one change from provider-facts.

Each row says which codes that one change must produce, and which provider it names.
The `unprofiled` rows say the same things in other words, on a server no profile
describes: the rules must still find the code, and name no provider.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest

from tests.fixtures.chain_records import (
    ANSWERS,
    INNER_LISTENER,
    KEY,
    OTHER_KEY,
    SSE_CT,
    T0,
    chat_body,
    chat_events,
    record,
    redirected_post,
    responses_body,
    responses_events,
    sdk_headers,
)
from wirediff._types import Record
from wirediff.analysis.diagnosis.diagnose import (
    CODES,
    DIAGNOSIS_COLUMNS,
    diagnose,
    format_diagnoses,
)
from wirediff.profiles import load_profiles, load_remedies

RESPONSES: dict[str, Any] = {"path": "/v1/responses", "body": responses_body()}
NO_KEY: dict[str, Any] = {"headers": sdk_headers(key=None)}
STREAM: dict[str, Any] = {"body": chat_body(stream=True)}
SSE: dict[str, Any] = {**STREAM, "content_type": SSE_CT, "resp_body": None}
DISCONNECT = {"kind": "client_disconnect", "message": "Client disconnected."}

# (case id, change to the healthy base, expected codes, expected provider)
CASES: list[tuple[str, dict[str, Any], set[str], str | None]] = [
    ("healthy", {}, set(), None),
    ("healthy-stream", {**SSE, "events": chat_events()}, set(), None),
    ("healthy-disconnect-after-done",
     {**SSE, "events": chat_events(), "complete": False, "error": DISCONNECT}, set(), None),
    ("healthy-responses-stream",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": responses_events()}, set(), None),
    # endpoint_not_implemented / soft_error_200
    ("lmstudio-responses", {**RESPONSES, **ANSWERS["lmstudio.unexpected_endpoint"]},
     {"soft_error_200", "endpoint_not_implemented"}, "lmstudio"),
    ("lmstudio-responses-stream",
     {**RESPONSES, "body": responses_body(stream=True), **ANSWERS["lmstudio.unexpected_endpoint"]},
     {"soft_error_200", "endpoint_not_implemented"}, "lmstudio"),
    ("unprofiled-soft-endpoint",
     {**RESPONSES, "status": 200, "resp_body": {"error": "no handler for POST /v1/responses"}},
     {"soft_error_200", "endpoint_not_implemented"}, None),
    ("unprofiled-soft-other", {"status": 200, "resp_body": {"error": "quota exhausted"}},
     {"soft_error_200"}, None),
    ("ollama-responses-404", {**RESPONSES, **ANSWERS["ollama.page_not_found"]},
     {"endpoint_not_implemented"}, "ollama"),
    ("vllm-responses-404", {**RESPONSES, **ANSWERS["vllm.not_found"]},
     {"endpoint_not_implemented"}, "vllm"),
    ("unprofiled-404-text", {**RESPONSES, "status": 404, "content_type": "text/plain",
                             "resp_text": "nothing here"}, {"endpoint_not_implemented"}, None),
    ("unprofiled-501", {**RESPONSES, "status": 501, "resp_body": {"error": {"message": "nope"}}},
     {"endpoint_not_implemented"}, None),
    ("vllm-stream-error-event",
     {**SSE, "events": [{"t_ms": 1.0, "event": None, "data": {"error": {"message": "boom"}}},
                        {"t_ms": 2.0, "event": None, "data": "[DONE]"}]},
     {"soft_error_200"}, None),
    ("responses-error-event",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": responses_events(terminal="error")}, {"soft_error_200"}, None),
    # method_not_allowed
    ("ollama-405", {"method": "GET", "body": None, **ANSWERS["ollama.method_not_allowed"]},
     {"method_not_allowed"}, "ollama"),
    ("vllm-405", {"method": "GET", "body": None, **ANSWERS["vllm.method_not_allowed"]},
     {"method_not_allowed"}, "vllm"),
    ("unprofiled-405", {"method": "PUT", "status": 405, "content_type": None, "resp_body": None},
     {"method_not_allowed"}, None),
    # auth
    ("openai-no-key", {**NO_KEY, **ANSWERS["openai.no_api_key"]}, {"auth_missing"}, "openai"),
    ("openai-wrong-key", ANSWERS["openai.invalid_api_key"], {"auth_rejected"}, "openai"),
    ("lmstudio-wrong-key", ANSWERS["lmstudio.invalid_api_key"], {"auth_rejected"}, "lmstudio"),
    ("vllm-no-key", {**NO_KEY, **ANSWERS["vllm.unauthorized"]}, {"auth_missing"}, "vllm"),
    ("unprofiled-403-no-key", {**NO_KEY, "status": 403, "content_type": "text/html",
                               "resp_text": "<h1>Forbidden</h1>"}, {"auth_missing"}, None),
    ("unprofiled-401-key", {"status": 401, "resp_body": {"message": "denied"}},
     {"auth_rejected"}, None),
    # path_prefix
    ("openai-doubled-v1", {"path": "/v1/v1/chat/completions", **ANSWERS["openai.invalid_url"]},
     {"path_prefix"}, "openai"),
    ("openai-missing-v1", {"path": "/chat/completions", **ANSWERS["openai.unknown_url"]},
     {"path_prefix"}, "openai"),
    ("vllm-missing-v1", {"path": "/chat/completions", **ANSWERS["vllm.not_found"]},
     {"path_prefix"}, "vllm"),
    ("unprofiled-doubled-v1", {"path": "/v1/v1/models", "method": "GET", "body": None,
                               "status": 404, "content_type": None, "resp_body": None},
     {"path_prefix"}, None),
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
     {"previous_response_not_found"}, None),
    ("openai-previous-not-found", {"path": "/v1/responses",
                                   "body": {**responses_body(), "previous_response_id": "resp_q"},
                                   "status": 400, "resp_body": {"error": {
                                       "message": "Previous response not found.",
                                       "type": "invalid_request_error", "param": None,
                                       "code": "previous_response_not_found"}}},
     {"previous_response_not_found"}, "openai"),
    # not what the words or the path suggest (review F17)
    ("missing-v1-but-rate-limited", {"path": "/chat/completions", "status": 429,
                                     "resp_body": {"error": {"message": "Rate limit reached",
                                                             "type": "requests", "code": None}}},
     set(), None),
    ("bad-parameter-mentions-model", {"status": 400, "resp_body": {"error": {
        "message": "Invalid value for 'temperature': model supports only 1.",
        "type": "invalid_request_error", "param": "temperature", "code": None}}}, set(), None),
    ("403-region-with-a-key", {"status": 403, "resp_body": {"error": {
        "message": "Country, region, or territory not supported",
        "type": "request_forbidden", "code": "unsupported_country_region_territory"}}},
     set(), None),
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
     {"model_not_found"}, None),
    # stream_not_honoured
    ("stream-answered-json", STREAM, {"stream_not_honoured"}, None),
    # stream_truncated
    ("chat-no-done", {**SSE, "events": chat_events(done=False)}, {"stream_truncated"}, None),
    ("chat-disconnect-before-done",
     {**SSE, "events": chat_events(done=False), "complete": False, "error": DISCONNECT},
     {"stream_truncated"}, None),
    ("chat-partial-tail", {**SSE, "events": chat_events(partial_tail=True)},
     {"stream_truncated"}, None),
    ("chat-upstream-cut", {**SSE, "events": chat_events(), "complete": False,
                           "error": {"kind": "upstream_disconnect", "message": "peer closed"}},
     {"stream_truncated"}, None),
    ("responses-no-completed",
     {**RESPONSES, "body": responses_body(stream=True), "content_type": SSE_CT, "resp_body": None,
      "events": responses_events(terminal=None)}, {"stream_truncated"}, None),
    # upstream_unreachable
    ("no-response", {"status": None, "error": {"kind": "upstream_unreachable",
                                               "message": "Connection refused"}},
     {"upstream_unreachable"}, None),
    ("proxy-502-html", {"status": 502, "content_type": "text/html",
                        "resp_text": "<html><body>502 Bad Gateway</body></html>"},
     {"upstream_unreachable"}, None),
    ("gateway-500-connect", {"status": 500, "resp_body": {"error": {
        "message": "litellm.APIConnectionError: Connection refused"}}},
     {"upstream_unreachable"}, None),
    ("server-500-is-not-an-endpoint-miss",
     {"status": 500, "resp_body": {"error": {"message": "endpoint crashed"}}}, set(), None),
    ("405-on-a-multi-method-route", {"method": "DELETE", "path": "/v1/responses/resp_1",
                                     "body": None, "status": 405, "resp_body": None,
                                     "content_type": None}, {"method_not_allowed"}, None),
    ("server-503-json-is-not-a-proxy", {"status": 503, "resp_body": {"error": {
        "message": "overloaded", "type": "server_error"}}}, set(), None),
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


def test_provider_from_headers_when_no_signature_matches() -> None:
    change = {
        **RESPONSES,
        "status": 200,
        "resp_headers": [("x-powered-by", "Express")],
        "resp_body": {"error": "route POST /v1/responses unknown"},
    }
    df = rows([record(**change)])
    assert set(df["provider"]) == {"lmstudio"}
    fastapi = rows([record(**RESPONSES, status=404, resp_body={"detail": "Nope"})])
    assert set(fastapi["provider"]) == {"vllm/litellm"}


@pytest.mark.parametrize(
    ("path", "fix"),
    [("/v1/v1/chat/completions", "drop one /v1"), ("/chat/completions", "append /v1")],
)
def test_path_prefix_remedies(path: str, fix: str) -> None:
    df = rows([record(path=path, status=404, resp_body={"error": {"message": "x"}})])
    assert list(df["code"]) == ["path_prefix"] and fix in df.iloc[0]["remedy"]


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
    # without the list the same answer stays undiagnosed rather than guessed
    assert rows([call]).empty


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
    assert text.endswith("2 diagnoses in 1 chains\n")
    assert format_diagnoses(rows([record()])).startswith("no failing chains")


def test_json_round_trip_formats_too() -> None:
    df = rows([record(**ANSWERS["openai.no_api_key"], **NO_KEY)])
    back = pd.DataFrame(json.loads(df.to_json(orient="records")))
    assert format_diagnoses(back) == format_diagnoses(df)
