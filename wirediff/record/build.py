"""The `wirediff/1` record builder: one mitmproxy flow in, one JSON-able record out.

Shared by the capture addon, `wirediff import` (flow files, HAR) and the replayer, so every
record has exactly the same shape whatever produced it.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import http

from wirediff import FORMAT
from wirediff._support import is_2xx
from wirediff._types import Event, Record
from wirediff.profiles import match_signature
from wirediff.record.redact import (
    may_hold_secret_fields,
    redact_fields,
    redact_headers,
    redact_url,
    scrub,
    scrub_headers,
    scrub_text,
    secret_values,
)
from wirediff.record.sse import SSESplitter, decoder_for, split_events
from wirediff.record.tags import tag_exchange

DEFAULT_BODY_CAP = 1 << 20  # 1 MiB per body; the rest is counted, not kept
MAX_EVENTS = 100_000  # per stream; more are counted in `events_dropped`
SSE_TYPES = ("text/event-stream",)


def encode_body(
    content: bytes | None, content_type: str, cap: int, secrets: dict[str, str] | None = None
) -> dict[str, Any]:
    """`body` for JSON, `text` for other text, `b64` for binary; capped with `truncated`.

    Echoes of the exchange's `secrets` and credential-named JSON fields are fingerprinted.
    """
    out: dict[str, Any] = {"body": None, "text": None}
    if content is None:
        return out
    truncated = len(content) > cap
    kept = content[:cap] if truncated else content
    try:
        text = kept.decode("utf-8")
    except UnicodeDecodeError:
        if truncated:  # a multi-byte character cut at the cap is still text
            try:
                text = kept[:-3].decode("utf-8") + kept[-3:].decode("utf-8", "ignore")
            except UnicodeDecodeError:
                text = None  # type: ignore[assignment]
        else:
            text = None  # type: ignore[assignment]
    if text is not None and secrets:
        text = scrub_text(text, secrets)
    if text is None:
        out["b64"] = base64.b64encode(kept).decode("ascii")
    elif not truncated and text[:1] in "{[":
        try:
            out["body"] = json.loads(text)
        except ValueError:
            out["text"] = text
        else:
            if may_hold_secret_fields(text):
                out["body"] = redact_fields(out["body"])
    else:
        out["text"] = text
    if truncated:
        out["truncated"] = True
    return out


def is_sse(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() in SSE_TYPES


def is_open_ended(flow: http.HTTPFlow) -> bool:
    """A response body of unknown length (no Content-Length): it may arrive over time."""
    resp = flow.response
    if resp is None or flow.request.method == "HEAD" or resp.status_code in (204, 304):
        return False
    return "content-length" not in resp.headers


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


@dataclass
class StreamTap:
    """A pass-through `flow.response.stream` callable that also splits and times events.

    The bytes returned are the bytes received: recording never changes the wire.
    """

    t0: float
    content_encoding: str = ""
    cap: int = DEFAULT_BODY_CAP
    events: list[Event] = field(default_factory=list)
    raw: bytearray = field(default_factory=bytearray)
    wire_size: int = 0
    ended: bool = False
    decode_error: str | None = None
    sse: bool = True
    """Split SSE events; other streamed bodies (NDJSON, long chunked) are only kept."""
    max_events: int = MAX_EVENTS
    events_dropped: int = 0

    def __post_init__(self) -> None:
        self._decode = decoder_for(self.content_encoding)
        self._splitter = SSESplitter()

    def __call__(self, chunk: bytes) -> bytes:
        if not chunk:
            self.finish()
            return chunk
        self.wire_size += len(chunk)
        now_ms = (time.time() - self.t0) * 1000.0
        if self.decode_error is None:
            try:
                data = self._decode(chunk)
            except Exception as e:  # a broken upstream encoding must not break the stream
                self.decode_error = f"{type(e).__name__}: {e}"
                data = b""
            if len(self.raw) < self.cap:
                self.raw += data[: self.cap - len(self.raw)]
            if self.sse:
                self._keep(self._splitter.feed(data), now_ms)
        return chunk

    def finish(self) -> None:
        """End of stream (or of the connection): keep a half-received event as `partial`."""
        if self.ended:
            return
        self.ended = True
        if self.sse:
            self._keep(self._splitter.close(), (time.time() - self.t0) * 1000.0)

    def _keep(self, events: list[dict[str, Any]], now_ms: float) -> None:
        room = self.max_events - len(self.events)
        if len(events) > room:
            self.events_dropped += len(events) - max(room, 0)
            events = events[: max(room, 0)]
        t = round(now_ms, 3)
        self.events.extend({"t_ms": t, **ev} for ev in events)


def _encoded(secrets: dict[str, str]) -> list[bytes]:
    return [s.encode("utf-8", "surrogateescape") for s in secrets]


def classify_error(msg: str, has_response: bool) -> str:
    """Name mitmproxy's error message by what happened on the wire."""
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


