"""Turn mitmproxy flow files and HAR archives into `wirediff/1` records: `wirediff import`.

Each exchange is seen as an `Exchange` and goes through the same record builder as live
capture, so imported records are indistinguishable in shape from captured ones.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from mitmproxy import exceptions, http, io
from mitmproxy.io.har import request_to_flow
from mitmproxy.websocket import WebSocketData, WebSocketMessage
from wsproto.frame_protocol import Opcode

from wirediff import FORMAT
from wirediff._support import plural
from wirediff._types import Record
from wirediff.errors import CaptureError
from wirediff.record.build import build_record
from wirediff.record.exchange import Exchange
from wirediff.record.flow import exchange_from_flow, upstream_label
from wirediff.record.parts import BOM, HEAD_BYTES, opens_a_capture
from wirediff.record.validate import json_type, problem

__all__ = ["exchange_from_har", "import_flows", "source_kind"]

log = logging.getLogger(__name__)
HAR_WAITS = ("blocked", "connect", "send", "wait")
"""HAR `timings` phases before the first byte of the answer (`dns` lies inside `connect`)."""


def _ms(value: Any) -> float:
    """Read a HAR timing in milliseconds; what is not a finite, positive number counts as 0."""
    try:
        ms = float(value or 0)
    except (TypeError, ValueError):
        return 0.0
    return ms if math.isfinite(ms) and ms > 0 else 0.0


def exchange_from_har(entry: dict[str, Any]) -> tuple[Exchange, str]:
    """See one HAR entry as an exchange, and the upstream it went to.

    mitmproxy's HAR reader understands the dialects (browsers, Charles, Slack's header
    pairs, base64 bodies); the time to the first byte comes from the entry's `timings`, and a
    WebSocket session's messages from `_webSocketMessages`, as Chrome and mitmproxy save them.
    """
    flow = request_to_flow(entry)
    messages = entry.get("_webSocketMessages")
    if flow.response is not None and flow.response.status_code == 101 and messages:
        flow.websocket = _websocket(messages)
    ex = exchange_from_flow(flow)
    timings = entry.get("timings") or {}
    waited = sum(_ms(timings.get(k)) for k in HAR_WAITS)
    if ex.response is None or not waited:
        return ex, upstream_label(flow)
    first_byte = ex.timings.started + waited / 1000.0
    timings = dataclasses.replace(ex.timings, first_byte=first_byte)
    return dataclasses.replace(ex, timings=timings), upstream_label(flow)


def _websocket(messages: list[dict[str, Any]]) -> WebSocketData:
    """Read the messages of a WebSocket session a HAR entry keeps, text and binary.

    A binary message is base64, as Chrome and mitmproxy write it; control frames are not kept.
    The session is taken to end with its last message: a HAR says nothing of how it closed."""
    ws = WebSocketData()
    for m in messages:
        opcode = Opcode(m.get("opcode", Opcode.TEXT))
        if opcode not in (Opcode.TEXT, Opcode.BINARY):
            continue
        data = m["data"]
        content = data.encode() if opcode is Opcode.TEXT else base64.b64decode(data, validate=True)
        sent = m["type"] == "send"
        ws.messages.append(WebSocketMessage(opcode, sent, content, float(m["time"])))
    ws.timestamp_end = ws.messages[-1].timestamp if ws.messages else None
    return ws


def _from_flowfile(path: Path) -> Iterator[tuple[Exchange, str]]:
    """Read the HTTP flows of a flow file; one cut short keeps the flows whole before the cut.

    mitmdump killed while writing leaves its last flow torn: the others are kept, with a warning
    that names where it stops, as a capture's torn line is skipped."""
    read = 0
    with path.open("rb") as fh:
        try:
            for f in io.FlowReader(fh).stream():
                read += 1
                if isinstance(f, http.HTTPFlow):
                    yield exchange_from_flow(f), upstream_label(f)
        except exceptions.FlowReadException as e:
            if not read:
                raise CaptureError(f"{path}: not a mitmproxy flow file ({e})") from None
            whole = plural(read, "whole flow")
            log.warning(f"{path}: cut short after {whole} ({e}): the rest is not read")


def _har_entries(path: Path) -> list[Any]:
    try:
        har = json.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise CaptureError(f"{path}: not a HAR file (not UTF-8 text: {e.reason})") from None
    except ValueError as e:
        raise CaptureError(f"{path}: not a HAR file (not JSON: {e})") from None
    log = har.get("log") if isinstance(har, dict) else None
    entries = log.get("entries") if isinstance(log, dict) else None
    if not isinstance(entries, list):
        raise CaptureError(f"{path}: not a HAR file (no log.entries list)")
    return entries


def _headers_problem(value: Any, where: str) -> str | None:
    if not isinstance(value, list):
        return f"{where} must be a list"
    for h in value:
        pair = (h.get("name"), h.get("value")) if isinstance(h, dict) else h
        if not (isinstance(pair, list | tuple) and len(pair) >= 2):
            return f"{where} must be name and value pairs"
        if not all(isinstance(x, str) for x in pair[:2]):
            return f"{where}: a header's name and value must be strings"
    return None


