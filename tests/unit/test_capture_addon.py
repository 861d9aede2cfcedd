"""The capture addon under mitmproxy's own test helpers: no sockets, real hooks."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from tests.fixtures.records import answer, auth_of, error_of, events_of, websocket_of
from wirediff._types import Record
from wirediff.addons.capture import Capture
from wirediff.record.flow import WEBSOCKET_TAP
from wirediff.record.store import load_records
from wirediff.record.websocket import WebSocketTap, turns

KEY = "sk-unit-CANARY-5f3e9a"


def chat_flow(body: bytes | None = None, **resp_kw: object) -> http.HTTPFlow:
    f = tflow.tflow(resp=True)
    f.request = tutils.treq(
        method=b"POST", path=b"/v1/chat/completions", host="api.example.test", port=443, scheme=b"https",
        headers=http.Headers(((b"content-type", b"application/json"),
                              (b"authorization", f"Bearer {KEY}".encode()),
                              (b"user-agent", b"OpenAI/Python 2.54.0"))),
        content=body if body is not None else b'{"model":"gpt-4o-mini","messages":[],"stream":false}',
    )  # fmt: skip
    f.response = tutils.tresp(
        headers=http.Headers(((b"content-type", b"application/json"), (b"content-length", b"0"))),
        content=b'{"id":"c1","object":"chat.completion","choices":[]}',
        **resp_kw,
    )
    return f


def flow_response(f: http.HTTPFlow) -> http.Response:
    """The response of a flow the test gave one."""
    assert f.response is not None
    return f.response


def run(
    tmp_path: Path, *flows: http.HTTPFlow, sse_chunks: list[bytes] | None = None, **options: object
) -> list[Record]:
    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, capture_dir=str(tmp_path), capture_session="t", **options)
        for f in flows:
            cap.requestheaders(f)
            if f.response is not None:
                cap.responseheaders(f)
            if sse_chunks is not None:
                stream = flow_response(f).stream
                assert callable(stream)
                passed = [stream(c) for c in sse_chunks]
                assert passed == sse_chunks, "the tap must return bytes unchanged"
            if f.error:
                cap.error(f)
            else:
                cap.response(f)
        cap.done()
    return load_records([tmp_path / "t.jsonl"])


async def test_json_exchange_is_recorded_and_redacted(tmp_path: Path) -> None:
    (rec,) = run(tmp_path, chat_flow())
    assert rec["format"] == "wirediff/1" and rec["label"] == "api.example.test" and rec["seq"] == 0
    assert rec["request"]["body"]["model"] == "gpt-4o-mini"
    assert answer(rec)["body"]["object"] == "chat.completion"
    assert auth_of(rec)["forwarded"] is True and rec["tags"]["family"] == "chat.completions"
    assert KEY not in (tmp_path / "t.jsonl").read_text()


async def test_label_and_extra_redaction_options(tmp_path: Path) -> None:
    f = chat_flow()
    f.request.headers["x-org-token"] = "org-secret-42"
    (rec,) = run(tmp_path, f, capture_label="vllm", capture_redact="X-Org-Token")
    assert rec["label"] == "vllm"
    assert "org-secret-42" not in (tmp_path / "t.jsonl").read_text()


async def test_header_change_by_a_later_addon_shows_as_not_forwarded(tmp_path: Path) -> None:
    f = chat_flow()
    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, capture_dir=str(tmp_path), capture_session="t")
        cap.requestheaders(f)
        del f.request.headers["authorization"]  # e.g. a gateway addon dropping the key
        cap.response(f)
        cap.done()
    (rec,) = load_records([tmp_path / "t.jsonl"])
    assert auth_of(rec)["forwarded"] is False
    forwarded = rec["request"].get("forwarded_headers")
    assert (
        forwarded is not None
        and ["authorization", rec["request"]["headers"][1][1]] not in forwarded
    )


async def test_sse_stream_tapped_gzip_decoded_and_bytes_untouched(tmp_path: Path) -> None:
    f = chat_flow()
    flow_response(f).headers["content-type"] = "text/event-stream"
    flow_response(f).headers["content-encoding"] = "gzip"
    stream = b'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    packed = gzip.compress(stream, mtime=0)
    chunks = [packed[i : i + 9] for i in range(0, len(packed), 9)] + [b""]
    (rec,) = run(tmp_path, f, sse_chunks=chunks)
    events = events_of(rec)
    assert [e["data"] for e in events] == [{"choices": [{"delta": {"content": "a"}}]}, "[DONE]"]
    assert all(isinstance(e["t_ms"], float) for e in events)
    assert answer(rec)["size"] == len(packed) and answer(rec)["text"] == stream.decode()


async def test_stream_cut_mid_event_then_error(tmp_path: Path) -> None:
    f = chat_flow()
    flow_response(f).headers["content-type"] = "text/event-stream"
    f.error = tflow.terr("Server disconnected.")
    (rec,) = run(tmp_path, f, sse_chunks=[b'data: {"a":1}\n\ndata: {"b"'])
    events = events_of(rec)
    assert events[-1]["partial"] is True and answer(rec)["complete"] is False
    assert error_of(rec)["kind"] == "upstream_disconnect"


async def test_client_disconnect_after_done_keeps_every_event(tmp_path: Path) -> None:
    f = chat_flow()
    flow_response(f).headers["content-type"] = "text/event-stream"
    f.error = tflow.terr("Client disconnected.")
    (rec,) = run(tmp_path, f, sse_chunks=[b"data: {}\n\n", b"data: [DONE]\n\n"])
    assert [e["data"] for e in events_of(rec)] == [{}, "[DONE]"]
    assert error_of(rec)["kind"] == "client_disconnect"


async def test_a_new_capture_file_takes_the_exchanges_in_flight(tmp_path: Path) -> None:
    """A capture file changed while running (mitmweb's options): what is in flight is
    recorded when it ends, in the new file, not cut short."""
    f = chat_flow()
    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, capture_dir=str(tmp_path), capture_session="t")
        cap.requestheaders(f)
        tctx.configure(cap, capture_session="u")
        cap.responseheaders(f)
        cap.response(f)
        cap.done()
    assert not (tmp_path / "t.jsonl").exists() or not load_records([tmp_path / "t.jsonl"])
    (rec,) = load_records([tmp_path / "u.jsonl"])
    assert rec["error"] is None and answer(rec)["complete"] is True


async def test_unreachable_upstream(tmp_path: Path) -> None:
    f = chat_flow()
    f.response = None
    f.error = tflow.terr("Connection refused: [Errno 111]")
    (rec,) = run(tmp_path, f)
    assert rec["response"] is None and error_of(rec)["kind"] == "upstream_unreachable"
    assert rec["ttfb_ms"] is None


@pytest.mark.parametrize(
    ("req_body", "resp_body", "ctype", "check"),
    [
        (b'{"model": "x", "messages": [', b"{}", "application/json",
         lambda r: r["request"]["text"] == '{"model": "x", "messages": [' and r["request"]["body"] is None),
        (b"\xff\xfe\x00bin", b"\x89PNG\r\n", "image/png",
         lambda r: "b64" in r["request"] and "b64" in r["response"]),
        (b"{}", b"", "application/json",
         lambda r: r["response"]["text"] == "" and r["response"]["size"] == 0),
        (b"{}", b"plain words", "text/plain", lambda r: r["response"]["text"] == "plain words"),
        (b"{}", b'{"x": "' + b"a" * 200 + b'"}', "application/json",
         lambda r: r["response"]["truncated"] is True and len(r["response"]["text"]) == 64),
    ],
)  # fmt: skip
async def test_bodies(
    tmp_path: Path, req_body: bytes, resp_body: bytes, ctype: str, check: Callable[[Record], bool]
) -> None:
    f = chat_flow(body=req_body)
    flow_response(f).headers["content-type"] = ctype
    flow_response(f).content = resp_body
    (rec,) = run(tmp_path, f, capture_body_cap=64)
    assert check(rec)


async def test_replay_headers_are_consumed(tmp_path: Path) -> None:
    f = chat_flow()
    f.request.headers["x-wirediff-replay-of"] = "orig-1"
    f.request.headers["x-wirediff-label"] = "ollama"
    (rec,) = run(tmp_path, f)
    assert (rec["replay_of"], rec["label"]) == ("orig-1", "ollama")
    assert "x-wirediff-replay-of" not in f.request.headers
    assert not any(k.startswith("x-wirediff") for k, _ in rec["request"]["headers"])


async def test_seq_follows_request_order_and_records_append(tmp_path: Path) -> None:
    recs = run(tmp_path, chat_flow(), chat_flow(), chat_flow())
    assert [r["seq"] for r in recs] == [0, 1, 2]
    assert len({r["id"] for r in recs}) == 3
    again = run(tmp_path, chat_flow())
    assert len(again) == 4  # appended, never overwritten


BAD_OPTIONS = [
    ({"capture_session": "../escape"}, "capture_session is a file name, not a path"),
    ({"capture_session": "gateway.2"}, "would read as part of the session 'gateway'"),
    ({"capture_body_cap": -1}, "capture_body_cap must be 0 or more bytes, not -1"),
    ({"capture_dir": "FILE"}, "is a file, not a directory"),
    ({"capture_rotate": "soon"}, "capture_rotate must be a size"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
async def test_bad_options_at_startup_are_one_logged_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, options: dict[str, object], message: str
) -> None:
    """An error logged while mitmdump starts makes it exit (its ErrorCheck addon)."""
    (tmp_path / "FILE").write_text("")
    options = {k: str(tmp_path / "FILE") if v == "FILE" else v for k, v in options.items()}
    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, **{"capture_dir": str(tmp_path), "capture_session": "ok", **options})
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and message in errors[0].getMessage()
    assert errors[0].exc_info is None and "\n" not in errors[0].getMessage()


async def test_unparsable_set_values_are_taken_and_reported(tmp_path: Path) -> None:
    cap = Capture()
    with taddons.context() as tctx:
        tctx.options.set("capture_body_cap=abc", "capture_lazy_connect=maybe", defer=True)
        tctx.master.addons.register(cap)
        assert cap.problems == [
            "capture_body_cap must be a whole number of bytes, not 'abc'",
            "capture_lazy_connect must be true or false, not 'maybe'",
        ]
        assert "capture_body_cap" not in tctx.options.deferred


async def test_a_boolean_without_a_value_is_true_as_mitmproxy_reads_it(tmp_path: Path) -> None:
    cap = Capture()
    with taddons.context() as tctx:
        tctx.options.set("capture_lazy_connect=", defer=True)
        tctx.master.addons.register(cap)
        assert cap.problems == []


async def test_a_misspelt_option_is_refused_naming_the_nearest(tmp_path: Path) -> None:
    """mitmproxy keeps a `--set` it does not know waiting for an addon to register it: a
    misspelt option would do nothing, without a word."""
    cap = Capture()
    with taddons.context() as tctx:
        tctx.options.set("capture_bodycap=5", "capture_sesion=x", "shadow_to=", defer=True)
        tctx.master.addons.register(cap)
        assert cap.problems == [
            "unknown option capture_bodycap (did you mean capture_body_cap?)",
            "unknown option capture_sesion (did you mean capture_session?)",
        ]
        assert set(tctx.options.deferred) == {"shadow_to"}  # another addon's, if loaded


async def test_capture_rotate_starts_numbered_parts(tmp_path: Path) -> None:
    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, capture_dir=str(tmp_path), capture_session="t", capture_rotate="1B")
        flows = [chat_flow() for _ in range(3)]
        for f in flows:
            cap.requestheaders(f)
            cap.response(f)
            cap.flush()
        cap.done()
    parts = [tmp_path / n for n in ("t.jsonl", "t.1.jsonl", "t.2.jsonl")]
    assert [json.loads(p.read_text())["id"] for p in parts] == [f.id for f in flows]


async def test_lines_are_json_and_flushed_per_record(tmp_path: Path) -> None:
    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, capture_dir=str(tmp_path), capture_session="t")
        f = chat_flow()
        cap.requestheaders(f)
        cap.response(f)
        cap.flush()  # the hook defers to the loop's next turn; a test has no next turn
        # not closed yet: the record must already be on disk
        lines = (tmp_path / "t.jsonl").read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["id"] == f.id
        cap.done()


async def test_loads_as_a_script_by_path() -> None:
    from tests.conftest import CAPTURE_ADDON

    with taddons.context() as tctx:
        module = tctx.script(CAPTURE_ADDON)
        (addon,) = module.addons
        assert type(addon).__name__ == "Capture"
        assert tctx.options.capture_dir == "captures" and tctx.options.capture_body_cap > 0


@pytest.mark.parametrize(
    ("message", "has_response", "kind"),
    [
        ("Client disconnected.", True, "client_disconnect"),
        ("Server disconnected without sending a response.", False, "upstream_disconnect"),
        ("Connection refused: [Errno 111] Connect call failed", False, "upstream_unreachable"),
        ("[Errno -2] Name or service not known", False, "upstream_unreachable"),
        ("TLS handshake failed: certificate verify failed", False, "tls"),
        ("Connection killed.", True, "killed"),
        ("read timed out", True, "timeout"),
        ("HTTP/2 protocol error: invalid frame", True, "proxy_error"),
    ],
)
def test_classify_error(message: str, has_response: bool, kind: str) -> None:
    from wirediff.record.build import classify_error

    assert classify_error(message, has_response) == kind


ECHO = f"Incorrect API key provided: {KEY}. You can find your API key at https://x."


def answer_with(f: http.HTTPFlow, content: bytes, **headers: str) -> None:
    resp = flow_response(f)
    for name, value in headers.items():
        resp.headers[name.replace("_", "-")] = value
    resp.content = content


@pytest.mark.parametrize(
    ("where", "mutate"),
    [
        ("401 body echo", lambda f: setattr(flow_response(f), "content", json.dumps(
            {"error": {"message": ECHO, "code": "invalid_api_key"}}).encode())),
        ("text echo", lambda f: answer_with(f, ECHO.encode(), content_type="text/plain")),
        ("secret-named request field", lambda f: setattr(f.request, "content", json.dumps(
            {"model": "m", "api_key": "sk-body-secret-123456"}).encode())),
        ("credential-named header", lambda f: f.request.headers.__setitem__(
            "x-goog-api-key", "AIza-header-secret-123456")),
        ("key in the query", lambda f: setattr(f.request, "path", "/v1/models?key=AIza-q-secret-9876")),
        ("set-cookie echo", lambda f: answer_with(f, b'{"session": "cookie-secret-abcdef"}',
                                                  set_cookie="sid=cookie-secret-abcdef; Path=/")),
    ],
)  # fmt: skip
async def test_secrets_echoed_anywhere_are_fingerprinted(
    tmp_path: Path, where: str, mutate: Callable[[http.HTTPFlow], object]
) -> None:
    f = chat_flow()
    mutate(f)
    assert len(run(tmp_path, f)) == 1
    text = (tmp_path / "t.jsonl").read_text()
    for secret in (KEY, "sk-body-secret-123456", "AIza-header-secret-123456",
                   "AIza-q-secret-9876", "cookie-secret-abcdef"):  # fmt: skip
        assert secret not in text, where
    assert "sha256:" in text


async def test_open_ended_body_is_streamed_and_kept(tmp_path: Path) -> None:
    f = chat_flow()
    del flow_response(f).headers["content-length"]
    flow_response(f).headers["content-type"] = "application/x-ndjson"
    chunks = [b'{"a": 1}\n', b'{"b": 2}\n', b""]
    (rec,) = run(tmp_path, f, sse_chunks=chunks)
    assert answer(rec)["events"] is None  # not SSE: kept, not split
    assert answer(rec)["text"] == '{"a": 1}\n{"b": 2}\n' and answer(rec)["size"] == 18


async def test_a_record_that_cannot_be_built_still_leaves_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wirediff.addons.capture as capture_module

    def broken(*args: object, **kw: object) -> None:
        raise ValueError("boom")

    monkeypatch.setattr(capture_module, "build_record", broken)
    (rec,) = run(tmp_path, chat_flow())
    assert rec["error"] == {"kind": "capture_error", "message": "ValueError: boom"}
    assert answer(rec)["status"] == 200 and rec["request"]["path"] == "/v1/chat/completions"
    assert rec["tags"]["family"] == "chat.completions"  # whole: `run` loaded it back


async def test_recording_waits_until_the_hook_has_returned(tmp_path: Path) -> None:
    import asyncio

    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, capture_dir=str(tmp_path), capture_session="t")
        f = chat_flow()
        cap.requestheaders(f)
        cap.response(f)  # returns at once: mitmproxy forwards the response now
        out = tmp_path / "t.jsonl"
        assert not out.exists() or out.read_text() == ""
        await asyncio.sleep(0)  # the loop's next turn
        assert len(out.read_text().splitlines()) == 1
        cap.done()


def ws_flow() -> http.HTTPFlow:
    """A Responses WebSocket handshake as the openai SDK makes it (`responses.connect()`)."""
    f = tflow.twebsocketflow(messages=False)
    assert f.websocket is not None
    f.websocket.close_code = f.websocket.timestamp_end = None  # open
    f.request.path = "/v1/responses"
    f.request.host, f.request.port = "api.example.test", 443
    f.request.headers["authorization"] = f"Bearer {KEY}"
    f.request.headers["user-agent"] = "OpenAI/Python 2.54.0"
    return f


def ws_message(f: http.HTTPFlow, from_client: bool, obj: object, at: float) -> None:
    assert f.websocket is not None
    content = json.dumps(obj).encode()
    f.websocket.messages.append(
        WebSocketMessage(
            Opcode.TEXT, from_client, content, timestamp=f.request.timestamp_start + at
        )
    )


TURN: list[tuple[bool, dict[str, Any]]] = [
    (True, {"type": "response.create", "model": "gpt-4o-mini", "input": "hi"}),
    (False, {"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1"}}),
    (False, {"type": "response.output_text.delta", "sequence_number": 1, "delta": f"key {KEY}"}),
    (False, {"type": "response.completed", "sequence_number": 2, "response": {"id": "resp_1"}}),
]


def run_websocket(
    tmp_path: Path,
    close: tuple[int, bool] | None = (1000, True),
    recorder: str | None = None,
    **options: object,
) -> Record:
    """One WebSocket session through the hooks in mitmproxy's order; `close`: (code,
    closed by the client), or None for a session still open at shutdown. `recorder`:
    "running" records through the recorder process, "killed" through one that died."""
    f, cap = ws_flow(), Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, capture_dir=str(tmp_path), capture_session="t", **options)
        if recorder is not None:
            cap.running()
            assert cap.recorder is not None
            if recorder == "killed":
                cap.recorder.proc.kill()
                cap.recorder.proc.wait()
        cap.requestheaders(f)
        cap.responseheaders(f)
        cap.response(f)  # the 101: recorded with its messages, at the end
        cap.flush()
        assert not (tmp_path / "t.jsonl").exists() or not load_records([tmp_path / "t.jsonl"])
        cap.websocket_start(f)
        for i, (from_client, obj) in enumerate(TURN):
            ws_message(f, from_client, obj, at=0.01 * (i + 1))
            cap.websocket_message(f)
        if close is not None:
            assert f.websocket is not None
            f.websocket.close_code, f.websocket.closed_by_client = close
            f.websocket.timestamp_end = f.request.timestamp_start + 0.5
            cap.websocket_end(f)
            if recorder is not None:  # handed over: the session's messages are forgotten here
                assert f.metadata[WEBSOCKET_TAP].events == []
        cap.done()
    (rec,) = load_records([tmp_path / "t.jsonl"])
    return rec


async def test_websocket_session_is_one_record_with_its_messages_as_events(
    tmp_path: Path,
) -> None:
    rec = run_websocket(tmp_path)
    req, resp, tags = rec["request"], answer(rec), rec["tags"]
    assert (req["method"], req["path"], resp["status"]) == ("GET", "/v1/responses", 101)
    assert tags["family"] == "responses" and tags.get("transport") == "websocket"
    assert tags["model"] == "gpt-4o-mini" and tags["stream"] is False
    events = events_of(rec)
    assert [(e["direction"], e["event"]) for e in events] == [
        ("client", "response.create"),
        ("server", "response.created"),
        ("server", "response.output_text.delta"),
        ("server", "response.completed"),
    ]
    assert [e["t_ms"] for e in events] == [10.0, 20.0, 30.0, 40.0]
    assert events[1]["data"] == TURN[1][1]
    assert resp["complete"] is True and rec["error"] is None
    assert websocket_of(rec) == {
        "close_code": 1000, "close_reason": "", "closed_by": "client",
        "messages": {"client": 1, "server": 3},
        "bytes": {"client": len(json.dumps(TURN[0][1])),
                  "server": sum(len(json.dumps(o)) for c, o in TURN if not c)},
    }  # fmt: skip
    assert rec["duration_ms"] == 500.0
    assert KEY not in (tmp_path / "t.jsonl").read_text()  # the handshake's and the echo


async def test_a_sessions_messages_are_bounded(tmp_path: Path) -> None:
    tap = WebSocketTap(t0=0.0, cap=10, max_events=3, max_bytes=25)
    for i, size in enumerate([5, 30, 8, 9, 1, 1]):  # 30: kept as its first 10 bytes
        tap.message(WebSocketMessage(Opcode.TEXT, True, b"x" * size, timestamp=i))
    assert [len(e["data"]) for e in tap.events] == [5, 10, 8]  # 23 bytes; no room for 9
    assert tap.events[1]["truncated"] and tap.events_dropped == 3
    assert tap.counts["client"] == 6 and tap.sizes["client"] == 54


async def test_websocket_messages_are_capped(tmp_path: Path) -> None:
    rec = run_websocket(tmp_path, capture_body_cap=40)
    events = events_of(rec)
    assert all(e["truncated"] for e in events if len(json.dumps(TURN[0][1])) > 40)
    assert all(isinstance(e["data"], str) and len(e["data"]) <= 40 for e in events)


@pytest.mark.parametrize(
    ("close", "kind"),
    [((1006, False), "upstream_disconnect"), ((1006, True), "client_disconnect"), (None, None)],
)
async def test_websocket_that_did_not_close_cleanly(
    tmp_path: Path, close: tuple[int, bool] | None, kind: str | None
) -> None:
    rec = run_websocket(tmp_path, close=close)
    assert answer(rec)["complete"] is False
    assert len(events_of(rec)) == len(TURN)
    if kind is None:  # still open at shutdown: recorded as it stood
        assert websocket_of(rec)["close_code"] is None
        assert error_of(rec)["kind"] == "proxy_shutdown"
    else:
        assert error_of(rec)["kind"] == kind


async def test_websocket_upgrade_refused_is_a_plain_exchange_of_the_websocket_mode(
    tmp_path: Path,
) -> None:
    """Recorded like any answer, but tagged `websocket`: the verdict on a family's WebSocket
    mode must not spill onto its HTTP mode."""
    f = ws_flow()
    f.websocket = None
    f.response = tutils.tresp(
        status_code=405,
        headers=http.Headers(((b"content-type", b"application/json"), (b"allow", b"POST"))),
        content=b'{"detail":"Method Not Allowed"}',
    )
    (rec,) = run(tmp_path, f)
    assert answer(rec)["status"] == 405 and rec["tags"].get("transport") == "websocket"
    assert answer(rec)["events"] is None
    assert ["upgrade", "websocket"] in rec["request"]["headers"]


def test_a_sessions_turns_read_as_streams() -> None:
    c: dict[str, object] = {"direction": "client"}
    s: dict[str, object] = {"direction": "server"}
    assert turns([]) == []
    assert turns([{**s, "n": 0}, c, {**s, "n": 1}, {**s, "n": 2}, c, c, {**s, "n": 3}]) == [
        [{**s, "n": 0}], [{**s, "n": 1}, {**s, "n": 2}], [], [{**s, "n": 3}]
    ]  # fmt: skip
