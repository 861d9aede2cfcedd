"""Record every exchange that passes through mitmproxy as a `wirediff/1` JSON Lines record.

Usage:
    mitmdump -s addons/capture.py [--mode reverse:URL ...] --set capture_dir=DIR \
        [--set capture_session=NAME] [--set capture_label=LABEL]

Server-Sent Events are streamed through unbuffered and recorded event by event with timing;
a WebSocket session (the Responses API's WebSocket mode, Realtime) is one record per
connection, its messages kept as they pass and recorded when it closes. At shutdown every
exchange still in flight (a stream mid-way, a request waiting for its answer, an open
session) is recorded as it stands. Secrets in headers are replaced by fingerprints.
Records are built and appended by a recorder process (`wirediff.record.recorder`), off the
proxy's event loop. A bad option value or an unwritable `capture_dir` stops mitmdump at
startup with one line. What mitmdump itself prints about flows has credentials
fingerprinted too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from pathlib import Path
from typing import IO, Any

from mitmproxy import addonmanager, ctx, exceptions, http

from wirediff._types import Record
from wirediff.addons import READY_ENV
from wirediff.addons._deflate import install_bounded_deflate
from wirediff.addons._options import take_unknown, take_unparsable
from wirediff.addons._stopping import quiet_cancelled_connections
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.build import (
    build_record,
    exchange_secrets,
    fallback_record,
)
from wirediff.record.exchange import Error, header_pairs
from wirediff.record.flow import (
    KEEP_ANSWER,
    PROXY_SHUTDOWN,
    WEBSOCKET_TAP,
    exchange_from_flow,
    is_open_ended,
    snapshot,
    upstream_label,
)
from wirediff.record.parts import Rotation, parse_rotation, session_problem
from wirediff.record.recorder import Job, Recorder, build_job
from wirediff.record.redact import json_secrets, scrub_text, secret_values
from wirediff.record.scrub import redact_log_text
from wirediff.record.store import RecordWriter
from wirediff.record.tap import StreamTap, is_sse
from wirediff.record.websocket import WebSocketTap

__all__ = ["LABEL_HEADER", "REPLAY_OF_HEADER", "Capture", "addons"]

REPLAY_OF_HEADER = "x-wirediff-replay-of"
LABEL_HEADER = "x-wirediff-label"
_CONTROL = (REPLAY_OF_HEADER.encode(), LABEL_HEADER.encode())
_MISSING, _STREAMED = "(content missing)", "(streamed)"
"""mitmdump's size of a body it did not buffer, and what the capture's log says instead."""
INT_OPTIONS = {"capture_body_cap": "a whole number of bytes"}
BOOL_OPTIONS = ("capture_lazy_connect",)


def body_cap_problem(cap: int) -> str | None:
    """Say why `capture_body_cap` cannot be `cap`, or None."""
    return None if cap >= 0 else f"capture_body_cap must be 0 or more bytes, not {cap}"


_WIREDIFF_ROOT = str(Path(sys.modules["wirediff"].__file__ or "").resolve().parent.parent)


MAX_LOG_SECRETS = 4096
"""Forms of the secrets of recent exchanges kept to scrub from what mitmdump prints."""


class _LogSecrets:
    """Keep the secrets of the exchanges mitmdump is printing about, newest last, bounded."""

    def __init__(self) -> None:
        self._forms: dict[str, str] = {}
        self._longest_first: dict[str, str] = {}

    def add(self, secrets: dict[str, str]) -> None:
        if all(form in self._forms for form in secrets):
            return
        self._forms.update(secrets)
        while len(self._forms) > MAX_LOG_SECRETS:
            del self._forms[next(iter(self._forms))]
        self._longest_first = dict(sorted(self._forms.items(), key=lambda kv: -len(kv[0])))

    def scrub(self, text: str) -> str:
        return redact_log_text(scrub_text(text, self._longest_first))


class _RedactedOutput:
    """Fingerprint the credentials in mitmdump's flow log.

    Those are the credentials of the exchanges it prints about, in any form, and anything shaped
    like one (`redact_log_text`). A body streamed through (the capture's streams are: nothing is
    buffered) has no content for mitmdump to size, which it calls missing: the log says
    streamed."""

    def __init__(self, out: IO[str], secrets: _LogSecrets) -> None:
        self._out, self._secrets = out, secrets

    def write(self, text: str) -> int:
        return self._out.write(self._secrets.scrub(text.replace(_MISSING, _STREAMED)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._out, name)


class _RedactLog(logging.Filter):
    def __init__(self, secrets: _LogSecrets) -> None:
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self._secrets.scrub(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


class Capture:
    def __init__(self) -> None:
        self.writer: RecordWriter | None = None
        self.recorder: Recorder | None = None
        self.path: Path | None = None
        self.session = ""
        self.seq = 0
        self.redact: frozenset[str] = frozenset()
        self.body_cap = DEFAULT_BODY_CAP
        self.label = ""
        self.rotation: Rotation | None = None
        self.pending: dict[str, http.HTTPFlow] = {}
        self.in_flight: dict[str, http.HTTPFlow] = {}
        """Exchanges not recorded yet, an open WebSocket session until it closes.

        At shutdown they are recorded as they stand."""
        self.problems: list[str] = []
        self.is_running = False
        self.log_secrets = _LogSecrets()
        self.log_flows = False
        """Whether mitmdump prints flows, whose secrets must then be learnt.

        Its dumper prints them when `flow_detail` is above 0."""

    def load(self, loader: addonmanager.Loader) -> None:
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
            "capture_body_cap",
            int,
            DEFAULT_BODY_CAP,
            "Bytes kept per body, SSE event and WebSocket message; longer is truncated.",
        )
        loader.add_option(
            "capture_lazy_connect",
            bool,
            True,
            "Set connection_strategy=lazy so a refused upstream is recorded against its "
            "request (eager closes the client before any request exists).",
        )
        loader.add_option(
            "capture_rotate",
            str,
            "",
            "Start <session>.<n>.jsonl at this size (100MB, 512KiB) or age (1h); empty: one file.",
        )
        master = getattr(loader, "master", None)  # none: `wirediff capture --help` reading
        if master is not None:
            self.problems += take_unknown(master.options, "capture_")
            self.problems += take_unparsable(master.options, INT_OPTIONS, BOOL_OPTIONS)

    def configure(self, updated: set[str]) -> None:
        opts = ctx.options
        problems = []
        if "capture_body_cap" in updated and (wrong := body_cap_problem(opts.capture_body_cap)):
            problems.append(wrong)
        rotation = None
        try:
            rotation = parse_rotation(opts.capture_rotate)
        except ValueError as e:
            problems.append(str(e))
        session = opts.capture_session or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        reopen = bool(updated & {"capture_dir", "capture_session", "capture_rotate"})
        wrong = session_problem(session) if reopen else None
        if wrong:
            problems.append(f"capture_session {wrong}")
        writer = None
        if reopen and not problems and not self.problems:
            writer, problem = self._writable(Path(opts.capture_dir), session, rotation)
            problems += [problem] if problem else []
        if problems and self.is_running:  # a change at run time is refused; the capture goes on
            raise exceptions.OptionsError(problems[0])
        self.problems += problems
        if self.problems:
            return self._fail_startup()
        if "capture_redact" in updated:
            self.redact = frozenset(
                h.strip().lower() for h in opts.capture_redact.split(",") if h.strip()
            )
        self.label = opts.capture_label
        self.body_cap = opts.capture_body_cap
        if writer is not None:
            self.close()
            self.session, self.path, self.writer, self.seq = session, writer.base, writer, 0
            self.rotation = writer.rotation
            logging.info(f"capture: recording to {self.path}")
            if self.is_running:
                self._start_recorder()

    def _fail_startup(self) -> None:
        """Stop mitmdump at startup with one line per problem, no traceback.

        An error logged while starting makes mitmdump exit, through its ErrorCheck addon."""
        for problem in self.problems:
            logging.error(f"capture: {problem}")
        self.problems.clear()
        self.close()
        self.path = None

    @staticmethod
    def _writable(
        directory: Path, session: str, rotation: Rotation | None
    ) -> tuple[RecordWriter | None, str | None]:
        """Open a writer for the capture, or say why not.

        A probe file must prove the directory writable first, and an existing capture
        appendable."""
        where = directory.resolve()
        if where.exists() and not where.is_dir():
            return None, f"capture_dir {where} is a file, not a directory"
        path = where / f"{session}.jsonl"
        try:
            where.mkdir(parents=True, exist_ok=True)
            probe = where / f".{session}.{os.getpid()}.probe"
            probe.write_bytes(b"")
            probe.unlink()
            if path.exists():
                with path.open("ab"):
                    pass
        except OSError as e:
            return None, f"capture_dir {where} is not writable: {e.strerror or e}"
        return RecordWriter(path, rotation), None

    def running(self) -> None:
        """Start the recorder, and connect upstream lazily.

        With mitmproxy's default, eager, a refused upstream closes the client connection
        before any request exists, so nothing could be recorded. The bytes are the same; with
        TLS, ALPN is then chosen without the server. `capture_lazy_connect=false` keeps
        eager."""
        self.is_running = True
        install_bounded_deflate()
        self._redact_mitmproxy_log()
        quiet_cancelled_connections()
        if ctx.options.capture_lazy_connect and ctx.options.connection_strategy != "lazy":
            ctx.options.update(connection_strategy="lazy")
            logging.info("capture: connection_strategy=lazy, so unreachable upstreams are recorded")
        self._start_recorder()
        ready = os.environ.get(READY_ENV)
        if ready and self.path is not None:
            Path(ready).touch()

    def _redact_mitmproxy_log(self) -> None:
        dumper = ctx.master.addons.get("dumper")
        if dumper is not None and not isinstance(dumper.outfp, _RedactedOutput):
            dumper.outfp = _RedactedOutput(dumper.outfp, self.log_secrets)
        self.log_flows = dumper is not None and getattr(ctx.options, "flow_detail", 0) > 0
        for handler in logging.getLogger().handlers:
            if not any(isinstance(f, _RedactLog) for f in handler.filters):
                handler.addFilter(_RedactLog(self.log_secrets))

    def _start_recorder(self) -> None:
        if self.path is None or self.recorder is not None:
            return
        if self.writer is not None:  # the recorder process appends from now on
            self.writer.close()
            self.writer = None
        self.recorder = Recorder(
            self.path,
            self.session,
            self.body_cap,
            self.redact,
            pythonpath=_WIREDIFF_ROOT,
            rotate=ctx.options.capture_rotate,
        )

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        """Snapshot the request as the client sent it, before any addon can change it."""
        meta = flow.metadata
        headers = flow.request.headers
        if any(k.lower() in _CONTROL for k, _ in headers.fields):
            meta["wirediff.replay_of"] = headers.pop(REPLAY_OF_HEADER, None)
            meta["wirediff.label"] = headers.pop(LABEL_HEADER, None)
        meta["wirediff.client_fields"] = headers.fields
        meta["wirediff.seq"] = self.seq
        self.seq += 1
        self.in_flight[flow.id] = flow

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """Stream through whatever may arrive over time, recording on the side.

        That is SSE, and any body of unknown length: NDJSON, long chunked answers."""
        resp = flow.response
        assert resp is not None
        sse = is_sse(resp.headers.get("content-type", ""))
        if sse or is_open_ended(flow):
            resp.stream = StreamTap(
                t0=flow.request.timestamp_start,
                content_encoding=resp.headers.get("content-encoding", ""),
                cap=self.body_cap,
                sse=sse,
            )

    def response(self, flow: http.HTTPFlow) -> None:
        self._learn_secrets(flow)
        if flow.websocket is None:  # an upgrade is recorded with its messages, at its end
            self.record_soon(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._learn_secrets(flow)
        if WEBSOCKET_TAP not in flow.metadata:  # a session is recorded at its end
            self.record_soon(flow)

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        flow.metadata[WEBSOCKET_TAP] = WebSocketTap(
            t0=flow.request.timestamp_start, cap=self.body_cap
        )

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        """Keep the message as an event as it passes, capped once, in order.

        Learn the credential-named fields a client message carries before mitmdump prints it."""
        tap = flow.metadata.get(WEBSOCKET_TAP)
        if isinstance(tap, WebSocketTap) and flow.websocket is not None:
            msg = flow.websocket.messages[-1]
            tap.message(msg)
            if self.log_flows and msg.from_client and msg.is_text:
                fields = json_secrets(msg.text)
                if fields:
                    self.log_secrets.add(secret_values((), "", self.redact, fields))

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self.record_soon(flow)

    def _learn_secrets(self, flow: http.HTTPFlow) -> None:
        """Learn the flow's secrets before mitmdump prints it: its dumper comes after this addon."""
        if self.log_flows:
            ex = exchange_from_flow(flow, body_cap=self.body_cap)
            self.log_secrets.add(exchange_secrets(ex, self.redact, self.body_cap))

    def record_soon(self, flow: http.HTTPFlow) -> None:
        """Hand the exchange to the recorder process, else record on the event loop's next turn.

        There is no recorder process when it is not yet running, as under mitmproxy's test
        helpers, or gone. mitmproxy forwards a response only after this hook returns."""
        self.in_flight.pop(flow.id, None)
        if flow.metadata.get("wirediff.written") or self.path is None or self._send(flow):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.record(flow)
            return
        self.pending[flow.id] = flow
        loop.call_soon(self._record_pending, flow.id)

    def _send(self, flow: http.HTTPFlow, error: Error | None = None) -> bool:
        """Hand the exchange to the recorder process, if there is one.

        False when it is lost: this process records from then on."""
        if self.recorder is None:
            return False
        flow.metadata["wirediff.written"] = True
        if self.recorder.send(self.job(flow, error)):
            # in the pipe now: forget a long stream's events, a long session's messages
            # (unless another addon reads the answer later)
            stream = flow.response.stream if flow.response is not None else None
            if isinstance(stream, StreamTap) and not flow.metadata.get(KEEP_ANSWER):
                stream.release()
            ws = flow.metadata.get(WEBSOCKET_TAP)
            if isinstance(ws, WebSocketTap):
                ws.release()
            return True
        self._recorder_lost()
        flow.metadata["wirediff.written"] = False
        return False

    def _recorder_lost(self) -> None:
        """Record in-process from here on: the recorder stopped or fell far behind."""
        assert self.recorder is not None
        why = self.recorder.broken or "the recorder process fell too far behind"
        logging.warning(f"capture: {why}; recording in mitmdump's own process from now on")
        unsent = self.recorder.close()
        self.recorder = None
        self.writer = RecordWriter(self.path, self.rotation) if self.path is not None else None
        for job in unsent:
            self._write(build_job(job, self.session, self.body_cap, self.redact))

    def _record_pending(self, flow_id: str) -> None:
        flow = self.pending.pop(flow_id, None)
        if flow is not None:
            self.record(flow)

    def flush(self) -> None:
        """Record every exchange still waiting for its turn, at shutdown and in tests."""
        for flow_id in list(self.pending):
            self._record_pending(flow_id)

    def close_in_flight(self) -> None:
        """Record every exchange still in flight as it stands, at shutdown.

        Each is not complete, with `error.kind: proxy_shutdown`, and is recorded before the
        recorder process is closed: a stream mid-way, a request waiting for its answer, an open
        WebSocket session."""
        flows, self.in_flight = list(self.in_flight.values()), {}
        for flow in flows:
            written = self.path is None or flow.metadata.get("wirediff.written")
            if not written and not self._send(flow, PROXY_SHUTDOWN):
                self.record(flow, PROXY_SHUTDOWN)

    def record(self, flow: http.HTTPFlow, error: Error | None = None) -> None:
        """Build and append the record of `flow` here, in mitmdump's process."""
        if self.writer is None or flow.metadata.get("wirediff.written"):
            return
        flow.metadata["wirediff.written"] = True
        try:
            rec = self.build(flow, error)
        except Exception as e:  # never lose the exchange: keep what is certain
            logging.warning(f"capture: could not build the record of {flow.id}: {e!r}")
            rec = fallback_record(
                exchange_from_flow(flow, error=error),
                self.session,
                e,
                label=self._label(flow),
                seq=flow.metadata.get("wirediff.seq", self.seq),
                replay_of=flow.metadata.get("wirediff.replay_of"),
            )
        self._write(rec)

    def _write(self, rec: Record) -> None:
        assert self.writer is not None
        failing = self.writer.failure is not None
        if not self.writer.write(rec) and not failing:
            why = self.writer.failure
            logging.error(
                f"capture: cannot write {self.writer.path}: {why.strerror if why else why}; "
                "records wait in memory until it can"
            )
        elif failing and self.writer.failure is None:
            logging.warning(f"capture: writing {self.writer.path} again")

    def _label(self, flow: http.HTTPFlow) -> str:
        return str(flow.metadata.get("wirediff.label") or self.label or upstream_label(flow))

    def job(self, flow: http.HTTPFlow, error: Error | None = None) -> Job:
        meta = flow.metadata
        return (
            snapshot(flow, meta.get("wirediff.client_fields"), self.body_cap, error),
            self._label(flow),
            meta.get("wirediff.seq", self.seq),
            flow.client_conn.proxy_mode.full_spec,
            meta.get("wirediff.replay_of"),
        )

    def build(self, flow: http.HTTPFlow, error: Error | None = None) -> Record:
        meta = flow.metadata
        fields = meta.get("wirediff.client_fields")
        return build_record(
            exchange_from_flow(
                flow,
                client_headers=header_pairs(fields) if fields is not None else None,
                body_cap=self.body_cap,
                error=error,
            ),
            session=self.session,
            label=self._label(flow),
            seq=meta.get("wirediff.seq", self.seq),
            listener=flow.client_conn.proxy_mode.full_spec,
            replay_of=meta.get("wirediff.replay_of"),
            body_cap=self.body_cap,
            redact=self.redact,
        )

    def close(self) -> None:
        self.flush()
        if self.recorder is not None:
            unsent = self.recorder.close()
            self.recorder = None
            if unsent and self.path is not None:
                self.writer = RecordWriter(self.path, self.rotation)
                for job in unsent:
                    self._write(build_job(job, self.session, self.body_cap, self.redact))
        if self.writer is not None:
            self.writer.close()
            if self.writer.waiting or self.writer.lost:
                logging.error(
                    f"capture: {self.writer.waiting + self.writer.lost} records could not be "
                    f"written to {self.writer.path}"
                )
            self.writer = None

    def done(self) -> None:
        self.close_in_flight()
        self.close()


addons = [Capture()]
