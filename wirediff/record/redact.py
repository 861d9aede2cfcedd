"""Secrets never reach disk: header values, URL credentials, and any echo of them in a body,
an event or an error message become fingerprints.

The secrets of an exchange are its credential headers (a Basic header also as the decoded
`user:password` and the password), URL credentials, and the values of credential-named
request fields (`api_key`, `password`, …). An echo is found in every form a server may
write it: as sent, JSON-escaped (also with `\\/`, and any `\\uXXXX` escape, by decoding
JSON string literals), URL-encoded, and base64 (at any alignment inside a longer base64).

A fingerprint is enough to tell "same key" from "different key" across hops and runs,
which is all a compatibility diagnosis needs.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, unquote, urlencode, urlsplit, urlunsplit

from wirediff._types import HeaderList

__all__ = [
    "AUTH_HEADERS",
    "FINGERPRINT_HEX",
    "SECRET_FIELD",
    "SECRET_QUERY",
    "fingerprint",
    "form_secrets",
    "is_fingerprint",
    "json_secrets",
    "may_hold_secret_fields",
    "multipart_secrets",
    "redact_fields",
    "redact_headers",
    "redact_log_text",
    "redact_patterns",
    "redact_url",
    "redact_value",
    "scrub_headers",
    "scrub_text",
    "secret_values",
    "split_scheme",
    "with_fields",
]

SECRET_HEADERS = frozenset(
    {"authorization", "api-key", "x-api-key", "cookie", "set-cookie", "proxy-authorization"}
)
# Other credential-looking names (x-goog-api-key, x-auth-token, x-client-secret…); not
# x-ratelimit-*-tokens, whose values are evidence.
SECRET_HEADER_NAME = re.compile(
    r"(?i)(authorization|cookie|api[-_]?key|(^|[-_])(auth|access|session|id)?[-_]?token$|secret"
    r"|password|subscription[-_]?key|(^|[-_])auth$|(?<!idempotency)(^|[-_])key$)"
)
AUTH_HEADERS = ("authorization", "api-key", "x-api-key", "proxy-authorization")
SECRET_QUERY = frozenset(
    {
        *("key", "api_key", "api-key", "apikey", "x-api-key", "token", "secret", "signature"),
        *("access_token", "access-token", "refresh_token", "auth_token", "id_token", "sig"),
        *("client_secret", "client-secret", "password", "passwd", "private_key"),
    }
)
_SCHEMES = ("bearer", "basic", "token", "key")
MIN_SECRET = 6
"""Shorter secrets are scrubbed only where they stand as a whole token (not inside a word:
`pw12` in `pw123` stays), and without their base64 forms, which would match any base64."""


FINGERPRINT_HEX = 12
"""Hex digits of the SHA-256 a fingerprint keeps: short, and still no collision in practice."""


def fingerprint(secret: str) -> str:
    """A short, stable, one-way name for a secret."""
    digest = hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()
    return "sha256:" + digest[:FINGERPRINT_HEX]


def split_scheme(value: str) -> tuple[str | None, str]:
    """`"Bearer sk-x"` → `("Bearer", "sk-x")`; a bare key has no scheme."""
    head, *rest = value.strip().split(None, 1) or [""]
    if rest and head.lower() in _SCHEMES:
        return head, rest[0].strip()
    return None, value.strip()


def redact_value(value: str) -> str:
    """Keep the auth scheme (it is evidence), fingerprint the credential."""
    scheme, secret = split_scheme(value)
    fp = fingerprint(secret) if secret else "<empty>"
    return f"{scheme} {fp}" if scheme else fp


def is_secret_header(name: str, extra: frozenset[str] = frozenset()) -> bool:
    return _secret_name(name) or (bool(extra) and name.lower() in extra)


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    """Header names repeat from exchange to exchange: decide each once."""
    low = name.lower()
    return low in SECRET_HEADERS or bool(SECRET_HEADER_NAME.search(low))


def redact_headers(
    headers: Iterable[tuple[str, str]], extra: frozenset[str] = frozenset()
) -> HeaderList:
    """Lower-case names, wire order kept, secret values fingerprinted."""
    if extra:
        return [
            [name.lower(), redact_value(value) if is_secret_header(name, extra) else value]
            for name, value in headers
        ]
    return [
        [name.lower(), redact_value(value) if _secret_name(name) else value]
        for name, value in headers
    ]


def redact_url(url: str) -> str:
    """Fingerprint credentials in the query string, userinfo and path segments shaped as
    keys (`/v1/keys/sk-…`) (works on paths too)."""
    parts = urlsplit(url)
    netloc = parts.netloc
    path = _KEY_SEGMENT.sub(lambda m: fingerprint(m.group(0)), parts.path)
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        netloc = f"{fingerprint(userinfo)}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in SECRET_QUERY for k, _ in pairs):
            query = urlencode(
                [(k, fingerprint(v) if k.lower() in SECRET_QUERY else v) for k, v in pairs]
            )
    if netloc == parts.netloc and query == parts.query and path == parts.path:
        return url
    return urlunsplit((parts.scheme, netloc, path, query, parts.fragment))


_KEY_SEGMENT = re.compile(r"(?<=/)(?:sk|lm|pk|rk)-[\w\-.]{16,}(?=/|$)")
"""A path segment shaped as an API key (OpenAI's `sk-…`, LM Studio's `lm-…`)."""


def basic_credentials(value: str) -> list[str]:
    """A Basic header's decoded `user:password`, and the password (or the user, when the
    password is empty: a key sent as the user name)."""
    scheme, token = split_scheme(value)
    if scheme is None or scheme.lower() != "basic":
        return []
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return []
    user, _, password = decoded.partition(":")
    return [decoded, password or user]


def secret_values(
    headers: Iterable[tuple[str, str]],
    url: str,
    extra: frozenset[str] = frozenset(),
    fields: Iterable[str] = (),
) -> dict[str, str]:
    """Every secret this exchange carries, in every form an echo may take (form →
    fingerprint of the secret), to scrub echoes from bodies, events, headers and
    messages: a 401 that quotes the key back, say. `fields`: the values of the request's
    credential-named fields (`field_secrets`, `form_secrets`)."""
    found: set[str] = set(fields)
    for name, value in headers:
        if not is_secret_header(name, extra):
            continue
        low = name.lower()
        if low in ("cookie", "set-cookie"):
            crumbs = value.split(";") if low == "cookie" else value.split(";", 1)[:1]
            found.update(c.partition("=")[2].strip() for c in crumbs)
        found.add(split_scheme(value)[1])
        scheme_and_credential = value.split()
        if len(scheme_and_credential) == 2:  # a scheme this module does not know: `ApiKey k`
            found.add(scheme_and_credential[1])
        found.update(basic_credentials(value))
    parts = urlsplit(url)
    if "@" in parts.netloc:
        found.add(parts.netloc.rpartition("@")[0])
        found.add(parts.netloc.rpartition("@")[0].partition(":")[2])
    found.update(
        v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() in SECRET_QUERY
    )
    return dict(_forms(frozenset(found)))


def with_fields(secrets: dict[str, str], fields: Iterable[str]) -> dict[str, str]:
    """`secrets` (`secret_values`) and every form of each of `fields`, longest first."""
    forms = {**secret_values([], "", fields=fields), **secrets}
    return dict(sorted(forms.items(), key=lambda kv: len(kv[0]), reverse=True))


@functools.lru_cache(maxsize=256)
def _forms(found: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """Every form of every secret in `found` with its secret's fingerprint, longest first
    (so a key is replaced before any secret that is a part of it). The same keys come with
    exchange after exchange: worked out once."""
    forms: dict[str, str] = {}
    for secret in sorted(found):
        if secret and not secret.isspace():
            fp = fingerprint(secret)
            for form in secret_forms(secret) if len(secret) >= MIN_SECRET else (secret,):
                forms.setdefault(form, fp)
    return tuple(sorted(forms.items(), key=lambda kv: len(kv[0]), reverse=True))


@functools.lru_cache(maxsize=256)
def secret_forms(secret: str) -> tuple[str, ...]:
    """`secret` as sent and as a server may echo it: JSON-escaped (with and without `\\/`),
    URL-encoded, hex, and base64 (standard and URL-safe: the characters that only the secret
    decides, at each of the three alignments it may have inside a longer base64 text)."""
    forms = {secret}
    for ascii_only in (True, False):
        escaped = json.dumps(secret, ensure_ascii=ascii_only)[1:-1]
        forms.update((escaped, escaped.replace("/", "\\/")))
    for enc in (quote(secret, safe=""), quote_plus(secret)):
        forms.update((enc, _LOWER_HEX.sub(lambda m: m.group(0).lower(), enc)))
    raw = secret.encode("utf-8", "surrogateescape")
    forms.update((raw.hex(), raw.hex().upper()))
    for lead in range(3):
        b64 = base64.b64encode(bytes(lead) + raw).decode("ascii")
        core = b64[(8 * lead + 5) // 6 : (8 * (lead + len(raw))) // 6]
        forms.update((core, core.replace("+", "-").replace("/", "_")))
    return tuple(f for f in forms if len(f) >= MIN_SECRET)


_LOWER_HEX = re.compile(r"%[0-9A-F]{2}")


def field_secrets(body: Any) -> list[str]:
    """String values of credential-named fields anywhere in a parsed request body."""
    out: list[str] = []
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(v, str) and isinstance(k, str) and SECRET_FIELD.match(k):
                    out.append(v)
                elif isinstance(v, dict | list):
                    stack.append(v)
        elif isinstance(node, list):
            stack.extend(v for v in node if isinstance(v, dict | list))
    return out


def json_secrets(text: str) -> list[str]:
    """Values of credential-named fields of JSON text (`{"api_key": …}`); none when it is
    not JSON, or too deep to parse."""
    if text[:1] not in "{[" or not may_hold_secret_fields(text):
        return []
    try:
        return field_secrets(json.loads(text))
    except (ValueError, RecursionError):
        return []


def form_secrets(text: str) -> list[str]:
    """Values of credential-named fields of a form-encoded body (`api_key=…&…`)."""
    return [v for k, v in parse_qsl(text, keep_blank_values=True) if SECRET_FIELD.match(k)]


_MULTIPART_FIELD = re.compile(
    rb'(?i)content-disposition:[ \t]*form-data;[ \t]*name="([^"\r\n]{1,100})"[^\r\n]*\r?\n'
    rb"(?:[^\r\n]+\r?\n)*\r?\n([^\r\n]{0,4096})\r?\n--"
)


def multipart_secrets(content: bytes) -> list[str]:
    """Values of credential-named fields of a `multipart/form-data` body, each a line
    (a file part is no credential: its name is not one)."""
    return [
        value.decode("utf-8", "replace")
        for name, value in _MULTIPART_FIELD.findall(content)
        if SECRET_FIELD.match(name.decode("latin-1"))
    ]


def scrub_text(text: str, secrets: dict[str, str]) -> str:
    """`text` with every form of every secret replaced by its fingerprint, also where an
    encoder escaped any of its characters (`\\u00XX`, `%XX`; keys are ASCII)."""
    for secret, fp in secrets.items():
        if secret in text:
            text = (
                text.replace(secret, fp)
                if len(secret) >= MIN_SECRET
                else _token(secret).sub(fp, text)
            )
    if secrets and ("\\u00" in text or _percent_encoded(text, secrets)):
        for secret, fp in secrets.items():
            text = _escaped(secret).sub(fp, text)
    return text


_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def _percent_encoded(text: str, secrets: dict[str, str]) -> bool:
    """Whether a secret is in `text` with characters percent-encoded that need not be
    (`sk%2Dabc`, `%73%6B…`), which `secret_forms` does not spell out."""
    if "%" not in text or not _PERCENT_ESCAPE.search(text):
        return False
    decoded = unquote(text)
    return any(secret in decoded for secret in secrets)


@functools.lru_cache(maxsize=1024)
def _token(secret: str) -> re.Pattern[str]:
    """A short `secret` where it stands as a whole token: no letter or digit beside it."""
    return re.compile(rf"(?<![0-9A-Za-z]){re.escape(secret)}(?![0-9A-Za-z])")


@functools.lru_cache(maxsize=1024)
def _escaped(secret: str) -> re.Pattern[str]:
    """`secret` with each character as it is, JSON-escaped (`\\u00XX`, `\\/`) or
    percent-encoded (`%2D`, `%2d`: an encoder may encode what it need not)."""
    parts = []
    for ch in secret:
        alts = [re.escape(ch)]
        if ord(ch) < 0x80:
            alts.append(f"%(?i:{ord(ch):02x})")
        if ord(ch) < 0x100:
            alts.append(f"\\\\u00(?i:{ord(ch):02x})")
        if ch == "/":
            alts.append(r"\\/")
        parts.append(f"(?:{'|'.join(alts)})")
    if len(secret) < MIN_SECRET:
        return re.compile(rf"(?<![0-9A-Za-z]){''.join(parts)}(?![0-9A-Za-z])")
    return re.compile("".join(parts))


def scrub_headers(headers: HeaderList, secrets: dict[str, str]) -> HeaderList:
    """`[[name, value]]` with echoed secrets fingerprinted in the values (flat, cheap)."""
    if not secrets:
        return headers
    joined = "\n".join(v for _, v in headers)
    if not any(secret in joined for secret in secrets) and not (
        "\\u00" in joined or _percent_encoded(joined, secrets)
    ):
        return headers  # no echo in any value: one look at all of them
    return [[k, scrub_text(v, secrets)] for k, v in headers]


def scrub(value: Any, secrets: dict[str, str]) -> Any:
    """`value` with every secret replaced by its fingerprint, in every string (keys too)."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    if isinstance(value, dict):
        return {scrub_text(k, secrets): scrub(v, secrets) for k, v in value.items()}
    return value


