"""Loopback plumbing shared by the demo, the replayer, benchmarks and tests."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["free_port", "wait_file", "wait_port"]


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_file(path: Path, timeout: float, proc: subprocess.Popen[Any]) -> None:
    """Block until `path` exists; fail early if `proc` died."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early with status {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"not started after {timeout:.0f}s")
        time.sleep(0.02)


def wait_port(port: int, timeout: float = 20.0, proc: subprocess.Popen[Any] | None = None) -> None:
    """Block until something accepts on 127.0.0.1:port; fail early if `proc` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited early with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout:.0f}s")
