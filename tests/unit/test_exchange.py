"""The exchange model and its adapters: a mitmproxy flow, an httpx exchange and a HAR entry
seen as an `Exchange`, and the same record out of the same exchange whoever saw it."""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Any

import brotli
import httpx
import pytest
import zstandard
from mitmproxy import http
from mitmproxy.addons.savehar import SaveHar
from mitmproxy.test import taddons, tflow, tutils

from tests.fixtures import records as fx
from tests.unit.test_capture_addon import KEY, chat_flow
from wirediff._types import Record
from wirediff.record.body import decode_body
from wirediff.record.build import build_record
from wirediff.record.exchange import Error, Exchange, Timings
from wirediff.record.flow import exchange_from_flow
from wirediff.record.importer import exchange_from_har
from wirediff.record.tap import StreamTap
from wirediff.replay.wire import exchange_from_httpx

T0 = 1_700_000_000.0
"""A start time every adapter carries exactly (binary fractions survive a HAR's ISO dates)."""
JSON_BODY = b'{"id":"c1","object":"chat.completion","choices":[]}'


def record(ex: Exchange) -> Record:
    return build_record(ex, session="s", label="l", seq=0, listener="x")


def without_id(rec: Record) -> dict[str, Any]:
    return {**rec, "id": None}


def answer(f: http.HTTPFlow) -> http.Response:
    assert f.response is not None
    return f.response


# --- decoding bodies: what mitmproxy's own reading gives ------------------------------------


@pytest.mark.parametrize(
    ("encoding", "raw"),
    [
        ("", JSON_BODY),
        ("identity", JSON_BODY),
        ("gzip", gzip.compress(JSON_BODY, mtime=0)),
        ("GZIP", gzip.compress(JSON_BODY, mtime=0)),
        ("deflate", zlib.compress(JSON_BODY)),
        ("deflate", zlib.compress(JSON_BODY)[2:-4]),  # raw deflate, no zlib wrapper
        ("br", brotli.compress(JSON_BODY)),
        ("zstd", zstandard.ZstdCompressor().compress(JSON_BODY)),
        ("gzip", JSON_BODY),  # says gzip, is not: kept as it came
        ("gzip", gzip.compress(JSON_BODY, mtime=0)[:-8]),  # cut short
        ("gzip", b""),
        ("x-unknown", JSON_BODY),
        ("utf8", JSON_BODY),  # a charset, not a content coding
        ("gzip, br", brotli.compress(gzip.compress(JSON_BODY, mtime=0))),
        ("base64", b"eyJhIjoxfQ=="),
    ],
)
def test_bodies_decode_as_mitmproxy_reads_them(encoding: str, raw: bytes) -> None:
    headers = http.Headers([(b"content-encoding", encoding.encode())] if encoding else [])
    resp = tutils.tresp(headers=headers, content=raw)
    assert decode_body(raw, encoding, 1 << 20) == resp.get_content(strict=False)


# --- flow -> Exchange ------------------------------------------------------------------------


def test_flow_adapter_keeps_bodies_as_they_crossed_the_wire() -> None:
    f = chat_flow()
    answer(f).headers["content-encoding"] = "gzip"
    answer(f).raw_content = gzip.compress(JSON_BODY, mtime=0)
    client = [("authorization", "Bearer x"), ("content-type", "application/json")]
    ex = exchange_from_flow(f, client_headers=client)
    assert ex.id == f.id and ex.error is None and ex.tap is None
    assert ex.request.method == "POST" and ex.request.path == "/v1/chat/completions"
    assert ex.request.url == "https://api.example.test/v1/chat/completions"
    assert ex.request.headers == list(f.request.headers.items(multi=True))  # type: ignore[no-untyped-call]
    assert ex.request.client_headers == client
    assert ex.response is not None and ex.response.content == answer(f).raw_content
    assert ex.response.content_encoding == "gzip"
    assert ex.timings == Timings(
        f.request.timestamp_start, answer(f).timestamp_start, answer(f).timestamp_end
    )
    rec = record(ex)
    assert fx.answer(rec)["body"]["object"] == "chat.completion"
    assert fx.answer(rec)["size"] == len(answer(f).raw_content or b"")
    assert (rec["request"].get("forwarded_headers") or [[""]])[0][0] == "content-type"  # upstream


