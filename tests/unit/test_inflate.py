"""Bounded decoding: every Content-Encoding decoded incrementally, never past its budget."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable

import brotli
import pytest
import zstandard

from wirediff.record.body import decode_body
from wirediff.record.inflate import decoder_for
from wirediff.record.tap import CHUNK_BUDGET, CHUNK_RATIO, CLOSE_BUDGET, StreamTap

STREAM = b"".join(b'data: {"n":%d,"pad":"%s"}\n\n' % (i, b"ab" * (i % 50)) for i in range(2000))
ZEROS = 1 << 28
"""What a bomb inflates to: 256 MiB, hundreds of times every budget here."""

Compress = Callable[[bytes], bytes]
CODINGS: list[tuple[str, Compress]] = [
    ("gzip", gzip.compress),
    ("deflate", zlib.compress),
    ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as servers really send
    ("br", brotli.compress),
    ("zstd", zstandard.ZstdCompressor().compress),
]


def bomb(coding: str, head: bytes = b"") -> bytes:
    """`head` followed by `ZEROS` newlines, compressed, built in pieces."""
    fill = b"\n" * (1 << 20)
    if coding == "br":
        br = brotli.Compressor(quality=5)
        return bytes(
            br.process(head) + b"".join(br.process(fill) for _ in range(ZEROS >> 20)) + br.finish()
        )
    if coding == "zstd":
        zs = zstandard.ZstdCompressor(level=3).compressobj()
        return (
            zs.compress(head) + b"".join(zs.compress(fill) for _ in range(ZEROS >> 20)) + zs.flush()
        )
    c = (
        zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        if coding == "gzip"
        else zlib.compressobj(9)
    )
    return c.compress(head) + b"".join(c.compress(fill) for _ in range(ZEROS >> 20)) + c.flush()


@pytest.fixture(scope="module", params=["gzip", "deflate", "br", "zstd"])
def bombs(request: pytest.FixtureRequest) -> tuple[str, bytes]:
    return request.param, bomb(request.param, b'{"a":"' + b"x" * 100)


@pytest.mark.parametrize(("coding", "compress"), CODINGS)
def test_incremental_decoders_in_any_chunking(coding: str, compress: Compress) -> None:
    packed = compress(STREAM)
    dec = decoder_for(coding)
    assert dec is not None
    out = bytearray()
    for i in range(0, len(packed), 7):
        dec.feed(packed[i : i + 7])
        while piece := dec.read(1000):
            assert len(piece) <= 1000
            out += piece
    assert bytes(out) == STREAM and dec.finished


def test_a_body_bomb_decodes_only_its_budget(bombs: tuple[str, bytes]) -> None:
    coding, raw = bombs
    out = decode_body(raw, coding, 4097)
    assert len(out) == 4097 and out.startswith(b'{"a":"xxx')


def test_a_stream_bomb_passes_untouched_and_is_truncated(bombs: tuple[str, bytes]) -> None:
    coding, raw = bombs
    tap = StreamTap(t0=0.0, content_encoding=coding, cap=1000, max_stream=1 << 20)
    step = 1 << 16
    for i in range(0, len(raw), step):
        chunk = raw[i : i + step]
        assert tap(chunk) is chunk
        assert tap.decoded <= (1 << 20) + 1
    tap(b"")
    tap.close()
    assert tap.truncated and tap.body_truncated and tap.wire_size == len(raw)
    assert len(tap.kept()) == 1000


@pytest.mark.parametrize(("coding", "compress"), CODINGS)
def test_each_chunk_decodes_at_most_its_budget(coding: str, compress: Compress) -> None:
    """A chunk that inflates a lot decodes its budget; the rest waits in the decoder for
    the next chunks or the end of the stream, and nothing is lost."""
    big = STREAM * 12
    packed = compress(big)
    tap = StreamTap(t0=0.0, content_encoding=coding)
    tap(packed)
    assert tap.decoded <= max(CHUNK_BUDGET, CHUNK_RATIO * len(packed)) < len(big)
    tap(b"")
    tap.close()
    assert tap.decoded == len(big) and not tap.truncated
    assert len(tap.events) == 12 * 2000 and tap.events[-1]["data"].startswith('{"n":1999')


def test_what_waits_at_the_end_is_decoded_within_its_budget() -> None:
    tap = StreamTap(t0=0.0, content_encoding="gzip")
    packed = gzip.compress(b"\n" * (64 << 20), mtime=0)
    tap(packed)
    tap.close()
    first = max(CHUNK_BUDGET, CHUNK_RATIO * len(packed))
    assert tap.truncated and tap.decoded <= first + CLOSE_BUDGET


def test_a_broken_stream_encoding_is_noted_and_passes() -> None:
    tap = StreamTap(t0=0.0, content_encoding="gzip")
    assert tap(b"not gzip at all") == b"not gzip at all"
    tap.close()
    assert tap.decode_error is not None and tap.events == []
