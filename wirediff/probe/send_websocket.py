"""Send a recorded Responses WebSocket session again.

The upgrade, each `response.create` the client sent, and the server's events up to the end of
each turn are recorded by the capture's record builder: a `WebSocketTap` sees every message, as
the capture addon's does.

The replayer leaves WebSocket sessions out (`wirediff.replay.safety`); the probe needs its
WebSocket feature sent, so this sends one with wsproto over an asyncio stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Event,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from wirediff._types import Record
from wirediff.analysis.comparison.observe import RESPONSE_TERMINALS
from wirediff.probe.expect import part
from wirediff.record.exchange import Error, Exchange, Response, Timings
from wirediff.record.exchange import Request as ExchangeRequest
from wirediff.record.websocket import WebSocketTap
from wirediff.replay.request import prepare
from wirediff.replay.targets import Target
from wirediff.replay.wire import CONNECT_FAILED, connect_failure_kind, exception_words

__all__ = ["send_websocket"]

READ = 65536
CLOSE_TIMEOUT = 5.0
"""Seconds to wait for the connection to close once the session is over."""
_HANDSHAKE = frozenset(
    {"host", "upgrade", "connection", "sec-websocket-key", "sec-websocket-version",
     "sec-websocket-extensions", "sec-websocket-accept", "content-length"}
)  # fmt: skip


@dataclass(slots=True)
class _Message:
    """Carry a message as `WebSocketTap.message` reads one."""

    from_client: bool
    content: bytes
    timestamp: float
    text: bool = True

    @property
    def is_text(self) -> bool:
        return self.text


def _client_messages(rec: Record, target: Target) -> list[bytes]:
    """Return the client's messages of the recorded session, the model mapped."""
    out = []
    for ev in part(rec, "response").get("events") or ():
        if ev.get("direction") != "client":
            continue
        data = ev.get("data")
        if isinstance(data, dict):
            if isinstance(data.get("model"), str):
                data = {**data, "model": target.map_model(data["model"])}
            out.append(json.dumps(data, separators=(",", ":")).encode())
        elif isinstance(data, str):
            out.append(data.encode())
    return out


async def send_websocket(
    rec: Record, target: Target, api_key: str | None, timeout: float, cap: int
) -> Exchange:
    """Open the session on the target, send the client's messages turn by turn, close."""
    out = prepare(rec, target, api_key, {})
    url = urlsplit(out.url)
    secure = url.scheme == "https"
    port = url.port or (443 if secure else 80)
    host = url.hostname or ""
    path = url.path + (f"?{url.query}" if url.query else "")
    headers = [(k, v) for k, v in out.headers if k.lower() not in _HANDSHAKE]
    started = time.time()
    tap = WebSocketTap(t0=started, cap=cap)
    shown_host = url.netloc
    ws = WSConnection(ConnectionType.CLIENT)
    extra = [(k.encode("latin-1"), v.encode("latin-1", "replace")) for k, v in headers]
    handshake = ws.send(Request(host=shown_host, target=path, extra_headers=extra))
    request = ExchangeRequest(
        method="GET",
        url=f"{url.scheme}://{shown_host}{path}",
        path=path,
        http_version="HTTP/1.1",
        headers=_head_headers(handshake),
        content=None,
    )

    def failed(message: str, kind: str) -> Exchange:
        return Exchange(
            request=request, response=None, timings=Timings(started), error=Error(message, kind)
        )

    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                host, port, ssl=ssl.create_default_context() if secure else None
            ),
            timeout,
        )
    except (OSError, TimeoutError) as e:
        return failed(
            f"{CONNECT_FAILED} {host}:{port}: {exception_words(e)}", connect_failure_kind(e)
        )
    try:
        writer.write(handshake)
        return await asyncio.wait_for(
            _session(ws, reader, writer, request, tap, _client_messages(rec, target), started),
            timeout,
        )
    except TimeoutError:
        return failed("timed out in the WebSocket session", "timeout")
    except (OSError, ValueError) as e:
        return failed(f"the WebSocket session failed: {exception_words(e)}", "upstream_disconnect")
    finally:
        writer.close()
        # a TLS close takes turns of the loop (close_notify): wait for them, else the
        # socket outlives the loop that `asyncio.run` then closes
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT)


