"""A hostile upstream: compression bombs, one endless event, echoed credentials, resets.

Run in its own process (`python -m tests.hostile.upstream PORT`), so that what it costs to
send never shows in the proxy under test. Routes (any method):

  /bomb/json/ENC       a JSON body of `BOMB` bytes once decoded, Content-Length, ENC coded
  /bomb/sse/ENC        SSE events, `BOMB` bytes once decoded, chunked, ENC coded
  /bomb/sse-flat/ENC   the same without a single newline
  /event/MB            one SSE event whose data is MB megabytes, in 64 KiB writes
  /fast                a small JSON answer
  /echo[/sse]          every credential of the request (headers, a key offered as a WebSocket
                       subprotocol, the query, credential-named fields of a JSON or form
                       body however long), echoed in every encoding, upper- and lower-cased
                       and without its `xx-` prefix: in the body (or SSE events) and in
                       response headers
  /echo/ws             a WebSocket (`Upgrade: websocket`): each client message is answered
                       with every credential of the handshake and of that message, echoed
                       in every encoding as JSON, text and binary messages; then a close
                       whose reason is the first credential
  /reset               the connection closed without an answer
  /bomb/ws             a WebSocket that accepts permessage-deflate and sends one message of
                       `WS_BOMB` bytes once inflated, then waits for the close
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import re
import sys
import zlib
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

import brotli
import zstandard
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, TextMessage

from wirediff.backends.ws_mode import accept_key

BOMB = 4 << 30
"""Bytes a bomb inflates to: 4 GiB."""
PIECE = 1 << 20
WRITE = 1 << 16
ENCODINGS = ("gzip", "deflate", "br", "zstd")
SSE_PIECE = (b'data: {"type":"response.output_text.delta","delta":"xx"}\n\n' * 20_000)[:PIECE]
FLAT_PIECE = b"x" * PIECE
JSON_HEAD = b'{"object":"chat.completion","padding":"'


def _repeat(piece: bytes, head: bytes, encoding: str) -> bytes:
    """`head` then `piece` repeated to `BOMB` bytes, compressed without compressing it all:
    identical full-flushed deflate blocks (zstd frames) are identical bytes."""
    n = BOMB // len(piece)
    if encoding in ("gzip", "deflate"):
        wbits = 31 if encoding == "gzip" else 15
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        start = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
        block = c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
        end = c.flush()
        check = zlib.crc32 if wbits == 31 else zlib.adler32
        value = check(head)
        for _ in range(n):
            value = check(piece, value)
        body = start + block * n + end
        if wbits == 31:
            size = (len(head) + n * len(piece)) & 0xFFFFFFFF
            head_bytes = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
            return head_bytes + body + value.to_bytes(4, "little") + size.to_bytes(4, "little")
        return b"\x78\xda" + body + value.to_bytes(4, "big")
    if encoding == "zstd":
        zs = zstandard.ZstdCompressor(level=3)
        return zs.compress(head) + zs.compress(piece) * n
    br = brotli.Compressor(quality=1)
    return bytes(br.process(head) + b"".join(br.process(piece) for _ in range(n)) + br.finish())


WS_BOMB = 1 << 30
"""Bytes the WebSocket bomb's one message inflates to: 1 GiB."""


