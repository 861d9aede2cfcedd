"""Type the `wirediff/1` record, and define aliases shared across wirediff.

The TypedDicts describe a capture line as the record builder (`wirediff.record.build`)
writes it: a `Required` key is in every record, a `NotRequired` one only when it says
something (a cut body, a WebSocket session, a replay's second attempt); another writer
may also leave such a key null, so it is read with `.get()`. A record read from a file
is checked against the same description (`wirediff.record.validate`) before anything
reads it.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

__all__ = [
    "JSON",
    "Auth",
    "Directions",
    "Event",
    "ExchangeError",
    "HeaderList",
    "Record",
    "RecordRequest",
    "RecordResponse",
    "Sdk",
    "Tags",
    "WebSocketSummary",
]

JSON = Any
"""A parsed JSON value."""

HeaderList = list[list[str]]
"""Headers as `[[name, value], ...]` in wire order, names lower-cased, secrets fingerprinted."""


class Event(TypedDict):
    """Type one event of `response.events`: an SSE event, or a WebSocket message."""

    t_ms: NotRequired[float | None]
    """Milliseconds from the request start to the chunk it was decoded from.

    Every record has it; an event just split from a stream is not timed yet."""
    event: str | None
    """The SSE `event:` field; for a WebSocket message, the payload's `type`."""
    data: JSON
    """Parsed JSON, `"[DONE]"`, or raw text (also when `truncated` or `depth_limited`)."""
    direction: NotRequired[str | None]
    """WebSocket only: `client` or `server` (an SSE event is the server's)."""
    b64: NotRequired[str | None]
    """WebSocket only: a binary message, base64 (its `data` is null)."""
    id: NotRequired[str | None]
    """The SSE `id:` field."""
    truncated: NotRequired[bool | None]
    """The data kept only its first `capture_body_cap` bytes."""
    partial: NotRequired[bool | None]
    """The stream ended inside this event."""
    depth_limited: NotRequired[bool | None]
    """The data nested too deeply: kept as its JSON text."""


class Directions(TypedDict):
    client: int
    server: int


class WebSocketSummary(TypedDict):
    """Type `response.websocket`: how a WebSocket session closed, and its messages each way."""

    close_code: int | None
    """The close code; None: the session had not closed when recorded."""
    close_reason: str
    closed_by: str | None
    """`client`, `server`, or None when nobody said."""
    messages: Directions
    bytes: Directions


class RecordRequest(TypedDict):
    """Type `request`: what the client sent, its headers as the client sent them."""

    method: str
    url: str
    path: str
    """Path and query, as on the request line."""
    http_version: str
    headers: HeaderList
    body: JSON
    """Parsed JSON, else null (then `text` or `b64`)."""
    text: str | None
    size: int
    """Bytes on the wire (content-encoded)."""
    forwarded_headers: NotRequired[HeaderList | None]
    """The headers sent upstream, when an addon altered the client's."""
    b64: NotRequired[str | None]
    truncated: NotRequired[bool | None]
    depth_limited: NotRequired[bool | None]


class RecordResponse(TypedDict):
    """Type `response`: what came back; for a WebSocket session, the handshake and its messages."""

    status: int
    reason: str
    http_version: str
    headers: HeaderList
    body: JSON
    text: str | None
    """Non-JSON text; for SSE, the decoded stream."""
    size: int
    events: list[Event] | None
    """SSE events or WebSocket messages in arrival order; None: not a stream."""
    complete: bool
    """The body (or the session) ended normally."""
    b64: NotRequired[str | None]
    truncated: NotRequired[bool | None]
    depth_limited: NotRequired[bool | None]
    decode_error: NotRequired[str | None]
    """The upstream's Content-Encoding did not decode."""
    events_dropped: NotRequired[int | None]
    websocket: NotRequired[WebSocketSummary | None]


class ExchangeError(TypedDict):
    """Type `error`: why the exchange did not end normally."""

    kind: str
    """`client_disconnect`, `upstream_unreachable`, `timeout`, `tls`, `skipped`, …"""
    message: str


Sdk = TypedDict(
    "Sdk",
    {
        "user_agent": str | None,
        "lang": NotRequired[str | None],
        "version": NotRequired[str | None],
        "os": NotRequired[str | None],
        "arch": NotRequired[str | None],
        "runtime": NotRequired[str | None],
        "runtime_version": NotRequired[str | None],
        "async": NotRequired[bool | None],
        "client": NotRequired[str | None],
        "client_version": NotRequired[str | None],
    },
)
"""`tags.sdk`: the client, from `User-Agent` and the `X-Stainless-*` headers.

`client` names an application that says who it is in its user agent, such as `codex_exec`.
The functional form is needed because `async` is a keyword."""


class Auth(TypedDict):
    """Type `tags.auth`: the client's credential header, without the credential."""

    header: str
    scheme: str | None
    fingerprint: str | None
    forwarded: bool | None
    """The same credential went upstream; None: nothing went upstream."""


class Tags(TypedDict):
    """Type `tags`: what the exchange is."""

    family: str
    endpoint: str
    """The route template (`/v1/responses/{id}`)."""
    prefix: str
    """What stands before the resource (`/v1`, `/v1/v1`, `""`)."""
    method: str
    stream: bool
    model: str | None
    sdk: Sdk | None
    retry: int
    auth: Auth | None
    soft_error: bool
    signature: str | None
    transport: NotRequired[str | None]
    """`http` or `websocket`; absent in records written before WebSocket capture."""


class Record(TypedDict):
    """Hold one `wirediff/1` exchange: one capture line."""

    format: str
    id: str
    session: str
    label: str
    seq: int
    replay_of: str | None
    listener: str | None
    started: float
    ttfb_ms: float | None
    duration_ms: float | None
    """None: unknown (the record of an exchange whose full record could not be built)."""
    request: RecordRequest
    response: RecordResponse | None
    error: ExchangeError | None
    tags: Tags
    attempt: NotRequired[int | None]
    """Replays only, from the second on: the how-manieth time this original went to this label."""
