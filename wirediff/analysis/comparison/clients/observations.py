"""Define what a client's run on an answer reports, and serve the answer again as bytes.

A probe is one call an app makes, such as `client.responses.stream()`; each observes kinds of
values, never generated text, as in `content: text` or `tool_arguments: object`. A call that
raises where an app would not expect it is a `Failure` with the line where the client gave up.
Both clients, openai-python and the npm `openai` package, report in these terms.
"""

from __future__ import annotations

import base64
import json
import traceback
from dataclasses import dataclass, field
from typing import Any

from wirediff._support import as_bytes, clip
from wirediff._types import Record

__all__ = [
    "MESSAGE_LIMIT",
    "Failure",
    "Observations",
    "Served",
    "cut_short",
    "error_text",
    "failing_line",
    "said",
    "sent_bytes",
    "served",
]

MESSAGE_LIMIT = 240
"""Characters kept of an exception's message in the evidence."""
_HOP_BY_HOP = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection"})


@dataclass(frozen=True, slots=True)
class Failure:
    """Record that a client raised where an app would not expect it, or gave back nothing useful."""

    probe: str
    """The call that failed, as an app writes it: `client.responses.stream()`."""
    error: str
    """What went wrong: `raises AttributeError: 'Response' object has no attribute 'output'`."""
    where: str = ""
    """The failing line: `openai/lib/…/_responses.py:332: snapshot.output…`."""
    client: str = ""
    """Which client made the call (`openai-node 6.49.0`); empty for openai-python."""

    @property
    def evidence(self) -> str:
        who = f" ({self.client})" if self.client else ""
        return f"`{self.probe}`{who} {self.error}" + (f" at {self.where}" if self.where else "")


@dataclass
class Observations:
    """Collect what the probes of one client saw, and which probe saw each key."""

    observed: dict[str, str] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    probes: dict[str, str] = field(default_factory=dict)
    current: str = ""

    def see(self, key: str, value: str) -> None:
        self.observed[key] = value
        self.probes[key] = self.current

    def see_first(self, key: str, value: str) -> None:
        """Keep the first call's word on `key`, such as which error a failing answer raises."""
        if key not in self.observed:
            self.see(key, value)


def error_text(e: BaseException) -> str:
    first = str(e).splitlines()[0] if str(e) else ""
    return f"raises {type(e).__name__}" + (f": {clip(first, MESSAGE_LIMIT)}" if first else "")


def failing_line(e: BaseException, package: str = "/openai/") -> str:
    """Locate the innermost frame in the client package as `file:line: code`.

    Without one, it is the innermost frame at all."""
    frames = traceback.extract_tb(e.__traceback__)
    inside = [f for f in frames if package in f.filename.replace("\\", "/")]
    if not (inside or frames):
        return ""
    frame = (inside or frames)[-1]
    path = frame.filename.replace("\\", "/")
    short = path[path.rindex(package) + 1 :] if package in path else path.rsplit("/", 1)[-1]
    return f"{short}:{frame.lineno}: {(frame.line or '').strip()}"


@dataclass(frozen=True, slots=True)
class Served:
    """Hold a recorded answer as a client receives it: status, headers and body bytes."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    content: bytes
    cut: bool = False
    """The server closed the connection after `content`, before the answer ended."""


def cut_short(record: Record) -> bool:
    """Tell whether the server closed the connection before its answer ended."""
    resp, error = record.get("response"), record.get("error")
    return (
        isinstance(resp, dict)
        and resp.get("complete") is False
        and isinstance(error, dict)
        and error.get("kind") == "upstream_disconnect"
    )


def served(record: Record) -> Served | None:
    """Turn the answer of `record` into bytes again, with SSE events framed again.

    It is None when the answer cannot be served: no status, cut with nothing kept of it,
    truncated without events, or kept as base64 that is not the bytes sent. A body no UTF-8
    decodes, kept as base64, is served as its bytes; an answer the server cut, as what came of
    it before the connection closed."""
    resp = record.get("response")
    if not isinstance(resp, dict) or not isinstance(resp.get("status"), int):
        return None
    cut = cut_short(record)
    if resp.get("truncated") and not isinstance(resp.get("events"), list):
        return None
    headers = tuple(  # as the bytes they were: a header's text need not be ASCII
        (as_bytes(str(k)), as_bytes(str(v)))
        for k, v in resp.get("headers") or []
        if str(k).lower() not in _HOP_BY_HOP
    )
    events = resp.get("events")
    if isinstance(events, list):
        content = _sse(events)
    elif resp.get("body") is not None:
        content = json.dumps(resp["body"]).encode()
    elif isinstance(text := resp.get("text"), str):
        content = as_bytes(text)
    elif resp.get("complete") is False:
        return None
    elif (b64 := resp.get("b64")) is not None:
        if (sent := sent_bytes(b64)) is None:
            return None
        content = sent
    else:
        content = b""
    return Served(resp["status"], headers, content, cut)


def sent_bytes(b64: Any) -> bytes | None:
    """Decode a body kept as base64 into the bytes sent, or None when it cannot be them.

    It is none when it is no base64, as when a key in it was redacted."""
    try:
        return base64.b64decode(b64, validate=True)
    except (TypeError, ValueError):
        return None


def _sse(events: list[Any]) -> bytes:
    """Frame the stream as clients parse it: each event's name and data, in order.

    An event cut mid-frame, `partial`, came without the blank line that ends it."""
    frames = []
    for ev in events:
        if not isinstance(ev, dict):
            continue
        data = ev.get("data")
        text = data if isinstance(data, str) else json.dumps(data)
        name = f"event: {ev['event']}\n" if isinstance(ev.get("event"), str) else ""
        frames.append(f"{name}data: {text}" + ("" if ev.get("partial") else "\n\n"))
    return as_bytes("".join(frames))


def said(answer: Served) -> str:
    """Find the server's own words in an error answer, as a client could show them.

    They are the error object's `message`, a bare `error` string, or a top-level `message` or
    `detail`."""
    if 200 <= answer.status < 300:
        return ""
    try:
        doc = json.loads(answer.content)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(doc, dict):
        return ""
    err = doc.get("error")
    if isinstance(err, dict):
        err = err.get("message")
    found = err if isinstance(err, str) else doc.get("message") or doc.get("detail")
    return found if isinstance(found, str) else ""
