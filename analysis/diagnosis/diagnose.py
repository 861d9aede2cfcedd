"""Diagnoses: why a chain of exchanges failed, the evidence, the provider, the fix.

Rules classify by status, content type, body structure and context (what the request
asked, what the chain shows, which models the server listed) first. Message strings are
used only where the message *echoes the request* (its path, its model) and to name the
provider, so the rules also hold on servers no profile describes.

Codes (contract): see `CODES`. One row per (chain, code); a chain may carry several.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pandas as pd

from wirediff._support import is_2xx, paused_gc
from wirediff._types import Record
from wirediff.analysis.comparison.frames import exchanges_frame
from wirediff.analysis.diagnosis.chains import (
    CHAIN_COLUMNS,
    StreamEnd,
    chain_rows,
    exchange_ok,
    stream_end,
    stream_problem,
)
from wirediff.profiles import load_profiles, match_signature
from wirediff.record.redact import redact_patterns, redact_url
from wirediff.record.tags import header_get

CODES = (
    "endpoint_not_implemented", "soft_error_200", "method_not_allowed",
    "redirect_method_change", "auth_missing", "auth_rejected", "auth_dropped_by_hop",
    "path_prefix", "model_not_found", "stream_not_honoured", "stream_truncated",
    "upstream_unreachable", "previous_response_not_found",
)  # fmt: skip
"""The contract codes, plus `previous_response_not_found` (a stateless server)."""

DIAGNOSIS_COLUMNS = [
    "chain_id", "code", "exchange_ids", "label", "endpoint", "provider",
    "summary", "evidence", "remedy", "recovered", "title",
]  # fmt: skip
"""`recovered`: the chain still ended in success (a retry or fallback worked around it);
`title`: the chain's one-line story."""

PROVIDER_NAMES = {
    "lmstudio": "LM Studio",
    "ollama": "Ollama",
    "vllm": "vLLM",
    "litellm": "LiteLLM",
    "openai": "OpenAI",
}

# Response headers that name a server: (header, lower-case value substring, provider).
HEADER_HINTS: list[tuple[str, str, str]] = [
    ("x-powered-by", "express", "lmstudio"),
    ("openai-version", "", "openai"),
    ("openai-processing-ms", "", "openai"),
    ("x-litellm-version", "", "litellm"),
    ("x-litellm-call-id", "", "litellm"),
]
# Go net/http's default error bodies (Ollama is the Go server among OpenAI-compatible ones).
GO_PLAIN = re.compile(r"^\s*\d{3} (page not found|method not allowed)\s*$")

SNIPPET = 160
AUTH_STATUSES = frozenset({401, 403})
METHOD_CHANGING = frozenset({301, 302, 303})  # clients repeat a POST as GET after these
PROXY_STATUSES = frozenset({502, 503, 504})

_MODEL_WORDS = re.compile(
    r"(?i)\bmodels?\b.*\b(not found|does not exist|doesn't exist|unknown|invalid|not loaded|"
    r"not available|missing|no such)\b|\b(no|unknown|invalid)\s+models?\b"
)
_ENDPOINT_WORDS = re.compile(
    r"(?i)\b(endpoint|route|url|not implemented|unsupported path)\b|^\s*(404:?\s+)?(page\s+)?not found\.?\s*$"
)
_CONNECT_WORDS = re.compile(
    r"(?i)connection (refused|reset|error|failed)|connecterror|apiconnectionerror|could not connect|"
    r"failed to connect|unreachable|name or service not known|no route to host|bad gateway|"
    r"gateway time-?out|upstream|\bdns\b"
)
_TAGS = re.compile(r"<[^>]*>")
# The one method a route takes, where it takes only one (others: DELETE/GET/POST by id).
_EXPECTED_METHOD = {
    "/v1/chat/completions": "POST", "/v1/completions": "POST", "/v1/responses": "POST",
    "/v1/embeddings": "POST", "/v1/moderations": "POST", "/v1/images/{op}": "POST",
    "/v1/audio/{op}": "POST", "/v1/models": "GET", "/v1/files/{id}/content": "GET",
}  # fmt: skip


