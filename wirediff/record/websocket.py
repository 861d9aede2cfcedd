"""Record a WebSocket session as one exchange: the upgrade handshake, then every message an event.

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

from wirediff._support import field_values, from_field_values
from wirediff._types import Event, WebSocketSummary
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.names import MAX_FOUND, credentials_in
from wirediff.record.redact import json_secrets, scrub_text
from wirediff.record.sse import parse_events
from wirediff.record.tap import MAX_STREAM_BYTES
from wirediff.record.validate import MAX_EVENTS

__all__ = [
    "ABNORMAL_CLOSE",
    "WebSocketMessage",
    "WebSocketTap",
    "client_secrets",
    "is_websocket",
    "parse_messages",
    "server_events",
    "turns",
]

E = TypeVar("E", bound=Mapping[str, Any])

ABNORMAL_CLOSE = 1006
"""The close code of a connection that ended without a close handshake (RFC 6455 7.4.1)."""


def is_websocket(record: Mapping[str, Any]) -> bool:
    """Tell whether `record` is of a WebSocket session: one per connection, its messages events."""
    return (record.get("tags") or {}).get("transport") == "websocket"


def server_events(events: Iterable[E]) -> list[E]:
    """Return the events the server sent; SSE events have no `direction`: all are the server's."""
    return [ev for ev in events if ev.get("direction", "server") == "server"]


def turns(events: Iterable[E]) -> list[list[E]]:
    """Group a session's server events into one list per client message they answer.

    A Responses turn is `response.create`, then its stream; server events before any client
    message make a turn of their own. Each list reads as one SSE stream does."""
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
    """Describe what a message must offer; mitmproxy's `WebSocketMessage` does."""

    from_client: bool
    content: bytes
    timestamp: float

    @property
    def is_text(self) -> bool: ...


@dataclass
class WebSocketTap:
    """Keep the messages of one WebSocket connection as events as they pass, and how it closed.

    It is bounded like a stream tap: a message keeps at most `cap` bytes (marked `truncated`), a
    session at most `max_events` events and `max_bytes` bytes of them; messages past those are
    counted in `events_dropped`. Text stays text here: `parse_messages` turns it into JSON when
    the record is built, off the proxy's loop; only the part of a client's text message that no
    event keeps (past `cap`, or all of a message dropped) is looked through first, for its
    credentials (`found`: `credentials_in`, linear, no parse)."""

    t0: float
    cap: int = DEFAULT_BODY_CAP
    max_events: int = MAX_EVENTS
    max_bytes: int = MAX_STREAM_BYTES
    events: list[Event] = field(default_factory=list)
    events_dropped: int = 0
    kept_bytes: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {"client": 0, "server": 0})
    sizes: dict[str, int] = field(default_factory=lambda: {"client": 0, "server": 0})
    close_code: int | None = None
    close_reason: str = ""
    closed_by: str | None = None
    ended: float | None = None
    found: list[str] = field(default_factory=list)
    """Credentials in what no event keeps of the client's text messages."""

    def message(self, msg: WebSocketMessage) -> None:
        """Keep one message; this is called as each one passes."""
        direction = "client" if msg.from_client else "server"
        self.counts[direction] += 1
        self.sizes[direction] += len(msg.content)
        kept = min(len(msg.content), self.cap)
        room = max(self.max_bytes, self.cap) - self.kept_bytes
        if len(self.events) >= self.max_events or kept > room:
            self.events_dropped += 1
            self._learn(msg, 0)
            return
        self.kept_bytes += kept
        self.events.append(self._event(msg, direction))
        if len(msg.content) > self.cap:
            self._learn(msg, self.cap)

    def _learn(self, msg: WebSocketMessage, start: int) -> None:
        """Keep the credentials of a client's text message from `start` on, where no event holds it.

        That is a whole message dropped, or the part past the cap of one cut."""
        if msg.from_client and msg.is_text and len(self.found) < MAX_FOUND:
            known = set(self.found)
            self.found += [v for v in credentials_in(msg.content, start) if v not in known]

    def _event(self, msg: WebSocketMessage, direction: str) -> Event:
        kept, truncated = msg.content[: self.cap], len(msg.content) > self.cap
        t_ms = round((msg.timestamp - self.t0) * 1000.0, 3)
        ev: Event
        if msg.is_text:
            text = kept.decode("utf-8", "replace")
            ev = {"t_ms": t_ms, "direction": direction, "event": None, "data": text}
        else:
            b64 = base64.b64encode(kept).decode("ascii")
            ev = {"t_ms": t_ms, "direction": direction, "event": None, "data": None, "b64": b64}
        if truncated:
            ev["truncated"] = True
        return ev

    def close(
        self, code: int | None, reason: str | None, by_client: bool | None, at: float | None = None
    ) -> None:
        """Note that the connection ended: its close code and reason, and which side closed it.

        They are plain values: wsproto's codes are an `IntEnum`, which `marshal` cannot
        carry."""
        self.close_code = int(code) if code is not None else None
        self.close_reason = str(reason or "")
        self.closed_by = None if by_client is None else ("client" if by_client else "server")
        self.ended = at if at is not None else time.time()

    @property
    def abnormal(self) -> bool:
        """Tell whether the connection ended without a close handshake.

        A connection that never said how it ended counts too."""
        return self.close_code is None or self.close_code == ABNORMAL_CLOSE

    def summary(self) -> WebSocketSummary:
        """Summarise `response.websocket`: how the session closed, and the messages each way."""
        return {
            "close_code": self.close_code,
            "close_reason": self.close_reason,
            "closed_by": self.closed_by,
            "messages": {"client": self.counts["client"], "server": self.counts["server"]},
            "bytes": {"client": self.sizes["client"], "server": self.sizes["server"]},
        }

    def state(self) -> tuple[Any, ...]:
        """Take what the tap holds as plain values, for `from_state` in another process."""
        return field_values(self)

    @classmethod
    def from_state(cls, state: tuple[Any, ...]) -> WebSocketTap:
        """Make a tap holding what `state()` saw."""
        return from_field_values(cls, state)

    def release(self) -> None:
        """Forget the messages kept, once they are recorded elsewhere: `state()` was sent on."""
        self.events = []

    @classmethod
    def of(cls, messages: Iterable[WebSocketMessage], t0: float, cap: int) -> WebSocketTap:
        """Make a tap over messages already received, as a flow loaded from a file holds."""
        tap = cls(t0=t0, cap=cap)
        for msg in messages:
            tap.message(msg)
        return tap


def client_secrets(ws: WebSocketTap) -> list[str]:
    """Return the credentials in the client's text messages: secrets of the exchange.

    They are so as a request body's are: an `api_key` sent in a session's message, a key in the
    part of a message past the cap."""
    return ws.found + [
        secret
        for ev in ws.events
        if ev.get("direction") == "client" and isinstance(ev.get("data"), str)
        for secret in json_secrets(ev["data"])
    ]


def parse_messages(events: list[Event], secrets: dict[str, str] | None = None) -> list[Event]:
    """Make a session's events what a record keeps, in place.

    Echoes of `secrets` are scrubbed (in text and in base64 alike), text parsed as an SSE
    event's data is (`parse_events`, credential-named fields fingerprinted), and `event` the
    payload's `type`."""
    parse_events(events, secrets)
    for ev in events:
        data = ev.get("data")
        if isinstance(data, dict) and ev.get("event") is None:
            kind = data.get("type")
            ev["event"] = kind if isinstance(kind, str) else None
        elif secrets and (b64 := ev.get("b64")) is not None:
            ev["b64"] = scrub_text(b64, secrets)
    return events