@functools.cache
def ws_bomb() -> bytes:
    """A permessage-deflate payload of `WS_BOMB` bytes of JSON text once inflated: raw
    deflate, full-flushed blocks (identical bytes), the last block's 00 00 ff ff left off
    as RFC 7692 has it."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(b'{"type":"x","pad":"') + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(FLAT_PIECE) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.compress(b'"}') + c.flush(zlib.Z_SYNC_FLUSH)
    body = head + block * (WS_BOMB // len(FLAT_PIECE)) + tail
    assert body.endswith(b"\x00\x00\xff\xff")
    return body[:-4]


@functools.cache
def bomb(kind: str, encoding: str) -> bytes:
    if kind == "json":
        return _repeat(b"x" * PIECE, JSON_HEAD, encoding)
    return _repeat(SSE_PIECE if kind == "sse" else FLAT_PIECE, b"", encoding)


def forms(secret: str) -> list[str]:
    out = [*_encoded(secret), secret.lower(), secret.upper(), quote(secret.upper(), safe="")]
    mark = re.match(r"[A-Za-z]{2,4}-", secret)
    return out + (_encoded(secret[mark.end() :])[:TEXTUAL] if mark else [])


TEXTUAL = 5
"""The forms of `_encoded` that are text (the rest are base64): a key quoted without its
prefix is quoted as text."""


def _encoded(secret: str) -> list[str]:
    raw = secret.encode()
    out = [
        secret,
        secret.replace("/", "\\/"),
        quote(secret, safe=""),
        quote_plus(secret),
        json.dumps(secret)[1:-1].replace(secret[:1], f"\\u{ord(secret[0]):04x}", 1),
    ]
    for lead in range(3):
        out.append(base64.b64encode(b"\0" * lead + raw).decode())
    return out


_FIELD = re.compile(
    r'(?i)"(?:[\w-]*api[-_]?key|key|openai[-_]?key|[\w-]*secret|[\w-]*password|token'
    r'|[\w-]*_token|authorization|credentials?)"\s*:\s*"([^"]+)"'
)
_SUBPROTOCOL = re.compile(r"(?i)api[-_]?key\.([^,\s]+)")


def credentials(head: dict[str, str], target: str, body: bytes) -> list[str]:
    found = _SUBPROTOCOL.findall(head.get("sec-websocket-protocol", ""))
    for name in ("authorization", "x-api-key", "api-key"):
        value = head.get(name, "")
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "basic":
            decoded = base64.b64decode(token).decode()
            found += [decoded, decoded.partition(":")[2]]
        elif value:
            found.append(token or value)
    found += [v for k, v in parse_qsl(urlsplit(target).query) if k in ("key", "api_key")]
    text = body.decode(errors="replace")
    found += _FIELD.findall(text)
    if head.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        found += [v for k, v in parse_qsl(text) if "key" in k or "token" in k or "secret" in k]
    return found


class Hostile(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""
        self.ws: Connection | None = None
        self.ws_credentials: list[str] = []
        self.text = ""

    def data_received(self, data: bytes) -> None:
        if self.ws is not None:
            self.websocket_data(data)
            return
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = self.buf[:end].decode("latin-1").split("\r\n")
        head = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        length = int(head.get("content-length", "0"))
        if len(self.buf) < end + 4 + length:
            return
        body, self.buf = self.buf[end + 4 : end + 4 + length], self.buf[end + 4 + length :]
        target = lines[0].split(" ")[1]
        if head.get("upgrade", "").lower() == "websocket":
            if target.startswith("/bomb/ws"):
                self.ws_bomb(head)
            else:
                self.upgrade(head, target)
            return
        asyncio.get_running_loop().create_task(self.answer(target, head, body))

    def upgrade(self, head: dict[str, str], target: str) -> None:
        accept = accept_key(head.get("sec-websocket-key", ""))
        found = credentials(head, target, b"")
        offered = head.get("sec-websocket-protocol", "")
        chosen = b"Sec-WebSocket-Protocol: realtime\r\n" if "realtime" in offered else b""
        echo = " ".join(f for s in found for f in forms(s)).encode()
        self.t.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: %s\r\n%sX-Echo: %s\r\n\r\n" % (accept.encode(), chosen, echo)
        )
        self.ws, self.ws_credentials = Connection(ConnectionType.SERVER), found
        rest, self.buf = self.buf, b""
        if rest:
            self.websocket_data(rest)

    def ws_bomb(self, head: dict[str, str]) -> None:
        """Accept permessage-deflate (if offered) and send the bomb as one text message."""
        accept = accept_key(head.get("sec-websocket-key", ""))
        offered = "permessage-deflate" in head.get("sec-websocket-extensions", "")
        self.t.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Accept: %s\r\n%s\r\n"
            % (accept.encode(), b"Sec-WebSocket-Extensions: permessage-deflate\r\n" if offered else b"")
        )  # fmt: skip
        if offered:
            payload = ws_bomb()
            size = len(payload)
            self.t.write(b"\xc1\x7f" + size.to_bytes(8, "big") + payload)  # FIN, RSV1, text
        self.ws, self.ws_credentials = Connection(ConnectionType.SERVER), []

    def websocket_data(self, data: bytes) -> None:
        ws = self.ws
        assert ws is not None
        ws.receive_data(data)
        for event in ws.events():
            if isinstance(event, TextMessage):
                self.text += event.data
                if not event.message_finished:  # a long message comes in parts
                    continue
                found = self.ws_credentials + credentials({}, "", self.text.encode())
                echoes = [f for s in found for f in forms(s)]
                for e in echoes:
                    self.t.write(ws.send(TextMessage(json.dumps({"type": "error", "echo": e}))))
                    self.t.write(ws.send(TextMessage(e)))
                self.t.write(ws.send(BytesMessage(" ".join(echoes).encode())))
                self.t.write(ws.send(CloseConnection(1000, found[0] if found else "")))
            elif isinstance(event, CloseConnection):
                self.t.close()

    def send_head(self, ctype: str, extra: dict[str, str], length: int | None = None) -> None:
        fields = {"content-type": ctype, **extra}
        fields.update(
            {"content-length": str(length)}
            if length is not None
            else {"transfer-encoding": "chunked"}
        )
        self.t.write(
            (
                "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items()) + "\r\n"
            ).encode()
        )

    async def chunked(self, data: bytes) -> None:
        for i in range(0, len(data), WRITE):
            piece = data[i : i + WRITE]
            self.t.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await asyncio.sleep(0)  # let the transport drain, like a real server
            while self.t.get_write_buffer_size() > 4 * WRITE and not self.t.is_closing():
                await asyncio.sleep(0.001)
        self.t.write(b"0\r\n\r\n")

    async def answer(self, target: str, head: dict[str, str], body: bytes) -> None:
        path = urlsplit(target).path
        parts = path.strip("/").split("/")
        if parts[0] == "reset":
            self.t.abort()
        elif parts[0] == "fast":
            data = b'{"ok":true}'
            self.send_head("application/json", {}, len(data))
            self.t.write(data)
        elif parts[0] == "bomb":
            data = bomb(parts[1], parts[2])
            encoding = {"content-encoding": parts[2]}
            if parts[1] == "json":
                self.send_head("application/json", encoding, len(data))
                self.t.write(data)
            else:
                self.send_head("text/event-stream", encoding)
                await self.chunked(data)
        elif parts[0] == "event":
            self.send_head("text/event-stream", {})
            size = int(parts[1]) << 20
            self.t.write(b"%x\r\ndata: \r\n" % 6)
            await self.chunked(b"x" * size + b"\n\n")
        elif parts[0] == "echo":
            echoes = [f for s in credentials(head, target, body) for f in forms(s)]
            headers = {
                "x-echo": " ".join(echoes),
                "www-authenticate": f'Bearer realm="{echoes[0] if echoes else ""}"',
            }
            if parts[-1] == "sse":
                events = b"".join(
                    b"data: "
                    + json.dumps({"echo": e}).encode()
                    + b"\n\ndata: "
                    + e.encode()
                    + b"\n\n"
                    for e in echoes
                )
                self.send_head("text/event-stream", headers)
                await self.chunked(events + b"data: [DONE]\n\n")
            else:
                data = json.dumps(
                    {
                        "error": {
                            "message": " ".join(echoes),
                            "echo": echoes,
                            "type": "invalid_request_error",
                            "param": None,
                            "code": "invalid_api_key",
                        }
                    }
                ).encode()
                self.send_head("application/json", headers, len(data))
                self.t.write(data)
        else:
            self.send_head("text/plain", {}, 9)
            self.t.write(b"not found")


async def main(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Hostile, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
