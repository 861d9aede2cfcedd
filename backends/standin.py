"""A local stand-in for an OpenAI-compatible provider, driven by its profile.

wirediff needs backends to capture from and replay against on a machine with no network
and no keys. One small stdlib server plays any profile in `analysis/profiles/`: it serves
`GET /v1/models`, `POST /v1/chat/completions` and `POST /v1/responses` (streamed or not, a
text answer or one function call) and answers everything else the way the profile says the
real provider does (LM Studio's 200 "Unexpected endpoint", vLLM's 401-before-404, …).
Output is derived from the input, so runs are repeatable; SSE events are written and
flushed one by one, `delay` seconds apart.

Models named `fault-*` (accepted by every profile) break the transport on purpose, for
tests of the capture and the diagnosis: see `FAULT_MODELS`.

Usage:
    with standin("lmstudio", delay=0.0) as url:
        client = OpenAI(base_url=url + "/v1", api_key="x")
    python -m backends lmstudio --port 1234
"""

from __future__ import annotations

import contextlib
import gzip as gzip_mod
import json
import re
import secrets
import socket
import string
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from wirediff.profiles import Profile, answer_for, fill, profile, render_answer

FAULT_MODELS: dict[str, str] = {
    "fault-truncate": "the stream ends cleanly after half its events, without [DONE] or "
    "response.completed (a non-streamed body is cut in half with a matching Content-Length)",
    "fault-cut": "the connection is closed in the middle of an event (or of the body)",
    "fault-empty": "200 with a 0-byte body",
    "fault-binary": "200 with a body that is not UTF-8",
    "fault-json-stream": "stream=True is answered with the plain JSON object",
    "fault-args-object": "tool-call arguments are a JSON object instead of a string",
    "fault-slow": "SSE events 200 ms apart whatever the configured delay",
}
"""Model names that inject a transport fault; every profile accepts them."""

SLOW_DELAY = 0.2

# What the stand-in itself can play; other endpoints a profile lists answer 501.
EMULATED: tuple[tuple[str, str], ...] = (
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model}"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/responses"),
)

JSONDict = dict[str, Any]


# --- ids, text and the answer plan ---------------------------------------------------------

_ALNUM = string.ascii_letters + string.digits


def make_id(template: str, index: int = 0) -> str:
    """Fill an id template: `{hex}` 32 hex digits, `{alnum}` 24 letters/digits, `{lower8}`
    8 lower-case letters/digits, `{int}` up to 6 digits, `{index}` the item's position."""
    out = template.replace("{hex}", secrets.token_hex(16))
    out = out.replace("{alnum}", "".join(secrets.choice(_ALNUM) for _ in range(24)))
    lower = string.ascii_lowercase + string.digits
    out = out.replace("{lower8}", "".join(secrets.choice(lower) for _ in range(8)))
    out = out.replace("{int}", str(secrets.randbelow(999999)))
    return out.replace("{index}", str(index))


def mask_key(key: str) -> str:
    """A key as an error message may show it, without ever echoing the whole secret."""
    if len(key) > 10:
        return f"{key[:3]}{'*' * (len(key) - 7)}{key[-4:]}"
    if len(key) > 4:
        return key[:2] + "*" * (len(key) - 2)
    return "*" * max(len(key), 1)


def _text_of(content: Any) -> str:
    """The text of a chat/responses content value (a string or a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


def _words(text: str, n: int = 12) -> str:
    return " ".join(text.split()[:n])


@dataclass
class Plan:
    """What to answer, decided from the request alone (so output is deterministic)."""

    kind: str  # "text" or "tool"
    text: str = ""
    reasoning: str = ""
    tool_name: str = ""
    arguments: Any = ""  # a JSON string; a dict under fault-args-object
    prompt_tokens: int = 1

    def pieces(self) -> list[str]:
        """The text split into stream deltas (word by word, spaces kept)."""
        return re.findall(r"\S+\s*", self.text) or [self.text]


def _tool_arguments(parameters: Any, text: str) -> dict[str, Any]:
    """Deterministic arguments for a function's JSON schema: required properties filled by type."""
    props = parameters.get("properties", {}) if isinstance(parameters, dict) else {}
    required = parameters.get("required") if isinstance(parameters, dict) else None
    names = list(required) if isinstance(required, list) and required else list(props)[:1]
    by_type: dict[str, Any] = {
        "integer": 1,
        "number": 1,
        "boolean": True,
        "array": [],
        "object": {},
    }
    args: dict[str, Any] = {}
    for name in names:
        kind = props.get(name, {}).get("type", "string") if isinstance(props, dict) else "string"
        args[name] = by_type.get(kind, _words(text, 5) or "wirediff")
    return args


