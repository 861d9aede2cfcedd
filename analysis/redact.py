"""Secrets never reach disk: header values and URL credentials become fingerprints.

A fingerprint is enough to tell "same key" from "different key" across hops and runs,
which is all a compatibility diagnosis needs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from analysis._types import HeaderList

SECRET_HEADERS = frozenset(
    {"authorization", "api-key", "x-api-key", "cookie", "set-cookie", "proxy-authorization"}
)
AUTH_HEADERS = ("authorization", "api-key", "x-api-key", "proxy-authorization")
SECRET_QUERY = frozenset({"key", "api_key", "api-key", "apikey", "access_token", "token"})
_SCHEMES = ("bearer", "basic", "token", "key")


def fingerprint(secret: str) -> str:
    """A short, stable, one-way name for a secret."""
    return "sha256:" + hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def split_scheme(value: str) -> tuple[str | None, str]:
    """`"Bearer sk-x"` → `("Bearer", "sk-x")`; a bare key has no scheme."""
    head, sep, rest = value.strip().partition(" ")
    if sep and head.lower() in _SCHEMES:
        return head, rest.strip()
    return None, value.strip()


def redact_value(value: str) -> str:
    """Keep the auth scheme (it is evidence), fingerprint the credential."""
    scheme, secret = split_scheme(value)
    fp = fingerprint(secret) if secret else "<empty>"
    return f"{scheme} {fp}" if scheme else fp


def redact_headers(
    headers: Iterable[tuple[str, str]], extra: frozenset[str] = frozenset()
) -> HeaderList:
    """Lower-case names, wire order kept, secret values fingerprinted."""
    secret = SECRET_HEADERS | extra
    out: HeaderList = []
    for name, value in headers:
        low = name.lower()
        out.append([low, redact_value(value) if low in secret else value])
    return out


def redact_url(url: str) -> str:
    """Fingerprint credentials in the query string and userinfo."""
    parts = urlsplit(url)
    netloc = parts.netloc
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
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
