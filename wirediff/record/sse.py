"""Split Server-Sent Events incrementally, linear in the bytes fed and bounded per event.

Chunk boundaries on the wire are arbitrary, so events are split here by the rules of the
WHATWG EventSource parser (LF, CRLF and CR line ends, comments, multi-line `data:`). Each
byte is scanned once whatever the chunking; a line or an event longer than `max_event`
keeps its first `max_event` bytes and is marked `truncated`, so one endless event costs
neither time nor memory beyond that. Event data stays text here: `parse_events` turns it
into JSON when the record is built, off the proxy's event loop.
"""

from __future__ import annotations

import re

from wirediff._types import Event
from wirediff.record.body import parse_json
from wirediff.record.redact import present_secrets, scrub_text
from wirediff.record.validate import MAX_EVENTS

__all__ = ["DEFAULT_MAX_EVENT", "SSESplitter", "parse_events", "split_events"]

DEFAULT_MAX_EVENT = 1 << 20
"""Bytes of data kept per event (the capture's body cap)."""
_LINE_ENDS = re.compile(rb"[\r\n]*")


def parse_events(events: list[Event], secrets: dict[str, str] | None = None) -> list[Event]:
    """Scrub echoes of `secrets` from `events` and parse their data, in place.

    In place, a long stream is not held twice. The data is JSON where it is JSON (nested deeper
    than `MAX_DEPTH` it stays text, marked `depth_limited`); a truncated event's data stays
    text."""
    if secrets:  # most streams echo none: each event is then scrubbed of none
        texts = [ev["data"] for ev in events if isinstance(ev["data"], str)]
        secrets = present_secrets("\n".join(texts), secrets)
    for ev in events:
        data = ev["data"]
        if not isinstance(data, str):  # parsed already (a second record of one tap)
            continue
        if secrets:
            data = ev["data"] = scrub_text(data, secrets)
        if ev.get("truncated") or not data or data[0] not in "{[" or data == "[DONE]":
            continue
        value, text, deep = parse_json(data)
        ev["data"] = value if text is None else text
        if deep:
            ev["depth_limited"] = True
    return events


class SSESplitter:
    """Feed decoded bytes in any chunking; get complete events out (data as text)."""

    def __init__(self, max_event: int = DEFAULT_MAX_EVENT) -> None:
        self.max_event = max_event
        self._line = bytearray()  # the line begun in an earlier chunk (at most max_event + 16)
        self._line_cut = False
        self._pending_cr = False
        self._event: str | None = None
        self._data: list[bytes] = []
        self._size = 0
        self._truncated = False
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[Event]:
        """Return the events completed by this chunk (without timing)."""
        out: list[Event] = []
        n = len(chunk)
        start = 0
        if n and self._pending_cr:
            self._pending_cr = False
            if chunk[0] == 0x0A:
                start = 1
        lf = -2  # the next LF at or after `start` (-1: none left in this chunk)
        while start < n:
            if lf != -1 and lf < start:
                lf = chunk.find(b"\n", start)
            cr = chunk.find(b"\r", start, lf if lf != -1 else n)
            if cr != -1:
                end, nxt = cr, cr + 1
                if nxt < n and chunk[nxt] == 0x0A:
                    nxt += 1
                elif nxt == n:
                    self._pending_cr = True
            elif lf != -1:
                end, nxt = lf, lf + 1
            else:
                self._keep_partial(chunk, start, n)
                break
            blank = end == start and not self._line
            self._end_line(chunk, start, end, out)
            start = nxt
            if blank and start < n:  # a run of blank lines: the first one ended the event
                run_end = _LINE_ENDS.match(chunk, start).end()  # type: ignore[union-attr]
                if run_end > start:
                    self._pending_cr = run_end == n and chunk[n - 1] == 0x0D
                    start = run_end
        return out

    def close(self) -> list[Event]:
        """Flush at end of stream: a half-received event comes out marked `partial`."""
        if self._line:
            self._end_line(b"", 0, 0, [])
        if self._data or self._event is not None:
            ev = self._build()
            ev["partial"] = True
            return [ev]
        return []

    def _keep_partial(self, chunk: bytes, start: int, end: int) -> None:
        room = self.max_event + 16 - len(self._line)
        if end - start > room:
            end = start + max(room, 0)
            self._line_cut = True
        self._line += chunk[start:end]

    def _end_line(self, chunk: bytes, start: int, end: int, out: list[Event]) -> None:
        cut = self._line_cut
        if self._line:
            self._keep_partial(chunk, start, end)
            line, cut = bytes(self._line), self._line_cut
            self._line.clear()
            self._line_cut = False
        elif end - start > self.max_event + 16:
            line, cut = chunk[start : start + self.max_event + 16], True
        else:
            line = chunk[start:end]
        if not line:
            if self._data or self._event is not None:
                out.append(self._build())
            return
        if line[0] == 0x3A:  # ":" a comment
            return
        field, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            if self._truncated:
                return
            room = self.max_event - self._size
            if cut or len(value) > room:
                value = value[: max(room, 0)]
                self._truncated = True
                if not value and self._data:
                    return
            self._data.append(value)
            self._size += len(value) + 1
        elif field == b"event":
            self._event = value.decode("utf-8", "replace")
        elif field == b"id":
            self._id = value.decode("utf-8", "replace")

    def _build(self) -> Event:
        ev: Event = {
            "event": self._event,
            "data": b"\n".join(self._data).decode("utf-8", "replace"),
        }
        if self._id is not None:
            ev["id"] = self._id
        if self._truncated:
            ev["truncated"] = True
        self._event, self._data, self._id = None, [], None
        self._size, self._truncated = 0, False
        return ev


SPLIT_PIECE = 1 << 16
"""Bytes of a whole body split at a time: no more events than a piece holds wait together."""


def split_events(
    raw: bytes, t_ms: float | None = None, max_event: int = DEFAULT_MAX_EVENT
) -> tuple[list[Event], int]:
    """Split a whole decoded SSE body, one timestamp for all: a response not streamed, say.

    A body from a HAR is one too. The data stays text (`parse_events`). Return the first
    `MAX_EVENTS` events, and how many more there were."""
    sp = SSESplitter(max_event)
    events: list[Event] = []
    dropped = 0
    for at in range(0, len(raw) + 1, SPLIT_PIECE):
        piece = raw[at : at + SPLIT_PIECE]
        found = sp.feed(piece) + (sp.close() if at + SPLIT_PIECE >= len(raw) else [])
        room = max(MAX_EVENTS - len(events), 0)
        events += [{"t_ms": t_ms, **ev} for ev in found[:room]]
        dropped += max(len(found) - room, 0)
        if at + SPLIT_PIECE >= len(raw):
            break
    return events, dropped
