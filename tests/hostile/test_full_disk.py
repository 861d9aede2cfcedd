"""A full disk: no torn line, no record twice, and what waited is written once there is room.

As root the capture goes to a small tmpfs that the test fills up and empties again; as
any other user the recorder runs in-process over a writer whose disk is full on demand.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import marshal
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_for
from tests.hostile.conftest import ProxyFactory
from tests.unit.test_capture_addon import chat_flow
from wirediff._types import Record
from wirediff.record.flow import snapshot
from wirediff.record.recorder import FRAME, serve
from wirediff.record.store import load_records

pytestmark = pytest.mark.hostile

BEFORE, AFTER = 30, 5


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "256k") -> Iterator[Path]:
    where.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        check=True,
        capture_output=True,
    )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def can_mount() -> bool:
    return (
        os.geteuid() == 0
        and subprocess.run(["which", "mount"], capture_output=True).returncode == 0
    )


def fill(disk: Path, leave: int = 6000) -> Path:
    """Fill the disk but `leave` bytes; the filler file is returned (delete it: room)."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 4096)
    st = os.statvfs(disk)
    room = st.f_bavail * st.f_frsize
    if room < leave:
        filler.write_bytes(b"\0" * max(filler.stat().st_size - (leave - room), 0))
    return filler


def check(path: Path, n: int) -> None:
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and all(line.startswith(b'{"format":') for line in raw.splitlines())
    ids = [r["id"] for r in load_records([path])]
    assert len(ids) == n and len(set(ids)) == n, "every record once, none twice"


@pytest.mark.skipif(not can_mount(), reason="a tmpfs needs root: see the fault-injecting test")
def test_a_full_tmpfs(proxy: ProxyFactory, tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "disk") as disk:
        filler = fill(disk)
        cap = proxy(capture_dir=disk)
        with httpx.Client(base_url=cap.url, timeout=30) as c:
            for i in range(BEFORE):
                c.post("/fast", json={"model": "m", "input": f"request {i} " + "x" * 500})

            def log() -> str:
                return cap.log.read_text(errors="replace")

            wait_for(lambda: "cannot write" in log(), 30, "the recorder to report a full disk")
            filler.unlink()  # room again: what waits is written, without another request
            wait_for(
                lambda: cap.capture_file.exists() and len(cap.records()) == BEFORE,
                30,
                "the waiting records",
            )
            for i in range(AFTER):
                c.post("/fast", json={"model": "m", "input": f"after {i}"})
        out = cap.stop()
        check(cap.capture_file, BEFORE + AFTER)
        assert out.count("cannot write") == 1 and out.count("again") == 1, out
        assert "Traceback" not in out


def between_writes(path: Path) -> tuple[list[Record], bytes]:
    """Read the records and the bytes of `path` under its lock, so never while the writer is
    between a half-written batch and cutting it back (it retries every `RETRY_SECONDS`)."""
    with path.open("rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        try:
            return load_records([path]), path.read_bytes()
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class FullDisk:
    """`os.write` that writes half a line and then fails with ENOSPC while `full`."""

    def __init__(self) -> None:
        self.full = False
        self.real = os.write

    def __call__(self, fd: int, data: bytes) -> int:
        if self.full and fd > 2:
            if len(data) > 64:
                self.real(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.real(fd, data)


def test_a_fault_injecting_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    disk = FullDisk()
    monkeypatch.setattr("wirediff.record.store.os.write", disk)
    monkeypatch.setattr("wirediff.record.recorder.RETRY_SECONDS", 0.05)
    read, write = os.pipe()
    path = tmp_path / "c.jsonl"
    server = threading.Thread(target=serve, args=(path, "s", 1 << 20, frozenset(), read))
    server.start()

    def send(i: int) -> None:
        f = chat_flow()
        frame = marshal.dumps((snapshot(f, None), "l", i, None, None))
        disk.real(write, FRAME.pack(len(frame)) + frame)

    send(0)
    wait_for(lambda: path.exists() and len(between_writes(path)[0]) == 1, 10, "a first record")
    disk.full = True
    for i in range(1, BEFORE):
        send(i)
    wait_for(lambda: "cannot write" in capsys.readouterr().err, 10, "the report")
    records, data = between_writes(path)  # the bytes too: read apart, a retry may be halfway
    assert len(records) == 1 and data.endswith(b"\n")
    disk.full = False
    for i in range(BEFORE, BEFORE + AFTER):
        send(i)
    os.close(write)
    server.join(30)
    check(path, BEFORE + AFTER)
    assert [r["seq"] for r in load_records([path])] == list(range(BEFORE + AFTER))
