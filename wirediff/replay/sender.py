"""Send a plan's requests in dependency order and record each answer: the replay engine.

Concurrency is bounded and sends are paced; the capture's own record builder records each
answer, so it has the shape of live traffic.

Sending is what the engine's process does; recording is not, where it can be helped: an
answer no later step reads ids from goes to the spool process (`wirediff.record.spool`) as
plain values, and only what the counts need is read of it here. The records of the answers
later steps build on are built here, since the target's ids are read from them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx

from wirediff._support import is_2xx
from wirediff._types import Record
from wirediff.errors import PlanError
from wirediff.record.body import DEFAULT_BODY_CAP, decode_body
from wirediff.record.build import classify_error
from wirediff.record.exchange import Error, Exchange
from wirediff.record.spool import RecordMeta, build_item
from wirediff.record.tags import is_error_body
from wirediff.replay.config import CONNECT_TIMEOUT, DEFAULT_TIMEOUT, Options
from wirediff.replay.connections import Connections
from wirediff.replay.output import Writers
from wirediff.replay.plan import Node, Plan, resolve
from wirediff.replay.request import Outgoing, prepare
from wirediff.replay.targets import Target
from wirediff.replay.wire import Sent, exception_words, send, to_httpx, unsent_exchange

__all__ = [
    "SPOOL_AT",
    "Counts",
    "Offload",
    "ProgressFactory",
    "TargetRun",
    "TokenBucket",
    "counted",
    "replay_all",
]

ProgressFactory = Callable[[str, int, int], tuple[Callable[["Counts"], None], Any]]
"""A progress display's maker: `(label, total, already_done) -> (update(counts), closable)`."""
Offload = Callable[[Node, Exchange, RecordMeta], bool]
"""Hand an answered exchange on to be recorded elsewhere; False: record it here."""
SPOOL_AT = 32
"""Exchanges to send from which a run records through a spool process.

Starting one costs about what recording a few dozen exchanges here does."""
SOFT_ERROR_SCAN = 1 << 16
"""Bytes of a 2xx body looked at for an error object when counting an offloaded answer."""


def _error_in(text: Any) -> bool:
    """Tell whether this JSON text or value is an error object (`is_error_body`).

    Text is parsed only when it may be one."""
    if not isinstance(text, str):
        return is_error_body(text)
    if '"error"' not in text and '"detail"' not in text:
        return False
    try:
        return is_error_body(json.loads(text))
    except ValueError:
        return False


def counted(ex: Exchange) -> Record:
    """Return what `Counts.add` reads of the record of `ex`, without building the record.

    That is its error's kind, its status, and whether a 2xx carries an error."""
    resp, err = ex.response, ex.error
    error = None
    if err is not None:
        error = {"kind": err.kind or classify_error(err.message, resp is not None)}
    soft = False
    if resp is not None and is_2xx(resp.status):
        tap = ex.tap
        if tap is not None and tap.sse:
            soft = any(_error_in(ev.get("data")) for ev in tap.events)
        else:
            raw = tap.kept() if tap is not None else resp.content or b""
            encoding = "" if tap is not None else resp.content_encoding
            head = decode_body(raw, encoding, SOFT_ERROR_SCAN)
            soft = head[:1] == b"{" and _error_in(head.decode("utf-8", "replace"))
    counted = {
        "error": error,
        "response": None if resp is None else {"status": resp.status},
        "tags": {"soft_error": soft},
    }
    return cast("Record", counted)  # only the keys Counts.add reads


@dataclass
class Counts:
    total: int = 0
    resumed: int = 0
    done: int = 0
    ok: int = 0
    http_errors: int = 0
    transport_errors: int = 0
    skipped: int = 0
    sent: int = 0
    unreachable: int = 0
    """Sent, and no connection made: refused, timed out or a TLS handshake that failed."""
    unreachable_kinds: dict[str, int] = field(default_factory=dict)
    """The `error.kind`s those are recorded as, each with how many."""
    no_answer: int = 0
    """Sent, and no answer at all came back: unreachable, timed out, or cut before a status."""

    def add(self, rec: Record, *, connect_failed: bool) -> None:
        self.done += 1
        err = rec.get("error")
        if err is not None and err["kind"] == "skipped":
            self.skipped += 1
            return
        self.sent += 1
        if connect_failed:
            self.unreachable += 1
            kind = err["kind"] if err is not None else "upstream_unreachable"
            self.unreachable_kinds[kind] = self.unreachable_kinds.get(kind, 0) + 1
        resp = rec.get("response")
        if resp is None:
            self.no_answer += 1
        if resp is None or err:
            self.transport_errors += 1
        elif resp["status"] >= 400 or rec["tags"].get("soft_error"):
            self.http_errors += 1
        else:
            self.ok += 1

    def line(self) -> str:
        return (
            f"{self.ok} ok, {self.http_errors} error answers, "
            f"{self.transport_errors} transport errors, {self.skipped} skipped"
        )


