"""Shared fixtures: real processes on loopback, waited on by condition, never by sleeping."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, cast

import pytest
from openai.types.websocket_connection_options import WebSocketConnectionOptions

from wirediff._types import Record
from wirediff.cli.netutil import free_port, wait_port

NOT_PROXIED = cast(WebSocketConnectionOptions, {"proxy": None})
"""`client.responses.connect()` straight to loopback, not through a proxy the environment
names (a `websockets` option the SDK's type does not list)."""

__all__ = [
    "REQUIRED_ENV",
    "Lockstep",
    "WirediffCapture",
    "free_port",
    "launch_mitmdump",
    "missing",
    "wait_for",
    "wait_port",
]

REQUIRED_ENV = "WIREDIFF_REQUIRED"
"""Set to 1 (`make test` does): a tier whose dependency is missing fails instead of skipping."""

ROOT = Path(__file__).resolve().parent.parent
MITMDUMP = str(Path(sys.executable).with_name("mitmdump"))
CAPTURE_ADDON = str(ROOT / "addons" / "capture.py")


def wait_for(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll a condition with a deadline; returns its first truthy value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise TimeoutError(f"timed out waiting for {what}")


def missing(what: str) -> NoReturn:
    """A tier's dependency is not installed: skip, or fail when `WIREDIFF_REQUIRED=1`."""
    if os.environ.get(REQUIRED_ENV, "") not in ("", "0"):
        pytest.fail(f"{what} ({REQUIRED_ENV} is set)", pytrace=False)
    pytest.skip(what)


class Lockstep:
    """Hands a stream over one event at a time, to prove pass-through by cause, not by timing.

    The backend calls `turn(n)` before sending event n and may go on only once the client
    has called `read()` for events 0..n-1. Anything that holds events back (a buffering
    proxy, an unflushed writer) leaves the backend waiting: at `deadline` seconds it gives
    up, the stream ends early, and leaving the `with` block fails saying which event stuck.
    """

    def __init__(self, deadline: float = 15.0) -> None:
        self.deadline = deadline
        self.stalled: int | None = None
        self._read = 0
        self._cond = threading.Condition()

    def read(self) -> None:
        """Client side: one more event has arrived."""
        with self._cond:
            self._read += 1
            self._cond.notify_all()

    def turn(self, n: int) -> bool:
        """Backend side: may event n go out? Waits until the client has read n events."""
        with self._cond:
            if self._cond.wait_for(lambda: self._read >= n, self.deadline):
                return True
            self.stalled = n
            return False

    def __enter__(self) -> Lockstep:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.stalled is not None:
            raise AssertionError(
                f"event {self.stalled - 1} did not reach the client within {self.deadline} s"
                f" of being sent, so event {self.stalled} was never sent: it was held back"
            ) from exc


class Mitmdump:
    """A running `mitmdump -s addons/capture.py` with one or more listeners."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        ports: list[int],
        capture_dir: Path,
        session: str,
        confdir: Path,
        log: Path,
    ) -> None:
        self.proc, self.ports, self.capture_dir = proc, ports, capture_dir
        self.session, self.confdir, self.log = session, confdir, log

    @property
    def port(self) -> int:
        return self.ports[0]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}"

    @property
    def capture_file(self) -> Path:
        return self.capture_dir / f"{self.session}.jsonl"

    @property
    def ca_cert(self) -> Path:
        return self.confdir / "mitmproxy-ca-cert.pem"

    def records(self, n: int | None = None, timeout: float = 10.0) -> list[Record]:
        """The capture's records; with `n`, wait until at least n are written."""
        from wirediff.record.store import load_records

        def read() -> list[Record] | None:
            if not self.capture_file.exists():
                return None if n else []
            recs = load_records([self.capture_file])
            return recs if n is None or len(recs) >= n else None

        if n is None:
            return read() or []
        return list(wait_for(read, timeout, f"{n} records in {self.capture_file}"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def launch_mitmdump(
    directory: Path,
    modes: list[str] | None = None,
    *,
    session: str = "s",
    label: str = "",
    extra: list[str] | None = None,
    addon: bool = True,
    confdir: Path | None = None,
    log: Path | None = None,
) -> Mitmdump:
    """`mitmdump -s addons/capture.py` with a free port per mode, capturing under
    `directory/captures`, once every listener is up."""
    modes = modes or ["regular"]
    ports = [free_port() for _ in modes]
    capture_dir = directory / "captures"
    confdir = confdir or directory / "mitmconf"
    log = log or directory / "mitmdump.log"
    cmd = [MITMDUMP, "-q", "--listen-host", "127.0.0.1", "--set", f"confdir={confdir}"]
    for mode, port in zip(modes, ports, strict=True):
        cmd += ["--mode", f"{mode}@{port}"]
    if addon:
        cmd += [
            "-s",
            CAPTURE_ADDON,
            "--set",
            f"capture_dir={capture_dir}",
            "--set",
            f"capture_session={session}",
        ]
        if label:
            cmd += ["--set", f"capture_label={label}"]
    cmd += extra or []
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as log_fh:
        proc = subprocess.Popen(cmd, stdout=log_fh, stderr=subprocess.STDOUT, env=env)
    m = Mitmdump(proc, ports, capture_dir, session, confdir, log)
    try:
        for p in ports:
            wait_port(p, 30, proc)
    except Exception:
        m.stop()
        raise RuntimeError(f"mitmdump failed to start: {log.read_text()[-2000:]}") from None
    return m


@pytest.fixture
def mitmdump(tmp_path: Path) -> Iterator[Callable[..., Mitmdump]]:
    """Factory: `mitmdump(["reverse:http://127.0.0.1:P"], label=..., extra=[...])`.

    Each mode gets its own free port; the confdir (and so the CA) is per test, unless
    `confdir` gives one of its own (a second CA).
    """
    started: list[Mitmdump] = []

    def start(modes: list[str] | None = None, **options: Any) -> Mitmdump:
        m = launch_mitmdump(
            tmp_path, modes, log=tmp_path / f"mitmdump-{len(started)}.log", **options
        )
        started.append(m)
        return m

    yield start
    for m in started:
        m.stop()


@dataclass
class WirediffCapture:
    """A running `wirediff capture` and what it printed (its output goes to `output`)."""

    proc: subprocess.Popen[bytes]
    base_url: str
    capture_file: Path
    output: Path

    @classmethod
    def start(
        cls, argv: list[str], output: Path, env: dict[str, str], cwd: Path | None = None
    ) -> WirediffCapture:
        """`python -m wirediff capture ARGV`, once it has printed where the client goes."""
        with output.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "wirediff", "capture", *argv],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**env, "PYTHONUNBUFFERED": "1"},
                start_new_session=True,  # so `kill` reaches its mitmdump too
            )

        def printed() -> tuple[str, str] | None:
            text = output.read_text(errors="replace")
            url = re.search(r"client base URL: (\S+)", text)
            path = re.search(r"capture file: +(\S+)", text)
            if url and path:
                return url.group(1), path.group(1)
            if proc.poll() is not None:
                raise RuntimeError(f"wirediff capture exited with {proc.returncode}:\n{text}")
            return None

        try:
            base_url, path = wait_for(printed, 60, "wirediff capture to print its base URL")
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        return cls(proc, base_url, Path(path), output)

    @property
    def proxy_url(self) -> str:
        return self.base_url.rsplit("/v1", 1)[0]

    @property
    def printed(self) -> str:
        return self.output.read_text(errors="replace")

    def stop(self) -> list[Record]:
        """Ctrl-C, as a person would: exit 130 and the records it wrote."""
        from wirediff.record.store import load_records

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        assert self.proc.returncode == 130, self.printed[-3000:]
        return load_records([self.capture_file]) if self.capture_file.exists() else []

    def kill(self) -> None:
        """After a test that did not `stop()`: Ctrl-C, then SIGKILL to the process group."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
