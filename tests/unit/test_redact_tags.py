from __future__ import annotations

import json
import random

import pytest

from wirediff._types import Event
from wirediff.record.names import SECRET_FIELD, may_hold_secret_fields
from wirediff.record.redact import fingerprint, redact_headers, redact_url
from wirediff.record.tags import auth_tag, route, sdk_identity, soft_error, tag_exchange

KEY = "sk-test-CANARY-0123456789"


def test_fingerprint_is_stable_short_and_one_way() -> None:
    fp = fingerprint(KEY)
    assert fp == fingerprint(KEY) and fp.startswith("sha256:") and len(fp) == 19
    assert KEY not in fp and fingerprint(KEY + "x") != fp


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("Authorization", f"Bearer {KEY}", f"Bearer {fingerprint(KEY)}"),
        ("api-key", KEY, fingerprint(KEY)),
        ("X-Api-Key", KEY, fingerprint(KEY)),
        ("Cookie", f"session={KEY}", fingerprint(f"session={KEY}")),
        ("Set-Cookie", f"s={KEY}; Path=/", fingerprint(f"s={KEY}; Path=/")),
        ("Proxy-Authorization", f"Basic {KEY}", f"Basic {fingerprint(KEY)}"),
        ("X-Custom-Secret", KEY, fingerprint(KEY)),
        ("Content-Type", "application/json", "application/json"),
    ],
)
def test_redact_headers(name: str, value: str, expected: str) -> None:
    out = redact_headers([(name, value)], frozenset({"x-custom-secret"}))
    assert out == [[name.lower(), expected]]


def test_redact_url_query_and_userinfo() -> None:
    url = f"https://user:{KEY}@example.test/v1/models?key={KEY}&limit=2"
    out = redact_url(url)
    assert KEY not in out and "limit=2" in out and out.startswith("https://sha256:")
    assert redact_url("http://h/v1/models?limit=2") == "http://h/v1/models?limit=2"


@pytest.mark.parametrize(
    ("path", "family", "endpoint", "prefix"),
    [
        ("/v1/chat/completions", "chat.completions", "/v1/chat/completions", "/v1"),
        ("/v1/v1/chat/completions", "chat.completions", "/v1/chat/completions", "/v1/v1"),
        ("/chat/completions", "chat.completions", "/v1/chat/completions", ""),
        ("/openai/v1/responses?x=1", "responses", "/v1/responses", "/openai/v1"),
        ("/v1/responses/resp_123", "responses", "/v1/responses/{id}", "/v1"),
        ("/v1/responses/resp_1/input_items", "responses", "/v1/responses/{id}/input_items", "/v1"),
        ("/v1/completions", "completions", "/v1/completions", "/v1"),
        ("/v1/models", "models", "/v1/models", "/v1"),
        ("/v1/models/org/model:7b", "models", "/v1/models/{id}", "/v1"),
        ("/v1/embeddings", "embeddings", "/v1/embeddings", "/v1"),
        ("/v1/files/file-1/content", "files", "/v1/files/{id}/content", "/v1"),
        ("/v1/audio/speech", "audio", "/v1/audio/{op}", "/v1"),
        ("/v1/images/generations", "images", "/v1/images/{op}", "/v1"),
        ("/v1/moderations", "moderations", "/v1/moderations", "/v1"),
        ("/v1/batches/b1/cancel", "batches", "/v1/batches/{id}/cancel", "/v1"),
        ("/healthz", "other", "/healthz", ""),
    ],
)
def test_route(path: str, family: str, endpoint: str, prefix: str) -> None:
    assert route(path) == (family, endpoint, prefix)


SDK_HEADERS = [
    ["user-agent", "AsyncOpenAI/Python 2.54.0"],
    ["x-stainless-lang", "python"],
    ["x-stainless-package-version", "2.54.0"],
    ["x-stainless-os", "Linux"],
    ["x-stainless-arch", "x64"],
    ["x-stainless-runtime", "CPython"],
    ["x-stainless-runtime-version", "3.11.7"],
    ["x-stainless-async", "async:asyncio"],
    ["x-stainless-retry-count", "2"],
]


