"""The request a replay sends, without sockets: the target URL, headers, auth and body, what
is skipped and why, and keys and fingerprints only where the user configured them."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.records import by_original, error_of
from tests.fixtures.replay_records import FP, Fake, T, broken, engine, kind, rec
from wirediff.errors import PlanError
from wirediff.replay.plan import make_plan
from wirediff.replay.request import prepare
from wirediff.replay.targets import Target, default_label, parse_pairs, parse_rate

AZURE = "https://az.example/openai/v1?api-version=2024-10-21"
REBASE_BASE: dict[str, Any] = {
    "path": "/v1/chat/completions",
    "target": "http://t:1/v1",
    "known": ("/v1/responses",),
}
"""An original's path, the target URL, and the paths of its session's other exchanges."""
OUTSIDE = "outside"
"""The path leaves the target's base path: not sent."""


@pytest.mark.parametrize(
    ("change", "url"),
    [
        ({}, "http://t:1/v1/chat/completions"),
        ({"target": "http://t:1/v1/"}, "http://t:1/v1/chat/completions"),
        ({"target": "http://t:1/api/v1"}, "http://t:1/api/v1/chat/completions"),
        ({"path": "/chat/completions"}, "http://t:1/v1/chat/completions"),
        ({"path": "/openai/v1/responses?x=1"}, "http://t:1/v1/responses?x=1"),
        ({"path": "/v1/models/gpt-4o-mini"}, "http://t:1/v1/models/llama3.2"),
        # a path no route knows: cut after the session's API prefix, else kept whole, which
        # only a target without a base path takes
        ({"path": "/v1/ask_url"}, "http://t:1/v1/ask_url"),
        ({"path": "/v1/ask_url?q=1"}, "http://t:1/v1/ask_url?q=1"),
        ({"path": "/v1"}, "http://t:1/v1"),
        ({"path": "/v1/v1/ask_url"}, "http://t:1/v1/v1/ask_url"),  # doubled as it was
        ({"path": "/health"}, OUTSIDE),
        ({"path": "/health", "target": "http://t:1"}, "http://t:1/health"),
        ({"path": "/v1x/ask"}, OUTSIDE),
        ({"path": "/v1x/ask", "target": "http://t:1/"}, "http://t:1/v1x/ask"),
        ({"path": "/v1/ask_url", "target": "http://t:1/api/v1"}, "http://t:1/api/v1/ask_url"),
        ({"path": "/health", "target": "http://t:1/api/v1"}, OUTSIDE),
        ({"path": "/openai/v1/ask", "known": ("/openai/v1/responses",)}, "http://t:1/v1/ask"),
        ({"path": "/v1/ask", "known": ("/openai/v1/responses",)}, "http://t:1/v1/ask"),
        ({"path": "/ask_url", "known": ("/chat/completions",)}, "http://t:1/v1/ask_url"),
        ({"path": "/v1/ask_url", "known": ()}, "http://t:1/v1/ask_url"),  # /v1 assumed
        ({"path": "/health", "known": ()}, OUTSIDE),
        # the target URL's own query goes on every request, after the original's
        ({"target": AZURE}, "https://az.example/openai/v1/chat/completions?api-version=2024-10-21"),
        ({"target": AZURE, "path": "/v1/chat/completions?x=1&api-version=2024-02-01"},
         "https://az.example/openai/v1/chat/completions?x=1&api-version=2024-10-21"),
        ({"target": AZURE, "path": "/v1/ask_url"},
         "https://az.example/openai/v1/ask_url?api-version=2024-10-21"),
        ({"target": AZURE, "path": "/health"}, OUTSIDE),
        ({"target": "https://az.example/?api-version=1", "path": "/health"},
         "https://az.example/health?api-version=1"),
        ({"target": AZURE, "path": f"/v1/chat/completions?key={FP}"},
         "https://az.example/openai/v1/chat/completions?api-version=2024-10-21"),
        # key-like query parameters hold fingerprints: never sent
        ({"path": f"/v1/models?key={FP}&limit=5"}, "http://t:1/v1/models?limit=5"),
        ({"path": f"/v1/models?limit=5&API_KEY={FP}"}, "http://t:1/v1/models?limit=5"),
        ({"path": f"/v1/models?api%5Fkey={FP}&a=1"}, "http://t:1/v1/models?a=1"),
        ({"path": f"/v1/models?api-key={FP}&apikey={FP}&access_token={FP}&token={FP}"},
         "http://t:1/v1/models"),
        ({"path": f"/v1/ask_url?token={FP}&tokens=3"}, "http://t:1/v1/ask_url?tokens=3"),
    ],
)  # fmt: skip
def test_rebase(change: dict[str, Any], url: str) -> None:
    case = {**REBASE_BASE, **change}
    known = [rec(f"k{i}", "GET", p) for i, p in enumerate(case["known"])]
    probe = rec("probe", "GET", case["path"])
    node = make_plan([*known, probe]).by_id["probe"]
    t = Target("t", case["target"], model_map={"gpt-4o-mini": "llama3.2"})
    if url == OUTSIDE:
        with pytest.raises(
            PlanError, match=f"leads to .*, outside the target's base path '{t.path}'"
        ):
            prepare(probe, t, None, {}, api_prefixes=node.api_prefixes)
        return
    out = prepare(probe, t, None, {}, api_prefixes=node.api_prefixes)
    assert out.url == url
    secret = [p.partition("=")[0] for p in case["path"].partition("?")[2].split("&") if FP in p]
    assert out.dropped == tuple(f"query parameter {n.replace('%5F', '_')}" for n in secret)


