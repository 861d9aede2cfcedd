"""Two writers appending to one capture (two mitmdumps of one session, a capture and a
mirror): no record lost, none torn, none moved aside as a fragment while its writer lives."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.fixtures import records as fx
from tests.unit.test_store_import import FullDisk
from wirediff._types import Record
from wirediff.record.parts import Rotation, capture_parts
from wirediff.record.store import RecordWriter, encode_record, load_records


def records(prefix: str, n: int) -> list[Record]:
    """Records of one size (ids and seqs of three digits)."""
    return [fx.chat_record(id=f"{prefix}{i:03}", seq=100 + i) for i in range(n)]


def waiting_for_lock(path: Path) -> bool:
    """Someone waits for a `flock` on `path` (`/proc/locks` lists a blocked request
    with `->`)."""
    inode = os.stat(path).st_ino
    return any(
        line.split()[1] == "->" and line.split()[6].endswith(f":{inode}")
        for line in Path("/proc/locks").read_text().splitlines()
        if len(line.split()) > 6
    )


def test_a_writer_waits_for_the_line_another_is_writing(tmp_path: Path) -> None:
    """Another process's write in progress (its lock held, half its line written) is no
    crash fragment: the second writer appends after the whole line."""
    path = tmp_path / "s.jsonl"
    mine, theirs = records("a", 1)[0], encode_record(records("b", 1)[0])
    with RecordWriter(path) as first:
        first.write(records("a0-", 1)[0])
    other = os.open(path, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(other, fcntl.LOCK_EX)
    os.write(other, theirs[:100])
    writer = RecordWriter(path)
    worker = threading.Thread(target=writer.write, args=(mine,))
    worker.start()
    wait_for(
        lambda: not worker.is_alive() or waiting_for_lock(path), 10, "the writer to wait or write"
    )
    os.write(other, theirs[100:])
    fcntl.flock(other, fcntl.LOCK_UN)
    os.close(other)
    worker.join()
    writer.close()
    assert [r["id"] for r in load_records([path])] == ["a0-000", "b000", "a000"]
    assert not path.with_name("s.jsonl.fragments").exists()


def test_a_failed_write_cuts_back_only_its_own_half_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FullDisk()
    monkeypatch.setattr("wirediff.record.store.os.write", disk)
    path = tmp_path / "s.jsonl"
    a, b = RecordWriter(path), RecordWriter(path)
    for i, (ra, rb) in enumerate(zip(records("a", 110), records("b", 110), strict=True)):
        if i == 50:
            disk.full, disk.fd = True, a._fd  # a's disk is full for a while; b writes on
        if i == 60:
            disk.full = False
        assert a.write(ra) == (not 50 <= i < 60)
        assert b.write(rb)
    a.close()
    b.close()
    ids = [r["id"] for r in load_records([path])]
    assert len(ids) == 220 and set(ids) == {f"{w}{i:03}" for w in "ab" for i in range(110)}
    assert not path.with_name("s.jsonl.fragments").exists()


def test_two_rotating_writers_share_the_parts_and_their_size(tmp_path: Path) -> None:
    base = tmp_path / "s.jsonl"
    line = len(encode_record(records("a", 1)[0]))
    rotation = Rotation(max_bytes=4 * line)
    a, b = RecordWriter(base, rotation), RecordWriter(base, rotation)
    order: list[str] = []
    for ra, rb in zip(records("a", 30), records("b", 30), strict=True):
        for writer, rec in ((a, ra), (b, rb)):
            assert writer.write(rec)
            order.append(rec["id"])
    a.close()
    b.close()
    parts = capture_parts(base)
    assert [p.stat().st_size for p in parts] == [4 * line] * 15
    assert [r["id"] for r in load_records([base])] == order


def test_a_fragment_a_dead_writer_left_is_moved_aside_by_the_live_one(tmp_path: Path) -> None:
    """A writer killed mid-line holds no lock: the next append, by a writer that was open
    all along, moves its fragment aside."""
    path = tmp_path / "s.jsonl"
    with RecordWriter(path) as w:
        w.write(records("a", 1)[0])
        with path.open("ab") as dead:
            dead.write(b'{"format": "wiredi')
        w.write(records("b", 1)[0])
    assert [r["id"] for r in load_records([path])] == ["a000", "b000"]
    assert path.with_name("s.jsonl.fragments").read_bytes() == b'{"format": "wiredi\n'
