"""What identifies a request across backends, listeners and replays: equal bodies, the user's
prompt, and the key two hops of one call (client → gateway → backend) have in common."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "HOP_LOOKBACK",
    "HOP_SLACK_S",
    "HOP_WINDOW_S",
    "body_digest",
    "body_key",
    "digest",
    "digests",
    "hop_digest",
    "hop_key",
    "prompt_text",
    "request_digest",
    "request_key",
]

HOP_SLACK_S = 0.05  # clock slack when checking that the inner hop lies inside the outer one
HOP_WINDOW_S = 30.0  # an outer hop without a duration contains what starts this soon after it
HOP_LOOKBACK = 16  # equal requests on one listener an inner hop looks back through


def canonical(value: Any) -> str:
    """JSON text that is equal for equal values (key order ignored)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def digest(text: str) -> int:
    """A 64-bit hash of `text` that every process computes alike (`hash()` does not: it
    is salted per process), for keys that cross processes and machines."""
    return int.from_bytes(
        hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    )


def body_key(request: Mapping[str, Any]) -> int:
    """A hash that is equal for equal request bodies (key order ignored)."""
    body = request.get("body")
    if body is not None:
        return hash(canonical(body))
    return hash((request.get("text"), request.get("b64")))


def body_digest(request: Mapping[str, Any]) -> int:
    """`body_key`, the same in every process."""
    body = request.get("body")
    if body is not None:
        return digest(canonical(body))
    return digest(canonical(["text", request.get("text"), request.get("b64")]))


def request_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two originals repeats of one request (and comparable answers)."""
    req = record.get("request") or {}
    resp = record.get("response") or {}
    return (
        record.get("label"),
        req.get("method"),
        req.get("path"),
        json.dumps(req.get("body"), sort_keys=True),
        resp.get("status"),
    )


def request_digest(record: Mapping[str, Any]) -> int:
    """`request_key`, the same in every process (equal keys, equal digests)."""
    req = record.get("request") or {}
    resp = record.get("response") or {}
    head = [record.get("label"), req.get("method"), req.get("path"), resp.get("status")]
    return digest(canonical(head) + canonical(req.get("body")))


def _texts(content: Any) -> list[str]:
    """The text of a message's content: a string, or the `text` of its parts."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    return []


def prompt_text(body: Any) -> str | None:
    """What the user asked, normalised so that it survives a gateway: the texts of the
    user messages (chat), of the user items or the `input` string (Responses, embeddings)
    or the `prompt` (completions), whitespace collapsed; `None` when there is none.

    A gateway renames the model, adds `stream`/`stream_options` or a system prompt, and may
    translate a Responses call into a chat completion, but it passes the user's words on.
    """
    if not isinstance(body, dict):
        return None
    parts: list[str] = []
    messages, inp, prompt = body.get("messages"), body.get("input"), body.get("prompt")
    if isinstance(messages, list):
        for m in messages:
            if isinstance(m, dict) and m.get("role") == "user":
                parts.extend(_texts(m.get("content")))
    elif isinstance(inp, str):
        parts.append(inp)
    elif isinstance(inp, list):
        for item in inp:
            if isinstance(item, str):
                parts.append(item)
            elif isinstance(item, dict) and item.get("role") == "user":
                parts.extend(_texts(item.get("content")))
    elif isinstance(prompt, str):
        parts.append(prompt)
    elif isinstance(prompt, list):
        parts.extend(p for p in prompt if isinstance(p, str))
    text = " ".join(" ".join(parts).split())
    return text or None


def hop_key(request: Mapping[str, Any]) -> tuple[Any, ...]:
    """What the two hops of one call have in common: the prompt, or for a request without
    one the exact body with its method and route."""
    prompt = prompt_text(request.get("body"))
    if prompt is not None:
        return ("prompt", prompt)
    route = str(request.get("path") or "").split("?")[0]
    return ("body", body_key(request), request.get("method"), route)


def digests(record: Mapping[str, Any], hop: bool) -> tuple[int, int, int]:
    """`request_digest`, `body_digest` and (with `hop`, else 0) `hop_digest` of a record,
    its body serialised once."""
    req = record.get("request") or {}
    resp = record.get("response") or {}
    body = req.get("body")
    text = canonical(body)
    head = [record.get("label"), req.get("method"), req.get("path"), resp.get("status")]
    request = digest(canonical(head) + text)
    content = digest(text) if body is not None else body_digest(req)
    if not hop:
        return request, content, 0
    prompt = prompt_text(body)
    if prompt is not None:
        return request, content, digest(canonical(["prompt", prompt]))
    route = str(req.get("path") or "").split("?")[0]
    return request, content, digest(canonical(["body", content, req.get("method"), route]))


def hop_digest(request: Mapping[str, Any]) -> int:
    """`hop_key`, the same in every process."""
    prompt = prompt_text(request.get("body"))
    if prompt is not None:
        return digest(canonical(["prompt", prompt]))
    route = str(request.get("path") or "").split("?")[0]
    return digest(canonical(["body", body_digest(request), request.get("method"), route]))
