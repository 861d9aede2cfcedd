"""Decode a Content-Encoding within an output budget: a compression bomb costs its budget.

A few megabytes of gzip, deflate, br or zstd can inflate to gigabytes. Every decoder here
is incremental and is asked for at most `limit` bytes at a time; input it has not decoded
yet stays queued. zlib (gzip, deflate) and bz2 stop exactly at the limit (`max_length`).
The brotli and zstandard bindings mitmproxy pins have no output limit, so their input is fed
in small slices: one slice inflates to at most one zstd block run (under 1 MiB) or one
brotli meta-block (16 MiB), whatever the stream.
"""

from __future__ import annotations

import bz2
import codecs
import zlib
from typing import Any, Protocol

__all__ = ["Decoder", "decode_body", "decoder_for"]

BROTLI_SLICE = 16
ZSTD_SLICE = 32
"""Input bytes fed per call: zstd writes at most 128 KiB per 4 input bytes (an RLE block)."""


class Decoder(Protocol):
    """Queue encoded input with `feed`; take decoded output with `read(limit)`."""

    def feed(self, data: bytes) -> None: ...

    def read(self, limit: int) -> bytes:
        """Read at most `limit` decoded bytes; fewer when the queued input is used up."""
        ...

    @property
    def pending(self) -> int:
        """Count the bytes queued and not yet returned: input, or output past a limit."""
        ...

    @property
    def finished(self) -> bool:
        """Tell whether the encoded stream has ended; a stream cut short has not."""
        ...


class _Identity:
    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def read(self, limit: int) -> bytes:
        out = bytes(self._buf[:limit])
        del self._buf[:limit]
        return out

    @property
    def pending(self) -> int:
        return len(self._buf)

    finished = True


class _Zlib:
    """Decode gzip, its members one after another, zlib-wrapped and raw deflate."""

    def __init__(self, wbits: int | None) -> None:
        self._wbits = wbits  # None: deflate, wrapped or raw as its first bytes say
        self._d: Any = None
        self._in = b""
        self.finished = False

    def feed(self, data: bytes) -> None:
        self._in = self._in + data if self._in else data

    def _start(self) -> bool:
        if self._wbits is None:
            if len(self._in) < 2:
                return False
            head = self._in[0] << 8 | self._in[1]
            wrapped = (self._in[0] & 0x0F) == 8 and head % 31 == 0
            self._wbits = zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS
        self._d = zlib.decompressobj(self._wbits)
        self.finished = False
        return True

    def read(self, limit: int) -> bytes:
        out = b""
        while len(out) < limit and self._in:
            if self._d is None and not self._start():
                break
            out += self._d.decompress(self._in, limit - len(out))
            self._in = self._d.unconsumed_tail
            if self._d.eof:
                self.finished = True
                rest = self._d.unused_data
                # another gzip member follows; anything else after the end is not body
                self._in = (
                    rest if self._wbits == 16 + zlib.MAX_WBITS and rest[:2] == b"\x1f\x8b" else b""
                )
                self._d = None
        return out

    @property
    def pending(self) -> int:
        return len(self._in)


class _Bz2:
    def __init__(self) -> None:
        self._d = bz2.BZ2Decompressor()
        self._in = b""

    def feed(self, data: bytes) -> None:
        self._in += data

    def read(self, limit: int) -> bytes:
        if self._d.eof:
            self._in = b""
            return b""
        data, self._in = self._in, b""
        return self._d.decompress(data, limit) if data or not self._d.needs_input else b""

    @property
    def pending(self) -> int:
        return len(self._in) + (0 if self._d.needs_input or self._d.eof else 1)

    @property
    def finished(self) -> bool:
        return bool(self._d.eof)


class _Sliced:
    """Feed a decoder without an output limit `size` input bytes per call."""

    def __init__(self, make: Any, size: int) -> None:
        self._make, self._size = make, size
        self._d: Any = make()
        self._in = bytearray()
        self._out = bytearray()
        self.finished = False

    def feed(self, data: bytes) -> None:
        self._in += data

    def read(self, limit: int) -> bytes:
        out = self._out
        pos = 0
        while len(out) < limit and pos < len(self._in):
            piece = bytes(self._in[pos : pos + self._size])
            pos += len(piece)
            out += self._d.decompress(piece)
            self.finished = bool(self._d.eof)
            if self._d.eof and self._make is _zstd:  # a frame ended; another may follow
                rest = self._d.unused_data + bytes(self._in[pos:])
                self._in, pos = bytearray(rest), 0
                self._d = self._make()
        del self._in[:pos]
        result = bytes(out[:limit])
        self._out = out[limit:]
        return result

    @property
    def pending(self) -> int:
        return len(self._in) + len(self._out)


class _Brotli:
    def __init__(self) -> None:
        import brotli

        self._d = brotli.Decompressor()

    @property
    def eof(self) -> bool:
        return bool(self._d.is_finished())

    def decompress(self, data: bytes) -> bytes:
        if self._d.is_finished():  # trailing bytes after the stream are not body
            return b""
        return self._d.process(data)  # type: ignore[no-any-return]


def _zstd() -> Any:
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj()


def decoder_for(content_encoding: str) -> Decoder | None:
    """Make an incremental, bounded decoder for a `Content-Encoding`; identity when absent.

    None when the coding is unknown: the body is kept as it came."""
    name = content_encoding.strip().lower()
    if name in ("", "identity", "none"):
        return _Identity()
    if name in ("gzip", "x-gzip"):
        return _Zlib(16 + zlib.MAX_WBITS)
    if name in ("deflate", "deflateraw"):
        return _Zlib(None)
    if name == "br":
        return _Sliced(_Brotli, BROTLI_SLICE)
    if name == "zstd":
        return _Sliced(_zstd, ZSTD_SLICE)
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        return None
    if codec == "zlib_codec":
        return _Zlib(zlib.MAX_WBITS)
    if codec == "bz2_codec":
        return _Bz2()
    return None


def decode_body(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """Decode the first `limit` bytes of `raw` from its Content-Encoding.

    This reads it as mitmproxy's `get_content(strict=False)` does: the bytes as they came when
    the encoding is absent, unknown, a text charset or broken. Nothing past `limit` is ever
    inflated."""
    if not content_encoding:
        return raw[:limit]
    dec = decoder_for(content_encoding)
    if dec is None:
        return _other_codec(raw, content_encoding)[:limit]
    try:
        dec.feed(raw)
        out = dec.read(limit)
    except Exception:  # a broken upstream encoding: the record keeps what was sent
        return raw[:limit]
    if len(out) < limit and raw and not dec.finished:  # cut short: kept as it came
        return raw[:limit]
    return out


def _other_codec(raw: bytes, content_encoding: str) -> bytes:
    """Decode `raw` with a bytes-to-bytes codec Python knows: base64, hex, quoted-printable.

    None of them inflates. Text charsets and unknown names leave the body as it came."""
    name = content_encoding.strip().lower()
    try:
        if codecs.lookup(name)._is_text_encoding:
            return raw
        out = codecs.decode(raw, name)
    except Exception:
        return raw
    return out if isinstance(out, bytes) else raw
