"""Mirror live requests to candidate backends, off the client's path.

Their answers are recorded as replays of the live exchange, beside the capture.

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
hooks only send plain values down a pipe to the mirror process
(`wirediff.replay.mirror_process`, started with mitmdump, niced), which sends, records and
holds the candidates' keys, read from its environment; a candidate's full queue
(`shadow_queue` pending) drops its mirrors, and a mirror process too far behind drops
requests (each counted, said once per burst); a failing candidate is recorded.
A candidate with the primary's own URL and label mirrors the primary itself: the analysis
takes what differs between the two as noise, as it does for repeated replays.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mitmproxy import addonmanager, ctx, exceptions, flowfilter, http

from wirediff.addons._options import take_unknown, take_unparsable
from wirediff.addons._stopping import quiet_cancelled_connections
from wirediff.errors import PlanError, UsageError
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.exchange import exchange_state
from wirediff.record.flow import KEEP_ANSWER, exchange_from_flow
from wirediff.record.tags import route
from wirediff.replay.mirror_process import Config, MirrorProcess
from wirediff.replay.slots import PRODUCERS
from wirediff.replay.targets import Target, key_in, parse_pairs

__all__ = ["Shadow", "addons", "parse_targets"]

_INT_OPTIONS = ("shadow_concurrency", "shadow_queue")
_BOOL_OPTIONS = ("shadow_allow_unsafe",)
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:")
_ANSWER = "wirediff.shadow_answer"
"""`flow.metadata` key: this flow's answer is wanted by the mirror process (not yet sent)."""


class MirrorPipe(Protocol):
    """Take the hooks' frames: the mirror process (`MirrorProcess`), or a test's stand-in."""

    def send(self, item: Any) -> bool: ...

    async def aclose(self) -> None: ...


def _option_pairs(text: str, what: str) -> dict[str, str]:
    items = [p.strip() for p in text.split(",") if p.strip()]
    try:
        return parse_pairs(items, what, allow_empty=False)
    except PlanError as e:
        raise exceptions.OptionsError(str(e)) from None


def _fail(message: str) -> Any:
    return exceptions.OptionsError(message)


