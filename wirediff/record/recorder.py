"""The recorder: records built and written in a process of their own, off the proxy.

Building a record (decoding, parsing, redacting, tagging, encoding JSON) costs several
times what taking a flow's `snapshot` does, and on mitmproxy's event loop it is CPU taken
from forwarding. So the capture addon sends each snapshot down a pipe (length-prefixed
`marshal` frames, written in batches without blocking the event loop) to
`python -m wirediff.record.recorder`, which builds the records and appends them in
batches. The recorder reads until the pipe closes: what was sent is written even when
mitmdump is killed. A full disk is reported once, and the records wait (`RecordWriter`).

Usage (started by the addon):
    python -m wirediff.record.recorder FILE SESSION BODY_CAP [REDACT] [ROTATE]
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import os
import select
import struct
import subprocess
import sys
from collections import deque
from pathlib import Path

from wirediff._types import Record
from wirediff.record.build import build_record, fallback_record
from wirediff.record.exchange import Exchange
from wirediff.record.flow import Snapshot, exchange_from_snapshot
from wirediff.record.parts import Rotation, parse_rotation
from wirediff.record.store import RecordWriter, encode_record

__all__ = ["Job", "Recorder", "build_job", "serve"]

Job = tuple[Snapshot, str, int, "str | None", "str | None"]
"""`(snapshot, label, seq, listener, replay_of)`: what a record is built from."""
FRAME = struct.Struct("<I")
MAX_PENDING = 256 << 20
"""Bytes of frames the recorder may be behind by; past them the addon records in-process."""
FLUSH_SECONDS = 0.02
"""Frames are sent down the pipe in batches this often: every write wakes the recorder,
and a wake-up per exchange costs the proxy more than building the record would."""
RETRY_SECONDS = 1.0
"""How often records waiting for a full disk are tried again when nothing else arrives."""
STOP_SECONDS = 60.0


def build_job(job: Job, session: str, body_cap: int, redact: frozenset[str]) -> Record:
    """The record of one job; when it cannot be built, what is certain about it."""
    snap, label, seq, listener, replay_of = job
    ex: Exchange = exchange_from_snapshot(snap)
    try:
        return build_record(
            ex,
            session=session,
            label=label,
            seq=seq,
            listener=listener,
            replay_of=replay_of,
            body_cap=body_cap,
            redact=redact,
        )
    except Exception as e:  # never lose the exchange: keep what is certain
        say(f"capture: could not build the record of {ex.request.method} {ex.id}: {e!r}")
        return fallback_record(ex, session, e, label=label, seq=seq, replay_of=replay_of)


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _Reporter:
    """One line when writing starts failing, one when it works again, one for what is lost."""

    def __init__(self, writer: RecordWriter) -> None:
        self.writer = writer
        self.failing = False

    def __call__(self) -> None:
        w = self.writer
        if w.failure is not None and not self.failing:
            self.failing = True
            say(
                f"capture: cannot write {w.path}: {w.failure.strerror or w.failure}; "
                f"records wait in memory until it can (up to {w.waiting} now)"
            )
        elif w.failure is None and self.failing:
            self.failing = False
            say(f"capture: writing {w.path} again; the waiting records are written")

    def finish(self) -> None:
        w = self.writer
        if w.waiting or w.lost:
            why = w.failure.strerror if w.failure is not None else "unknown"
            say(f"capture: {w.waiting + w.lost} records could not be written to {w.path} ({why})")


def serve(
    path: Path,
    session: str,
    body_cap: int,
    redact: frozenset[str],
    fd: int = 0,
    rotation: Rotation | None = None,
) -> None:
    """Read jobs from `fd` until it closes; build and append their records."""
    writer = RecordWriter(path, rotation)
    report = _Reporter(writer)
    buf = bytearray()
    while True:
        ready, _, _ = select.select([fd], [], [], RETRY_SECONDS if writer.waiting else None)
        if not ready:
            writer.retry()
            report()
            continue
        data = os.read(fd, 1 << 20)
        if not data:
            break
        buf += data
        lines = []
        at = 0
        while len(buf) - at >= FRAME.size:
            (size,) = FRAME.unpack_from(buf, at)
            if len(buf) - at - FRAME.size < size:
                break
            job = marshal.loads(buf[at + FRAME.size : at + FRAME.size + size])
            at += FRAME.size + size
            lines.append(encode_record(build_job(job, session, body_cap, redact)))
        del buf[:at]
        if lines:
            writer.write_lines(lines)
            report()
    writer.close()
    report()
    report.finish()


class Recorder:
    """The addon's end: a recorder process and a pipe to it that never blocks the loop.

    `send` queues a frame; the queue is flushed at once after a pause, then at most every
    `FLUSH_SECONDS` while records keep coming (what a kill -9 of mitmdump may lose); a pipe
    that is full is written when it drains (`loop.add_writer`). When the recorder is gone or too far
    behind, `send` returns False and the caller records in-process; `take_unsent` hands
    back the jobs that never reached the pipe.
    """

    def __init__(
        self,
        path: Path,
        session: str,
        body_cap: int,
        redact: frozenset[str],
        pythonpath: str,
        rotate: str = "",
    ) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (pythonpath, os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        # -O: mitmproxy type-checks every message it builds, unless optimised
        cmd = [
            sys.executable,
            "-O",
            "-m",
            "wirediff.record.recorder",
            str(path),
            session,
            str(body_cap),
            ",".join(sorted(redact)),
            rotate,
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            env=env,
            start_new_session=True,  # no Ctrl-C: it drains
        )
        assert self.proc.stdin is not None
        self._fd = self.proc.stdin.fileno()
        os.set_blocking(self._fd, False)
        self._buf = bytearray()
        self._frames: deque[int] = deque()  # sizes of the frames in _buf, to hand back unsent ones
        self._first_sent = 0  # bytes of the first of them already in the pipe
        self._timer: asyncio.TimerHandle | None = None
        self._flushed = float("-inf")
        self._waiting_writable = False
        self.broken: str | None = None

    def send(self, job: Job) -> bool:
        if self.broken is not None or len(self._buf) > MAX_PENDING:
            return False
        frame = marshal.dumps(job)
        self._buf += FRAME.pack(len(frame)) + frame
        self._frames.append(FRAME.size + len(frame))
        if self._timer is None and not self._waiting_writable:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop (a test): now
                self._flush()
            else:
                wait = self._flushed + FLUSH_SECONDS - loop.time()  # at once after a pause
                self._timer = loop.call_later(max(wait, 0.0), self._flush)
        return True

    def _flush(self) -> None:
        self._timer = None
        with contextlib.suppress(RuntimeError):
            self._flushed = asyncio.get_running_loop().time()
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # no event loop (a test): write it all now
            loop = None
            os.set_blocking(self._fd, True)
        try:
            done = os.write(self._fd, self._buf) if self._buf else 0
        except BlockingIOError:
            done = 0
        except OSError as e:  # the recorder is gone
            self.broken = f"the recorder process stopped ({e.strerror or e})"
            self._unwatch()
            return
        finally:
            if loop is None:
                os.set_blocking(self._fd, False)
        self._consume(done)
        if self._buf and loop is not None and not self._waiting_writable:
            self._waiting_writable = True
            loop.add_writer(self._fd, self._flush)
        elif not self._buf:
            self._unwatch()

    def _consume(self, done: int) -> None:
        del self._buf[:done]
        self._first_sent += done
        while self._frames and self._first_sent >= self._frames[0]:
            self._first_sent -= self._frames.popleft()

    def _unwatch(self) -> None:
        if self._waiting_writable:
            self._waiting_writable = False
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().remove_writer(self._fd)

    def take_unsent(self) -> list[Job]:
        """Jobs whose frames never went (whole) into the pipe; forgotten here."""
        jobs = []
        at = self._frames[0] - self._first_sent if self._first_sent else 0  # one half sent
        while at < len(self._buf):
            (size,) = FRAME.unpack_from(self._buf, at)
            jobs.append(marshal.loads(self._buf[at + FRAME.size : at + FRAME.size + size]))
            at += FRAME.size + size
        self._buf.clear()
        self._frames.clear()
        self._first_sent = 0
        return jobs

    def close(self) -> list[Job]:
        """Send what is queued, close the pipe and wait for the recorder to finish writing;
        returns the jobs it could not be given."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unwatch()
        unsent: list[Job] = []
        if self.broken is None and self._buf:
            os.set_blocking(self._fd, True)
            try:
                while self._buf:
                    self._consume(os.write(self._fd, self._buf))
            except OSError as e:
                self.broken = f"the recorder process stopped ({e.strerror or e})"
        if self._buf:
            unsent = self.take_unsent()
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return unsent


NICE = 5
"""The recorder yields the CPU to the proxy when both want it: records may lag, traffic not."""


def main(argv: list[str]) -> int:
    with contextlib.suppress(OSError):
        os.nice(NICE)
    path, session, cap, redact, rotate = [*argv, "", ""][:5]
    names = frozenset(n for n in redact.split(",") if n)
    serve(Path(path), session, int(cap), names, rotation=parse_rotation(rotate))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
