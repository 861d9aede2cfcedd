"""The `wirediff/1` record builder: one exchange in, one JSON-able record out.

Shared by the capture addon, `wirediff import` (flow files, HAR) and the replayer, each
through its adapter to `wirediff.record.exchange.Exchange`, so every record has exactly the
same shape whatever produced it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from wirediff import FORMAT
from wirediff._support import is_2xx
from wirediff._types import Event, Record
from wirediff.profiles import match_signature
from wirediff.record.body import DEFAULT_BODY_CAP, decode_body, encode_body
from wirediff.record.exchange import Exchange, Request, Response
from wirediff.record.redact import (
    redact_headers,
    redact_url,
    scrub,
    scrub_headers,
    scrub_text,
    secret_values,
)
from wirediff.record.sse import split_events
from wirediff.record.tags import tag_exchange
from wirediff.record.tap import StreamTap, is_sse
from wirediff.record.websocket import WebSocketTap

__all__ = ["build_record", "classify_error"]


def classify_error(msg: str, has_response: bool) -> str:
    """Name a proxy's error message by what happened on the wire."""
    low = msg.lower()
    if "client disconnected" in low:
        return "client_disconnect"
    if "killed" in low:
        return "killed"
    if "timeout" in low or "timed out" in low:
        return "timeout"
    if "tls" in low or "certificate" in low or "ssl" in low:
        return "tls"
    if "server disconnected" in low or "peer closed" in low or "connection closed" in low:
        return "upstream_disconnect"
    if not has_response and any(
        s in low
        for s in ("connect", "refused", "unreachable", "resolve", "no route", "name or service")
    ):
        return "upstream_unreachable"
    return "proxy_error"


def _abnormal_close(ws: WebSocketTap) -> dict[str, str]:
    """The error of a WebSocket connection that ended without a close handshake, or had
    not ended when it was recorded (the capture stopped first)."""
    if ws.close_code is None:
        return {"kind": "proxy_error", "message": "the WebSocket was still open when recorded"}
    kind = {"client": "client_disconnect", "server": "upstream_disconnect"}
    by = f" by the {ws.closed_by}" if ws.closed_by else ""
    return {
        "kind": kind.get(ws.closed_by or "", "proxy_error"),
        "message": f"WebSocket closed without a close handshake (code {ws.close_code}){by}",
    }


def _content_type(h: Sequence[tuple[str, str]]) -> str:
    for k, v in h:
        if k.lower() == "content-type":
            return v
    return ""


def _encoded(secrets: dict[str, str]) -> list[bytes]:
    return [s.encode("utf-8", "surrogateescape") for s in secrets]


def _decoded(message: Request | Response) -> bytes | None:
    if message.content is None:
        return None
    return decode_body(message.content, message.content_encoding)


def _websocket_response(
    ex: Exchange, resp: Response, ws: WebSocketTap, secrets: dict[str, str], redact: frozenset[str]
) -> tuple[dict[str, Any], list[Event]]:
    """A WebSocket session's `response`: the handshake's status and headers, its messages
    as events (scrubbed), complete when it closed with a close handshake."""
    events = scrub(ws.events, secrets) if secrets else ws.events
    response = {
        "status": resp.status,
        "reason": resp.reason,
        "http_version": resp.http_version,
        "headers": scrub_headers(redact_headers(resp.headers, redact), secrets),
        "body": None,
        "text": None,
        "size": ws.sizes["server"],
        "events": events,
        "complete": ex.error is None and not ws.abnormal,
        "websocket": ws.summary(),
    }
    if ws.events_dropped:
        response["events_dropped"] = ws.events_dropped
    return response, events


