"""The recorder process: a flow's snapshot, marshalled down a pipe, becomes exactly the record
the addon would have built in-process."""

from __future__ import annotations

import gzip
import marshal
from pathlib import Path

from mitmproxy import http
from mitmproxy.test import tflow
from wsproto.frame_protocol import CloseReason

from tests.fixtures.records import answer, error_of, events_of, websocket_of
from tests.unit.test_capture_addon import KEY, TURN, chat_flow, flow_response, ws_flow, ws_message
from wirediff.record.build import build_record
from wirediff.record.flow import (
    WEBSOCKET_TAP,
    exchange_from_flow,
    exchange_from_snapshot,
    snapshot,
)
from wirediff.record.recorder import Job, Recorder
from wirediff.record.store import load_records
from wirediff.record.tap import StreamTap
from wirediff.record.websocket import WebSocketTap

ROOT = str(Path(__file__).resolve().parents[2])


def sse_flow() -> http.HTTPFlow:
    f = chat_flow()
    assert f.response is not None
    flow_response(f).headers["content-type"] = "text/event-stream"
    flow_response(f).headers["content-encoding"] = "gzip"
    tap = StreamTap(t0=f.request.timestamp_start, content_encoding="gzip")
    flow_response(f).stream = tap
    packed = gzip.compress(b'data: {"a":1}\n\ndata: [DONE]\n\n')
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


async def test_the_recorder_process_writes_every_job_in_order(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, "s", 1 << 20, frozenset(), pythonpath=ROOT)
    sent = flows()
    for i, f in enumerate(sent):
        assert rec.send(job(f, i))
    assert rec.close() == [] and rec.proc.returncode == 0
    records = load_records([path])
    assert [r["id"] for r in records] == [f.id for f in sent]
    assert [r["seq"] for r in records] == [0, 1, 2, 3] and records[0]["label"] == "lbl"
    assert [e["data"] for e in events_of(records[1])] == [{"a": 1}, "[DONE]"]
    assert error_of(records[2])["kind"] == "upstream_disconnect"
    session = records[3]
    assert session["tags"]["transport"] == "websocket" and answer(session)["complete"]
    assert websocket_of(session)["closed_by"] == "server"
    events = events_of(session)
    assert [e["event"] for e in events] == [
        "response.create", "response.created", None, "response.completed"
    ]  # fmt: skip
    assert events[1]["data"] == TURN[1][1] and events[2]["truncated"]  # the cap: 90 bytes
    assert KEY not in path.read_text()


async def test_jobs_a_dead_recorder_never_got_are_handed_back(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "r.jsonl", "s", 1 << 20, frozenset(), pythonpath=ROOT)
    rec.proc.kill()
    rec.proc.wait()
    sent = flows()
    for i, f in enumerate(sent):
        rec.send(job(f, i))
    rec._flush()  # the pipe is broken: nothing went
    assert rec.broken is not None and not rec.send(job(sent[0], 9))
    assert [j[0][0] for j in rec.close()] == [f.id for f in sent]