def scrub(text: str) -> str:
    """Remove anything that looks like a credential from a quoted snippet."""
    return redact_patterns(text)


@dataclass
class _Ex:
    """One exchange, viewed for the rules."""

    id: str
    rec: Record
    method: str
    path: str
    url: str
    status: int | None
    ctype: str
    body: Any
    text: str | None
    label: str | None
    family: str
    endpoint: str
    prefix: str
    model: str | None
    stream: bool
    auth: Mapping[str, Any] | None
    soft: bool
    error_kind: str | None
    error_msg: str
    end: StreamEnd | None
    ok: bool
    msg: str = ""
    code: Any = None
    etype: Any = None
    param: Any = None

    @property
    def fingerprint(self) -> str | None:
        return self.auth.get("fingerprint") if self.auth else None

    @property
    def answer(self) -> str:
        if self.status is None:
            return f"no response ({self.error_kind or 'error'})"
        return f"{self.status}{' ' + self.ctype if self.ctype else ''}"

    @property
    def line(self) -> str:
        return f"{self.method} {self.path} → {self.answer}"

    @property
    def url_line(self) -> str:
        return f"{self.method} {self.url} → {self.answer}"

    @property
    def body_text(self) -> str | None:
        if self.body is not None:
            return json.dumps(self.body, ensure_ascii=False, separators=(",", ":"))
        return self.text

    def snippet(self) -> str | None:
        raw = self.body_text
        if not raw:
            return None
        raw = " ".join(raw.split())
        return "body: " + scrub(raw if len(raw) <= SNIPPET else raw[: SNIPPET - 1] + "…")

    def header(self, name: str) -> str | None:
        return header_get((self.rec.get("response") or {}).get("headers") or (), name)


