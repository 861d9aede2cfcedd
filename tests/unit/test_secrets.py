"""Secrets in every encoding: whatever form an upstream echoes a credential in, the record
holds only its fingerprint."""

from __future__ import annotations

import base64
import dataclasses
import json
import random
import re
from urllib.parse import quote, quote_plus

import pytest
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from tests.fixtures.records import answer, events_of, websocket_of
from wirediff.record.build import build_record
from wirediff.record.exchange import Exchange, Request, Response, Timings
from wirediff.record.redact import PREFIXLESS, fingerprint
from wirediff.record.scrub import REDACTED, scrub_output
from wirediff.record.store import encode_record
from wirediff.record.websocket import WebSocketTap

KEY = "sk-CANARY/9f8e+7d6c"
USER, PASSWORD = "alice", "pw-CANARY-5b4a"
FIELD = "fk-CANARY-3e2d1c"


def encodings(secret: str) -> dict[str, str]:
    """How an upstream may echo `secret` (what must never reach disk): in every encoding,
    upper- and lower-cased, and without the prefix that marks it a key (`sk-`) as text."""
    out = _encoded(secret)
    for how in ("plain", "url", "form"):
        out[f"{how}, lower-case"], out[f"{how}, upper-case"] = out[how].lower(), out[how].upper()
    mark = re.match(r"[A-Za-z]{2,4}-", secret)
    if mark and len(secret) - mark.end() >= PREFIXLESS:
        rest = _encoded(secret[mark.end() :])
        out.update({f"prefix-less {h}": rest[h] for h in ("plain", "json \\u", "url", "form")})
    return out


