"""Tag what an exchange *is*: API family, route template, stream, model, SDK, auth.

Plain functions over already-parsed parts so that the capture addon, `wirediff import`
and the replayer tag identically.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import parse_qs, urlsplit

from wirediff._support import is_2xx
from wirediff._types import JSON, Auth, Event, Record, Sdk, Tags
from wirediff.profiles import load_clients
from wirediff.record.names import AUTH_HEADERS
from wirediff.record.redact import fingerprint, split_scheme

__all__ = [
    "ROUTE_METHODS",
    "SDK_FIELDS",
    "auth_tag",
    "client_of",
    "header_get",
    "is_error_body",
    "products",
    "route",
    "sdk_identity",
    "soft_error",
    "tag_exchange",
    "tag_soft_error",
]

# (regex on the path after the API prefix, route template, family, the methods the API
# reference gives the route); first match wins.
_ID = r"[^/]+"
_ROUTES = [
    (r"/chat/completions", "/v1/chat/completions", "chat.completions", "POST"),
    (
        rf"/chat/completions/{_ID}/messages",
        "/v1/chat/completions/{id}/messages",
        "chat.completions",
        "GET",
    ),
    (
        rf"/chat/completions/{_ID}",
        "/v1/chat/completions/{id}",
        "chat.completions",
        "GET POST DELETE",
    ),
    (r"/completions", "/v1/completions", "completions", "POST"),
    (r"/responses/input_tokens", "/v1/responses/input_tokens", "responses", "POST"),
    (r"/responses/compact", "/v1/responses/compact", "responses", "POST"),
    (r"/responses", "/v1/responses", "responses", "POST"),
    (rf"/responses/{_ID}/input_items", "/v1/responses/{id}/input_items", "responses", "GET"),
    (rf"/responses/{_ID}/cancel", "/v1/responses/{id}/cancel", "responses", "POST"),
    (rf"/responses/{_ID}", "/v1/responses/{id}", "responses", "GET DELETE"),
    (r"/models", "/v1/models", "models", "GET"),
    (r"/models/.+", "/v1/models/{id}", "models", "GET DELETE"),
    (r"/embeddings", "/v1/embeddings", "embeddings", "POST"),
    (r"/files", "/v1/files", "files", "GET POST"),
    (rf"/files/{_ID}/content", "/v1/files/{id}/content", "files", "GET"),
    (rf"/files/{_ID}", "/v1/files/{id}", "files", "GET DELETE"),
    (r"/audio/(transcriptions|translations|speech)", "/v1/audio/{op}", "audio", "POST"),
    (r"/images/(generations|edits|variations)", "/v1/images/{op}", "images", "POST"),
    (r"/moderations", "/v1/moderations", "moderations", "POST"),
    (r"/realtime", "/v1/realtime", "realtime", ""),
    (r"/batches", "/v1/batches", "batches", "GET POST"),
    (rf"/batches/{_ID}/cancel", "/v1/batches/{id}/cancel", "batches", "POST"),
    (rf"/batches/{_ID}", "/v1/batches/{id}", "batches", "GET"),
]
ROUTES: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(p + r"/?$"), t, f) for p, t, f, _ in _ROUTES
]
ROUTE_METHODS: dict[str, frozenset[str]] = {t: frozenset(m.split()) for _, t, _, m in _ROUTES if m}
"""The methods each route of the OpenAI API takes, by its template."""
_RESOURCES = re.compile(
    r"/(chat/completions|completions|responses|models|embeddings|files|audio|images|moderations|"
    r"batches|realtime)(/|$)"
)


def route(path: str) -> tuple[str, str, str]:
    """Route a request path, query stripped, to `(family, endpoint template, prefix)`.

    The prefix is whatever stands before the resource (`/v1`, `/v1/v1`, `""`,
    `/openai/v1`), so a doubled or missing `/v1` is visible without a separate rule.
    """
    path = path.split("?", 1)[0]
    m = _RESOURCES.search(path)
    if m:
        prefix, rest = path[: m.start()], path[m.start() :]
        for rx, template, family in ROUTES:
            if rx.match(rest):
                return family, template, prefix
    return "other", path, ""


def header_get(headers: Sequence[Sequence[str]], name: str) -> str | None:
    """Get the first value of a header in a `[[name, value]]` list, case-insensitively."""
    low = name.lower()
    for k, v in headers:
        if k.lower() == low:
            return v
    return None


_PRODUCT = re.compile(
    r"(?:^|(?<=\s))([A-Za-z][\w.\-]*(?:/[A-Za-z][\w.\-]*)*)/v?(\d[\w.\-+]*)"
    r"|(?:^|(?<=\s))([A-Za-z][\w.\-]*/[A-Za-z]\w*) v?(\d[\w.\-+]*)"
)
"""A user agent's product tokens with a version.