def _head_headers(head: bytes) -> list[tuple[str, str]]:
    """Read the header pairs of a request's head as written for the wire, the upgrade's own too."""
    lines = head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]
    pairs = (line.partition(b":") for line in lines)
    return [(k.decode("latin-1"), v.strip().decode("latin-1")) for k, _, v in pairs]


def _latin1_headers(headers: Any) -> list[tuple[str, str]]:
    return [(bytes(k).decode("latin-1"), bytes(v).decode("latin-1")) for k, v in headers]


async def _session(
    ws: WSConnection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    request: ExchangeRequest,
    tap: WebSocketTap,
    messages: list[bytes],
    started: float,
) -> Exchange:
    events: list[Event] = []

    async def next_event() -> Event | None:
        while not events:
            data = await reader.read(READ)
            ws.receive_data(data or None)
            events.extend(ws.events())
            if not data and not events:
                return None
        return events.pop(0)

    first = await next_event()
    if isinstance(first, RejectConnection):
        body = b""
        while first.has_body:
            ev = await next_event()
            if not isinstance(ev, RejectData):
                break
            body += ev.data
            if ev.body_finished:
                break
        head = _latin1_headers(first.headers)
        response = Response(
            status=first.status_code, reason="", http_version="HTTP/1.1", headers=head, content=body
        )
        return Exchange(
            request=request,
            response=response,
            timings=Timings(started, time.time(), time.time()),
        )
    if not isinstance(first, AcceptConnection):
        raise ValueError("the server did not answer the upgrade")
    accepted = time.time()
    head = [
        ("upgrade", "websocket"),
        ("connection", "Upgrade"),
        *_latin1_headers(first.extra_headers),
    ]
    response = Response(
        status=101, reason="Switching Protocols", http_version="HTTP/1.1", headers=head, content=b""
    )
    closed: tuple[int | None, str, bool] | None = None
    text = ""
    for message in messages:
        writer.write(ws.send(TextMessage(data=message.decode())))
        tap.message(_Message(True, message, time.time()))
        while closed is None:
            ev = await next_event()
            if ev is None:
                break
            if isinstance(ev, Ping):
                writer.write(ws.send(ev.response()))
            elif isinstance(ev, CloseConnection):
                if ws.state is ConnectionState.REMOTE_CLOSING:  # a close frame, answered
                    writer.write(ws.send(ev.response()))
                closed = (ev.code, ev.reason or "", False)  # else 1006: the socket just closed
            elif isinstance(ev, Message):
                text += ev.data if isinstance(ev.data, str) else ev.data.decode("utf-8", "replace")
                if ev.message_finished:
                    raw = text.encode()
                    tap.message(_Message(False, raw, time.time(), isinstance(ev, TextMessage)))
                    text = ""
                    if _turn_ended(raw):
                        break
        if closed is not None:
            break
    if closed is None and ws.state is not ConnectionState.OPEN:  # closed under the last turn
        closed = (1006, "", False)
    if closed is None:
        writer.write(ws.send(CloseConnection(code=1000)))
        await writer.drain()
        while True:
            ev = await next_event()
            if ev is None or isinstance(ev, CloseConnection):
                break
        closed = (1000, "", True)
    tap.close(closed[0], closed[1], closed[2])
    return Exchange(
        request=request,
        response=response,
        timings=Timings(started, accepted, time.time()),
        websocket=tap,
    )


def _turn_ended(raw: bytes) -> bool:
    try:
        kind: Mapping[str, Any] | Any = json.loads(raw)
    except ValueError:
        return False
    return isinstance(kind, dict) and kind.get("type") in RESPONSE_TERMINALS
