"""Build `wirediff/1` records: one exchange in, one JSON-able record out.

Shared by the capture addon, `wirediff import` (flow files, HAR) and the replayer, each
through its adapter to `wirediff.record.exchange.Exchange`, so every record has exactly the
same shape whatever produced it.
"""

from __future__ import annotations

import json
import time

from wirediff import FORMAT
from wirediff._support import is_2xx
from wirediff._types import (
    JSON,
    Event,
    ExchangeError,
    Record,
    RecordRequest,
    RecordResponse,
    Tags,
)
from wirediff.profiles import match_signature
from wirediff.record.body import (
    DEFAULT_BODY_CAP,
    EncodedBody,
    cut_body,
    decode_body,
    encode_body,
    secrets_past,
)
from wirediff.record.exchange import Exchange, HeaderPairs, Request, Response
from wirediff.record.names import may_hold_secret_fields
from wirediff.record.partial import cut_members
from wirediff.record.redact import (
    body_secrets,
    json_secrets,
    key_shapes,
    redact_headers,
    redact_url,
    scrub_headers,
    scrub_text,
    secret_values,
    with_fields,
)
from wirediff.record.sse import parse_events, split_events
from wirediff.record.tags import header_get, route, tag_exchange
from wirediff.record.tap import MAX_STREAM_BYTES, StreamTap, is_sse
from wirediff.record.websocket import WebSocketTap, client_secrets, parse_messages

__all__ = ["build_record", "classify_error", "exchange_secrets", "fallback_record"]


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


def _abnormal_close(ws: WebSocketTap) -> ExchangeError:
    """Make the error of a WebSocket connection that ended without a close handshake.

    A connection that had not ended when it was recorded, because the capture stopped first,
    gets one too."""
    if ws.close_code is None:
        return {"kind": "proxy_error", "message": "the WebSocket was still open when recorded"}
    kind = {"client": "client_disconnect", "server": "upstream_disconnect"}
    by = f" by the {ws.closed_by}" if ws.closed_by else ""
    return {
        "kind": kind.get(ws.closed_by or "", "proxy_error"),
        "message": f"WebSocket closed without a close handshake (code {ws.close_code}){by}",
    }


def _decoded(message: Request | Response, limit: int) -> bytes | None:
    if message.content is None:
        return None
    return decode_body(message.content, message.content_encoding, limit)


def _request_body(req: Request, content_type: str, cap: int) -> tuple[bytes | None, list[str]]:
    """Decode the request body's first `cap` + 1 bytes, and find every credential in the body.

    The credentials are found in the part a record keeps (`body_secrets`: also a value the cut
    ends) and past it (`Request.past`, found where the whole body was; else looked for now)."""
    content = _decoded(req, cap + 1)
    if content is None or len(content) <= cap:
        return content, body_secrets(content, content_type)
    past = req.past
    if past is None:
        past = secrets_past(req.content, req.content_encoding, cap)
    return content, body_secrets(content[:cap], content_type) + past


ADDRESS_HEADERS = frozenset(
    {"host", ":authority", "origin", "referer", "x-forwarded-host", "forwarded", "via"}
)
"""Request headers that name a host, which may be shaped like a key (`lm-gateway.example…`)."""


def _request_secrets(
    ex: Exchange, sent: HeaderPairs, content_type: str, cap: int
) -> tuple[bytes | None, list[str]]:
    """Decode the request body as `_request_body` does, and find every credential it carries.

    Beside the body's: a WebSocket client's, and a key under any header name but those of an
    address, by its shape (`--header x-team=sk-…`), in what the client sent and what went
    upstream."""
    req = ex.request
    content, fields = _request_body(req, content_type, cap)
    if ex.websocket is not None:
        fields += client_secrets(ex.websocket)
    fields += [
        key
        for headers in (sent, req.headers)
        for name, value in headers
        if name.lower() not in ADDRESS_HEADERS
        for key in key_shapes(value)
    ]
    return content, fields


def exchange_secrets(
    ex: Exchange, redact: frozenset[str] = frozenset(), body_cap: int = DEFAULT_BODY_CAP
) -> dict[str, str]:
    """Find every secret of `ex` in every form an echo may take (`secret_values`)."""
    req, resp = ex.request, ex.response
    sent = req.client_headers if req.client_headers is not None else req.headers
    fields = _request_secrets(ex, sent, header_get(sent, "content-type") or "", body_cap)[1]
    resp_headers = resp.headers if resp is not None else []
    return secret_values([*sent, *req.headers, *resp_headers], req.url, redact, fields)


