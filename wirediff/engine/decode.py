"""JSON text to values as `json.loads` gives them, by orjson (several times faster on
records) wherever it gives the same value, else by `json`: reading records is what the
engine spends most of its time on besides analysing them.

orjson differs on integers beyond 64 bits (it gives floats: a text with a number of 19
digits or more is left to `json`), and refuses what `json` accepts — NaN, infinities, lone
surrogates, other encodings, nesting past 1024 levels — which `json` then reads as it
always does (or refuses with its own error).
"""

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
"""A run of 19 digits where a number starts (first, or after `:`, `,` or `[`): a run in a
string (an id) is most often after a letter, and a string that looks like this is only
read by `json` as well."""


def _long_number(text: bytes) -> bool:
    """Whether `text` may hold an integer past 64 bits (none: orjson reads it as `json`)."""
    return _LONG_NUMBER in text.translate(_DIGITS) and _NUMBER_TOKEN.search(text) is not None


def parse(text: bytes) -> tuple[Any, bool]:
    """`json.loads(text)` (the same value, or the same error), and whether orjson read it:
    then `orjson.loads` alone reads this text to the same value."""
    if not _long_number(text):
        try:
            return orjson.loads(text), True
        except orjson.JSONDecodeError:
            pass
    return json.loads(text), False


def loads(text: bytes) -> Any:
    """`json.loads(text)`: the same value, or the same error."""
    return parse(text)[0]
