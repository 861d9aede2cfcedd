"""Apply the diagnosis rules to one failing exchange, and to two linked exchanges together.

`exchange_findings` finds what one failing exchange shows; `chain_findings` what only two linked
exchanges show together, such as a redirect that changed the method or a hop that dropped the
key.

Rules go by strength of evidence: first whether the server answered at all, failing on TLS or an
unreachable upstream; then what the answer itself says about the key, the WebSocket upgrade, the
method, the route, a parameter or the model, read by `subject`; and only then what other calls
suggest. Any failing answer gets a diagnosis: a 4xx no rule explains is `request_rejected`, a 5xx
the server wrote itself `server_error`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wirediff._support import STOPPED_IN_FLIGHT, clip, plural
from wirediff.analysis.diagnosis.outcome import stream_problem, unreadable_answer
from wirediff.analysis.diagnosis.subject import (
    Served,
    context_exceeded,
    echoes_route,
    says_unsupported,
    server_hint,
    stored_reference,
    subject_of,
    wrong_method,
)
from wirediff.analysis.diagnosis.view import ExchangeView, scrub
from wirediff.profiles import load_clients
from wirediff.record.redact import redact_url
from wirediff.record.tags import header_get

__all__ = ["Finding", "chain_findings", "exchange_findings", "stored_reference"]

AUTH_STATUSES = frozenset({401, 403})
METHOD_CHANGING = frozenset({301, 302, 303})  # clients repeat a POST as GET after these
PROXY_STATUSES = frozenset({502, 503, 504})
NORMAL_CLOSE = 1000
"""A WebSocket close code that says the session ended as it should (RFC 6455 7.4.1)."""
QUOTED = 80
"""Characters of a cause or of a stream's last event quoted in a summary or as evidence."""
LISTED_MODELS = 5
"""Models the server does serve, named in a model_not_found remedy."""
NO_ANSWER_KINDS = frozenset(
    {"upstream_unreachable", "upstream_disconnect", "timeout", "proxy_error", "client_disconnect"}
)
"""`error.kind`s that leave an exchange without an answer because the upstream gave none."""

_PLAIN_HTTP = re.compile(r"(?i)does not speak TLS|wrong version number")
"""What mitmproxy and OpenSSL say when a server answers a TLS handshake in plain HTTP."""
_CONNECT_WORDS = re.compile(
    r"(?i)connection (refused|reset|error|failed)|connecterror|apiconnectionerror|could not connect|"
    r"failed to connect|all connection attempts failed|unreachable|name or service not known|"
    r"no route to host|bad gateway|gateway time-?out|upstream|\bdns\b"
)
_TAGS = re.compile(r"<[^>]*>")
_Add = Callable[..., None]
"""`add(code, evidence, **facts)`: record a finding about the exchange being read."""
_AUTH_WORDS = re.compile(r"(?i)(api[ _-]?key|auth|token|credential|unauthori[sz]ed)")


@dataclass
class Finding:
    code: str
    ids: list[str]
    evidence: list[str]
    facts: dict[str, str] = field(default_factory=dict)


def _prefix_issue(x: ExchangeView, served: Served) -> str | None:
    """Name a doubled or missing `/v1` when the answer is about the route.

    The answer is about the route with a 404 or 405 or an echo of the path; a 429 or a 400 on a
    bad parameter is about something else. When the backend answered another call under the same
    prefix, the prefix is right, and the route is what it lacks."""
    if x.family == "other" or not (x.status in (404, 405) or echoes_route(x)):
        return None
    if x.prefix in served.prefixes.get(str(x.label), ()):
        return None
    if re.search(r"/v1/v1$", x.prefix):
        return "doubled"
    if x.prefix == "":
        return "missing"
    return None


def _about_auth(x: ExchangeView) -> bool:
    """Tell whether a 403 with a key sent is about the key, which it is only if it says so.

    It may be about something else, such as a region."""
    return any(_AUTH_WORDS.search(str(v or "")) for v in (x.code, x.etype, x.msg))


