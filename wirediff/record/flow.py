"""See a mitmproxy `HTTPFlow` as an `Exchange`, in a live capture and in `.flow` files.

A flow can also be taken apart into a `Snapshot` of plain values (its bytes by reference, a
streamed body as its tap's state) that `marshal` carries to the recorder process, where
`exchange_from_snapshot` puts the same `Exchange` together again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mitmproxy import http

from wirediff._support import STOPPED_IN_FLIGHT
from wirediff.record.body import DEFAULT_BODY_CAP, cut_body, secrets_past
from wirediff.record.exchange import (
    Error,
    Exchange,
    HeaderPairs,
    RawFields,
    Request,
    Response,
    Timings,
    header_pairs,
)
from wirediff.record.tap import StreamTap
from wirediff.record.websocket import WebSocketTap

__all__ = [
    "KEEP_ANSWER",
    "PROXY_SHUTDOWN",
    "WEBSOCKET_TAP",
    "Snapshot",
    "exchange_from_flow",
    "exchange_from_snapshot",
    "is_open_ended",
    "snapshot",
    "upstream_label",
    "websocket_tap",
]

WEBSOCKET_TAP = "wirediff.websocket"
"""`flow.metadata` key of the `WebSocketTap` a live capture keeps its messages in."""
KEEP_ANSWER = "wirediff.keep_answer"
"""`flow.metadata` key that makes the capture keep the streamed answer it recorded.