def _with_event_fields(secrets: dict[str, str], events: list[Event], kept: bytes) -> dict[str, str]:
    """Add to `secrets` the values of the credential-named fields in the events' data.

    The events have them fingerprinted as they are parsed; the stream's text must too."""
    if not may_hold_secret_fields(kept.decode("utf-8", "replace")):
        return secrets
    found = [v for ev in events if isinstance(ev["data"], str) for v in json_secrets(ev["data"])]
    return with_fields(secrets, found) if found else secrets


def _tagged_body(
    req: Request, request: RecordRequest, decoded: bytes | None, body_cap: int
) -> JSON:
    """Return what tagging reads of the request body.

    That is the body, or for one over the cap, the members its kept start and end hold whole
    (`cut_members`: `model`, `stream`)."""
    if request["body"] is not None or not request.get("truncated") or decoded is None:
        return request["body"]
    tail = req.tail if req.tail is not None else cut_body(req.content, body_cap)[1]
    end = tail if tail is not None and not req.content_encoding else b""
    return cut_members(decoded.decode("utf-8", "ignore"), end.decode("utf-8", "ignore"))


def _body_marks(part: RecordRequest | RecordResponse, body: EncodedBody) -> None:
    """Keep the keys `encode_body` adds only when they say something: binary, cut, too deep."""
    if "b64" in body:
        part["b64"] = body["b64"]
    if body.get("depth_limited"):
        part["depth_limited"] = True
    if body.get("truncated"):
        part["truncated"] = True


def _websocket_response(
    ex: Exchange, resp: Response, ws: WebSocketTap, secrets: dict[str, str], redact: frozenset[str]
) -> tuple[RecordResponse, list[Event]]:
    """Build a WebSocket session's `response`: the handshake's status and headers, its messages.

    The messages are events, scrubbed and parsed; the response is complete when it closed with a
    close handshake."""
    events = parse_messages(ws.events, secrets)
    summary = ws.summary()
    response: RecordResponse = {
        "status": resp.status,
        "reason": resp.reason,
        "http_version": resp.http_version,
        "headers": scrub_headers(redact_headers(resp.headers, redact), secrets),
        "body": None,
        "text": None,
        "size": ws.sizes["server"],
        "events": events,
        "complete": ex.error is None and not ws.abnormal,
        "websocket": {**summary, "close_reason": scrub_text(summary["close_reason"], secrets)},
    }
    if ws.events_dropped:
        response["events_dropped"] = ws.events_dropped
    return response, events


