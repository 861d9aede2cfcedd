"""Name the names and shapes that are credentials.

They are headers, query parameters, body fields, and the shapes API keys have. Written once,
read by the record's redaction (`wirediff.record.redact`) and by the scrub of everything
wirediff writes (`scrub_output`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

__all__ = [
    "AUTH_HEADERS",
    "FIELD_NAMES",
    "KEY_LENGTH",
    "KEY_MARKS",
    "KEY_PREFIX",
    "KEY_SHAPE",
    "MAX_FOUND",
    "SECRET_FIELD",
    "SECRET_HEADERS",
    "SECRET_HEADER_NAME",
    "SECRET_QUERY",
    "SUBPROTOCOL_KEY",
    "ascii_lower",
    "credentials_in",
    "field_values",
    "may_hold_secret_fields",
]

SECRET_HEADERS = frozenset(
    {"authorization", "api-key", "x-api-key", "cookie", "set-cookie", "proxy-authorization"}
)
SECRET_HEADER_NAME = re.compile(
    r"(?i)(authorization|cookie|api[-_]?key|(^|[-_])(auth|access|session|id)?[-_]?token$|secret"
    r"|password|subscription[-_]?key|(^|[-_])auth$|(?<!idempotency)(^|[-_])key$)"
)
"""Other credential-looking header names: x-goog-api-key, x-auth-token, x-client-secret…

Not x-ratelimit-*-tokens, whose values are evidence."""
AUTH_HEADERS = ("authorization", "api-key", "x-api-key", "proxy-authorization")
SECRET_QUERY = frozenset(
    {
        *("key", "api_key", "api-key", "apikey", "x-api-key", "token", "secret", "signature"),
        *("access_token", "access-token", "refresh_token", "auth_token", "id_token", "sig"),
        *("client_secret", "client-secret", "password", "passwd", "private_key"),
    }
)

FIELD_NAMES = (
    r"[\w-]*api[-_]?key|key|(openai|secret|access|private|auth|session|client|master|admin"
    r"|service|signing|encryption)[-_]?key|[\w-]*secret|[\w-]*passw(or)?d"
    r"|(access|refresh|auth|session|bearer|id|api|oauth)?[-_]?token|credentials?"
    r"|([\w-]*[-_])?authorization"
)
"""Body fields whose value is a credential, in JSON, forms and WebSocket messages.

`api_key`, `openai_api_key`, `key`, `openai_key`, `client_secret`, `password`, `token`,
`authorization`, `credentials`, in any case; not `prompt_cache_key` or `max_tokens`."""
SECRET_FIELD = re.compile(rf"(?i)^(?:{FIELD_NAMES})$")
_FIELD_NAME = re.compile(rf"(?i)(?:{FIELD_NAMES})")
_COLON = re.compile(r"\s*:")
_FIELD_ENDS = (
    *('key"', 'secret"', 'password"', 'passwd"', 'token"', 'credential"', 'credentials"'),
    'authorization"',
)
"""Endings of every name `FIELD_NAMES` matches, lower-cased, with the key's closing quote.

A text without any of them names no such field. A substring test is a tenth of the regex's
cost; `"prompt_tokens"` passes it."""


def ascii_lower(text: str) -> str:
    """Lower-case `text`, each character where it was; `str.lower` makes `İ` two."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_LOWER)


_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _named_fields(text: str, lowered: str) -> Iterator[int]:
    """Find where each key of JSON-like `text` that names a credential field ends.

    A key ends at its closing quote, a colon after it. Only the few places a name could end are
    looked at, never every quote of the text."""
    for end in _FIELD_ENDS:
        at = lowered.find(end)
        while at != -1:
            close = at + len(end) - 1
            open_ = lowered.rfind('"', 0, at)
            if _FIELD_NAME.fullmatch(text, open_ + 1, close) and _COLON.match(lowered, close + 1):
                yield close
            at = lowered.find(end, close + 1)


def may_hold_secret_fields(text: str) -> bool:
    """Pre-check raw JSON text cheaply before walking it for credential fields.

    It tells whether some key, `"name":`, is a credential field's name."""
    for _ in _named_fields(text, ascii_lower(text)):
        return True
    return False


_STRING_VALUE = re.compile(r'\s*:\s*"((?:[^"\\]|\\.){1,4096}?)("|$)', re.S)
"""A string value after a key: whole, or cut by the end of the text."""


def field_values(text: str) -> list[str]:
    """Find the string values of the credential-named fields of JSON-like text, without parsing.

    So they are found also in JSON cut at a cap, where a value the cut ends is kept as far as it
    goes, or in text that is not quite JSON."""
    out = []
    for close in _named_fields(text, ascii_lower(text)):
        m = _STRING_VALUE.match(text, close + 1)
        if m is None or (not m[2] and m.end() != len(text)):
            continue
        try:
            out.append(json.loads(f'"{m[1]}"'))
        except ValueError:  # an escape the cut ended
            out.append(m[1])
    return out