def _error_fields(body: Any, text: str | None, events: Any) -> tuple[str, Any, Any, Any]:
    """`(message, code, type, param)` of whatever error the answer carries."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            return str(err.get("message") or ""), err.get("code"), err.get("type"), err.get("param")
        if isinstance(err, str):
            return err, None, None, None
        if "detail" in body:
            return str(body["detail"]), None, None, None
        if body.get("object") == "error":
            return (
                str(body.get("message") or ""),
                body.get("code"),
                body.get("type"),
                body.get("param"),
            )
    if text:
        return text.strip()[:300], None, None, None
    for ev in events or ():
        data = ev.get("data")
        if isinstance(data, dict) and (data.get("error") or data.get("type") == "error"):
            return _error_fields(
                data if data.get("type") != "error" else {"error": data}, None, None
            )
    return "", None, None, None


def _view(rec: Record) -> _Ex:
    req, resp, tags = rec["request"], rec.get("response") or {}, rec.get("tags") or {}
    ctype = (header_get(resp.get("headers") or (), "content-type") or "").split(";", 1)[0]
    err = rec.get("error") or {}
    end = stream_end(rec)
    path = str(req.get("path") or "").split("?", 1)[0]
    x = _Ex(
        id=rec["id"],
        rec=rec,
        method=str(req.get("method") or ""),
        path=path,
        url=str(req.get("url") or path),
        status=resp.get("status"),
        ctype=ctype.strip().lower(),
        body=resp.get("body"),
        text=resp.get("text"),
        label=rec.get("label"),
        family=str(tags.get("family") or "other"),
        endpoint=str(tags.get("endpoint") or path),
        prefix=str(tags.get("prefix") or ""),
        model=tags.get("model"),
        stream=bool(tags.get("stream")),
        auth=tags.get("auth"),
        soft=bool(tags.get("soft_error")),
        error_kind=err.get("kind"),
        error_msg=str(err.get("message") or ""),
        end=end,
        ok=exchange_ok(rec, end),
    )
    x.msg, x.code, x.etype, x.param = _error_fields(x.body, x.text, resp.get("events"))
    return x


@dataclass
class Finding:
    code: str
    ids: list[str]
    evidence: list[str]
    facts: dict[str, str] = field(default_factory=dict)


class _Facts(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return "?"


# ---- provider -----------------------------------------------------------------------------


def _signature(x: _Ex) -> str | None:
    sig = (x.rec.get("tags") or {}).get("signature")
    if sig is None and x.status is not None and not x.ok:
        headers = (x.rec.get("response") or {}).get("headers") or []
        sig = match_signature(x.status, headers, x.body_text)
    return str(sig) if sig else None


@cache
def _profile_headers() -> list[tuple[str, str, str]]:
    """`(header, exact lower-case value, provider)` for each fixed header a profile documents."""
    out = []
    for name, prof in load_profiles().items():
        for header, value in (prof.get("headers") or {}).items():
            if "{" not in str(value):
                out.append((str(header).lower(), str(value).lower(), str(name)))
    return out


def _hint(x: _Ex) -> tuple[str, str] | None:
    """`(provider, evidence)` from headers and body shape."""
    for name, value, provider in HEADER_HINTS:
        got = x.header(name)
        if got is not None and value in got.lower():
            return provider, f"{name}: {got}"
    for name, value, provider in _profile_headers():
        got = x.header(name)
        if got is not None and got.lower() == value:
            return provider, f"{name}: {got}"
    if x.ctype == "text/plain" and x.text and GO_PLAIN.match(x.text):
        return "ollama", f"text/plain {x.text.strip()!r} (Go net/http default)"
    if isinstance(x.body, dict):
        if set(x.body) == {"detail"}:
            return "vllm/litellm", 'FastAPI-style {"detail": …} body'
        if x.body.get("system_fingerprint") == "fp_ollama":
            return "ollama", "system_fingerprint: fp_ollama"
    return None


def guess_provider(xs: list[_Ex]) -> tuple[str | None, list[str]]:
    """Most likely provider behind a chain (innermost/latest answers first)."""
    for x in reversed(xs):
        sig = _signature(x)
        if sig:
            return sig.split(".", 1)[0], [f"signature: {sig}"]
    for x in reversed(xs):
        hint = _hint(x)
        if hint:
            return hint[0], [hint[1]]
    return None, []


# ---- per-exchange rules -------------------------------------------------------------------


def _prefix_issue(x: _Ex) -> str | None:
    """A doubled or missing `/v1`, when the answer is about the route (404/405 or an echo
    of the path) — a 429 or a 400 on a bad parameter is about something else."""
    if x.family == "other" or not (x.status in (404, 405) or _echoes_route(x)):
        return None
    if re.search(r"/v1/v1$", x.prefix):
        return "doubled"
    if x.prefix == "":
        return "missing"
    return None


_AUTH_WORDS = re.compile(r"(?i)(api[ _-]?key|auth|token|credential|unauthori[sz]ed)")


def _about_auth(x: _Ex) -> bool:
    """A 403 with a key sent is about the key only if it says so (not, e.g., a region)."""
    return any(_AUTH_WORDS.search(str(v or "")) for v in (x.code, x.etype, x.msg))


def _echoes_route(x: _Ex) -> bool:
    return len(x.path) > 1 and x.path in x.msg


def stored_reference(rec: Record) -> str | None:
    """The stored response a request builds on: `previous_response_id`, or the `{id}` of
    `/v1/responses/{id}…`."""
    body = rec["request"].get("body")
    if isinstance(body, dict) and isinstance(body.get("previous_response_id"), str):
        return str(body["previous_response_id"])
    tags = rec.get("tags") or {}
    if str(tags.get("endpoint", "")).startswith("/v1/responses/{id}"):
        tail = str(rec["request"].get("path", "")).split("?", 1)[0].split("/responses/", 1)[-1]
        return tail.split("/", 1)[0] or None
    return None


def _about_stored_response(x: _Ex) -> bool:
    ref = stored_reference(x.rec)
    if not ref:
        return False
    return (
        ref in x.msg
        or x.param in ("previous_response_id", "response_id")
        or x.code == "previous_response_not_found"
    )


def _subject(x: _Ex, served: Mapping[str, set[str]]) -> str | None:
    """What an error answer is about: `"endpoint"`, `"state"`, `"model"` or `None`."""
    if _echoes_route(x):
        return "endpoint"
    if _about_stored_response(x):
        return "state"
    if x.code == "model_not_found" or x.param == "model" or "model" in str(x.etype or "").lower():
        return "model"
    if x.model and x.model in x.msg:
        return "model"
    if _MODEL_WORDS.search(x.msg):
        return "model"
    listed = served.get(str(x.label))
    if x.model and listed and x.model not in listed and x.status in (400, 404):
        return "model"
    if _ENDPOINT_WORDS.search(x.msg):
        return "endpoint"
    return None


def _proxy_generated(x: _Ex) -> bool:
    """A 5xx written by a proxy/gateway rather than by the API server itself."""
    if x.status is None or x.status < 500:
        return False
    if _CONNECT_WORDS.search(x.msg) or _CONNECT_WORDS.search(x.error_msg):
        return True
    if x.status not in PROXY_STATUSES:
        return False
    structured = isinstance(x.body, dict) and ("error" in x.body or "detail" in x.body)
    return not structured


def _auth_line(x: _Ex) -> str:
    if not x.auth:
        return "request carried no auth header"
    value = " ".join(filter(None, [x.auth.get("scheme"), x.fingerprint or "<empty key>"]))
    return f"request {x.auth.get('header')}: {value}"


def _base_facts(x: _Ex) -> dict[str, str]:
    return {
        "method": x.method, "path": x.path, "endpoint": x.endpoint, "status": str(x.status),
        "answer": x.answer, "ctype": x.ctype or "no content type", "model": str(x.model),
        "url": x.url,
    }  # fmt: skip


def _ev(x: _Ex, *extra: str | None) -> list[str]:
    out = [x.line]
    out.extend(e for e in extra if e)
    return out


def _event_error(x: _Ex) -> str:
    return f"error event: {scrub(x.msg[:SNIPPET])}" if x.msg else "error event in the stream"


def _exchange_findings(x: _Ex, served: Mapping[str, set[str]]) -> list[Finding]:
    out: list[Finding] = []
    st, facts = x.status, _base_facts(x)

    def add(code: str, evidence: list[str], **more: str) -> None:
        out.append(Finding(code, [x.id], evidence, {**facts, **more}))

    if x.error_kind == "upstream_unreachable" or _proxy_generated(x):
        why = x.error_msg or " ".join(_TAGS.sub(" ", x.msg).split()) or x.answer
        add(
            "upstream_unreachable",
            _ev(x, x.error_msg and f"error: {scrub(x.error_msg[:SNIPPET])}", x.snippet()),
            why=scrub(why[:80]),
            upstream=x.url,
        )
    if st == 401 or (st == 403 and (not x.fingerprint or _about_auth(x))):
        code = "auth_rejected" if x.fingerprint else "auth_missing"
        www = x.header("www-authenticate")
        add(
            code,
            _ev(x, _auth_line(x), www and f"www-authenticate: {www}", x.snippet()),
            fingerprint=x.fingerprint or "",
        )
    if st == 405:
        expected = _EXPECTED_METHOD.get(x.endpoint, "")
        wrong = bool(expected) and expected != x.method
        add(
            "method_not_allowed",
            _ev(x, x.header("allow") and f"allow: {x.header('allow')}", x.snippet()),
            expected=expected,
            variant="wrong_method" if wrong else "",
        )

    # a client-side error answer (5xx are the server's own trouble, but 501 Not Implemented)
    error_answer = st is not None and (400 <= st < 500 or st == 501 or x.soft)
    prefix = _prefix_issue(x) if error_answer else None
    if prefix:
        add(
            "path_prefix",
            _ev(x, f"route prefix {x.prefix or '(none)'!r} before {x.endpoint[3:]}", x.snippet()),
            variant=prefix,
            which="doubled" if prefix == "doubled" else "missing",
        )
    elif error_answer and st not in AUTH_STATUSES and st != 405:
        subject = _subject(x, served)
        if subject == "model":
            listed = served.get(str(x.label))
            avail = f" (available: {', '.join(sorted(listed)[:5])})" if listed else ""
            add(
                "model_not_found",
                _ev(
                    x,
                    f"request model: {x.model}",
                    x.snippet(),
                    f"/v1/models lists {len(listed)} models without it" if listed else None,
                ),
                served=avail,
            )
        elif subject == "state":
            add(
                "previous_response_not_found",
                _ev(x, f"request builds on {stored_reference(x.rec)}", x.snippet()),
            )
        elif subject == "endpoint" or (
            st in (404, 501) and x.family != "other" and subject is None
        ):
            add("endpoint_not_implemented", _ev(x, x.snippet()), variant=x.endpoint)

    if is_2xx(st):
        error_event = x.end is not None and x.end.terminal == "error"
        if x.soft or error_event:
            where = "event in the stream" if x.end is not None else "body"
            add(
                "soft_error_200",
                _ev(x, x.snippet() if x.end is None else _event_error(x)),
                where=where,
                variant="stream" if x.end is not None else "",
            )
        elif x.stream and x.end is None:
            add("stream_not_honoured", _ev(x, "request: stream=true", x.snippet()))
    cut = stream_problem(x.rec, x.end)
    if cut:
        last = (x.rec.get("response") or {}).get("events") or [{}]
        tail = last[-1].get("data") if last else None
        tail_s = (
            json.dumps(tail, separators=(",", ":"))[:80]
            if isinstance(tail, dict)
            else str(tail)[:80]
        )
        add(
            "stream_truncated",
            _ev(x, cut, f"last event: {scrub(tail_s)}", x.error_kind and f"error: {x.error_kind}"),
            why=cut,
        )
    return out


# ---- chain rules --------------------------------------------------------------------------


def _chain_findings(
    xs: Mapping[str, _Ex], order: list[str], links: list[tuple[str, str, str]], final_id: str
) -> tuple[list[Finding], dict[str, set[str]]]:
    """Findings that need two exchanges, and the per-exchange codes they explain away."""
    out: list[Finding] = []
    explained: dict[str, set[str]] = {}
    redirected = set()
    for kind, a, b in links:
        s, t = xs[a], xs[b]
        if kind == "redirect":
            redirected.add(a)
            if t.method != s.method and not t.ok:
                loc = redact_url(s.header("location") or "")
                out.append(
                    Finding(
                        "redirect_method_change",
                        [a, b],
                        [s.url_line, f"location: {loc}", t.url_line, *filter(None, [t.snippet()])],
                        {
                            **_base_facts(s),
                            "target": loc,
                            "new_method": t.method,
                            "answer": t.answer,
                        },
                    )
                )
                explained.setdefault(b, set()).update(
                    {"method_not_allowed", "endpoint_not_implemented"}
                )
        elif (
            kind == "hop"
            and t.status in AUTH_STATUSES
            and s.fingerprint
            and t.fingerprint != s.fingerprint
        ):
            up = (
                f"{t.auth.get('header')} {t.fingerprint}"
                if t.auth and t.fingerprint
                else "no auth header"
            )
            out.append(
                Finding(
                    "auth_dropped_by_hop",
                    [a, b],
                    [
                        f"client → {s.rec.get('listener')}: {_auth_line(s)}",
                        f"hop → {t.rec.get('listener')}: {_auth_line(t)}",
                        t.line,
                    ],
                    {
                        **_base_facts(t),
                        "header": str(s.auth and s.auth.get("header")),
                        "fingerprint": str(s.fingerprint),
                        "upstream_auth": up,
                        "hop": f"arriving on {t.rec.get('listener') or 'the inner hop'}",
                    },
                )
            )
            for i in (a, b):
                explained.setdefault(i, set()).update({"auth_missing", "auth_rejected"})
    for i in order:
        x = xs[i]
        if (
            x.status in AUTH_STATUSES
            and x.auth
            and x.fingerprint
            and x.auth.get("forwarded") is False
        ):
            fwd = (x.rec["request"].get("forwarded_headers")) or []
            sent = header_get(fwd, str(x.auth.get("header")))
            up = f"{x.auth.get('header')}: {sent}" if sent else "no auth header"
            out.append(
                Finding(
                    "auth_dropped_by_hop",
                    [i],
                    [_auth_line(x), f"forwarded upstream: {up}", x.line],
                    {
                        **_base_facts(x),
                        "header": str(x.auth.get("header")),
                        "fingerprint": str(x.fingerprint),
                        "upstream_auth": up,
                        "hop": "the proxy forwarded",
                    },
                )
            )
            explained.setdefault(i, set()).update({"auth_missing", "auth_rejected"})
    f = xs[final_id]
    if (
        f.status in METHOD_CHANGING
        and final_id not in redirected
        and f.method not in ("GET", "HEAD")
        and f.header("location")
    ):
        loc = redact_url(f.header("location") or "")
        out.append(
            Finding(
                "redirect_method_change",
                [final_id],
                [
                    f.url_line,
                    f"location: {loc}",
                    f"clients repeat {f.method} as GET after {f.status}; "
                    "the follow-up was not captured",
                ],
                {**_base_facts(f), "target": loc, "new_method": "GET", "answer": "not captured"},
            )
        )
    return out, explained


# ---- text ----------------------------------------------------------------------------------

SUMMARIES = {
    "endpoint_not_implemented": "{server} does not implement {method} {endpoint} (answered {answer})",
    "soft_error_200": "{method} {path} answered {status} with an error {where}: clients see success",
    "method_not_allowed": "{method} {path} answered 405: {method} is not accepted there",
    "redirect_method_change": "{method} {url} was redirected ({status}) and repeated as "
    "{new_method} {target} ({answer})",
    "auth_missing": "{method} {path} answered {status}: no API key was sent",
    "auth_rejected": "{method} {path} answered {status}: the key {fingerprint} was rejected",
    "auth_dropped_by_hop": "the client sent {header} {fingerprint}, but the request {hop} "
    "carried {upstream_auth}; upstream answered {status}",
    "path_prefix": "{method} {path}: {which} /v1 in the path (answered {answer})",
    "model_not_found": "{server} does not serve model {model} ({method} {endpoint} answered {status})",
    "stream_not_honoured": "{method} {endpoint} asked for stream=true and got {ctype}, not SSE",
    "stream_truncated": "{method} {endpoint} stream ended early: {why}",
    "upstream_unreachable": "{method} {path}: the upstream could not be reached ({why})",
    "previous_response_not_found": "{server} did not keep the response this {method} "
    "{endpoint} builds on (answered {answer})",
}

# (code, provider, variant) → remedy; looked up most specific first.
REMEDIES: dict[tuple[str, str | None, str | None], str] = {
    ("previous_response_not_found", "vllm", None):
        "vLLM keeps responses only with VLLM_ENABLE_RESPONSES_API_STORE=1: set it, or send the "
        "whole conversation as input instead of previous_response_id",
    ("previous_response_not_found", None, None):
        "the server does not store responses (or not this one): send the whole conversation "
        "as input instead of previous_response_id, or enable its response store",
    ("endpoint_not_implemented", "lmstudio", "/v1/responses"):
        "LM Studio does not implement /v1/responses in this version: use chat.completions "
        "or upgrade LM Studio ≥ 0.3.29",
    ("endpoint_not_implemented", "ollama", "/v1/responses"):
        "Ollama serves /v1/responses from 0.13.3 on: upgrade Ollama or use chat.completions",
    ("endpoint_not_implemented", None, "/v1/responses"):
        "the server does not implement /v1/responses: use chat.completions, or put a gateway "
        "in front that translates (LiteLLM with model custom_openai/<name>)",
    ("endpoint_not_implemented", None, None):
        "the server does not serve {method} {endpoint}: call an endpoint it implements or "
        "upgrade the server",
    ("soft_error_200", "lmstudio", None):
        "LM Studio answers errors with 200 {{\"error\": …}} so the SDK raises nothing: check "
        "bodies for \"error\" and fix the cause (see the other diagnoses)",
    ("soft_error_200", None, "stream"):
        "the stream carried an error under a 2xx status: handle error events (the SDK raises "
        "APIError) and fix the upstream error quoted in the evidence",
    ("soft_error_200", None, None):
        "the server reports an error with a 2xx status so clients do not raise: check bodies "
        "for \"error\", or make the server answer 4xx/5xx",
    ("method_not_allowed", None, "wrong_method"):
        "send {expected} {endpoint}, not {method}: check the client and any redirect on the way",
    ("method_not_allowed", None, None):
        "the server does not accept {method} {endpoint}: it does not implement this "
        "operation; use an endpoint it serves or upgrade it",
    ("redirect_method_change", None, None):
        "set base_url to the redirect target ({target}) so no redirect is followed: the "
        "{status} turned {method} into {new_method}",
    ("auth_missing", "lmstudio", None):
        "LM Studio requires an API token: pass it as api_key, or turn authentication off "
        "in its server settings",
    ("auth_missing", "vllm", None):
        "vLLM runs with --api-key: pass the same key as api_key (OPENAI_API_KEY)",
    ("auth_missing", None, None):
        "send an API key: set OPENAI_API_KEY or pass api_key=… (Authorization: Bearer …)",
    ("auth_rejected", "lmstudio", None):
        "create an LM Studio API token in its server settings and pass it as api_key",
    ("auth_rejected", None, None):
        "the server does not accept key {fingerprint}: use a key issued for this server "
        "(another provider's key will not work)",
    ("auth_dropped_by_hop", None, None):
        "set the gateway to forward Authorization (or give it its own upstream key)",
    ("path_prefix", None, "doubled"):
        "base_url ends in /v1 and the path repeats it: drop one /v1",
    ("path_prefix", None, "missing"):
        "base_url lacks /v1: append /v1 to base_url (http://host:port/v1)",
    ("model_not_found", "ollama", None):
        "pull the model (`ollama pull {model}`) or request one the server has{served}",
    ("model_not_found", "lmstudio", None):
        "load {model} in LM Studio (`lms load {model}`) or request a loaded model{served}",
    ("model_not_found", "vllm", None):
        "request the name vLLM serves (its --served-model-name){served}",
    ("model_not_found", None, None):
        "request a model the server serves{served}, or make {model} available there",
    ("stream_not_honoured", None, None):
        "the server ignored stream=true on {endpoint}: call without stream=True, or use a "
        "server version that streams this endpoint",
    ("stream_truncated", None, None):
        "the stream was cut before its end: check proxy/gateway read timeouts and buffering "
        "(nginx: proxy_read_timeout, proxy_buffering off) and the server log",
    ("upstream_unreachable", None, None):
        "the proxy could not reach {upstream}: start the server or fix the upstream host/port",
}  # fmt: skip


def remedy(code: str, provider: str | None, facts: Mapping[str, str]) -> str:
    variant = facts.get("variant") or None
    for key in (
        (code, provider, variant),
        (code, provider, None),
        (code, None, variant),
        (code, None, None),
    ):
        if key in REMEDIES:
            return REMEDIES[key].format_map(_Facts(facts))
    raise KeyError(code)


# ---- assembly ------------------------------------------------------------------------------


def served_models(
    records_by_id: Mapping[str, Record], exchanges: pd.DataFrame
) -> dict[str, set[str]]:
    """Model ids each backend label listed on a captured `GET /v1/models` (if any)."""
    hit = exchanges[
        (exchanges["endpoint"] == "/v1/models")
        & (exchanges["method"] == "GET")
        & (exchanges["status"].fillna(0) == 200)
    ]
    out: dict[str, set[str]] = {}
    for rid, label in zip(hit["id"], hit["label"], strict=True):
        body = (records_by_id[rid].get("response") or {}).get("body")
        data = body.get("data") if isinstance(body, dict) else None
        if isinstance(data, list):
            ids = {str(m["id"]) for m in data if isinstance(m, dict) and "id" in m}
            out.setdefault(str(label), set()).update(ids)
    return out


def _merge(findings: list[Finding], order: list[str]) -> list[Finding]:
    by_code: dict[str, Finding] = {}
    for f in findings:
        if f.code not in by_code:
            by_code[f.code] = Finding(f.code, list(f.ids), list(f.evidence), dict(f.facts))
            continue
        m = by_code[f.code]
        m.ids.extend(i for i in f.ids if i not in m.ids)
        m.evidence.extend(e for e in f.evidence if e not in m.evidence)
    rank = {i: n for n, i in enumerate(order)}
    for m in by_code.values():
        m.ids.sort(key=rank.__getitem__)
    return [by_code[c] for c in CODES if c in by_code]


def diagnose_chain(
    chain: Mapping[str, Any], records_by_id: Mapping[str, Record], served: Mapping[str, set[str]]
) -> list[dict[str, Any]]:
    """Diagnosis rows for one `chains_frame` row (none for a healthy chain)."""
    order: list[str] = list(chain["exchange_ids"])
    xs = {i: _view(records_by_id[i]) for i in order}
    links = [(str(k), str(a), str(b)) for k, a, b in chain["links"]]
    found, explained = _chain_findings(xs, order, links, str(chain["final_id"]))
    for i in order:
        if not xs[i].ok:
            drop = explained.get(i, set())
            found.extend(f for f in _exchange_findings(xs[i], served) if f.code not in drop)
    if not found:
        return []
    provider, prov_evidence = guess_provider([xs[i] for i in order])
    server = PROVIDER_NAMES.get(provider or "", "the server")
    rows = []
    for f in _merge(found, order):
        facts = _Facts({**f.facts, "server": server})
        rows.append(
            {
                "chain_id": chain["chain_id"],
                "code": f.code,
                "exchange_ids": f.ids,
                "label": chain["label"],
                "endpoint": xs[f.ids[0]].endpoint,
                "provider": provider,
                "summary": SUMMARIES[f.code].format_map(facts),
                "evidence": f.evidence + [e for e in prov_evidence if e not in f.evidence],
                "remedy": remedy(f.code, provider, facts),
                "recovered": bool(chain["ok"]),
                "title": chain["title"],
            }
        )
    return rows


def diagnose(
    records: Iterable[Record],
    *,
    exchanges: pd.DataFrame | None = None,
    records_by_id: Mapping[str, Record] | None = None,
) -> pd.DataFrame:
    """One row per (failing chain, diagnosis code); see `DIAGNOSIS_COLUMNS`.

    A caller that has analysed the records already passes what it built from them
    (`Analysis.exchanges`, `Analysis.records_by_id`), so that it is not built again. The
    cyclic garbage collector is paused meanwhile, as in `wirediff.analysis.comparison.analyze.analyze`."""
    with paused_gc():
        return _diagnose(records, exchanges, records_by_id)


def _diagnose(
    records: Iterable[Record],
    exchanges: pd.DataFrame | None,
    records_by_id: Mapping[str, Record] | None,
) -> pd.DataFrame:
    if records_by_id is None or exchanges is None:
        records = list(records)
    by_id = records_by_id if records_by_id is not None else {r["id"]: r for r in records}
    ex = exchanges if exchanges is not None else exchanges_frame(records)
    failing = chain_rows(ex, by_id, failing_only=True)
    served = served_models(by_id, ex) if failing else {}
    rows: list[dict[str, Any]] = []
    for row in failing:
        rows.extend(diagnose_chain(dict(zip(CHAIN_COLUMNS, row, strict=True)), by_id, served))
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in DIAGNOSIS_COLUMNS})
    return pd.DataFrame(
        {
            c: pd.Series([r[c] for r in rows], dtype=bool if c == "recovered" else object)
            for c in DIAGNOSIS_COLUMNS
        }
    )


def format_diagnoses(df: pd.DataFrame) -> str:
    """Terminal text for `wirediff diagnose`: chains, their codes, evidence and fixes."""
    if df.empty:
        return "no failing chains: nothing to diagnose\n"
    lines: list[str] = []
    n_chains = df["chain_id"].nunique()
    for chain_id, group in df.groupby("chain_id", sort=False):
        first = group.iloc[0]
        state = "recovered" if first["recovered"] else "failed"
        provider = first["provider"]
        who = f", provider {provider}" if isinstance(provider, str) and provider else ""
        lines.append(f"{chain_id} [{first['label']}] {state}{who}")
        lines.append(f"  {first['title']}")
        for row in group.to_dict("records"):
            lines.append(f"  {row['code']}: {row['summary']}")
            lines.extend(f"    · {e}" for e in row["evidence"])
            lines.append(f"    fix: {row['remedy']}")
        lines.append("")
    lines.append(f"{len(df)} diagnoses in {n_chains} chains")
    return "\n".join(lines) + "\n"
