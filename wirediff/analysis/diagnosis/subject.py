"""Find what an error answer is about.

It may be the route, the method, a stored response, the model, the context length or a request
parameter. It is read from the answer itself first, and only then inferred from other calls, such
as the models a server listed. Words are read only where they echo the request, with its method
and path, its model, its parameter names and the id it builds on; or where they say a thing in
the few ways servers say it, such as a context length exceeded or a parameter not supported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from wirediff._types import Record
from wirediff.analysis.diagnosis.view import ExchangeView
from wirediff.record.tags import ROUTE_METHODS

__all__ = [
    "Served",
    "Subject",
    "context_exceeded",
    "echoes_route",
    "says_unsupported",
    "server_hint",
    "stored_reference",
    "subject_of",
    "wrong_method",
]

_MODEL_WORDS = re.compile(
    r"(?i)\bmodels?\b.*\b(not found|does not exist|doesn't exist|unknown|invalid|not loaded|"
    r"not available|missing|no such)\b|\b(no|unknown|invalid)\s+models?\b"
)
_ENDPOINT_WORDS = re.compile(
    r"(?i)\b(unknown|invalid|unexpected|unsupported|no such) (endpoint|route|url|path)\b|"
    r"\b(endpoint|route|url|path) not found\b|\bnot implemented\b|"
    r"^\s*(404:?\s+)?(page\s+)?not found\.?\s*$"
)
_CONTEXT_WORDS = re.compile(
    r"(?i)\bcontext (length|size|window)\b|\bmaximum context\b|\btoo many tokens\b|"
    r"\bprompt is too long\b|\bexceeds? (the )?(model'?s? )?(context|max(imum)? (tokens|length))|"
    r"\b(longer|more) than the max(imum)? model length\b"
)
"""The few ways servers say a prompt does not fit.

