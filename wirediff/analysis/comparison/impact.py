"""Measure what an app gets from an answer by feeding the recorded bytes to real client code.

Severity follows client impact, and impact is measured, not guessed. Each recorded answer is
served to openai-python through `clients.python` and, where Node and the npm `openai` package are
found, to the Node SDK through `clients.node`, under keys prefixed `node:`. The calls apps make
are made: `create()`, the stream helpers and their final objects, `parse()`, `runTools()`,
reading what apps and agent loops read. The result is an `Outcome`: what each call observed, as
kinds of values and never generated text, and the failures, in the client's words.

Outcomes are remembered per answer `skeleton`, so each client runs once per distinct answer, not
once per exchange; `prepare` measures many records at once, with the Node SDK's calls in one
batch. A skeleton reads, of the record:

- the request: method, `tags.endpoint`, `stream`, `stream_options`, and what it asks of the
  answer as `clients.asked` reads it: each function tool's name and parameters schema, the
  `response_format` or `text.format` type and schema;
- the answer: status, content type, `truncated`, and the structure of the body, text or
  each event as `shapes.structure` gives it, where generated text and numbers do not count
  but whether a text is empty does; event names; the positions stream helpers index by; and
  the verdicts of `clients.asked` on what the request asked: each tool call's name offered
  or not and its arguments against its schema, the structured content against its schema,
  whether the final Response keeps the `call_id`s the stream announced. Values decide those,
  so the verdicts, not the values, are in the skeleton.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from wirediff._support import as_bytes
from wirediff._types import Record
from wirediff.analysis.comparison.clients import node, python
from wirediff.analysis.comparison.clients.asked import (
    Asked,
    arguments_kind,
    asked,
    structured_kind,
)
from wirediff.analysis.comparison.clients.observations import (
    Failure,
    Observations,
    cut_short,
    sent_bytes,
    served,
)
from wirediff.analysis.comparison.shapes import structure

__all__ = ["SDK_SOURCE", "Outcome", "clients", "impact", "prepare", "skeleton"]

SDK_SOURCE = python.CLIENT
MEMO_LIMIT = 1 << 14
"""Outcomes remembered (then the table starts over: forgetting only costs time)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """Hold what the calls observed and how the clients failed, if they did.

    Observations read like `content: text`, `tool_arguments: object`, `raises: NotFoundError` or
    `node:final.content: text`."""

    observed: tuple[tuple[str, str], ...] = ()
    failures: tuple[Failure, ...] = ()
    judged: bool = True
    """False when the answer cannot be replayed to a client (truncated, not recorded)."""
    probes: tuple[tuple[str, str], ...] = ()
    """Which call observed each key: `("usage", "client.chat.completions.create(stream=True)")`."""
    clients: tuple[str, ...] = ()
    """The clients that measured it: `openai-python 2.54.0`, `openai-node 6.49.0`."""

    def get(self, key: str) -> str | None:
        for k, v in self.observed:
            if k == key:
                return v
        return None

    def probe_of(self, key: str) -> str:
        for k, v in self.probes:
            if k == key:
                return v
        return ""


def clients() -> tuple[str, str]:
    """Name the clients impact is measured with, one line each, for the report to say which."""
    return (f"{python.CLIENT}", node.status())


# --- the skeleton --------------------------------------------------------------------------


def _data_key(data: Any) -> Any:
    """Key an event's data as a client sees it: `[DONE]` and other text as is, JSON by structure."""
    return structure(data) if isinstance(data, dict | list) else data


def _calls_verdict(calls: Iterable[tuple[Any, Any]], ask: Asked) -> tuple[Any, ...]:
    """Judge each tool call `(name, arguments)`: whether the name was offered, and the arguments.

    The arguments are judged against their tool's schema."""
    return tuple(
        sorted(
            (name in ask.names, arguments_kind(args, ask.tool_schema(name))) for name, args in calls
        )
    )


def _objects(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if type(v) is dict] if type(value) is list else []


def _body_verdicts(body: Any, ask: Asked) -> tuple[Any, ...]:
    """Judge a chat completion's or a Response's tool calls and content."""
    if type(body) is not dict:
        return ()
    calls: list[tuple[Any, Any]] = []
    texts: list[str] = []
    for choice in _objects(body.get("choices")):
        message = choice.get("message")
        if type(message) is dict:
            for call in _objects(message.get("tool_calls")):
                fn = call.get("function")
                fn = fn if type(fn) is dict else {}
                calls.append((fn.get("name"), fn.get("arguments")))
            if type(message.get("content")) is str:
                texts.append(message["content"])
    for item in _objects(body.get("output")):
        if item.get("type") == "function_call":
            calls.append((item.get("name"), item.get("arguments")))
        for part in _objects(item.get("content")):
            if part.get("type") == "output_text" and type(part.get("text")) is str:
                texts.append(part["text"])
    text = "".join(texts) if texts else None
    return (_calls_verdict(calls, ask), structured_kind(text, ask))


