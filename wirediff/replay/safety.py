"""Decide what may be sent again.

Originals that can be planned, requests that can be rebuilt, and the methods and endpoints
replayed without `--allow-unsafe`."""

from __future__ import annotations

import base64
import binascii

from wirediff._types import Record
from wirediff.errors import PlanError
from wirediff.record.tags import route
from wirediff.replay.paths import path_problem

__all__ = [
    "SAFE_METHODS",
    "SAFE_POST",
    "check_original",
    "endpoint_of",
    "is_replayable_original",
    "is_stream",
    "request_problem",
    "unsafe_reason",
]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SAFE_POST = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/embeddings",
        "/v1/moderations",
    }
)
"""Generation endpoints: replayed by default. Anything else that is not a GET is *unsafe*."""


def is_stream(rec: Record) -> bool:
    body = (rec.get("request") or {}).get("body")
    return bool((rec.get("tags") or {}).get("stream")) or (
        isinstance(body, dict) and body.get("stream") is True
    )


def endpoint_of(rec: Record) -> tuple[str, str]:
    """Return `(METHOD, route template)` of the request itself: tags may be from an older build."""
    req = rec.get("request") or {}
    return str(req.get("method", "")).upper(), route(str(req.get("path") or ""))[1]


def unsafe_reason(rec: Record) -> str | None:
    """Say why this exchange is not replayed without `--allow-unsafe`; None when it is safe."""
    method, endpoint = endpoint_of(rec)
    if method in SAFE_METHODS or (method == "POST" and endpoint in SAFE_POST):
        return None
    return f"{method} {endpoint} may change state on the target; replayed only with --allow-unsafe"


def is_replayable_original(rec: Record) -> bool:
    """Tell whether `rec` is an original: replays and skipped records are never replayed again."""
    if rec.get("replay_of"):
        return False
    err = rec.get("error")
    return not (isinstance(err, dict) and err.get("kind") == "skipped")


def check_original(rec: Record) -> None:
    """Raise a one-line `PlanError` for a record that cannot even be planned."""
    rid = rec.get("id")
    if not isinstance(rid, str) or not rid:
        raise PlanError(f"a record has no id (session {rec.get('session')!r})")
    if not isinstance(rec.get("request"), dict):
        raise PlanError(f"record {rid}: no request object")
    started = rec.get("started")
    if started is not None and (isinstance(started, bool) or not isinstance(started, int | float)):
        raise PlanError(f"record {rid}: `started` is not a number ({started!r})")


def request_problem(rec: Record) -> str | None:
    """Say why the captured request cannot be sent again; None when it can."""
    req = rec["request"]
    if not isinstance(req.get("method"), str) or not req["method"].strip():
        return "the captured request has no method"
    if not isinstance(req.get("path"), str):
        return "the captured request has no path"
    problem = path_problem(req["path"] or "/")
    if problem is not None:
        return problem
    headers = req.get("headers") or []
    if not isinstance(headers, list) or not all(
        isinstance(h, list | tuple) and len(h) == 2 and all(isinstance(x, str) for x in h)
        for h in headers
    ):
        return "the captured request headers are not [name, value] pairs"
    if (rec.get("tags") or {}).get("transport") == "websocket" or any(
        k.lower() == "upgrade" and v.lower() == "websocket" for k, v in headers
    ):
        return "a WebSocket session is not replayed (its messages are not re-sent over HTTP)"
    b64 = req.get("b64")
    if req.get("body") is None and req.get("text") is None and b64 is not None:
        try:
            base64.b64decode(str(b64), validate=True)
        except (binascii.Error, ValueError) as e:
            return f"the captured request body is not valid base64 ({e})"
    return None
