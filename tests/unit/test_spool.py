"""Recording off the sender's path: an exchange as plain values, and the replay sender handing
the spool what no later step reads ids from (the spool process itself:
tests/e2e/test_spool_process.py)."""

from __future__ import annotations

import asyncio
import marshal
from dataclasses import fields
from typing import Any

import httpx
import pytest

from tests.fixtures.replay_records import Fake, T, as_json, mock, rec, session, sse, streamed
from wirediff._types import Record
from wirediff.record.exchange import (
    Error,
    Exchange,
    Request,
    Response,
    Timings,
    exchange_from_state,
    exchange_state,
)
from wirediff.record.spool import RecordMeta, build_item
from wirediff.record.tap import StreamTap
from wirediff.record.websocket import WebSocketTap
from wirediff.replay.plan import make_plan
from wirediff.replay.sender import Counts, TargetRun, counted


def sent_exchanges(
    records: list[Record], fake: Any
) -> tuple[list[tuple[Exchange, RecordMeta]], list[Record], TargetRun]:
    """Replay `records` to `fake`, every answer offloaded that can be: what was handed on,
    and the records built here."""
    handed: list[tuple[Exchange, RecordMeta]] = []
    built: list[Record] = []

    def offload(node: Any, ex: Exchange, meta: RecordMeta) -> bool:
        handed.append((ex, meta))
        return True

    run = TargetRun(
        make_plan(records), T, "sk-target", built.append, {}, concurrency=2, offload=offload
    )
    asyncio.run(run.run(mock(fake)))
    return handed, built, run


def test_an_exchange_survives_marshal_and_builds_the_same_record() -> None:
    handed, _, _ = sent_exchanges(session(), Fake())
    assert handed
    for ex, meta in handed:
        again = exchange_from_state(marshal.loads(marshal.dumps(exchange_state(ex))))
        assert build_item(again, meta, 1 << 20, frozenset()) == build_item(
            ex, meta, 1 << 20, frozenset()
        )


def test_every_part_of_an_exchange_comes_back_as_it_was() -> None:
    """Each field of the request, the response, the timings and the error, each set to a value
    other than its default, crosses `marshal` unchanged; so do the handed-on exchanges' parts."""
    handed, _, _ = sent_exchanges(session(), Fake())
    full = Exchange(
        request=Request(
            method="POST",
            url="http://h/v1/chat/completions?x=1",
            path="/v1/chat/completions?x=1",
            http_version="HTTP/1.1",
            headers=[("Content-Type", "application/json"), ("X-\udcff", "v")],
            content=b'{"model":',
            client_headers=[("Authorization", "Bearer sk-1")],
            size=1 << 21,
            tail=b"}",
            past=["sk-2"],
        ),
        response=Response(
            status=502,
            reason="Bad Gateway",
            http_version="HTTP/2.0",
            headers=[("Content-Encoding", "gzip")],
            content=b"\x1f\x8b",
            size=10,
            tail=b"!",
        ),
        timings=Timings(1.5, 2.5, 3.5),
        error=Error("cut", "stream_cut"),
    )
    for ex in [full, *(ex for ex, _ in handed)]:
        again = exchange_from_state(marshal.loads(marshal.dumps(exchange_state(ex))))
        assert (again.id, again.request, again.response, again.timings, again.error) == (
            ex.id,
            ex.request,
            ex.response,
            ex.timings,
            ex.error,
        )


def test_every_field_of_the_taps_comes_back_as_it_was() -> None:
    """A stream's and a WebSocket's tap, each field set to a value other than its default,
    cross `marshal` unchanged, so the recorder builds from what the proxy saw."""
    stream = StreamTap(
        t0=1.5,
        content_encoding="gzip",
        cap=7,
        sse=False,
        max_events=3,
        max_stream=9,
        events=[{"t_ms": 1.0, "event": "x", "data": {"a": 1}}],
        raw=bytearray(b"ab"),
        wire_size=5,
        decoded=4,
        ended=True,
        decode_error="BadGzipFile: x",
        events_dropped=2,
        truncated=True,
    )
    socket = WebSocketTap(
        t0=2.5,
        cap=7,
        max_events=3,
        max_bytes=9,
        events=[{"t_ms": 1.0, "event": "m", "data": "hi", "direction": "client"}],
        events_dropped=1,
        kept_bytes=2,
        counts={"client": 1, "server": 2},
        sizes={"client": 3, "server": 4},
        close_code=1001,
        close_reason="gone",
        closed_by="server",
        ended=3.5,
        found=["sk-…"],
    )
    for tap in (stream, socket):
        again = type(tap).from_state(marshal.loads(marshal.dumps(tap.state())))
        names = [f.name for f in fields(tap)]
        assert [getattr(again, n) for n in names] == [getattr(tap, n) for n in names]
    assert isinstance(again, WebSocketTap) and not again.abnormal
    assert StreamTap.from_state(stream.state()).kept() == b"ab"


def test_what_later_steps_read_ids_from_is_built_here_the_rest_handed_on() -> None:
    handed, built, run = sent_exchanges(session(), Fake())
    plan = run.plan
    producers = {nid for nid, deps in plan.dependents.items() if deps}
    assert {r["replay_of"] for r in built if r["error"] is None} == producers
    assert {m["replay_of"] for _, m in handed}.isdisjoint(producers)
    assert all(m["label"] == "tgt" and m["listener"] == run.listener for _, m in handed)
    assert run.counts.done == len(plan) and run.counts.ok == run.counts.sent


def _answers() -> dict[str, Any]:
    events = sse([("response.created", {"response": {"id": "r", "object": "response"}}),
                  ("error", {"type": "error", "error": {"message": "overloaded"}})])  # fmt: skip
    return {
        "soft": lambda r: as_json({"error": "Unexpected endpoint or method. (POST /v1/responses)"}),
        "event": lambda r: streamed(200, events, "text/event-stream"),
        "missing": lambda r: as_json({"error": {"message": "nope", "type": "x"}}, 404),
        "fine": lambda r: as_json({"id": "resp_1", "object": "response", "error": None}),
        "down": lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused", request=r)),
    }


@pytest.mark.parametrize("answer", list(_answers()))
def test_counts_of_an_offloaded_answer_are_those_of_its_record(answer: str) -> None:
    fake = _answers()[answer]
    handed, _, _ = sent_exchanges([rec("a", body={"model": "m", "input": "hi"})], fake)
    [(ex, meta)] = handed
    full, light = Counts(), Counts()
    full.add(build_item(ex, meta, 1 << 20, frozenset()), connect_failed=False)
    light.add(counted(ex), connect_failed=False)
    assert light == full