class TokenBucket:
    """Allow at most `rate` sends per second, with bursts of `burst`; tests inject the clock."""

    def __init__(
        self,
        rate: float,
        burst: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = asyncio.sleep,
    ) -> None:
        self.rate, self.burst = rate, max(burst, 1.0)
        self.tokens = self.burst
        self._clock, self._sleep = clock, sleep
        self.stamp = clock()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    async def take(self) -> None:
        async with self._lock:
            self._refill()
            if self.tokens < 1.0:
                await self._sleep((1.0 - self.tokens) / self.rate)
                self._refill()
            self.tokens -= 1.0


class TargetRun:
    """Replay a plan to one target: dependency order, bounded concurrency, one record each."""

    def __init__(
        self,
        plan: Plan,
        target: Target,
        api_key: str | None,
        sink: Callable[[Record], None],
        done: dict[str, Record | None],
        *,
        concurrency: int,
        rate: float | None = None,
        timeout: httpx.Timeout | None = None,
        attempts: Mapping[str, int] | None = None,
        offload: Offload | None = None,
    ) -> None:
        self.plan, self.target, self.api_key = plan, target, api_key
        self.offload = offload
        """Where answers no later step reads ids from are recorded (None: here, to `sink`)."""
        self.attempts = attempts or {}
        """Attempts recorded for each original by prior runs: the next one is attempt n + 1."""
        self.interrupted: list[Node] = []
        self.sink, self.done = sink, done
        self.concurrency = concurrency
        self.bucket = TokenBucket(rate) if rate else None
        self.timeout = (
            timeout or httpx.Timeout(DEFAULT_TIMEOUT, connect=CONNECT_TIMEOUT)
        ).as_dict()
        self.progress: Callable[[Counts], None] | None = None
        self.listener = f"replay:{target.shown}"
        self.counts = Counts(total=len(plan), resumed=sum(1 for n in plan.nodes if n.id in done))

    # -- scheduling --
    async def run(self, connections: Connections) -> Counts:
        """Replay every node not already done, over `connections`; return the counts.

        A received answer is recorded from the event loop's next turn, while the worker
        already has its next request on the wire: the CPU spent on the record overlaps the
        target's time instead of adding to it. What depends on an exchange is released once
        its record exists, since the target's ids are read from the record.
        """
        todo = [n for n in self.plan.nodes if n.id not in self.done]
        waiting = {n.id: {d for d in n.deps if d not in self.done} for n in todo}
        queue: asyncio.PriorityQueue[tuple[int, str]] = asyncio.PriorityQueue()
        for n in todo:
            if not waiting[n.id]:
                queue.put_nowait((n.order, n.id))
        left = len(todo)
        finished = asyncio.Event()
        if not left:
            finished.set()
        pending: dict[str, Sent] = {}
        errors: list[BaseException] = []

        def complete(node: Node, rec: Record, connect_failed: bool, sunk: bool = False) -> None:
            nonlocal left
            nid = node.id
            if not sunk:
                self.sink(rec)
            # only what later steps read ids from is kept whole: a long session stays small
            self.done[nid] = rec if self.plan.dependents[nid] else None
            self.counts.add(rec, connect_failed=connect_failed)
            if self.progress is not None:
                self.progress(self.counts)
            for dep in self.plan.dependents[nid]:
                if dep in waiting and nid in waiting[dep]:
                    waiting[dep].discard(nid)
                    if not waiting[dep]:
                        queue.put_nowait((self.plan.by_id[dep].order, dep))
            left -= 1
            if left == 0:
                finished.set()

        def record_pending(node: Node) -> None:
            got = pending.pop(node.id, None)
            if got is None:
                return
            try:
                if self.offloaded(node, got):
                    complete(node, counted(got.exchange), got.connect_failed, sunk=True)
                else:
                    complete(node, self.finalize(node, got), got.connect_failed)
            except Exception as e:  # a callback's exception would only be logged: re-raise it
                errors.append(e)
                finished.set()

        async def worker() -> None:
            loop = asyncio.get_running_loop()
            while True:
                _, nid = await queue.get()
                node = self.plan.by_id[nid]
                got = await self.process(connections, node)
                if isinstance(got, Sent):
                    pending[nid] = got
                    loop.call_soon(record_pending, node)
                else:
                    complete(node, got, False)

        try:
            async with asyncio.TaskGroup() as tg:
                n_workers = min(self.concurrency, max(left, 1))
                workers = [tg.create_task(worker()) for _ in range(n_workers)]
                await finished.wait()
                for w in workers:
                    w.cancel()
        finally:  # stopped (Ctrl-C) with answers received but not yet recorded: record them
            for nid in list(pending):
                record_pending(self.plan.by_id[nid])
            for node in self.interrupted:  # sent, no answer yet: the target may have it
                why = "stopped (Ctrl-C) while waiting for the answer: the target may have it"
                self.sink(self.unsent(node, why, "interrupted", {}))
            self.interrupted.clear()
        if errors:
            raise errors[0]
        return self.counts

    async def process(self, connections: Connections, node: Node) -> Record | Sent:
        """Send one node, or record it as skipped; `finalize` records what the target answered."""
        if node.skip is not None:
            return self.skipped(node, node.skip, {})
        mapping, reason = resolve(node, self.done.get)
        if reason is not None:
            return self.skipped(node, reason, mapping)
        try:
            out = self.prepare(node, mapping)
            request = self.request(out)
        except PlanError as e:  # its path leaves the target: recorded as skipped, with why
            return self.skipped(node, str(e), mapping)
        except Exception as e:  # a malformed original: recorded as skipped, not a traceback
            why = f"the captured request cannot be sent again: {exception_words(e)}"
            return self.skipped(node, why, mapping)
        if self.bucket is not None:
            await self.bucket.take()
        try:
            async with connections.one() as transport:
                return await send(transport, request, out.content, DEFAULT_BODY_CAP)
        except asyncio.CancelledError:
            self.interrupted.append(node)
            raise

    def prepare(self, node: Node, mapping: Mapping[str, str]) -> Outgoing:
        return prepare(node.rec, self.target, self.api_key, mapping, api_prefixes=node.api_prefixes)

    def request(self, out: Outgoing) -> httpx.Request:
        return to_httpx(out, self.timeout)

    def meta(self, node: Node) -> RecordMeta:
        """Say what the record of `node`'s replay holds besides the exchange.

        A repeated attempt, where earlier runs left records for `node`, says which it is
        (`attempt`)."""
        return {
            "session": str(node.rec.get("session") or ""),
            "label": self.target.label,
            "seq": int(node.rec.get("seq") or 0),
            "listener": self.listener,
            "replay_of": node.id,
            "attempt": self.attempts[node.id] + 1 if self.attempts.get(node.id) else None,
        }

    def record(self, node: Node, ex: Exchange) -> Record:
        """Build the capture's record of `ex`, as the replay of `node` on this target."""
        return build_item(ex, self.meta(node), DEFAULT_BODY_CAP, frozenset())

    def offloaded(self, node: Node, sent: Sent) -> bool:
        """Hand what was sent to `offload` to record, when no later step reads ids from it."""
        return (
            self.offload is not None
            and not self.plan.dependents[node.id]
            and self.offload(node, sent.exchange, self.meta(node))
        )

    def skipped(self, node: Node, reason: str, mapping: Mapping[str, str]) -> Record:
        return self.unsent(node, reason, "skipped", mapping)

    def unsent(self, node: Node, reason: str, kind: str, mapping: Mapping[str, str]) -> Record:
        """Record a step without an answer (`unsent_exchange`)."""
        ex = unsent_exchange(
            node.rec,
            self.target,
            self.api_key,
            mapping,
            Error(reason, kind),
            self.timeout,
            node.api_prefixes,
        )
        return self.record(node, ex)

    def finalize(self, node: Node, sent: Sent) -> Record:
        """Record a sent exchange."""
        return self.record(node, sent.exchange)


