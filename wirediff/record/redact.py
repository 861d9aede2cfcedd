"""Fingerprint secrets so that they never reach disk.

Header values, URL credentials, and any echo of them in a body, an event or an error message
become fingerprints.

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

from wirediff._types import HeaderList, Record
from wirediff.record.names import (
    KEY_LENGTH,
    KEY_MARKS,
    KEY_PREFIX,
    KEY_SHAPE,
    SECRET_FIELD,
    SECRET_HEADER_NAME,
    SECRET_HEADERS,
    SECRET_QUERY,
    SUBPROTOCOL_KEY,
    field_values,
    may_hold_secret_fields,
)

__all__ = [
    "FINGERPRINT_HEX",
    "PREFIXLESS",
    "SUBPROTOCOLS",
    "body_secrets",
    "fingerprint",
    "fingerprint_headers",
    "form_secrets",
    "is_fingerprint",
    "json_secrets",
    "key_shapes",
    "multipart_secrets",
    "present_secrets",
    "redact_fields",
    "redact_headers",
    "redact_url",
    "redact_value",
    "scrub_headers",
    "scrub_text",
    "secret_values",
    "split_scheme",
    "with_fields",
]

_SCHEMES = ("bearer", "basic", "token", "key")
MIN_SECRET = 6
"""Secrets shorter than this are scrubbed only where they stand as a whole token.

Not inside a word: `pw12` in `pw123` stays. Nor are their base64 forms scrubbed, which would
match any base64."""


FINGERPRINT_HEX = 12
"""Hex digits of the SHA-256 a fingerprint keeps: short, and still no collision in practice."""


def fingerprint(secret: str) -> str:
    """Name a secret shortly, stably and one-way."""
    digest = hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()
    return "sha256:" + digest[:FINGERPRINT_HEX]


def split_scheme(value: str) -> tuple[str | None, str]:
    """Split `"Bearer sk-x"` into `("Bearer", "sk-x")`; a bare key has no scheme."""
    head, *rest = value.strip().split(None, 1) or [""]
    if rest and head.lower() in _SCHEMES:
        return head, rest[0].strip()
    return None, value.strip()


_EMPTY = "<empty>"
"""What an empty credential is recorded as."""


def redact_value(value: str) -> str:
    """Keep the auth scheme, which is evidence, and fingerprint the credential."""
    scheme, secret = split_scheme(value)
    fp = fingerprint(secret) if secret else _EMPTY
    return f"{scheme} {fp}" if scheme else fp


def is_secret_header(name: str, extra: frozenset[str] = frozenset()) -> bool:
    return _secret_name(name) or (bool(extra) and name.lower() in extra)


@functools.lru_cache(maxsize=4096)
def _secret_name(name: str) -> bool:
    """Decide once whether a header name is secret: names repeat from exchange to exchange."""
    low = name.lower()
    return low in SECRET_HEADERS or bool(SECRET_HEADER_NAME.search(low))


SUBPROTOCOLS = "sec-websocket-protocol"
"""The handshake header a browser's WebSocket carries its key in (`SUBPROTOCOL_KEY`)."""


def redact_headers(
    headers: Iterable[tuple[str, str]], extra: frozenset[str] = frozenset()
) -> HeaderList:
    """Lower-case header names, keep wire order, and fingerprint secret values.

    A key offered as a WebSocket subprotocol is fingerprinted too; the other subprotocols are
    kept."""
    out: HeaderList = []
    for name, value in headers:
        low = name.lower()
        if _secret_name(name) or (extra and low in extra):
            value = redact_value(value)
        elif low == SUBPROTOCOLS:
            value = SUBPROTOCOL_KEY.sub(lambda m: m[1] + fingerprint(m[2]), value)
        out.append([low, value])
    return out


def redact_url(url: str) -> str:
    """Fingerprint credentials in the query string, userinfo and key-shaped path segments.

    A path segment such as `/v1/keys/sk-…` is one; this works on paths too."""
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
    """Decode a Basic header's `user:password`, and return it with the password.

    When the password is empty, the user comes instead: a key sent as the user name."""
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
    """Find every secret this exchange carries, in every form an echo may take.

    Each form, lower-cased, maps to the fingerprint of the secret, to scrub echoes from bodies,
    events, headers and messages: a 401 that quotes the key back, say. `fields`: the values of
    the request's credential-named fields and the keys its body holds (`body_secrets`)."""
    found: set[str] = set(fields)
    for name, value in headers:
        if name.lower() == SUBPROTOCOLS:
            found.update(m[2] for m in SUBPROTOCOL_KEY.finditer(value))
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
    """Add to `secrets` (`secret_values`) every form of each of `fields`, longest first."""
    forms = {**secret_values([], "", fields=fields), **secrets}
    return dict(sorted(forms.items(), key=lambda kv: len(kv[0]), reverse=True))


