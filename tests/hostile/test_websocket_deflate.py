"""WebSocket permessage-deflate through real mitmdump with the capture: a compressed session
passes as it would bare (the extension negotiated, every message the same), and a deflate
bomb (1 MB inflating to 1 GiB in one message) ends with 1009 while mitmdump's memory stays
bounded, where bare mitmdump inflates all of it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import connect
from websockets.sync.server import ServerConnection, serve

from tests.conftest import wait_for
from tests.fixtures.records import websocket_of
from tests.hostile.conftest import Proxy, ProxyFactory, start_proxy
from wirediff.addons._deflate import MAX_INFLATED

pytestmark = pytest.mark.hostile

MB = 1 << 20
SENT: list[str | bytes] = [
    '{"type":"a"}',
    "é" * 1000,
    '{"type":"big","pad":"' + "x" * (8 * MB) + '"}',
    b"\0" * MB,
]


def _answer(ws: ServerConnection) -> None:
    for message in ws:
        for reply in [message, *SENT]:
            ws.send(reply)


@pytest.fixture
def compressing(tmp_path: Path) -> Iterator[Proxy]:
    """mitmdump with the capture in front of a `websockets` server that negotiates
    permessage-deflate, as browsers and the openai SDK's client offer it."""
    with serve(_answer, "127.0.0.1", 0, compression="deflate", max_size=None) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        p = start_proxy(tmp_path, f"http://127.0.0.1:{port}")
        try:
            yield p
        finally:
            p.stop()
            server.shutdown()


def test_a_compressed_session_passes_as_it_would_bare(compressing: Proxy) -> None:
    with connect(
        f"ws://127.0.0.1:{compressing.port}/v1/responses", compression="deflate", max_size=None
    ) as ws:
        assert ws.response is not None
        assert ws.response.headers["Sec-WebSocket-Extensions"].startswith("permessage-deflate")
        ws.send('{"type":"response.create"}')
        got = [ws.recv(timeout=60) for _ in range(1 + len(SENT))]
    assert got == ['{"type":"response.create"}', *SENT]
    compressing.stop()
    (rec,) = compressing.records()
    assert websocket_of(rec)["messages"] == {"client": 1, "server": 1 + len(SENT)}


def test_a_deflate_bomb_ends_with_1009_in_bounded_memory(proxy: ProxyFactory) -> None:
    cap = proxy(quiet=False)
    cap.reset_peak_rss()
    before = cap.peak_rss()
    with (
        pytest.raises(ConnectionClosedError) as closed,
        connect(f"ws://127.0.0.1:{cap.port}/bomb/ws", compression="deflate", max_size=None) as ws,
    ):
        ws.recv(timeout=120)
    grown = cap.peak_rss() - before
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    (rec,) = wait_for(lambda: cap.capture_file.exists() and cap.records(), 30, "the record")
    assert websocket_of(rec)["close_code"] == 1009
    assert grown < 4 * MAX_INFLATED, f"mitmdump grew by {grown / MB:.0f} MB"
