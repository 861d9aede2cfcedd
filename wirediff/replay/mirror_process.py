"""Mirror live requests to candidates in a process of their own, away from the proxy.

Sending a request with httpx and recording its answer costs about a millisecond of CPU per
candidate; on mitmproxy's event loop that is time taken from forwarding, and the client
waits for it. So the shadow addon sends plain values down a pipe (`wirediff.record.pipe`):
a `config` frame (the candidates, each key by the name of its variable, read here from the
environment this process inherited; the bounds; where records go), then per live request a
`request` frame (the request's parts as mitmproxy holds them) and, for one that can mint
ids, an `answer` frame with the primary's answer (`exchange_state`); mitmproxy is never
imported here. This process runs a `Mirror` on its own event loop and records the candidates' answers
itself. When the pipe closes (mitmdump stops, or is killed) it waits for the pending
mirrors (`DRAIN_SECONDS`), cancels what is left, writes, and says what it did on stderr.

Usage (started by the shadow addon): python -m wirediff.replay.mirror_process
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from wirediff._types import Record
from wirediff.record.exchange import Exchange, Request, exchange_from_state, header_pairs
from wirediff.record.pipe import READ_SIZE, FramePipe, FrameReader
from wirediff.record.spool import PACKAGE_ROOT, RecordMeta, WriteReport, build_item, say
from wirediff.record.store import RecordWriter
from wirediff.replay.connections import Connections
from wirediff.replay.mirror import Candidate, Live, Mirror
from wirediff.replay.targets import Target

__all__ = ["DRAIN_SECONDS", "MAX_PENDING", "NICE", "Config", "MirrorProcess", "Mirroring", "main"]

DRAIN_SECONDS = 10.0
"""When the pipe closes, how long pending mirrors are waited for before they are cancelled."""
NICE = 19
"""The mirrors yield the CPU to the proxy: they may lag, the client's traffic not."""
MAX_PENDING = 32 << 20
"""Bytes of frames the mirror process may be behind by; past them the shadow drops mirrors."""

Config = dict[str, Any]
"""What the mirror process is told to do.

`candidates`: `[label, url, key variable | None, model map]`…; then `queue`, `concurrency`,
`allow_unsafe`, `body_cap`, `redact`, `capture_dir`."""


class MirrorProcess(FramePipe):
    """Start the mirror process and hold the pipe to it: the shadow addon's end.

    The process is started, never forked from a proxy holding its listening sockets and
    threads."""

    def __init__(self) -> None:
        super().__init__(
            "wirediff.replay.mirror_process", [], PACKAGE_ROOT, max_pending=MAX_PENDING
        )

    @property
    def name(self) -> str:
        return "shadow's mirror"

    async def aclose(self) -> None:
        """Close the pipe and wait for the process to drain, at most `DRAIN_SECONDS`."""
        unsent = self.close()
        if unsent:
            say(f"shadow: {len(unsent)} frames never reached the mirror process")


class Mirroring:
    """Hold the mirrors of one process and the files records go to.

    The `Mirror` of the current configuration serves; those of earlier ones drain.
    `transport_for` gives tests' candidates."""

    def __init__(
        self,
        transport_for: Callable[[Target], httpx.AsyncBaseTransport] | None = None,
        log: Callable[[str], None] = say,
    ) -> None:
        self.transport_for, self.log = transport_for, log
        self.mirror: Mirror | None = None
        self.retired: list[Mirror] = []
        self.reports: dict[Path, WriteReport] = {}

    def configure(self, config: Config) -> None:
        if self.mirror is not None:
            self.retired.append(self.mirror)
        concurrency = int(config["concurrency"])
        candidates = []
        for label, url, var, model_map in config["candidates"]:
            key = os.environ.get(var) if var else None
            target = Target(label, url, var, model_map)
            make = self.transport_for
            connections = (
                Connections.to_network(concurrency)
                if make is None
                else Connections(concurrency, functools.partial(make, target))
            )
            candidates.append(Candidate(target, key, connections))
        directory = Path(config["capture_dir"])
        cap, redact = int(config["body_cap"]), frozenset(config["redact"])

        def record(path: Path, ex: Exchange, meta: RecordMeta) -> None:
            self.write(path, build_item(ex, meta, cap, redact))

        self.mirror = Mirror(
            candidates,
            path_of=lambda session, label: directory / f"{session}.{label}.jsonl",
            record=record,
            queue=int(config["queue"]),
            body_cap=cap,
            allow_unsafe=bool(config["allow_unsafe"]),
            redact=redact,
            log=self.log,
        )

    def write(self, path: Path, rec: Record) -> None:
        said = self.reports.get(path)
        if said is None:
            said = self.reports[path] = WriteReport(RecordWriter(path), "shadow", self.log)
        said.writer.write(rec)
        said()

    def handle(self, item: Any) -> None:
        kind = item[0]
        if kind == "config":
            self.configure(item[1])
        elif self.mirror is None:
            return
        elif kind == "request":
            _, live, session, seq = item
            live_id, method, url, path, version, fields, content, started = live
            request = Request(
                method=method,
                url=url,
                path=path,
                http_version=version,
                headers=header_pairs(fields),
                content=content,
            )
            self.mirror.submit(Live(live_id, session, seq, request, started))
        elif kind == "answer":
            _, live_id, state = item
            self.mirror.answered(live_id, exchange_from_state(state))

    async def close(self) -> None:
        for mirror in (*self.retired, *([self.mirror] if self.mirror else [])):
            await mirror.close(DRAIN_SECONDS)
            for line in mirror.summary():
                self.log(line)
        for said in self.reports.values():
            said.close()


async def serve(fd: int = 0) -> None:
    """Mirror what comes down `fd` until it closes."""
    loop = asyncio.get_running_loop()
    reader, mirroring = FrameReader(), Mirroring()
    closed = asyncio.Event()
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        if not data:
            loop.remove_reader(fd)
            closed.set()
            return
        for item in reader.feed(data):
            try:
                mirroring.handle(item)
            except Exception as e:  # one bad frame must not stop the others
                say(f"shadow: could not mirror: {e!r}")

    loop.add_reader(fd, readable)
    await closed.wait()
    await mirroring.close()


def main() -> int:
    with contextlib.suppress(OSError):
        os.nice(NICE)
    asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
