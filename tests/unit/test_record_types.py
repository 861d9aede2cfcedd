"""The typed record (`wirediff._types`), what loading checks (`wirediff.record.validate`)
and what the builder writes say the same thing: every key, required or not, with its type."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import pytest

from tests.fixtures import chain_records
from tests.fixtures.records import answer, bare_record, chat_record, openai_session
from wirediff import _types
from wirediff._types import Record
from wirediff.record import validate
from wirediff.record.build import build_record, fallback_record
from wirediff.record.exchange import Error, Exchange, Request, Response, Timings
from wirediff.record.tap import StreamTap
from wirediff.record.validate import problem
from wirediff.record.websocket import WebSocketTap

T0 = 1_700_000_000.0


class Sample(TypedDict):
    name: str
    count: int
    at: float | None
    flag: bool
    part: _types.Auth | None
    headers: _types.HeaderList
    body: _types.JSON
    items: list[str] | None
    extra: NotRequired[int | None]
    more_headers: NotRequired[_types.HeaderList | None]


def test_a_typed_dict_is_read_as_the_checks_loading_makes() -> None:
    """Each annotation becomes the exact JSON types it allows, in words for the message; an
    optional key may be absent or null; header lists are checked pair by pair."""
    assert validate.shape_of(Sample) == validate.Shape(
        required=(
            ("name", frozenset({str}), "a string"),
            ("count", frozenset({int}), "an integer"),
            ("at", frozenset({int, float, type(None)}), "a number or null"),
            ("flag", frozenset({bool}), "true or false"),
            ("part", frozenset({dict, type(None)}), "an object or null"),
            ("headers", frozenset({list}), "a list of [name, value] string pairs"),
            ("body", None, "JSON"),
            ("items", frozenset({list, type(None)}), "a list or null"),
        ),
        optional=(
            ("extra", frozenset({int}), "an integer or null"),
            ("more_headers", frozenset({list}), "a list of [name, value] string pairs or null"),
        ),
        pairs=("headers", "more_headers"),
    )
    assert [key for key, _, _ in validate.RECORD.required][-2:] == ["error", "tags"]


@dataclass
class Message:
    """A WebSocket message as mitmproxy's `WebSocketMessage` offers it."""

    from_client: bool
    content: bytes
    timestamp: float
    is_text: bool = True


def request(content: bytes | None = b'{"model":"m","stream":true}') -> Request:
    return Request(
        method="POST",
        url="http://127.0.0.1:8000/v1/chat/completions",
        path="/v1/chat/completions",
        http_version="HTTP/1.1",
        headers=[("content-type", "application/json"), ("authorization", "Bearer sk-x")],
        content=content,
    )


def response(content: bytes | None, content_type: str, **headers: str) -> Response:
    return Response(
        status=200,
        reason="OK",
        http_version="HTTP/1.1",
        headers=[("content-type", content_type), *headers.items()],
        content=content,
    )


def sse_tap() -> StreamTap:
    tap = StreamTap(t0=T0, cap=64)
    tap(b'data: {"a": 1}\n\ndata: ' + b"x" * 100 + b'\n\ndata: {"cut')
    tap(b"")
    return tap


def websocket() -> WebSocketTap:
    ws = WebSocketTap(t0=T0)
    ws.message(Message(True, b'{"type":"response.create","model":"m"}', T0 + 0.1))
    ws.message(Message(False, b'{"type":"response.created"}', T0 + 0.2))
    ws.message(Message(False, b"\x00\x01", T0 + 0.3, is_text=False))
    ws.close(1006, None, None, at=T0 + 1)
    return ws


