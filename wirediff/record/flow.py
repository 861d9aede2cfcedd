"""The mitmproxy adapter: an `HTTPFlow` seen as an `Exchange` (live capture, `.flow` files)."""

from __future__ import annotations

from mitmproxy import http

from wirediff import FORMAT
from wirediff._types import Record
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.exchange import Error, Exchange, HeaderPairs, Request, Response, Timings
from wirediff.record.redact import redact_url
from wirediff.record.tap import StreamTap
from wirediff.record.websocket import WebSocketTap

__all__ = [
    "WEBSOCKET_TAP",
    "exchange_from_flow",
    "fallback_record",
    "is_open_ended",
    "upstream_label",
    "websocket_tap",
]

WEBSOCKET_TAP = "wirediff.websocket"
"""`flow.metadata` key of the `WebSocketTap` a live capture keeps its messages in."""


def _headers(h: http.Headers) -> HeaderPairs:
    return list(h.items(multi=True))  # type: ignore[no-untyped-call]


def websocket_tap(flow: http.HTTPFlow, cap: int = DEFAULT_BODY_CAP) -> WebSocketTap | None:
    """The flow's WebSocket session as a tap: the one a live capture filled message by
    message, or one over the messages a loaded flow holds; with how it closed."""
    ws = flow.websocket
    if ws is None:
        return None
    tap = flow.metadata.get(WEBSOCKET_TAP)
    if not isinstance(tap, WebSocketTap):
        tap = WebSocketTap.of(ws.messages, flow.request.timestamp_start, cap)
    if ws.timestamp_end is not None and tap.ended is None:
        tap.close(ws.close_code, ws.close_reason, ws.closed_by_client, ws.timestamp_end)
    return tap


def exchange_from_flow(
    flow: http.HTTPFlow,
    *,
    client_headers: HeaderPairs | None = None,
    body_cap: int = DEFAULT_BODY_CAP,
) -> Exchange:
    """The flow as it stands; bodies stay raw (`raw_content`), the builder decodes them.

    `client_headers`: the request headers as the client sent them, snapshotted before any
    addon could change them. A `StreamTap` set as `response.stream` holds the streamed body;
    a `WebSocketTap` the messages of the WebSocket session the response opened.
    """
    req, resp = flow.request, flow.response
    tap = resp.stream if resp is not None and isinstance(resp.stream, StreamTap) else None
    ws = websocket_tap(flow, body_cap)
    return Exchange(
        id=flow.id,
        request=Request(
            method=req.method,
            url=req.pretty_url,
            path=req.path,
            http_version=req.http_version,
            headers=_headers(req.headers),
            content=req.raw_content,
            client_headers=client_headers,
        ),
        response=None
        if resp is None
        else Response(
            status=resp.status_code,
            reason=resp.reason,
            http_version=resp.http_version,
            headers=_headers(resp.headers),
            content=resp.raw_content,
        ),
        timings=Timings(
            started=req.timestamp_start,
            first_byte=resp.timestamp_start if resp is not None else None,
            finished=(ws.ended if ws is not None else resp.timestamp_end)
            if resp is not None
            else None,
        ),
        error=Error(flow.error.msg) if flow.error is not None else None,
        tap=tap,
        websocket=ws,
    )


def is_open_ended(flow: http.HTTPFlow) -> bool:
    """A response body of unknown length (no Content-Length): it may arrive over time."""
    resp = flow.response
    if resp is None or flow.request.method == "HEAD" or resp.status_code in (204, 304):
        return False
    return "content-length" not in resp.headers


def upstream_label(flow: http.HTTPFlow) -> str:
    """Default label: the upstream host (and port when not the scheme's default)."""
    host, port = flow.request.host, flow.request.port
    default = 443 if flow.request.scheme == "https" else 80
    return host if port == default else f"{host}:{port}"


def fallback_record(flow: http.HTTPFlow, session: str, error: BaseException) -> Record:
    """What is certain about an exchange whose full record could not be built."""
    resp = flow.response
    return {
        "format": FORMAT,
        "id": flow.id,
        "session": session,
        "label": upstream_label(flow),
        "seq": flow.metadata.get("wirediff.seq"),
        "replay_of": flow.metadata.get("wirediff.replay_of"),
        "listener": None,
        "started": flow.request.timestamp_start,
        "ttfb_ms": None,
        "duration_ms": None,
        "request": {
            "method": flow.request.method,
            "url": redact_url(flow.request.pretty_url),
            "path": redact_url(flow.request.path),
            "headers": [],
            "body": None,
            "text": None,
            "size": len(flow.request.raw_content or b""),
        },
        "response": None
        if resp is None
        else {
            "status": resp.status_code,
            "reason": resp.reason,
            "headers": [],
            "body": None,
            "text": None,
            "size": len(resp.raw_content or b""),
            "events": None,
            "complete": False,
        },
        "error": {"kind": "capture_error", "message": f"{type(error).__name__}: {error}"},
        "tags": {},
    }
