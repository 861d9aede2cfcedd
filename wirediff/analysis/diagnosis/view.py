"""View one exchange as the diagnosis rules read it, under short names.

The view holds one record's request, answer, tags and whatever error it carries.

`extract_error` is the one place that reads an error out of an answer, whatever its shape:
OpenAI's `{"error": {…}}`; a string `error` beside a `message` or `detail`, as Express and LM
Studio send; FastAPI's `detail`, a string or a list of validation errors; vLLM's flat `{"object":
"error", …}`; a plain-text or HTML body; and, in a stream, the error event itself, such as `data:
{"error": …}`, `{"type": "error", …}` or `response.failed`. A stream's raw text is never read as
a message, because it echoes the request: the model id, the prompt.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wirediff._support import clip, is_2xx
from wirediff._types import Event, Record
from wirediff.analysis.diagnosis.outcome import (
    FAILED_TERMINALS,
    StreamEnd,
    exchange_ok,
    stream_end,
)
from wirediff.record.scrub import scrub_output
from wirediff.record.tags import header_get
from wirediff.record.websocket import is_websocket, server_events

__all__ = ["SNIPPET", "ErrorInfo", "ExchangeView", "extract_error", "scrub", "view"]

SNIPPET = 160
"""Characters of an answer's body or error message quoted as evidence."""
ERROR_TEXT = 300
"""Characters of a plain-text error answer kept as its message."""

_TAGS = re.compile(r"<[^>]*>")
_BARE_ERROR_KEYS = frozenset({"message", "code", "status", "statusCode", "type", "param"})
"""A body made of these keys only (`{"message": "Unauthorized"}`) is an error message."""


def scrub(text: str) -> str:
    """Remove anything that looks like a credential from a quoted snippet."""
    return scrub_output(text)


@dataclass(frozen=True)
class ErrorInfo:
    """Hold an error as the server put it: its message and the fields beside it."""

    message: str
    code: Any = None
    type: Any = None
    param: Any = None
    where: str = "body"
    """`body`, `text`, or `event N of M` (which event of the stream carried it)."""

    def quote(self) -> str:
        """Write the evidence line: the server's own words and where they were."""
        return self._quote

    @functools.cached_property
    def _quote(self) -> str:
        fields = [f"{k} {v}" for k, v in (("type", self.type), ("code", self.code)) if v]
        fields += [f"param {self.param}"] if self.param else []
        extra = f" ({', '.join(map(str, fields))})" if fields else ""
        said = json.dumps(clip(" ".join(self.message.split()), SNIPPET), ensure_ascii=False)
        where = f"error {self.where}" if self.where.startswith("event") else "error"
        return scrub(f"{where}: {said}{extra}")


def _validation(detail: Sequence[Any]) -> tuple[str, Any]:
    """Read FastAPI's 422 `detail` list: the first error's message and the field it names."""
    first = detail[0] if detail and isinstance(detail[0], dict) else {}
    loc = first.get("loc")
    names = [
        p
        for p in (loc if isinstance(loc, list) else [])
        if isinstance(p, str) and p not in ("body", "query", "path")
    ]
    return str(first.get("msg") or json.dumps(detail)[:ERROR_TEXT]), names[-1] if names else None


def _from_object(obj: Mapping[str, Any]) -> tuple[str, Any, Any, Any] | None:
    """Read `(message, code, type, param)` of an error object; None when it is not one."""
    err = obj.get("error")
    if isinstance(err, dict):
        msg = err.get("message") or err.get("detail") or err.get("msg") or ""
        return str(msg), err.get("code"), err.get("type"), err.get("param")
    if isinstance(err, str) and err:
        sibling = obj.get("message") or obj.get("detail")
        if (
            isinstance(sibling, str) and sibling
        ):  # {"error": "Not Found", "message": "Cannot POST …"}
            return sibling, obj.get("code") or obj.get("statusCode"), err, obj.get("param")
        return err, obj.get("code"), obj.get("type"), obj.get("param")
    detail = obj.get("detail")
    if isinstance(detail, str):
        return detail, None, None, None
    if isinstance(detail, list) and detail:
        msg, param = _validation(detail)
        return msg, None, None, param
    kind = obj.get("type")
    if isinstance(obj.get("message"), str) and set(obj) <= _BARE_ERROR_KEYS:
        return str(obj["message"]), obj.get("code"), kind, obj.get("param")
    if obj.get("object") == "error" or kind == "error":
        return str(obj.get("message") or ""), obj.get("code"), obj.get("type"), obj.get("param")
    if kind == "response.failed" and isinstance(obj.get("response"), dict):
        return _from_object(obj["response"])
    return None


def _from_events(events: Sequence[Event]) -> ErrorInfo | None:
    for i, ev in enumerate(events):
        data = ev.get("data")
        found = _from_object(data) if isinstance(data, dict) else None
        if found is not None:
            msg, code, etype, param = found
            return ErrorInfo(msg, code, etype, param, where=f"event {i + 1} of {len(events)}")
    return None


