"""Share loopback plumbing between the demo, the replayer, benchmarks and tests."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

__all__ = ["free_port", "wait_file", "wait_port"]


EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""The ports the kernel hands out for bind(0) and outgoing connections."""
LOWEST = 10_000
"""The lowest port `free_port` picks: below this are the ports services are known by."""


def free_port() -> int:
    """Return a port free on 127.0.0.1, below the kernel's ephemeral range when it can.

    A port bind(0) gave is back in the kernel's pool once let go: an outgoing connection or
    another bind(0) anywhere on the machine may take it before the listener it was picked
    for binds it. Ports below the ephemeral range are given to no one who did not ask for
    them, so the pick holds until the listener binds.
    """
    try:
        first = int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 0
    for _ in range(200 if first > LOWEST else 0):
        port = random.randrange(LOWEST, first)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
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