_FIELD_NAMES = (
    r"(x[-_]?)?api[-_]?key|secret|client[-_]?secret|password|passwd|private[-_]?key"
    r"|(access|refresh|auth|session|bearer|id)?[-_]?token|credentials?"
)
SECRET_FIELD = re.compile(rf"(?i)^({_FIELD_NAMES})$")
_FIELD_NAME = re.compile(rf"(?i)(?:{_FIELD_NAMES})")
_COLON = re.compile(r"\s*:")


_FIELD_ENDS = ('key"', 'secret"', 'password"', 'passwd"', 'token"', 'credential"', 'credentials"')
"""Each name `_FIELD_NAMES` matches ends with one of these, lower-cased and followed by the
key's closing quote: a text without any of them names no such field (a substring test is a
tenth of the regex's cost; `"prompt_tokens"` passes it)."""


def may_hold_secret_fields(text: str) -> bool:
    """Cheap pre-check on raw JSON text before walking it for `redact_fields`: some key
    (`"name":`) is a credential field's name. Only the few places a name could end are
    looked at, never every quote of the text."""
    lowered = text.lower()
    for end in _FIELD_ENDS:
        at = lowered.find(end)
        while at != -1:
            close = at + len(end) - 1
            open_ = lowered.rfind('"', 0, at)
            if _FIELD_NAME.fullmatch(text, open_ + 1, close) and _COLON.match(lowered, close + 1):
                return True
            at = lowered.find(end, close + 1)
    return False


