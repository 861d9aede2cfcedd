"""Pass through bodies that arrive over time, recording on the side: the stream tap.

What passes is never changed or held back. On the side, the tap decodes and splits with
fixed bounds, so no upstream can make a chunk cost unbounded time or memory: each chunk
decodes at most `CHUNK_BUDGET` bytes or `CHUNK_RATIO` times its size (input past that
waits in the decoder for the next chunk, and `CLOSE_BUDGET` more at the end), a stream
at most `max_stream` bytes, and one event keeps at most `cap` bytes of data. What a bound
cut off is marked `truncated`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from wirediff._support import field_values, from_field_values
from wirediff._types import Event
from wirediff.record.body import DEFAULT_BODY_CAP
from wirediff.record.inflate import Decoder, decoder_for
from wirediff.record.sse import SSESplitter
from wirediff.record.validate import MAX_EVENTS

__all__ = [
    "CHUNK_BUDGET",
    "MAX_BACKLOG",
    "MAX_STREAM_BYTES",
    "SSE_TYPES",
    "StreamTap",
    "is_sse",
]

MAX_STREAM_BYTES = 32 << 20
"""Decoded bytes of one stream split into events; past them the stream is `truncated`.

That is a hundred thousand events of a few hundred bytes: the longest answers seen."""
CHUNK_BUDGET = 256 << 10
"""Decoded bytes examined per chunk on the proxy's event loop, at least.

In one call a chunk may inflate to `CHUNK_RATIO` times its size, a ratio no honest stream
exceeds."""
CHUNK_RATIO = 16
CLOSE_BUDGET = 4 << 20
"""Decoded bytes examined at the stream's end, of what waits in the decoder."""
MAX_BACKLOG = 8 << 20
"""Encoded bytes that may wait undecoded; past them decoding stops and the stream is `truncated`.

They pile up when a stream inflates faster than chunks arrive."""
SSE_TYPES = ("text/event-stream",)


def is_sse(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() in SSE_TYPES


@dataclass
class StreamTap:
    """Pass a stream through as a `flow.response.stream` callable, splitting and timing events.

    The bytes returned are the bytes received: recording never changes the wire.
    """

    t0: float
    content_encoding: str = ""
    cap: int = DEFAULT_BODY_CAP
    """Decoded bytes kept as the body's text, and per event."""
    sse: bool = True
    """Split SSE events; other streamed bodies (NDJSON, long chunked) are only kept."""
    max_events: int = MAX_EVENTS
    max_stream: int = MAX_STREAM_BYTES
    events: list[Event] = field(default_factory=list)
    raw: bytearray = field(default_factory=bytearray)
    """The first `cap` decoded bytes."""
    wire_size: int = 0
    decoded: int = 0
    """Decoded bytes examined so far."""
    ended: bool = False
    decode_error: str | None = None
    events_dropped: int = 0
    truncated: bool = False
    """Decoded bytes past `max_stream` or past the backlog went unexamined."""

    def __post_init__(self) -> None:
        self._decoder: Decoder | None = decoder_for(self.content_encoding)
        self._splitter = SSESplitter(self.cap)
        self._budget = max(self.max_stream, self.cap) + 1 if self.sse else self.cap + 1
        self._closed = False

    def __call__(self, chunk: bytes) -> bytes:
        if not chunk:
            self.finish()
            return chunk
        self.wire_size += len(chunk)
        dec = self._decoder
        if dec is None:  # an unknown coding: keep the bytes as they came, split nothing
            if len(self.raw) <= self.cap:
                self.raw += chunk[: self.cap + 1 - len(self.raw)]
            return chunk
        if self.truncated or self.decode_error is not None:
            return chunk
        dec.feed(chunk)
        if dec.pending > MAX_BACKLOG:
            self._stop()
        else:
            budget = max(CHUNK_BUDGET, CHUNK_RATIO * len(chunk))
            self._take(dec, (time.time() - self.t0) * 1000.0, budget)
        return chunk

    def _take(self, dec: Decoder, now_ms: float, budget: int) -> None:
        """Decode and split at most `budget` bytes of what waits in the decoder."""
        want = min(budget, self._budget - self.decoded)
        try:
            data = dec.read(want) if want > 0 else b""
        except Exception as e:  # a broken upstream encoding must not break the stream
            self.decode_error = f"{type(e).__name__}: {e}"
            return
        self.decoded += len(data)
        if len(self.raw) <= self.cap:
            self.raw += data[: self.cap + 1 - len(self.raw)]
        if self.sse and data:
            self._keep(self._splitter.feed(data), now_ms)
        if self.decoded >= self._budget:
            self._stop()

    def _stop(self) -> None:
        self.truncated = True
        self._decoder = None

    def finish(self) -> None:
        """End the stream, or the connection, as seen on the event loop."""
        self.ended = True

    def close(self) -> None:
        """Decode what still waits, and keep a half-received event as `partial`.

        Decoding stops at `CLOSE_BUDGET`; more is `truncated`."""
        if self._closed:
            return
        self._closed = True
        self.ended = True
        end_ms = (time.time() - self.t0) * 1000.0
        dec = self._decoder
        if dec is not None and dec.pending and self.decode_error is None:
            self._take(dec, end_ms, CLOSE_BUDGET)
            if self._decoder is not None and dec.pending:
                self._stop()
        if self.sse:
            self._keep(self._splitter.close(), end_ms)

    def state(self) -> tuple[Any, ...]:
        """Take what a closed tap holds as plain values, for `from_state` in another process."""
        return field_values(self)

    @classmethod
    def from_state(cls, state: tuple[Any, ...]) -> StreamTap:
        """Make a closed tap holding what `state()` saw."""
        tap = from_field_values(cls, state)
        tap.raw = bytearray(tap.raw)  # `marshal` gives it back as bytes
        tap._decoder, tap._closed = None, True
        return tap

    def release(self) -> None:
        """Forget what was kept, once it is recorded elsewhere: `state()` was sent on."""
        self.events, self.raw = [], bytearray()

    @property
    def body_truncated(self) -> bool:
        """Tell whether the body's text holds only the first `cap` bytes of what was decoded."""
        return self.truncated or len(self.raw) > self.cap

    def kept(self) -> bytes:
        return bytes(self.raw[: self.cap])

    def _keep(self, events: list[Event], now_ms: float) -> None:
        room = self.max_events - len(self.events)
        if len(events) > room:
            self.events_dropped += len(events) - max(room, 0)
            events = events[: max(room, 0)]
        t = round(now_ms, 3)
        self.events.extend({"t_ms": t, **ev} for ev in events)