def _text_key(text: Any, ask: Asked) -> Any:
    """Key a text answer as clients read it.

    They try JSON first, so a text that parses is keyed as the value it parses to, one that does
    not as itself: the clients raise with where it broke (Python) or with its start (Node)."""
    if not isinstance(text, str) or not text.strip():
        return python.kind_of(text)
    try:
        parsed = json.loads(as_bytes(text))
    except (ValueError, RecursionError):
        return ("not json", text)
    return ("json", _data_key(parsed), _body_verdicts(parsed, ask))


def _bytes_key(b64: Any, ask: Asked) -> Any:
    """Key a body kept as base64, which is served as its bytes, as the clients read those.

    openai-python parses a body as JSON in the encoding JSON's own rules detect, and decodes a
    stream's lines as UTF-8; openai-node decodes the body as UTF-8, a bad byte replaced. A
    value that is no base64 is not served."""
    if b64 is None:
        return None
    content = sent_bytes(b64)
    if content is None:
        return ("unserved", python.kind_of(b64))
    try:
        as_json: Any = _text_key(
            content.decode(json.detect_encoding(content), "surrogatepass"), ask
        )
    except UnicodeDecodeError:
        as_json = "undecodable"
    as_node = content.decode("utf-8", "replace")
    as_lines = as_node.encode("utf-8") == content  # no byte replaced: every line decodes
    return ("b64", as_json, as_lines, _text_key(as_node, ask))


@dataclass
class _Joined:
    """Join what a stream says in pieces: each tool call's name and arguments, and the text.

    Chat keys tool calls by `index`, Responses by `item_id`."""

    names: dict[str, Any]
    arguments: dict[str, str]
    text: list[str]
    announced: set[Any] = field(default_factory=set)
    """The `call_id`s the stream's items announced."""
    final: set[Any] = field(default_factory=set)
    """The `call_id`s of the terminal event's Response."""


def _events_key(events: list[Any], ask: Asked) -> Iterator[Any]:
    """Key a stream's events for the skeleton, runs of equal ones collapsed.

    Each event gives its name, structure, the positions the stream helpers look their snapshots
    up by, from `_positions`, and the verdicts on whole objects it carries; then come the
    verdicts on what the stream says in pieces."""
    previous: Any = None
    joined = _Joined({}, {}, [])
    for ev in events:
        if type(ev) is not dict:
            continue
        data = ev.get("data")
        name = ev.get("event")
        if type(data) is dict:
            if "choices" in data:
                positions = _chat_chunk(data["choices"], joined)
            else:
                positions = _positions(data.get("output_index"), data.get("content_index"))
                _responses_piece(data, joined)
            verdicts: tuple[Any, ...] = ()
            if type(data.get("response")) is dict:
                verdicts = _body_verdicts(data["response"], ask)
            elif type(data.get("item")) is dict:
                verdicts = _body_verdicts({"output": [data["item"]]}, ask)
            shaped: tuple[Any, ...] = (
                name if type(name) is str else None,
                structure(data),
                positions,
                verdicts,
            )
        else:
            shaped = (name if type(name) is str else None, _data_key(data))
        if ev.get("partial"):  # served without the blank line that would end it
            shaped = (*shaped, "partial")
        if shaped != previous:
            yield shaped
        previous = shaped
    calls = [(joined.names.get(k), v) for k, v in joined.arguments.items()]
    text = "".join(joined.text) if joined.text or ask.structured else None
    kept = joined.announced <= joined.final
    yield ("joined", _calls_verdict(calls, ask), structured_kind(text, ask), kept)


def _responses_piece(data: dict[str, Any], joined: _Joined) -> None:
    kind = str(data.get("type"))
    item = data.get("item")
    if type(item) is dict and item.get("type") == "function_call":
        joined.names[str(item.get("id"))] = item.get("name")
        joined.announced.add(item.get("call_id"))
    response = data.get("response")
    if type(response) is dict and kind == "response.completed":
        joined.final = {i.get("call_id") for i in _objects(response.get("output"))}
    if type(data.get("delta")) is str:
        if "arguments" in kind:
            key = str(data.get("item_id"))
            joined.arguments[key] = joined.arguments.get(key, "") + data["delta"]
        elif kind == "response.output_text.delta":
            joined.text.append(data["delta"])


def _positions(*values: Any) -> tuple[Any, ...]:
    """Keep the numbers that count, though structures leave numbers out.

    The helpers index their snapshots by them, as in `snapshot.output[event.output_index]`, so a
    wrong one raises."""
    return tuple(
        (type(v).__name__, v if type(v) in (int, float, str, bool) else None) for v in values
    )


