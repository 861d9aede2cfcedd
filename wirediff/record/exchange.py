"""Model an exchange: one HTTP request and what came back, whoever saw it pass.

Adapters build one from a mitmproxy flow (`wirediff.record.flow`), from a HAR entry
(`wirediff.record.importer`) and from the replayer's httpx exchange (`wirediff.replay.wire`);
`wirediff.record.build.build_record` turns any of them into the same `wirediff/1` record.
Bodies are held as they crossed the wire, still content-encoded: the builder decodes them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from wirediff._support import field_values, from_field_values
from wirediff.record.tap import StreamTap
from wirediff.record.websocket import WebSocketTap

__all__ = [
    "Error",
    "Exchange",
    "HeaderPairs",
    "RawFields",
    "Request",
    "Response",
    "Timings",
    "exchange_from_state",
    "exchange_state",
    "header_pairs",
    "header_value",
]

HeaderPairs = list[tuple[str, str]]
"""`(name, value)` pairs in wire order, names as sent; bytes outside UTF-8 as surrogates."""
RawFields = tuple[tuple[bytes, bytes], ...]
"""Header fields as mitmproxy holds them (`Headers.fields`): an immutable snapshot."""


def header_pairs(fields: Iterable[tuple[bytes, bytes]]) -> HeaderPairs:
    """List headers as `(name, value)` strings, as mitmproxy's `Headers.items(multi=True)` does."""
    return [
        (k.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape"))
        for k, v in fields
    ]


def header_value(headers: Sequence[tuple[str, str]], name: str) -> str:
    """Fold every value of the header `name`, in any case, with `, ` as HTTP allows."""
    low = name.lower()
    return ", ".join(v for k, v in headers if k.lower() == low)


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    method: str
    url: str
    """The full URL as the server saw it: the scheme, the Host header, path and query."""
    path: str
    """Path and query, as on the request line."""
    http_version: str
    headers: HeaderPairs
    """The request headers as they went upstream."""
    content: bytes | None
    """The body as sent, still content-encoded; None: no body.

    Only its start when `size` is set."""
    client_headers: HeaderPairs | None = None
    """The headers as the client sent them; None: the same as `headers`.

    Set when something in between, another addon, may have altered them on their way
    upstream."""
    size: int | None = None
    """Bytes of the whole body when `content` is only its start (`body.cut_body`)."""
    tail: bytes | None = None
    """The body's last bytes when `content` is only its start."""
    past: list[str] | None = None
    """The credentials in the body past the cap, when `content` is only its start.

    `body.secrets_past` looks for them in the whole body."""

    @property
    def content_encoding(self) -> str:
        return header_value(self.headers, "content-encoding")

    @property
    def body_size(self) -> int:
        return self.size if self.size is not None else len(self.content or b"")


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    status: int
    reason: str
    http_version: str
    headers: HeaderPairs
    content: bytes | None
    """The body as received, still content-encoded; None: it never arrived whole.

    Only its start when `size` is set."""
    size: int | None = None
    """Bytes of the whole body when `content` is only its start (`body.cut_body`)."""
    tail: bytes | None = None
    """The body's last bytes when `content` is only its start."""

    @property
    def content_encoding(self) -> str:
        return header_value(self.headers, "content-encoding")

    @property
    def body_size(self) -> int:
        return self.size if self.size is not None else len(self.content or b"")


@dataclass(frozen=True, slots=True)
class Timings:
    """Hold the wall-clock times of one exchange, in epoch seconds."""

    started: float
    """When the request began."""
    first_byte: float | None = None
    """When the response head arrived."""
    finished: float | None = None
    """When the response body ended; None: it never did, with no answer or cut off."""


@dataclass(frozen=True, slots=True)
class Error:
    """Say why an exchange did not end normally, in the words of whoever saw it."""

    message: str
    kind: str | None = None
    """The record's `error.kind` when the adapter knows it; None: named from the message."""


def _new_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True, slots=True, kw_only=True)
class Exchange:
    request: Request
    response: Response | None
    timings: Timings
    error: Error | None = None
    tap: StreamTap | None = None
    """The response body as a `StreamTap` saw it pass: SSE, or a body of unknown length.

    Then `response.content` is not what the record keeps."""
    websocket: WebSocketTap | None = None
    """The messages of the WebSocket session the 101 response opened.

    One exchange per connection; its messages are the record's events."""
    id: str = field(default_factory=_new_id)


def exchange_state(ex: Exchange) -> tuple[Any, ...]:
    """Take the exchange as plain values; a tap is closed first.

    `marshal` carries them to another process, where `exchange_from_state` puts it together
    again: each part's fields in their order."""
    if ex.tap is not None:
        ex.tap.close()
    resp, error = ex.response, ex.error
    return (
        ex.id,
        field_values(ex.request),
        None if resp is None else field_values(resp),
        field_values(ex.timings),
        None if error is None else field_values(error),
        None if ex.tap is None else ex.tap.state(),
        None if ex.websocket is None else ex.websocket.state(),
    )


def exchange_from_state(state: tuple[Any, ...]) -> Exchange:
    """Put together the `Exchange` an `exchange_state` was taken of."""
    ex_id, rq, rs, timings, error, tap, ws = state
    return Exchange(
        id=ex_id,
        request=from_field_values(Request, rq),
        response=None if rs is None else from_field_values(Response, rs),
        timings=from_field_values(Timings, timings),
        error=None if error is None else from_field_values(Error, error),
        tap=None if tap is None else StreamTap.from_state(tap),
        websocket=None if ws is None else WebSocketTap.from_state(ws),
    )