def _response(
    ex: Exchange, resp: Response, secrets: dict[str, str], body_cap: int, redact: frozenset[str]
) -> tuple[RecordResponse, list[Event] | None]:
    """Build the record's `response` and the events it holds, scrubbed."""
    if ex.websocket is not None:
        return _websocket_response(ex, resp, ex.websocket, secrets, redact)
    ctype = header_get(resp.headers, "content-type") or ""
    tap: StreamTap | None = ex.tap
    events: list[Event] | None = None
    decode_error, events_dropped = None, 0
    if tap is not None:
        tap.close()
        if tap.sse:
            secrets = _with_event_fields(secrets, tap.events, tap.kept())
            events = parse_events(tap.events, secrets)
        body = encode_body(tap.kept(), ctype, body_cap, secrets, truncated=tap.body_truncated)
        size = tap.wire_size
        complete = ex.error is None and ex.timings.finished is not None
        decode_error, events_dropped = tap.decode_error, tap.events_dropped
        if tap.truncated or tap.events_dropped:
            body["truncated"] = True
    else:
        sse = is_sse(ctype)
        limit = max(MAX_STREAM_BYTES, body_cap) + 1 if sse else body_cap + 1
        content = _decoded(resp, limit)
        if sse and content is not None:
            events, events_dropped = split_events(content[: limit - 1], None, body_cap)
            secrets = _with_event_fields(secrets, events, content[:body_cap])
            events = parse_events(events, secrets)
        body = encode_body(content, ctype, body_cap, secrets)
        size = resp.body_size
        complete = resp.content is not None and ex.error is None
        if sse and content is not None and (len(content) >= limit or events_dropped):
            body["truncated"] = True
    response: RecordResponse = {
        "status": resp.status,
        "reason": resp.reason,
        "http_version": resp.http_version,
        "headers": scrub_headers(redact_headers(resp.headers, redact), secrets),
        "body": body["body"],
        "text": body["text"],
        "size": size,
        "events": events,
        "complete": complete,
    }
    _body_marks(response, body)
    if decode_error:
        response["decode_error"] = decode_error
    if events_dropped:
        response["events_dropped"] = events_dropped
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
    """Build the record for a finished or failed exchange.

    The request headers recorded are the client's (`Request.client_headers`); when they
    differ from what went upstream, that is kept as `forwarded_headers`.
    """
    req, resp = ex.request, ex.response
    upstream = req.headers
    sent = req.client_headers if req.client_headers is not None else upstream
    resp_headers = resp.headers if resp is not None else []
    req_type = header_get(sent, "content-type") or ""
    req_content, fields = _request_secrets(ex, sent, req_type, body_cap)
    forwarded = upstream if sent is not upstream else []
    secrets = secret_values([*sent, *forwarded, *resp_headers], req.url, redact, fields)
    req_body = encode_body(req_content, req_type, body_cap, secrets)
    request: RecordRequest = {
        "method": req.method,
        "url": scrub_text(redact_url(req.url), secrets),
        "path": scrub_text(redact_url(req.path), secrets),
        "http_version": req.http_version,
        "headers": scrub_headers(redact_headers(sent, redact), secrets),
        "body": req_body["body"],
        "text": req_body["text"],
        "size": req.body_size,
    }
    _body_marks(request, req_body)
    if req.client_headers is not None and req.client_headers != upstream:
        request["forwarded_headers"] = scrub_headers(redact_headers(upstream, redact), secrets)

    response: RecordResponse | None = None
    events: list[Event] | None = None
    if resp is not None:
        response, events = _response(ex, resp, secrets, body_cap, redact)

    t_start = ex.timings.started
    t_end = ex.timings.finished or time.time()
    error: ExchangeError | None = None
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
        path=request["path"],
        client_headers=sent,
        upstream_headers=upstream,
        request_body=_tagged_body(req, request, req_content, body_cap),
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


def fallback_record(
    ex: Exchange,
    session: str,
    error: BaseException,
    *,
    label: str,
    seq: int = 0,
    replay_of: str | None = None,
) -> Record:
    """Record what is certain about an exchange whose full record could not be built.

    The error's message has the exchange's secrets fingerprinted; when even they cannot be
    worked out, it is only the error's type."""
    resp = ex.response
    try:
        message = scrub_text(f"{type(error).__name__}: {error}", exchange_secrets(ex))
    except Exception:
        message = type(error).__name__
    return {
        "format": FORMAT,
        "id": ex.id,
        "session": session,
        "label": label,
        "seq": seq,
        "replay_of": replay_of,
        "listener": None,
        "started": ex.timings.started,
        "ttfb_ms": None,
        "duration_ms": None,
        "request": {
            "method": ex.request.method,
            "url": redact_url(ex.request.url),
            "path": redact_url(ex.request.path),
            "http_version": ex.request.http_version,
            "headers": [],
            "body": None,
            "text": None,
            "size": ex.request.body_size,
        },
        "response": None
        if resp is None
        else {
            "status": resp.status,
            "reason": resp.reason,
            "http_version": resp.http_version,
            "headers": [],
            "body": None,
            "text": None,
            "size": resp.body_size,
            "events": None,
            "complete": False,
        },
        "error": {"kind": "capture_error", "message": message},
        "tags": _route_tags(ex),
    }


def _route_tags(ex: Exchange) -> Tags:
    """Tag what needs nothing but the request line: what a failed build still knows."""
    family, endpoint, prefix = route(redact_url(ex.request.path))
    return {
        "family": family,
        "endpoint": endpoint,
        "prefix": prefix,
        "method": ex.request.method,
        "stream": False,
        "model": None,
        "sdk": None,
        "retry": 0,
        "auth": None,
        "soft_error": False,
        "signature": None,
        "transport": "websocket" if ex.websocket is not None else "http",
    }
