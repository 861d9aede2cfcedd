"""The typed record (`wirediff._types`), what loading checks (`wirediff.record.validate`)
and what the builder writes say the same thing: every key, required or not, with its type."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import Any, NotRequired, get_args, get_origin, get_type_hints

import pytest

from tests.fixtures import chain_records
from tests.fixtures.records import bare_record, openai_session
from wirediff import _types
from wirediff._types import Record
from wirediff.record import validate
from wirediff.record.build import build_record, fallback_record
from wirediff.record.exchange import Error, Exchange, Request, Response, Timings
from wirediff.record.tap import StreamTap
from wirediff.record.validate import problem
from wirediff.record.websocket import WebSocketTap

T0 = 1_700_000_000.0
SHAPES = [
    (_types.Record, validate.RECORD),
    (_types.RecordRequest, validate.REQUEST),
    (_types.RecordResponse, validate.RESPONSE),
    (_types.Event, validate.EVENT),
    (_types.WebSocketSummary, validate.WEBSOCKET),
    (_types.Directions, validate.DIRECTIONS),
    (_types.ExchangeError, validate.ERROR),
    (_types.Tags, validate.TAGS),
    (_types.Sdk, validate.SDK),
    (_types.Auth, validate.AUTH),
]


def nullable(hint: Any) -> bool:
    return hint is Any or type(None) in get_args(hint)


@pytest.mark.parametrize(("typed", "shape"), SHAPES, ids=[t.__name__ for t, _ in SHAPES])
def test_loading_checks_every_key_the_type_names(typed: type, shape: validate.Shape) -> None:
    """The same keys, required or not, null where the type allows it (an optional key
    may always be null: loading accepts that, so the type says it)."""
    hints = get_type_hints(typed, include_extras=True)
    optional = {
        key: get_args(hint)[0] for key, hint in hints.items() if get_origin(hint) is NotRequired
    }
    required = {key: hint for key, hint in hints.items() if key not in optional}
    assert [key for key, _, _ in shape.required] == list(required)
    assert {key for key, _, _ in shape.optional} == set(optional)
    for key, types, _ in shape.required:
        assert (types is None or type(None) in types) == nullable(required[key]), key
    assert all(nullable(hint) for hint in optional.values())


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
            gzip.compress(b'data: {"a": 1}\n\ndata: [DONE]\n\n'),
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


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (lambda r: r.pop("session"), "session is missing"),
        (lambda r: r["request"].update(size=1.5), "request.size must be an integer, not float"),
        (lambda r: r.update(attempt="2"), "attempt must be an integer or null, not str"),
        (lambda r: r.update(attempt=None), None),  # an optional key may be null
        (lambda r: r.update(extra={"any": 1}), None),  # keys of no concern are left alone
        (lambda r: r["tags"].update(retry=True), "tags.retry must be an integer, not bool"),
    ],
)
def test_a_record_is_its_keys_with_their_types(change: Any, found: str | None) -> None:
    rec: Any = bare_record()
    change(rec)
    assert problem(rec) == found
