"""The rules: what one failing exchange shows (`exchange_findings`), and what only two
linked exchanges show together (`chain_findings`: a redirect that changed the method, a hop
that dropped the key).

Rules classify by status, content type, body structure and context (what the request
asked, what the chain shows, which models the server listed) first. Message strings are
used only where the message *echoes the request* (its path, its model), so the rules also
hold on servers no profile describes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from wirediff._support import is_2xx
from wirediff._types import Record
from wirediff.analysis.diagnosis.chains import stream_problem
from wirediff.analysis.diagnosis.view import SNIPPET, ExchangeView, scrub
from wirediff.record.redact import redact_url
from wirediff.record.tags import header_get

__all__ = ["Finding", "chain_findings", "exchange_findings", "stored_reference"]

AUTH_STATUSES = frozenset({401, 403})
METHOD_CHANGING = frozenset({301, 302, 303})  # clients repeat a POST as GET after these
PROXY_STATUSES = frozenset({502, 503, 504})
QUOTED = 80
"""Characters of a cause or of a stream's last event quoted in a summary or as evidence."""
LISTED_MODELS = 5
"""Models the server does serve, named in a model_not_found remedy."""

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
    "/v1/chat/completions": "POST",
    "/v1/completions": "POST",
    "/v1/responses": "POST",
    "/v1/embeddings": "POST",
    "/v1/moderations": "POST",
    "/v1/images/{op}": "POST",
    "/v1/audio/{op}": "POST",
    "/v1/models": "GET",
    "/v1/files/{id}/content": "GET",
}


@dataclass
class Finding:
    code: str
    ids: list[str]
    evidence: list[str]
    facts: dict[str, str] = field(default_factory=dict)


def _prefix_issue(x: ExchangeView) -> str | None:
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


def _about_auth(x: ExchangeView) -> bool:
    """A 403 with a key sent is about the key only if it says so (not, e.g., a region)."""
    return any(_AUTH_WORDS.search(str(v or "")) for v in (x.code, x.etype, x.msg))


def _echoes_route(x: ExchangeView) -> bool:
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


def _about_stored_response(x: ExchangeView) -> bool:
    ref = stored_reference(x.rec)
    if not ref:
        return False
    return (
        ref in x.msg
        or x.param in ("previous_response_id", "response_id")
        or x.code == "previous_response_not_found"
    )


def _subject(x: ExchangeView, served: Mapping[str, set[str]]) -> str | None:
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


def _proxy_generated(x: ExchangeView) -> bool:
    """A 5xx written by a proxy/gateway rather than by the API server itself."""
    if x.status is None or x.status < 500:
        return False
    if _CONNECT_WORDS.search(x.msg) or _CONNECT_WORDS.search(x.error_msg):
        return True
    if x.status not in PROXY_STATUSES:
        return False
    structured = isinstance(x.body, dict) and ("error" in x.body or "detail" in x.body)
    return not structured


def _auth_line(x: ExchangeView) -> str:
    if not x.auth:
        return "request carried no auth header"
    value = " ".join(filter(None, [x.auth.get("scheme"), x.fingerprint or "<empty key>"]))
    return f"request {x.auth.get('header')}: {value}"


def _base_facts(x: ExchangeView) -> dict[str, str]:
    return {
        "method": x.method,
        "path": x.path,
        "endpoint": x.endpoint,
        "status": str(x.status),
        "answer": x.answer,
        "ctype": x.ctype or "no content type",
        "model": str(x.model),
        "url": x.url,
    }


def _ev(x: ExchangeView, *extra: str | None) -> list[str]:
    out = [x.line]
    out.extend(e for e in extra if e)
    return out


def _event_error(x: ExchangeView) -> str:
    return f"error event: {scrub(x.msg[:SNIPPET])}" if x.msg else "error event in the stream"


def exchange_findings(x: ExchangeView, served: Mapping[str, set[str]]) -> list[Finding]:
    out: list[Finding] = []
    st, facts = x.status, _base_facts(x)

    def add(code: str, evidence: list[str], **more: str) -> None:
        out.append(Finding(code, [x.id], evidence, {**facts, **more}))

    if x.error_kind == "upstream_unreachable" or _proxy_generated(x):
        why = x.error_msg or " ".join(_TAGS.sub(" ", x.msg).split()) or x.answer
        add(
            "upstream_unreachable",
            _ev(x, x.error_msg and f"error: {scrub(x.error_msg[:SNIPPET])}", x.snippet()),
            why=scrub(why[:QUOTED]),
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
            avail = f" (available: {', '.join(sorted(listed)[:LISTED_MODELS])})" if listed else ""
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
            json.dumps(tail, separators=(",", ":"))[:QUOTED]
            if isinstance(tail, dict)
            else str(tail)[:QUOTED]
        )
        add(
            "stream_truncated",
            _ev(x, cut, f"last event: {scrub(tail_s)}", x.error_kind and f"error: {x.error_kind}"),
            why=cut,
        )
    return out


def chain_findings(
    xs: Mapping[str, ExchangeView],
    order: list[str],
    links: list[tuple[str, str, str]],
    final_id: str,
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