def test_target_urls_base_origin_and_query() -> None:
    t = Target("az", AZURE + "#frag")
    assert (t.base, t.origin, t.query) == (
        "https://az.example/openai/v1", "https://az.example", "api-version=2024-10-21",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("header", "override", "sent", "dropped"),
    [
        (("x-team", "a"), None, ("x-team", "a"), ()),
        # the body is sent decoded, as the capture holds it
        (("content-encoding", "gzip"), None, None, ()),
        # a value the capture replaced by its fingerprint is not the value: not sent…
        (("x-portkey-api-key", FP), None, None, ("header x-portkey-api-key",)),
        (("x-gateway-auth", f"Bearer {FP}"), None, None, ("header x-gateway-auth",)),
        # …unless --header sets it
        (("x-portkey-api-key", FP), "pk-new", ("x-portkey-api-key", "pk-new"), ()),
        # a value that only looks alike is a value
        (("x-trace", "sha256:0123"), None, ("x-trace", "sha256:0123"), ()),
        (("x-trace", FP + "cd"), None, ("x-trace", FP + "cd"), ()),
    ],
)  # fmt: skip
def test_headers_passed_through_or_not(
    header: tuple[str, str], override: str | None, sent: tuple[str, str] | None,
    dropped: tuple[str, ...],
) -> None:  # fmt: skip
    base = [["host", "orig.test"], ["content-type", "application/json"],
            ["authorization", f"Bearer {FP}"]]  # fmt: skip
    r = rec("a", body={"model": "m"}, headers=[*base, list(header)])
    t = Target("t", "http://t:1/v1", headers={header[0]: override} if override else {})
    out = prepare(r, t, "sk-target", {})
    expected = [("content-type", "application/json"), ("authorization", "Bearer sk-target")]
    assert out.headers == expected + ([sent] if sent else [])
    assert out.dropped == dropped


def test_headers_auth_model_and_body() -> None:
    headers = [
        ["host", "orig.test"], ["content-length", "99"], ["connection", "keep-alive"],
        ["transfer-encoding", "chunked"], ["cookie", "sha256:c"], ["x-wirediff-label", "l"],
        ["accept-encoding", "gzip, deflate, br"], ["authorization", "Bearer sha256:abc"],
        ["x-stainless-lang", "python"], ["x-team", "a"], ["x-drop", "1"],
    ]  # fmt: skip
    r = rec("a", path="/v1/chat/completions", body={"model": "gpt-4o-mini", "n": "é"},
            headers=headers)  # fmt: skip
    t = Target("t", "http://t:1/v1", model_map={"*": "qwen"},
               headers={"X-Team": "b", "x-drop": None, "x-new": "1"})  # fmt: skip
    out = prepare(r, t, "sk-target", {})
    assert out.headers == [
        ("accept-encoding", "gzip, deflate, br"), ("authorization", "Bearer sk-target"),
        ("x-stainless-lang", "python"), ("x-team", "b"), ("x-new", "1"),
        ("content-type", "application/json"),
    ]  # fmt: skip
    assert out.content == '{"model":"qwen","n":"é"}'.encode()
    assert out.model == "qwen" and r["request"]["body"]["model"] == "gpt-4o-mini"
    assert ("authorization", "Bearer sk-target") not in prepare(r, t, None, {}).headers
    assert not any(k == "authorization" for k, _ in prepare(r, t, None, {}).headers)


def test_auth_keeps_the_originals_header_name_and_scheme() -> None:
    azure = rec("a", body={}, headers=[["api-key", "sha256:k"]])
    azure["tags"]["auth"] = {"header": "api-key", "scheme": None, "fingerprint": "sha256:k",
                             "forwarded": True}  # fmt: skip
    assert prepare(azure, T, "k2", {}).headers[0] == ("api-key", "k2")
    none = rec("b", body={}, headers=[])
    none["tags"]["auth"] = None
    assert ("authorization", "Bearer k3") in prepare(none, T, "k3", {}).headers


