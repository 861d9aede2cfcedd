"""Record every exchange that passes through mitmproxy as a `wirediff/1` JSON Lines record.

Usage:
    mitmdump -s addons/capture.py [--mode reverse:URL ...] --set capture_dir=DIR \
        [--set capture_session=NAME] [--set capture_label=LABEL]

Server-Sent Events are streamed through unbuffered and recorded event by event with timing;
a WebSocket session (the Responses API's WebSocket mode, Realtime) is one record per
connection, its messages kept as they pass and written when it closes; secrets in headers
are replaced by fingerprints; each record is appended and flushed.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path

from mitmproxy import ctx, exceptions, http

# Loaded by path from a checkout (`mitmdump -s addons/capture.py`): the checkout's `wirediff`
# comes first. Installed (`wirediff addon-path`), `wirediff` is already importable.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "wirediff" / "__init__.py").is_file() and str(_CHECKOUT) not in sys.path:
    sys.path.insert(0, str(_CHECKOUT))

from wirediff._types import Record  # noqa: E402
from wirediff.record.body import DEFAULT_BODY_CAP  # noqa: E402
from wirediff.record.build import build_record  # noqa: E402
from wirediff.record.flow import (  # noqa: E402
    WEBSOCKET_TAP,
    exchange_from_flow,
    fallback_record,
    is_open_ended,
    upstream_label,
)
from wirediff.record.store import RecordWriter  # noqa: E402
from wirediff.record.tap import StreamTap, is_sse  # noqa: E402
from wirediff.record.websocket import WebSocketTap  # noqa: E402

REPLAY_OF_HEADER = "x-wirediff-replay-of"
LABEL_HEADER = "x-wirediff-label"


class Capture:
    def __init__(self) -> None:
        self.writer: RecordWriter | None = None
        self.session = ""
        self.seq = 0
        self.redact: frozenset[str] = frozenset()
        self.pending: dict[str, http.HTTPFlow] = {}
        self.websockets: dict[str, http.HTTPFlow] = {}
        """Open WebSocket sessions, recorded when they close (or at shutdown)."""

    def load(self, loader):  # type: ignore[no-untyped-def]
        loader.add_option("capture_dir", str, "captures", "Directory for <session>.jsonl captures.")
        loader.add_option(
            "capture_session", str, "", "Session name (file stem); default: the UTC start time."
        )
        loader.add_option(
            "capture_label", str, "", "Which backend this is; default: the upstream host."
        )
        loader.add_option(
            "capture_redact",
            str,
            "",
            "Comma-separated extra header names to fingerprint (auth and cookies always are).",
        )
        loader.add_option(
            "capture_body_cap", int, DEFAULT_BODY_CAP, "Bytes kept per body; longer is truncated."
        )
        loader.add_option(
            "capture_lazy_connect",
            bool,
            True,
            "Set connection_strategy=lazy so a refused upstream is recorded against its "
            "request (eager closes the client before any request exists).",
        )

    def configure(self, updated: set[str]) -> None:
        if "capture_redact" in updated:
            self.redact = frozenset(
                h.strip().lower() for h in ctx.options.capture_redact.split(",") if h.strip()
            )
        if updated & {"capture_dir", "capture_session"}:
            if ctx.options.capture_body_cap < 0:
                raise exceptions.OptionsError(  # type: ignore[no-untyped-call]
                    "capture_body_cap must be >= 0"
                )
            self.close()
            self.session = ctx.options.capture_session or time.strftime(
                "%Y%m%dT%H%M%SZ", time.gmtime()
            )
            if "/" in self.session or self.session.startswith("."):
                raise exceptions.OptionsError(  # type: ignore[no-untyped-call]
                    f"capture_session is a name, not a path: {self.session!r}"
                )
            try:
                Path(ctx.options.capture_dir).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise exceptions.OptionsError(  # type: ignore[no-untyped-call]
                    f"capture_dir: {e}"
                ) from e
            self.writer = RecordWriter(Path(ctx.options.capture_dir) / f"{self.session}.jsonl")
            self.seq = 0

    def running(self) -> None:
        """Connect upstream lazily: with mitmproxy's default (eager) a refused upstream
        closes the client connection before any request exists, so nothing could be
        recorded. The bytes are the same; with TLS, ALPN is then chosen without the
        server — `capture_lazy_connect=false` keeps eager."""
        if ctx.options.capture_lazy_connect and ctx.options.connection_strategy != "lazy":
            ctx.options.update(connection_strategy="lazy")  # type: ignore[no-untyped-call]
            logging.info("capture: connection_strategy=lazy, so unreachable upstreams are recorded")

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Snapshot the request as the client sent it, before any addon can change it."""
        meta = flow.metadata
        meta["wirediff.replay_of"] = flow.request.headers.pop(REPLAY_OF_HEADER, None)
        meta["wirediff.label"] = flow.request.headers.pop(LABEL_HEADER, None)
        meta["wirediff.client_headers"] = list(flow.request.headers.items(multi=True))  # type: ignore[no-untyped-call]
        meta["wirediff.seq"] = self.seq
        self.seq += 1

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Stream through whatever may arrive over time (SSE, and any body of unknown
        length: NDJSON, long chunked answers), recording on the side."""
        resp = flow.response
        assert resp is not None
        sse = is_sse(resp.headers.get("content-type", ""))
        if sse or is_open_ended(flow):
            resp.stream = StreamTap(
                t0=flow.request.timestamp_start,
                content_encoding=resp.headers.get("content-encoding", ""),
                cap=ctx.options.capture_body_cap,
                sse=sse,
            )

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is None:  # an upgrade is recorded with its messages, at its end
            self.record_soon(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        if flow.id not in self.websockets:
            self.record_soon(flow)

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        flow.metadata[WEBSOCKET_TAP] = WebSocketTap(
            t0=flow.request.timestamp_start, cap=ctx.options.capture_body_cap
        )
        self.websockets[flow.id] = flow

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """Keep the message as an event as it passes (parsed and capped once, in order)."""
        tap = flow.metadata.get(WEBSOCKET_TAP)
        if isinstance(tap, WebSocketTap) and flow.websocket is not None:
            tap.message(flow.websocket.messages[-1])

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self.websockets.pop(flow.id, None)
        self.record_soon(flow)

    def record_soon(self, flow: http.HTTPFlow) -> None:
        """Record on the event loop's next turn: mitmproxy forwards a response only after
        this hook returns, so building the record here would delay what the client sees."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.record(flow)
            return
        self.pending[flow.id] = flow
        loop.call_soon(self._record_pending, flow.id)

    def _record_pending(self, flow_id: str) -> None:
        flow = self.pending.pop(flow_id, None)
        if flow is not None:
            self.record(flow)

    def flush(self) -> None:
        """Record every exchange still waiting for its turn (at shutdown, in tests)."""
        for flow_id in list(self.pending):
            self._record_pending(flow_id)

    def close_websockets(self) -> None:
        """At shutdown: record the sessions still open, as they stand (not complete)."""
        for flow in list(self.websockets.values()):
            self.websockets.pop(flow.id, None)
            self.record(flow)

    def record(self, flow: http.HTTPFlow) -> None:
        if self.writer is None or flow.metadata.get("wirediff.written"):
            return
        flow.metadata["wirediff.written"] = True
        try:
            self.writer.write(self.build(flow))
        except Exception as e:  # never lose the exchange: keep what is certain
            logging.exception("capture: could not record %s %s", flow.request.method, flow.id)
            self.writer.write(fallback_record(flow, self.session, e))

    def build(self, flow: http.HTTPFlow) -> Record:
        meta = flow.metadata
        return build_record(
            exchange_from_flow(
                flow,
                client_headers=meta.get("wirediff.client_headers"),
                body_cap=ctx.options.capture_body_cap,
            ),
            session=self.session,
            label=meta.get("wirediff.label") or ctx.options.capture_label or upstream_label(flow),
            seq=meta.get("wirediff.seq", self.seq),
            listener=flow.client_conn.proxy_mode.full_spec,
            replay_of=meta.get("wirediff.replay_of"),
            body_cap=ctx.options.capture_body_cap,
            redact=self.redact,
        )

    def close(self) -> None:
        self.flush()
        self.close_websockets()
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def done(self) -> None:
        self.close()


addons = [Capture()]
