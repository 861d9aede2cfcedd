"""Serve a stand-in over HTTP, with routing, auth and errors as the profile documents them.

A stdlib `ThreadingHTTPServer` serves `GET /v1/models`, `POST /v1/chat/completions` and
`POST /v1/responses` (streamed or not, and over a WebSocket where the profile has that mode:
`wirediff.backends.ws_mode`) and answers everything else the way the profile says the
real provider does (LM Studio's 200 "Unexpected endpoint", vLLM's
401-before-404, …). SSE events are written and flushed one by one, `delay` seconds apart.
Models named `fault-*` break the transport on purpose: see `FAULT_MODELS`.
"""

from __future__ import annotations

import contextlib
import gzip as gzip_mod
import json
import re
import secrets
import socket
import sys
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from wirediff.backends.answers import SCENARIO_MODELS, chat_plan, responses_plan
from wirediff.backends.payloads import (
    build_response,
    chat_chunks,
    chat_completion,
    data_frame,
    event_frame,
    response_events,
)
from wirediff.backends.ws_mode import ResponsesSocket, accept_key, supports_websocket
from wirediff.profiles import STANDIN_HEADER, Profile, answer_for, fill, noisy, render_answer

if TYPE_CHECKING:
    from wirediff.backends.standin import Standin

__all__ = [
    "EMULATED",
    "FAULT_MODELS",
    "SLOW_DELAY",
    "Seen",
    "StandinServer",
    "StoredResponse",
    "mask_key",
]

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


def mask_key(key: str) -> str:
    """Mask a key as an error message may show it, without ever echoing the whole secret."""
    if len(key) > 10:
        return f"{key[:3]}{'*' * (len(key) - 7)}{key[-4:]}"
    if len(key) > 4:
        return key[:2] + "*" * (len(key) - 2)
    return "*" * max(len(key), 1)


@dataclass
class Seen:
    """Note one request as the stand-in received it: for tests, which key arrived, which path."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class StoredResponse:
    obj: JSONDict
    turn: int


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # benchmarks open dozens of connections at once

    def __init__(self, addr: tuple[str, int], owner: Standin) -> None:
        self.owner = owner
        self.conns: set[socket.socket] = set()
        self.lock = threading.Lock()
        super().__init__(addr, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore a client closing its connection, e.g. right after `[DONE]`: it is normal here."""
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
    server: StandinServer

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
        """Start the answer: status line, Date, the profile's own headers, then the answer's."""
        self.send_response_only(status)
        self.send_header("Date", formatdate(usegmt=True))
        vals = {
            "request_id": secrets.token_hex(16),
            "processing_ms": str(secrets.randbelow(400) + 20),
        }
        given = {k.lower() for k, _ in headers}
        self.send_header(STANDIN_HEADER, str(self.prof["name"]))
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

    def _refuse(self, status: int, message: str, kind: str) -> None:
        """Answer with an error in OpenAI's shape, for what no profile documents."""
        error = {"message": message, "type": kind, "param": None, "code": None}
        self.send_json(status, {"error": error})

    def send_json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self.send_body(status, [("Content-Type", self.prof["content_types"]["json"])], data)

    def send_answer(self, kind: str, stream: bool | None = None, **values: str) -> None:
        path = values.setdefault("path", urlsplit(self.path).path)
        values.setdefault("method", self.command)
        ans = answer_for(self.prof, kind, path, stream=stream)
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
        if self._websocket(path, scoped):
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
            self._refuse(
                501,
                f"wirediff stand-in: {prof['title']} implements {self.command} {template}, "
                "but the stand-in does not emulate it",
                "standin_not_emulated",
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
            self._refuse(
                400, "stand-in: the request body is not a JSON object", "invalid_request_error"
            )
            return
        model = str(body.get("model", ""))
        if not st.models and answer_for(prof, "no_models") is not None:
            self.send_answer("no_models", model=model)
            return
        if model not in st.models and model not in FAULT_MODELS and model not in SCENARIO_MODELS:
            self.send_answer("unknown_model", model=model)
            return
        if model == "scenario-context-overflow":
            self.send_answer(
                "context_length_exceeded", stream=body.get("stream") is True, model=model
            )
            return
        if self._fault_short(model, body):
            return
        if template == "/v1/chat/completions":
            self._chat(body, model)
        else:
            self._responses(body, model)

    def _websocket(self, path: str, scoped: bool) -> bool:
        """Serve the Responses WebSocket mode, where the profile has it.

        A profile without it answers the upgrade like any other GET: its wrong-method answer."""
        upgrade = self.headers.get("Upgrade", "").lower() == "websocket"
        if not (upgrade and self.command == "GET" and path.rstrip("/") == "/v1/responses"):
            return False
        if not supports_websocket(self.prof):
            return False
        auth = self.prof.get("auth") or {}
        if auth.get("checked") == "after_routing" and scoped and not self._auth_ok():
            return True
        key = self.headers.get("Sec-WebSocket-Key", "")
        self.send_response_only(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept_key(key))
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        ResponsesSocket(
            self.prof,
            self.st.models,
            self.rfile,
            self.wfile.write,
            delay=self.st.delay,
            stopping=self.st.stopping,
        ).run()
        return True

    def _auth_ok(self) -> bool:
        """Check the key: with `api_key=…`, the profile's missing/wrong key answers.

        Providers without an auth answer, Ollama say, accept anything."""
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
        self._chat_stream(plan, model, include_usage)

    def _chat_stream(self, plan: Any, model: str, include_usage: bool) -> None:
        noise = self.prof.get("noise")
        frames = [
            data_frame(noisy(c, noise)) for c in chat_chunks(self.prof, model, plan, include_usage)
        ]
        s = self.prof["streaming"]["chat"]
        if s.get("done_sentinel"):
            frames.append(f"data: {s['done_sentinel']}\n\n".encode())
        self._stream(s["content_type"], frames, model, terminal=2 if s.get("done_sentinel") else 1)

    def _responses(self, body: JSONDict, model: str) -> None:
        r = self.prof["responses"]
        prev = body.get("previous_response_id")
        turn, previous = 1, None
        mode = r.get("previous_response_id")
        streamed = body.get("stream") is True
        if (
            isinstance(prev, str)
            and streamed
            and r.get("previous_response_id_streamed") == "unknown"
        ):
            self.send_answer("unknown_previous_response", response_id=prev, model=model)
            return
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
        if s.get("chat_chunks"):  # the upstream's chat stream, untranslated
            self._chat_stream(rb.plan, model, include_usage=False)
            return
        noise = self.prof.get("noise")
        frames = [
            event_frame(name, noisy(ev, noise), s.get("event_line", True))
            for name, ev in response_events(self.prof, rb)
        ]
        self._stream(s["content_type"], frames, model, terminal=1)

    def _send_object(self, obj: JSONDict, model: str) -> None:
        obj = noisy(obj, self.prof.get("noise"))
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

    def _may_send(self, i: int, delay: float) -> bool:
        """Let event i go out once `pace` allows it and `delay` has passed, unless stopping."""
        if self.st.pace is not None and not self.st.pace(i):
            return False
        return not (delay > 0 and self.st.stopping.wait(delay))

    def _stream(self, content_type: str, frames: list[bytes], model: str, terminal: int) -> None:
        """Stream chunked SSE, one write and flush per event; gzip with a sync flush per event.

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
            if i and not self._may_send(i, delay):
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
