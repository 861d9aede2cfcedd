"""Keep a body in a record: undo the Content-Encoding, then keep JSON, text or base64, capped."""

from __future__ import annotations

import base64
import json
import math
from typing import NotRequired, TypedDict

from wirediff._types import JSON
from wirediff.record.inflate import decode_body
from wirediff.record.names import credentials_in, may_hold_secret_fields
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
    "SCANNED",
    "EncodedBody",
    "cut_body",
    "decode_body",
    "encode_body",
    "parse_json",
    "secrets_past",
]

DEFAULT_BODY_CAP = 1 << 20  # 1 MiB per body; the rest is counted, not kept
UTF8_CUT_TAIL = 3
"""Bytes of a character cut at the cap: UTF-8 characters are at most four bytes long."""
CUT_TAIL = 64 << 10
"""Bytes of a body's end kept with its start when the middle is left out.

A request's `model` and `stream` come after its long value, since the openai SDK writes
`messages` and `input` first; tagging reads them there, in `wirediff.record.partial`."""


def cut_body(raw: bytes | None, cap: int) -> tuple[bytes | None, bytes | None]:
    """Cut `raw` to as much as a record built with `cap` reads of it.

    That is its start, enough for the first `cap` decoded bytes and one more whatever its
    Content-Encoding, since no coding grows data by a sixty-fourth; and, when the rest is left
    out, its last `CUT_TAIL` bytes, else None. An upload of any size costs what the cap does."""
    keep = cap + 1 + cap // 64 + 4096
    if raw is None or len(raw) <= keep + CUT_TAIL:
        return raw, None
    return raw[:keep], raw[-CUT_TAIL:]


SCANNED = 16 << 20
"""Decoded bytes of a content-encoded body looked through for credentials past the cap.

An inflation bomb costs no more. A body as it crossed the wire is looked through whole."""


def secrets_past(raw: bytes | None, content_encoding: str, cap: int) -> list[str]:
    """Find the credentials in what a record does not keep of a body, past its first `cap` bytes.

    `credentials_in` finds them past the first `cap` decoded bytes: a key the client put after a
    long upload is still known, and its echoes fingerprinted. `raw` is the whole body as it
    crossed the wire, looked through to its end, in linear time and without parsing it; decoded
    first as far as `SCANNED` when it has a Content-Encoding."""
    if raw is None:
        return []
    content = decode_body(raw, content_encoding, SCANNED) if content_encoding else raw
    return credentials_in(content, cap) if len(content) > cap else []


class EncodedBody(TypedDict):
    """Hold a body as a record's `request` or `response` does."""

    body: JSON
    text: str | None
    b64: NotRequired[str]
    truncated: NotRequired[bool]
    depth_limited: NotRequired[bool]


def encode_body(
    content: bytes | None,
    content_type: str,
    cap: int,
    secrets: dict[str, str] | None = None,
    *,
    truncated: bool = False,
) -> EncodedBody:
    """Encode a body as `body` for JSON, `text` for other text, `b64` for binary; capped.

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
"""JSON as RFC 8259 has it: `NaN`, `Infinity` and numbers no double holds are not JSON.

Python's own parser takes them, and a record holding them would not be JSON."""


def parse_json(text: str) -> tuple[JSON, str | None, bool]:
    """Parse JSON text into `(value, None, False)`, else return `(None, text, deep)`.

    The latter is for text that is not JSON (`_STRICT`) or nests deeper than `MAX_DEPTH`
    (`deep`)."""
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
    """Keep JSON-like text as text, with the values of its credential-named fields fingerprinted.

    They are fingerprinted wherever Python's lenient parser finds them, beside a `NaN` say."""
    found = json_secrets(text)
    return scrub_text(text, with_fields({}, found)) if found else text


def _cut_text(kept: bytes) -> str | None:
    """Decode text whose last character the cap cut in two; None when it is not text at all."""
    head, tail = kept[:-UTF8_CUT_TAIL], kept[-UTF8_CUT_TAIL:]
    try:
        return head.decode("utf-8") + tail.decode("utf-8", "ignore")
    except UnicodeDecodeError:
        return None