def test_flow_adapter_takes_the_tap_and_the_error() -> None:
    f = chat_flow()
    answer(f).headers["content-type"] = "text/event-stream"
    tap = StreamTap(t0=f.request.timestamp_start)
    answer(f).stream = tap
    tap(b'data: {"a":1}\n\ndata: {"b"')
    f.error = tflow.terr("Server disconnected.")
    ex = exchange_from_flow(f)
    assert ex.tap is tap and ex.error == Error("Server disconnected.")
    rec = record(ex)
    assert [e["data"] for e in fx.events_of(rec)] == [{"a": 1}, '{"b"']
    assert fx.error_of(rec)["kind"] == "upstream_disconnect" and not fx.answer(rec)["complete"]


def test_flow_without_an_answer() -> None:
    f = chat_flow()
    f.response = None
    f.error = tflow.terr("Connection refused: [Errno 111]")
    ex = exchange_from_flow(f)
    assert ex.response is None and ex.timings.first_byte is None
    rec = record(ex)
    assert rec["response"] is None and rec["ttfb_ms"] is None
    assert fx.error_of(rec)["kind"] == "upstream_unreachable"


# --- httpx -> Exchange -----------------------------------------------------------------------


def test_httpx_adapter_sees_what_went_out_and_came_back() -> None:
    url = "http://[::1]:9000/v1/responses?x=1"
    req = httpx.Request("POST", url, headers=[(b"x-a", b"caf\xc3\xa9")], content=b"{}")
    resp = httpx.Response(201, headers=[(b"Content-Type", b"application/json"), (b"X-B", b"\xff")])
    timings = Timings(T0, T0 + 0.25, T0 + 0.5)
    ex = exchange_from_httpx(req, b"{}", resp, body=b'{"id":"r"}', timings=timings)
    assert ex.request.url == "http://[::1]:9000/v1/responses?x=1"
    assert ex.request.path == "/v1/responses?x=1" and ex.request.method == "POST"
    assert ex.request.headers[0] == ("Host", "[::1]:9000")
    assert ("x-a", "caf\u00e9") in ex.request.headers
    assert ex.response is not None and ex.response.reason == "Created"
    assert ex.response.headers == [("Content-Type", "application/json"), ("X-B", "\udcff")]
    rec = record(ex)
    assert (rec["ttfb_ms"], rec["duration_ms"]) == (250.0, 500.0)
    assert fx.answer(rec)["body"] == {"id": "r"} and fx.answer(rec)["status"] == 201


def test_httpx_url_is_the_one_the_server_saw() -> None:
    req = httpx.Request("GET", "http://u:p@a.test:8080/v1/models", headers={"host": "b.test"})
    ex = exchange_from_httpx(req, None, timings=Timings(T0))
    assert ex.request.url == "http://b.test/v1/models"  # the Host header, no credentials


@pytest.mark.parametrize(("content", "text"), [(None, None), (b"", "")])
def test_httpx_no_body_is_not_an_empty_body(content: bytes | None, text: str | None) -> None:
    req = httpx.Request("GET", "http://a.test/v1/models")
    ex = exchange_from_httpx(req, content, timings=Timings(T0), error=Error("refused", "skipped"))
    rec = record(ex)
    assert rec["request"]["text"] == text and rec["request"]["body"] is None
    assert rec["error"] == {"kind": "skipped", "message": "refused"}


# --- the same exchange through different adapters --------------------------------------------


def as_flow(
    req: httpx.Request, resp: httpx.Response, body: bytes, timings: Timings
) -> http.HTTPFlow:
    """The mitmproxy flow of exactly this exchange, as a proxy would have seen it."""
    f = tflow.tflow(resp=True)
    f.request = tutils.treq(
        method=req.method.encode(),
        scheme=req.url.scheme.encode(),
        host=req.url.host,
        port=req.url.port or 443,
        path=req.url.raw_path,
        headers=http.Headers(req.headers.raw),
        content=req.content,
        timestamp_start=timings.started,
    )
    f.response = tutils.tresp(
        status_code=resp.status_code,
        reason=resp.reason_phrase.encode(),
        headers=http.Headers(resp.headers.raw),
        content=body,
        timestamp_start=timings.first_byte,
        timestamp_end=timings.finished,
    )
    return f