def test_sdk_identity_from_stainless_headers() -> None:
    sdk = sdk_identity(SDK_HEADERS)
    assert sdk is not None
    assert (sdk["lang"], sdk["version"], sdk["async"], sdk["runtime"]) == (
        "python",
        "2.54.0",
        True,
        "CPython",
    )


def test_sdk_identity_from_user_agent_only_and_absent() -> None:
    assert sdk_identity([["User-Agent", "OpenAI/Python 1.2.3"]]) == {
        "user_agent": "OpenAI/Python 1.2.3", "lang": "python", "version": "1.2.3", "async": False,
    }  # fmt: skip
    assert sdk_identity([["accept", "*/*"]]) is None


def test_js_sdk_is_async_though_it_sends_no_async_header() -> None:
    js = [["user-agent", "OpenAI/JS 6.49.0"], ["x-stainless-lang", "js"],
          ["x-stainless-package-version", "6.49.0"], ["x-stainless-runtime", "node"]]  # fmt: skip
    sdk = sdk_identity(js)
    assert sdk is not None and (sdk["lang"], sdk["version"], sdk["async"]) == ("js", "6.49.0", True)
    assert "client" not in sdk
    python_sync = sdk_identity([*SDK_HEADERS[1:3], ["x-stainless-async", "false"]])
    assert python_sync is not None and python_sync["async"] is False
    no_async_header = sdk_identity([["x-stainless-lang", "go"]])
    assert no_async_header is not None and no_async_header["async"] is False


@pytest.mark.parametrize(
    ("user_agent", "client", "version"),
    [
        ("codex_exec/0.171.0 (Debian 12.0.0; x86_64) xterm (codex_exec; 0.171.0)",
         "codex_exec", "0.171.0"),
        ("codex_cli_rs/0.50.0 (Mac OS 15.1.0; arm64) iTerm.app", "codex_cli_rs", "0.50.0"),
        ("litellm/1.108.7", "litellm", "1.108.7"),
        # the AI SDK's core and its provider's own calls: one client, one version
        ("ai/7.0.173 ai-sdk-provider-utils/5.0.81 node.js/v20.20.2", "ai-sdk", "5.0.81"),
        ("ai-sdk-openai/4.0.118 ai-sdk-provider-utils/5.0.81 node.js/v20.20.2",
         "ai-sdk", "5.0.81"),
        ("ai-sdk/openai/3.0.141 ai-sdk/provider-utils/4.0.66 runtime/node.js/v20.20.2",
         "ai-sdk", "4.0.66"),
        ("Agents/Python 0.24.0", "openai-agents", "0.24.0"),
        ("python-httpx/0.28.1", "python-httpx", "0.28.1"),
    ],
)  # fmt: skip
def test_an_application_named_in_the_user_agent_is_the_client(
    user_agent: str, client: str, version: str
) -> None:
    assert sdk_identity([["User-Agent", user_agent]]) == {
        "user_agent": user_agent, "client": client, "client_version": version,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("client", "upstream", "expected"),
    [
        ([["authorization", f"Bearer {KEY}"]], [["authorization", f"Bearer {KEY}"]],
         {"header": "authorization", "scheme": "Bearer", "fingerprint": fingerprint(KEY), "forwarded": True}),
        ([["authorization", f"Bearer {KEY}"]], [], {"forwarded": False}),
        ([["api-key", KEY]], [["api-key", KEY]], {"header": "api-key", "scheme": None, "forwarded": True}),
        ([["authorization", f"Bearer {KEY}"]], None, {"forwarded": None}),
        ([], [], None),
    ],
)  # fmt: skip
def test_auth_tag(
    client: list[list[str]], upstream: list[list[str]] | None, expected: dict[str, object] | None
) -> None:
    tag = auth_tag(client, upstream)
    if expected is None:
        assert tag is None
    else:
        assert tag is not None and {k: dict(tag)[k] for k in expected} == expected


