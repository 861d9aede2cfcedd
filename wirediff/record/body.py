"""Bodies in a record: undo the Content-Encoding, then keep JSON, text or base64, capped."""

from __future__ import annotations

import base64
import codecs
import gzip
import io
import json
import zlib
from collections.abc import Callable
from typing import Any

from wirediff.record.redact import may_hold_secret_fields, redact_fields, scrub_text

__all__ = ["DEFAULT_BODY_CAP", "decode_body", "encode_body"]

DEFAULT_BODY_CAP = 1 << 20  # 1 MiB per body; the rest is counted, not kept
UTF8_CUT_TAIL = 3
"""Bytes of a character cut at the cap: UTF-8 characters are at most four bytes long."""


def _gunzip(raw: bytes) -> bytes:
    if not raw:
        return b""
    with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
        return f.read()


def _inflate(raw: bytes) -> bytes:
    """`deflate` is zlib-wrapped by the spec but raw in practice; accept both."""
    if not raw:
        return b""
    try:
        return zlib.decompress(raw)
    except zlib.error:
        return zlib.decompress(raw, -zlib.MAX_WBITS)


def _unbrotli(raw: bytes) -> bytes:
    import brotli

    return brotli.decompress(raw) if raw else b""  # type: ignore[no-any-return]


def _unzstd(raw: bytes) -> bytes:
    import zstandard

    if not raw:
        return b""
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True)
    return reader.read()  # type: ignore[no-any-return]


def _identity(raw: bytes) -> bytes:
    return raw


_DECODERS: dict[str, Callable[[bytes], bytes]] = {
    "none": _identity,
    "identity": _identity,
    "gzip": _gunzip,
    "deflate": _inflate,
    "deflateraw": _inflate,
    "br": _unbrotli,
    "zstd": _unzstd,
}


def decode_body(raw: bytes, content_encoding: str) -> bytes:
    """`raw` without its Content-Encoding, as mitmproxy's `get_content(strict=False)` reads
    it: the bytes as they came when the encoding is absent, unknown, a text charset or broken.
    """
    if not content_encoding:
        return raw
    name = content_encoding.lower()
    decoder = _DECODERS.get(name)
    try:
        out = decoder(raw) if decoder is not None else codecs.decode(raw, name)
    except Exception:  # a broken upstream encoding: the record keeps what was sent
        return raw
    return out if isinstance(out, bytes) else raw


def encode_body(
    content: bytes | None, content_type: str, cap: int, secrets: dict[str, str] | None = None
) -> dict[str, Any]:
    """`body` for JSON, `text` for other text, `b64` for binary; capped with `truncated`.

    `content` is decoded (no Content-Encoding). Echoes of the exchange's `secrets` and
    credential-named JSON fields are fingerprinted.
    """
    out: dict[str, Any] = {"body": None, "text": None}
    if content is None:
        return out
    truncated = len(content) > cap
    kept = content[:cap] if truncated else content
    text: str | None
    try:
        text = kept.decode("utf-8")
    except UnicodeDecodeError:
        text = _cut_text(kept) if truncated else None
    if text is not None and secrets:
        text = scrub_text(text, secrets)
    if text is None:
        out["b64"] = base64.b64encode(kept).decode("ascii")
    elif not truncated and text[:1] in "{[":
        try:
            out["body"] = json.loads(text)
        except ValueError:
            out["text"] = text
        else:
            if may_hold_secret_fields(text):
                out["body"] = redact_fields(out["body"])
    else:
        out["text"] = text
    if truncated:
        out["truncated"] = True
    return out


def _cut_text(kept: bytes) -> str | None:
    """Text whose last character the cap cut in two; None when it is not text at all."""
    head, tail = kept[:-UTF8_CUT_TAIL], kept[-UTF8_CUT_TAIL:]
    try:
        return head.decode("utf-8") + tail.decode("utf-8", "ignore")
    except UnicodeDecodeError:
        return None
