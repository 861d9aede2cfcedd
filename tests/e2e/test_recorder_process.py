"""The recorder process the capture addon starts: jobs written in order, what a dead one never
got handed back, sessions recorded through it, and a capture that goes on through it after
a bad option is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from mitmproxy import exceptions
from mitmproxy.test import taddons

from tests.conftest import ROOT
from tests.fixtures.records import answer, error_of, events_of, websocket_of
from tests.unit.test_capture_addon import (
    BAD_OPTIONS,
    KEY,
    TURN,
    chat_flow,
    flow_response,
    run_websocket,
)
from tests.unit.test_recorder import flows, job
from wirediff.addons.capture import Capture
from wirediff.record.recorder import Recorder
from wirediff.record.redact import fingerprint
from wirediff.record.store import load_records

pytestmark = pytest.mark.e2e


async def test_the_recorder_process_writes_every_job_in_order(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    rec = Recorder(path, "s", 1 << 20, frozenset(), pythonpath=str(ROOT))
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
    rec = Recorder(tmp_path / "r.jsonl", "s", 1 << 20, frozenset(), pythonpath=str(ROOT))
    rec.proc.kill()
    rec.proc.wait()
    sent = flows()
    for i, f in enumerate(sent):
        rec.send(job(f, i))
    rec._flush()  # the pipe is broken: nothing went
    assert rec.broken is not None and not rec.send(job(sent[0], 9))
    assert [j[0][0] for j in rec.close()] == [f.id for f in sent]


@pytest.mark.parametrize("recorder", [False, True])
async def test_exchanges_in_flight_at_shutdown_are_recorded_as_they_stand(
    tmp_path: Path, recorder: bool
) -> None:
    """A stream mid-way and a request still waiting for its answer, when mitmdump stops."""
    streaming, waiting, done = chat_flow(), chat_flow(), chat_flow()
    flow_response(streaming).headers["content-type"] = "text/event-stream"
    waiting.response = None
    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(
            cap, capture_dir=str(tmp_path), capture_session="t", capture_lazy_connect=False
        )
        if recorder:
            cap.running()
        for f in (streaming, waiting, done):
            cap.requestheaders(f)
        cap.responseheaders(streaming)
        tap = flow_response(streaming).stream
        assert callable(tap)
        tap(b'data: {"a":1}\n\ndata: {"b"')
        cap.responseheaders(done)
        cap.response(done)
        cap.done()
    recs = {r["seq"]: r for r in load_records([tmp_path / "t.jsonl"])}
    assert sorted(recs) == [0, 1, 2] and recs[2]["error"] is None
    for seq in (0, 1):
        assert error_of(recs[seq])["kind"] == "proxy_shutdown"
    assert [e["data"] for e in events_of(recs[0])] == [{"a": 1}, '{"b"']
    assert answer(recs[0])["complete"] is False and recs[1]["response"] is None
    assert recs[1]["request"]["body"]["model"] == "gpt-4o-mini"


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
async def test_bad_options_while_running_are_refused(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    (tmp_path / "FILE").write_text("")
    options = {k: str(tmp_path / "FILE") if v == "FILE" else v for k, v in options.items()}
    cap = Capture()
    with taddons.context(cap) as tctx:
        tctx.configure(cap, capture_dir=str(tmp_path), capture_session="ok")
        cap.is_running = True
        with pytest.raises(exceptions.OptionsError, match=message):
            tctx.configure(cap, **options)
        cap.done()


@pytest.mark.parametrize("recorder", ["running", "killed"])
@pytest.mark.parametrize("close", [(1000, False), None])
async def test_websocket_session_is_recorded_through_the_recorder_process(
    tmp_path: Path, recorder: str, close: tuple[int, bool] | None
) -> None:
    """Closed, or still open at shutdown (handed over before the recorder stops); a
    recorder that died leaves the session to mitmdump's own process."""
    rec = run_websocket(tmp_path, close=close, recorder=recorder, capture_lazy_connect=False)
    assert [e["data"] for e in events_of(rec)] == [o for _, o in TURN[:2]] + [
        {**TURN[2][1], "delta": f"key {fingerprint(KEY)}"}, TURN[3][1]
    ]  # fmt: skip
    assert rec["tags"].get("transport") == "websocket"
    assert websocket_of(rec)["messages"] == {"client": 1, "server": 3}
    if close is None:
        assert error_of(rec)["kind"] == "proxy_shutdown"
    else:
        assert answer(rec)["complete"] and websocket_of(rec)["closed_by"] == "server"