def _proxy_generated(x: ExchangeView) -> bool:
    """Tell a 5xx that says an upstream could not be reached, rather than why the request failed.

    That is a gateway's message naming the connection. An operation it says it does not support
    is about the request, whatever its exception is called."""
    if x.status is None or x.status < 500 or says_unsupported(x):
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
        "why": scrub(clip(_message_text(x), QUOTED)) or x.answer,
        "hint": scrub(server_hint(x.msg)),
    }


def _message_text(x: ExchangeView) -> str:
    return " ".join(_TAGS.sub(" ", x.msg).split())


def _ev(x: ExchangeView, *extra: str | None) -> list[str]:
    out = [x.line]
    out.extend(e for e in extra if e)
    return out


def _last_event(x: ExchangeView) -> str | None:
    """Quote the stream's last event as evidence; `None` when there was none."""
    if not x.events:
        return None
    tail = x.events[-1].get("data")
    text = json.dumps(tail, separators=(",", ":")) if isinstance(tail, dict) else str(tail)
    return f"last event: {scrub(clip(text, QUOTED))}"


def exchange_findings(x: ExchangeView, served: Served) -> list[Finding]:
    """Find what one failing exchange shows, strongest evidence first."""
    out: list[Finding] = []
    st, facts = x.status, _base_facts(x)

    def add(code: str, evidence: list[str], **more: str) -> None:
        out.append(Finding(code, [x.id], evidence, {**facts, **more}))

    # 0. the capture itself stopped mid-way: whatever came so far is the server's, the cut not
    if x.error_kind == STOPPED_IN_FLIGHT:
        add("capture_stopped", _ev(x, f"error: {x.error_kind}", _last_event(x)), stage=_stage(x))
        if st is None:
            return out
    # 1. no answer from the server: the proxy's TLS handshake or connection failed
    elif x.error_kind == "tls":
        add(
            "upstream_tls",
            _ev(x, f"error: {scrub(clip(x.error_msg, QUOTED * 2))}"),
            why=scrub(clip(x.error_msg, QUOTED)) or "TLS handshake failed",
            upstream=x.url,
            variant="plain_http"
            if _PLAIN_HTTP.search(x.error_msg)
            else ("sent" if x.rec.get("replay_of") is not None else ""),
        )
        return out
    # a plain 2xx answer that stopped before its body ended: no client reads an answer from it
    cut = x.success and x.end is None and x.error_kind in NO_ANSWER_KINDS - {"client_disconnect"}
    if (st is None and x.error_kind in NO_ANSWER_KINDS) or cut or _proxy_generated(x):
        why = x.error_msg or _message_text(x) or x.answer
        what = "the answer stopped before its end" if cut else "the upstream could not be reached"
        add(
            "upstream_unreachable",
            _ev(x, x.error_msg and f"error: {scrub(clip(x.error_msg, QUOTED * 2))}", x.snippet()),
            what=what,
            why=scrub(clip(why, QUOTED)),
            upstream=x.url,
            # an error object is the server's own answer: it is up, its upstream is not
            variant="cut"
            if cut
            else "gateway"
            if isinstance(x.body, dict) and x.error is not None
            else "",
        )
        return out
    if st is None:
        return out
    _answer_findings(x, served, add)
    _stream_findings(x, add)
    unreadable = unreadable_answer(x.rec) if x.error_kind is None else None
    if unreadable:
        add(
            "answer_unreadable",
            _ev(x, f"{x.status} {x.ctype or '(no content-type)'}: {unreadable}", x.snippet()),
            why=unreadable,
            variant="not_utf8" if "UTF-8" in unreadable else "",
        )
    if x.error_in_success and _CONNECT_WORDS.search(x.msg):
        add(
            "upstream_unreachable",
            _ev(x, x.words() or x.snippet()),
            variant="gateway",
            why=scrub(clip(_message_text(x), QUOTED)),
        )
    return out


