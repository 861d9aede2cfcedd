"""Build the request to send for an original.

It is re-based onto the target, ids remapped, the model mapped, re-keyed; what the capture holds
only as a fingerprint is left out."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote_plus

import httpx

from wirediff._support import as_bytes
from wirediff._types import JSON, Record
from wirediff.errors import PlanError
from wirediff.record.names import AUTH_HEADERS, SECRET_FIELD, SECRET_QUERY
from wirediff.record.redact import FINGERPRINT_HEX, is_fingerprint
from wirediff.record.tags import header_get, route
from wirediff.replay.paths import outside_reason, path_problem, remove_dot_segments, shown
from wirediff.replay.safety import SAFE_METHODS, is_stream
from wirediff.replay.slots import NOT_REFERENCES
from wirediff.replay.targets import Target

__all__ = [
    "DEFAULT_PREFIXES",
    "FINGERPRINT",
    "HOP_BY_HOP",
    "Outgoing",
    "merge_query",
    "prepare",
    "rebase",
    "secret_query",
    "target_problem",
    "url_bytes_escaped",
]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "content-encoding",
        "cookie",
        "x-wirediff-replay-of",
        "x-wirediff-label",
    }
)
"""Request headers never copied from the capture.

The transport's own, `content-encoding` too, since the capture holds the body decoded and it
is sent so; cookies, of which the capture holds only fingerprints; and wirediff's control
headers."""

FINGERPRINT = re.compile(rf"(\w+ )?sha256:[0-9a-f]{{{FINGERPRINT_HEX}}}")
"""A header value the capture replaced by its fingerprint (`redact_value`): not the value."""

DEFAULT_PREFIXES = frozenset({"/v1"})
"""The API prefix assumed for a session without any known route to learn it from."""


@dataclass(frozen=True)
class Outgoing:
    method: str
    url: str
    headers: list[tuple[str, str]]
    content: bytes | None
    model: str | None
    stream: bool
    dropped: tuple[str, ...] = ()
    """What the capture held only as a fingerprint and is therefore not sent.

    For example `header x-portkey-api-key`, `query parameter key`."""


def _remap(obj: JSON, mapping: Mapping[str, str], key: str = "") -> JSON:
    if isinstance(obj, str):
        return mapping.get(obj, obj) if key not in NOT_REFERENCES else obj
    if isinstance(obj, dict):
        return {k: _remap(v, mapping, str(k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_remap(v, mapping, key) for v in obj]
    return obj


def _prefix_of(path: str, prefixes: Collection[str]) -> str | None:
    """Return the longest of `prefixes` that `path` lies under, segment-wise, or None."""
    under = [p for p in prefixes if path == p or path.startswith(p + "/")]
    return max(under, key=len) if under else None


def _query_name(part: str) -> str:
    return unquote_plus(part.partition("=")[0])


def secret_query(path: str) -> list[str]:
    """Name the key-like query parameters in a captured path (`SECRET_QUERY`).

    Their values are fingerprints, and a key is never carried to another target anyway."""
    query = path.partition("?")[2]
    return [
        n for n in map(_query_name, query.split("&") if query else ()) if n.lower() in SECRET_QUERY
    ]


def merge_query(query: str, target: Target, mapping: Mapping[str, str]) -> str:
    """Merge the original's query with the target URL's own, which comes last.

    The original's loses its key-like parameters and those the target URL sets; its ids are
    remapped."""
    own = [p for p in target.query.split("&") if p]
    own_names = {_query_name(p) for p in own}
    kept = []
    for part in query.split("&") if query else ():
        name = _query_name(part)
        if not part or name.lower() in SECRET_QUERY or name in own_names:
            continue
        key, eq, value = part.partition("=")
        kept.append(key + eq + (_escaped_id(mapping[value]) if value in mapping else value))
    return "&".join(kept + own)


def rebase(
    path: str,
    target: Target,
    mapping: Mapping[str, str],
    api_prefixes: Collection[str] = DEFAULT_PREFIXES,
) -> str:
    """Put the original path after its API prefix onto the target's base URL, ids remapped.

    A `PlanError` says why when it cannot go there (`wirediff.replay.paths`).

    The path is taken as a path only, its dot segments resolved. A known route's prefix is
    its own (`/openai/v1/responses`); a path no route knows is cut after the API prefix its
    session's known routes use (`api_prefixes`), so that `/v1/ask_url` goes to
    `<target base>/ask_url`, and a path outside that prefix (`/health`) is kept whole, which
    only a target without a base path takes. Whatever comes of it must lie under the
    target's base path, as sent and as a lenient server reads it; the URL is the target's
    origin and that path, as httpx sends it. The query: `merge_query`.
    """
    recorded, _, query = path.partition("?")
    problem = path_problem(path)
    if problem is not None:
        raise PlanError(problem)
    bare = remove_dot_segments(recorded)
    family, template, prefix = route(bare)
    own = prefix if family != "other" else _prefix_of(bare, api_prefixes)
    rest = bare[len(own) :] if own is not None else bare
    segs = [_escaped_id(mapping[s]) if s in mapping else s for s in rest.split("/")]
    if template == "/v1/models/{id}":
        head, _, model = "/".join(segs).partition("/models/")
        segs = [head, "models", target.map_model(model)] if model else segs
    built = (target.path if own is not None else "") + "/".join(segs)
    outside = outside_reason(built or "/", target.path, recorded)
    if outside is not None:
        raise PlanError(outside)
    sent = remove_dot_segments(built) or "/"
    merged = merge_query(query, target, mapping)
    return _exact(target, sent + ("?" + merged if merged else ""))


def target_problem(
    rec: Record, target: Target, api_prefixes: Collection[str] = DEFAULT_PREFIXES
) -> str | None:
    """Say why the original's path cannot go to `target`; None when it can."""
    try:
        rebase(str(rec["request"].get("path") or "/"), target, {}, api_prefixes)
    except PlanError as e:
        return str(e)
    return None


