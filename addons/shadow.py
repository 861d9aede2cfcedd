"""Mirror live requests to candidate backends, off the client's path; record their answers
as replays of the live exchange, beside the capture.

Usage:
    mitmdump -s addons/capture.py -s addons/shadow.py --mode reverse:https://api.openai.com \
        --set shadow_to=lmstudio=http://127.0.0.1:1234/v1,ollama=http://127.0.0.1:11434/v1 \
        [--set shadow_key_env=lmstudio=LMSTUDIO_KEY,...] [--set shadow_model_map=A=B,...] \
        [--set shadow_filter=EXPR] [--set shadow_concurrency=N] [--set shadow_queue=N] \
        [--set shadow_allow_unsafe=true]

Each request that passes `shadow_filter` (a mitmproxy filter expression) and the replayer's
safety rules (DELETE, uploads and other calls that change state only with
`shadow_allow_unsafe`) goes to every candidate as well, keyed only from the candidate's own
variable (`shadow_key_env`), never with the client's key; each answer is recorded by the
capture's record builder with `replay_of` = the live exchange's record id, into
`<capture_dir>/<session>.<label>.jsonl`, where `wirediff replay` would put it. State-aware
like the replayer (`wirediff.replay.mirror`). The client never waits for a candidate: the
mirrors are tasks on mitmproxy's event loop, the records are built by a spool process; a
full queue drops mirrors (counted, said once per burst), a failing candidate is recorded.
A candidate with the primary's own URL and label mirrors the primary itself: the analysis
takes what differs between the two as noise, as it does for repeated replays.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import httpx
from mitmproxy import ctx, exceptions, flowfilter, http

_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "wirediff" / "__init__.py").is_file() and str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))

from wirediff._types import Record  # noqa: E402
from wirediff.errors import PlanError  # noqa: E402
from wirediff.record.body import DEFAULT_BODY_CAP  # noqa: E402
from wirediff.record.build import build_record  # noqa: E402
from wirediff.record.exchange import Exchange, Request  # noqa: E402
from wirediff.record.flow import KEEP_ANSWER, exchange_from_flow, header_pairs  # noqa: E402
from wirediff.record.spool import RecordMeta, Spool, build_item  # noqa: E402
from wirediff.record.store import RecordWriter  # noqa: E402
from wirediff.record.tags import route  # noqa: E402
from wirediff.record.tap import StreamTap  # noqa: E402
from wirediff.replay.mirror import Candidate, Live, Mirror  # noqa: E402
from wirediff.replay.slots import PRODUCERS  # noqa: E402
from wirediff.replay.targets import Target, parse_pairs  # noqa: E402

DRAIN_SECONDS = 10.0
"""At shutdown, how long pending mirrors are waited for before they are cancelled."""
SPOOL_NICE = 5
"""The spool process yields the CPU to the proxy."""
_INT_OPTIONS = ("shadow_concurrency", "shadow_queue")
_BOOL_OPTIONS = ("shadow_allow_unsafe",)
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:")


def _pairs(text: str, what: str) -> dict[str, str]:
    items = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return parse_pairs(items, what, allow_empty=False)
    except PlanError as e:
        raise exceptions.OptionsError(str(e)) from None  # type: ignore[no-untyped-call]


def _fail(message: str) -> Any:
    return exceptions.OptionsError(message)  # type: ignore[no-untyped-call]


def parse_targets(to: str, key_env: str, model_map: str) -> list[tuple[Target, str | None]]:
    """The candidates of `shadow_to`, with their model maps (`A=B` for all, `label:A=B` for
    one) and keys (`shadow_key_env`: from the environment only). One-line `OptionsError`s."""
    urls = _pairs(to, "shadow_to")
    for label in urls:
        if not set(label) <= _LABEL_CHARS or label.startswith("."):
            raise _fail(
                f"shadow_to: a label is a file name part (letters, digits, ._-:), not {label!r}"
            )
    envs = _pairs(key_env, "shadow_key_env")
    maps: dict[str, dict[str, str]] = {label: {} for label in urls}
    shared: dict[str, str] = {}
    for src, dst in _pairs(model_map, "shadow_model_map").items():
        label, sep, model = src.partition(":")
        if sep and label in urls:
            maps[label][model] = dst
        else:
            shared[src] = dst
    out = []
    for label, url in urls.items():
        var = envs.get(label)
        key = os.environ.get(var) if var else None
        if var and not key:
            raise _fail(f"shadow_key_env: ${var} (the key for {label}) is not set")
        try:
            out.append((Target(label, url, var, {**shared, **maps[label]}), key))
        except PlanError as e:
            raise _fail(f"shadow_to: {e}") from None
    unknown = sorted(set(envs) - set(urls))
    if unknown:
        raise _fail(f"shadow_key_env: {unknown[0]} is not a label of shadow_to")
    return out


class Shadow:
    def __init__(self) -> None:
        self.mirror: Mirror | None = None
        self.filter: flowfilter.TFilter | None = None
        self.spool: Spool | None = None
        self.writers: dict[Path, RecordWriter] = {}
        self.retired: list[Mirror] = []
        self.problems: list[str] = []
        self.is_running = False
        self.transport_for: Any = None
        """Tests: `Target -> httpx.AsyncBaseTransport` instead of a connection pool."""

    def load(self, loader):  # type: ignore[no-untyped-def]
        loader.add_option("shadow_to", str, "", "Candidates to mirror requests to: label=URL,...")
        loader.add_option(
            "shadow_key_env",
            str,
            "",
            "label=VAR,...: each candidate's key, from the environment (never the client's).",
        )
        loader.add_option(
            "shadow_model_map", str, "", "A=B,... for every candidate, label:A=B for one."
        )
        loader.add_option(
            "shadow_filter", str, "", "A mitmproxy filter expression: mirror only what it matches."
        )
        loader.add_option("shadow_concurrency", int, 8, "Mirrors in flight per candidate.")
        loader.add_option(
            "shadow_queue", int, 256, "Mirrors pending in all; more are dropped and counted."
        )
        loader.add_option(
            "shadow_allow_unsafe",
            bool,
            False,
            "Mirror DELETE, uploads and other calls that may change state on a candidate.",
        )
        master = getattr(loader, "master", None)  # none: an options listing
        if master is not None:
            self._take_unparsable(master.options)

    def _take_unparsable(self, options: Any) -> None:
        """`--set` values that do not parse as the option's type would abort loading this
        script without a word: take them out and say why."""
        for name in (*_INT_OPTIONS, *_BOOL_OPTIONS):
            values = getattr(options.deferred.get(name), "val", None)
            if not values:
                continue
            value = values[-1]
            if name in _INT_OPTIONS:
                ok, want = len(values) == 1 and value.strip().isdigit(), "a whole number"
            else:
                ok = len(values) == 1 and value in ("true", "false", "toggle")
                want = "true or false"
            if not ok:
                del options.deferred[name]
                self.problems.append(f"{name} must be {want}, not {value!r}")

    def configure(self, updated: set[str]) -> None:
        if not any(name.startswith("shadow_") for name in updated):
            return
        problems, self.problems = self.problems, []
        try:
            if problems:
                raise _fail(problems[0])
            self._configure()
        except exceptions.OptionsError as e:
            if self.is_running:  # a change at run time is refused; mirroring goes on
                raise
            logging.error(f"shadow: {e}")  # at startup: mitmdump stops, with this line
            self.mirror = None

    def _configure(self) -> None:
        opts = ctx.options
        for name in _INT_OPTIONS:
            if getattr(opts, name) < 1:
                raise _fail(f"{name} must be 1 or more, not {getattr(opts, name)}")
        expr = opts.shadow_filter.strip()
        try:
            filt = flowfilter.parse(expr) if expr else None
        except ValueError:
            filt = None
        if expr and filt is None:
            raise _fail(f"shadow_filter: not a mitmproxy filter expression: {expr!r}")
        targets = parse_targets(opts.shadow_to, opts.shadow_key_env, opts.shadow_model_map)
        if targets and ctx.master.addons.get("capture") is None:  # type: ignore[no-untyped-call]
            raise _fail("load addons/capture.py first: -s addons/capture.py -s addons/shadow.py")
        self.filter = filt
        if self.mirror is not None:
            self.retired.append(self.mirror)
        self.mirror = None
        if targets:
            self.mirror = Mirror(
                [
                    Candidate(
                        t, key, self._transport(t, opts.shadow_concurrency), opts.shadow_concurrency
                    )
                    for t, key in targets
                ],
                path_of=self._path,
                record=self._record,
                queue=opts.shadow_queue,
                body_cap=self._body_cap,
                allow_unsafe=opts.shadow_allow_unsafe,
                redact=self._redact,
                log=logging.warning,
            )
            logging.info(
                "shadow: mirroring to "
                + ", ".join(f"{t.label} ({t.url})" for t, _ in targets)
                + f"; records in {self._path('<session>', '<label>')}"
            )

    def _transport(self, target: Target, concurrency: int) -> httpx.AsyncBaseTransport:
        if self.transport_for is not None:
            transport: httpx.AsyncBaseTransport = self.transport_for(target)
            return transport
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        # trust_env: SSL_CERT_FILE / SSL_CERT_DIR for candidates behind a private CA
        return httpx.AsyncHTTPTransport(limits=limits, trust_env=True)

    # -- the capture's settings: the same session, directory, body cap and redactions --
    @property
    def _capture(self) -> Any:
        return ctx.master.addons.get("capture")  # type: ignore[no-untyped-call]

    @property
    def _body_cap(self) -> int:
        return int(getattr(ctx.options, "capture_body_cap", DEFAULT_BODY_CAP))

    @property
    def _redact(self) -> frozenset[str]:
        return frozenset(getattr(self._capture, "redact", frozenset()))

    def _path(self, session: str, label: str) -> Path:
        return Path(ctx.options.capture_dir).resolve() / f"{session}.{label}.jsonl"

    def running(self) -> None:
        self.is_running = True
        if self.mirror is not None and self.spool is None:
            self.spool = Spool(self._body_cap, self._redact, nice=SPOOL_NICE, fork=False)

    # -- the hook: count and schedule, nothing more --
    def request(self, flow: http.HTTPFlow) -> None:
        mirror = self.mirror
        if mirror is None or flow.metadata.get("wirediff.replay_of"):
            return
        if self.filter is not None and not self.filter(flow):
            return
        if (flow.request.method.upper(), route(flow.request.path)[1]) in PRODUCERS:
            flow.metadata[KEEP_ANSWER] = True  # its ids may be named later
        mirror.submit(self._live(flow))

    def _live(self, flow: http.HTTPFlow) -> Live:
        req = flow.request
        fields = flow.metadata.get("wirediff.client_fields", req.headers.fields)
        capture = self._capture
        return Live(
            id=flow.id,
            session=str(getattr(capture, "session", "") or ""),
            seq=int(flow.metadata.get("wirediff.seq", 0)),
            request=Request(
                method=req.method,
                url=req.pretty_url,
                path=req.path,
                http_version=req.http_version,
                headers=header_pairs(fields),
                content=req.raw_content,
            ),
            started=req.timestamp_start,
            answer_text=lambda: _answer_text(flow),
            answer_record=lambda: self._answer_record(flow),
        )

    def _answer_record(self, flow: http.HTTPFlow) -> Record | None:
        if flow.response is None:
            return None
        ex = exchange_from_flow(flow, body_cap=self._body_cap)
        return build_record(ex, session="", label="", seq=0, body_cap=self._body_cap)

    # -- records: to the spool process, or built here (no spool: mitmproxy's test helpers) --
    def _record(self, path: Path, ex: Exchange, meta: RecordMeta) -> None:
        if self.spool is not None and self.spool.exchange(path, ex, meta):
            return
        self._write(path, build_item(ex, meta, self._body_cap, self._redact))

    def _write(self, path: Path, rec: Record) -> None:
        w = self.writers.get(path)
        if w is None:
            w = self.writers[path] = RecordWriter(path)
        if not w.write(rec) and w.failure is not None:
            logging.error(f"shadow: cannot write {path}: {w.failure.strerror or w.failure}")

    async def done(self) -> None:
        mirrors = [m for m in (*self.retired, self.mirror) if m is not None]
        self.mirror = None
        for mirror in mirrors:
            await mirror.close(DRAIN_SECONDS)
            for line in mirror.summary():
                logging.info(line)
        if self.spool is not None:
            spool, self.spool = self.spool, None
            for path, rec in spool.close_unsent():
                self._write(path, rec)
        for w in self.writers.values():
            w.close()
        self.writers.clear()


def _answer_text(flow: http.HTTPFlow) -> str:
    """The primary's answer as text: a streamed one as its tap kept it."""
    resp = flow.response
    if resp is None:
        return ""
    if isinstance(resp.stream, StreamTap):
        return resp.stream.kept().decode("utf-8", "replace")
    return resp.get_text(strict=False) or ""


addons = [Shadow()]
