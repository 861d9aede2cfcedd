"""The hostile tier: real mitmdump processes, bare and with the capture addon, in front of a
hostile upstream in its own process; what they cost is compared side by side."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CAPTURE_ADDON, MITMDUMP, ROOT, free_port, wait_port
from wirediff._types import Record
from wirediff.record.store import load_records


def family(pid: int) -> list[int]:
    pids = [pid]
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            pids += [int(c) for c in (task / "children").read_text().split()]
    return pids


def reset_peak_rss(pid: int) -> None:
    """Start measuring peak memory afresh for a process and its children (Linux)."""
    for p in family(pid):
        with contextlib.suppress(OSError):
            Path(f"/proc/{p}/clear_refs").write_text("5")


def peak_rss(pid: int) -> int:
    """Peak resident memory of a process and of the children it has now (bytes)."""
    total = 0
    for p in family(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
    return total


@pytest.fixture(scope="session")
def upstream() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.hostile.upstream", str(port)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        wait_port(port, 30, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


@dataclass
class Proxy:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    capture_dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def capture_file(self) -> Path:
        return self.capture_dir / "h.jsonl"

    def peak_rss(self) -> int:
        return peak_rss(self.proc.pid)

    def reset_peak_rss(self) -> None:
        reset_peak_rss(self.proc.pid)

    def stop(self) -> str:
        """Stop gracefully (the recorder writes what it has); return the log."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.log.read_text(errors="replace")

    def records(self) -> list[Record]:
        return load_records([self.capture_file])


ProxyFactory = Callable[..., Proxy]


def start_proxy(
    tmp: Path,
    upstream: str,
    capture: bool = True,
    *,
    extra: list[str] | None = None,
    quiet: bool = True,
    capture_dir: Path | None = None,
    name: str = "p",
) -> Proxy:
    """mitmdump in reverse mode in front of `upstream`; bare, it gets the options the addon
    sets (lazy connect, and SSE streamed through)."""
    port = free_port()
    where = capture_dir or tmp / f"{name}-captures"
    log = tmp / f"{name}-mitmdump.log"
    cmd = [
        MITMDUMP,
        "--listen-host",
        "127.0.0.1",
        "--mode",
        f"reverse:{upstream}@{port}",
        "--set",
        f"confdir={tmp / 'conf'}",
        "--set",
        "connection_strategy=lazy",
    ]
    cmd += ["-q"] if quiet else []
    if capture:
        cmd += ["-s", CAPTURE_ADDON, "--set", f"capture_dir={where}", "--set", "capture_session=h"]
    else:
        cmd += ["--set", "stream_large_bodies=1"]
    with log.open("wb") as fh:
        proc = subprocess.Popen([*cmd, *(extra or [])], stdout=fh, stderr=subprocess.STDOUT)
    p = Proxy(proc, port, log, where)
    try:
        wait_port(port, 30, proc)
    except Exception:
        raise RuntimeError(f"mitmdump did not start: {p.stop()[-2000:]}") from None
    return p


@pytest.fixture
def proxy(tmp_path: Path, upstream: str) -> Iterator[ProxyFactory]:
    """`proxy(capture=True, extra=[...], quiet=True)`: a mitmdump for this test."""
    started: list[Proxy] = []

    def start(capture: bool = True, **kw: Any) -> Proxy:
        p = start_proxy(tmp_path, upstream, capture, name=f"p{len(started)}", **kw)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()