def _stage(x: ExchangeView) -> str:
    """Say how far the exchange had come when the capture stopped."""
    if x.status is None:
        return "while the request waited for its answer"
    if x.events:
        return f"after {plural(len(x.events), 'event')} of its stream"
    return f"while its answer ({x.status}) arrived"


def _answer_findings(x: ExchangeView, served: Served, add: _Add) -> None:
    """Read what the status and the error answer say: key, upgrade, method, route, subject."""
    st = x.status
    assert st is not None
    if st == 401 or (st == 403 and (not x.fingerprint or _about_auth(x))):
        www = x.header("www-authenticate")
        add(
            "auth_rejected" if x.fingerprint else "auth_missing",
            _ev(x, _auth_line(x), www and f"www-authenticate: {www}", x.snippet(), x.words()),
            fingerprint=x.fingerprint or "",
            variant="sent" if x.rec.get("replay_of") is not None else "",  # by wirediff
        )
        return
    soft = x.error_in_success
    prefix = _prefix_issue(x, served) if st in (404, 405) or soft else None
    if x.websocket and st != 101 and not prefix:
        add("websocket_not_supported", _ev(x, "request: Upgrade: websocket", x.snippet()))
        return
    expected = wrong_method(x)
    if st == 405:
        add(
            "method_not_allowed",
            _ev(x, x.header("allow") and f"allow: {x.header('allow')}", x.snippet()),
            expected=expected or "",
            variant="wrong_method" if expected else "",
        )
        return
    if prefix:
        add(
            "path_prefix",
            _ev(x, f"route prefix {x.prefix or '(none)'!r} before {x.endpoint[3:]}", x.snippet()),
            variant=prefix,
            which="doubled" if prefix == "doubled" else "missing",
        )
        return
    if expected and (st == 404 or soft):
        add(
            "method_not_allowed",
            _ev(x, f"answered {st} for {x.method}; {x.endpoint} takes {expected}", x.snippet()),
            expected=expected,
            variant="wrong_method",
        )
        return
    if 400 <= st < 500 or st == 501 or soft or (st >= 500 and says_unsupported(x)):
        _error_answer(x, served, add)
    elif st >= 500:
        add(
            "server_error",
            _ev(x, x.snippet(), x.words()),
            variant="context_length_exceeded" if context_exceeded(x) else "",
        )


def _error_answer(x: ExchangeView, served: Served, add: _Add) -> None:
    """Find what a 4xx, a 501 or an error under 2xx is about."""
    st = x.status
    subject = subject_of(x, served)
    kind = subject.kind if subject else None
    if kind == "model":
        listed = served.models.get(str(x.label))
        avail = f" (available: {', '.join(sorted(listed)[:LISTED_MODELS])})" if listed else ""
        add(
            "model_not_found",
            _ev(
                x,
                f"request model: {x.model}",
                x.snippet(),
                x.words(),
                f"/v1/models lists {len(listed)} models without it" if listed else None,
            ),
            served=avail,
        )
    elif kind == "state":
        add(
            "previous_response_not_found",
            _ev(x, f"request builds on {stored_reference(x.rec)}", x.snippet(), x.words()),
        )
    elif kind == "endpoint" or st in (404, 501):
        add("endpoint_not_implemented", _ev(x, x.snippet(), x.words()), variant=x.endpoint)
    elif x.error_in_success:
        return  # soft_error_200 or stream_error_event says it (`_stream_findings`)
    elif kind == "context":
        add(
            "request_rejected",
            _ev(x, x.snippet(), x.words()),
            variant="context_length_exceeded",
            about=": the context length is exceeded",
        )
    elif subject is not None and subject.kind == "parameter":
        variant = (
            "missing_parameter"
            if subject.missing
            else "unsupported_parameter"
            if subject.unsupported
            else "invalid_parameter"
        )
        add(
            "request_rejected",
            _ev(x, f"{variant}: {subject.param}", x.snippet(), x.words()),
            variant=variant,
            param=subject.param,
            about=f" over {subject.param}",
        )
    else:
        add(
            "request_rejected",
            _ev(x, x.snippet(), x.words()),
            variant="rate_limited" if st == 429 else "",
            about="",
        )


