from __future__ import annotations

import json
import random

import pytest

from wirediff._types import Event
from wirediff.record.sse import SSESplitter, parse_events, split_events

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


def feed_all(chunks: list[bytes]) -> list[Event]:
    sp = SSESplitter()
    out: list[Event] = []
    for c in chunks:
        out += sp.feed(c)
    return parse_events(out + sp.close())


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


def test_split_events_whole_body() -> None:
    events, dropped = split_events(STREAM, 5.0)
    events = parse_events(events)
    assert [e["t_ms"] for e in events] == [5.0] * 4 and dropped == 0
    assert json.dumps(events[0]["data"]) == '{"type": "response.created", "sequence_number": 0}'


def test_a_whole_body_keeps_the_events_a_stream_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("wirediff.record.sse.SPLIT_PIECE", 7)
    monkeypatch.setattr("wirediff.record.sse.MAX_EVENTS", 3)
    events, dropped = split_events(b"data: a\n\n" * 5 + b"data: b")
    assert [e["data"] for e in events] == ["a", "a", "a"] and dropped == 3
    events, dropped = split_events(b"data: a\n\ndata: b")  # the last, unended, kept
    assert [(e["data"], e.get("partial")) for e in events] == [("a", None), ("b", True)]


def test_a_long_event_keeps_its_first_bytes_and_is_marked() -> None:
    sp = SSESplitter(max_event=1000)
    big = b"data: " + b"x" * 50_000
    out = []
    for i in range(0, len(big), 333):  # one line across many chunks: never buffered whole
        out += sp.feed(big[i : i + 333])
        assert len(sp._line) <= 1016
    out += sp.feed(b'\n\ndata: {"after":1}\n\n')
    (long, after) = parse_events(out)
    assert long == {"event": None, "data": "x" * 1000, "truncated": True}
    assert after == {"event": None, "data": {"after": 1}}


def test_many_data_lines_are_capped_per_event() -> None:
    sp = SSESplitter(max_event=1000)
    (ev,) = sp.feed(b"data: 0123456789\n" * 500 + b"\n")
    assert ev["truncated"] and len(ev["data"]) <= 1000
    assert ev["data"] == "\n".join(["0123456789"] * 91)


def test_runs_of_blank_lines_and_lone_crs() -> None:
    raw = b"\n\r\n\r\r\n" * 1000 + b"data: a\r\r\r\ndata: b\r" + b"\r" * 999 + b"data: c\n\n"
    assert feed_all([raw[i : i + 97] for i in range(0, len(raw), 97)]) == [
        {"event": None, "data": "a"},
        {"event": None, "data": "b"},
        {"event": None, "data": "c"},
    ]


def test_deep_json_data_stays_text_marked() -> None:
    deep = "[" * 5000 + "]" * 5000
    (ev,) = feed_all([f"data: {deep}\n\n".encode()])
    assert ev == {"event": None, "data": deep, "depth_limited": True}


def _random_stream(rnd: random.Random) -> tuple[bytes, list[int]]:
    """SSE text of every kind of line, and the offsets where its events end."""
    out, ends = b"", []
    for _ in range(rnd.randint(1, 12)):
        for _ in range(rnd.randint(0, 4)):
            out += rnd.choice(
                [
                    b"data: " + rnd.choice([b"", b"x", b'{"a":1}', "é✓".encode(), b" two"]),
                    b"data:" + rnd.choice([b"tight", b"", b":colon"]),
                    b"data",
                    b"event: " + rnd.choice([b"e", b"", b"response.created"]),
                    b"id: " + rnd.choice([b"7", b""]),
                    b": a comment",
                    b"retry: 10",
                    b"other: field",
                ]
            )
            out += b"\n"
        out += b"\n" * rnd.choice([1, 1, 1, 2, 3])
        ends.append(len(out))
    return out, ends


@pytest.mark.parametrize("seed", range(200))
def test_every_kind_of_line_splits_alike_in_whole_events_or_byte_by_byte(seed: int) -> None:
    rnd = random.Random(seed)
    raw, ends = _random_stream(rnd)
    cuts = sorted(set(rnd.sample(ends, rnd.randint(1, len(ends)))) | {len(raw)})
    whole = [raw[a:b] for a, b in zip([0, *cuts], cuts, strict=False) if b > a]

    def split(chunks: list[bytes], max_event: int = 1 << 20) -> list[Event]:
        sp = SSESplitter(max_event)
        return [ev for c in chunks for ev in sp.feed(c)] + sp.close()

    by_byte = split([raw[i : i + 1] for i in range(len(raw))])
    assert split(whole) == by_byte
    assert split(whole, max_event=8) == split([raw[i : i + 1] for i in range(len(raw))], 8)