def _encoded(secret: str) -> dict[str, str]:
    raw = secret.encode()
    out = {
        "plain": secret,
        "json \\u": json.dumps(secret, ensure_ascii=True)[1:-1].replace("s", "\\u0073", 1),
        "json \\/": secret.replace("/", "\\/"),
        "url": quote(secret, safe=""),
        "url lower": re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(secret, safe="")),
        "form": quote_plus(secret),
        "url, each byte": "".join(f"%{b:02X}" for b in raw),
        "url, each byte lower": "".join(f"%{b:02x}" for b in raw),
        "url, a dash too": quote(secret, safe="").replace("-", "%2D"),
        "hex": raw.hex(),
        "HEX": raw.hex().upper(),
    }
    for lead in range(3):  # inside a longer base64 text, at each alignment
        b64 = base64.b64encode(b"x" * lead + raw).decode()
        out[f"base64+{lead}"] = b64[(8 * lead + 5) // 6 : (8 * (lead + len(raw))) // 6]
        out[f"base64url+{lead}"] = out[f"base64+{lead}"].replace("+", "-").replace("/", "_")
    return out


SECRETS = {"key": KEY, "basic": f"{USER}:{PASSWORD}", "password": PASSWORD, "field": FIELD}
ECHOES = [(name, how, form) for name, s in SECRETS.items() for how, form in encodings(s).items()]


def session(echo: str) -> WebSocketTap:
    """A WebSocket session whose client sends a key in a message, and whose server echoes
    `echo` in a JSON message, a text message and a binary one."""
    tap = WebSocketTap(t0=1.0)
    messages = [
        (True, Opcode.TEXT, json.dumps({"type": "session.update", "api_key": FIELD})),
        (False, Opcode.TEXT, f'{{"type":"error","message":"bad {echo}","echo":"{echo}"}}'),
        (False, Opcode.TEXT, echo),
        (False, Opcode.BINARY, f"bad {echo}"),
    ]
    for from_client, opcode, text in messages:
        tap.message(WebSocketMessage(opcode, from_client, text.encode(), 1.1))
    tap.close(1000, f"bad {echo}", False, 1.2)
    return tap


def answered(
    method: str,
    headers: list[tuple[str, str]],
    body: bytes | None,
    status: int,
    content_type: str,
    answer: bytes,
) -> Exchange:
    """A request to `/v1/responses` and its answer."""
    return Exchange(
        request=Request(
            method=method,
            url="https://api.test/v1/responses",
            path="/v1/responses",
            http_version="HTTP/1.1",
            headers=headers,
            content=body,
        ),
        response=Response(
            status=status,
            reason="OK" if status < 400 else "Unauthorized",
            http_version="HTTP/1.1",
            headers=[("content-type", content_type)],
            content=answer,
        ),
        timings=Timings(1.0, 1.1, 1.2),
    )


def exchange(echo: str, *, content_type: str = "application/json") -> Exchange:
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    body = json.dumps({"model": "m", "api_key": FIELD, "input": "hi"}).encode()
    answer = (
        f'{{"error":{{"message":"bad credential {echo}","echo":"{echo}"}}}}'
        if content_type == "application/json"
        else f'data: {{"type":"error","message":"bad {echo}"}}\n\ndata: {echo}\n\n'
    )
    ws = session(echo) if content_type == "websocket" else None
    return Exchange(
        request=Request(
            method="POST" if ws is None else "GET",
            url=f"https://api.test/v1/responses?key={quote(KEY, safe='')}",
            path=f"/v1/responses?key={quote(KEY, safe='')}",
            http_version="HTTP/1.1",
            headers=[
                ("authorization", f"Bearer {KEY}"),
                ("proxy-authorization", f"Basic {basic}"),
                ("content-type", "application/json"),
            ],
            content=body if ws is None else None,
        ),
        response=Response(
            status=401 if ws is None else 101,
            reason="Unauthorized",
            http_version="HTTP/1.1",
            headers=[
                ("content-type", content_type),
                ("www-authenticate", f'Bearer realm="{echo}"'),
                ("location", f"https://x.test/?next={echo}"),
            ],
            content=answer.encode() if ws is None else b"",
        ),
        timings=Timings(1.0, 1.1, 1.2),
        websocket=ws,
    )


@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream", "websocket"])
@pytest.mark.parametrize(("secret", "how", "form"), ECHOES)
def test_an_echo_in_any_encoding_never_reaches_the_record(
    secret: str, how: str, form: str, content_type: str
) -> None:
    line = encode_record(
        build_record(exchange(form, content_type=content_type), session="s", label="l", seq=0)
    ).decode()
    for other_how, other in encodings(SECRETS[secret]).items():
        assert other not in line, f"{secret} echoed as {how}: its {other_how} form is on disk"


def test_echoes_become_the_secret_fingerprint() -> None:
    rec = build_record(exchange(encodings(KEY)["json \\u"]), session="s", label="l", seq=0)
    assert answer(rec)["body"]["error"]["echo"] == fingerprint(KEY)
    assert rec["request"]["body"]["api_key"] == fingerprint(FIELD)


@pytest.mark.parametrize(
    ("line", "gone"),
    [
        ("127.0.0.1:5: GET http://h:1/v1/models?x=1&key=AIza-SECRET-123", "AIza-SECRET-123"),
        ("POST https://alice:pa55-word-9@h/v1/x", "alice:pa55-word-9"),
        ("    authorization: Bearer live-token-123456", "live-token-123456"),
        ("\x1b[34mx-api-key\x1b[0m: \x1b[1mmy-key-123456", "my-key-123456"),
        ('{"api_key": "field-secret-77"}', "field-secret-77"),
    ],
)
def test_what_mitmdump_prints_has_credentials_fingerprinted(line: str, gone: str) -> None:
    from wirediff.record.scrub import redact_log_text

    out = redact_log_text(line)
    assert gone not in out and ("sha256:" in out or "[redacted]" in out)
    assert redact_log_text("content-type: application/json") == "content-type: application/json"


def test_a_key_a_client_sends_in_a_session_and_its_echoes_become_its_fingerprint() -> None:
    rec = build_record(exchange(FIELD, content_type="websocket"), session="s", label="l", seq=0)
    client, error, text, binary = events_of(rec)
    assert client["data"] == {"type": "session.update", "api_key": fingerprint(FIELD)}
    assert error["event"] == "error" and error["data"]["echo"] == fingerprint(FIELD)
    assert text["data"] == fingerprint(FIELD)
    b64 = binary.get("b64") or ""
    assert b64.startswith("YmFkI") and fingerprint(FIELD) in b64
    assert websocket_of(rec)["close_reason"] == f"bad {fingerprint(FIELD)}"


@pytest.mark.parametrize("short", ["pw12", "12345", "a.b"])
def test_a_short_secret_is_scrubbed_where_it_stands_alone(short: str) -> None:
    """Below six characters a secret would match ordinary text inside words; where it stands
    as a token (quoted, after a space, URL-encoded in a query) it is fingerprinted."""
    basic = base64.b64encode(f"bob:{short}".encode()).decode()
    said = json.dumps(
        {"error": {"message": f"password {short} rejected", "echo": short, "next": f"?p={short}"}}
    )
    ex = answered(
        "POST",
        [("authorization", f"Basic {basic}"), ("content-type", "application/json")],
        json.dumps({"model": "m", "api_key": short}).encode(),
        401,
        "application/json",
        said.encode(),
    )
    rec = build_record(ex, session="s", label="l", seq=0)
    error = answer(rec)["body"]["error"]
    fp = fingerprint(short)
    assert error == {"message": f"password {fp} rejected", "echo": fp, "next": f"?p={fp}"}
    assert rec["request"]["body"]["api_key"] == fp
    kept = build_record(
        Exchange(
            request=ex.request,
            response=Response(
                status=200,
                reason="OK",
                http_version="HTTP/1.1",
                headers=[("content-type", "application/json")],
                content=json.dumps({"text": f"x{short}y {short}0"}).encode(),
            ),
            timings=ex.timings,
        ),
        session="s",
        label="l",
        seq=0,
    )
    assert answer(kept)["body"] == {"text": f"x{short}y {short}0"}


def test_a_records_capture_error_has_the_secrets_fingerprinted() -> None:
    from wirediff.record.build import fallback_record

    rec = fallback_record(exchange("x"), "s", ValueError(f"cannot parse {KEY}"), label="l")
    assert rec["error"] == {
        "kind": "capture_error",
        "message": f"ValueError: cannot parse {fingerprint(KEY)}",
    }


ANSWER_TOKEN = "at-CANARY-8c7b6a"


@pytest.mark.parametrize(
    "text",
    [
        '{"access_token": "%s", "score": NaN}',
        '{"refresh_token": "%s", "logprob": -Infinity}',
        '{"id_token": "%s", "big": 1e400}',
        "[" * 300 + '{"api_key": "%s"}' + "]" * 300,  # deeper than the record keeps as JSON
    ],
)
@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
def test_a_credential_field_in_json_kept_as_text_is_fingerprinted(
    text: str, content_type: str
) -> None:
    body = text % ANSWER_TOKEN
    content = f"data: {body}\n\n" if content_type == "text/event-stream" else body
    ex = answered("GET", [], None, 200, content_type, content.encode())
    line = encode_record(build_record(ex, session="s", label="l", seq=0)).decode()
    assert ANSWER_TOKEN not in line and fingerprint(ANSWER_TOKEN) in line


SHAPED = [
    ("API key provided: sk-abc123def", "sk-abc123def"),
    ("Incorrect API key provided: ABCDEF0123456789.", "ABCDEF0123456789"),
    ("Authorization: Bearer abcdef123456", "abcdef123456"),
    ("basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ("TOKEN  abcdefgh", "abcdefgh"),
    ("lm-studio1234", "studio1234"),
    ("rk-ABCDEFGH", "ABCDEFGH"),
    ("SK-PROJ-ABCDEFGH0123", "ABCDEFGH0123"),
    ("gsk_abcdefghijklmnop0123", "abcdefghijklmnop0123"),
    ("hf_abcdefghijklmnopqrst", "abcdefghijklmnopqrst"),
    ("?api_key=secret123", "secret123"),
    ("&access_token=xyz98765", "xyz98765"),
    ("?sig=zz9988776655", "zz9988776655"),
    ('"x-api-key": "k3y-value-1"', "k3y-value-1"),
    ('"openai_api_key":"zq-value-2"', "zq-value-2"),
    ('{"key": "kk-value-3"}', "kk-value-3"),
    ('"Authorization": "tok-value-4"', "tok-value-4"),
    ("client_secret=cs-value-5", "cs-value-5"),
    ("apiKey=abcdef99", "abcdef99"),
    ("API-KEY:'zzzzzzzz'", "zzzzzzzz"),
    ("realtime, openai-insecure-api-key.opaque-key-77", "opaque-key-77"),
]
"""A text shaped like a credential, and the credential in it."""
INNOCENT = [
    "token sha256:0123456789ab",
    "Authorization: Bearer sha256:0123456789ab",
    '"api_key": "sha256:0123456789ab"',
    '"api_key": 12345678',
    '"prompt_tokens": 1234567',
    '"max_tokens": "sixteen"',
    '"prompt_cache_key": "cache-me-please"',
    "monkey: bananas-and-more",
    "Api Key Provided:",
    "bAsIc",
    "key=",
    "sk-",
    "chatcmpl-zqL9UaIx6EdbfxWUBj1x83Ul",
    '{"error":{"message":"Unexpected endpoint or method. (POST /v1/responses)"}}',
    "é",
]
"""Texts near those shapes that hold no credential: left as they are."""


@pytest.mark.parametrize(("text", "secret"), SHAPED)
def test_what_goes_out_has_anything_shaped_like_a_credential_replaced(
    text: str, secret: str
) -> None:
    out = scrub_output(text)
    assert secret.lower() not in out.lower() and REDACTED in out, out
    assert scrub_output(text.upper()).count(REDACTED) == out.count(REDACTED)


@pytest.mark.parametrize("text", INNOCENT)
def test_what_is_no_credential_goes_out_as_it_is(text: str) -> None:
    assert scrub_output(text) is text


def test_shapes_in_any_mix_go_and_the_rest_stays() -> None:
    """Every mix of credentials and near misses, as a text, a JSON document (which stays
    JSON), a CSV line and markup: each credential gone, each near miss kept."""
    rng = random.Random(11)
    for _ in range(3000):
        parts = rng.choices(SHAPED + [(t, None) for t in INNOCENT], k=rng.randrange(1, 6))
        texts = [t for t, _ in parts]
        for doc in (" | ".join(texts), json.dumps({"m": texts}), ",".join(texts)):
            out = scrub_output(doc)
            for text, secret in parts:
                if secret is not None:
                    assert secret.lower() not in out.lower(), (doc, out)
                elif doc.startswith(texts[0]):
                    assert text in out, (doc, out)
        as_json = json.dumps({"m": texts})
        assert json.loads(scrub_output(as_json))["m"] == [scrub_output(t) for t in texts]


def test_the_scrub_keeps_structures_and_their_identity() -> None:
    value = {"reasons": ["fine", "sk-abcdefgh1234"], "n": 1, "token sk-abcdefgh1234": None}
    assert scrub_output(value) == {
        "reasons": ["fine", REDACTED], "n": 1, f"token {REDACTED}": None
    }  # fmt: skip
    same = {"reasons": ["fine"], "n": [1, ("a", "b")]}
    assert scrub_output(same) is same


BARE = "azCANARYbare0123456789abcdef"
"""A key of no known shape (Azure's, a gateway's): only where it was sent says it is one."""


@pytest.mark.parametrize(
    ("where", "header", "url"),
    [
        ("helicone-auth", ("helicone-auth", f"Bearer {BARE}"), ""),
        ("Azure API Management", ("ocp-apim-subscription-key", BARE), ""),
        ("x-openai-key", ("x-openai-key", BARE), ""),
        ("a scheme of its own", ("authorization", f"ApiKey {BARE}"), ""),
        ("a tab after the scheme", ("authorization", f"Bearer\t{BARE}"), ""),
        ("?client_secret=", None, f"?client_secret={BARE}"),
        ("?password=", None, f"?password={BARE}"),
        ("?access-token=", None, f"?access-token={BARE}"),
    ],
)
def test_a_key_sent_where_gateways_put_it_never_reaches_the_record(
    where: str, header: tuple[str, str] | None, url: str
) -> None:
    """Sent in a header or a query parameter that names a credential, and quoted back by a
    401 and its `www-authenticate`: fingerprinted in the request and in every echo."""
    ex = answered(
        "POST",
        [("content-type", "application/json"), *([header] if header else [])],
        b'{"model": "m"}',
        401,
        "application/json",
        json.dumps({"error": {"message": f"Incorrect API key provided: {BARE}"}}).encode(),
    )
    assert ex.response is not None
    ex = dataclasses.replace(
        ex,
        request=dataclasses.replace(
            ex.request, url=ex.request.url + url, path=ex.request.path + url
        ),
        response=dataclasses.replace(
            ex.response,
            headers=[*ex.response.headers, ("www-authenticate", f'Bearer error="{BARE}"')],
        ),
    )
    line = encode_record(build_record(ex, session="s", label="l", seq=0)).decode()
    for how, form in encodings(BARE).items():
        assert form not in line, f"sent as {where}: its {how} form is on disk"
    assert fingerprint(BARE) in line


def test_a_credential_field_of_a_multipart_upload_is_fingerprinted() -> None:
    """`/v1/audio/transcriptions` with `api_key` as a form field beside the file (how
    httpx writes it): the field and its echo become the fingerprint, the file stays."""
    import httpx

    upload = httpx.Request(
        "POST",
        "https://api.test/v1/audio/transcriptions",
        data={"model": "whisper-1", "api_key": BARE},
        files={"file": ("a.wav", b"RIFF-audio-bytes", "audio/wav")},
    )
    ex = answered(
        "POST",
        [("content-type", upload.headers["content-type"])],
        upload.read(),
        401,
        "application/json",
        json.dumps({"error": {"message": f"bad key {BARE}"}}).encode(),
    )
    line = encode_record(build_record(ex, session="s", label="l", seq=0)).decode()
    for how, form in encodings(BARE).items():
        assert form not in line, f"its {how} form is on disk"
    assert fingerprint(BARE) in line and "RIFF-audio-bytes" in line


def test_a_key_in_the_path_never_reaches_the_record_or_its_route() -> None:
    """`GET /v1/keys/sk-…` (a gateway's key management): the segment is fingerprinted in the
    url, the path and the route template the report lists endpoints by."""
    key = "sk-CANARYpath0123456789abcdef"
    ex = answered("GET", [], None, 200, "application/json", b'{"object": "key"}')
    ex = dataclasses.replace(
        ex,
        request=dataclasses.replace(
            ex.request, url=f"https://api.test/v1/keys/{key}", path=f"/v1/keys/{key}"
        ),
    )
    rec = build_record(ex, session="s", label="l", seq=0)
    line = encode_record(rec).decode()
    assert key not in line and "CANARYpath" not in line
    assert rec["tags"]["endpoint"] is None or key not in rec["tags"]["endpoint"]
    assert rec["request"]["path"] == f"/v1/keys/{fingerprint(key)}"


def test_a_key_under_any_header_name_but_an_address() -> None:
    """`--header x-team=sk-…` carries a key under a name no rule knows: its shape tells it, in
    the headers and in the answer's echo; a host shaped like a key is an address and kept."""
    team = "sk-team-SECRET-0987654321zzzz"
    host = "lm-gateway-0123456789.internal.example.com"
    ex = answered(
        "POST",
        [("host", host), ("origin", f"https://{host}"), ("x-team", team)],
        b'{"model": "m", "input": "hi"}',
        401,
        "application/json",
        f'{{"error": {{"message": "bad team {team} at {host}"}}}}'.encode(),
    )
    rec = build_record(ex, session="s", label="l", seq=0)
    text = json.dumps(rec)
    assert team not in text and fingerprint(team) in text
    sent = dict(rec["request"]["headers"])
    assert sent["x-team"] == fingerprint(team)
    assert sent["host"] == host and sent["origin"] == f"https://{host}"
    assert host in json.dumps(answer(rec)["body"])