def _response(
    ex: Exchange, resp: Response, secrets: dict[str, str], body_cap: int, redact: frozenset[str]
) -> tuple[dict[str, Any], list[Event] | None]:
    """The record's `response` and the events it holds (scrubbed)."""
    if ex.websocket is not None:
        return _websocket_response(ex, resp, ex.websocket, secrets, redact)
    ctype = _content_type(resp.headers)
    tap: StreamTap | None = ex.tap
    events: list[Event] | None = None
    if tap is not None:
        tap.finish()
        events = tap.events if tap.sse else None
        body = encode_body(bytes(tap.raw), ctype, body_cap, secrets)
        if (
            events
            and secrets
            and (len(tap.raw) >= body_cap or any(s in tap.raw for s in _encoded(secrets)))
        ):
            events = scrub(events, secrets)
        if tap.wire_size and len(tap.raw) >= body_cap:
            body["truncated"] = True
        size = tap.wire_size
        complete = ex.error is None and ex.timings.finished is not None
    else:
        content = _decoded(resp)
        body = encode_body(content, ctype, body_cap, secrets)
        size = len(resp.content or b"")
        complete = resp.content is not None and ex.error is None
        if is_sse(ctype) and content is not None:
            events = scrub(split_events(content, None), secrets)
    response = {
        "status": resp.status,
        "reason": resp.reason,
        "http_version": resp.http_version,
        "headers": scrub_headers(redact_headers(resp.headers, redact), secrets),
        **body,
        "size": size,
        "events": events,
        "complete": complete,
    }
    if tap is not None and tap.decode_error:
        response["decode_error"] = tap.decode_error
    if tap is not None and tap.events_dropped:
        response["events_dropped"] = tap.events_dropped
    return response, events


def build_record(
    ex: Exchange,
    *,
    session: str,
    label: str,
    seq: int,
    listener: str | None = None,
    replay_of: str | None = None,
    body_cap: int = DEFAULT_BODY_CAP,
    redact: frozenset[str] = frozenset(),
) -> Record:
    """Build the record for a finished (or failed) exchange.

    The request headers recorded are the client's (`Request.client_headers`); when they
    differ from what went upstream, that is kept as `forwarded_headers`.
    """
    req, resp = ex.request, ex.response
    upstream = req.headers
    sent = req.client_headers if req.client_headers is not None else upstream
    resp_headers = resp.headers if resp is not None else []
    secrets = secret_values([*sent, *upstream, *resp_headers], req.url, redact)
    request: dict[str, Any] = {
        "method": req.method,
        "url": redact_url(req.url),
        "path": redact_url(req.path),
        "http_version": req.http_version,
        "headers": scrub_headers(redact_headers(sent, redact), secrets),
        **encode_body(_decoded(req), _content_type(sent), body_cap, secrets),
        "size": len(req.content or b""),
    }
    if req.client_headers is not None and req.client_headers != upstream:
        request["forwarded_headers"] = scrub_headers(redact_headers(upstream, redact), secrets)

    response: dict[str, Any] | None = None
    events: list[Event] | None = None
    if resp is not None:
        response, events = _response(ex, resp, secrets, body_cap, redact)

    t_start = ex.timings.started
    t_end = ex.timings.finished or time.time()
    error = None
    if ex.error is not None:
        error = {
            "kind": ex.error.kind or classify_error(ex.error.message, resp is not None),
            "message": scrub_text(ex.error.message, secrets),
        }
    elif ex.websocket is not None and ex.websocket.abnormal:
        error = _abnormal_close(ex.websocket)

    status = resp.status if resp is not None else None
    resp_body = response["body"] if response else None
    tags = tag_exchange(
        method=req.method,
        path=req.path,
        client_headers=sent,
        upstream_headers=upstream,
        request_body=request["body"],
        status=status,
        response_body=resp_body,
        events=events,
        websocket=ex.websocket is not None,
    )
    if response is not None and (not is_2xx(status) or tags["soft_error"]) and status != 101:
        # Signatures name the provider behind an error; healthy answers skip the regexes.
        text = response["text"] if response["text"] is not None else json.dumps(resp_body)
        tags["signature"] = match_signature(status, resp_headers, text)
    first_byte = ex.timings.first_byte
    return {
        "format": FORMAT,
        "id": ex.id,
        "session": session,
        "label": label,
        "seq": seq,
        "replay_of": replay_of,
        "listener": listener,
        "started": round(t_start, 6),
        "ttfb_ms": round((first_byte - t_start) * 1000.0, 3)
        if resp is not None and first_byte
        else None,
        "duration_ms": round((t_end - t_start) * 1000.0, 3),
        "request": request,
        "response": response,
        "error": error,
        "tags": tags,
    }
