"""Tell how an exchange ended and whether it succeeded as the client sees it.

An SSE stream ends with a terminal event or is cut. Chains and rules judge by whether the
exchange succeeded."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wirediff._support import as_bytes, error_kind, is_2xx
from wirediff._types import Event, Record
from wirediff.analysis.comparison.clients.observations import sent_bytes
from wirediff.analysis.comparison.observe import DONE, RESPONSE_TERMINALS
from wirediff.record.tags import ROUTE_METHODS, header_get
from wirediff.record.websocket import is_websocket, turns

__all__ = [
    "FAILED_TERMINALS",
    "JSON_FAMILIES",
    "StreamEnd",
    "exchange_ok",
    "is_sse_response",
    "stream_end",
    "stream_problem",
    "unreadable_answer",
]

FAILED_TERMINALS = frozenset({"response.failed", "error"})
JSON_FAMILIES = frozenset({"chat.completions", "completions", "responses", "models", "embeddings"})
"""Families every 2xx answer of which, but a stream's, is JSON the SDKs parse."""


@dataclass(frozen=True)
class StreamEnd:
    """Hold how an SSE response ended: its terminal event, if any, and a half-received tail."""

    terminal: str | None
    partial: bool
    n_events: int


def _answered_events(record: Record) -> tuple[Sequence[Mapping[str, Any]], bool]:
    """Return the server events that answer what was asked, and whether anything was asked.

    An SSE stream answers its request; a WebSocket session its last client message, and a session
    with no client message asked nothing."""
    resp = record.get("response")
    events: Sequence[Event] = (resp["events"] if resp is not None else None) or ()
    if not is_websocket(record):
        return events, True
    asked = any(ev.get("direction") == "client" for ev in events)
    last = turns(events)[-1] if asked else []
    return last, asked


def is_sse_response(response: Mapping[str, Any] | None) -> bool:
    if not response:
        return False
    if response.get("events") is not None:
        return True
    ctype = header_get(response.get("headers") or (), "content-type") or ""
    return ctype.split(";", 1)[0].strip().lower() == "text/event-stream"


def _terminal_of(ev: Mapping[str, Any], family: str | None) -> str | None:
    data = ev.get("data")
    if data == DONE:
        return DONE if family != "responses" else None
    if family in ("chat.completions", "completions"):
        return None
    name = data.get("type") if isinstance(data, dict) else None
    name = name if isinstance(name, str) else ev.get("event")
    return name if isinstance(name, str) and name in RESPONSE_TERMINALS else None


def stream_end(record: Record) -> StreamEnd | None:
    """Find the end of the record's event stream.

    It is `None` when the response is not SSE, or is a WebSocket session in which the client
    asked nothing. Chat and completions streams end with `[DONE]`; Responses streams with
    `response.completed|failed|incomplete` or an `error` event; a WebSocket session with the
    terminal event of its last turn.
    """
    resp = record.get("response")
    if not is_sse_response(resp):
        return None
    events, asked = _answered_events(record)
    if not asked:
        return None
    family = (record.get("tags") or {}).get("family")
    terminal = None
    for ev in reversed(events):
        terminal = _terminal_of(ev, family)
        if terminal is not None:
            break
    partial = bool(events) and bool(events[-1].get("partial"))
    if partial and terminal == DONE and _terminal_of(events[-1], family) == DONE:
        # `[DONE]` itself, missing its blank line: the SDKs end the stream at its end anyway,
        # where a Responses terminal event so cut never reaches them (the stream helpers raise)
        partial = False
    return StreamEnd(terminal, partial, len(events))


def stream_problem(record: Record, end: StreamEnd | None) -> str | None:
    """Say why an SSE stream is cut short, or return `None` when it ended properly.

    The SDK closes the connection after `[DONE]`, so a `client_disconnect` *after* the terminal
    event is normal.
    """
    if end is None:
        return None
    family = (record.get("tags") or {}).get("family")
    if end.terminal is None:
        want = "response.completed" if family == "responses" else "[DONE]"
        return f"no {want} after {end.n_events} event{'s' if end.n_events != 1 else ''}"
    if end.partial:
        return "last event cut mid-frame"
    resp, kind = record.get("response"), error_kind(record)
    if resp is not None and resp.get("complete") is False and kind != "client_disconnect":
        return f"response incomplete ({kind or 'connection ended early'})"
    return None


def unreadable_answer(record: Record) -> str | None:
    """Say what a 2xx answer that must be JSON holds instead, or None.

    Clients read it as httpx does, `json.loads` of its bytes, and raise where that fails
    (openai-python's JSONDecodeError or UnicodeDecodeError). Only the answers to a POST or a
    GET of a route that takes it are judged, as the SDKs parse those: not a stream, asked for
    or given; a 204; a body the capture cut at its cap; an answer to DELETE (the SDK reads
    none of `DELETE /v1/responses/{id}`), OPTIONS or HEAD; nor one of a family that may
    answer otherwise (files, audio)."""
    resp, tags = record.get("response"), record.get("tags") or {}
    if (
        not resp
        or resp.get("body") is not None
        or resp.get("truncated")
        or resp.get("depth_limited")
        or not is_2xx(resp.get("status"))
        or resp.get("status") == 204
        or tags.get("family") not in JSON_FAMILIES
        or (method := record["request"].get("method")) not in ("POST", "GET")
        or method not in ROUTE_METHODS.get(str(tags.get("endpoint")), ())
        or tags.get("stream")  # read as a stream whatever its type: `stream_end`'s to judge
        or is_sse_response(resp)
        or is_websocket(record)
    ):
        return None
    b64, text = resp.get("b64"), resp.get("text")
    raw = sent_bytes(b64) if b64 is not None else as_bytes(str(text or ""))
    if raw is None:  # a base64 no key-free bytes stand behind: not judged
        return None
    if not raw.strip():
        return "an empty body"
    try:
        json.loads(raw)
    except UnicodeDecodeError:
        return f"a body of {len(raw):,} bytes that is not UTF-8"
    except ValueError:
        return "a body that is not JSON"
    return None


def exchange_ok(record: Record, end: StreamEnd | None = None) -> bool:
    """Tell whether the exchange succeeded.

    It did with a 2xx, or 101 for a WebSocket session; no error body; no transport error; an
    answer its clients can read (`unreadable_answer`); and a complete stream when one was
    asked for."""
    resp = record.get("response")
    if not resp:
        return False
    status = resp.get("status")
    if not (is_2xx(status) or (status == 101 and is_websocket(record))):
        return False
    tags = record.get("tags") or {}
    if tags.get("soft_error"):
        return False
    end = end if end is not None else stream_end(record)
    err = record.get("error")
    if end is None:  # not SSE: a streamed request got no stream
        whole = err is None and resp.get("complete") is not False
        return whole and not tags.get("stream") and unreadable_answer(record) is None
    if stream_problem(record, end) is not None or end.terminal in FAILED_TERMINALS:
        return False
    return err is None or err.get("kind") == "client_disconnect"
