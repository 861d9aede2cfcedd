"""Identify a request across backends, listeners and replays.

The keys are equal bodies, the user's prompt, the key two hops of one call (client → gateway →
backend) have in common, and the fingerprint that pairs independent captures of one app against
different backends."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl

import orjson

from wirediff.record.names import SECRET_QUERY
from wirediff.record.tags import route

__all__ = [
    "BACKEND_FIELDS",
    "HOP_LOOKBACK",
    "HOP_SLACK_S",
    "HOP_WINDOW_S",
    "ID_KEYS",
    "ask_digest",
    "ask_text",
    "body_digest",
    "body_key",
    "digest",
    "digests",
    "hop_key",
    "prompt_text",
    "request_fingerprint",
]

HOP_SLACK_S = 0.05  # clock slack when checking that the inner hop lies inside the outer one
HOP_WINDOW_S = 30.0  # an outer hop without a duration contains what starts this soon after it
HOP_LOOKBACK = 16  # equal requests on one listener an inner hop looks back through


def canonical(value: Any) -> str:
    """Write JSON text that is equal for equal values, key order ignored.

    orjson writes it, else `json` for what orjson refuses: integers beyond 64 bits, lone
    surrogates, keys that are not strings. Either text only ever meets others made in the same
    run."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def digest(text: str) -> int:
    """Hash `text` into 64 bits alike in every process, for keys that cross processes and machines.

    `hash()` does not: it is salted per process."""
    return int.from_bytes(
        hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    )


def body_key(request: Mapping[str, Any]) -> int:
    """Hash a request body so that equal bodies, key order ignored, hash equal."""
    body = request.get("body")
    if body is not None:
        return hash(canonical(body))
    return hash((request.get("text"), request.get("b64")))


def body_digest(request: Mapping[str, Any]) -> int:
    """Compute `body_key` as a digest, the same in every process."""
    body = request.get("body")
    if body is not None:
        return digest(canonical(body))
    return digest(canonical(["text", request.get("text"), request.get("b64")]))


def _texts(content: Any) -> list[str]:
    """Return the text of a message's content: a string, or the `text` of its parts."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]
    return []


def prompt_text(body: Any) -> str | None:
    """Return what the user asked, normalised so that it survives a gateway; `None` when nothing.

    That is the texts of the user messages for chat, of the user items or the `input` string for
    Responses and embeddings, or the `prompt` for completions, whitespace collapsed.

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


def _turns(item: Any) -> list[list[str]]:
    """Turn one chat message or Responses input item into turns of a conversation.

    Either API carries them alike: `[role, words]` for what the app or the model said (system
    and developer instructions are one role), `["call", name]` for each tool call and
    `["result"]` for a tool's result (its words come from arguments a backend minted)."""
    if isinstance(item, str):
        return [["user", " ".join(item.split())]]
    if not isinstance(item, dict):
        return []
    kind = item.get("type")
    if kind == "function_call":
        return [["call", str(item.get("name"))]]
    if item.get("role") == "tool" or kind == "function_call_output":
        return [["result"]]
    role = item.get("role")
    if not isinstance(role, str):
        return []
    words = _message_words(item.get("content"))
    out = [["system" if role == "developer" else role, words]] if words else []
    for call in item.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        out.append(["call", str(fn.get("name") if isinstance(fn, dict) else None)])
    return out


def _tool_name(tool: Any) -> str:
    """Name an offered tool by chat's `function.name`, Responses' `name`, or a built-in's `type`."""
    if not isinstance(tool, dict):
        return str(tool)
    fn = tool.get("function")
    return str((fn if isinstance(fn, dict) else tool).get("name") or tool.get("type"))


def ask_text(body: Any) -> str | None:
    """Say what a request asks a model, the same whichever API carries it.

    The conversation is chat `messages`, Responses `instructions` then `input`, or a
    completion's `prompt`. It comes as turns of role and words, tool calls by name, and the
    names of the tools offered, as canonical JSON. `None` when it has no user words: it asks a
    model nothing.

    A client that falls back from `/v1/responses` to `/v1/chat/completions`, or to another
    backend, sends the same conversation in the other API's shape; the model, the stream
    flag and sampling settings may change on the way, the conversation does not.
    """
    if not isinstance(body, dict):
        return None
    turns: list[list[str]] = []
    messages, inp, prompt = body.get("messages"), body.get("input"), body.get("prompt")
    if isinstance(messages, list):
        for m in messages:
            turns.extend(_turns(m))
    elif isinstance(inp, str | list):
        if isinstance(body.get("instructions"), str) and body["instructions"].strip():
            turns.append(["system", " ".join(body["instructions"].split())])
        for item in inp if isinstance(inp, list) else [inp]:
            turns.extend(_turns(item))
    elif isinstance(prompt, str):
        turns.append(["user", " ".join(prompt.split())])
    if not any(t[0] == "user" for t in turns):
        return None
    tools = body.get("tools")
    names = sorted(_tool_name(t) for t in tools) if isinstance(tools, list) else []
    return canonical(["ask", turns, names])


def ask_digest(request: Mapping[str, Any]) -> int:
    """Digest the `ask_text` of a request's body into 64 bits, the same in every process.

    0 when it asks a model nothing."""
    text = ask_text(request.get("body"))
    return 0 if text is None else digest(text)


def hop_key(request: Mapping[str, Any]) -> tuple[Any, ...]:
    """Key what the two hops of one call have in common.

    That is the prompt, or for a request without one the exact body with its method and
    route."""
    prompt = prompt_text(request.get("body"))
    if prompt is not None:
        return ("prompt", prompt)
    route = str(request.get("path") or "").split("?")[0]
    return ("body", body_key(request), request.get("method"), route)


