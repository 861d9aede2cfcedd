"""The replay engine: sends a plan's requests with httpx, in dependency order, and records
each answer with the capture's own record builder (same shape as live traffic)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from mitmproxy import connection, flow, http

from wirediff._types import Record
from wirediff.record.build import DEFAULT_BODY_CAP, StreamTap, build_record, is_sse
from wirediff.record.store import RecordWriter, iter_records, latest_replays
from wirediff.replay.config import CONNECT_TIMEOUT, DEFAULT_TIMEOUT, Options
from wirediff.replay.plan import (
    Node,
    Outgoing,
    Plan,
    Target,
    prepare,
    resolve,
)

ProgressFactory = Callable[[str, int, int], tuple[Callable[["Counts"], None], Any]]
"""`(label, total, already_done) -> (update(counts), closable)`: a progress display."""


# --- loading and the output files ----------------------------------------------------------


def output_path(rec: Record, capture_of: Mapping[str, Path], target: Target, opts: Options) -> Path:
    """`-o OUT`, else `<capture dir>/<session>.<label>.jsonl` next to the original."""
    if opts.output is not None:
        return opts.output
    src = capture_of[str(rec["id"])]
    return src.parent / f"{rec.get('session') or src.stem}.{target.label}.jsonl"


def already_replayed(paths: Iterable[Path], label: str) -> dict[str, Record]:
    """The newest replay record of `label` in the output files, by original id (resume;
    `replay_plan.resumed` says which of them are done)."""
    found = [
        rec
        for p in paths
        if p.exists()
        for rec in iter_records(p)
        if rec.get("label") == label and rec.get("replay_of")
    ]
    return {str(rec["replay_of"]): rec for rec in latest_replays(found)}


class Writers:
    """One append-only writer per output file, shared by all targets of a run."""

    def __init__(self, paths: Iterable[Path] = ()) -> None:
        self._w: dict[Path, RecordWriter] = {}
        for p in paths:
            self._writer(p)

    def _writer(self, path: Path) -> RecordWriter:
        """The file's writer; made (and the file checked appendable) before anything is sent,
        so an unwritable output fails at once, not after the first answer."""
        w = self._w.get(path)
        if w is None:
            w = RecordWriter(path)  # makes the directory
            with path.open("a", encoding="utf-8"):
                pass
            self._w[path] = w
        return w

    def write(self, path: Path, rec: Record) -> None:
        self._writer(path).write(rec)

    def close(self) -> None:
        for w in self._w.values():
            w.close()
        self._w.clear()


# --- recording through the capture's builder -----------------------------------------------


_CLIENT = connection.Client(peername=("127.0.0.1", 0), sockname=("127.0.0.1", 0))
"""The connection objects a flow must have; the builder reads neither, so one serves all."""


def _message(cls: type[Any], data_cls: type[Any], **fields: Any) -> Any:
    """`cls(**fields)` without mitmproxy's per-field type check (it runs only under
    `__debug__`, costs ~70 µs a message, and our values are well typed by construction)."""
    data = object.__new__(data_cls)
    data.__dict__.update(fields)
    msg = object.__new__(cls)
    msg.data = data
    return msg


def make_request(
    url: httpx.URL, method: str, raw_headers: Sequence[tuple[bytes, bytes]],
    content: bytes | None, t0: float,
) -> http.Request:  # fmt: skip
    req: http.Request = _message(
        http.Request, http.RequestData,
        host=url.host, port=url.port or (443 if url.scheme == "https" else 80),
        method=method.encode(), scheme=url.scheme.encode(), authority=b"", path=url.raw_path,
        http_version=b"HTTP/1.1", headers=http.Headers(tuple(raw_headers)), content=content,
        trailers=None, timestamp_start=t0, timestamp_end=t0,
    )  # fmt: skip
    return req


def make_response(resp: httpx.Response, t_head: float) -> http.Response:
    out: http.Response = _message(
        http.Response, http.ResponseData,
        http_version=resp.http_version.encode(), status_code=resp.status_code,
        reason=resp.reason_phrase.encode(), headers=http.Headers(tuple(resp.headers.raw)),
        content=b"", trailers=None, timestamp_start=t_head, timestamp_end=None,
    )  # fmt: skip
    return out


def make_flow(request: http.Request, server: connection.Server) -> http.HTTPFlow:
    """A mitmproxy flow for a request this process sends itself (no proxy in between)."""
    f = http.HTTPFlow(_CLIENT, server)
    f.request = request
    return f


@dataclass
class Received:
    """One request as sent and what came back, kept raw until it is recorded."""

    method: str
    url: httpx.URL
    headers: list[tuple[bytes, bytes]]
    content: bytes | None
    t0: float
    response: httpx.Response | None = None
    t_head: float = 0.0
    t_end: float | None = None
    body: bytes = b""
    tap: StreamTap | None = None
    error: str | None = None
    kind: str | None = None
    connect_failed: bool = False


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

    def add(self, rec: Record, *, connect_failed: bool) -> None:
        self.done += 1
        err = rec.get("error") or {}
        if err.get("kind") == "skipped":
            self.skipped += 1
            return
        self.sent += 1
        if connect_failed:
            self.unreachable += 1
        resp = rec.get("response")
        if resp is None or err:
            self.transport_errors += 1
        elif resp.get("status", 0) >= 400 or (rec.get("tags") or {}).get("soft_error"):
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
        done: dict[str, Record],
        *,
        concurrency: int,
        rate: float | None = None,
        body_cap: int = DEFAULT_BODY_CAP,
        timeout: httpx.Timeout | None = None,
        progress: Callable[[Counts], None] | None = None,
    ) -> None:
        self.plan, self.target, self.api_key = plan, target, api_key
        self.sink, self.done = sink, done
        self.concurrency = concurrency
        self.bucket = TokenBucket(rate) if rate else None
        self.body_cap = body_cap
        self.timeout = (
            timeout or httpx.Timeout(DEFAULT_TIMEOUT, connect=CONNECT_TIMEOUT)
        ).as_dict()
        self.progress = progress
        self.listener = f"replay:{target.base}"
        url = httpx.URL(target.base)
        self.server = connection.Server(
            address=(url.host, url.port or (443 if url.scheme == "https" else 80))
        )
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
        pending: dict[str, Received] = {}
        errors: list[BaseException] = []

        def complete(node: Node, rec: Record, connect_failed: bool) -> None:
            nonlocal left
            nid = node.id
            self.sink(rec)
            # only what later steps read ids from is kept whole: a long session stays small
            self.done[nid] = rec if self.plan.dependents[nid] else {}
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

        def record(node: Node) -> None:
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
                if isinstance(got, Received):
                    pending[nid] = got
                    loop.call_soon(record, node)
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
                record(self.plan.by_id[nid])
        if errors:
            raise errors[0]
        return self.counts

    async def process(self, transport: httpx.AsyncBaseTransport, node: Node) -> Record | Received:
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
            why = f"the captured request cannot be sent again: {_msg(e)}"
            return self.skipped(node, why, mapping)
        if self.bucket is not None:
            await self.bucket.take()
        return await self.exchange(transport, out, request)

    def prepare(self, node: Node, mapping: Mapping[str, str]) -> Outgoing:
        return prepare(node.rec, self.target, self.api_key, mapping,
                       api_prefixes=node.api_prefixes)  # fmt: skip

    def request(self, out: Outgoing) -> httpx.Request:
        """The httpx request for `out`; header values as the capture decoded them (UTF-8,
        undecodable bytes as surrogates), so a non-ASCII value goes out as it came in."""
        headers = [(k.encode("ascii"), v.encode("utf-8", "surrogateescape"))
                   for k, v in out.headers]  # fmt: skip
        return httpx.Request(out.method, out.url, headers=headers, content=out.content,
                             extensions={"timeout": self.timeout})  # fmt: skip

    # -- the wire --
    def _record(self, node: Node, f: http.HTTPFlow, tap: StreamTap | None) -> Record:
        return build_record(
            f,
            session=str(node.rec.get("session") or ""),
            label=self.target.label,
            seq=int(node.rec.get("seq") or 0),
            listener=self.listener,
            replay_of=node.id,
            tap=tap,
            body_cap=self.body_cap,
        )

    def skipped(self, node: Node, reason: str, mapping: Mapping[str, str]) -> Record:
        """A record for a step not sent: the request it would have been, `error.kind` skipped
        (for an original too malformed to prepare, its method to the target's base URL)."""
        try:
            out = self.prepare(node, mapping)
            request = self.request(out)
        except Exception:
            method = node.rec["request"].get("method")
            method = method if isinstance(method, str) and method.isascii() else "GET"
            out = Outgoing(method.upper(), self.target.base, [], None, None, False)
            request = self.request(out)
        t0 = time.time()
        f = make_flow(
            make_request(request.url, out.method, request.headers.raw, out.content, t0),
            self.server,
        )
        f.error = flow.Error(reason)
        rec = self._record(node, f, None)
        rec["error"] = {"kind": "skipped", "message": reason}
        return rec

    def finalize(self, node: Node, got: Received) -> Record:
        """The record of a sent exchange: a mitmproxy flow through the capture's builder."""
        f = make_flow(
            make_request(got.url, got.method, got.headers, got.content, got.t0), self.server
        )
        if got.response is not None:
            f.response = make_response(got.response, got.t_head)
            f.response.timestamp_end = got.t_end
            f.response.raw_content = got.body
        if got.error is not None:
            f.error = flow.Error(got.error)
        rec = self._record(node, f, got.tap)
        if got.kind is not None and rec["error"] is not None:
            rec["error"]["kind"] = got.kind
        return rec

    async def exchange(
        self, transport: httpx.AsyncBaseTransport, out: Outgoing, request: httpx.Request
    ) -> Received:
        """Send one request (`out`, built by `request`); stream the answer through a
        `StreamTap` when it is SSE (events are split and timed as they arrive), else keep
        the raw (still encoded) body.

        Straight to the transport: a replay follows no redirect (each hop is its own
        exchange in the capture), keeps no cookies and runs no auth flow.
        """
        got = Received(out.method, request.url, request.headers.raw, out.content, time.time())
        try:
            resp = await transport.handle_async_request(request)
        except (httpx.ConnectError, httpx.ConnectTimeout) as e:
            got.connect_failed = True
            got.kind = "timeout" if isinstance(e, httpx.ConnectTimeout) else "upstream_unreachable"
            got.error = f"cannot connect to {request.url.host}:{request.url.port}: {_msg(e)}"
        except httpx.TimeoutException as e:
            got.kind, got.error = "timeout", f"timed out waiting for the answer: {_msg(e)}"
        except httpx.HTTPError as e:
            low = str(e).lower()
            disconnect = "disconnect" in low or "closed" in low or isinstance(e, httpx.ReadError)
            got.kind = "upstream_disconnect" if disconnect else "upstream_protocol"
            got.error = f"no valid HTTP answer: {_msg(e)}"
        else:
            got.response, got.t_head = resp, time.time()
            if is_sse(resp.headers.get("content-type", "")):
                got.tap = StreamTap(
                    t0=got.t0,
                    content_encoding=resp.headers.get("content-encoding", ""),
                    cap=self.body_cap,
                )
            tap, buf = got.tap, bytearray()
            try:
                async for chunk in resp.aiter_raw():
                    if tap is not None:
                        tap(chunk)
                    else:
                        buf += chunk
                got.t_end = time.time()
            except httpx.TimeoutException as e:
                got.kind, got.error = "timeout", f"timed out reading the answer: {_msg(e)}"
            except httpx.HTTPError as e:
                got.kind = "upstream_disconnect"
                got.error = f"server disconnected mid-answer: {_msg(e)}"
            finally:
                await resp.aclose()
            got.body = bytes(buf)
        return got


def _msg(e: BaseException) -> str:
    return str(e) or type(e).__name__


async def replay_all(
    plan: Plan,
    opts: Options,
    keys: Mapping[str, str | None],
    done_of: dict[str, dict[str, Record]],
    path_of: Callable[[Record, Target], Path],
    runs: list[TargetRun],
    writers: Writers,
    progress: ProgressFactory | None = None,
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
            run = TargetRun(plan, t, keys[t.label], sink, done_of[t.label],
                            concurrency=opts.concurrency, rate=opts.rate, body_cap=opts.body_cap,
                            timeout=timeout)  # fmt: skip
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
