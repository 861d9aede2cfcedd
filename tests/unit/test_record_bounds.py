"""Records past what a capture writes (events, keys, line length, objects and lists): every
reader skips them with one warning naming file:line, before they cost what they would."""

from __future__ import annotations

import io
import json
import math
import random
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.spec import AbstractBufferedFile

from tests.fixtures import records as fx
from wirediff._types import Record
from wirediff.engine.run import Run
from wirediff.engine.sources import open_binary
from wirediff.record import lines, validate
from wirediff.record.build import build_record
from wirediff.record.exchange import Exchange, Request, Response, Timings
from wirediff.record.lines import next_line
from wirediff.record.store import encode_record, load_records
from wirediff.record.validate import containers


def _count(value: Any) -> int:
    found, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            found += 1
            stack += node.values()
        elif isinstance(node, list):
            found += 1
            stack += node
    return found


def _value(rng: random.Random, depth: int = 0) -> Any:
    """JSON whose strings are made of what string-aware counting must not be fooled by."""
    pick = rng.random()
    if depth > 4 or pick < 0.3:
        return "".join(rng.choice('{}[]"\\:,aé') for _ in range(rng.randint(0, 9)))
    if pick < 0.6:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {_value(rng, 9): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


@pytest.mark.parametrize("piece", [1, 2, 7, 1 << 20])
def test_objects_and_lists_are_counted_outside_strings(
    monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    monkeypatch.setattr(validate, "_ESCAPE_RUN", piece)
    rng = random.Random(piece)
    for _ in range(500):
        value = _value(rng)
        for ascii_only in (True, False):
            text = json.dumps(value, ensure_ascii=ascii_only).encode()
            assert containers(text) == _count(value), text


def _small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (validate, lines):
        monkeypatch.setattr(module, "MAX_CONTAINERS", 60)
        monkeypatch.setattr(module, "MAX_LINE_BYTES", 1 << 20)
    monkeypatch.setattr(validate, "MAX_EVENTS", 12)
    monkeypatch.setattr(validate, "MAX_KEYS", 30)
    monkeypatch.setattr(lines, "READ_PIECE", 1000)  # a long line read in pieces


def _hostile(tmp_path: Path) -> tuple[Path, list[str]]:
    """A capture whose lines 2, 4, 5 and 6 hold more than the (small) bounds."""
    events = fx.chat_record(id="events", stream=True)
    fx.answer(events)["events"] = [{"t_ms": 1.0, "event": None, "data": "x"}] * 13
    keys = fx.chat_record(id="keys")
    keys["request"]["body"] = {f"k{i}": i for i in range(31)}
    long = fx.chat_record(id="long")
    fx.answer(long)["text"] = "x" * (1 << 20)
    nested = fx.chat_record(id="nested")
    fx.answer(nested)["body"] = [[] for _ in range(61)]
    fine: list[Record] = [fx.chat_record(id=i) for i in "abc"]
    path = tmp_path / "h.jsonl"
    path.write_bytes(
        b"".join(encode_record(r) for r in [fine[0], events, fine[1], keys, long, nested, fine[2]])
    )
    return path, [
        f"{path}:2: a record of 13 events, past the 12 a capture writes: skipped",
        f"{path}:4: an object of 31 keys, past the 30 a capture writes: skipped",
        f"{path}:5: a line of {len(encode_record(long)):,} bytes, past the 1 MiB a capture "
        "writes: skipped",
        f"{path}:6: a record of {_count(nested)} objects and lists, past the 60 a capture "
        "writes: skipped",
    ]


def test_every_reader_skips_a_record_past_the_bounds_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _small_bounds(monkeypatch)
    path, said = _hostile(tmp_path)
    assert [r["id"] for r in load_records([path])] == ["a", "b", "c"]
    assert [r.getMessage() for r in caplog.records] == said
    caplog.clear()
    with Run("local", progress=False) as run:
        run.report([str(path)], ignore=(), max_examples=3)
    assert [r.getMessage() for r in caplog.records] == said


def test_a_whole_sse_body_keeps_the_events_a_stream_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer split whole (an imported flow or HAR entry), not by a stream's tap, keeps
    no more events than a stream would, the rest counted."""
    monkeypatch.setattr("wirediff.record.sse.MAX_EVENTS", 3)
    ex = Exchange(
        request=Request(
            method="POST", url="http://h/v1/chat/completions", path="/v1/chat/completions",
            http_version="HTTP/1.1", headers=[], content=b"{}",
        ),
        response=Response(
            status=200, reason="OK", http_version="HTTP/1.1",
            headers=[("content-type", "text/event-stream")], content=b'data: {"n":1}\n\n' * 5,
        ),
        timings=Timings(started=1.0, first_byte=1.1, finished=1.2),
    )  # fmt: skip
    rec = build_record(ex, session="s", label="l", seq=0)
    assert [e["data"] for e in fx.events_of(rec)] == [{"n": 1}] * 3
    assert fx.answer(rec)["events_dropped"] == 2 and fx.answer(rec)["truncated"] is True


class _Pipe(io.RawIOBase):
    """A stream that cannot seek (a pipe)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._data.readinto(buffer)


@pytest.mark.parametrize("seekable", [True, False])
def test_lines_are_read_whole_up_to_the_bound_and_past_it_never_held(
    monkeypatch: pytest.MonkeyPatch, seekable: bool
) -> None:
    monkeypatch.setattr(lines, "READ_PIECE", 10)
    for module in (lines, validate):
        monkeypatch.setattr(module, "MAX_LINE_BYTES", 100)
    given = [b"a\n", b"b" * 99 + b"\n", b"c" * 101 + b"\n", b"d" * 100, b""]
    data = b"".join(given)
    fh = io.BufferedReader(io.BytesIO(data) if seekable else _Pipe(data))  # type: ignore[arg-type]
    torn: list[tuple[int, str]] = []
    read = [next_line(fh, n, torn) for n in range(len(given))]
    assert read == [(given[0], 2), (given[1], 100), (b"", 102), (given[3], 100), (b"", 0)]
    assert torn == [(2, "a line of 102 bytes, past the 0 MiB a capture writes: skipped")]


class _Remote(AbstractBufferedFile):  # type: ignore[misc]
    """A file as fsspec's remote filesystems (s3, gcs, http) give them: buffered by fsspec,
    its readline bounded by nothing."""

    def __init__(self, fs: Any, path: str, data: bytes) -> None:
        self.data = data
        super().__init__(fs, path, mode="rb", size=len(data))

    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.data[start:end]


class _RemoteFileSystem(MemoryFileSystem):  # type: ignore[misc]
    protocol = "wdremote"
    files: dict[str, bytes] = {}

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        return _Remote(self, path, self.files[path.split("://", 1)[-1]])


def test_a_remote_file_is_read_a_bounded_line_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines, "READ_PIECE", 10)
    for module in (lines, validate):
        monkeypatch.setattr(module, "MAX_LINE_BYTES", 100)
    fsspec.register_implementation("wdremote", _RemoteFileSystem, clobber=True)
    monkeypatch.setitem(_RemoteFileSystem.files, "/c.jsonl", b"a\n" + b"b" * 200 + b"\nc\n")
    torn: list[tuple[int, str]] = []
    with open_binary("wdremote:///c.jsonl") as fh:
        read = [next_line(fh, n, torn) for n in range(4)]
    assert read == [(b"a\n", 2), (b"", 201), (b"c\n", 2), (b"", 0)]
    assert [n for n, _ in torn] == [1]


def test_a_batch_reads_each_line_to_the_value_json_gives_and_says_which_orjson_read(
    tmp_path: Path,
) -> None:
    """Every reader parses by `parse_batch`: orjson where it agrees with `json`, `json` where it
    would not (integers past 64 bits, NaN, lone surrogates), torn lines skipped and told."""
    texts = [
        b'{"a": 1, "s": "x12345678901234567890123"}',  # digits in a string: orjson reads it
        b'{"a": 18446744073709551616}',  # past 64 bits: a float to orjson
        b'{"a": NaN}',
        b'{"a": "\\ud800"}',
    ]
    batch = list(enumerate(texts, start=1))
    torn: lines.Torn = []
    parsed, exact = lines.parse_batch(tmp_path / "c.jsonl", batch, torn)
    values = [v["a"] for _, _, v in parsed]
    assert parsed[0][2] == json.loads(texts[0])
    assert values[1] == 2**64 and type(values[1]) is int
    assert math.isnan(values[2]) and values[3] == "\ud800"
    assert exact == [True, False, False, False] and torn == []
    parsed, exact = lines.parse_batch(tmp_path / "c.jsonl", [*batch, (5, b'{"a": 1')], torn)
    assert [n for n, _, _ in parsed] == [1, 2, 3, 4] and exact == [False] * 4
    assert torn == [(5, "not a JSON record (a torn write): skipped")]