def plan_for(
    last_text: str,
    tool_output: str | None,
    tools: list[tuple[str, Any]],
    tool_choice: Any,
    model: str,
    reasoning: bool,
) -> Plan:
    """A tool call when tools are offered (and not refused), else an echo of the input."""
    prompt_tokens = max(len(last_text.split()), 1)
    if tool_output is not None:
        return Plan(
            "text",
            text=f"Tool said: {_words(tool_output) or 'nothing'}",
            prompt_tokens=prompt_tokens,
        )
    if tools and tool_choice != "none":
        name, params = tools[0]
        args: Any = _tool_arguments(params, last_text)
        if model != "fault-args-object":
            args = json.dumps(args, separators=(",", ":"))
        return Plan("tool", tool_name=name, arguments=args, prompt_tokens=prompt_tokens)
    plan = Plan("text", text=f"Echo: {_words(last_text) or 'hello'}", prompt_tokens=prompt_tokens)
    if reasoning:
        plan.reasoning = f"The user wrote {len(last_text.split())} words."
    return plan


def chat_plan(body: JSONDict, prof: Profile) -> Plan:
    raw = body.get("messages")
    messages: list[Any] = raw if isinstance(raw, list) else []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    user = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    tools = [
        (str(t["function"].get("name", "tool")), t["function"].get("parameters"))
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    tool_output = _text_of(last.get("content")) if last.get("role") == "tool" else None
    reasoning = bool(prof["streaming"]["chat"].get("reasoning_field"))
    return plan_for(
        _text_of(user[-1].get("content")) if user else "",
        tool_output,
        tools,
        body.get("tool_choice"),
        str(body.get("model")),
        reasoning,
    )


def responses_plan(body: JSONDict) -> Plan:
    inp = body.get("input")
    last_text, tool_output = "", None
    if isinstance(inp, str):
        last_text = inp
    elif isinstance(inp, list) and inp:
        items = [i for i in inp if isinstance(i, dict)]
        users = [i for i in items if i.get("role") == "user"]
        last_text = _text_of(users[-1].get("content")) if users else ""
        if items and items[-1].get("type") == "function_call_output":
            tool_output = _text_of(items[-1].get("output"))
    tools = [
        (str(t.get("name", "tool")), t.get("parameters"))
        for t in body.get("tools") or []
        if isinstance(t, dict) and t.get("type") == "function"
    ]
    return plan_for(
        last_text, tool_output, tools, body.get("tool_choice"), str(body.get("model")), False
    )


def _drop_nulls(obj: Any, keep: frozenset[str]) -> Any:
    """vLLM-style `exclude_unset`: null fields vanish unless explicitly set (`keep`)."""
    if isinstance(obj, dict):
        return {k: _drop_nulls(v, keep) for k, v in obj.items() if v is not None or k in keep}
    if isinstance(obj, list):
        return [_drop_nulls(v, keep) for v in obj]
    return obj


def _fragments(s: str, n: int = 3) -> list[str]:
    size = max(1, -(-len(s) // n))
    return [s[i : i + size] for i in range(0, len(s), size)] or [""]


# --- chat completions ---------------------------------------------------------------------


def chat_usage(prof: Profile, plan: Plan) -> JSONDict:
    completion = len(plan.pieces()) if plan.kind == "text" else 1
    usage: JSONDict = {
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": plan.prompt_tokens + completion,
    }
    usage.update(prof["chat"].get("usage_extra") or {})
    return usage


def chat_completion(prof: Profile, model: str, plan: Plan) -> JSONDict:
    """The non-streamed `chat.completion` object as this provider shapes it."""
    c = prof["chat"]
    message: JSONDict = {"role": "assistant", "content": plan.text if plan.kind == "text" else None}
    if plan.reasoning and prof["streaming"]["chat"].get("reasoning_field"):
        message[prof["streaming"]["chat"]["reasoning_field"]] = plan.reasoning
    message.update(c.get("message_extra") or {})
    if plan.kind == "tool":
        message["tool_calls"] = [
            {
                "id": make_id(c["tool_call_id"]),
                "type": "function",
                "function": {"name": plan.tool_name, "arguments": plan.arguments},
            }
        ]
    choice: JSONDict = {"index": 0, "message": message}
    choice.update(c.get("choice_extra") or {})
    choice["finish_reason"] = "stop" if plan.kind == "text" else "tool_calls"
    obj: JSONDict = {
        "id": make_id(c["id"]),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": chat_usage(prof, plan),
    }
    obj.update(fill(c.get("object_extra") or {}, {"model": model}))
    return obj


def chat_chunks(prof: Profile, model: str, plan: Plan, include_usage: bool) -> list[JSONDict]:
    """The `chat.completion.chunk` objects of a stream, in order (without `[DONE]`)."""
    s = prof["streaming"]["chat"]
    cid, created = make_id(prof["chat"]["id"]), int(time.time())
    extra = fill(s.get("chunk_extra") or {}, {"model": model})
    with_null_usage = include_usage and s.get("usage_null_in_chunks")

    def chunk(delta: JSONDict | None, finish: str | None = None) -> JSONDict:
        ch: JSONDict = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        ch.update(extra)
        if delta is None:
            ch["choices"] = []
        else:
            choice: JSONDict = {"index": 0, "delta": delta}
            choice.update(s.get("choice_extra") or {})
            choice["finish_reason"] = finish
            if finish is not None:
                choice.update(s.get("finish_choice_extra") or {})
            ch["choices"] = [choice]
        if with_null_usage:
            ch["usage"] = None
        return ch

    base: JSONDict = dict(s.get("delta_base") or {})
    out: list[JSONDict] = []
    if s.get("first_delta") is not None:
        out.append(chunk(dict(s["first_delta"])))
    if plan.reasoning and s.get("reasoning_field"):
        out.append(chunk({**base, s["reasoning_field"]: plan.reasoning}))
    if plan.kind == "text":
        out += [chunk({**base, "content": piece}) for piece in plan.pieces()]
    else:
        call_id = make_id(prof["chat"]["tool_call_id"])
        head: JSONDict = {
            "index": 0,
            "id": call_id,
            "type": "function",
            "function": {"name": plan.tool_name},
        }
        whole = s.get("tool_calls") == "whole" or not isinstance(plan.arguments, str)
        if whole:
            head["function"]["arguments"] = plan.arguments
            out.append(chunk({**base, "tool_calls": [head]}))
        else:
            if s.get("tool_call_head_arguments"):
                head["function"]["arguments"] = ""
            out.append(chunk({**base, "tool_calls": [head]}))
            out += [
                chunk({**base, "tool_calls": [{"index": 0, "function": {"arguments": frag}}]})
                for frag in _fragments(plan.arguments)
            ]
    out.append(
        chunk(dict(s.get("final_delta") or {}), "stop" if plan.kind == "text" else "tool_calls")
    )
    if include_usage and s.get("usage_chunk"):
        last = chunk(None)
        last["usage"] = chat_usage(prof, plan)
        out.append(last)
    if s.get("null_fields") == "omitted":
        keep = frozenset(s.get("kept_null") or [])
        out = [_drop_nulls(c, keep) for c in out]
    return out


# --- responses ----------------------------------------------------------------------------


@dataclass
class ResponseBuild:
    """Everything one Responses answer needs: the final object, its items and ids."""

    obj: JSONDict
    items: list[JSONDict]
    plan: Plan


def build_response(
    prof: Profile, body: JSONDict, model: str, plan: Plan, previous: str | None, turn: int
) -> ResponseBuild:
    """The completed Response object, carrying exactly the profile's field set."""
    r = prof["responses"]
    if plan.kind == "text":
        text = plan.text if turn <= 1 else f"(turn {turn}) {plan.text}"
        plan = Plan("text", text=text, prompt_tokens=plan.prompt_tokens)
        items: list[JSONDict] = [
            {
                "id": make_id(r["message_id"]),
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": plan.text, "annotations": [], "logprobs": []}
                ],
            }
        ]
    else:
        items = [
            {
                "id": make_id(r["function_call_id"], 0),
                "type": "function_call",
                "status": "completed",
                "arguments": plan.arguments,
                "call_id": make_id(r["call_id"]),
                "name": plan.tool_name,
            }
        ]
    out_tokens = len(plan.pieces()) if plan.kind == "text" else 1
    usage: JSONDict = {
        "input_tokens": plan.prompt_tokens,
        "input_tokens_details": dict(r["usage"]["input_tokens_details"]),
        "output_tokens": out_tokens,
        "output_tokens_details": dict(r["usage"]["output_tokens_details"]),
        "total_tokens": plan.prompt_tokens + out_tokens,
    }
    now = int(time.time())
    store = bool(body.get("store", True)) if r.get("store") == "echo" else bool(r.get("store"))
    values: JSONDict = {
        "id": make_id(r["id"]),
        "object": "response",
        "created_at": now,
        "status": "completed",
        "background": bool(body.get("background", False)),
        "completed_at": now,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "model": model,
        "output": items,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": previous,
        "prompt": None,
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": body.get("reasoning"),
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": body.get("service_tier"),
        "store": store,
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_logprobs": body.get("top_logprobs", 0),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation", "disabled"),
        "usage": usage,
        "user": body.get("user"),
        "metadata": body.get("metadata") or {},
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }
    for k, v in (r.get("defaults") or {}).items():  # what the provider says when not asked
        if values.get(k) is None:
            values[k] = v
    values.update(r.get("overrides") or {})
    return ResponseBuild({k: values[k] for k in r["fields"]}, items, plan)


def response_events(prof: Profile, rb: ResponseBuild) -> list[tuple[str, JSONDict]]:
    """`(event type, payload)` in the profile's order; the payload carries `type` and,
    where the profile says so, `sequence_number`."""
    s = prof["streaming"]["responses"]
    plan, item = rb.plan, rb.items[0]
    initial = {**rb.obj, "status": "in_progress", "output": [], "usage": None}
    for k in ("completed_at",):
        if k in initial:
            initial[k] = None
    added_item: JSONDict
    if plan.kind == "text":
        added_item = {**item, "status": "in_progress", "content": []}
    else:
        added_item = {**item, "status": "in_progress", "arguments": ""}
    iid = item["id"]
    part_empty = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    args = plan.arguments
    frags: list[Any] = (
        _fragments(args)
        if isinstance(args, str) and s.get("function_call_arguments") == "fragmented"
        else [args]
    )

    def done_args() -> JSONDict:
        d: JSONDict = {"item_id": iid, "output_index": 0, "arguments": args}
        if s.get("done_has_name"):
            d["name"] = plan.tool_name
        return d

    builders: dict[str, Callable[[], list[JSONDict]]] = {
        "response.created": lambda: [{"response": initial}],
        "response.in_progress": lambda: [{"response": initial}],
        "response.output_item.added": lambda: [{"output_index": 0, "item": added_item}],
        "response.content_part.added": lambda: [
            {"item_id": iid, "output_index": 0, "content_index": 0, "part": part_empty}
        ],
        "response.output_text.delta": lambda: [
            {"item_id": iid, "output_index": 0, "content_index": 0, "delta": p, "logprobs": []}
            for p in plan.pieces()
        ],
        "response.output_text.done": lambda: [
            {
                "item_id": iid,
                "output_index": 0,
                "content_index": 0,
                "text": plan.text,
                "logprobs": [],
            }
        ],
        "response.content_part.done": lambda: [
            {
                "item_id": iid,
                "output_index": 0,
                "content_index": 0,
                "part": {**part_empty, "text": plan.text},
            }
        ],
        "response.output_item.done": lambda: [{"output_index": 0, "item": item}],
        "response.function_call_arguments.delta": lambda: [
            {"item_id": iid, "output_index": 0, "delta": f} for f in frags
        ],
        "response.function_call_arguments.done": lambda: [done_args()],
        "response.completed": lambda: [{"response": rb.obj}],
    }
    out: list[tuple[str, JSONDict]] = []
    for name in s["events"]["text" if plan.kind == "text" else "function_call"]:
        for payload in builders[name]():
            ev: JSONDict = {"type": name, **payload}
            if s.get("sequence_number"):
                ev["sequence_number"] = len(out)
            out.append((name, ev))
    return out


# --- the HTTP server ----------------------------------------------------------------------


@dataclass
class Seen:
    """One request as the stand-in received it (for tests: which key arrived, which path)."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class StoredResponse:
    obj: JSONDict
    turn: int


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # benchmarks open dozens of connections at once

    def __init__(self, addr: tuple[str, int], owner: Standin) -> None:
        self.owner = owner
        self.conns: set[socket.socket] = set()
        self.lock = threading.Lock()
        super().__init__(addr, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client closing its connection (e.g. right after `[DONE]`) is normal here."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _template_rx(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    rx = "".join(
        (".+" if p == "{model}" else "[^/]+") if p.startswith("{") else re.escape(p) for p in parts
    )
    return re.compile(f"^{rx}/?$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    # -- plumbing --
    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.lock:
            self.server.conns.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.server.lock:
            self.server.conns.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.owner.verbose:
            super().log_message(format, *args)

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_HEAD = do_GET

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    @property
    def st(self) -> Standin:
        return self.server.owner

    @property
    def prof(self) -> Profile:
        return self.st.profile

    def _accepts_gzip(self) -> bool:
        return self.st.gzip and "gzip" in self.headers.get("Accept-Encoding", "").lower()

    def _start(self, status: int, headers: Sequence[tuple[str, str]]) -> None:
        """Status line, Date, the profile's own headers, then the answer's."""
        self.send_response_only(status)
        self.send_header("Date", formatdate(usegmt=True))
        vals = {
            "request_id": secrets.token_hex(16),
            "processing_ms": str(secrets.randbelow(400) + 20),
        }
        given = {k.lower() for k, _ in headers}
        for k, v in (self.prof.get("headers") or {}).items():
            if k.lower() not in given:
                self.send_header(k, fill(str(v), vals))
        for k, v in headers:
            self.send_header(k, v)

    def send_body(self, status: int, headers: Sequence[tuple[str, str]], data: bytes) -> None:
        headers = list(headers)
        if data and self._accepts_gzip():
            data = gzip_mod.compress(data, mtime=0)
            headers.append(("Content-Encoding", "gzip"))
        self._start(status, [*headers, ("Content-Length", str(len(data)))])
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_json(self, status: int, obj: Any, content_type: str | None = None) -> None:
        data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self.send_body(
            status, [("Content-Type", content_type or self.prof["content_types"]["json"])], data
        )

    def send_answer(self, kind: str, **values: str) -> None:
        path = values.setdefault("path", urlsplit(self.path).path)
        values.setdefault("method", self.command)
        ans = answer_for(self.prof, kind, path)
        if ans is None:  # the profile documents no such answer: say so, plainly
            self.send_json(500, {"error": {"message": f"stand-in: profile has no {kind!r} answer"}})
            return
        status, headers, data = render_answer(ans, values)
        self.send_body(status, headers, data)

    # -- routing --
    def _dispatch(self) -> None:
        try:
            body = self._read_body()
            path = urlsplit(self.path).path
            with self.server.lock:
                self.st.seen.append(Seen(self.command, self.path, list(self.headers.items()), body))
            self._route(path, body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client went away (e.g. closed at [DONE])
        if self.command == "HEAD":
            self.close_connection = True

    def _route(self, path: str, raw: bytes) -> None:
        st, prof = self.st, self.prof
        if st.redirect:
            self.send_body(301, [("Location", st.redirect.rstrip("/") + self.path)], b"")
            return
        auth = prof.get("auth") or {}
        scoped = path.startswith(auth.get("scope", "/"))
        if auth.get("checked") == "before_routing" and scoped and not self._auth_ok():
            return
        endpoints = [(e["method"], e["path"]) for e in prof.get("endpoints", [])]
        matching = [(m, t) for m, t in endpoints if _template_rx(t).match(path)]
        if not matching:
            self.send_answer("unknown_endpoint", path=path)
            return
        if not any(m == self.command for m, _ in matching):
            allowed = ", ".join(sorted({m for m, _ in matching}))
            self.send_answer("wrong_method", path=path, allowed=allowed)
            return
        if auth.get("checked") == "after_routing" and scoped and not self._auth_ok():
            return
        template = next(t for m, t in matching if m == self.command)
        if (self.command, template) not in EMULATED:
            self.send_json(
                501,
                {
                    "error": {
                        "message": f"wirediff stand-in: {prof['title']} implements {self.command} {template}, "
                        "but the stand-in does not emulate it",
                        "type": "standin_not_emulated",
                        "param": None,
                        "code": None,
                    }
                },
            )
            return
        if template == "/v1/models":
            self._models()
            return
        if template == "/v1/models/{model}":
            model = path.split("/v1/models/", 1)[1]
            if model in st.models:
                self.send_json(200, self._model_card(model))
            else:
                self.send_answer("unknown_model", model=model)
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self.send_json(
                400,
                {
                    "error": {
                        "message": "stand-in: the request body is not a JSON object",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
            return
        model = str(body.get("model", ""))
        if not st.models and answer_for(prof, "no_models") is not None:
            self.send_answer("no_models", model=model)
            return
        if model not in st.models and model not in FAULT_MODELS:
            self.send_answer("unknown_model", model=model)
            return
        if self._fault_short(model, body):
            return
        if template == "/v1/chat/completions":
            self._chat(body, model)
        else:
            self._responses(body, model)

    def _auth_ok(self) -> bool:
        """With `api_key=…`, the profile's missing/wrong key answers; providers without an
        auth answer (Ollama) accept anything."""
        key = self.st.api_key
        if key is None or answer_for(self.prof, "missing_key") is None:
            return True
        given = self.headers.get("Authorization", "")
        scheme, _, secret = given.partition(" ")
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret:
            self.send_answer("missing_key")
            return False
        if not secrets.compare_digest(secret.encode(), key.encode()):
            self.send_answer("wrong_key", key_hint=mask_key(secret))
            return False
        return True

    def _model_card(self, model: str) -> JSONDict:
        m = self.prof.get("models") or {}
        card: JSONDict = {
            "id": model,
            "object": "model",
            "created": 1700000000,
            "owned_by": m.get("owned_by", "system"),
        }
        card.update(fill(m.get("extra") or {}, {"model": model}))
        return card

    def _models(self) -> None:
        self.send_json(
            200, {"object": "list", "data": [self._model_card(m) for m in self.st.models]}
        )

    # -- faults that replace the whole answer --
    def _fault_short(self, model: str, body: JSONDict) -> bool:
        ctype = self.prof["content_types"]["json"]
        if model == "fault-empty":
            self.send_body(200, [("Content-Type", ctype)], b"")
            return True
        if model == "fault-binary":
            self.send_body(
                200, [("Content-Type", ctype)], b"\x89\xff\xfe wirediff \x80\x81 not utf-8 \xc3("
            )
            return True
        return False

    # -- the two generative endpoints --
    def _chat(self, body: JSONDict, model: str) -> None:
        plan = chat_plan(body, self.prof)
        stream = body.get("stream") is True and model != "fault-json-stream"
        if not stream:
            self._send_object(chat_completion(self.prof, model, plan), model)
            return
        so = body.get("stream_options")
        include_usage = isinstance(so, dict) and so.get("include_usage") is True
        frames = [self._data_frame(c) for c in chat_chunks(self.prof, model, plan, include_usage)]
        s = self.prof["streaming"]["chat"]
        if s.get("done_sentinel"):
            frames.append(f"data: {s['done_sentinel']}\n\n".encode())
        self._stream(s["content_type"], frames, model, terminal=2 if s.get("done_sentinel") else 1)

    def _responses(self, body: JSONDict, model: str) -> None:
        r = self.prof["responses"]
        prev = body.get("previous_response_id")
        turn, previous = 1, None
        mode = r.get("previous_response_id")
        if isinstance(prev, str) and mode in ("supported", "store_disabled"):
            with self.server.lock:
                stored = self.st.store.get(prev) if mode == "supported" else None
            if stored is None:
                self.send_answer("unknown_previous_response", response_id=prev, model=model)
                return
            turn, previous = stored.turn + 1, prev
        rb = build_response(self.prof, body, model, responses_plan(body), previous, turn)
        if mode == "supported" and rb.obj.get("store", True):
            with self.server.lock:
                self.st.store[rb.obj["id"]] = StoredResponse(rb.obj, turn)
        stream = body.get("stream") is True and model != "fault-json-stream"
        if not stream:
            self._send_object(rb.obj, model)
            return
        s = self.prof["streaming"]["responses"]
        frames = [
            self._event_frame(name, ev, s.get("event_line", True))
            for name, ev in response_events(self.prof, rb)
        ]
        self._stream(s["content_type"], frames, model, terminal=1)

    @staticmethod
    def _data_frame(obj: Any) -> bytes:
        return (
            b"data: "
            + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
            + b"\n\n"
        )

    @staticmethod
    def _event_frame(name: str, obj: Any, event_line: bool) -> bytes:
        data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
        return (f"event: {name}\n".encode() if event_line else b"") + b"data: " + data + b"\n\n"

    def _send_object(self, obj: JSONDict, model: str) -> None:
        data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        ctype = [("Content-Type", self.prof["content_types"]["json"])]
        if model == "fault-truncate":
            data = data[: len(data) // 2]
        if model == "fault-cut":
            self._start(200, [*ctype, ("Content-Length", str(len(data)))])
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self._abort()
            return
        self.send_body(200, ctype, data)

    def _abort(self) -> None:
        """Drop the connection without finishing the message (fault-cut)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)

    def _stream(self, content_type: str, frames: list[bytes], model: str, terminal: int) -> None:
        """Chunked SSE, one write (and flush) per event; gzip with a sync flush per event.

        `terminal` is how many trailing frames end the stream ([DONE] and the last chunk,
        or response.completed): fault-truncate drops the second half, so they never come.
        """
        headers = [
            ("Content-Type", content_type),
            ("Cache-Control", "no-cache"),
            ("Transfer-Encoding", "chunked"),
        ]
        comp = None
        if self._accepts_gzip():
            comp = zlib.compressobj(6, zlib.DEFLATED, 31)
            headers.append(("Content-Encoding", "gzip"))
        self._start(200, headers)
        self.end_headers()
        delay = SLOW_DELAY if model == "fault-slow" else self.st.delay
        cut = model == "fault-cut"
        if model == "fault-truncate":
            frames = frames[: max(1, min(len(frames) // 2, len(frames) - terminal))]
        elif cut:
            keep = min(max(1, len(frames) // 2), len(frames) - 1)
            frames = [*frames[:keep], frames[keep][: len(frames[keep]) // 2]]
        for i, frame in enumerate(frames):
            if i and delay > 0 and self.st.stopping.wait(delay):
                self._abort()
                return
            data = comp.compress(frame) + comp.flush(zlib.Z_SYNC_FLUSH) if comp else frame
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        if cut:
            self._abort()
            return
        if comp is not None:
            tail = comp.flush()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(tail), tail))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


@dataclass
class Standin:
    """A running stand-in (see `standin()` for the options); `url` is the server root."""

    profile: Profile
    delay: float = 0.0
    api_key: str | None = None
    models: list[str] = field(default_factory=list)
    gzip: bool = False
    redirect: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    verbose: bool = False
    seen: list[Seen] = field(default_factory=list)
    store: dict[str, StoredResponse] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    _server: _Server | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("stand-in not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> str:
        self._server = _Server((self.host, self.port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"standin-{self.profile['name']}",
            daemon=True,
        )
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop accepting, end open connections (so no handler lingers), close the socket."""
        srv, self._server = self._server, None
        if srv is None:
            return
        self.stopping.set()
        srv.shutdown()
        with srv.lock:
            conns = list(srv.conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
        srv.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Standin:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def make_standin(
    name: str | Profile = "openai",
    *,
    delay: float = 0.0,
    api_key: str | None = None,
    models: Sequence[str] | None = None,
    gzip: bool = False,
    redirect: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    verbose: bool = False,
) -> Standin:
    """A not-yet-started `Standin` (for callers that need `.seen` or a manual lifetime)."""
    prof = profile(name) if isinstance(name, str) else name
    served = (
        list(models) if models is not None else list((prof.get("models") or {}).get("served", []))
    )
    return Standin(
        prof,
        delay=delay,
        api_key=api_key,
        models=served,
        gzip=gzip,
        redirect=redirect,
        host=host,
        port=port,
        verbose=verbose,
    )


@contextlib.contextmanager
def standin(
    name: str | Profile = "openai",
    *,
    delay: float = 0.0,
    api_key: str | None = None,
    models: Sequence[str] | None = None,
    gzip: bool = False,
    redirect: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> Iterator[str]:
    """Run a stand-in for profile `name` on a free loopback port; yields its root URL
    (`http://127.0.0.1:PORT`, clients use `url + "/v1"`) and shuts it down on exit.

    `delay` seconds between SSE events; `api_key` turns on the profile's key checks;
    `models` replaces the profile's served ids (`fault-*` models always work; an empty
    list plays LM Studio's "No models loaded"); `gzip` compresses answers for clients
    that accept it; `redirect="https://host:port"` answers every request 301 to there.
    """
    with make_standin(
        name,
        delay=delay,
        api_key=api_key,
        models=models,
        gzip=gzip,
        redirect=redirect,
        host=host,
        port=port,
    ) as s:
        yield s.url