CHAT = json.dumps({"model": "gpt-4o-mini", "messages": [], "stream": False}).encode()
SSE = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n'


@pytest.mark.parametrize(
    ("ctype", "encoding", "body", "status"),
    [
        ("application/json", "", JSON_BODY, 200),
        ("application/json", "gzip", gzip.compress(JSON_BODY, mtime=0), 200),
        ("application/json", "br", brotli.compress(f'{{"error": "{KEY}"}}'.encode()), 401),
        ("text/event-stream", "", SSE, 200),
        ("image/png", "", b"\x89PNG\r\n", 200),
    ],
)
def test_flow_and_httpx_adapters_give_the_same_record(
    ctype: str, encoding: str, body: bytes, status: int
) -> None:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    req = httpx.Request(
        "POST", "https://api.example.test/v1/chat/completions", headers=headers, content=CHAT
    )
    resp_headers = [("content-type", ctype)] + (
        [("content-encoding", encoding)] if encoding else []
    )
    resp = httpx.Response(status, headers=resp_headers)
    timings = Timings(T0, T0 + 0.25, T0 + 0.5)
    via_httpx = record(exchange_from_httpx(req, CHAT, resp, body=body, timings=timings))
    via_flow = record(exchange_from_flow(as_flow(req, resp, body, timings)))
    assert without_id(via_httpx) == without_id(via_flow)
    assert KEY not in json.dumps(via_httpx)


def test_a_tapped_stream_gives_the_same_record_through_both_adapters() -> None:
    req = httpx.Request("POST", "https://api.example.test/v1/chat/completions", content=CHAT)
    resp = httpx.Response(200, headers={"content-type": "text/event-stream"})
    timings = Timings(T0, T0 + 0.25, T0 + 0.5)
    tap = StreamTap(t0=T0)
    for i in range(0, len(SSE), 5):
        tap(SSE[i : i + 5])
    f = as_flow(req, resp, b"", timings)
    answer(f).stream = tap
    via_flow = record(exchange_from_flow(f))
    via_httpx = record(exchange_from_httpx(req, CHAT, resp, timings=timings, tap=tap))
    assert without_id(via_httpx) == without_id(via_flow)
    assert [e["data"] for e in fx.events_of(via_flow)][-1] == "[DONE]"


def har_entry(f: http.HTTPFlow) -> dict[str, Any]:
    """SaveHar's entry for `f` (it needs a running loop: call from async tests)."""
    with taddons.context():
        (entry,) = SaveHar().make_har([f])["log"]["entries"]
    return dict(entry)


async def test_flow_and_har_adapters_give_the_same_record() -> None:
    f = chat_flow()
    f.request.headers["content-length"] = str(len(f.request.raw_content or b""))
    f.request.timestamp_start, f.request.timestamp_end = T0, T0 + 0.125
    answer(f).timestamp_start, answer(f).timestamp_end = T0 + 0.25, T0 + 0.5
    f.server_conn.timestamp_tcp_setup = None  # no connection set up for this one: reused
    via_har = record(exchange_from_har(har_entry(f))[0])
    assert without_id(via_har) == without_id(record(exchange_from_flow(f)))
    assert (via_har["ttfb_ms"], via_har["duration_ms"]) == (250.0, 500.0)


async def test_har_adapter_reads_base64_bodies_and_the_wait() -> None:
    f = chat_flow()
    answer(f).headers["content-type"] = "image/png"
    answer(f).content = b"\x89PNG\r\n\x00\xff"
    entry = har_entry(f)
    assert entry["response"]["content"]["encoding"] == "base64"
    entry["timings"] = {"blocked": 1, "connect": -1, "send": 2, "wait": 7, "receive": 5}
    ex, _ = exchange_from_har(entry)
    assert ex.response is not None and ex.response.content == b"\x89PNG\r\n\x00\xff"
    assert ex.timings.first_byte == pytest.approx(ex.timings.started + 0.010)
    assert fx.answer(record(ex)).get("b64") == "iVBORw0KAP8="