OpenAI's and llama-cpp-python's `This model's maximum context length is …`; llama.cpp's
`request (N tokens) exceeds the available context size`; vLLM's `The decoder prompt (length
N) … is longer than the maximum model length of M` and `… is too large: N. This model's
maximum context length is M tokens`."""
CONTEXT_TYPES = frozenset({"exceed_context_size_error"})
"""Error types that say a prompt does not fit, whatever the words.

That is llama.cpp's `ERROR_TYPE_EXCEED_CONTEXT_SIZE`."""
_UNSUPPORTED_WORDS = re.compile(
    r"(?i)\bnot (supported|implemented|allowed|permitted|recogni[sz]ed)\b|\bunsupported\b|"
    r"\bunrecogni[sz]ed\b|\bunknown (parameter|field|argument|key)s?\b|"
    r"\bextra (inputs|fields)\b|\bunexpected (keyword|field|parameter|argument)\b|"
    r"\b(does not|doesn't|do not|cannot) (support|accept)\b"
)
_HINT = re.compile(
    r"(?i)(--[a-z][\w-]+|\b(start|restart|run|use|set|pass|enable|load|pull|try|please|"
    r"reduce|increase|must be|should be|make sure|specify)\b)"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
HINT_CHARS = 160
"""Characters of the server's own hint quoted in a remedy."""


@dataclass(frozen=True)
class Served:
    """Hold what other calls showed of each backend, by label.

    That is the models its `GET /v1/models` listed, and the API prefixes, such as `/v1` or `""`,
    under which it answered a call of a known family with success. A route under such a prefix is
    not missing a `/v1`."""

    models: Mapping[str, set[str]] = field(default_factory=dict)
    prefixes: Mapping[str, set[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Subject:
    """Name what an error answer is about: `endpoint`, `state`, `model`, `context` or `parameter`.

    For a parameter it holds the name and whether the server said it does not support it."""

    kind: str
    param: str = ""
    unsupported: bool = False
    missing: bool = False
    """A parameter the request did not send (the server asks for it)."""


def echoes_route(x: ExchangeView) -> bool:
    """Tell whether the answer names the request's method and path, and so is about the route.

    Examples are `Cannot POST /v1/responses` and `Invalid URL (POST /v1/v1/…)`. A path quoted
    inside some URL, such as an upstream's in a gateway's message, does not count."""
    return len(x.path) > 1 and f"{x.method} {x.path}" in x.msg


def wrong_method(x: ExchangeView) -> str | None:
    """List the methods the request's route takes, when the request used none of them.

    A WebSocket upgrade is a GET on any route."""
    methods = ROUTE_METHODS.get(x.endpoint) if x.family != "other" else None
    if methods is None or x.method in methods or x.method in ("HEAD", "OPTIONS") or x.websocket:
        return None
    return ", ".join(sorted(methods))


def stored_reference(rec: Record) -> str | None:
    """Find the stored response a request builds on.

    That is its `previous_response_id`, or the `{id}` of `/v1/responses/{id}…`."""
    body = rec["request"].get("body")
    if isinstance(body, dict) and isinstance(body.get("previous_response_id"), str):
        return str(body["previous_response_id"])
    tags = rec.get("tags") or {}
    if str(tags.get("endpoint", "")).startswith("/v1/responses/{id}"):
        tail = str(rec["request"].get("path", "")).split("?", 1)[0].split("/responses/", 1)[-1]
        return tail.split("/", 1)[0] or None
    return None


def context_exceeded(x: ExchangeView) -> bool:
    """Tell whether the answer says the prompt and the tokens asked for exceed the model's context.

    Its code, its type or its words may say it."""
    return (
        x.code == "context_length_exceeded"
        or x.etype in CONTEXT_TYPES
        or bool(_CONTEXT_WORDS.search(x.msg))
    )


def says_unsupported(x: ExchangeView) -> bool:
    """Tell whether the answer says the request's operation is not supported there.

    An example is `COMPACT responses is not supported for custom_openai`: the message names the
    endpoint's last word, such as `compact` or `embeddings`, beside words of refusal, and no
    request parameter."""
    if not _UNSUPPORTED_WORDS.search(x.msg) or _named_parameter(x):
        return False
    words = [w for w in x.endpoint.split("/") if w and not w.startswith("{") and w != "v1"]
    return bool(words) and _names(x.msg.lower(), words[-1].lower())


def _names(text: str, word: str | None) -> bool:
    """Tell whether `word` stands in `text` as a whole token; a model `m` is not in "embeddings"."""
    return (
        bool(word) and re.search(rf"(?<![\w.-]){re.escape(str(word))}(?![\w-])", text) is not None
    )


def _request_keys(x: ExchangeView) -> list[str]:
    body = x.rec["request"].get("body")
    return [k for k in body if isinstance(k, str)] if isinstance(body, dict) else []


def _named_parameter(x: ExchangeView) -> str:
    """Find the request parameter the answer names.

    That is its `param`, else a request key the message quotes, as in `'seed'`, `"store"` or ``
    `n` ``, or spells out, as in `previous_response_id`."""
    if isinstance(x.param, str) and x.param:
        return x.param
    for key in _request_keys(x):
        quoted = any(f"{q}{key}{q}" in x.msg for q in ("'", '"', "`"))
        if quoted or ("_" in key and re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", x.msg)):
            return key
    return ""


def _about_stored_response(x: ExchangeView) -> bool:
    ref = stored_reference(x.rec)
    if not ref:
        return False
    return (
        ref in x.msg
        or x.param in ("previous_response_id", "response_id")
        or x.code == "previous_response_not_found"
    )


def _about_model(x: ExchangeView) -> bool:
    """Tell whether the answer is about the model, by its type, the model's name or its words."""
    return (
        x.code == "model_not_found"
        or "model" in str(x.etype or "").lower()
        or _names(x.msg, x.model)
        or bool(_MODEL_WORDS.search(x.msg))
    )


def _lacks_model(x: ExchangeView) -> bool:
    """Tell a JSON request without a `model`.

    No model it names could be missing on the server."""
    body = x.rec["request"].get("body")
    return isinstance(body, dict) and body.get("model") is None and x.model is None


def subject_of(x: ExchangeView, served: Served) -> Subject | None:
    """Find what an error answer is about, strongest evidence first.

    First comes the answer naming the route, the context length, the stored response, a parameter
    or the model; then what other calls show, such as the models the server listed; then the
    words of a bare 404."""
    if echoes_route(x):
        return Subject("endpoint")
    if context_exceeded(x):
        return Subject("context")
    unsupported = bool(_UNSUPPORTED_WORDS.search(x.msg))
    if _about_stored_response(x) and not unsupported:
        return Subject("state")
    param = _named_parameter(x)
    unsupported = unsupported or x.code == "unsupported_parameter"
    if _lacks_model(x) and (param == "model" or _about_model(x)):
        return Subject("parameter", "model", missing=True)
    if param == "model" or x.code == "model_not_found":
        return Subject("model")
    if param:
        return Subject("parameter", param, unsupported)
    if says_unsupported(x):
        return Subject("endpoint")
    if _about_model(x):
        return Subject("model")
    listed = served.models.get(str(x.label))
    if x.model and listed and x.model not in listed and x.status in (400, 404):
        return Subject("model")
    if _ENDPOINT_WORDS.search(x.msg):
        return Subject("endpoint")
    return None


def server_hint(message: str) -> str:
    """Quote the sentences of an error message that tell what to do, for the remedy.

    An example is `Start it with --embeddings`. It is empty when there is none."""
    said = [s.strip() for s in _SENTENCE_END.split(message) if _HINT.search(s)]
    text = " ".join(s for s in said if s)
    return text if len(text) <= HINT_CHARS else text[: HINT_CHARS - 1] + "…"