def _stream_findings(x: ExchangeView, add: _Add) -> None:
    """Find errors under a success status, and streams that did not end as they should."""
    if not x.success:
        return
    error_event = x.error_event
    if error_event:
        said = x.error.quote() if x.error else _last_event(x)
        add(
            "stream_error_event",
            _ev(x, said),
            variant="context_length_exceeded" if context_exceeded(x) else "",
        )
    elif x.soft:
        add(
            "soft_error_200",
            _ev(x, x.snippet(), x.words()),
            where="event in the stream" if x.end is not None else "body",
            clients=_what_clients_do(x),
            variant="responses" if x.family == "responses" else "",
        )
    elif x.stream and x.end is None:
        add("stream_not_honoured", _ev(x, "request: stream=true", x.snippet()))
    stopped = x.error_kind == STOPPED_IN_FLIGHT  # the capture cut it: `capture_stopped`
    cut = None if error_event or stopped else stream_problem(x.rec, x.end)
    if cut:
        closed = _closed_with(x)
        ended = not (x.end and x.end.partial) and x.error_kind is None and closed is None
        add(
            "stream_truncated",
            _ev(x, cut, _last_event(x), x.error_kind and f"error: {x.error_kind}", closed),
            why=f"{cut}; {closed}" if closed else cut,
            variant="ended" if ended else "closed" if closed else "",
            closed=closed or "",
        )
        reason = _close_reason(x)
        if reason and _CONNECT_WORDS.search(reason):
            add("upstream_unreachable", _ev(x, closed), variant="gateway", why=clip(reason, QUOTED))


def _closing(x: ExchangeView) -> Mapping[str, Any]:
    """Read how a WebSocket session closed, from `response.websocket`.

    It is empty for any other exchange."""
    resp = x.rec.get("response")
    ws = resp.get("websocket") if resp is not None and x.websocket else None
    return ws if isinstance(ws, dict) else {}


def _what_clients_do(x: ExchangeView) -> str:
    """Say what each known client does with an error under a 200, call by call, as measured.

    The measurements are `soft_error_200` in profiles/clients.yaml; the exchange's own client
    comes first."""
    sdk: Mapping[str, Any] = x.rec["tags"].get("sdk") or {}
    lang = {"python": "openai-python", "js": "openai-node"}.get(str(sdk.get("lang")))
    own = sdk.get("client") or lang
    said = [
        (name != own, f"{known['name']}: " + ", ".join(f"{c} {w}" for c, w in calls.items()))
        for name, known in load_clients().items()
        if (calls := known.get("soft_error_200"))
    ]
    return "; ".join(line for _, line in sorted(said, key=lambda s: s[0]))


def _close_reason(x: ExchangeView) -> str:
    """Quote the reason a WebSocket's closing side gave, scrubbed; "" for none."""
    return scrub(str(_closing(x).get("close_reason") or ""))


def _closed_with(x: ExchangeView) -> str | None:
    """Say how a WebSocket session was closed when not normally with 1000.

    That is the code, who closed it and the reason, in the words of the close frame; `None` for a
    normal close."""
    ws = _closing(x)
    code = ws.get("close_code")
    if not isinstance(code, int) or code == NORMAL_CLOSE:
        return None
    by = ws.get("closed_by")
    reason = _close_reason(x)
    said = f" ({clip(reason, QUOTED)})" if reason else ""
    return f"closed{' by the ' + by if by else ''} with {code}{said}"


def chain_findings(
    xs: Mapping[str, ExchangeView],
    order: list[str],
    links: list[tuple[str, str, str]],
    final_id: str,
) -> tuple[list[Finding], dict[str, set[str]]]:
    """Find what needs two exchanges, and the per-exchange codes those findings explain away."""
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
