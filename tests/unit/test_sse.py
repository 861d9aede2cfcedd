from __future__ import annotations

import gzip
import json
import random
import zlib

import brotli
import pytest

from wirediff.record.sse import SSESplitter, decoder_for, split_events

STREAM = (
    b": keep-alive comment\n\n"
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n'
    b"data: line one\ndata: line two\n\n"
    b"id: 7\ndata:no-space\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    {"event": "response.created", "data": {"type": "response.created", "sequence_number": 0}},
    {"event": None, "data": "line one\nline two"},
    {"event": None, "data": "no-space", "id": "7"},
    {"event": None, "data": "[DONE]"},
]


def feed_all(chunks: list[bytes]) -> list[dict[str, object]]:
    sp = SSESplitter()
    out = []
    for c in chunks:
        out += sp.feed(c)
    return out + sp.close()


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_line_endings(newline: bytes) -> None:
    assert feed_all([STREAM.replace(b"\n", newline)]) == EXPECTED


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
def test_arbitrary_chunking(seed: int, newline: bytes) -> None:
    raw = STREAM.replace(b"\n", newline)
    rnd = random.Random(seed)
    cuts = sorted(rnd.sample(range(1, len(raw)), rnd.randint(1, 30)))
    chunks = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    assert feed_all(chunks) == EXPECTED


def test_byte_by_byte_crlf_split_between_cr_and_lf() -> None:
    raw = STREAM.replace(b"\n", b"\r\n")
    assert feed_all([raw[i : i + 1] for i in range(len(raw))]) == EXPECTED


def test_multibyte_utf8_split_across_chunks() -> None:
    raw = 'data: {"t":"héllo ✓"}\n\n'.encode()
    cut = raw.index("✓".encode()) + 1
    assert feed_all([raw[:cut], raw[cut:]]) == [{"event": None, "data": {"t": "héllo ✓"}}]


def test_stream_cut_mid_event_is_kept_as_partial() -> None:
    out = feed_all([b'data: {"a":1}\n\ndata: {"b":'])
    assert out == [
        {"event": None, "data": {"a": 1}},
        {"event": None, "data": '{"b":', "partial": True},
    ]


def test_invalid_json_stays_text() -> None:
    assert feed_all([b"data: {not json\n\n"]) == [{"event": None, "data": "{not json"}]


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as servers really send
        ("br", brotli.compress),
        ("", lambda b: b),
    ],
)
def test_incremental_decoders(encoding: str, compress: object) -> None:
    packed = compress(STREAM)  # type: ignore[operator]
    decode = decoder_for(encoding)
    out = b"".join(decode(packed[i : i + 7]) for i in range(0, len(packed), 7))
    assert out == STREAM


def test_split_events_whole_body() -> None:
    events = split_events(STREAM, 5.0)
    assert [e["t_ms"] for e in events] == [5.0] * 4
    assert json.dumps(events[0]["data"]) == '{"type": "response.created", "sequence_number": 0}'