def parse_targets(to: str, key_env: str, model_map: str) -> list[tuple[Target, str | None]]:
    """Parse the candidates of `shadow_to`, with their model maps and keys.

    A model map is `A=B` for all, `label:A=B` for one; keys come from the environment only
    (`shadow_key_env`). Errors are one-line `OptionsError`s."""
    urls = _option_pairs(to, "shadow_to")
    for label in urls:
        if not set(label) <= _LABEL_CHARS or label.startswith("."):
            raise _fail(
                f"shadow_to: a label is a file name part (letters, digits, ._-:), not {label!r}"
            )
    envs = _option_pairs(key_env, "shadow_key_env")
    maps: dict[str, dict[str, str]] = {label: {} for label in urls}
    shared: dict[str, str] = {}
    for src, dst in _option_pairs(model_map, "shadow_model_map").items():
        label, sep, model = src.partition(":")
        if sep and label in urls:
            maps[label][model] = dst
        else:
            shared[src] = dst
    out = []
    for label, url in urls.items():
        var = envs.get(label)
        try:
            key = key_in(var, os.environ, f"shadow_key_env: the key for {label}") if var else None
        except UsageError as e:
            raise _fail(str(e)) from None
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
        self.config: Config | None = None
        """What the mirror process is told to do (None: nothing to mirror)."""
        self.filter: flowfilter.TFilter | None = None
        self.pipe: MirrorPipe | None = None
        self.unsent = 0
        self.behind = False
        self.problems: list[str] = []
        self.is_running = False
        self.pipe_for: Callable[[], MirrorPipe] = MirrorProcess
        """Tests: a stand-in for the mirror process."""

    def load(self, loader: addonmanager.Loader) -> None:
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
            "shadow_queue", int, 256, "Mirrors pending per candidate; more are dropped and counted."
        )
        loader.add_option(
            "shadow_allow_unsafe",
            bool,
            False,
            "Mirror DELETE, uploads and other calls that may change state on a candidate.",
        )
        master = getattr(loader, "master", None)  # none: an options listing
        if master is not None:
            self.problems += take_unknown(master.options, "shadow_")
            self.problems += take_unparsable(
                master.options, {name: "a whole number" for name in _INT_OPTIONS}, _BOOL_OPTIONS
            )

    def configure(self, updated: set[str]) -> None:
        if not any(name.startswith(("shadow_", "capture_")) for name in updated):
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
            self.config = None

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
        if targets and self._capture is None:
            raise _fail("load addons/capture.py first: -s addons/capture.py -s addons/shadow.py")
        self.filter = filt
        self.config = None
        if not targets:
            return
        self.config = {
            "candidates": [[t.label, t.url, t.api_key_env, dict(t.model_map)] for t, _ in targets],
            "queue": opts.shadow_queue,
            "concurrency": opts.shadow_concurrency,
            "allow_unsafe": opts.shadow_allow_unsafe,
            "body_cap": int(getattr(opts, "capture_body_cap", DEFAULT_BODY_CAP)),
            "redact": sorted(getattr(self._capture, "redact", ())),
            "capture_dir": str(Path(opts.capture_dir).resolve()),
        }
        logging.info(
            "shadow: mirroring to "
            + ", ".join(f"{t.label} ({t.url})" for t, _ in targets)
            + f"; records in {Path(opts.capture_dir).resolve() / '<session>.<label>.jsonl'}"
        )
        if self.is_running:
            self._start()

    @property
    def _capture(self) -> Any:
        return ctx.master.addons.get("capture")

    def running(self) -> None:
        self.is_running = True
        quiet_cancelled_connections()
        self._start()

    def _start(self) -> None:
        """Tell the mirror process the configuration, starting it the first time."""
        if self.config is None:
            return
        if self.pipe is None:
            self.pipe = self.pipe_for()
        self._send(("config", self.config))

    def _send(self, item: tuple[Any, ...]) -> bool:
        """Send a frame down the pipe.

        False, said once per burst, when the mirror process is gone or too far behind: the frame
        is dropped."""
        assert self.pipe is not None
        if self.pipe.send(item):
            self.behind = False
            return True
        if not self.behind:
            self.behind = True
            logging.warning(
                "shadow: the mirror process is behind or gone: dropping mirrors until it "
                "catches up; the count is logged at the end"
            )
        return False

    # -- the hooks: plain values down a pipe, nothing more --
    def request(self, flow: http.HTTPFlow) -> None:
        if self.config is None or self.pipe is None or flow.metadata.get("wirediff.replay_of"):
            return
        if self.filter is not None and not self.filter(flow):
            return
        req = flow.request
        if (req.method.upper(), route(req.path)[1]) in PRODUCERS:
            flow.metadata[KEEP_ANSWER] = True  # its ids may be named later
            flow.metadata[_ANSWER] = True
        fields = flow.metadata.get("wirediff.client_fields", req.headers.fields)
        capture = self._capture
        live = (
            flow.id,
            req.method,
            req.pretty_url,
            req.path,
            req.http_version,
            fields,
            req.raw_content,
            req.timestamp_start,
        )
        session = str(getattr(capture, "session", "") or "")
        if not self._send(("request", live, session, int(flow.metadata.get("wirediff.seq", 0)))):
            self.unsent += 1

    def response(self, flow: http.HTTPFlow) -> None:
        self._answered(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._answered(flow)

    def _answered(self, flow: http.HTTPFlow) -> None:
        """Pass on the primary's answer to a request whose ids a later one may name."""
        if self.pipe is None or not flow.metadata.pop(_ANSWER, False):
            return
        body_cap = int(getattr(ctx.options, "capture_body_cap", DEFAULT_BODY_CAP))
        answer = exchange_state(exchange_from_flow(flow, body_cap=body_cap))
        self._send(("answer", flow.id, answer))

    async def done(self) -> None:
        self.config = None
        if self.pipe is not None:
            pipe, self.pipe = self.pipe, None
            await pipe.aclose()
        if self.unsent:
            logging.info(
                f"shadow: {self.unsent} live requests not mirrored "
                "(the mirror process was behind or gone)"
            )


addons = [Shadow()]
