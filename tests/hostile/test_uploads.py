"""Five uploads of 100 MB at once through real mitmdump: each reaches the upstream whole,
the recorder is handed the cap's worth of each (its memory stays where it was), keeps
up, and tags every one from what the SDK wrote around the upload."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import wait_for
from tests.hostile.conftest import Proxy, family, peak_rss, reset_peak_rss, start_proxy

pytestmark = pytest.mark.hostile

MB = 1 << 20
UPLOAD = 100 * MB
UPLOADS = 5


class _Digest(BaseHTTPRequestHandler):
    """Reads the body a piece at a time and answers with its size and digest."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        left, digest = int(self.headers["content-length"]), hashlib.sha256()
        while left:
            piece = self.rfile.read(min(left, MB))
            digest.update(piece)
            left -= len(piece)
        body = json.dumps({"sha256": digest.hexdigest()}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def digesting(tmp_path: Path) -> Iterator[Proxy]:
    """mitmdump with the capture in front of an upstream that digests what it receives."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Digest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    p = start_proxy(tmp_path, f"http://127.0.0.1:{server.server_port}", quiet=False)
    try:
        yield p
    finally:
        p.stop()
        server.shutdown()
        server.server_close()


def upload(n: int) -> bytes:
    """A chat request inlining an image of `UPLOAD` bytes, `model` and `stream` after it
    (in the openai SDK's order)."""
    image = b"data:image/png;base64," + bytes([65 + n]) * UPLOAD
    return (
        b'{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"'
        + image
        + b'"}}]}],"model":"gpt-4o-mini","stream":false}'
    )


def test_five_uploads_of_100_mb_at_once_cost_the_recorder_the_cap(digesting: Proxy) -> None:
    proxy = digesting
    bodies = [upload(n) for n in range(UPLOADS)]
    (recorder,) = family(proxy.proc.pid)[1:]
    reset_peak_rss(recorder)
    before = peak_rss(recorder)
    answers: list[Any] = [None] * UPLOADS

    def send(n: int) -> None:
        with httpx.Client(timeout=600) as c:
            answers[n] = c.post(proxy.url + "/v1/chat/completions", content=bodies[n]).json()

    senders = [threading.Thread(target=send, args=(n,)) for n in range(UPLOADS)]
    for s in senders:
        s.start()
    for s in senders:
        s.join()
    with httpx.Client(timeout=60) as c:
        after = c.post(proxy.url + "/v1/chat/completions", content=b'{"model":"m"}').json()
    recs = wait_for(
        lambda: (
            (r := proxy.records() if proxy.capture_file.exists() else [])
            and len(r) == UPLOADS + 1
            and r
        ),
        120,
        "every record written",
    )
    grown = peak_rss(recorder) - before
    log = proxy.stop()
    assert answers == [{"sha256": hashlib.sha256(b).hexdigest()} for b in bodies]
    assert after == {"sha256": hashlib.sha256(b'{"model":"m"}').hexdigest()}
    assert "recording in mitmdump's own process" not in log, log
    for rec in recs[:-1]:
        request, tags = rec["request"], rec["tags"]
        assert request["size"] == len(bodies[0]) and request["truncated"] is True
        assert (tags["model"], tags["stream"]) == ("gpt-4o-mini", False)
    assert grown < 64 * MB, f"the recorder grew by {grown / MB:.0f} MB"