def _escaped_id(value: str) -> str:
    """Escape an id the target minted as one path segment or query value.

    Nothing in it can end the segment, the value or the path."""
    return quote(value, safe="!$&'()*+,;=:@-._~")


def _exact(target: Target, path: str) -> str:
    """Return the URL httpx sends for `path` on `target`.

    A `PlanError` is raised should it name another origin or leave the base path, which
    `path_problem` and `outside_reason` rule out."""
    url = httpx.URL(url_bytes_escaped(target.origin + path))
    origin = httpx.URL(target.origin)
    raw_path = url.raw_path.decode("ascii").partition("?")[0]
    if (url.scheme, url.host, url.port, url.userinfo) != (
        origin.scheme,
        origin.host,
        origin.port,
        origin.userinfo,
    ) or outside_reason(raw_path, target.path, path):
        raise PlanError(f"the captured path '{shown(path)}' does not stay on {target.shown}")
    return str(url)


def _auth_header(rec: Record, key: str) -> tuple[str, str] | str:
    """Build the auth header the original used, carrying `key` the way its scheme wants it.

    When `key` cannot be given that way, it says why not: Basic needs `user:password`."""
    auth = rec["tags"].get("auth")
    name = (auth["header"] if auth is not None else None) or "authorization"
    scheme = (auth["scheme"] if auth is not None else None) or (
        "Bearer" if name == "authorization" else None
    )
    if scheme is not None and str(scheme).lower() == "basic":
        if ":" not in key:
            return f"header {name} (Basic auth: the key variable must hold user:password)"
        key = base64.b64encode(key.encode("utf-8")).decode("ascii")
    return name, f"{scheme} {key}" if scheme else key


def _without_fingerprints(body: JSON, where: str, dropped: list[str]) -> JSON:
    """Drop from `body` the credential-named fields whose value is only a fingerprint.

    A capture holds such a value as `{"api_key": "sha256:…"}`; a fingerprint is never sent as a
    value."""
    if isinstance(body, dict):
        out = {}
        for k, v in body.items():
            at = f"{where}.{k}" if where else str(k)
            if isinstance(v, str) and SECRET_FIELD.match(str(k)) and is_fingerprint(v):
                dropped.append(f"body field {at}")
            else:
                out[k] = _without_fingerprints(v, at, dropped)
        return out
    if isinstance(body, list):
        return [_without_fingerprints(v, f"{where}[{i}]", dropped) for i, v in enumerate(body)]
    return body


def prepare(
    rec: Record,
    target: Target,
    api_key: str | None,
    mapping: Mapping[str, str],
    *,
    api_prefixes: Collection[str] = DEFAULT_PREFIXES,
) -> Outgoing:
    """Prepare the request to send for an original: re-based, remapped, model-mapped, re-keyed.

    Headers, query parameters and credential-named body fields that the capture holds only
    as fingerprints are left out (`Outgoing.dropped`), never sent as values; a `--header`
    sets such a header again. The key goes where the original had its auth header, in its
    scheme (Basic: `user:password` in the key variable, base64-encoded here).
    """
    req = rec.get("request") or {}
    body = req.get("body")
    model: str | None = None
    content: bytes | None
    path = str(req.get("path") or "/")
    dropped = [f"query parameter {n}" for n in secret_query(path)]
    if body is not None:
        body = _without_fingerprints(body, "", dropped)
        body = _remap(body, mapping) if mapping else body
        if isinstance(body, dict) and isinstance(body.get("model"), str):
            body = {**body, "model": target.map_model(body["model"])}
            model = body["model"]
        content = _json_bytes(body)
    elif req.get("text") is not None:
        content = as_bytes(str(req["text"]))
    elif (b64 := req.get("b64")) is not None:
        content = base64.b64decode(b64)
    else:
        content = None
    if content == b"" and str(req.get("method")).upper() in SAFE_METHODS:
        content = None

    auth = _auth_header(rec, api_key) if api_key else None
    if isinstance(auth, str):
        dropped.append(auth)
        auth = None
    headers: list[tuple[str, str]] = []
    for name, value in req.get("headers") or ():
        low = name.lower()
        if low in HOP_BY_HOP or low in target.headers:
            continue
        if low in AUTH_HEADERS:
            if auth is not None and low == auth[0]:
                headers.append(auth)
                auth = None
            continue
        if FINGERPRINT.fullmatch(value):
            dropped.append(f"header {low}")
            continue
        headers.append((low, value))
    if auth is not None:
        headers.append(auth)
    for name, override in target.headers.items():
        if override is not None:
            headers.append((name, override))
    if body is not None and header_get(headers, "content-type") is None:
        headers.append(("content-type", "application/json"))
    return Outgoing(
        method=str(req.get("method", "GET")).upper(),
        url=rebase(path, target, mapping, api_prefixes),
        headers=headers,
        content=content,
        model=model if model is not None else (rec.get("tags") or {}).get("model"),
        stream=is_stream(rec),
        dropped=tuple(dropped),
    )


def _json_bytes(body: JSON) -> bytes:
    """Encode `body` as compact JSON; a lone surrogate, a client's `\\ud800`, as that escape."""
    try:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(body, separators=(",", ":")).encode("ascii")


def url_bytes_escaped(url: str) -> str:
    """Percent-encode the bytes the surrogates of `url` stand for.

    httpx sends any non-ASCII in a URL so."""
    return _SURROGATE.sub(lambda m: "".join(f"%{b:02X}" for b in as_bytes(m[0])), url)


_SURROGATE = re.compile("[\ud800-\udfff]")