`codex_exec/0.171.0`, `ai-sdk/openai/3.0.1`, `runtime/node.js/v20.20.2`, and the OpenAI SDKs'
`Name/Lang version`, such as `Agents/Python 0.24.0`."""
_SDK_PRODUCTS = frozenset({"OpenAI", "AsyncOpenAI"})
"""The OpenAI SDKs' own product names (`OpenAI/Python 2.54.0`): an SDK, no client."""


def products(user_agent: str) -> list[tuple[str, str]]:
    """List `(name, version)` of each product token of a user agent, in order."""
    return [
        (m.group(1) or m.group(3), m.group(2) or m.group(4)) for m in _PRODUCT.finditer(user_agent)
    ]


def client_of(user_agent: str) -> tuple[str, str] | None:
    """Name the client a user agent names, and its version.

    A known client is found by any of its product tokens (`wirediff/profiles/clients.yaml`),
    else the first product that is no OpenAI SDK's is taken."""
    found = dict(reversed(products(user_agent)))  # the first version of each name
    if not found:
        return None
    for name, known in load_clients().items():
        said = known["user_agent"]
        named = [p for p in said["products"] if p in found]
        if named:
            versions = [found[p] for p in said.get("version", ()) if p in found]
            return name, (versions or [found[named[0]]])[0]
    first, version = next(iter(products(user_agent)))
    return None if first.split("/")[0] in _SDK_PRODUCTS else (first, version)


SDK_FIELDS = (
    "user_agent",
    "lang",
    "version",
    "runtime",
    "runtime_version",
    "async",
    "client",
    "client_version",
)
"""What `tags.sdk` says about the client (`sdk_identity`)."""


def sdk_identity(headers: Sequence[Sequence[str]]) -> Sdk | None:
    """Say who sent it: `User-Agent` and the `X-Stainless-*` headers of the official SDKs.

    `client`/`client_version` name an application that says who it is in its user agent
    (`codex_exec/0.171.0 (Debian 12; x86_64) …`, `client_of`); the SDKs' own
    `OpenAI/Python 2.54.0` names no client. `async` is what `X-Stainless-Async`
    says; the JS SDK never sends it and every call of it returns a Promise, so JS is async.
    """
    ua = header_get(headers, "user-agent")
    stainless = {
        k.lower()[len("x-stainless-") :].replace("-", "_"): v
        for k, v in headers
        if k.lower().startswith("x-stainless-")
    }
    if not ua and not stainless:
        return None
    sdk: Sdk = {"user_agent": ua}
    if stainless:
        sdk["lang"] = stainless.get("lang")
        sdk["version"] = stainless.get("package_version")
        sdk["os"] = stainless.get("os")
        sdk["arch"] = stainless.get("arch")
        sdk["runtime"] = stainless.get("runtime")
        sdk["runtime_version"] = stainless.get("runtime_version")
        said = stainless.get("async")
        sdk["async"] = said not in ("false", "") if said is not None else sdk["lang"] == "js"
    elif ua:
        m = re.match(r"(Async)?OpenAI/(\w+) ([\w.\-]+)", ua)
        if m:
            sdk["lang"], sdk["version"] = m.group(2).lower(), m.group(3)
            sdk["async"] = bool(m.group(1))
    app = client_of(ua) if ua else None
    if app:
        sdk["client"], sdk["client_version"] = app
    return sdk


def retry_count(headers: Sequence[Sequence[str]]) -> int:
    raw = header_get(headers, "x-stainless-retry-count")
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def auth_tag(
    client_headers: Sequence[Sequence[str]], upstream_headers: Sequence[Sequence[str]] | None
) -> Auth | None:
    """Tag which auth header the client sent, its scheme and key fingerprint.

    It says too whether the same credential left towards the upstream; `None` when nothing went
    upstream."""
    for name in AUTH_HEADERS:
        value = header_get(client_headers, name)
        if value is None:
            continue
        scheme, secret = split_scheme(value)
        sent = header_get(upstream_headers, name) if upstream_headers is not None else None
        return {
            "header": name,
            "scheme": scheme,
            "fingerprint": fingerprint(secret) if secret else None,
            "forwarded": None if upstream_headers is None else sent == value,
        }
    return None


