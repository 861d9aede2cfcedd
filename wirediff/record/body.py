"""Bodies in a record: undo the Content-Encoding, then keep JSON, text or base64, capped."""

from __future__ import annotations

import base64
import json
import math
from typing import NotRequired, TypedDict

from wirediff._types import JSON
from wirediff.record.inflate import decode_bounded
from wirediff.record.names import may_hold_secret_fields
from wirediff.record.redact import (
    json_secrets,
    redact_fields,
    scrub_text,
    with_fields,
)
from wirediff.record.validate import MAX_DEPTH, depth_exceeds

__all__ = [
    "CUT_TAIL",
    "DEFAULT_BODY_CAP",
    "EncodedBody",
    "cut_body",
    "decode_body",
    "encode_body",
    "parse_json",
]

DEFAULT_BODY_CAP = 1 << 20  # 1 MiB per body; the rest is counted, not kept
UTF8_CUT_TAIL = 3
"""Bytes of a character cut at the cap: UTF-8 characters are at most four bytes long."""
CUT_TAIL = 64 << 10
"""Bytes of a body's end kept with its start when the middle is left out: a request's
`model` and `stream` come after its long value (the openai SDK writes `messages` and
`input` first), and tagging reads them there (`wirediff.record.partial`)."""


def cut_body(raw: bytes | None, cap: int) -> tuple[bytes | None, bytes | None]:
    """`raw` as much as a record built with `cap` reads of it: its start, enough for the
    first `cap` decoded bytes and one more whatever its Content-Encoding (no coding grows
    data by a sixty-fourth), and, when the rest is left out, its last `CUT_TAIL` bytes
    (else None). An upload of any size costs what the cap does."""
    keep = cap + 1 + cap // 64 + 4096
    if raw is None or len(raw) <= keep + CUT_TAIL:
        return raw, None
    return raw[:keep], raw[-CUT_TAIL:]


class EncodedBody(TypedDict):
    """A body as a record's `request` or `response` holds it."""

    body: JSON
    text: str | None
    b64: NotRequired[str]
    truncated: NotRequired[bool]
    depth_limited: NotRequired[bool]


def decode_body(raw: bytes, content_encoding: str, limit: int) -> bytes:
    """The first `limit` bytes of `raw` without its Content-Encoding, as mitmproxy's
    `get_content(strict=False)` reads it: the bytes as they came when the encoding is
    absent, unknown, a text charset or broken. Nothing past `limit` is ever inflated."""
    if not content_encoding:
        return raw[:limit]
    return decode_bounded(raw, content_encoding, limit)


def encode_body(
    content: bytes | None,
    content_type: str,
    cap: int,
    secrets: dict[str, str] | None = None,
    *,
    truncated: bool = False,
) -> EncodedBody:
    """`body` for JSON, `text` for other text, `b64` for binary; capped with `truncated`.

    `content` is decoded (no Content-Encoding); `truncated`: it is not the whole body even
    when shorter than `cap`. Echoes of the exchange's `secrets` (in any form, `scrub_text`)
    and credential-named JSON fields are fingerprinted. JSON
    nested deeper than `MAX_DEPTH` stays text, marked `depth_limited`.
    """
    out: EncodedBody = {"body": None, "text": None}
    if content is None:
        return out
    truncated = truncated or len(content) > cap
    kept = content[:cap]
    text: str | None
    try:
        text = kept.decode("utf-8")
    except UnicodeDecodeError:
        text = _cut_text(kept) if truncated else None
    if text is not None and secrets:
        text = scrub_text(text, secrets)
    if text is None:
        b64 = base64.b64encode(kept).decode("ascii")
        out["b64"] = scrub_text(b64, secrets) if secrets else b64
    elif not truncated and text[:1] in "{[":
        out["body"], out["text"], deep = parse_json(text)
        if deep:
            out["depth_limited"] = True
    else:
        out["text"] = text
    if truncated:
        out["truncated"] = True
    return out


def _not_json(token: str) -> float:
    raise ValueError(f"{token} is not JSON")


def _finite(token: str) -> float:
    value = float(token)
    if math.isinf(value):
        raise ValueError(f"{token} is past a double's range")
    return value


_STRICT = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)
"""JSON as RFC 8259 has it: `NaN`, `Infinity` and numbers no double holds are not JSON
(Python's own parser takes them, and a record holding them would not be JSON)."""


def parse_json(text: str) -> tuple[JSON, str | None, bool]:
    """`(value, None, False)` for JSON text; `(None, text, deep)` when it is not
    JSON (`_STRICT`) or nests deeper than `MAX_DEPTH` (`deep`)."""
    try:
        value = _STRICT.decode(text)
    except RecursionError:
        return None, text, True
    except ValueError:
        return None, _fields_scrubbed(text), False
    if text.count("{") + text.count("[") > MAX_DEPTH and depth_exceeds(value):
        return None, _fields_scrubbed(text), True
    if may_hold_secret_fields(text):
        value = redact_fields(value)
    return value, None, False


def _fields_scrubbed(text: str) -> str:
    """JSON-like text kept as text, the values of its credential-named fields fingerprinted
    wherever Python's lenient parser finds them (beside a `NaN`, say)."""
    found = json_secrets(text)
    return scrub_text(text, with_fields({}, found)) if found else text


def _cut_text(kept: bytes) -> str | None:
    """Text whose last character the cap cut in two; None when it is not text at all."""
    head, tail = kept[:-UTF8_CUT_TAIL], kept[-UTF8_CUT_TAIL:]
    try:
        return head.decode("utf-8") + tail.decode("utf-8", "ignore")
    except UnicodeDecodeError:
        return None