Another addon sets it: the shadow, for an answer whose ids a later request may name."""
PROXY_SHUTDOWN = Error("the proxy stopped before the exchange ended", STOPPED_IN_FLIGHT)
"""How an exchange in flight when mitmdump stops is recorded, as it stood."""
Snapshot = tuple[Any, ...]


def websocket_tap(flow: http.HTTPFlow, cap: int = DEFAULT_BODY_CAP) -> WebSocketTap | None:
    """Return the flow's WebSocket session as a tap, with how it closed.

    It is the one a live capture filled message by message, or one over the messages a loaded
    flow holds."""
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
    error: Error | None = None,
) -> Exchange:
    """See the flow as it stands; bodies stay raw (`raw_content`), the builder decodes them.

    `client_headers`: the request headers as the client sent them, snapshotted before any
    addon could change them. A `StreamTap` set as `response.stream` holds the streamed body;
    a `WebSocketTap` the messages of the WebSocket session the response opened. `error`:
    how it ended when the flow does not say (`PROXY_SHUTDOWN`).
    """
    resp = flow.response
    tap = resp.stream if resp is not None and isinstance(resp.stream, StreamTap) else None
    error = error or _flow_error(flow)
    ws = websocket_tap(flow, body_cap)
    return _exchange(flow.id, flow.request, resp, error, tap, client_headers, ws)


def _flow_error(flow: http.HTTPFlow) -> Error | None:
    return Error(flow.error.msg) if flow.error is not None else None


def _exchange(
    flow_id: str,
    req: http.Request,
    resp: http.Response | None,
    error: Error | None,
    tap: StreamTap | None,
    client_headers: HeaderPairs | None,
    ws: WebSocketTap | None,
) -> Exchange:
    return Exchange(
        id=flow_id,
        request=Request(
            method=req.method,
            url=req.pretty_url,
            path=req.path,
            http_version=req.http_version,
            headers=header_pairs(req.headers.fields),
            content=req.raw_content,
            client_headers=client_headers,
        ),
        response=None
        if resp is None
        else Response(
            status=resp.status_code,
            reason=resp.reason,
            http_version=resp.http_version,
            headers=header_pairs(resp.headers.fields),
            content=resp.raw_content,
        ),
        timings=Timings(
            started=req.timestamp_start,
            first_byte=resp.timestamp_start if resp is not None else None,
            finished=(ws.ended if ws is not None else resp.timestamp_end)
            if resp is not None
            else None,
        ),
        error=error,
        tap=tap,
        websocket=ws,
    )


def snapshot(
    flow: http.HTTPFlow,
    client_fields: RawFields | None,
    body_cap: int = DEFAULT_BODY_CAP,
    error: Error | None = None,
) -> Snapshot:
    """Take the flow's parts as plain values, cheap to take and to `marshal`.

    Nothing is decoded: a body over the cap is cut to what a record reads of it, `cut_body`,
    with the credentials in the rest, `secrets_past`. A tap is closed first, so what waits in
    its decoder is decoded; a WebSocket session goes as its tap's state, as it stands (open
    still, at shutdown). `error`: as for `exchange_from_flow`."""
    error = error or _flow_error(flow)
    req = flow.request.data
    req_content, req_tail = cut_body(req.content, body_cap)
    past = None
    if req_tail is not None:
        encoding = flow.request.headers.get("content-encoding", "")
        past = secrets_past(req.content, encoding, body_cap)
    resp = flow.response
    resp_content, resp_tail = cut_body(resp.data.content if resp else None, body_cap)
    tap = resp.stream if resp is not None and isinstance(resp.stream, StreamTap) else None
    if tap is not None:
        tap.close()
    ws = websocket_tap(flow, body_cap)
    return (
        flow.id,
        (
            req.host,
            req.port,
            req.method,
            req.scheme,
            req.authority,
            req.path,
            req.http_version,
            req.headers.fields,
            req_content,
            req.timestamp_start,
            req.timestamp_end,
            len(req.content) if req_tail is not None and req.content is not None else None,
            req_tail,
            past,
        ),
        None
        if resp is None
        else (
            resp.data.http_version,
            resp.data.status_code,
            resp.data.reason,
            resp.data.headers.fields,
            resp_content,
            resp.data.timestamp_start,
            resp.data.timestamp_end,
            len(resp.data.content or b"") if resp_tail is not None else None,
            resp_tail,
        ),
        (error.message, error.kind) if error is not None else None,
        tap.state() if tap is not None else None,
        client_fields,
        ws.state() if ws is not None else None,
    )


def exchange_from_snapshot(snap: Snapshot) -> Exchange:
    """Put together the `Exchange` of a flow from its `snapshot`."""
    flow_id, rq, rs, error, tap_state, client_fields, ws_state = snap
    host, port, method, scheme, authority, path, version, fields, content, start, end, *cut = rq
    req = http.Request(
        host, port, method, scheme, authority, path, version, fields, content, None, start, end
    )
    resp, resp_cut = None, (None, None)
    if rs is not None:
        version, status, reason, fields, content, start, end, *resp_cut = rs
        resp = http.Response(version, status, reason, fields, content, None, start, end)
    tap = StreamTap.from_state(tap_state) if tap_state is not None else None
    client = header_pairs(client_fields) if client_fields is not None else None
    ws = WebSocketTap.from_state(ws_state) if ws_state is not None else None
    ex = _exchange(flow_id, req, resp, Error(*error) if error else None, tap, client, ws)
    return _with_cuts(ex, cut, resp_cut)


def _with_cuts(ex: Exchange, req_cut: Sequence[Any], resp_cut: Sequence[Any]) -> Exchange:
    """Give `ex` the sizes and ends of the bodies a snapshot cut (`cut_body`).

    It gets the credentials in what the snapshot left out of the request's body too."""
    size, tail, past = req_cut
    if size is not None:
        ex = replace(ex, request=replace(ex.request, size=size, tail=tail, past=past))
    size, tail = resp_cut
    if size is not None and ex.response is not None:
        ex = replace(ex, response=replace(ex.response, size=size, tail=tail))
    return ex


def is_open_ended(flow: http.HTTPFlow) -> bool:
    """Tell whether the response body has no Content-Length: it may arrive over time."""
    resp = flow.response
    if resp is None or flow.request.method == "HEAD" or resp.status_code in (204, 304):
        return False
    return "content-length" not in resp.headers


def upstream_label(flow: http.HTTPFlow) -> str:
    """Label by default with the upstream host, and port when not the scheme's default."""
    host, port = flow.request.host, flow.request.port
    default = 443 if flow.request.scheme == "https" else 80
    return host if port == default else f"{host}:{port}"