def is_error_body(body: JSON) -> bool:
    """Tell whether `body` is an error object where a result was expected.

    That is `{"error": …}` without a result shape, or FastAPI's bare `{"detail": …}`.

    A Responses object carries `"error": null` — and a failed one a populated `error`
    beside `object: "response"` — so only bodies without `object`/`id` count.
    """
    if not isinstance(body, dict):
        return False
    if body.get("error"):
        return "object" not in body and "id" not in body
    if len(body) == 1 and "detail" in body:
        return bool(body["detail"])
    return body.get("object") == "error"


def soft_error(status: int | None, body: JSON, events: Sequence[Event] | None) -> bool:
    """Tell whether a 2xx is really an error: LM Studio's 200 `{"error": …}`, say.

    An error in a 2xx event stream, `data: {"error": …}`, is one too."""
    if not is_2xx(status):
        return False
    if is_error_body(body):
        return True
    return any(is_error_body(ev.get("data")) for ev in events or ())


def tag_soft_error(rec: Record) -> bool:
    """Tag a 2xx answer's error body or error event as the soft error it is, where not tagged.

    Another tool's record may tag it as none: the wire decides, so that every part of the
    analysis, which reads the tag, reads the answer alike. The record is one the format check
    passed."""
    resp, tags = rec.get("response"), rec["tags"]
    if tags["soft_error"] or resp is None:
        return False
    if not soft_error(resp["status"], resp.get("body"), resp.get("events")):
        return False
    tags["soft_error"] = True
    return True


def request_model(body: JSON, template: str, path: str) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        return str(body["model"])
    if template == "/v1/models/{id}":
        return path.split("?", 1)[0].split("/models/", 1)[1]
    return None


def session_model(path: str, events: Sequence[Event] | None) -> str | None:
    """Find the model of a WebSocket session: the first client message that names one.

    Else it is the URL's `?model=`, as the Realtime API has it."""
    for ev in events or ():
        data = ev.get("data")
        if ev.get("direction") == "client" and isinstance(data, dict):
            nested = data.get("response") or data.get("session")
            model = data.get("model") or (nested.get("model") if isinstance(nested, dict) else None)
            if isinstance(model, str):
                return model
    query = parse_qs(urlsplit(path).query).get("model")
    return query[0] if query else None


def tag_exchange(
    *,
    method: str,
    path: str,
    client_headers: Sequence[Sequence[str]],
    upstream_headers: Sequence[Sequence[str]] | None,
    request_body: JSON,
    status: int | None,
    response_body: JSON,
    events: Sequence[Event] | None,
    signature: str | None = None,
    websocket: bool = False,
) -> Tags:
    """Tag an exchange; `websocket` marks an upgraded session.

    A session is one record per connection, its messages the events; the model comes from them.
    Its `transport` tag is `websocket`, as is an upgrade that was asked for and refused (a GET
    with `Upgrade: websocket`): the WebSocket mode of a family is judged apart from its HTTP
    mode."""
    family, template, prefix = route(path)
    asked_upgrade = method == "GET" and any(
        str(k).lower() == "upgrade" and str(v).lower() == "websocket" for k, v in client_headers
    )
    transport = "websocket" if websocket or asked_upgrade else "http"
    stream = isinstance(request_body, dict) and request_body.get("stream") is True
    model = request_model(request_body, template, path)
    if model is None and transport == "websocket":
        model = session_model(path, events)
    if (
        model is None
        and isinstance(response_body, dict)
        and isinstance(response_body.get("model"), str)
    ):
        model = response_body["model"]
    return {
        "family": family,
        "endpoint": template,
        "prefix": prefix,
        "method": method,
        "stream": stream,
        "model": model,
        "sdk": sdk_identity(client_headers),
        "retry": retry_count(client_headers),
        "auth": auth_tag(client_headers, upstream_headers),
        "soft_error": soft_error(status, response_body, events),
        "signature": signature,
        "transport": transport,
    }
