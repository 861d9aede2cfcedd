"""Start `mitmdump -s addons/capture.py` as a real process for capture, demo and benchmarks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from wirediff.addons import READY_ENV
from wirediff.cli.netutil import free_port, wait_file, wait_port

__all__ = ["CAPTURE_ADDON", "CaptureProxy", "mitmdump_binary"]

CAPTURE_ADDON = Path(__file__).resolve().parent.parent / "addons" / "capture.py"
LOG_TAIL = 500
"""Characters of mitmdump's log quoted when it does not start: the end says why."""


def mitmdump_binary() -> str:
    """Find the mitmdump beside this interpreter in a venv, else the one on PATH."""
    local = Path(sys.executable).with_name("mitmdump")
    if local.exists():
        return str(local)
    found = shutil.which("mitmdump")
    if not found:
        raise FileNotFoundError("mitmdump not found: install mitmproxy (pip install mitmproxy)")
    return found


@dataclass
class CaptureProxy:
    """Run a mitmdump process with the capture addon and one reverse listener per upstream.

    `ports` default to free ones; `extra` goes last on mitmdump's command line. With
    `console`, mitmdump logs each flow to this process's terminal (`wirediff capture`);
    otherwise it runs quiet, its errors going to `log`.
    """

    upstreams: list[str]
    capture_dir: Path
    session: str
    label: str = ""
    confdir: Path | None = None
    ports: list[int] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    console: bool = False

    def __post_init__(self) -> None:
        self.ports = self.ports or [free_port() for _ in self.upstreams]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    @property
    def log(self) -> Path:
        return self.capture_dir / f"{self.session}.mitmdump.log"

    @property
    def capture_file(self) -> Path:
        return self.capture_dir / f"{self.session}.jsonl"

    def start(self) -> CaptureProxy:
        cmd = [mitmdump_binary(), *([] if self.console else ["-q"])]
        cmd += ["--listen-host", "127.0.0.1", "-s", str(CAPTURE_ADDON)]
        cmd += [
            "--set",
            f"capture_dir={self.capture_dir}",
            "--set",
            f"capture_session={self.session}",
        ]
        if self.label:
            cmd += ["--set", f"capture_label={self.label}"]
        if self.confdir:
            cmd += ["--set", f"confdir={self.confdir}"]
        for upstream, port in zip(self.upstreams, self.ports, strict=True):
            cmd += ["--mode", f"reverse:{upstream}@{port}"]
        cmd += self.extra
        self.capture_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="wirediff-capture-") as temp:
            ready = Path(temp) / "ready"
            env = {**os.environ, READY_ENV: str(ready)}
            if self.console:
                self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, env=env)
            else:
                # A file, not a pipe: a stream of addon errors must never fill a pipe and
                # stall it.
                with self.log.open("wb") as log:
                    self.proc = subprocess.Popen(
                        cmd, stdout=subprocess.DEVNULL, stderr=log, env=env
                    )
            try:
                for port in self.ports:
                    wait_port(port, 30, self.proc)
                wait_file(ready, 30, self.proc)  # the addon loaded and records
            except (RuntimeError, TimeoutError) as e:
                why = self.stop().strip()[-LOG_TAIL:]
                raise RuntimeError(
                    f"mitmdump did not start: {e}{': ' + why if why else ''}"
                ) from None
        return self

    def stop(self) -> str:
        """Stop gracefully (records are flushed per write anyway); return its log.

        An empty log is removed: the captures' folder keeps only what says something."""
        if self.proc is None:
            return ""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        if self.console:
            return ""  # mitmdump wrote to the terminal
        said = self.log.read_text(encoding="utf-8", errors="replace")
        if not said:
            self.log.unlink(missing_ok=True)
        return said

    def __enter__(self) -> CaptureProxy:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
