"""Real mitmdump + the capture addon + the real openai SDK, on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.responses import ToolParam

from tests.conftest import Lockstep, free_port
from tests.fixtures.analysed import diagnose
from wirediff.analysis.index.analyze import analyze
from wirediff.backends.standin import make_standin, standin

pytestmark = pytest.mark.e2e

KEY = "sk-e2e-CANARY-7c1d93b2aa"
MSG: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "What is the weather in Paris?"}
]
TOOL_CHAT: list[ChatCompletionToolParam] = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]  # fmt: skip
# the API takes a function tool without `strict`; the SDK's type asks for it
TOOL_RESP = cast(list[ToolParam], [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])  # fmt: skip


@pytest.fixture
def backend() -> Any:
    with standin("openai", delay=0.0) as url:
        yield url


def assert_no_canary(capture_dir: Path, key: str = KEY) -> None:
    for p in capture_dir.rglob("*"):
        if p.is_file():
            assert key.encode() not in p.read_bytes(), f"key leaked into {p}"


def drive_sync(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="gpt-4o-mini", messages=MSG)
    for _ in client.chat.completions.create(
        model="gpt-4o-mini", messages=MSG, stream=True, stream_options={"include_usage": True}
    ):
        pass
    client.responses.create(model="gpt-4o-mini", input="hello")
    with client.responses.stream(model="gpt-4o-mini", input="hello") as s:
        s.get_final_response()
    client.chat.completions.create(model="gpt-4o-mini", messages=MSG, tools=TOOL_CHAT)
    with client.responses.stream(model="gpt-4o-mini", input="weather?", tools=TOOL_RESP) as s:
        s.get_final_response()


async def drive_async(client: openai.AsyncOpenAI) -> None:
    await client.chat.completions.create(model="gpt-4o-mini", messages=MSG)
    async for _ in await client.chat.completions.create(
        model="gpt-4o-mini", messages=MSG, stream=True
    ):
        pass
    await client.responses.create(model="gpt-4o-mini", input="hello")
    async for _ in await client.responses.create(model="gpt-4o-mini", input="hello", stream=True):
        pass


def test_reverse_mode_sync_and_async_sdk(mitmdump: Any, backend: str) -> None:
    m = mitmdump([f"reverse:{backend}"], label="openai")
    with openai.OpenAI(base_url=m.url + "/v1", api_key=KEY, max_retries=0) as client:
        drive_sync(client)

    async def run_async() -> None:
        async with openai.AsyncOpenAI(
            base_url=m.url + "/v1", api_key=KEY, max_retries=0
        ) as aclient:
            await drive_async(aclient)

    asyncio.run(run_async())
    recs = m.records(10)
    assert len(recs) == 10 and all(r["response"]["status"] == 200 for r in recs)
    assert [r["seq"] for r in recs] == sorted(r["seq"] for r in recs)
    shape = [(r["tags"]["family"], r["tags"]["stream"], r["tags"]["sdk"]["async"]) for r in recs]
    assert shape == [
        ("chat.completions", False, False), ("chat.completions", True, False),
        ("responses", False, False), ("responses", True, False),
        ("chat.completions", False, False), ("responses", True, False),
        ("chat.completions", False, True), ("chat.completions", True, True),
        ("responses", False, True), ("responses", True, True),
    ]  # fmt: skip
    for r in recs:
        assert r["label"] == "openai" and r["listener"].startswith("reverse:")
        assert r["tags"]["auth"]["scheme"] == "Bearer" and r["tags"]["auth"]["forwarded"] is True
        if r["tags"]["stream"]:
            events = r["response"]["events"]
            assert events and all(e["t_ms"] >= 0 for e in events)
            last = events[-1]["data"]
            if r["tags"]["family"] == "chat.completions":
                assert last == "[DONE]"
            else:
                assert last["type"] == "response.completed"
    # tool call, chat: arguments are a JSON string
    tool = recs[4]["response"]["body"]["choices"][0]["message"]["tool_calls"][0]["function"]
    assert json.loads(tool["arguments"]) == {"city": "example"}  # the stand-in's placeholder
    # tool call, responses stream: argument deltas reassemble into the done arguments
    events = recs[5]["response"]["events"]
    deltas = "".join(
        e["data"]["delta"] for e in events if e["event"] == "response.function_call_arguments.delta"
    )
    (done,) = [e for e in events if e["event"] == "response.function_call_arguments.done"]
    assert deltas == done["data"]["arguments"] and json.loads(deltas) == {"city": "example"}
    assert len({r["tags"]["auth"]["fingerprint"] for r in recs}) == 1
    assert_no_canary(m.capture_dir)


def test_forward_https_mode_with_the_mitmproxy_ca(
    mitmdump: Any, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A TLS front for the stand-in: a bare mitmdump reverse listener terminates HTTPS.
    tls = mitmdump([f"reverse:{backend}"], addon=False)
    fwd = mitmdump(["regular"], label="openai-tls", extra=["--set", "ssl_insecure=true"])
    monkeypatch.setenv("HTTPS_PROXY", fwd.url)
    monkeypatch.setenv("SSL_CERT_FILE", str(fwd.ca_cert))
    with openai.OpenAI(
        base_url=f"https://127.0.0.1:{tls.port}/v1", api_key=KEY, max_retries=0
    ) as client:
        out = client.chat.completions.create(model="gpt-4o-mini", messages=MSG)
        chunks = list(
            client.chat.completions.create(model="gpt-4o-mini", messages=MSG, stream=True)
        )
    assert out.choices[0].message.content and chunks
    r1, r2 = fwd.records(2)
    assert r1["request"]["url"].startswith("https://127.0.0.1:") and r1["listener"].startswith(
        "regular"
    )
    assert r2["response"]["events"][-1]["data"] == "[DONE]"
    assert_no_canary(fwd.capture_dir)


def test_sse_passes_through_unbuffered(mitmdump: Any) -> None:
    """The backend sends event n+1 only once the client has read event n through the proxy:
    a proxy that held events back would stall the stream (see `Lockstep`)."""
    read_at: list[float] = []
    with Lockstep() as lock, make_standin("openai", pace=lock.turn) as st:
        m = mitmdump([f"reverse:{st.url}"])
        with openai.OpenAI(base_url=m.url + "/v1", api_key=KEY, max_retries=0) as client:
            for _ in client.chat.completions.create(model="gpt-4o-mini", messages=MSG, stream=True):
                read_at.append(time.time())
                lock.read()
        (rec,) = m.records(1)
    events = rec["response"]["events"]
    assert len(read_at) >= 3 and events[-1]["data"] == "[DONE]" and len(events) == len(read_at) + 1
    # Each event was recorded as it passed: after the client read the one before it (which
    # caused it to be sent) and before the client read it itself.
    at = [rec["started"] + e["t_ms"] / 1000.0 for e in events]
    slack = 0.001  # the record keeps microseconds
    assert all(at[n] <= read_at[n] + slack for n in range(len(read_at))), (at, read_at)
    assert all(read_at[n - 1] <= at[n] + slack for n in range(1, len(at))), (at, read_at)


def test_gzip_compressed_stream_is_parsed(mitmdump: Any) -> None:
    with standin("openai", gzip=True) as url:
        m = mitmdump([f"reverse:{url}"])
        client = openai.OpenAI(base_url=m.url + "/v1", api_key=KEY, max_retries=0)
        n = len(
            list(client.chat.completions.create(model="gpt-4o-mini", messages=MSG, stream=True))
        )
        (rec,) = m.records(1)
    headers = dict(rec["response"]["headers"])
    assert headers.get("content-encoding") == "gzip"
    assert rec["response"]["events"][-1]["data"] == "[DONE]"
    assert len(rec["response"]["events"]) == n + 1  # every chunk plus [DONE]


def test_several_listeners_at_once(mitmdump: Any) -> None:
    with standin("openai") as a, standin("ollama") as b:
        m = mitmdump([f"reverse:{a}", f"reverse:{b}"])
        for port in m.ports:
            with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY) as c:
                c.models.list()
        r1, r2 = m.records(2)
    assert {r1["listener"], r2["listener"]} == {
        f"reverse:{a}@{m.ports[0]}",
        f"reverse:{b}@{m.ports[1]}",
    }
    assert r1["label"] != r2["label"]


def test_bad_input_is_recorded_and_mitmdump_survives(mitmdump: Any, backend: str) -> None:
    dead = free_port()
    m = mitmdump([f"reverse:{backend}", f"reverse:http://127.0.0.1:{dead}"])
    base = m.url + "/v1/chat/completions"
    auth = {"authorization": f"Bearer {KEY}"}
    with httpx.Client(timeout=10) as h:
        h.post(
            base,
            content=b'{"model": "gpt-4o-mini", "messages": [',
            headers={**auth, "content-type": "application/json"},
        )
        h.post(
            base,
            content=b"\xff\xfe\xfa not utf-8",
            headers={**auth, "content-type": "application/json"},
        )
        for model in ("fault-cut", "fault-empty", "fault-binary"):
            with contextlib.suppress(httpx.HTTPError):  # a cut stream is the point
                h.post(
                    base, json={"model": model, "messages": MSG, "stream": True}, headers=auth
                ).read()
        with h.stream(
            "POST",
            base,
            json={"model": "fault-slow", "messages": MSG, "stream": True},
            headers=auth,
        ) as s:
            for _ in s.iter_bytes():
                break  # disconnect mid-stream
        h.post(f"http://127.0.0.1:{m.ports[1]}/v1/models", headers=auth)
        # still alive and still recording
        assert h.get(m.url + "/v1/models", headers=auth).status_code == 200
    recs = m.records(8)
    by_model = {(r["request"]["body"] or {}).get("model"): r for r in recs if r["request"]["body"]}
    malformed, non_utf8 = recs[0], recs[1]
    assert (
        malformed["request"]["text"].startswith('{"model"') and malformed["request"]["body"] is None
    )
    assert "b64" in non_utf8["request"]
    cut = by_model["fault-cut"]
    assert cut["response"]["complete"] is False and cut["error"]["kind"] == "upstream_disconnect"
    assert cut["response"]["events"][-1]["partial"] is True  # cut in the middle of an event
    assert by_model["fault-empty"]["response"]["size"] == 0
    slow = by_model["fault-slow"]
    assert slow["error"]["kind"] == "client_disconnect" and slow["response"]["events"]
    unreachable = next(r for r in recs if r["listener"].endswith(f"@{m.ports[1]}"))
    assert unreachable["error"]["kind"] == "upstream_unreachable"
    assert m.proc.poll() is None
    assert_no_canary(m.capture_dir)


class _ChunkedNDJSON(BaseHTTPRequestHandler):
    """Three NDJSON lines, chunked, no Content-Length (Ollama's native style); line n+1 is
    sent once the client has read line n (`server.lockstep`)."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for i in range(3):
            if i and not self.server.lockstep.turn(i):
                return  # held back: end without the last chunk
            line = json.dumps({"i": i}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def test_open_ended_non_sse_body_passes_through_unbuffered(mitmdump: Any) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChunkedNDJSON)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    lines: list[str] = []
    try:
        with Lockstep() as lock:
            server.lockstep = lock  # type: ignore[attr-defined]
            m = mitmdump([f"reverse:http://127.0.0.1:{server.server_address[1]}"])
            with (
                httpx.Client(timeout=lock.deadline + 10) as h,
                h.stream("GET", m.url + "/api/chat") as r,
            ):
                for line in r.iter_lines():
                    lines.append(line)
                    lock.read()
        (rec,) = m.records(1)
    finally:
        server.shutdown()
        server.server_close()
    assert lines == ['{"i": 0}', '{"i": 1}', '{"i": 2}']
    assert rec["response"]["text"].splitlines() == lines


class _Held(BaseHTTPRequestHandler):
    """Takes a request and sends no answer until the test ends (`server.release`); says
    when a request has arrived (`server.arrived`)."""

    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.arrived.set()
        self.server.release.wait()


ASKED_ELSEWHERE: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Still there?"}]
"""What the waiting call asks: the same question on another listener, started within the
stream and cut by the same stop, would be a gateway's hop of it, one chain."""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_records_every_exchange_in_flight(mitmdump: Any, sig: signal.Signals) -> None:
    """SIGTERM or Ctrl-C while a stream is mid-way (the upstream has sent `SENT` events and
    the SDK has read them, the next held back) and while a request waits for its answer:
    both are recorded as they stood, before mitmdump exits."""
    sent, stop = 3, threading.Event()
    held = ThreadingHTTPServer(("127.0.0.1", 0), _Held)
    arrived = threading.Event()
    held.arrived, held.release = arrived, stop  # type: ignore[attr-defined]
    threading.Thread(target=held.serve_forever, daemon=True).start()
    read: list[dict[str, object]] = []
    all_read = threading.Event()
    failures: list[BaseException] = []

    def stream(url: str) -> None:
        with openai.OpenAI(base_url=url, api_key=KEY, max_retries=0) as client:
            try:
                for chunk in client.chat.completions.create(
                    model="gpt-4o-mini", messages=MSG, stream=True
                ):
                    read.append(chunk.to_dict())  # as sent: what the SDK did not fill in
                    if len(read) == sent:
                        all_read.set()
            except (openai.APIError, httpx.HTTPError) as e:  # the proxy stopped: the point
                failures.append(e)

    def wait_answer(url: str) -> None:
        with openai.OpenAI(base_url=url, api_key=KEY, max_retries=0) as client:
            try:
                client.chat.completions.create(model="gpt-4o-mini", messages=ASKED_ELSEWHERE)
            except (openai.APIError, httpx.HTTPError) as e:
                failures.append(e)

    try:
        with make_standin("openai", pace=lambda i: i < sent or stop.wait()) as st:
            m = mitmdump([f"reverse:{st.url}", f"reverse:http://127.0.0.1:{held.server_port}"])
            clients = [
                threading.Thread(target=stream, args=(m.url + "/v1",)),
                threading.Thread(target=wait_answer, args=(f"http://127.0.0.1:{m.ports[1]}/v1",)),
            ]
            for c in clients:
                c.start()
            assert all_read.wait(30) and arrived.wait(30)
            m.proc.send_signal(sig)
            m.proc.wait(60)
            for c in clients:
                c.join(60)
            stop.set()  # the stand-in's handler may end
    finally:
        stop.set()
        held.shutdown()
        held.server_close()
    assert len(failures) == 2, failures  # both clients saw the proxy go
    recs = {r["listener"].rsplit("@", 1)[1]: r for r in m.records()}
    streamed, waiting = recs[str(m.ports[0])], recs[str(m.ports[1])]
    for rec in (streamed, waiting):
        assert rec["error"] == {
            "kind": "proxy_shutdown",
            "message": "the proxy stopped before the exchange ended",
        }
        assert rec["tags"]["model"] == "gpt-4o-mini"
    assert streamed["response"]["complete"] is False and streamed["tags"]["stream"] is True
    assert [e["data"] for e in streamed["response"]["events"]] == read
    assert waiting["response"] is None
    assert waiting["request"]["body"]["messages"] == ASKED_ELSEWHERE
    assert_no_canary(m.capture_dir)
    # what diagnose and the report make of them: the capture's stop, no server at fault
    found = diagnose([streamed, waiting]).set_index("code")
    assert list(found.index) == ["capture_stopped", "capture_stopped"], found
    assert {r["exchange_ids"][0] for r in found.to_dict("records")} == {
        streamed["id"],
        waiting["id"],
    }
    assert all("no fault of the server" in r for r in found["remedy"])
    assert sorted(found["summary"]) == [
        f"POST /v1/chat/completions: the capture stopped after {sent} events of its stream",
        "POST /v1/chat/completions: the capture stopped while the request waited for its answer",
    ]
    assert analyze([streamed, waiting]).verdicts.empty  # judged in no verdict
