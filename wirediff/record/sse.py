"""Incremental Server-Sent Events splitting.

Chunk boundaries on the wire are arbitrary, so events are split here by the rules of the
WHATWG EventSource parser (LF, CRLF and CR line ends, comments, multi-line `data:`), and
compressed streams are decoded incrementally while the raw bytes pass through untouched.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

from wirediff._types import Event


def parse_data(data: str) -> Any:
    """JSON where it is JSON; `[DONE]` and other text stay as they are."""
    if data and data[0] in "{[" and data != "[DONE]":
        try:
            return json.loads(data)
        except ValueError:
            return data
    return data


class SSESplitter:
    """Feed decoded bytes in any chunking; get complete events out."""

    def __init__(self) -> None:
        self._buf = b""
        self._event: str | None = None
        self._data: list[str] = []
        self._id: str | None = None
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """Return the events completed by this chunk (without timing)."""
        if not chunk:  # a decoder may yield nothing between a CR and its LF
            return []
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = False
        buf = self._buf + chunk
        out: list[dict[str, Any]] = []
        start = 0
        n = len(buf)
        while start < n:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start, lf if lf != -1 else n)
            if cr != -1:
                end, nxt = cr, cr + 1
                if nxt < n and buf[nxt : nxt + 1] == b"\n":
                    nxt += 1
                elif nxt == n:
                    self._pending_cr = True
            elif lf != -1:
                end, nxt = lf, lf + 1
            else:
                break
            self._line(buf[start:end].decode("utf-8", "replace"), out)
            start = nxt
        self._buf = buf[start:]
        return out

    def close(self) -> list[dict[str, Any]]:
        """Flush at end of stream: a half-received event comes out marked `partial`."""
        out: list[dict[str, Any]] = []
        if self._buf:
            self._line(self._buf.decode("utf-8", "replace"), [])
            self._buf = b""
        if self._data or self._event is not None:
            ev = self._build()
            ev["partial"] = True
            out.append(ev)
        return out

    def _line(self, line: str, out: list[dict[str, Any]]) -> None:
        if not line:
            if self._data or self._event is not None:
                out.append(self._build())
            return
        if line.startswith(":"):
            return
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            self._id = value

    def _build(self) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "event": self._event,
            "data": parse_data("\n".join(self._data)),
        }
        if self._id is not None:
            ev["id"] = self._id
        self._event, self._data, self._id = None, [], None
        return ev


def decoder_for(content_encoding: str) -> Callable[[bytes], bytes]:
    """An incremental decoder for a `Content-Encoding`; identity when unknown or absent."""
    enc = content_encoding.strip().lower()
    if enc in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress
    if enc == "deflate":
        return _Deflate().decompress
    if enc == "br":
        import brotli

        return brotli.Decompressor().process  # type: ignore[no-any-return]
    if enc == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress  # type: ignore[no-any-return]
    return _identity


def _identity(b: bytes) -> bytes:
    return b


class _Deflate:
    """`deflate` is zlib-wrapped by the spec but raw in practice; accept both."""

    def __init__(self) -> None:
        self._d: Any = None

    def decompress(self, chunk: bytes) -> bytes:
        if self._d is None:
            if not chunk:
                return b""
            wbits = zlib.MAX_WBITS if (chunk[0] & 0x0F) == 8 else -zlib.MAX_WBITS
            self._d = zlib.decompressobj(wbits)
        return self._d.decompress(chunk)  # type: ignore[no-any-return]


def split_events(raw: bytes, t_ms: float | None = None) -> list[Event]:
    """Split a whole (decoded) SSE body, e.g. from a flow file or HAR; one timestamp for all."""
    sp = SSESplitter()
    events = sp.feed(raw) + sp.close()
    for ev in events:
        ev["t_ms"] = t_ms
    return [_ordered(ev) for ev in events]


def _ordered(ev: dict[str, Any]) -> Event:
    return {"t_ms": ev.pop("t_ms"), **ev}