@pytest.mark.parametrize(
    ("status", "body", "events", "expected"),
    [
        (200, {"error": "Unexpected endpoint or method. (POST /v1/responses)"}, None, True),
        (200, {"object": "error", "message": "x", "code": 404}, None, True),
        (200, {"id": "resp_1", "object": "response", "error": None}, None, False),
        (
            200,
            {"id": "resp_1", "object": "response", "error": {"code": "server_error"}},
            None,
            False,
        ),
        (404, {"error": {"message": "nope"}}, None, False),
        (200, None, [{"data": {"choices": []}}, {"data": {"error": {"message": "boom"}}}], True),
        (200, None, [{"data": "[DONE]"}], False),
        (None, None, None, False),
    ],
)
def test_soft_error(
    status: int | None, body: object, events: list[Event] | None, expected: bool
) -> None:
    assert soft_error(status, body, events) is expected


def test_tag_exchange_shapes() -> None:
    tags = tag_exchange(
        method="POST", path="/v1/responses", client_headers=SDK_HEADERS, upstream_headers=SDK_HEADERS,
        request_body={"model": "gpt-4o-mini", "input": "hi", "stream": True}, status=200,
        response_body=None, events=[], signature=None,
    )  # fmt: skip
    assert (
        tags["family"] == "responses" and tags["stream"] is True and tags["model"] == "gpt-4o-mini"
    )
    assert tags["retry"] == 2 and tags["auth"] is None
    get_model = tag_exchange(
        method="GET", path="/v1/models/llama3", client_headers=[], upstream_headers=[],
        request_body=None, status=404, response_body=None, events=None,
    )  # fmt: skip
    assert (
        get_model["model"] == "llama3" and get_model["stream"] is False and get_model["sdk"] is None
    )


FIELD_NAMES = [
    "api_key",
    "X-Api-Key",
    "apiKey",
    "token",
    "id_token",
    "Password",
    "passwd",
    "client_secret",
    "private_key",
    "credentials",
    "refresh-token",
]
OTHER_NAMES = [
    "prompt_tokens",
    "cached_tokens",
    "prompt_cache_key",
    "key",
    "monkey",
    "tokens",
    "secretary",
    "keys",
    "input",
    "usage",
    "model",
]


def test_the_pre_check_finds_a_credential_named_key_wherever_it_stands() -> None:
    """Same answer as looking at every key of the parsed JSON (what `redact_fields` walks),
    on random documents mixing credential names, look-alikes, and the names as values."""
    rng = random.Random(7)

    def doc(depth: int = 0) -> object:
        if depth > 3 or rng.random() < 0.3:
            return rng.choice([1, None, rng.choice(FIELD_NAMES + OTHER_NAMES), 'a"b'])
        if rng.random() < 0.4:
            return [doc(depth + 1) for _ in range(rng.randint(0, 3))]
        names = rng.sample(OTHER_NAMES + FIELD_NAMES[: rng.randint(0, 2)], rng.randint(0, 4))
        return {n: doc(depth + 1) for n in names}

    def keys(value: object) -> list[str]:
        if isinstance(value, dict):
            return [*value, *(k for v in value.values() for k in keys(v))]
        return [k for v in value for k in keys(v)] if isinstance(value, list) else []

    seen = {True: 0, False: 0}
    for _ in range(500):
        value = doc()
        text = json.dumps(value, indent=rng.choice([None, 1]))
        expected = any(SECRET_FIELD.match(k) for k in keys(value))
        assert may_hold_secret_fields(text) == expected, text
        seen[expected] += 1
    assert min(seen.values()) > 50
