"""The per-exchange view the diagnosis rules read: one record's request, answer, tags
and whatever error it carries, under short names."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wirediff._support import clip
from wirediff._types import Record
from wirediff.analysis.diagnosis.chains import StreamEnd, exchange_ok, stream_end
from wirediff.record.redact import redact_patterns
from wirediff.record.tags import header_get

__all__ = ["SNIPPET", "ExchangeView", "error_fields", "scrub", "view"]

SNIPPET = 160
"""Characters of an answer's body or error message quoted as evidence."""
ERROR_TEXT = 300
"""Characters of a plain-text error answer kept as its message."""


def scrub(text: str) -> str:
    """Remove anything that looks like a credential from a quoted snippet."""
    return redact_patterns(text)


@dataclass
class ExchangeView:
    """One exchange, viewed for the rules."""

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
    msg: str = ""
    code: Any = None
    etype: Any = None
    param: Any = None

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
        raw = self.body_text
        if not raw:
            return None
        raw = " ".join(raw.split())
        return "body: " + scrub(clip(raw, SNIPPET))

    def header(self, name: str) -> str | None:
        return header_get((self.rec.get("response") or {}).get("headers") or (), name)


def error_fields(body: Any, text: str | None, events: Any) -> tuple[str, Any, Any, Any]:
    """`(message, code, type, param)` of whatever error the answer carries."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or ""), err.get("code"), err.get("type"), err.get("param")
        if isinstance(err, str):
            return err, None, None, None
        if "detail" in body:
            return str(body["detail"]), None, None, None
        if body.get("object") == "error":
            return (
                str(body.get("message") or ""),
                body.get("code"),
                body.get("type"),
                body.get("param"),
            )
    if text:
        return text.strip()[:ERROR_TEXT], None, None, None
    for ev in events or ():
        data = ev.get("data")
        if isinstance(data, dict) and (data.get("error") or data.get("type") == "error"):
            return error_fields(
                data if data.get("type") != "error" else {"error": data}, None, None
            )
    return "", None, None, None


def view(rec: Record) -> ExchangeView:
    req, resp, tags = rec["request"], rec.get("response") or {}, rec.get("tags") or {}
    ctype = (header_get(resp.get("headers") or (), "content-type") or "").split(";", 1)[0]
    err = rec.get("error") or {}
    end = stream_end(rec)
    path = str(req.get("path") or "").split("?", 1)[0]
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
    )
    x.msg, x.code, x.etype, x.param = error_fields(x.body, x.text, resp.get("events"))
    return x
