"""Real mitmdump + the capture addon + the real openai SDK, on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import free_port
from wirediff.backends.standin import standin

pytestmark = pytest.mark.e2e

KEY = "sk-e2e-CANARY-7c1d93b2aa"
MSG = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOL_CHAT = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]  # fmt: skip
TOOL_RESP = [{"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]  # fmt: skip


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
            assert last == "[DONE]" or last["type"] == "response.completed"
    # tool call, chat: arguments are a JSON string
    tool = recs[4]["response"]["body"]["choices"][0]["message"]["tool_calls"][0]["function"]
    assert json.loads(tool["arguments"])["city"]
    # tool call, responses stream: argument deltas reassemble into the done arguments
    events = recs[5]["response"]["events"]
    deltas = "".join(
        e["data"]["delta"] for e in events if e["event"] == "response.function_call_arguments.delta"
    )
    (done,) = [e for e in events if e["event"] == "response.function_call_arguments.done"]
    assert deltas == done["data"]["arguments"] and json.loads(deltas)["city"]
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
    with standin("openai", delay=0.2) as url:
        m = mitmdump([f"reverse:{url}"])
        seen = []
        with openai.OpenAI(base_url=m.url + "/v1", api_key=KEY, max_retries=0) as client:
            t0 = time.monotonic()
            for _ in client.chat.completions.create(model="gpt-4o-mini", messages=MSG, stream=True):
                seen.append(time.monotonic() - t0)
        (rec,) = m.records(1)
    # events are 200 ms apart at the source: the client saw the first long before the second
    # was even sent, and the recorded offsets grow by the same steps.
    assert len(seen) >= 3 and seen[1] - seen[0] >= 0.15
    t = [e["t_ms"] for e in rec["response"]["events"]]
    steps = [b - a for a, b in itertools.pairwise(t)]
    assert min(steps[:-1]) >= 150, t


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
    assert cut["response"]["complete"] is False or cut["error"] is not None
    assert by_model["fault-empty"]["response"]["size"] == 0
    slow = by_model["fault-slow"]
    assert slow["error"]["kind"] == "client_disconnect" and slow["response"]["events"]
    unreachable = next(r for r in recs if r["listener"].endswith(f"@{m.ports[1]}"))
    assert unreachable["error"]["kind"] == "upstream_unreachable"
    assert m.proc.poll() is None
    assert_no_canary(m.capture_dir)


class _ChunkedNDJSON(BaseHTTPRequestHandler):
    """Three NDJSON lines 200 ms apart, chunked, no Content-Length (Ollama's native style)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/x-ndjson")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for i in range(3):
            line = json.dumps({"i": i}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            if i < 2:
                self.server.step.wait(0.2)  # type: ignore[attr-defined]
        self.wfile.write(b"0\r\n\r\n")


def test_open_ended_non_sse_body_passes_through_unbuffered(mitmdump: Any) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChunkedNDJSON)
    server.step = threading.Event()  # type: ignore[attr-defined]  # never set: a timed wait
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        m = mitmdump([f"reverse:http://127.0.0.1:{server.server_address[1]}"])
        with httpx.Client(timeout=10) as h:
            t0 = time.monotonic()
            with h.stream("GET", m.url + "/api/chat") as r:
                arrivals = [time.monotonic() - t0 for _ in r.iter_lines()]
        (rec,) = m.records(1)
    finally:
        server.shutdown()
        server.server_close()
    assert len(arrivals) == 3 and arrivals[1] - arrivals[0] >= 0.15  # not held until the end
    assert rec["response"]["text"].splitlines() == ['{"i": 0}', '{"i": 1}', '{"i": 2}']
