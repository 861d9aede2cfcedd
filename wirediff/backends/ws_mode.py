"""Serve the Responses API's WebSocket mode, for stand-ins whose profile documents it.

`GET /v1/responses` with `Upgrade: websocket` is answered `101 Switching Protocols`; then
each client text message `{"type": "response.create", …}` (the body of a
`POST /v1/responses`, without `stream`) is answered with the Responses stream events, one
JSON text message each, as the SSE stream carries them. Errors are messages
`{"type": "error", "status": …, "error": {…}}`. A `previous_response_id` may name a response
made earlier on the same connection. The handshake is done here (RFC 6455 4.2.2); the frames
are wsproto's, which mitmproxy already depends on.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wsproto.connection import Connection, ConnectionType
from wsproto.events import CloseConnection, Message, Ping, TextMessage

from wirediff.backends.answers import responses_plan
from wirediff.backends.payloads import build_response, response_events
from wirediff.profiles import Profile

__all__ = ["GUID", "ResponsesSocket", "accept_key", "supports_websocket"]

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
"""RFC 6455's key suffix for `Sec-WebSocket-Accept`."""
READ = 65536

JSONDict = dict[str, Any]


def accept_key(key: str) -> str:
    """Compute `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def supports_websocket(prof: Profile) -> bool:
    return bool(prof["streaming"]["responses"].get("websocket"))


def _error(status: int, message: str, code: str | None, param: str | None = None) -> JSONDict:
    kind = "invalid_request_error"
    return {
        "type": "error",
        "status": status,
        "error": {"type": kind, "code": code, "message": message, "param": param},
    }


@dataclass
class ResponsesSocket:
    """Serve one upgraded connection: read client messages, write the answers' events."""

    prof: Profile
    models: list[str]
    rfile: io.BufferedIOBase
    write: Callable[[bytes], Any]
    delay: float = 0.0
    stopping: threading.Event = field(default_factory=threading.Event)
    made: dict[str, int] = field(default_factory=dict)
    """Responses made on this connection: id → turn."""

    def run(self) -> None:
        """Serve until the client closes or the connection drops."""
        ws = Connection(ConnectionType.SERVER)
        parts: list[str] = []
        while True:
            data = self.rfile.read1(READ)
            ws.receive_data(data or None)
            for event in ws.events():
                if isinstance(event, CloseConnection):
                    with contextlib.suppress(Exception):
                        self.write(ws.send(event.response()))
                    return
                if isinstance(event, Ping):
                    self.write(ws.send(event.response()))
                elif isinstance(event, TextMessage):
                    parts.append(event.data)
                    if event.message_finished:
                        text, parts = "".join(parts), []
                        if not self._turn(ws, text):
                            return
                elif isinstance(event, Message) and event.message_finished:
                    self._send(ws, _error(400, "expected a JSON text message", None))
            if not data:
                return

    def _send(self, ws: Connection, obj: JSONDict) -> None:
        self.write(ws.send(TextMessage(json.dumps(obj, separators=(",", ":")))))

    def _turn(self, ws: Connection, text: str) -> bool:
        """Answer one client message; False when the connection was dropped on purpose."""
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("type") != "response.create":
            self._send(ws, _error(400, "expected a response.create event", None, "type"))
            return True
        body = {k: v for k, v in body.items() if k != "type"}
        model = str(body.get("model", ""))
        if model not in self.models and model != "fault-cut":
            message = f"The model `{model}` does not exist or you do not have access to it."
            self._send(ws, _error(404, message, "model_not_found", "model"))
            return True
        prev, turn = body.get("previous_response_id"), 1
        if isinstance(prev, str):
            if prev not in self.made:
                message = f"Previous response with id '{prev}' not found."
                error = _error(400, message, "previous_response_not_found", "previous_response_id")
                self._send(ws, error)
                return True
            turn = self.made[prev] + 1
        rb = build_response(self.prof, body, model, responses_plan(body), prev, turn)
        self.made[rb.obj["id"]] = turn
        events = [ev for _, ev in response_events(self.prof, rb)]
        if model == "fault-cut":  # half the events, then the connection drops (no close)
            events = events[: len(events) // 2]
        for i, ev in enumerate(events):
            if i and self.delay > 0 and self.stopping.wait(self.delay):
                return False
            self._send(ws, ev)
        return model != "fault-cut"
