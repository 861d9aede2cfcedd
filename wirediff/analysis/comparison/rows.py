"""Make an exchange's row of plain values, `EXCHANGE_COLUMNS`.

A dataset stores this row beside each record, and the index's row holds its fields."""

from __future__ import annotations

from typing import Any

from wirediff._types import Record

__all__ = ["EXCHANGE_COLUMNS", "exchange_row", "transport_of"]

HTTP, WEBSOCKET = "http", "websocket"


def transport_of(record: Record) -> str:
    """Tell an exchange's transport: `websocket`, else `http`.

    An exchange is a WebSocket one when tagged so, or when an upgrade was asked, a refused one
    too."""
    tags = record.get("tags")
    tagged = tags.get("transport") if isinstance(tags, dict) else None
    if isinstance(tagged, str) and tagged:
        return tagged
    req = record.get("request")
    if not isinstance(req, dict) or req.get("method") != "GET":  # an upgrade is a GET
        return HTTP
    for name, value in req.get("headers") or ():
        if str(name).lower() == "upgrade" and str(value).lower() == "websocket":
            return WEBSOCKET
    return HTTP


def _content_type(headers: list[list[str]] | None) -> str | None:
    for k, v in headers or ():
        if k == "content-type":
            return v
    return None


EXCHANGE_COLUMNS = [
    "id",
    "session",
    "label",
    "seq",
    "replay_of",
    "listener",
    "started",
    "ttfb_ms",
    "duration_ms",
    "method",
    "path",
    "url",
    "status",
    "content_type",
    "family",
    "endpoint",
    "prefix",
    "stream",
    "model",
    "sdk_lang",
    "sdk_version",
    "sdk_async",
    "retry",
    "auth_header",
    "auth_scheme",
    "auth_fingerprint",
    "auth_forwarded",
    "soft_error",
    "signature",
    "error_kind",
    "n_events",
    "complete",
    "request_size",
    "response_size",
    "transport",
]


_EMPTY: dict[str, Any] = {}


def _dict(value: Any) -> dict[str, Any]:
    return value if type(value) is dict else _EMPTY


def exchange_row(r: Record) -> tuple[Any, ...]:
    """Make one record's row, in `EXCHANGE_COLUMNS` order."""
    req, resp, tags = r["request"], r.get("response") or _EMPTY, r.get("tags") or _EMPTY
    sdk, auth = _dict(tags.get("sdk")), _dict(tags.get("auth"))
    events = resp.get("events")
    return (
        r["id"],
        r.get("session"),
        r.get("label"),
        r.get("seq"),
        r.get("replay_of"),
        r.get("listener"),
        r.get("started"),
        r.get("ttfb_ms"),
        r.get("duration_ms"),
        req.get("method"),
        req.get("path"),
        req.get("url"),
        resp.get("status"),
        _content_type(resp.get("headers")),
        tags.get("family"),
        tags.get("endpoint"),
        tags.get("prefix"),
        tags.get("stream"),
        tags.get("model"),
        sdk.get("lang"),
        sdk.get("version"),
        sdk.get("async"),
        tags.get("retry"),
        auth.get("header"),
        auth.get("scheme"),
        auth.get("fingerprint"),
        auth.get("forwarded"),
        tags.get("soft_error"),
        tags.get("signature"),
        _dict(r.get("error")).get("kind"),
        len(events) if events is not None else None,
        resp.get("complete"),
        req.get("size"),
        resp.get("size"),
        transport_of(r),
    )
