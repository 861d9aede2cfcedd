"""Scrub everything wirediff writes for people and tools, in one place.

That is a report, `summary.json`, a CSV or JUnit file, the terminal, mitmdump's log, a Parquet
dataset. It is the second layer: the record has each exchange's own secrets fingerprinted
already (`wirediff.record.redact`); this replaces anything *shaped* like a credential, for
values the capture could not know (another client's key, a capture another tool wrote). Each
writer calls `scrub_output` on what it writes, and nothing else; mitmdump's lines go through
`redact_log_text`, which fingerprints the credentials a flow's line shows first.

A text is looked at only where it holds one of a few words (`key`, `token`, `bearer`,
`sk-`…, found by `str.find`); each shape is then matched right there. Matching the shapes'
regular expressions at every place of a text costs a hundred times more.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any, TypeVar, cast
from urllib.parse import unquote

from wirediff.record.names import (
    KEY_MARKS,
    KEY_SHAPE,
    SECRET_FIELD,
    SECRET_QUERY,
    SUBPROTOCOL_KEY,
    ascii_lower,
)
from wirediff.record.redact import fingerprint, redact_headers

__all__ = ["MAY_HOLD", "REDACTED", "redact_log_text", "scrub_output"]

T = TypeVar("T")

REDACTED = "[redacted]"
"""What a value shaped like a credential becomes.

The part replaced never holds a quote, a backslash, `<>&`, `,;` or a space, and a JSON number
or literal is left as it is: a JSON, CSV, XML or HTML text stays valid when scrubbed whole."""
_VALUE = r"[^\s\"'\\<>&,;]"
_QUOTED = re.compile(rf"(?i)(api key provided:\s*)(?!sha256:){_VALUE}+")
_SCHEME = re.compile(r"(?i)(bearer|basic|token)\s+(?!sha256:)[\w.~+/=\-*]{6,}")
_QUERY = re.compile(rf"[?&][\w-]+=(?!sha256:){_VALUE}+")
_FIELD = re.compile(
    rf"[\w-]+(?:\\?[\"'])?\s*[:=]\s*((?:\\?[\"'])?)"
    rf"(?!sha256:|(?i:bearer|basic|token|key)\s)({_VALUE}{{6,}})"
)
"""A name, its quote (escaped too: JSON inside JSON), `:` or `=`, then a value."""
_LITERAL = re.compile(r"-?\d[\d.eE+-]*|true|false|null")
_NAMES = (
    *("key", "token", "secret", "password", "passwd", "sig", "signature", "credential"),
    *("credentials", "authorization"),
)
"""Lower-cased words that credential names end with.

The names are those of credential fields, key-like query parameters and a subprotocol's key
prefix."""
_SCHEMES = ("bearer", "basic", "token")
_QUOTED_WORDS = ("api key provided",)
"""The words a 401's message quotes a key after."""
_WORD = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_SPACE = frozenset(" \t\r\n")
_NOT_WORD = frozenset("\"'\\.:= \t\r\n")
"""What may follow a name: its quote, escaped too, the `:` or `=` after it, a subprotocol's dot."""
_REACH = 64
"""Characters a name reaches either side of the word found in it."""


def _any_of(words: tuple[str, ...], then: frozenset[str] | None = None) -> str:
    """Spell a pattern of any of `words`, each followed by a character of `then` or the end.

    With no `then`, a word may be followed by anything."""
    alternatives = "|".join(words)  # letters, digits, ` `, `-` and `_`: plain in a pattern
    if then is None:
        return alternatives
    after = "".join(f"\\x{ord(c):02x}" for c in sorted(then))
    return f"(?:{alternatives})(?:[{after}]|$)"


MAY_HOLD = "|".join(
    (
        _any_of(_QUOTED_WORDS),
        _any_of(_SCHEMES, _SPACE),
        _any_of(KEY_MARKS),
        _any_of(_NAMES, _NOT_WORD),
    )
)
"""A regular expression of where the scrub may find a shape, for RE2 and `re`, case ignored.

Each word the scrub looks for, followed by what it must be followed by: a text it does not
match is written as it is. A writer of many lines matches them all at once with RE2
(`pyarrow.compute`), then scrubs only those it matches."""


def scrub_output(value: T) -> T:
    """Scrub `value` so that wirediff may write it anywhere.

    Anywhere is a report, `summary.json`, a CSV or JUnit file, the terminal, a log, a Parquet
    dataset. In every string (a text, or the strings and keys of lists and dicts), anything
    shaped like a credential replaced by `REDACTED` (a bearer token, an API key in any case, a
    key offered as a WebSocket subprotocol, a key-like query parameter or credential-named
    field, a key a 401 quotes). The one scrub of what goes out: each writer calls it on what it
    writes. `value` itself when nothing in it is scrubbed."""
    return cast("T", _scrubbed_value(value))


