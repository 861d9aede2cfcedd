"""Secrets in the forms a capture meets them in besides headers: a key a browser offers as a
WebSocket subprotocol, a key past the body cap or a message's cap, a credential under
another field name, a key a prompt holds. Neither it nor any echo of it reaches the record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from tests.fixtures.har import refused_realtime_har
from tests.fixtures.records import events_of
from tests.unit.test_secrets import encodings
from wirediff.record.build import build_record
from wirediff.record.exchange import Exchange, Request, Response, Timings
from wirediff.record.importer import import_flows
from wirediff.record.redact import fingerprint
from wirediff.record.store import encode_record
from wirediff.record.websocket import WebSocketTap

KEY = "sk-proj-SUBPROTOCOL-CANARY-0a1b2c3d"
FIELD = "fv-FIELD-CANARY-4e5f6a7b8c"


def _line(ex: Exchange, body_cap: int = 1 << 20) -> str:
    return encode_record(
        build_record(ex, session="s", label="l", seq=0, body_cap=body_cap)
    ).decode()


def _nowhere(secret: str, line: str) -> None:
    for how, form in encodings(secret).items():
        assert form not in line, f"{secret!r} as {how} ({form!r}) is on disk"


def _echoes(secret: str) -> str:
    return " ".join(encodings(secret).values())


def _websocket(
    request_headers: list[tuple[str, str]],
    client: list[bytes],
    server: list[str],
    *,
    cap: int = 1 << 20,
    response_headers: tuple[tuple[str, str], ...] = (),
) -> Exchange:
    tap = WebSocketTap(t0=1.0, cap=cap)
    for sent in client:
        tap.message(WebSocketMessage(Opcode.TEXT, True, sent, 1.1))
    for answer in server:
        tap.message(WebSocketMessage(Opcode.TEXT, False, answer.encode(), 1.2))
    tap.close(1000, server[-1][:100], False, 1.3)
    return Exchange(
        request=Request(
            method="GET",
            url="https://api.test/v1/realtime?model=m",
            path="/v1/realtime?model=m",
            http_version="HTTP/1.1",
            headers=[("upgrade", "websocket"), *request_headers],
            content=None,
        ),
        response=Response(
            status=101,
            reason="Switching Protocols",
            http_version="HTTP/1.1",
            headers=[("upgrade", "websocket"), *response_headers],
            content=b"",
        ),
        timings=Timings(1.0, 1.1, 1.3),
        websocket=tap,
    )


def _post(body: bytes, content_type: str, echo: str) -> Exchange:
    return Exchange(
        request=Request(
            method="POST",
            url="https://api.test/v1/responses",
            path="/v1/responses",
            http_version="HTTP/1.1",
            headers=[("content-type", content_type)],
            content=body,
        ),
        response=Response(
            status=401,
            reason="Unauthorized",
            http_version="HTTP/1.1",
            headers=[("content-type", "application/json"), ("x-echo", echo[:2000])],
            content=json.dumps({"error": {"message": f"bad key {echo}"}}).encode(),
        ),
        timings=Timings(1.0, 1.1, 1.2),
    )


def test_a_key_offered_as_a_subprotocol_and_its_echoes_never_reach_the_record() -> None:
    offered = f"realtime, openai-insecure-api-key.{KEY}, openai-beta.realtime-v1"
    ex = _websocket(
        [("sec-websocket-protocol", offered)],
        [b'{"type": "session.update"}'],
        [json.dumps({"type": "error", "message": _echoes(KEY)}), _echoes(KEY)],
        response_headers=(("sec-websocket-protocol", offered), ("x-echo", _echoes(KEY))),
    )
    line = _line(ex)
    _nowhere(KEY, line)
    rec = json.loads(line)
    kept = f"realtime, openai-insecure-api-key.{fingerprint(KEY)}, openai-beta.realtime-v1"
    assert ["sec-websocket-protocol", kept] in rec["request"]["headers"]
    assert ["sec-websocket-protocol", kept] in rec["response"]["headers"]


def test_a_key_offered_as_a_subprotocol_is_not_imported_from_a_har(tmp_path: Path) -> None:
    har = refused_realtime_har(tmp_path / "s.har", KEY, list(encodings(KEY).values()))
    (rec,) = import_flows(har)
    _nowhere(KEY, encode_record(rec).decode())


@pytest.mark.parametrize("at", ["after the cap", "across the cap"])
def test_a_field_past_the_body_cap_is_found_and_its_echoes_scrubbed(at: str) -> None:
    cap = 4096
    head = json.dumps({"model": "m", "input": "x" * 5000})[:-1] + ', "api_key": "'
    if at == "across the cap":
        head = json.dumps({"model": "m", "input": "x" * (cap - 60)})[:-1] + ', "api_key": "'
        assert len(head) + 10 < cap < len(head) + len(FIELD)
    body = (head + FIELD + '"}').encode()
    line = _line(_post(body, "application/json", _echoes(FIELD)), body_cap=cap)
    _nowhere(FIELD, line)
    rec = json.loads(line)
    assert rec["request"]["truncated"] is True
    if at == "across the cap":  # what the cut left of it is a secret too
        assert FIELD[:10] not in line and rec["request"]["text"].endswith(
            fingerprint(FIELD[: cap - len(head)])
        )


def test_a_field_past_a_messages_cap_is_found_and_its_echoes_scrubbed() -> None:
    big = json.dumps({"type": "session.update", "pad": "x" * 5000, "api_key": FIELD}).encode()
    ex = _websocket([], [big], [json.dumps({"type": "error", "echo": _echoes(FIELD)})], cap=1024)
    line = _line(ex)
    _nowhere(FIELD, line)
    client, *_ = events_of(json.loads(line))
    assert client["truncated"] is True


NAMES = [
    "openai_api_key", "OPENAI_API_KEY", "azure-api-key", "authorization", "Authorization",
    "key", "token", "secret", "client_secret", "openai_key", "secret_key", "db_password",
    "access_token", "credentials",
]  # fmt: skip
NOT_NAMES = ["prompt_cache_key", "max_tokens", "monkey", "keys", "tokenizer", "secrets_count"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("form", ["json", "form", "websocket"])
def test_a_credential_under_any_of_its_names_is_fingerprinted_with_its_echoes(
    name: str, form: str
) -> None:
    echo = _echoes(FIELD)
    fields = {"model": "m", name: FIELD}
    if form == "json":
        ex = _post(json.dumps(fields).encode(), "application/json", echo)
    elif form == "form":
        text = "&".join(f"{k}={quote_plus(v)}" for k, v in fields.items())
        ex = _post(text.encode(), "application/x-www-form-urlencoded", echo)
    else:
        ex = _websocket([], [json.dumps(fields).encode()], [json.dumps({"echo": echo})])
    line = _line(ex)
    _nowhere(FIELD, line)
    if form == "json":
        assert json.loads(line)["request"]["body"][name] == fingerprint(FIELD)


@pytest.mark.parametrize("name", NOT_NAMES)
def test_a_field_of_another_name_is_kept(name: str) -> None:
    body: dict[str, Any] = {"model": "m", name: FIELD}
    rec = json.loads(_line(_post(json.dumps(body).encode(), "application/json", "")))
    assert rec["request"]["body"][name] == FIELD


def test_a_key_a_prompt_holds_is_fingerprinted_with_its_echoes() -> None:
    pasted = "sk-proj-PASTED-CANARY-9z8y7x6w5v4u"
    body = json.dumps({"model": "m", "input": f"why is {pasted} refused?"}).encode()
    line = _line(_post(body, "application/json", _echoes(pasted)))
    _nowhere(pasted, line)
    assert fingerprint(pasted) in json.loads(line)["request"]["body"]["input"]