def extract_error(body: Any, text: str | None, events: Sequence[Event] | None) -> ErrorInfo | None:
    """Read whatever error the answer carries, in the server's own words; None when it carries none.

    `events`, the server's events only, are read instead of the text when there are any."""
    if isinstance(body, dict):
        found = _from_object(body)
        if found is not None:
            return ErrorInfo(*found)
    if events is not None:
        return _from_events(events)
    if text and text.strip():
        plain = " ".join(_TAGS.sub(" ", text).split())
        return ErrorInfo(plain[:ERROR_TEXT], where="text")
    return None


@dataclass
class ExchangeView:
    """View one exchange for the rules."""

    id: str
    rec: Record
    method: str
    path: str
    url: str
    status: int | None
    ctype: str
    body: Any
    text: str | None
    label: str | None
    family: str
    endpoint: str
    prefix: str
    model: str | None
    stream: bool
    auth: Mapping[str, Any] | None
    soft: bool
    error_kind: str | None
    error_msg: str
    end: StreamEnd | None
    ok: bool
    events: list[Event] | None = None
    """The server's events (SSE, or WebSocket messages from the server)."""
    websocket: bool = False
    """The request asked to upgrade to a WebSocket."""
    error: ErrorInfo | None = None

    @property
    def error_event(self) -> bool:
        """Tell whether the stream or WebSocket session carries an error event or ended failed."""
        if self.end is None:
            return False
        return self.error is not None or self.end.terminal in FAILED_TERMINALS

    @property
    def error_in_success(self) -> bool:
        """Tell whether an error came under a success status.

        That is a 2xx error body, or an error event in a 2xx stream or an open WebSocket session."""
        return self.soft or (self.error_event and self.success)

    @property
    def success(self) -> bool:
        """Tell whether the status is a success: 2xx, or 101 for a WebSocket session."""
        return is_2xx(self.status) or (self.status == 101 and self.websocket)

    @property
    def msg(self) -> str:
        return self.error.message if self.error else ""

    @property
    def code(self) -> Any:
        return self.error.code if self.error else None

    @property
    def etype(self) -> Any:
        return self.error.type if self.error else None

    @property
    def param(self) -> Any:
        return self.error.param if self.error else None

    @property
    def fingerprint(self) -> str | None:
        return self.auth.get("fingerprint") if self.auth else None

    @property
    def answer(self) -> str:
        if self.status is None:
            return f"no response ({self.error_kind or 'error'})"
        return f"{self.status}{' ' + self.ctype if self.ctype else ''}"

    @property
    def line(self) -> str:
        return f"{self.method} {self.path} → {self.answer}"

    @property
    def url_line(self) -> str:
        return f"{self.method} {self.url} → {self.answer}"

    @property
    def body_text(self) -> str | None:
        if self.body is not None:
            return json.dumps(self.body, ensure_ascii=False, separators=(",", ":"))
        return self.text

    def snippet(self) -> str | None:
        """Quote the body as evidence.

        For a stream, that is the error event in the server's words, not the stream's text."""
        return self._snippet

    @functools.cached_property
    def _snippet(self) -> str | None:
        if self.events is not None and self.body is None:
            return self.error.quote() if self.error else None
        raw = self.body_text
        if not raw:
            return None
        raw = " ".join(raw.split())
        return "body: " + scrub(clip(raw, SNIPPET))

    def words(self) -> str | None:
        """Quote the error message on its own when the body snippet does not hold it whole."""
        return self._words

    @functools.cached_property
    def _words(self) -> str | None:
        if self.error is None or not self.error.message:
            return None
        snip = self.snippet() or ""
        said = " ".join(self.error.message.split())
        return None if said in snip else self.error.quote()

    def header(self, name: str) -> str | None:
        resp = self.rec.get("response")
        return header_get(resp["headers"], name) if resp is not None else None


def view(rec: Record) -> ExchangeView:
    req, tags = rec["request"], rec["tags"]
    resp: Mapping[str, Any] = rec.get("response") or {}  # no answer: nothing in it
    ctype = (header_get(resp.get("headers") or (), "content-type") or "").split(";", 1)[0]
    err: Mapping[str, Any] = rec.get("error") or {}
    end = stream_end(rec)
    path = str(req.get("path") or "").split("?", 1)[0]
    raw_events = resp.get("events")
    events = server_events(raw_events) if raw_events is not None else None
    upgrade = (header_get(req.get("headers") or (), "upgrade") or "").lower() == "websocket"
    x = ExchangeView(
        id=rec["id"],
        rec=rec,
        method=str(req.get("method") or ""),
        path=path,
        url=str(req.get("url") or path),
        status=resp.get("status"),
        ctype=ctype.strip().lower(),
        body=resp.get("body"),
        text=resp.get("text"),
        label=rec.get("label"),
        family=str(tags.get("family") or "other"),
        endpoint=str(tags.get("endpoint") or path),
        prefix=str(tags.get("prefix") or ""),
        model=tags.get("model"),
        stream=bool(tags.get("stream")),
        auth=tags.get("auth"),
        soft=bool(tags.get("soft_error")),
        error_kind=err.get("kind"),
        error_msg=str(err.get("message") or ""),
        end=end,
        ok=exchange_ok(rec, end),
        events=events,
        websocket=upgrade or is_websocket(rec),
    )
    x.error = extract_error(x.body, x.text, events)
    return x
