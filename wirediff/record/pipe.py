"""Send `marshal` frames to a child process down a pipe that never blocks an event loop.

Whoever hands work to a process of its own (the capture addon's recorder, the replayer's
spool, the shadow's mirror process) sends plain values down this pipe: length-prefixed `marshal` frames,
queued and written in batches (at once after a pause, then at most every `FLUSH_SECONDS`
while more keep coming: every write wakes the child, and a wake-up per item costs more than
the item), a full pipe written when it drains (`loop.add_writer`). The child reads batches
until the pipe closes (`frame_batches`), so what was sent is handled even when the parent is
killed. No mitmproxy here: the replayer uses it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import marshal
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

__all__ = [
    "FLUSH_SECONDS",
    "FRAME",
    "MAX_PENDING",
    "STOP_SECONDS",
    "Forked",
    "FramePipe",
    "can_fork",
    "frame_batches",
]

FRAME = struct.Struct("<I")
MAX_PENDING = 256 << 20
"""Bytes of frames the child may be behind by, by default; past them `send` refuses.

The caller then does the work itself, or drops it."""
FLUSH_SECONDS = 0.02
STOP_SECONDS = 60.0
READ_SIZE = 1 << 20


def can_fork() -> bool:
    """Tell whether forking is safe here: POSIX with pidfd, as Linux has, and no other thread.

    A fork copies only the calling thread, and whatever another held stays held in the child."""
    return hasattr(os, "pidfd_open") and threading.active_count() == 1


class Forked:
    """Run `main(read_fd)` in a child forked from this process, in a session of its own.

    It offers what the pipe uses of `subprocess.Popen`: `stdin`, `wait`, `kill`, `returncode`.

    Forking costs a millisecond where starting an interpreter and importing the record
    builder costs a tenth of a second; the child leaves the objects it inherited to the
    garbage collector's permanent generation (`gc.freeze`), so it copies no page it does not
    write, and ends with `os._exit` (none of the parent's cleanup runs twice).
    """

    def __init__(self, main: Callable[[int], int]) -> None:
        read, write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                os.close(write)
                os.setsid()  # Ctrl-C reaches the terminal's process group, not this one
                gc.freeze()
                code = main(read)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(read)
        self.pid = pid
        self.stdin: IO[bytes] | None = os.fdopen(write, "wb", buffering=0)
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
                os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ready, _, _ = select.select([self._pidfd], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(f"forked {self.pid}", timeout or 0.0)
        code = self.poll()
        assert code is not None
        return code

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)


class FramePipe:
    """Start a child process and hold a non-blocking pipe to its stdin: the parent's end.

    The child is forked, running `fork(fd)`, where that is safe; else it runs `python -O -m
    MODULE ARGS…`. It has a session of its own, so that Ctrl-C leaves it to drain.

    `send` queues a frame; when the child is gone or too far behind it returns False, and
    `take_unsent` hands back what never reached the pipe. `close` sends what is queued,
    closes the pipe and waits for the child to finish.
    """

    def __init__(
        self,
        module: str,
        args: Sequence[str],
        pythonpath: str | None = None,
        fork: Callable[[int], int] | None = None,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.max_pending = max_pending
        self.proc: subprocess.Popen[bytes] | Forked
        if fork is not None and can_fork():
            self.proc = Forked(fork)
        else:
            env = dict(os.environ)
            if pythonpath:
                env["PYTHONPATH"] = os.pathsep.join(
                    p for p in (pythonpath, os.environ.get("PYTHONPATH", "")) if p
                )
            # -O: mitmproxy type-checks every message it builds, unless optimised
            self.proc = subprocess.Popen(
                [sys.executable, "-O", "-m", module, *args],
                stdin=subprocess.PIPE,
                env=env,
                start_new_session=True,
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

    def send(self, item: Any) -> bool:
        if self.broken is not None or len(self._buf) > self.max_pending:
            return False
        frame = marshal.dumps(item)
        self._buf += FRAME.pack(len(frame))
        self._buf += frame
        self._frames.append(FRAME.size + len(frame))
        if self._timer is None and not self._waiting_writable:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no event loop (a test, a plain script): now
                self._flush()
            else:
                wait = self._flushed + FLUSH_SECONDS - loop.time()  # at once after a pause
                self._timer = loop.call_later(max(wait, 0.0), self._flush)
        return True

    @property
    def pending(self) -> int:
        """Count the bytes queued and not yet in the pipe."""
        return len(self._buf)

    def _flush(self) -> None:
        self._timer = None
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # no event loop: write it all now
            loop = None
            os.set_blocking(self._fd, True)
        if loop is not None:
            self._flushed = loop.time()
        try:
            done = os.write(self._fd, self._buf) if self._buf else 0
        except BlockingIOError:
            done = 0
        except OSError as e:  # the child is gone
            self.broken = f"the {self.name} process stopped ({e.strerror or e})"
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

    @property
    def name(self) -> str:
        return "child"

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

    def take_unsent(self) -> list[Any]:
        """Take the items whose frames never went whole into the pipe; they are forgotten here."""
        items = []
        at = self._frames[0] - self._first_sent if self._first_sent else 0  # one half sent
        while at < len(self._buf):
            (size,) = FRAME.unpack_from(self._buf, at)
            items.append(marshal.loads(self._buf[at + FRAME.size : at + FRAME.size + size]))
            at += FRAME.size + size
        self._buf.clear()
        self._frames.clear()
        self._first_sent = 0
        return items

    def close(self) -> list[Any]:
        """Send what is queued, close the pipe and wait for the child to finish.

        Return the items it could not be given."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unwatch()
        unsent: list[Any] = []
        if self.broken is None and self._buf:
            os.set_blocking(self._fd, True)
            try:
                while self._buf:
                    self._consume(os.write(self._fd, self._buf))
            except OSError as e:
                self.broken = f"the {self.name} process stopped ({e.strerror or e})"
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


class FrameReader:
    """Feed the child's end whatever a read returned; give the items of the frames it completed."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        buf = self._buf
        buf += data
        items = []
        at = 0
        while len(buf) - at >= FRAME.size:
            (size,) = FRAME.unpack_from(buf, at)
            if len(buf) - at - FRAME.size < size:
                break
            items.append(marshal.loads(buf[at + FRAME.size : at + FRAME.size + size]))
            at += FRAME.size + size
        del buf[:at]
        return items


def frame_batches(fd: int, timeout: Callable[[], float | None]) -> Iterator[list[Any] | None]:
    """Yield the items of each read from `fd`, in order, until it closes: the child's end, blocking.

    None comes when nothing came for `timeout()` seconds; a `timeout()` of None waits for
    ever."""
    reader = FrameReader()
    while True:
        ready, _, _ = select.select([fd], [], [], timeout())
        if not ready:
            yield None
            continue
        data = os.read(fd, READ_SIZE)
        if not data:
            return
        items = reader.feed(data)
        if items:
            yield items
