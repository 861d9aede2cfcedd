"""The exchange model: one HTTP request and what came back, whoever saw it pass.

Adapters build one from a mitmproxy flow (`wirediff.record.flow`), from a HAR entry
(`wirediff.record.importer`) and from the replayer's httpx exchange (`wirediff.replay.wire`);
`wirediff.record.build.build_record` turns any of them into the same `wirediff/1` record.
Bodies are held as they crossed the wire, still content-encoded: the builder decodes them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from wirediff.record.tap import StreamTap
from wirediff.record.websocket import WebSocketTap

__all__ = ["Error", "Exchange", "HeaderPairs", "Request", "Response", "Timings", "header_value"]

HeaderPairs = list[tuple[str, str]]
"""`(name, value)` pairs in wire order, names as sent; bytes outside UTF-8 as surrogates."""


def header_value(headers: Sequence[tuple[str, str]], name: str) -> str:
    """Every value of the header `name` (any case), folded with `, ` as HTTP allows."""
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
    """As they went upstream."""
    content: bytes | None
    """The body as sent, still content-encoded; None: no body."""
    client_headers: HeaderPairs | None = None
    """As the client sent them, when something in between (another addon) may have
    changed them before they went upstream; None: the same as `headers`."""

    @property
    def content_encoding(self) -> str:
        return header_value(self.headers, "content-encoding")


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    status: int
    reason: str
    http_version: str
    headers: HeaderPairs
    content: bytes | None
    """The body as received, still content-encoded; None: it never arrived whole."""

    @property
    def content_encoding(self) -> str:
        return header_value(self.headers, "content-encoding")


@dataclass(frozen=True, slots=True)
class Timings:
    """Wall-clock times (epoch seconds) of one exchange."""

    started: float
    """The request began."""
    first_byte: float | None = None
    """The response head arrived."""
    finished: float | None = None
    """The response body ended; None: it never did (no answer, or cut off)."""


@dataclass(frozen=True, slots=True)
class Error:
    """Why an exchange did not end normally, in the words of whoever saw it."""

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
    """The response body as a `StreamTap` saw it pass (SSE, bodies of unknown length);
    then `response.content` is not what the record keeps."""
    websocket: WebSocketTap | None = None
    """The messages of the WebSocket session the response (101) opened: one exchange per
    connection, its messages the record's events."""
    id: str = field(default_factory=_new_id)