KEY_PREFIX = re.compile(
    r"(?i)^([a-z]{2,4}[-_])((?:proj|svcacct|admin|ant|live|test)[-_](?:api\d\d[-_])?)?"
)
"""What a key may begin with that a server may leave out when it quotes the key.

`sk-`, `sk-proj-`, `sk-ant-api03-`, `pk_live_`: a vendor's mark, then a kind of key."""
KEY_SHAPE = re.compile(
    r"(?i)(?<![\w-])(?:(?:sk|lm|pk|rk)-[\w\-*.]{6,}|(?:gsk|hf|ghp|xai)[_-][A-Za-z0-9]{16,}"
    r"|AIza[\w-]{30,})"
)
"""Text shaped like an API key, whatever its case.

OpenAI's `sk-…`, LM Studio's `lm-…`, Groq's `gsk_…`, Hugging Face's `hf_…`, GitHub's `ghp_…`,
xAI's `xai-…`, Google's `AIza…`."""
KEY_MARKS = ("sk-", "lm-", "pk-", "rk-", "gsk", "hf_", "hf-", "ghp", "xai", "aiza")
"""What each of `KEY_SHAPE`'s shapes begins with, lower-cased: most texts hold none."""
KEY_LENGTH = 24
"""Characters of the shortest text taken for an API key by its shape alone (`KEY_SHAPE`)."""
SUBPROTOCOL_KEY = re.compile(r"(?i)([\w.-]*api[-_]?key\.)(?!sha256:)([^\s,;\"'\\<>&]+)")
"""A key carried as a WebSocket subprotocol, as browsers must: the prefix, then the key.

For example `Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.sk-…`."""


_KEY_BYTES = re.compile(KEY_SHAPE.pattern.encode("ascii"))
_NAME_BYTES = re.compile(rb"(?i)(?:" + FIELD_NAMES.encode("ascii") + rb")")
_VALUE_BYTES = re.compile(_STRING_VALUE.pattern.encode("ascii"), re.S)
_MARK_BYTES = tuple(m.encode("ascii") for m in KEY_MARKS)
_END_BYTES = tuple(e.encode("ascii") for e in _FIELD_ENDS)
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")
_NAME_REACH = 128
"""Bytes a credential field's name may take before its last word (`key"`)."""
WINDOW = 1 << 20
"""Bytes looked through at a time: each is lower-cased as a copy, so memory stays bounded."""
OVERLAP = 16 << 10
"""Bytes each window shares with the next, so nothing a window boundary cuts is missed.

That is more than a field's name, colon and value: `_STRING_VALUE` takes 4096 characters,
escaped at most two bytes each."""
MAX_FOUND = 256
"""Credentials taken from one body or message at most.

Each one scrubbed costs every text of the exchange a look, so a body stuffed with key-shaped
text costs no more than this many."""


def credentials_in(data: bytes, start: int = 0) -> list[str]:
    """Find the credentials in `data` from `start` on, whatever the bytes around them are.

    Any that begins up to `OVERLAP` bytes before it counts too, so one `start` cuts is whole.
    They are the API keys shaped as `KEY_SHAPE` says, at least `KEY_LENGTH` long, and the string
    values of credential-named JSON fields (`FIELD_NAMES`), found without parsing.

    Time is linear in the bytes: a window with none of the bytes that stand beside a
    credential (`_BESIDE`: a base64 upload's long middle has none) is passed over at the
    speed of `memchr`; in the others, only where one of a few words is (`KEY_MARKS`, the
    ends of `_FIELD_ENDS`, found by `bytes.find`) is a compiled bytes pattern matched, at
    most `_LOOKS` times a window, and a key's match is never started again inside the one
    before it."""
    found: dict[str, None] = {}
    at = max(0, start - OVERLAP)
    while at < len(data) and len(found) < MAX_FOUND:
        window = data[at : at + WINDOW + OVERLAP]
        if any(window.find(b) != -1 for b in _BESIDE):
            lowered = window.lower()
            keys = _window_keys(window, lowered)
            fields = _window_fields(window, lowered) if window.find(b'"') != -1 else []
            for value in (*keys, *fields):
                found.setdefault(value, None)
        at += WINDOW
    return list(found)[:MAX_FOUND]


_BESIDE = (b'"', b"-", b"_", b"=", b":", b" ", b"\n", b",", b"&")
"""Bytes a text with a credential in it holds; a window with none of them is passed over.

They are a JSON field's quote, the dash or underscore of a key's prefix in `KEY_SHAPE`, and
what ends the text before a key that has no prefix, such as `AIza…`: a `=`, `:`, space,
line break, comma or `&`. The base64 of an upload holds none of them but its final `=`, so an
`AIza…` amid it, with none of them, is not looked for."""
_LOOKS = WINDOW // 256
"""Places of a window a pattern is matched at, at most.

A window crowded past this with what only begins like a credential is looked at no further,
so its cost stays bounded."""


def _window_keys(window: bytes, lowered: bytes) -> list[str]:
    marks = _positions(lowered, _MARK_BYTES)
    out, done = [], 0
    for at in marks:
        if at < done or (at > 0 and lowered[at - 1] in _WORD_BYTES):
            continue
        m = _KEY_BYTES.match(window, at)
        if m is not None:
            done = m.end()
            if len(m[0]) >= KEY_LENGTH:
                out.append(m[0].decode("ascii"))
    return out


def _window_fields(window: bytes, lowered: bytes) -> list[str]:
    out = []
    for at in _positions(lowered, _END_BYTES):
        close = lowered.index(b'"', at)
        open_ = lowered.rfind(b'"', max(0, at - _NAME_REACH), at)
        if open_ < 0 or not _NAME_BYTES.fullmatch(window, open_ + 1, close):
            continue
        m = _VALUE_BYTES.match(window, close + 1)
        if m is not None and m[2]:
            text = m[1].decode("utf-8", "replace")
            try:
                out.append(json.loads(f'"{text}"'))
            except ValueError:
                out.append(text)
    return out


def _positions(lowered: bytes, words: tuple[bytes, ...]) -> list[int]:
    """Find where the first `_LOOKS` of `words` are in `lowered`, in order."""
    out = []
    for word in words:
        at, left = lowered.find(word), _LOOKS
        while at != -1 and left:
            out.append(at)
            at, left = lowered.find(word, at + 1), left - 1
    return sorted(out)[:_LOOKS]