def is_fingerprint(value: str) -> bool:
    return _FINGERPRINT.fullmatch(value) is not None


_FINGERPRINT = re.compile(rf"sha256:[0-9a-f]{{{FINGERPRINT_HEX}}}")


def redact_fields(value: Any) -> Any:
    """Fingerprint string values of credential-named fields (`{"api_key": "…"}`)."""
    if isinstance(value, list):
        return [redact_fields(v) for v in value]
    if isinstance(value, dict):
        return {
            k: fingerprint(v)
            if isinstance(v, str) and v and SECRET_FIELD.match(k) and not is_fingerprint(v)
            else redact_fields(v)
            for k, v in value.items()
        }
    return value


# Second layer, for text shown to people (reports, diagnoses): anything *shaped* like a
# credential, for values the capture could not know (another client's key, say).
SECRET_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?i)(api key provided:\s*)\S+"), r"\1<redacted>"),
    (re.compile(r"(?i)\b(bearer|basic|token)\s+(?!sha256:)[\w.~+/=\-*]{6,}"), r"\1 <redacted>"),
    (re.compile(r"\b(sk|lm|pk|rk)-[\w\-*.]{6,}"), "<redacted>"),
    (
        re.compile(
            r"(?i)([?&](?:key|api_key|api-key|apikey|access_token|token)=)(?!sha256)[^&\s\"']+"
        ),
        r"\1<redacted>",
    ),
    (
        re.compile(
            r"(?i)((?:api[_-]?key|x-api-key)[\"']?\s*[:=]\s*[\"']?)(?!sha256:)[^\s\"',&]{6,}"
        ),
        r"\1<redacted>",
    ),
]


