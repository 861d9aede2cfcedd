"""Decode JSON text to the values `json.loads` gives, by orjson wherever it agrees.

orjson is several times faster on records, and every reader of captures reads each record
with it (`wirediff.record.lines.parse_batch`). It differs on integers beyond 64 bits, which it
gives as floats, so a text with a number of 19 digits or more is left to `json`. It refuses
what `json` accepts: NaN, infinities, lone surrogates, other encodings, nesting past 1024
levels. `json` then reads those as it always does, or refuses them with its own error."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["loads", "parse"]

_DIGITS = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))
"""Every digit as `0`, every other byte as a space."""
_LONG_NUMBER = b"0" * 19
_NUMBER_TOKEN = re.compile(rb"(?:^|[:,\[])\s*-?\d{19}")
"""A run of 19 digits where a number starts: first, or after `:`, `,` or `[`.

A run in a string, such as an id, is most often after a letter, and a string that looks like
this is only read by `json` as well."""


def _long_number(text: bytes) -> bool:
    """Tell whether `text` may hold an integer past 64 bits.

    Where it holds none, orjson reads it as `json` does."""
    return _LONG_NUMBER in text.translate(_DIGITS) and _NUMBER_TOKEN.search(text) is not None


def parse(text: bytes) -> tuple[Any, bool]:
    """Read `text` as `json.loads` does, and say whether orjson read it.

    The value, or the error, is the one `json.loads` gives. When orjson read it, `orjson.loads`
    alone reads this text to the same value."""
    if not _long_number(text):
        try:
            return orjson.loads(text), True
        except orjson.JSONDecodeError:
            pass
    return json.loads(text), False


def loads(text: bytes) -> Any:
    """Read `text` as `json.loads` does: the same value, or the same error."""
    return parse(text)[0]
