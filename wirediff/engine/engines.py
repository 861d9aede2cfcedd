"""Run the scan's tasks on this machine's cores or on a Dask cluster.

`local` is a process pool, or this process when there is one task; `dask` is a
`dask.distributed` cluster, the scheduler at `--scheduler ADDRESS` or else a local cluster.
Both hand results back as they finish. A worker lost mid-task costs Dask a retry of that
task, never the run."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from wirediff.errors import UsageError, WirediffError

__all__ = ["Call", "DaskEngine", "Engine", "LocalEngine", "open_engine"]

Call = tuple[tuple[Any, ...], dict[str, Any]]


class Engine(Protocol):
    workers: int

    def run(
        self, fn: Callable[..., Any], calls: Sequence[Call], *, small: bool = False
    ) -> Iterator[tuple[int, Any]]:
        """Call `fn(*args, **kwargs)` for each call and yield `(index, result)` as they finish.

        `small` says there is little work, which a local engine does in this process."""

    def close(self, now: bool = False) -> None:
        """Stop the engine; with `now`, the run was cut short and its tasks are not waited for."""


class LocalEngine:
    """Run tasks in a pool of processes, one per core, for as long as a run's tasks take.

    At most one task more than workers is in flight, so memory holds the results of those only;
    when the tasks are done the workers go, and their memory with them, while the command
    analyses what they read."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._pool: ProcessPoolExecutor | None = None

    def run(
        self, fn: Callable[..., Any], calls: Sequence[Call], *, small: bool = False
    ) -> Iterator[tuple[int, Any]]:
        if self.workers == 1 or len(calls) <= 1 or small:
            for i, (args, kwargs) in enumerate(calls):
                yield i, fn(*args, **kwargs)
            return
        if self._pool is None:
            context = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=context, initializer=_leave_interrupts
            )
        waiting = iter(enumerate(calls))
        running: dict[Future[Any], int] = {}
        left = len(calls)
        while left or running:
            while left and len(running) < self.workers + 1:
                i, (args, kwargs) = next(waiting)
                left -= 1
                running[self._pool.submit(fn, *args, **kwargs)] = i
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                yield running.pop(future), future.result()
        self.close()

    def close(self, now: bool = False) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if now:  # no result will be read: the partitions in flight are not waited for
            for process in list(pool._processes.values()):
                process.terminate()
        pool.shutdown(cancel_futures=True)


def _leave_interrupts() -> None:
    """Leave Ctrl-C to the command, which stops the worker with `close`.

    Ctrl-C reaches every process of the terminal's group; a worker that took it would die with a
    traceback of its own."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class DaskEngine:
    """Run the same tasks on a `dask.distributed` cluster.

    The workers need wirediff installed and must reach the inputs: a shared path, or a URL such
    as `s3://…`."""

    def __init__(
        self, scheduler: str | None = None, workers: int | None = None, connect_s: float = 30.0
    ) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise UsageError(
                "--engine dask needs dask.distributed: pip install 'wirediff[dask]'"
            ) from None
        self._cluster = None
        if scheduler is not None:
            self._client = _connected(_address(scheduler), connect_s)
        else:
            n = max(1, workers or os.cpu_count() or 1)
            with _quiet_workers():
                self._cluster = LocalCluster(
                    n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0"
                )
            try:
                self._client = Client(self._cluster)
            except BaseException:
                self._cluster.close()
                raise
        self.workers = max(1, len(self._client.scheduler_info().get("workers", {})))

    def run(
        self, fn: Callable[..., Any], calls: Sequence[Call], *, small: bool = False
    ) -> Iterator[tuple[int, Any]]:
        from distributed import as_completed

        tag = f"wirediff-{getattr(fn, '__name__', 'task')}-{uuid.uuid4().hex[:8]}"
        futures = [
            self._client.submit(_error_as_value, fn, *args, key=f"{tag}-{i}", pure=False, **kwargs)
            for i, (args, kwargs) in enumerate(calls)
        ]
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            done = as_completed(futures, with_results=True)
            for future, result in done:
                if isinstance(result, _UserError):
                    raise result.error
                yield index[future.key], result
                future.release()
        finally:
            for future in futures:
                future.release()

    def close(self, now: bool = False) -> None:
        if not now or self._cluster is None:
            self._client.close()
            if self._cluster is not None:
                self._cluster.close()
            return
        # a run cut short, on a cluster of its own: its workers are ended, not asked to
        # finish (they would be killed after seconds anyway, each with a warning), and the
        # results still being fetched for it (`as_completed`) fail on the closed comms
        # without a traceback from the event loop
        said = [logging.getLogger(name) for name in ("distributed", "tornado.application")]
        levels = [logger.level for logger in said]
        for logger in said:
            logger.setLevel(logging.CRITICAL)
        try:
            for nanny in list(self._cluster.workers.values()):
                pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", 0)
                if pid:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            self._client.close()
            self._cluster.close()
        finally:
            for logger, level in zip(said, levels, strict=True):
                logger.setLevel(level)


@contextlib.contextmanager
def _quiet_workers() -> Iterator[None]:
    """Keep the processes of a cluster started for the command quiet on Ctrl-C.

    They inherit an ignored SIGINT and the log level, so the command closes them, where each
    would otherwise die with a traceback, and they keep their warnings about the tasks it
    cancels to themselves."""
    previous_level = os.environ.get(_LOG_LEVEL)
    os.environ[_LOG_LEVEL] = "error"
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if previous_level is None:
            os.environ.pop(_LOG_LEVEL, None)
        else:
            os.environ[_LOG_LEVEL] = previous_level


_LOG_LEVEL = "DASK_LOGGING__DISTRIBUTED"


@dataclass(frozen=True)
class _UserError:
    error: WirediffError


def _error_as_value(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Return `fn`'s result, or the one line for the user it raised, as a value.

    A task that fails is logged by its worker with a traceback, and an unreadable input is no
    failure of the engine's."""
    try:
        return fn(*args, **kwargs)
    except WirediffError as e:
        return _UserError(e)