_NEEDLES = ("api key provided", "bearer", "basic", "token", "key=", "apikey", "api_key", "api-key")
"""What every case-insensitive pattern of `SECRET_PATTERNS` needs in a text (lowercase)."""
_PREFIXES = ("sk-", "lm-", "pk-", "rk-")
"""What the case-sensitive one needs."""


def redact_patterns(text: str) -> str:
    """`text` with each of `SECRET_PATTERNS` replaced; an ASCII text holding none of the
    words they need is returned as it is (most are: the patterns cost 16 µs on a snippet,
    the words 1)."""
    if text.isascii():
        lower = text.lower()
        if not any(w in lower for w in _NEEDLES) and not any(p in text for p in _PREFIXES):
            return text
    for rx, repl in SECRET_PATTERNS:
        text = rx.sub(repl, text)
    return text


_ANSI = r"(?:\x1b\[[0-9;]*m)*"
_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:" + "|".join(re.escape(n) for n in sorted(SECRET_QUERY)) + r")=)([^&\s#\"'\x1b]+)"
)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/@\s\"'\x1b]+)@")
_HEADER_LINE = re.compile(rf"(?m)^(\s*{_ANSI})([A-Za-z0-9_-]+)({_ANSI}:\s*{_ANSI})([^\r\n\x1b]*)")


def redact_log_text(text: str) -> str:
    """A line mitmproxy is about to print (a flow's request line, its headers, a message),
    with credentials fingerprinted: key-like query values, URL userinfo, credential
    headers; then anything shaped like a credential (`redact_patterns`)."""
    if not text:
        return text
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + fingerprint(unquote(m.group(2))), text)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{fingerprint(unquote(m.group(2)))}@", text)
    text = _HEADER_LINE.sub(_redact_header_line, text)
    return redact_patterns(text)


def _redact_header_line(m: re.Match[str]) -> str:
    if not is_secret_header(m.group(2)):
        return m.group(0)
    return m.group(1) + m.group(2) + m.group(3) + redact_value(m.group(4))