def _scrubbed_value(value: Any) -> Any:
    """Scrub `value`, returning the very object when nothing in it changed."""
    if isinstance(value, str):
        out = _remembered(value) if len(value) <= _REMEMBERED else _scrubbed(value)
        return value if out == value else out
    if isinstance(value, list | tuple):
        items = [_scrubbed_value(v) for v in value]
        same = all(a is b for a, b in zip(items, value, strict=True))
        return value if same else items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        pairs = [(_scrubbed_value(k), _scrubbed_value(v)) for k, v in value.items()]
        same = all(k is a and v is b for (k, v), (a, b) in zip(pairs, value.items(), strict=True))
        return value if same else dict(pairs)
    return value


def _scrubbed(text: str) -> str:
    lowered = ascii_lower(text)
    spans = sorted(_spans(text, lowered))
    if not spans:
        return text
    out: list[str] = []
    at = 0
    for start, end, replacement in spans:
        if start >= at:  # one of two shapes that overlap: the first
            out += (text[at:start], replacement)
            at = end
    return "".join(out) + text[at:]


_REMEMBERED = 512
"""Characters of a text whose scrubbed form is remembered, at most.

Evidence, titles and messages repeat across exchanges, and a lookup costs less than looking."""
_remembered = functools.lru_cache(maxsize=8192)(_scrubbed)


def _found(lowered: str, words: tuple[str, ...], then: frozenset[str] | None) -> Iterator[int]:
    """Find where each of `words` is in `lowered`.

    With `then`, only where it is not followed by a character outside `then`; the end of the
    text is in it."""
    for word in words:
        at = lowered.find(word)
        while at != -1:
            after = lowered[at + len(word) : at + len(word) + 1]
            if then is None or not after or after in then:
                yield at
            at = lowered.find(word, at + 1)


def _spans(text: str, lowered: str) -> Iterator[tuple[int, int, str]]:
    """Find `(start, end, replacement)` for each shape in `text`.

    `lowered` is `text` with its ASCII letters lower-cased, each character where it was."""
    for at in _found(lowered, _QUOTED_WORDS, None):
        if m := _QUOTED.match(text, at):
            yield at, m.end(), m[1] + REDACTED
    for at in _found(lowered, _SCHEMES, _SPACE):
        if (at == 0 or (not lowered[at - 1].isalnum() and lowered[at - 1] != "_")) and (
            m := _SCHEME.match(text, at)
        ):
            yield at, m.end(), f"{m[1]} {REDACTED}"
    for at in _found(lowered, KEY_MARKS, None):
        if (at == 0 or lowered[at - 1] not in _WORD) and (m := KEY_SHAPE.match(text, at)):
            yield at, m.end(), REDACTED
    words = {}
    for at in _found(lowered, _NAMES, _NOT_WORD):
        start = at
        while start > 0 and at - start < _REACH and lowered[start - 1] in _WORD:
            start -= 1
        words[start] = at
    for start in words:
        yield from _named(text, lowered, start)


def _named(text: str, lowered: str, start: int) -> Iterator[tuple[int, int, str]]:
    """Find the shape of the name beginning at `start`, if it is one.

    It is a key-like query parameter (`?key=…`), a key offered as a subprotocol
    (`openai-insecure-api-key.…`), or a credential-named field (`"api_key": "…"`, `token=…`)."""
    end = start
    while end < len(lowered) and end - start < _REACH and lowered[end] in _WORD:
        end += 1
    if end < len(lowered) and lowered[end] in _WORD:
        return  # a word too long to be a name
    name = lowered[start:end]
    if start > 0 and text[start - 1] in "?&" and name in SECRET_QUERY:
        if m := _QUERY.match(text, start - 1):
            yield start - 1, m.end(), text[start - 1 : end + 1] + REDACTED
        return
    if text[end : end + 1] == "." and (m := SUBPROTOCOL_KEY.match(text, start)):
        yield start, m.end(), m[1] + REDACTED
        return
    m = _FIELD.match(text, start) if SECRET_FIELD.match(name) else None
    if m is not None and (m[1] or not _LITERAL.fullmatch(m[2])):  # a number is no credential
        yield start, m.end(), text[start : m.start(2)] + REDACTED


_ANSI = r"(?:\x1b\[[0-9;]*m)*"
_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:" + "|".join(re.escape(n) for n in sorted(SECRET_QUERY)) + r")=)([^&\s#\"'\x1b]+)"
)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/@\s\"'\x1b]+)@")
_HEADER_LINE = re.compile(rf"(?m)^(\s*{_ANSI})([A-Za-z0-9_-]+)({_ANSI}:\s*{_ANSI})([^\r\n\x1b]*)")


def redact_log_text(text: str) -> str:
    """Fingerprint the credentials in a line mitmproxy is about to print.

    The line is a flow's request line, its headers or a message. The credentials are key-like
    query values, URL userinfo, credential headers, a key offered as a WebSocket subprotocol;
    then anything shaped like a credential (`scrub_output`)."""
    if not text:
        return text
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + fingerprint(unquote(m.group(2))), text)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{fingerprint(unquote(m.group(2)))}@", text)
    text = _HEADER_LINE.sub(_redact_header_line, text)
    return scrub_output(text)


def _redact_header_line(m: re.Match[str]) -> str:
    ((_, value),) = redact_headers([(m.group(2), m.group(4))])
    return m.group(0) if value == m.group(4) else m.group(1) + m.group(2) + m.group(3) + value