def _chat_chunk(choices: Any, joined: _Joined) -> tuple[Any, ...]:
    """Add a chunk's text and tool-call pieces to what the stream said so far.

    It returns the chunk's choice and tool-call positions."""
    positions = []
    for choice in _objects(choices):
        positions.append(choice.get("index"))
        delta = choice.get("delta")
        if type(delta) is not dict:
            continue
        if type(delta.get("content")) is str:
            joined.text.append(delta["content"])
        for call in _objects(delta.get("tool_calls")):
            positions.append(call.get("index"))
            fn = call.get("function")
            fn = fn if type(fn) is dict else {}
            index = str(call.get("index"))
            if fn.get("name") is not None:
                joined.names[index] = fn.get("name")
            fragment = fn.get("arguments")
            if type(fragment) is str:
                joined.arguments[index] = joined.arguments.get(index, "") + fragment
            elif fragment is not None:
                joined.arguments[index] = fragment  # type: ignore[assignment]
    return _positions(*positions)


def _key(record: Record) -> tuple[Any, ...] | None:
    req, resp = record.get("request") or {}, record.get("response")
    if not isinstance(resp, dict):
        return None
    tags = record.get("tags") or {}
    body = req.get("body") if isinstance(req.get("body"), dict) else {}
    ask = asked(body)
    options = body.get("stream_options")
    wanted = (
        req.get("method"),
        tags.get("endpoint"),
        bool(body.get("stream")),
        json.dumps(options, sort_keys=True) if options is not None else None,
        ask.key,
    )
    content_type = next(
        (str(v) for k, v in resp.get("headers") or () if str(k).lower() == "content-type"), ""
    )
    events = resp.get("events")
    if isinstance(events, list):
        answer: Any = tuple(_events_key(events, ask))
    elif resp.get("body") is not None:
        answer = ("body", _data_key(resp["body"]), _body_verdicts(resp["body"], ask))
    else:
        answer = ("text", _text_key(resp.get("text"), ask), _bytes_key(resp.get("b64"), ask))
    cut = cut_short(record)
    return (wanted, resp.get("status"), content_type, resp.get("truncated"), cut, answer)


def skeleton(record: Record) -> str | None:
    """Spell as JSON what the clients' behaviour on `record` depends on.

    Equal skeletons give equal outcomes; the module's docstring says what it reads. The structure
    numbers are this process's, from `shapes.structure`."""
    key = _key(record)
    return None if key is None else json.dumps(key, default=str)


# --- measured, remembered ------------------------------------------------------------------

_memo: dict[tuple[Any, ...], Outcome] = {}
_memo_lock = threading.Lock()


def _remember(key: tuple[Any, ...], outcome: Outcome) -> None:
    with _memo_lock:
        if len(_memo) >= MEMO_LIMIT:
            _memo.clear()
        _memo[key] = outcome


def _memo_key(record: Record) -> tuple[Any, ...] | None:
    """Key an outcome by its skeleton and by the clients that measure it.

    An answer measured with the Node SDK is then not reused where the Node SDK is off."""
    key = _key(record)
    return None if key is None else (str(node.node_sdk()), key)


def impact(record: Record) -> Outcome:
    """Measure `record`'s answer through the real clients, remembered per skeleton."""
    key = _memo_key(record)
    if key is None:
        return Outcome(judged=False)
    found = _memo.get(key)
    if found is None:
        found = _measure(record)
        _remember(key, found)
    return found


def prepare(records: Iterable[Record]) -> None:
    """Measure the answers of `records` not remembered yet, one per skeleton, for `impact`.

    The Node SDK's calls go in one batch; without the Node SDK, `impact` measures each answer as
    it meets it."""
    if isinstance(node.node_sdk(), str):
        return
    pending: dict[tuple[Any, ...], Record] = {}
    for rec in records:
        key = _memo_key(rec)
        if key is not None and key not in _memo and key not in pending:
            pending[key] = rec
    if not pending:
        return
    jobs = [_job(rec) for rec in pending.values()]
    measured = node.measure([j for j in jobs if j is not None])
    by_node = iter(measured)
    for (key, rec), job in zip(pending.items(), jobs, strict=True):
        _remember(key, _combine(rec, next(by_node) if job is not None else None))


def _job(record: Record) -> node.Job | None:
    req = record.get("request") or {}
    answer = served(record)
    if answer is None:
        return None
    body = req.get("body") if isinstance(req.get("body"), dict) else {}
    route = (str(req.get("method")), str((record.get("tags") or {}).get("endpoint")))
    return node.Job(route, body, answer)


def _measure(record: Record) -> Outcome:
    job = _job(record)
    found = node.measure([job]) if job is not None else [None]
    return _combine(record, found[0])


def _combine(record: Record, by_node: Observations | None) -> Outcome:
    job = _job(record)
    by_python = python.measure(job.route, job.body, job.answer) if job is not None else None
    if by_python is None:
        return Outcome(judged=False)
    parts = [(python.CLIENT, by_python)]
    sdk = node.node_sdk()
    if by_node is not None and not isinstance(sdk, str):
        parts.append((sdk.client, by_node))
    observed: dict[str, str] = {}
    probes: dict[str, str] = {}
    failures: list[Failure] = []
    for _, part in parts:
        observed.update(part.observed)
        probes.update(part.probes)
        failures += part.failures
    return Outcome(
        tuple(sorted(observed.items())),
        tuple(failures),
        probes=tuple(sorted(probes.items())),
        clients=tuple(name for name, _ in parts),
    )
