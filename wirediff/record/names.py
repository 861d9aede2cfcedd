"""Which names and shapes are credentials: headers, query parameters, body fields, and the
shapes API keys have. Written once, read by the record's redaction (`wirediff.record.redact`)
and by the scrub of everything wirediff writes (`scrub_output`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

__all__ = [
    "AUTH_HEADERS",
    "FIELD_NAMES",
    "KEY_PREFIX",
    "KEY_SHAPE",
    "SECRET_FIELD",
    "SECRET_HEADERS",
    "SECRET_HEADER_NAME",
    "SECRET_QUERY",
    "SUBPROTOCOL_KEY",
    "ascii_lower",
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
"""Other credential-looking header names (x-goog-api-key, x-auth-token, x-client-secret…);
not x-ratelimit-*-tokens, whose values are evidence."""
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
"""Body fields (JSON, forms, WebSocket messages) whose value is a credential: `api_key`,
`openai_api_key`, `key`, `openai_key`, `client_secret`, `password`, `token`,
`authorization`, `credentials` (any case); not `prompt_cache_key` or `max_tokens`."""
SECRET_FIELD = re.compile(rf"(?i)^(?:{FIELD_NAMES})$")
_FIELD_NAME = re.compile(rf"(?i)(?:{FIELD_NAMES})")
_COLON = re.compile(r"\s*:")
_FIELD_ENDS = (
    *('key"', 'secret"', 'password"', 'passwd"', 'token"', 'credential"', 'credentials"'),
    'authorization"',
)
"""Each name `FIELD_NAMES` matches ends with one of these, lower-cased and followed by the
key's closing quote: a text without any of them names no such field (a substring test is a
tenth of the regex's cost; `"prompt_tokens"` passes it)."""


def ascii_lower(text: str) -> str:
    """`text` lower-cased, each character where it was (`str.lower` makes `İ` two)."""
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_LOWER)


_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def _named_fields(text: str, lowered: str) -> Iterator[int]:
    """Where each key of JSON-like `text` that names a credential field ends (its closing
    quote, a colon after it). Only the few places a name could end are looked at, never
    every quote of the text."""
    for end in _FIELD_ENDS:
        at = lowered.find(end)
        while at != -1:
            close = at + len(end) - 1
            open_ = lowered.rfind('"', 0, at)
            if _FIELD_NAME.fullmatch(text, open_ + 1, close) and _COLON.match(lowered, close + 1):
                yield close
            at = lowered.find(end, close + 1)


def may_hold_secret_fields(text: str) -> bool:
    """Cheap pre-check on raw JSON text before walking it for credential fields: some key
    (`"name":`) is a credential field's name."""
    for _ in _named_fields(text, ascii_lower(text)):
        return True
    return False


_STRING_VALUE = re.compile(r'\s*:\s*"((?:[^"\\]|\\.){1,4096}?)("|$)', re.S)
"""A string value after a key: whole, or cut by the end of the text."""


def field_values(text: str) -> list[str]:
    """String values of the credential-named fields of JSON-like text, found without
    parsing it: so also in JSON cut at a cap (a value the cut ends is kept as far as it
    goes), or text that is not quite JSON."""
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
"""What a key may begin with that a server may leave out when it quotes the key: `sk-`,
`sk-proj-`, `sk-ant-api03-`, `pk_live_` (a vendor's mark, then a kind of key)."""
KEY_SHAPE = re.compile(
    r"(?i)(?<![\w-])(?:(?:sk|lm|pk|rk)-[\w\-*.]{6,}|(?:gsk|hf|ghp|xai)[_-][A-Za-z0-9]{16,}"
    r"|AIza[\w-]{30,})"
)
"""Text shaped like an API key whatever its case: OpenAI's `sk-…` (LM Studio's `lm-…`),
Groq's `gsk_…`, Hugging Face's `hf_…`, GitHub's `ghp_…`, xAI's `xai-…`, Google's `AIza…`."""
SUBPROTOCOL_KEY = re.compile(r"(?i)([\w.-]*api[-_]?key\.)(?!sha256:)([^\s,;\"'\\<>&]+)")
"""A key carried as a WebSocket subprotocol, as browsers must (`Sec-WebSocket-Protocol:
realtime, openai-insecure-api-key.sk-…`): the prefix, then the key."""
