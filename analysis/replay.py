"""`wirediff replay`: re-send a recorded session to other backends, recorded like live traffic.

Usage:
    wirediff replay CAPTURE... --to URL [--label L] [--api-key-env VAR] [--model-map A=B]...
        [--header K=V]... [--concurrency N] [--rate R/s] [--only FILTER]... [--dry-run]
        [--allow-unsafe] [--timeout S] [-o OUT] [--config wirediff.yaml]

Each exchange is sent in-process with httpx and recorded by the capture addon's own record
builder (`analysis.record.build_record`, with a `StreamTap` fed the raw, still-compressed
chunks), so replay records have exactly the shape of captured ones, plus `replay_of` (the
original's id) and `label` (the target). Planning — ordering, id remapping, filters, safety —
is pure and lives in `analysis.replay_plan`.

Requests are re-based onto the target URL (the original path after its API prefix; a path
no known route matches is cut after the prefix its session's known routes use, and one
outside it goes onto the target's origin: `/v1/ask_url` → `<URL>/ask_url`, `/health` →
`http://host:port/health`); a query in the target URL (Azure's `?api-version=…`) is sent on
every request, after the original's. The model is mapped (`--model-map A=B`, `*=B` for all),
the auth header is replaced by the key in `$VAR` (`--api-key-env`; never from the command
line or the capture, which holds only fingerprints) and the other headers pass through,
except the transport's own (host, content-length, connection, transfer-encoding, …, and
content-encoding: the body is sent decoded), cookies and wirediff's control headers.
Headers and key-like query parameters (`key`, `api_key`, `token`, …) that the capture holds
only as fingerprints are not sent (`--dry-run` lists them; `--header K=V` sets a header).

Ids are remapped: a step that continues an earlier answer (`previous_response_id`, a
`function_call_output`'s `call_id`, a chat `tool` message's `tool_call_id`,
`/v1/responses/{id}…`) is sent after it, carrying the id the *target* returned. When the
target's answer leaves nothing to continue (an error, no function call), the step is
recorded as skipped (`response: null`, `error.kind: "skipped"`, the reason) and not sent.
Only reads and generation endpoints are replayed by default; DELETE, uploads, batches and
other state-changing calls are recorded as skipped unless `--allow-unsafe`. So is an
original whose request cannot be sent again (a malformed or truncated body), with the reason.

Output: `<capture dir>/<session>.<label>.jsonl` per session (or `-o OUT` for everything),
append-only and flushed per record. Running the same command again resumes: originals
already recorded for that label in the output are not sent again (delete the output to
replay afresh), except those whose newest record got no answer (`error.kind`
upstream_unreachable, timeout, upstream_disconnect) or was skipped for a reason that no
longer holds (e.g. now with `--allow-unsafe`): they are tried again and the new record is
appended. The newest record per original and label is the one that counts. Ctrl-C stops
cleanly (exit 130). Exit 2: bad usage or input, or a target that refused every connection
(its records are kept).

`--only` (repeatable; a record is replayed if it matches any of them) is a comma-separated
list of `KEY=GLOB` or `KEY!=GLOB` terms that must all match; keys: family, endpoint, method,
path, stream (true/false), model, id, session, listener, label. E.g. `--only
family=responses,stream=true`, `--only endpoint=/v1/chat/completions`, `--only method!=GET`.
What a selected exchange depends on (the response it continues, the call it answers) is
replayed with it. A two-hop capture (client → gateway → backend, one listener per hop)
holds every call twice: the inner hop (on another listener than the session's first
record, inside a call asking the same thing) is not replayed, with a note, unless a filter
names a listener or a label (`--only listener=reverse:*:8001`).

`--config FILE` (YAML):
    defaults: {concurrency: 8, rate: 5/s, timeout: 300, only: [family=responses],
               allow_unsafe: false, api_key_env: VAR, model_map: {A: B}, headers: {K: V}}
    targets:
      - {label: lmstudio, url: "http://127.0.0.1:1234/v1", api_key_env: LMSTUDIO_KEY,
         model_map: {gpt-4o-mini: qwen2.5-7b-instruct}, headers: {x-team: qa}}
Run options (concurrency, rate, timeout, only, allow_unsafe): the command line wins over
`defaults`. Target options: a target's own entry wins over the command line, which wins
over `defaults` (model maps and headers are merged in that order). `--to URL` adds one more
target. A header value of `""` (`--header K=`) removes that header.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from mitmproxy import connection, flow, http

from analysis._types import Record
from analysis.record import DEFAULT_BODY_CAP, StreamTap, build_record, is_sse
from analysis.replay_plan import (
    Node,
    Outgoing,
    Plan,
    PlanError,
    Target,
    Term,
    default_label,
    make_plan,
    parse_filter,
    parse_pairs,
    parse_rate,
    prepare,
    resolve,
    resumed,
)
from analysis.store import CaptureError, RecordWriter, iter_records, latest_replays

DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT = 600.0
CONNECT_TIMEOUT = 10.0


def _usage_error(msg: str) -> Exception:
    """`analysis.cli.UsageError` (imported here, late, so that the CLI may import this
    module at its top without a cycle)."""
    from analysis.cli import UsageError

    return UsageError(msg)


# --- options -------------------------------------------------------------------------------


@dataclass
class Options:
    targets: list[Target]
    concurrency: int = DEFAULT_CONCURRENCY
    rate: float | None = None
    timeout: float = DEFAULT_TIMEOUT
    filters: list[tuple[Term, ...]] = field(default_factory=list)
    allow_unsafe: bool = False
    dry_run: bool = False
    output: Path | None = None
    body_cap: int = DEFAULT_BODY_CAP


_RUN_KEYS = {"concurrency", "rate", "timeout", "only", "allow_unsafe"}
_TARGET_KEYS = {"label", "url", "api_key_env", "model_map", "headers"}


def _str_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _usage_error(f"{where}: expected a mapping, got {type(value).__name__}")
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def _headers(pairs: Mapping[str, str]) -> dict[str, str | None]:
    return {k.strip().lower(): (v if v != "" else None) for k, v in pairs.items()}


def _load_config(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise _usage_error(f"{path}: cannot read config ({e.strerror or e})") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f":{where.line + 1}" if where is not None else ""
        raise _usage_error(f"{path}{line}: not valid YAML") from None
    if not isinstance(data, dict):
        raise _usage_error(f"{path}: expected a mapping with `targets:`")
    unknown = set(data) - {"defaults", "targets"}
    if unknown:
        raise _usage_error(f"{path}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    defaults = data.get("defaults") or {}
    targets = data.get("targets") or []
    if not isinstance(defaults, dict) or not isinstance(targets, list):
        raise _usage_error(f"{path}: `defaults` must be a mapping and `targets` a list")
    bad = set(defaults) - _RUN_KEYS - (_TARGET_KEYS - {"label", "url"})
    if bad:
        raise _usage_error(f"{path}: unknown defaults key(s) {', '.join(sorted(map(str, bad)))}")
    for i, t in enumerate(targets):
        if not isinstance(t, dict) or "url" not in t:
            raise _usage_error(f"{path}: targets[{i}] needs at least `url`")
        bad = set(t) - _TARGET_KEYS
        if bad:
            raise _usage_error(
                f"{path}: targets[{i}]: unknown key(s) {', '.join(sorted(map(str, bad)))}"
            )
    return {"defaults": defaults, "targets": targets, "path": path}


def options_from_args(args: argparse.Namespace) -> Options:
    """Merge the command line with `--config` (see the module docstring for precedence)."""
    cfg: dict[str, Any] = (
        _load_config(args.config) if args.config else {"defaults": {}, "targets": [], "path": ""}
    )
    d: dict[str, Any] = cfg["defaults"]
    try:
        cli_models = parse_pairs(args.model_map or (), "--model-map", allow_empty=False)
        cli_headers = parse_pairs(args.header or (), "--header", allow_empty=True)
        specs: list[dict[str, Any]] = list(cfg["targets"])
        if args.to:
            specs.append({"url": args.to, "label": args.label})
        elif args.label:
            raise _usage_error("--label names the --to target; give --to URL too")
        if not specs:
            raise _usage_error("nothing to replay to: give --to URL or --config FILE")
        targets: list[Target] = []
        for i, spec in enumerate(specs):
            where = f"{cfg['path']}: targets[{i}]" if i < len(cfg["targets"]) else "--to"
            url = str(spec["url"])
            label = str(spec.get("label") or default_label(url))
            if "/" in label or label.startswith(".") or not label.strip():
                raise _usage_error(f"{where}: label {label!r} must be a plain name")
            models = {
                **_str_map(d.get("model_map"), "defaults.model_map"),
                **cli_models,
                **_str_map(spec.get("model_map"), f"{where}.model_map"),
            }
            headers = {
                **_headers(_str_map(d.get("headers"), "defaults.headers")),
                **_headers(cli_headers),
                **_headers(_str_map(spec.get("headers"), f"{where}.headers")),
            }
            key_env = spec.get("api_key_env") or args.api_key_env or d.get("api_key_env")
            targets.append(Target(label, url, key_env or None, models, headers))
        labels = [t.label for t in targets]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise _usage_error(f"two targets share the label {dup[0]!r}; give each a --label")

        def pick(name: str, cli: Any, fallback: Any) -> Any:
            return cli if cli is not None else d.get(name, fallback)

        concurrency = int(pick("concurrency", args.concurrency, DEFAULT_CONCURRENCY))
        if concurrency < 1:
            raise _usage_error("--concurrency must be at least 1")
        rate_text = pick("rate", args.rate, None)
        timeout = float(pick("timeout", args.timeout, DEFAULT_TIMEOUT))
        if not math.isfinite(timeout) or timeout <= 0:
            raise _usage_error(f"--timeout must be a positive number of seconds, got {timeout}")
        only = args.only if args.only else d.get("only") or []
        if isinstance(only, str):
            only = [only]
        return Options(
            targets=targets,
            concurrency=concurrency,
            rate=parse_rate(str(rate_text)) if rate_text is not None else None,
            timeout=timeout,
            filters=[parse_filter(str(f)) for f in only],
            allow_unsafe=bool(args.allow_unsafe or d.get("allow_unsafe", False)),
            dry_run=bool(args.dry_run),
            output=Path(args.output) if args.output else None,
        )
    except PlanError as e:
        raise _usage_error(str(e)) from None
    except (TypeError, ValueError) as e:
        raise _usage_error(f"bad option value: {e}") from None


def api_key_for(target: Target, env: Mapping[str, str]) -> str | None:
    if target.api_key_env is None:
        return None
    key = env.get(target.api_key_env)
    if not key:
        raise _usage_error(
            f"target {target.label!r}: environment variable {target.api_key_env} is not set"
        )
    return key


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


# --- the command ---------------------------------------------------------------------------


def describe(node: Node, out: Outgoing, plan: Plan) -> str:
    deps = ", ".join(
        f"{r.where}←#{plan.by_id[r.producer].order}" for r in node.refs if r.producer in plan.by_id
    )
    bits = [f"#{node.order:<3}", out.method, out.url]
    if out.model:
        bits.append(f"model={out.model}")
    if out.stream:
        bits.append("stream")
    if deps:
        bits.append(f"after {deps}")
    if not node.wanted:
        bits.append("(dependency)")
    return "  " + " ".join(bits) + f"  [{node.id}]"


def dry_run(plan: Plan, targets: Sequence[Target], done_of: Mapping[str, Mapping[str, Record]],
            env: Mapping[str, str], tried_of: Mapping[str, int]) -> None:  # fmt: skip
    for t in targets:
        done = done_of[t.label]
        todo = [n for n in plan.nodes if n.id not in done]
        skipped = sum(1 for n in todo if n.skip)
        key = (
            "no key"
            if t.api_key_env is None
            else f"key from ${t.api_key_env}" + ("" if env.get(t.api_key_env) else " (NOT SET)")
        )
        again = tried_of[t.label]
        print(
            f"replay → {t.label} ({t.base}, {key}): {len(todo) - skipped} to send, "
            f"{skipped} to skip{f' ({again} tried before)' if again else ''}, "
            f"{len(done)} already replayed"
        )
        for n in todo:
            try:
                out = prepare(n.rec, t, None, {}, api_prefixes=n.api_prefixes)
            except Exception:  # malformed: `n.skip` says why
                out = Outgoing(str(n.rec["request"].get("method")), t.base, [], None, None, False)
            lines = [describe(n, out, plan)]
            if n.skip is not None:
                lines.append(f"      skip: {n.skip}")
            elif out.dropped:
                lines.append(
                    f"      not sent (the capture holds only a fingerprint): {', '.join(out.dropped)}"
                )
            print("\n".join(lines))


def hop_note(plan: Plan) -> str | None:
    """One line about the inner hops of two-hop captures left out of the plan."""
    left = plan.hops_left_out
    if not left:
        return None
    n = sum(left.values())
    where = ", ".join(k if len(left) == 1 else f"{k} ({v})" for k, v in sorted(left.items()))
    return (
        f"wirediff: note: {n} exchange{'s' if n != 1 else ''} on {where} "
        f"{'are inner hops' if n != 1 else 'is an inner hop'} of a two-hop capture (the same "
        "call seen again behind a gateway), not replayed; `--only listener=…` chooses listeners"
    )


def _progress_bar(label: str, total: int, initial: int) -> tuple[Callable[[Counts], None], Any]:
    """A tqdm bar on stderr: done/total, rate, and ok / errors / skipped counts."""
    from tqdm import tqdm  # type: ignore[import-untyped]

    tqdm.monitor_interval = 0  # no monitor thread: nothing left running at Ctrl-C or exit
    size = shutil.get_terminal_size((100, 20))  # a pty may report 0x0: tqdm then draws nothing
    bar = tqdm(total=total, initial=initial, desc=f"replay → {label}", unit="ex", file=sys.stderr,
               ncols=size.columns, nrows=size.lines, leave=True)  # fmt: skip

    def update(c: Counts) -> None:
        bar.set_postfix(ok=c.ok, errors=c.http_errors + c.transport_errors, skipped=c.skipped,
                        refresh=False)  # fmt: skip
        bar.update(c.resumed + c.done - bar.n)

    return update, bar


async def replay_all(
    plan: Plan,
    opts: Options,
    keys: Mapping[str, str | None],
    done_of: dict[str, dict[str, Record]],
    path_of: Callable[[Record, Target], Path],
    runs: list[TargetRun],
    tty: bool,
    writers: Writers,
) -> None:
    """Replay the plan to every target in turn; `runs` fills as they start (for Ctrl-C)."""
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
            if tty:
                run.progress, bar = _progress_bar(t.label, run.counts.total, run.counts.resumed)
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


def main_replay_args(args: argparse.Namespace) -> int:
    opts = options_from_args(args)
    env = os.environ
    paths = [str(p) for p in args.captures]
    capture_of: dict[str, Path] = {}
    records: list[Record] = []
    for p in paths:
        if Path(p).is_dir():
            raise CaptureError(f"{p}: is a directory, not a capture file")
        for rec in iter_records(p):
            records.append(rec)
            capture_of.setdefault(str(rec.get("id")), Path(p))
    try:
        plan = make_plan(records, filters=opts.filters, allow_unsafe=opts.allow_unsafe)
    except PlanError as e:
        raise _usage_error(str(e)) from None
    note = hop_note(plan)
    if note is not None:
        print(note, file=sys.stderr)

    def path_of(rec: Record, t: Target) -> Path:
        return output_path(rec, capture_of, t, opts)

    done_of: dict[str, dict[str, Record]] = {}
    tried_of: dict[str, int] = {}
    for t in opts.targets:
        outs = {path_of(n.rec, t) for n in plan.nodes}
        prior = already_replayed(sorted(outs), t.label)
        done = resumed(plan, prior)
        tried_of[t.label] = sum(1 for k in prior if k in plan.by_id and k not in done)
        done_of[t.label] = {k: v if plan.dependents[k] else {} for k, v in done.items()}
    if opts.dry_run:
        dry_run(plan, opts.targets, done_of, env, tried_of)
        return 0
    if not plan.nodes:
        print(f"wirediff: nothing to replay in {', '.join(paths)}", file=sys.stderr)
        return 0
    keys = {t.label: api_key_for(t, env) for t in opts.targets}
    for t in opts.targets:
        if not httpx.URL(t.url).path.strip("/"):
            print(f"wirediff: note: {t.url} has no path; an SDK base_url usually ends in /v1",
                  file=sys.stderr)  # fmt: skip

    runs: list[TargetRun] = []
    tty = sys.stderr.isatty()
    writers = Writers(sorted({path_of(n.rec, t) for t in opts.targets for n in plan.nodes}))
    try:
        asyncio.run(replay_all(plan, opts, keys, done_of, path_of, runs, tty, writers))
    except ExceptionGroup as eg:  # from the workers' TaskGroup: a disk error, say
        raise eg.exceptions[0] from None
    except KeyboardInterrupt:
        parts = [f"{r.target.label}: {r.counts.resumed + r.counts.done} of {r.counts.total}"
                 for r in runs]  # fmt: skip
        print(
            f"wirediff: interrupted ({'; '.join(parts) or 'nothing sent'} replayed); "
            "run the same command again to resume",
            file=sys.stderr,
        )
        return 130

    unreachable = []
    for r in runs:
        c = r.counts
        files = sorted({str(path_of(n.rec, r.target)) for n in plan.nodes})
        print(
            f"replay → {r.target.label}: {c.done} recorded ({c.line()}), "
            f"{c.resumed} already done → {', '.join(files)}",
            file=sys.stderr,
        )
        if c.sent and c.unreachable == c.sent:
            unreachable.append(r)
    if unreachable:
        r = unreachable[0]
        raise _usage_error(
            f"could not connect to {r.target.label} at {r.target.url}: all {r.counts.sent} "
            "requests failed (recorded as upstream_unreachable; run the same command again to "
            "retry them)"
        )
    return 0


def register(subparsers: Any) -> None:
    """Add `replay` to the `wirediff` command line."""
    p = subparsers.add_parser(
        "replay",
        help="re-send recorded sessions to other backends, recorded like live traffic",
        description="\n\n".join((__doc__ or "").split("\n\n")[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=main_replay_args)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("captures", nargs="+", metavar="CAPTURE", help="wirediff/1 .jsonl capture(s)")
    p.add_argument("--to", metavar="URL", help="target base URL, as an SDK's base_url (…/v1)")
    p.add_argument("--label", help="name of the --to target (default: its host:port)")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the key")
    p.add_argument("--model-map", action="append", metavar="A=B",
                   help="send model B where the capture says A (`*=B`: every model)")  # fmt: skip
    p.add_argument("--header", action="append", metavar="K=V",
                   help="set header K (`K=` removes it)")  # fmt: skip
    p.add_argument("--concurrency", type=int, metavar="N",
                   help=f"independent exchanges in flight (default {DEFAULT_CONCURRENCY})")  # fmt: skip
    p.add_argument("--rate", metavar="R/s", help="at most R requests per second (also R/m, R/h)")
    p.add_argument("--only", action="append", metavar="FILTER",
                   help="replay only matching exchanges, e.g. family=responses,stream=true")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print what would be sent; send nothing")
    p.add_argument("--allow-unsafe", action="store_true",
                   help="also replay DELETE, uploads, batches and other state-changing calls")  # fmt: skip
    p.add_argument("--timeout", type=float, metavar="S",
                   help=f"seconds per exchange (default {DEFAULT_TIMEOUT:.0f})")  # fmt: skip
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output .jsonl (default: <capture dir>/<session>.<label>.jsonl)")  # fmt: skip
    p.add_argument("--config", metavar="FILE", help="YAML with `targets:` (and `defaults:`)")


def main_replay(argv: Sequence[str] | None = None) -> int:
    """`wirediff replay` on its own (tests, `python -m analysis.replay`); exit codes as the CLI."""
    p = argparse.ArgumentParser(
        prog="wirediff replay",
        description="\n\n".join((__doc__ or "").split("\n\n")[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    args = p.parse_args(argv)
    from analysis.cli import run_command

    return run_command(main_replay_args, args)


if __name__ == "__main__":
    sys.exit(main_replay())