def test_text_and_binary_bodies() -> None:
    r = rec("a", path="/v1/files", headers=[["content-type", "text/plain"]])
    r["request"]["text"] = "plain"
    assert prepare(r, T, None, {}).content == b"plain"
    r["request"]["text"], r["request"]["b64"] = None, "AAEC"
    assert prepare(r, T, None, {}).content == b"\x00\x01\x02"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda q: None, None),
        (lambda q: q.update(b64="AAE"), "not valid base64"),
        (lambda q: q.update(b64="AA-C"), "not valid base64"),
        (lambda q: q.update(method=None), "has no method"),
        (lambda q: q.update(path=7), "has no path"),
        (lambda q: q.update(headers=[["x-only-a-name"]]), "not [name, value] pairs"),
        (lambda q: q.update(headers="x-a: 1"), "not [name, value] pairs"),
        (lambda q: q.update(headers=[["Upgrade", "websocket"]]), "WebSocket session"),
    ],
)
def test_malformed_originals_are_skipped_with_the_reason(
    change: Callable[[dict[str, Any]], object], why: str | None
) -> None:
    r, ok = broken(change), rec("ok", body={"model": "m"})
    plan = make_plan([r, ok], allow_unsafe=True)
    skip = plan.by_id["bad"].skip
    assert skip is None if why is None else why in str(skip)
    out, run = engine([r, ok], Fake(), allow_unsafe=True)
    by = by_original(out)
    assert kind(by["ok"]) is None and run.counts.done == 2
    if why is not None:
        assert kind(by["bad"]) == "skipped" and why in error_of(by["bad"])["message"]


def test_an_original_that_fails_while_being_sent_is_skipped_not_a_traceback() -> None:
    odd_name = rec("odd", body={"model": "m"}, headers=[["x-caf\u00e9", "1"]])
    latin = rec("latin", body={"model": "m"}, headers=[["x-city", "Z\u00fcrich"]])
    fake = Fake()
    out, _ = engine([odd_name, latin], fake)
    by = by_original(out)
    assert kind(by["odd"]) == "skipped"
    assert error_of(by["odd"])["message"].startswith("the captured request cannot be sent again")
    # a non-ASCII value goes out as the capture decoded it
    assert kind(by["latin"]) is None
    assert (b"x-city", "Zürich".encode()) in fake.seen[0].headers.raw


def test_targets_and_option_values() -> None:
    with pytest.raises(PlanError, match="not an http"):
        Target("x", "ftp://host/v1")
    with pytest.raises(PlanError, match="--api-key-env"):
        Target("x", "http://h/v1", headers={"authorization": "Bearer sk-secret"})
    assert default_label("http://127.0.0.1:1234/v1") == "127.0.0.1:1234"
    assert default_label("https://api.example.com/v1") == "api.example.com"
    assert parse_rate("5") == 5 and parse_rate("120/m") == 2 and parse_rate("3600/h") == 1
    for bad in ("0", "x/s", "5/fortnight", "-1"):
        with pytest.raises(PlanError, match="--rate"):
            parse_rate(bad)
    assert parse_pairs(["a=b=c", "k="], "--header", allow_empty=True) == {"a": "b=c", "k": ""}
    with pytest.raises(PlanError, match="--model-map"):
        parse_pairs(["a="], "--model-map", allow_empty=False)


def test_a_fingerprint_is_never_sent_as_a_value() -> None:
    body = {"model": "m", "input": "hi", "api_key": "sha256:0123456789ab",
            "auth": {"password": "sha256:aaaaaaaaaaaa", "user": "u"}}  # fmt: skip
    out = prepare(rec("a", body=body), T, None, {})
    sent = json.loads(out.content or b"")
    assert sent == {"model": "m", "input": "hi", "auth": {"user": "u"}}
    assert {"body field api_key", "body field auth.password"} <= set(out.dropped)


def test_basic_auth_carries_user_and_password_as_basic_wants_them() -> None:
    original = rec("a", body={"model": "m"})
    original["tags"]["auth"] = {"header": "authorization", "scheme": "Basic",
                                "fingerprint": "sha256:abc", "forwarded": True}  # fmt: skip
    out = prepare(original, T, "alice:pw-123", {})
    assert ("authorization", "Basic YWxpY2U6cHctMTIz") in out.headers
    out = prepare(original, T, "sk-raw-key", {})
    assert all(k != "authorization" for k, _ in out.headers)
    assert any("user:password" in d for d in out.dropped)