def _headers(h: http.Headers) -> list[tuple[str, str]]:
    return list(h.items(multi=True))  # type: ignore[no-untyped-call]


def _content_type(h: Sequence[Sequence[str]]) -> str:
    for k, v in h:
        if k.lower() == "content-type":
            return v
    return ""


def build_record(
    flow: http.HTTPFlow,
    *,
    session: str,
    label: str,
    seq: int,
    listener: str | None = None,
    replay_of: str | None = None,
    client_headers: list[tuple[str, str]] | None = None,
    tap: StreamTap | None = None,
    body_cap: int = DEFAULT_BODY_CAP,
    redact: frozenset[str] = frozenset(),
) -> Record:
    """Build the record for a finished (or failed) flow.

    `client_headers` are the request headers as the client sent them, snapshotted before
    any addon could change them; the flow's own request headers are what went upstream.
    """
    req = flow.request
    upstream = _headers(req.headers)
    sent = client_headers if client_headers is not None else upstream
    resp = flow.response
    resp_headers = _headers(resp.headers) if resp is not None else []
    url = req.pretty_url
    secrets = secret_values([*sent, *upstream, *resp_headers], url, redact)
    req_ctype = _content_type(sent)
    request: dict[str, Any] = {
        "method": req.method,
        "url": redact_url(url),
        "path": redact_url(req.path),
        "http_version": req.http_version,
        "headers": scrub_headers(redact_headers(sent, redact), secrets),
        **encode_body(req.get_content(strict=False), req_ctype, body_cap, secrets),
        "size": len(req.raw_content or b""),
    }
    if client_headers is not None and client_headers != upstream:
        request["forwarded_headers"] = scrub_headers(redact_headers(upstream, redact), secrets)

    response: dict[str, Any] | None = None
    events: list[Event] | None = None
    if resp is not None:
        ctype = _content_type(resp_headers)
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
            complete = flow.error is None and resp.timestamp_end is not None
        else:
            content = resp.get_content(strict=False) if resp.raw_content is not None else None
            body = encode_body(content, ctype, body_cap, secrets)
            size = len(resp.raw_content or b"")
            complete = resp.raw_content is not None and flow.error is None
            if is_sse(ctype) and content is not None:
                events = scrub(split_events(content, None), secrets)
        response = {
            "status": resp.status_code,
            "reason": resp.reason,
            "http_version": resp.http_version,
            "headers": scrub_headers(redact_headers(resp_headers, redact), secrets),
            **body,
            "size": size,
            "events": events,
            "complete": complete,
        }
        if tap is not None and tap.decode_error:
            response["decode_error"] = tap.decode_error
        if tap is not None and tap.events_dropped:
            response["events_dropped"] = tap.events_dropped

    t_start = req.timestamp_start
    t_end = (resp.timestamp_end if resp is not None else None) or time.time()
    error = None
    if flow.error is not None:
        error = {
            "kind": classify_error(flow.error.msg, resp is not None),
            "message": scrub_text(flow.error.msg, secrets),
        }

    status = resp.status_code if resp is not None else None
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
    )
    if response is not None and (not is_2xx(status) or tags["soft_error"]):
        # Signatures name the provider behind an error; healthy answers skip the regexes.
        text = response["text"] if response["text"] is not None else json.dumps(resp_body)
        tags["signature"] = match_signature(status, resp_headers, text)
    return {
        "format": FORMAT,
        "id": flow.id,
        "session": session,
        "label": label,
        "seq": seq,
        "replay_of": replay_of,
        "listener": listener,
        "started": round(t_start, 6),
        "ttfb_ms": round((resp.timestamp_start - t_start) * 1000.0, 3)
        if resp is not None and resp.timestamp_start
        else None,
        "duration_ms": round((t_end - t_start) * 1000.0, 3),
        "request": request,
        "response": response,
        "error": error,
        "tags": tags,
    }


def upstream_label(flow: http.HTTPFlow) -> str:
    """Default label: the upstream host (and port when not the scheme's default)."""
    host, port = flow.request.host, flow.request.port
    default = 443 if flow.request.scheme == "https" else 80
    return host if port == default else f"{host}:{port}"
