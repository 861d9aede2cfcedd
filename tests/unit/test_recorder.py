"""A flow's snapshot, marshalled as the pipe to the recorder process carries it, builds
exactly the record the addon would have built in-process (the process itself:
tests/e2e/test_recorder_process.py)."""

from __future__ import annotations

import gzip
import marshal

from mitmproxy import http
from mitmproxy.test import tflow
from wsproto.frame_protocol import CloseReason

from tests.unit.test_capture_addon import TURN, chat_flow, flow_response, ws_flow, ws_message
from wirediff.record.build import build_record
from wirediff.record.flow import (
    WEBSOCKET_TAP,
    exchange_from_flow,
    exchange_from_snapshot,
    snapshot,
)
from wirediff.record.recorder import Job
from wirediff.record.tap import StreamTap
from wirediff.record.websocket import WebSocketTap


def sse_flow() -> http.HTTPFlow:
    f = chat_flow()
    assert f.response is not None
    flow_response(f).headers["content-type"] = "text/event-stream"
    flow_response(f).headers["content-encoding"] = "gzip"
    tap = StreamTap(t0=f.request.timestamp_start, content_encoding="gzip")
    flow_response(f).stream = tap
    packed = gzip.compress(b'data: {"a":1}\n\ndata: [DONE]\n\n', mtime=0)
    tap(packed[:9])
    tap(packed[9:])
    tap(b"")
    return f


def ws_session() -> http.HTTPFlow:
    """A WebSocket session as a live capture keeps it: its tap filled message by message."""
    f = ws_flow()
    assert f.websocket is not None
    tap = f.metadata[WEBSOCKET_TAP] = WebSocketTap(t0=f.request.timestamp_start, cap=90)
    for i, (from_client, obj) in enumerate(TURN):
        ws_message(f, from_client, obj, at=0.01 * (i + 1))
        tap.message(f.websocket.messages[-1])
    # as mitmproxy sets it: wsproto's IntEnum, which marshal cannot carry as it is
    f.websocket.close_code, f.websocket.closed_by_client = CloseReason.NORMAL_CLOSURE, False
    f.websocket.timestamp_end = f.request.timestamp_start + 0.5
    return f


def flows() -> list[http.HTTPFlow]:
    cut = chat_flow()
    cut.error = tflow.terr("Server disconnected.")
    return [chat_flow(), sse_flow(), cut, ws_session()]


def job(f: http.HTTPFlow, seq: int) -> Job:
    return (snapshot(f, f.request.headers.fields), "lbl", seq, "reverse:x", None)


def test_a_snapshot_survives_marshal_and_builds_the_same_record() -> None:
    for f in flows():
        again = exchange_from_snapshot(marshal.loads(marshal.dumps(snapshot(f, None))))
        direct = build_record(exchange_from_flow(f), session="s", label="l", seq=0)
        assert build_record(again, session="s", label="l", seq=0) == direct
