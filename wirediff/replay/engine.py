"""The replay engine: sends a plan's requests in dependency order, with bounded concurrency
and pacing, and records each answer with the capture's own record builder (same shape as
live traffic)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from wirediff._types import Record
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.build import build_record
from wirediff.record.exchange import Error, Exchange, Timings
from wirediff.replay.config import CONNECT_TIMEOUT, DEFAULT_TIMEOUT, Options
from wirediff.replay.output import Writers
from wirediff.replay.plan import Node, Plan, resolve
from wirediff.replay.request import Outgoing, prepare
from wirediff.replay.targets import Target
from wirediff.replay.wire import Sent, exchange_from_httpx, send

__all__ = ["Counts", "ProgressFactory", "TargetRun", "TokenBucket", "replay_all"]

ProgressFactory = Callable[[str, int, int], tuple[Callable[["Counts"], None], Any]]
"""`(label, total, already_done) -> (update(counts), closable)`: a progress display."""


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
    no_answer: int = 0
    """Sent, and no answer at all came back (unreachable, timed out, cut before a status)."""

    def add(self, rec: Record, *, connect_failed: bool) -> None:
        self.done += 1
        err = rec.get("error")
        if err is not None and err["kind"] == "skipped":
            self.skipped += 1
            return
        self.sent += 1
        if connect_failed:
            self.unreachable += 1
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
    """At most `rate` sends per second, with bursts of `burst` (clock injectable for tests)."""

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
    """Replays a plan to one target: dependency order, bounded concurrency, one record each."""

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
        body_cap: int = DEFAULT_BODY_CAP,
        timeout: httpx.Timeout | None = None,
        progress: Callable[[Counts], None] | None = None,
        attempts: Mapping[str, int] | None = None,
    ) -> None:
        self.plan, self.target, self.api_key = plan, target, api_key
        self.attempts = attempts or {}
        """Records earlier runs left for each original: a new one is attempt n + 1."""
        self.interrupted: list[Node] = []
        self.sink, self.done = sink, done
        self.concurrency = concurrency
        self.bucket = TokenBucket(rate) if rate else None
        self.body_cap = body_cap
        self.timeout = (
            timeout or httpx.Timeout(DEFAULT_TIMEOUT, connect=CONNECT_TIMEOUT)
        ).as_dict()
        self.progress = progress
        self.listener = f"replay:{target.base}"
        self.counts = Counts(total=len(plan), resumed=sum(1 for n in plan.nodes if n.id in done))

    # -- scheduling --
    async def run(self, transport: httpx.AsyncBaseTransport) -> Counts:
        """Replay every node not already done; returns the counts.

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

        def complete(node: Node, rec: Record, connect_failed: bool) -> None:
            nonlocal left
            nid = node.id
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
                complete(node, self.finalize(node, got), got.connect_failed)
            except Exception as e:  # a callback's exception would only be logged: re-raise it
                errors.append(e)
                finished.set()

        async def worker() -> None:
            loop = asyncio.get_running_loop()
            while True:
                _, nid = await queue.get()
                node = self.plan.by_id[nid]
                got = await self.process(transport, node)
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

    async def process(self, transport: httpx.AsyncBaseTransport, node: Node) -> Record | Sent:
        """A skipped record, or what the target answered (recorded by `finalize`)."""
        if node.skip is not None:
            return self.skipped(node, node.skip, {})
        mapping, reason = resolve(node, self.done.get)
        if reason is not None:
            return self.skipped(node, reason, mapping)
        try:
            out = self.prepare(node, mapping)
            request = self.request(out)
        except Exception as e:  # a malformed original: recorded as skipped, not a traceback
            why = f"the captured request cannot be sent again: {str(e) or type(e).__name__}"
            return self.skipped(node, why, mapping)
        if self.bucket is not None:
            await self.bucket.take()
        try:
            return await send(transport, request, out.content, self.body_cap)
        except asyncio.CancelledError:
            self.interrupted.append(node)
            raise

    def prepare(self, node: Node, mapping: Mapping[str, str]) -> Outgoing:
        return prepare(node.rec, self.target, self.api_key, mapping, api_prefixes=node.api_prefixes)

    def request(self, out: Outgoing) -> httpx.Request:
        """The httpx request for `out`; header values as the capture decoded them (UTF-8,
        undecodable bytes as surrogates), so a non-ASCII value goes out as it came in."""
        headers = [
            (k.encode("ascii"), v.encode("utf-8", "surrogateescape")) for k, v in out.headers
        ]
        return httpx.Request(
            out.method,
            out.url,
            headers=headers,
            content=out.content,
            extensions={"timeout": self.timeout},
        )

    def record(self, node: Node, ex: Exchange) -> Record:
        """The capture's record of `ex`, as the replay of `node` on this target; a repeated
        attempt (earlier runs left records for `node`) says which it is (`attempt`)."""
        rec = build_record(
            ex,
            session=str(node.rec.get("session") or ""),
            label=self.target.label,
            seq=int(node.rec.get("seq") or 0),
            listener=self.listener,
            replay_of=node.id,
            body_cap=self.body_cap,
        )
        if self.attempts.get(node.id):
            rec["attempt"] = self.attempts[node.id] + 1
        return rec

    def skipped(self, node: Node, reason: str, mapping: Mapping[str, str]) -> Record:
        return self.unsent(node, reason, "skipped", mapping)

    def unsent(self, node: Node, reason: str, kind: str, mapping: Mapping[str, str]) -> Record:
        """A record for a step without an answer: the request it would have been (for an
        original too malformed to prepare, its method to the target's base URL), `error`
        the reason and `kind` (skipped: not sent; interrupted: sent, no answer awaited)."""
        try:
            out = self.prepare(node, mapping)
            request = self.request(out)
        except Exception:
            method = node.rec["request"].get("method")
            method = method if isinstance(method, str) and method.isascii() else "GET"
            out = Outgoing(method.upper(), self.target.base, [], None, None, False)
            request = self.request(out)
        error = Error(reason, kind)
        ex = exchange_from_httpx(request, out.content, timings=Timings(time.time()), error=error)
        return self.record(node, ex)

    def finalize(self, node: Node, sent: Sent) -> Record:
        """The record of a sent exchange."""
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
    limits = httpx.Limits(
        max_connections=opts.concurrency, max_keepalive_connections=opts.concurrency
    )
    try:
        for t in opts.targets:
            dest = {n.id: path_of(n.rec, t) for n in plan.nodes}

            def sink(rec: Record, dest: dict[str, Path] = dest) -> None:
                writers.write(dest[str(rec["replay_of"])], rec)

            bar = None
            run = TargetRun(
                plan,
                t,
                keys[t.label],
                sink,
                done_of[t.label],
                concurrency=opts.concurrency,
                rate=opts.rate,
                body_cap=opts.body_cap,
                timeout=timeout,
                attempts=(attempts_of or {}).get(t.label),
            )
            if progress is not None:
                run.progress, bar = progress(t.label, run.counts.total, run.counts.resumed)
            runs.append(run)
            # trust_env: SSL_CERT_FILE / SSL_CERT_DIR for targets behind a private CA
            async with httpx.AsyncHTTPTransport(limits=limits, trust_env=True) as transport:
                try:
                    await run.run(transport)
                finally:
                    if bar is not None:
                        bar.close()
    finally:
        writers.close()