async def replay_all(
    plan: Plan,
    opts: Options,
    keys: Mapping[str, str | None],
    done_of: dict[str, dict[str, Record | None]],
    path_of: Callable[[Record, Target], Path],
    runs: list[TargetRun],
    writers: Writers,
    progress: ProgressFactory | None = None,
    attempts_of: Mapping[str, Mapping[str, int]] | None = None,
) -> None:
    """Replay the plan to every target in turn; `runs` fills as they start (for Ctrl-C).
    `progress(label, total, already_done)` makes a progress display per target."""
    timeout = httpx.Timeout(opts.timeout, connect=min(CONNECT_TIMEOUT, opts.timeout))
    try:
        for t in opts.targets:
            dest = {n.id: path_of(n.rec, t) for n in plan.nodes}

            def sink(rec: Record, dest: dict[str, Path] = dest) -> None:
                writers.write(dest[str(rec["replay_of"])], rec)

            def offload(
                node: Node, ex: Exchange, meta: RecordMeta, dest: dict[str, Path] = dest
            ) -> bool:
                return writers.write_exchange(dest[node.id], ex, meta)

            bar = None
            run = TargetRun(
                plan,
                t,
                keys[t.label],
                sink,
                done_of[t.label],
                concurrency=opts.concurrency,
                rate=opts.rate,
                timeout=timeout,
                attempts=(attempts_of or {}).get(t.label),
                offload=offload,
            )
            if progress is not None:
                run.progress, bar = progress(t.label, run.counts.total, run.counts.resumed)
            runs.append(run)
            async with Connections.to_network(opts.concurrency) as connections:
                try:
                    await run.run(connections)
                finally:
                    if bar is not None:
                        bar.close()
    finally:
        writers.close()