_SHAPE = "a scheduler's address: tcp://HOST:8786"


def _address(scheduler: str) -> str:
    """Check that `scheduler` can be an address: a host, and a port if any, a socket takes."""
    try:
        where = urlsplit(scheduler if "://" in scheduler else f"tcp://{scheduler}")
        where.port  # noqa: B018 (read for its check: a port past 65535 is none)
    except ValueError as e:
        raise UsageError(f"--scheduler {scheduler}: {e} ({_SHAPE})") from None
    if not where.hostname:
        raise UsageError(f"--scheduler {scheduler!r}: no host ({_SHAPE})")
    return scheduler


def _connected(scheduler: str, connect_s: float) -> Any:
    """Connect a client to the scheduler at `scheduler`, or fail with a usage error.

    A port that accepts and never answers as a scheduler would hold `Client` for good, whatever
    its own timeout, so the client connects in a thread the process can leave after
    `connect_s`; a client that connects after that is closed."""
    from distributed import Client

    where = urlsplit(scheduler if "://" in scheduler else f"tcp://{scheduler}")
    if where.scheme == "tcp" and where.hostname:  # refused at once: not after `connect_s`
        try:
            socket.create_connection((where.hostname, where.port or 8786), connect_s).close()
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise UsageError(f"--scheduler {scheduler}: {why} ({_SHAPE})") from None
    got: dict[str, Any] = {}
    lock = threading.Lock()

    def connect() -> None:
        try:
            client = Client(scheduler, timeout=connect_s)
        except Exception as e:  # no such host, no port, a bad scheme, a refused handshake
            got["error"] = e
            return
        with lock:
            if "abandoned" not in got:
                got["client"] = client
                return
        client.close()

    waiting = threading.Thread(target=connect, name="wirediff-dask-connect", daemon=True)
    waiting.start()
    waiting.join(connect_s + 1)  # its own timeout first, when it keeps it
    with lock:
        if "client" in got:
            return got["client"]
        got["abandoned"] = True
    why = got.get("error") or f"nothing answered as a Dask scheduler in {connect_s:.0f} s"
    raise UsageError(f"--scheduler {scheduler}: {why} ({_SHAPE})")


def open_engine(name: str, scheduler: str | None = None, workers: int | None = None) -> Engine:
    if name == "dask":
        return DaskEngine(scheduler, workers)
    if scheduler is not None:
        raise UsageError("--scheduler names a Dask scheduler: give --engine dask too")
    return LocalEngine(workers)