EXCHANGES: dict[str, Exchange] = {
    "json": Exchange(
        request=request(),
        response=response(b'{"id":"c1"}', "application/json"),
        timings=Timings(T0, T0 + 0.1, T0 + 0.2),
    ),
    "sse tap, cut and truncated": Exchange(
        request=request(),
        response=response(None, "text/event-stream"),
        timings=Timings(T0, T0 + 0.1, T0 + 0.5),
        tap=sse_tap(),
    ),
    "whole sse": Exchange(
        request=request(),
        response=response(
            gzip.compress(b'data: {"a": 1}\n\ndata: [DONE]\n\n', mtime=0),
            "text/event-stream",
            **{"content-encoding": "gzip"},
        ),
        timings=Timings(T0, T0 + 0.1, T0 + 0.5),
    ),
    "binary": Exchange(
        request=request(None),
        response=response(b"\xff\xfe\x00", "application/octet-stream"),
        timings=Timings(T0, T0 + 0.1, T0 + 0.2),
    ),
    "no answer": Exchange(
        request=request(),
        response=None,
        timings=Timings(T0),
        error=Error("Connection refused"),
    ),
    "websocket, closed without a handshake": Exchange(
        request=request(None),
        response=Response(status=101, reason="", http_version="HTTP/1.1", headers=[], content=None),
        timings=Timings(T0, T0 + 0.05, T0 + 1),
        websocket=websocket(),
    ),
}


@pytest.mark.parametrize("name", EXCHANGES)
def test_every_record_the_builder_writes_loads(name: str) -> None:
    rec = build_record(EXCHANGES[name], session="s", label="l", seq=0, listener="x")
    assert problem(rec) is None


def test_the_record_of_a_failed_build_loads() -> None:
    rec = fallback_record(EXCHANGES["json"], "s", ValueError("boom"), label="l")
    assert problem(rec) is None and rec["tags"]["endpoint"] == "/v1/chat/completions"


def fixture_records() -> list[Record]:
    return [
        bare_record(),
        *openai_session(),
        chain_records.record(),
        chain_records.record(status=None, error={"kind": "timeout", "message": "timed out"}),
        *chain_records.redirected_post(),
    ]


def test_the_test_fixtures_are_whole_records() -> None:
    for rec in fixture_records():
        assert problem(rec) is None, rec["id"]


STATUS = "response.status must be an HTTP status, from 0 to 999"


def answered(status: int) -> Any:
    return answer(chat_record(status=status))


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (lambda r: r.pop("session"), "session is missing"),
        (lambda r: r["request"].update(size=1.5), "request.size must be an integer, not number"),
        (lambda r: r.update(attempt="2"), "attempt must be an integer or null, not string"),
        (lambda r: r.update(attempt=None), None),  # an optional key may be null
        (lambda r: r.update(extra={"any": 1}), None),  # keys of no concern are left alone
        (lambda r: r["tags"].update(retry=True), "tags.retry must be an integer, not boolean"),
        (lambda r: r.update(response=answered(2**62)), STATUS),
        (lambda r: r.update(response=answered(-1)), STATUS),
        (lambda r: r.update(response=answered(999)), None),
        # JSON allows any integer; the analysis's times are 64-bit floats
        (lambda r: r.update(started=10**400), "started must be a number a double holds"),
        (lambda r: r.update(ttfb_ms=-(10**309)), "ttfb_ms must be a number a double holds"),
        (lambda r: r.update(started=10**308), None),
        (lambda r: r.update(seq=2**63), "seq must be an integer of 64 bits"),
        (lambda r: r.update(attempt=-(2**63) - 1), "attempt must be an integer of 64 bits"),
        (lambda r: r["tags"].update(retry=2**64), "tags.retry must be an integer of 64 bits"),
        (lambda r: r.update(seq=-(2**63)), None),
        # 1e999 reads as infinity and NaN as itself: summary.json could not write them back
        (lambda r: r.update(duration_ms=float("inf")), "duration_ms must be a finite number"),
        (lambda r: r.update(ttfb_ms=float("nan")), "ttfb_ms must be a finite number"),
        (lambda r: r.update(started=-float("inf")), "started must be a finite number"),
        (lambda r: r.update(started=1.7976931348623157e308), None),
    ],
)
def test_a_record_is_its_keys_with_their_types(change: Any, found: str | None) -> None:
    rec: Any = bare_record()
    change(rec)
    assert problem(rec) == found