def digests(record: Mapping[str, Any], hop: bool) -> tuple[int, int, int]:
    """Compute a record's digests: of its request and status, of its body, of its `hop_key`.

    They are the `request_digest`, `body_digest` and `hop_digest` of an export. The body is
    serialised once; the hop's digest is 0 without `hop`."""
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


BACKEND_FIELDS = frozenset(
    {
        "model",  # each backend serves its own models
        "stream_options",  # what a client asks of one server's streams, not what it asks
        "user",  # end-user ids, stored-response settings, routing and caching hints:
        "metadata",  # per deployment, never what the request asks the model
        "store",
        "service_tier",
        "seed",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "keep_alive",  # Ollama's model residency
    }
)
"""Top-level request fields that say which backend or deployment a call is for.

They say nothing of what it asks, so `request_fingerprint` leaves them out. `stream` is kept:
a streamed and a plain call are different calls."""

ID_KEYS = frozenset(
    {
        "id",
        "previous_response_id",
        "call_id",
        "tool_call_id",
        "response_id",
        "conversation",
        "file_id",
        "batch_id",
    }
)
"""Keys whose values are ids one backend minted and another never would.

`request_fingerprint` puts a placeholder in their place."""

ID = "<id>"
MINTED = "<minted>"
"""Keys of what a backend generated: their shape counts, not their value.

That is an assistant's words, tool-call arguments, reasoning, and a tool's result computed
from those arguments."""


def _message_words(content: Any) -> str:
    """Return a message's words: the string, or the texts of its parts, whitespace collapsed."""
    parts = _texts(content)
    return " ".join(" ".join(parts).split())


def _tool_call(call: Any) -> Any:
    """Keep a chat assistant's tool call's kind and function name: id and arguments are minted."""
    if not isinstance(call, dict):
        return MINTED
    fn = call.get("function")
    return [call.get("type"), fn.get("name") if isinstance(fn, dict) else None]


def _message(m: Any) -> Any:
    """Reduce one chat message or Responses input item to what the app said.

    That is role and words for the app's own turns; for the backend's, such as an assistant's
    turn, a function call, reasoning or a tool's result, only the shape."""
    if isinstance(m, str):
        return ["user", " ".join(m.split())]
    if not isinstance(m, dict):
        return MINTED
    role, kind = m.get("role"), m.get("type")
    if role == "assistant":
        calls = m.get("tool_calls")
        return ["assistant", [_tool_call(c) for c in calls] if isinstance(calls, list) else []]
    if role == "tool" or kind == "function_call_output":
        return ["tool", ID if (m.get("tool_call_id") or m.get("call_id")) else None]
    if kind == "function_call":
        return ["function_call", m.get("name")]
    if role is not None:
        return [role, _message_words(m.get("content"))]
    if kind == "item_reference":
        return [kind, ID]
    return [kind, MINTED] if kind is not None else MINTED


def _tool(t: Any) -> Any:
    """Reduce a tool the app offers to its name and parameters, nested as chat's or flat."""
    if not isinstance(t, dict):
        return t
    fn = t["function"] if isinstance(t.get("function"), dict) else t
    return [t.get("type"), fn.get("name"), fn.get("parameters")]


def _ids_out(value: Any) -> Any:
    """Replace every string under an `ID_KEYS` key in `value` by the placeholder."""
    if isinstance(value, dict):
        return {
            k: ID if k in ID_KEYS and isinstance(v, str) else _ids_out(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_ids_out(v) for v in value]
    return value


def _normalised(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key in BACKEND_FIELDS or value is None:
            continue
        if key == "messages" and isinstance(value, list):
            out[key] = [_message(m) for m in value]
        elif key == "input" and isinstance(value, str | list):
            out["messages"] = [_message(m) for m in (value if isinstance(value, list) else [value])]
        elif key == "tools" and isinstance(value, list):
            out[key] = sorted((_tool(t) for t in value), key=lambda t: json.dumps(t, default=str))
        elif key in ID_KEYS and isinstance(value, str):
            out[key] = ID
        else:
            out[key] = _ids_out(value)
    return out


def _media_type(headers: Any) -> str:
    for pair in headers if isinstance(headers, list) else ():
        if (
            isinstance(pair, list | tuple)
            and len(pair) == 2
            and str(pair[0]).lower() == "content-type"
        ):
            return str(pair[1]).split(";", 1)[0].strip().lower()
    return ""


def request_fingerprint(record: Mapping[str, Any]) -> str:
    """Fingerprint what makes two exchanges of independent captures the same call of one app.

    It holds the method, route template and family, the query, and the body without what is per
    backend (`BACKEND_FIELDS`, explicit nulls), with messages and `input` as what the app said
    (a string `input` is one user message), tools as name and parameters, and ids a backend
    minted (`ID_KEYS`, the `{id}` in a path) as placeholders. A body that is not JSON counts by
    its media type only (a multipart boundary differs on every run). A short stable digest.
    """
    req = record.get("request")
    req = req if isinstance(req, Mapping) else {}
    tags = record.get("tags")
    tags = tags if isinstance(tags, Mapping) else {}
    path = str(req.get("path") or "")
    family, template, _ = route(path)
    endpoint = tags.get("endpoint") if isinstance(tags.get("endpoint"), str) else template
    query = sorted(
        (k, v) for k, v in parse_qsl(path.partition("?")[2]) if k.lower() not in SECRET_QUERY
    )
    body = req.get("body")
    if isinstance(body, dict):
        shape: Any = _normalised(body)
    elif body is not None:
        shape = _ids_out(body)
    elif req.get("text") is not None or req.get("b64") is not None:
        shape = ["not json", _media_type(req.get("headers"))]
    else:
        shape = None
    key = [str(req.get("method") or "").upper(), endpoint, family, query, shape]
    text = json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
