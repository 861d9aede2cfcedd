"""WebSocket sessions as one exchange: the upgrade handshake, then every message an event.

A Responses WebSocket session (`GET /v1/responses` upgraded; the client sends
`response.create`, the server answers with the Responses stream events, one JSON text
message each) is recorded like an SSE stream: `response.events` in arrival order, each with
`t_ms` from the request start, `direction` (`client` or `server`), `event` (the payload's
`type`) and parsed `data`. So the same stream grammar and conformance checks read both.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from wirediff._types import Event
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.redact import may_hold_secret_fields, redact_fields
from wirediff.record.sse import parse_data
from wirediff.record.tap import MAX_EVENTS

__all__ = [
    "ABNORMAL_CLOSE",
    "WebSocketMessage",
    "WebSocketTap",
    "is_upgrade",
    "is_websocket",
    "server_events",
    "turns",
]

E = TypeVar("E", bound=Mapping[str, Any])

ABNORMAL_CLOSE = 1006
"""The close code of a connection that ended without a close handshake (RFC 6455 7.4.1)."""


def is_upgrade(headers: Iterable[tuple[str, str]]) -> bool:
    """The request asks to upgrade to a WebSocket (`Upgrade: websocket`)."""
    return any(k.lower() == "upgrade" and v.strip().lower() == "websocket" for k, v in headers)


def is_websocket(record: Mapping[str, Any]) -> bool:
    """A record of a WebSocket session (one per connection, its messages as events)."""
    return (record.get("tags") or {}).get("transport") == "websocket"


def server_events(events: Iterable[E]) -> list[E]:
    """The events the server sent (SSE events have no `direction`: all are the server's)."""
    return [ev for ev in events if ev.get("direction", "server") == "server"]


def turns(events: Iterable[E]) -> list[list[E]]:
    """A session's server events, one list per client message they answer (a Responses
    turn: `response.create`, then its stream); server events before any client message
    make a turn of their own. Each list reads as one SSE stream does."""
    out: list[list[E]] = []
    current: list[E] | None = None
    for ev in events:
        if ev.get("direction") == "client":
            current = []
            out.append(current)
        else:
            if current is None:
                current = []
                out.append(current)
            current.append(ev)
    return out


class WebSocketMessage(Protocol):
    """What a message must offer (mitmproxy's `WebSocketMessage` does)."""

    from_client: bool
    content: bytes
    timestamp: float

    @property
    def is_text(self) -> bool: ...


@dataclass
class WebSocketTap:
    """The messages of one WebSocket connection, kept as events as they pass (each
    capped at `cap` bytes, at most `max_events`), and how the connection closed."""

    t0: float
    cap: int = DEFAULT_BODY_CAP
    max_events: int = MAX_EVENTS
    events: list[Event] = field(default_factory=list)
    events_dropped: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"client": 0, "server": 0})
    sizes: dict[str, int] = field(default_factory=lambda: {"client": 0, "server": 0})
    close_code: int | None = None
    close_reason: str = ""
    closed_by: str | None = None
    ended: float | None = None

    def message(self, msg: WebSocketMessage) -> None:
        """Keep one message (called as each one passes)."""
        direction = "client" if msg.from_client else "server"
        self.counts[direction] += 1
        self.sizes[direction] += len(msg.content)
        if len(self.events) >= self.max_events:
            self.events_dropped += 1
            return
        self.events.append(self._event(msg, direction))

    def _event(self, msg: WebSocketMessage, direction: str) -> Event:
        kept, truncated = msg.content[: self.cap], len(msg.content) > self.cap
        ev: Event = {"t_ms": round((msg.timestamp - self.t0) * 1000.0, 3), "direction": direction}
        if msg.is_text:
            text = kept.decode("utf-8", "replace")
            data: Any = text if truncated else parse_data(text)
            if isinstance(data, dict) and may_hold_secret_fields(text):
                data = redact_fields(data)
            kind = data.get("type") if isinstance(data, dict) else None
            ev.update(event=kind if isinstance(kind, str) else None, data=data)
        else:
            ev.update(event=None, data=None, b64=base64.b64encode(kept).decode("ascii"))
        if truncated:
            ev["truncated"] = True
        return ev

    def close(
        self, code: int | None, reason: str | None, by_client: bool | None, at: float | None = None
    ) -> None:
        """The connection ended: its close code and reason, and which side closed it."""
        self.close_code, self.close_reason = code, reason or ""
        self.closed_by = None if by_client is None else ("client" if by_client else "server")
        self.ended = at if at is not None else time.time()

    @property
    def abnormal(self) -> bool:
        """The connection ended without a close handshake (or never said how it ended)."""
        return self.close_code is None or self.close_code == ABNORMAL_CLOSE

    def summary(self) -> dict[str, Any]:
        """The record's `response.websocket`: how it closed, and the messages each way."""
        return {
            "close_code": self.close_code,
            "close_reason": self.close_reason,
            "closed_by": self.closed_by,
            "messages": dict(self.counts),
            "bytes": dict(self.sizes),
        }

    @classmethod
    def of(cls, messages: Iterable[WebSocketMessage], t0: float, cap: int) -> WebSocketTap:
        """A tap over messages already received (a flow loaded from a file)."""
        tap = cls(t0=t0, cap=cap)
        for msg in messages:
            tap.message(msg)
        return tap