@functools.lru_cache(maxsize=256)
def _forms(found: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """Give every form of every secret in `found` with its secret's fingerprint, longest first.

    So a key is replaced before any secret that is a part of it. The same keys come with
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
    """Spell `secret` as sent and as a server may echo it, lower-cased.

    `scrub_text` finds them in any case, since a server may quote a key upper-cased. The forms
    are JSON-escaped (with and without `\\/`), URL-encoded, hex, and base64 (standard and
    URL-safe: the characters that only the secret decides, at each of the three alignments it
    may have inside a longer base64 text); and as text without the prefix that marks it a key
    (`sk-`, `sk-proj-`: `KEY_PREFIX`), as a server may quote it."""
    forms = set(_as_text(secret))
    raw = secret.encode("utf-8", "surrogateescape")
    forms.add(raw.hex())
    for lead in range(3):
        b64 = base64.b64encode(bytes(lead) + raw).decode("ascii")
        core = b64[(8 * lead + 5) // 6 : (8 * (lead + len(raw))) // 6]
        forms.update((core, core.replace("+", "-").replace("/", "_")))
    for rest in _variants(secret)[1:]:
        forms.update(_as_text(rest))
    return tuple({f.lower() for f in forms if len(f) >= MIN_SECRET})


def _as_text(secret: str) -> set[str]:
    """Spell `secret` as it is, JSON-escaped and URL-encoded."""
    forms = {secret, quote(secret, safe=""), quote_plus(secret)}
    for ascii_only in (True, False):
        escaped = json.dumps(secret, ensure_ascii=ascii_only)[1:-1]
        forms.update((escaped, escaped.replace("/", "\\/")))
    return forms


PREFIXLESS = 12
"""Characters a key must keep without its prefix to be looked for so.

Fewer would match text that is no echo of it."""


def _variants(secret: str) -> list[str]:
    """Give `secret`, and what is left of it without its vendor's mark and without its kind.

    `sk-proj-abc…` gives `proj-abc…` and `abc…`, when that is still long enough to be it."""
    m = KEY_PREFIX.match(secret)
    if m is None:
        return [secret]
    cuts = {m.end(1), m.end()}
    return [secret, *(secret[at:] for at in sorted(cuts) if len(secret) - at >= PREFIXLESS)]


def field_secrets(body: Any) -> list[str]:
    """Find the string values of credential-named fields anywhere in a parsed request body."""
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
    """Find the values of credential-named fields of JSON text, and the API keys anywhere in it.

    Fields such as `{"api_key": …}` are found also when it is cut at a cap or not quite JSON
    (`field_values`)."""
    found = key_shapes(text)
    if text.lstrip()[:1] in ("{", "[") and may_hold_secret_fields(text):
        try:
            found += field_secrets(json.loads(text))
        except (ValueError, RecursionError):
            found += field_values(text)
    return found


def key_shapes(text: str) -> list[str]:
    """Find the API keys in `text` by their shape (`KEY_SHAPE`), at least `KEY_LENGTH` long."""
    lowered = text.lower()
    if not any(mark in lowered for mark in KEY_MARKS):
        return []
    return [m[0] for m in KEY_SHAPE.finditer(text) if len(m[0]) >= KEY_LENGTH]


def body_secrets(content: bytes | None, content_type: str) -> list[str]:
    """Find the credentials in the part of a request body a record keeps.

    They are the values of its credential-named fields (JSON, also cut or not quite JSON; a
    form; the fields of a multipart form: an upload's `api_key` beside its file) and the API
    keys it holds."""
    if not content:
        return []
    kind = content_type.lower()
    if "multipart/form-data" in kind:
        return multipart_secrets(content) + key_shapes(content.decode("latin-1"))
    text = content.decode("utf-8", "replace")
    if "x-www-form-urlencoded" in kind:
        return form_secrets(text) + key_shapes(text)
    return json_secrets(text)


def form_secrets(text: str) -> list[str]:
    """Find the values of credential-named fields of a form-encoded body: `api_key=…&…`."""
    return [v for k, v in parse_qsl(text, keep_blank_values=True) if SECRET_FIELD.match(k)]


_MULTIPART_FIELD = re.compile(
    rb'(?i)content-disposition:[ \t]*form-data;[ \t]*name="([^"\r\n]{1,100})"[^\r\n]*\r?\n'
    rb"(?:[^\r\n]+\r?\n)*\r?\n([^\r\n]{0,4096})\r?\n--"
)


def multipart_secrets(content: bytes) -> list[str]:
    """Find the values of credential-named fields of a `multipart/form-data` body, each a line.

    A file part is no credential: its name is not one."""
    return [
        value.decode("utf-8", "replace")
        for name, value in _MULTIPART_FIELD.findall(content)
        if SECRET_FIELD.match(name.decode("latin-1"))
    ]


def scrub_text(text: str, secrets: dict[str, str]) -> str:
    """Replace every form of every secret in `text` by its fingerprint, in any case.

    The forms are those of `secret_values`, lower-cased. They are replaced also where an encoder
    escaped any of their characters as `\\u00XX` or `%XX`; keys are ASCII."""
    if not secrets:
        return text
    lowered = text.lower()
    if "\\u00" in lowered or _percent_encoded(lowered, secrets):  # first: a whole key so
        for secret, fp in secrets.items():
            text = _escaped(secret).sub(fp, text)
        lowered = text.lower()
    for secret, fp in secrets.items():
        if secret in lowered:
            text = (_anycase if len(secret) >= MIN_SECRET else _token)(secret).sub(fp, text)
            lowered = text.lower()
    return text


_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def present_secrets(text: str, secrets: dict[str, str]) -> dict[str, str]:
    """Keep the part of `secrets` that `scrub_text` may find in `text`.

    That is all of them where an encoder escaped characters in it; it is all that scrubbing
    pieces of `text` one by one needs."""
    if not secrets:
        return secrets
    lowered = text.lower()
    if "\\u00" in lowered or _percent_encoded(lowered, secrets):
        return secrets
    return {secret: fp for secret, fp in secrets.items() if secret in lowered}


def _percent_encoded(text: str, secrets: dict[str, str]) -> bool:
    """Tell whether a secret is in the lower-cased `text` with needless percent-encoding.

    `secret_forms` does not spell out forms such as `sk%2Dabc` or `%73%6B…`."""
    if "%" not in text or not _PERCENT_ESCAPE.search(text):
        return False
    decoded = unquote(text).lower()
    return any(secret in decoded for secret in secrets)


@functools.lru_cache(maxsize=1024)
def _anycase(secret: str) -> re.Pattern[str]:
    return re.compile(re.escape(secret), re.IGNORECASE)


@functools.lru_cache(maxsize=1024)
def _token(secret: str) -> re.Pattern[str]:
    """Match a short `secret` where it stands as a whole token: no letter or digit beside it."""
    return re.compile(rf"(?<![0-9A-Za-z]){re.escape(secret)}(?![0-9A-Za-z])", re.IGNORECASE)


@functools.lru_cache(maxsize=1024)
def _escaped(secret: str) -> re.Pattern[str]:
    """Match `secret` in any case, each character as it is, JSON-escaped or percent-encoded.

    JSON escapes are `\\u00XX` and `\\/`; percent escapes are `%2D` or `%2d`, as an encoder may
    encode what it need not."""
    parts = []
    for ch in secret:
        alts = [re.escape(ch)]
        for code in sorted({ord(ch.lower()), ord(ch.upper())} if ch.isascii() else {ord(ch)}):
            if code < 0x80:
                alts.append(f"%{code:02x}")
            if code < 0x100:
                alts.append(f"\\\\u00{code:02x}")
        if ch == "/":
            alts.append(r"\\/")
        parts.append(f"(?:{'|'.join(alts)})")
    if len(secret) < MIN_SECRET:
        return re.compile(rf"(?<![0-9A-Za-z]){''.join(parts)}(?![0-9A-Za-z])", re.IGNORECASE)
    return re.compile("".join(parts), re.IGNORECASE)


def scrub_headers(headers: HeaderList, secrets: dict[str, str]) -> HeaderList:
    """Fingerprint echoed secrets in the values of `[[name, value]]` headers, flat and cheap."""
    if not secrets:
        return headers
    joined = "\n".join(v for _, v in headers).lower()
    if not any(secret in joined for secret in secrets) and not (
        "\\u00" in joined or _percent_encoded(joined, secrets)
    ):
        return headers  # no echo in any value: one look at all of them
    return [[k, scrub_text(v, secrets)] for k, v in headers]


def fingerprint_headers(rec: Record) -> bool:
    """Fingerprint a record's secret header values that are not fingerprints yet, in place.

    A capture holds none; another tool's may (`["cookie", "sid=…"]`): they are made what the
    capture would have recorded. Tell whether one was."""
    changed = False
    for side, key in (
        ("request", "headers"),
        ("request", "forwarded_headers"),
        ("response", "headers"),
    ):
        part = rec.get(side)
        for pair in (part.get(key) if isinstance(part, dict) else None) or ():
            name, value = pair[0], pair[1]
            secret = split_scheme(value)[1]
            if _secret_name(name) and not (is_fingerprint(secret) or secret == _EMPTY):
                pair[1] = redact_value(value)
                changed = True
    return changed


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
