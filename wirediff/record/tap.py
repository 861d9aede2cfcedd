"""The stream tap: a pass-through for bodies that arrive over time, recording on the side."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from wirediff._types import Event
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.sse import SSESplitter, decoder_for

__all__ = ["MAX_EVENTS", "SSE_TYPES", "StreamTap", "is_sse"]

MAX_EVENTS = 100_000  # per stream; more are counted in `events_dropped`
SSE_TYPES = ("text/event-stream",)


def is_sse(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() in SSE_TYPES


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