def _har_problem(entry: Any) -> str | None:
    """Say what in a HAR entry is not the type HAR 1.2 gives it, among the fields read.

    It is said in the entry's own terms before mitmproxy's reader trips over it."""
    if not isinstance(entry, dict):
        return "not an object"
    req, resp = entry.get("request"), entry.get("response")
    content = resp.get("content") if isinstance(resp, dict) else None
    wrong = [
        ("startedDateTime", entry.get("startedDateTime"), str, "a string"),
        ("time", entry.get("time"), int | float, "a number"),
        ("request", req, dict, "an object"),
        ("response", resp, dict, "an object"),
    ]
    if isinstance(req, dict):
        wrong += [
            ("request.method", req.get("method"), str, "a string"),
            ("request.url", req.get("url"), str, "a string"),
            ("request.httpVersion", req.get("httpVersion"), str, "a string"),
        ]
        post = req.get("postData")
        if post is not None:
            wrong += [("request.postData", post, dict, "an object")]
            if isinstance(post, dict):
                wrong += [("request.postData.text", post.get("text"), str, "a string")]
    if isinstance(resp, dict):
        wrong += [
            ("response.status", resp.get("status"), int, "an HTTP status"),
            ("response.httpVersion", resp.get("httpVersion"), str, "a string"),
            ("response.content", content, dict, "an object"),
        ]
        for key in ("text", "encoding"):
            if isinstance(content, dict) and content.get(key) is not None:
                wrong += [(f"response.content.{key}", content[key], str, "a string")]
    for name, value, kind, what in wrong:
        if isinstance(value, bool) or not isinstance(value, kind):
            return f"{name} must be {what}, not {'missing' if value is None else json_type(value)}"
    request: dict[str, Any] = entry["request"]
    response: dict[str, Any] = entry["response"]
    if not 0 <= response["status"] <= 999:
        return "response.status must be an HTTP status, from 0 to 999"
    if not request["url"].isascii():
        return "request.url must be ASCII (a HAR file holds URLs percent-encoded)"
    return (
        _headers_problem(request.get("headers"), "request.headers")
        or _headers_problem(response.get("headers"), "response.headers")
        or _messages_problem(entry.get("_webSocketMessages"))
    )


def _messages_problem(value: Any) -> str | None:
    """Say what in a HAR entry's WebSocket messages is not what Chrome and mitmproxy write."""
    if value is None:
        return None
    if not isinstance(value, list):
        return "_webSocketMessages must be a list"
    for i, m in enumerate(value):
        where = f"_webSocketMessages[{i}]"
        if not isinstance(m, dict):
            return f"{where} must be an object"
        if m.get("type") not in ("send", "receive"):
            return f"{where}.type must be send or receive"
        if not isinstance(m.get("data"), str):
            return f"{where}.data must be a string"
        time = m.get("time")
        if isinstance(time, bool) or not isinstance(time, int | float) or not math.isfinite(time):
            return f"{where}.time must be a number"
        if m.get("opcode", 1) not in (0, 1, 2, 8, 9, 10) or isinstance(m.get("opcode"), bool):
            return f"{where}.opcode must be a WebSocket opcode"
    return None


def _from_har(path: Path) -> Iterator[tuple[Exchange, str]]:
    for i, entry in enumerate(_har_entries(path)):
        found = _har_problem(entry)
        if found:
            raise CaptureError(f"{path}: HAR entry {i} is malformed ({found})")
        try:
            yield exchange_from_har(entry)
        except (KeyError, ValueError, TypeError, AttributeError, exceptions.OptionsError) as e:
            why = f"no {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
            raise CaptureError(f"{path}: HAR entry {i} is malformed ({why})") from None


_TNETSTRING_HEAD = re.compile(rb"\d+:")
"""How a mitmproxy flow file starts: a tnetstring's length and colon."""


def source_kind(path: str | Path) -> Literal["har", "flow"]:
    """Tell what `import_flows` reads `path` as, from its first bytes.

    A file it cannot import is a `CaptureError`: missing, a directory, empty, a capture already,
    anything else."""
    p = Path(path)
    if p.is_dir():
        raise CaptureError(f"{p}: is a directory, not a flow or HAR file")
    try:
        with p.open("rb") as fh:
            head = fh.read(HEAD_BYTES).removeprefix(BOM).lstrip()
    except OSError as e:
        raise CaptureError(f"{p}: cannot read ({e.strerror or e})") from None
    if not head:
        raise CaptureError(f"{p}: empty, nothing to import")
    if opens_a_capture(head):
        raise CaptureError(f"{p}: already a {FORMAT} capture, nothing to import")
    if head.startswith(b"{"):
        return "har"
    if _TNETSTRING_HEAD.match(head):
        return "flow"
    raise CaptureError(f"{p}: neither a HAR file nor a mitmproxy flow file")


def import_flows(path: str | Path) -> list[Record]:
    """Yield records for every HTTP flow in a `.flow` file of mitmdump -w, or a `.har` file.

    A file without one is a `CaptureError`: there is nothing to import."""
    p = Path(path)
    exchanges = _from_har(p) if source_kind(p) == "har" else _from_flowfile(p)
    records = []
    for i, (ex, label) in enumerate(exchanges):
        rec = build_record(ex, session=p.stem, label=label, seq=i, listener=None)
        found = problem(rec)
        if found:
            raise CaptureError(f"{p}: exchange {i} gives no valid {FORMAT} record ({found})")
        records.append(rec)
    if not records:
        raise CaptureError(f"{p}: no HTTP exchanges in it, nothing to import")
    return records
