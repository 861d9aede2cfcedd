"""What an app gets from an answer: the recorded bytes fed back into the real openai SDK.

Severity follows client impact, and impact is measured, not guessed: each recorded answer is
served to `openai.OpenAI` through an `httpx.MockTransport`, and the calls apps make are made —
`create()` (streamed or not), the `chat.completions.stream()` and `responses.stream()` helpers
and their final objects — reading what apps read: the message content, tool-call arguments
parsed as JSON, `output_text`, usage. The result is an `Outcome`: what each probe observed
(kinds of values, never generated text) and the failures, each with the line of the traceback
where the SDK gave up. Outcomes are remembered per answer skeleton (`skeleton`: the request's
options and the answer's structure, `wirediff.analysis.comparison.shapes.structure`), so the
SDK runs once per distinct answer structure, not once per exchange.
"""

from __future__ import annotations

import json
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from wirediff._support import as_bytes, clip, is_2xx
from wirediff._types import Record
from wirediff.analysis.comparison.shapes import structure

__all__ = ["SDK_SOURCE", "Failure", "Outcome", "impact", "skeleton"]

SDK_SOURCE = f"openai-python {openai.__version__}"
MESSAGE_LIMIT = 240
"""Characters kept of an exception's message in the evidence."""
MEMO_LIMIT = 1 << 14
"""Outcomes remembered (then the table starts over: forgetting only costs time)."""
_HOP_BY_HOP = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection"})
_PROMPT = [{"role": "user", "content": "x"}]


@dataclass(frozen=True, slots=True)
class Failure:
    """The SDK raised where an app would not expect it, or handed back nothing useful."""

    probe: str
    """The call that failed, as an app writes it: `client.responses.stream()`."""
    error: str
    """`AttributeError: 'Response' object has no attribute 'output'`."""
    where: str = ""
    """The failing line of the traceback: `openai/lib/…/_responses.py:332: snapshot.output…`."""

    @property
    def evidence(self) -> str:
        return f"`{self.probe}` {self.error}" + (f" at {self.where}" if self.where else "")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the probes observed (`content: text`, `tool_arguments: object`, `raises:
    NotFoundError`…) and how the SDK failed, if it did."""

    observed: tuple[tuple[str, str], ...] = ()
    failures: tuple[Failure, ...] = ()
    judged: bool = True
    """False when the answer cannot be replayed to the SDK (truncated, not recorded)."""
    probes: tuple[tuple[str, str], ...] = ()
    """Which call observed each key: `("usage", "client.chat.completions.create(stream=True)")`."""

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


@dataclass
class _Probe:
    observed: dict[str, str] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    probes: dict[str, str] = field(default_factory=dict)
    current: str = ""

    def see(self, key: str, value: str) -> None:
        self.observed[key] = value
        self.probes[key] = self.current

    def run(self, probe: str, call: Callable[[], None]) -> None:
        self.current = probe
        try:
            call()
        except openai.APIStatusError as e:
            if "raises" not in self.observed:
                self.see("raises", type(e).__name__)
        except openai.APIError as e:  # an error event in a stream: the app sees an exception
            if "raises" not in self.observed:
                self.see("raises", f"APIError: {clip(e.message, MESSAGE_LIMIT)}")
        except Exception as e:
            if _returned_none(e):  # the SDK handed back None: that, not how this code read it
                self.failures.append(Failure(probe, "returns None"))
            else:
                self.failures.append(Failure(probe, _error_text(e), _failing_line(e)))


def _returned_none(e: BaseException) -> bool:
    """The probe failed reading what the SDK returned, and that was None (a JSON body
    `null`): the innermost frame is the probe's own, its result `r` None."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or "/openai/" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
        return False
    return "r" in tb.tb_frame.f_locals and tb.tb_frame.f_locals["r"] is None


def _error_text(e: BaseException) -> str:
    first = str(e).splitlines()[0] if str(e) else ""
    return f"raises {type(e).__name__}" + (f": {clip(first, MESSAGE_LIMIT)}" if first else "")


def _failing_line(e: BaseException) -> str:
    """The innermost frame in the SDK (else the innermost at all), as `file:line: code`."""
    frames = traceback.extract_tb(e.__traceback__)
    inside = [f for f in frames if "/openai/" in f.filename.replace("\\", "/")]
    if not (inside or frames):
        return ""
    frame = (inside or frames)[-1]
    path = frame.filename.replace("\\", "/")
    short = path[path.rindex("/openai/") + 1 :] if "/openai/" in path else path.rsplit("/", 1)[-1]
    return f"{short}:{frame.lineno}: {(frame.line or '').strip()}"


# --- the answer, served again -------------------------------------------------------------


def _answer(record: Record) -> httpx.Response | None:
    resp = record.get("response")
    if not isinstance(resp, dict) or not isinstance(resp.get("status"), int):
        return None
    if resp.get("truncated") and not isinstance(resp.get("events"), list):
        return None
    headers = [  # as the bytes they were: a header's text need not be ASCII
        (as_bytes(str(k)), as_bytes(str(v)))
        for k, v in resp.get("headers") or []
        if str(k).lower() not in _HOP_BY_HOP
    ]
    events = resp.get("events")
    if isinstance(events, list):
        content = _sse(events)
    elif resp.get("body") is not None:
        content = json.dumps(resp["body"]).encode()
    elif isinstance(text := resp.get("text"), str):
        content = as_bytes(text)
    elif resp.get("b64") is not None or resp.get("complete") is False:
        return None
    else:
        content = b""
    return httpx.Response(resp["status"], headers=headers, content=content)


def _sse(events: list[Any]) -> bytes:
    """The stream as the SDK parses it: each event's name and data, in order."""
    frames = []
    for ev in events:
        if not isinstance(ev, dict):
            continue
        data = ev.get("data")
        text = data if isinstance(data, str) else json.dumps(data)
        name = f"event: {ev['event']}\n" if isinstance(ev.get("event"), str) else ""
        frames.append(f"{name}data: {text}\n\n")
    return as_bytes("".join(frames))


def _client(answer: httpx.Response) -> openai.OpenAI:
    def serve(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            answer.status_code, headers=answer.headers, content=answer.content, request=request
        )

    return openai.OpenAI(
        api_key="sk-impact",
        base_url="http://wirediff.invalid/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(serve)),
    )


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _kind_of_text(value: Any) -> str:
    if value is None:
        return "none"
    if not isinstance(value, str):
        return type(value).__name__
    return "text" if value else "empty"


def _kind_of_arguments(value: Any) -> str:
    """Tool-call arguments as an app reads them: `json.loads` must give an object."""
    if not isinstance(value, str):
        return f"not a string ({type(value).__name__})"
    try:
        parsed = json.loads(value)
    except ValueError:
        return "not JSON"
    return "object" if isinstance(parsed, dict) else f"JSON {type(parsed).__name__}"


def _usage(value: Any) -> str:
    return "present" if value is not None else "absent"


# --- the probes, per family ----------------------------------------------------------------


def _tools(request: dict[str, Any]) -> list[Any]:
    tools = request.get("tools")
    return (
        [t for t in tools if isinstance(t, dict) and t.get("type") == "function"]
        if isinstance(tools, list)
        else []
    )


def _chat(client: Any, request: dict[str, Any], p: _Probe) -> None:
    model = str(request.get("model") or "m")
    tools = _tools(request)
    extra: dict[str, Any] = {"tools": tools} if tools else {}
    if not request.get("stream"):

        def create() -> None:
            r = client.chat.completions.create(model=model, messages=_PROMPT, **extra)
            choice = r.choices[0]
            p.see("content", _kind_of_text(choice.message.content))
            for call in choice.message.tool_calls or []:
                p.see("tool_arguments", _kind_of_arguments(call.function.arguments))
            p.see("usage", _usage(r.usage))
            if r.usage is not None:
                p.see("usage.total_tokens", type(r.usage.total_tokens).__name__)

        p.run("client.chat.completions.create()", create)
        return
    options = request.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    if include_usage:
        extra["stream_options"] = {"include_usage": True}

    def create_stream() -> None:
        chunks = 0
        content: list[str] = []
        arguments: dict[int, str] = {}
        usage = None
        for chunk in client.chat.completions.create(
            model=model, messages=_PROMPT, stream=True, **extra
        ):
            chunks += 1
            usage = chunk.usage or usage
            for choice in chunk.choices or []:
                if choice.delta.content:
                    content.append(choice.delta.content)
                for call in choice.delta.tool_calls or []:
                    fn = call.function
                    piece = fn.arguments if fn is not None else None
                    if piece is not None:
                        arguments[call.index] = arguments.get(call.index, "") + str(piece)
        p.see("chunks", "some" if chunks else "none")
        p.see("content", "text" if content else "empty")
        for args in arguments.values():
            p.see("tool_arguments", _kind_of_arguments(args))
        if include_usage:
            p.see("usage", _usage(usage))

    p.run("client.chat.completions.create(stream=True)", create_stream)

    def helper() -> None:
        with client.chat.completions.stream(model=model, messages=_PROMPT, **extra) as stream:
            for _ in stream:
                pass
            final = stream.get_final_completion()
        if final.choices:
            p.see("final.content", _kind_of_text(final.choices[0].message.content))

    p.run("client.chat.completions.stream()", helper)


def _responses(client: Any, request: dict[str, Any], p: _Probe) -> None:
    model = str(request.get("model") or "m")
    tools = _tools(request)
    extra: dict[str, Any] = {"tools": tools} if tools else {}

    def observe(r: Any, prefix: str = "") -> None:
        p.see(f"{prefix}output_text", _kind_of_text(r.output_text))
        for item in r.output or []:
            if getattr(item, "type", None) == "function_call":
                p.see(f"{prefix}tool_arguments", _kind_of_arguments(item.arguments))
        p.see(f"{prefix}usage", _usage(r.usage))

    if not request.get("stream"):
        p.run(
            "client.responses.create()",
            lambda: observe(client.responses.create(model=model, input="x", **extra)),
        )
        return

    def create_stream() -> None:
        events = [
            e.type for e in client.responses.create(model=model, input="x", stream=True, **extra)
        ]
        p.see("events", "some" if events else "none")

    p.run("client.responses.create(stream=True)", create_stream)

    def helper() -> None:
        with client.responses.stream(model=model, input="x", **extra) as stream:
            for _ in stream:
                pass
            observe(stream.get_final_response(), "final.")

    p.run("client.responses.stream()", helper)


def _embeddings(client: Any, request: dict[str, Any], p: _Probe) -> None:
    def create() -> None:
        r = client.embeddings.create(model=str(request.get("model") or "m"), input="x")
        first = r.data[0].embedding if r.data else None
        p.see("embedding", "vector" if first else "empty")

    p.run("client.embeddings.create()", create)


def _models(client: Any, request: dict[str, Any], p: _Probe) -> None:
    def listed() -> None:
        p.see("models", "some" if [m.id for m in client.models.list()] else "none")

    p.run("client.models.list()", listed)


_PROBES: dict[tuple[str, str], Callable[[Any, dict[str, Any], _Probe], None]] = {
    ("POST", "/v1/chat/completions"): _chat,
    ("POST", "/v1/responses"): _responses,
    ("POST", "/v1/embeddings"): _embeddings,
    ("GET", "/v1/models"): _models,
}


# --- remembered per answer skeleton -------------------------------------------------------


def _data_key(data: Any) -> Any:
    """An event's data as the SDK sees it: `[DONE]` and other text as is, JSON by structure."""
    return structure(data) if isinstance(data, dict | list) else data


def _text_key(text: Any) -> Any:
    """A text answer as the SDK reads it: it tries JSON first, so a text that parses is keyed
    as the value it parses to, one that does not by why not."""
    if not isinstance(text, str) or not text.strip():
        return _kind_of_text(text)
    try:
        return ("json", _data_key(json.loads(as_bytes(text))))
    except (ValueError, RecursionError) as e:
        return ("not json", type(e).__name__)


def _events_key(events: list[Any]) -> Iterator[Any]:
    """Event names, structures and the positions the stream helpers look their snapshots up
    by (`_positions`), with runs of equal ones collapsed, then each stream's joined tool
    arguments (fragments are not JSON; their concatenation must be)."""
    previous: Any = None
    joined: dict[str, str] = {}
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
                if type(data.get("delta")) is str and "arguments" in str(data.get("type")):
                    item = str(data.get("item_id"))
                    joined[item] = joined.get(item, "") + data["delta"]
            shaped: tuple[Any, ...] = (
                name if type(name) is str else None,
                structure(data),
                positions,
            )
        else:
            shaped = (name if type(name) is str else None, _data_key(data))
        if shaped != previous:
            yield shaped
        previous = shaped
    yield ("arguments", tuple(sorted(_kind_of_arguments(v) for v in joined.values())))


def _positions(*values: Any) -> tuple[Any, ...]:
    """Numbers that count, though structures leave numbers out: the helpers index their
    snapshots by them (`snapshot.output[event.output_index]`), so a wrong one raises."""
    return tuple(
        (type(v).__name__, v if type(v) in (int, float, str, bool) else None) for v in values
    )


def _chat_chunk(choices: Any, joined: dict[str, str]) -> tuple[Any, ...]:
    """Add a chunk's tool-call argument fragments to each call's text so far; the chunk's
    choice and tool-call positions."""
    positions = []
    for choice in choices if type(choices) is list else ():
        if type(choice) is not dict:
            continue
        positions.append(choice.get("index"))
        delta = choice.get("delta")
        calls = delta.get("tool_calls") if type(delta) is dict else None
        for call in calls if type(calls) is list else ():
            if type(call) is not dict:
                continue
            positions.append(call.get("index"))
            fn = call.get("function")
            fragment = fn.get("arguments") if type(fn) is dict else None
            if type(fragment) is str:
                index = str(call.get("index"))
                joined[index] = joined.get(index, "") + fragment
    return _positions(*positions)


def _key(record: Record) -> tuple[Any, ...] | None:
    req, resp = record.get("request") or {}, record.get("response")
    if not isinstance(resp, dict):
        return None
    tags = record.get("tags") or {}
    body = _object(req.get("body"))
    options = body.get("stream_options")
    asked = (
        req.get("method"),
        tags.get("endpoint"),
        bool(body.get("stream")),
        json.dumps(options, sort_keys=True) if options is not None else None,
        tuple(sorted(str(t.get("name")) for t in _tools(body))),
    )
    content_type = next(
        (str(v) for k, v in resp.get("headers") or () if str(k).lower() == "content-type"), ""
    )
    events = resp.get("events")
    if isinstance(events, list):
        answer: Any = tuple(_events_key(events))
    elif resp.get("body") is not None:
        answer = ("body", _data_key(resp["body"]))
    else:
        answer = ("text", _text_key(resp.get("text")), resp.get("b64") is not None)
    return (asked, resp.get("status"), content_type, resp.get("truncated"), answer)


def skeleton(record: Record) -> str | None:
    """What the SDK's behaviour on `record` depends on, as JSON: equal skeletons, equal
    outcomes. Generated text and numbers do not count, whether a text is empty does; the
    structure numbers are this process's (`shapes.structure`)."""
    key = _key(record)
    return None if key is None else json.dumps(key, default=str)


_memo: dict[tuple[Any, ...], Outcome] = {}
_memo_lock = threading.Lock()


def impact(record: Record) -> Outcome:
    """The outcome of `record`'s answer through the real SDK (remembered per skeleton)."""
    key = _key(record)
    if key is None:
        return Outcome(judged=False)
    found = _memo.get(key)
    if found is None:
        found = _measure(record)
        with _memo_lock:
            if len(_memo) >= MEMO_LIMIT:
                _memo.clear()
            _memo[key] = found
    return found


def _measure(record: Record) -> Outcome:
    req = record.get("request") or {}
    tags = record.get("tags") or {}
    probe = _PROBES.get((str(req.get("method")), str(tags.get("endpoint"))))
    answer = _answer(record)
    if probe is None or answer is None:
        return Outcome(judged=False)
    p = _Probe()
    body = _object(req.get("body"))
    with _client(answer) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK warns while tolerating odd values: not impact
        probe(client, body, p)
    if not is_2xx(answer.status_code) and "raises" not in p.observed:
        p.see("raises", "nothing")
    return Outcome(
        tuple(sorted(p.observed.items())), tuple(p.failures), probes=tuple(sorted(p.probes.items()))
    )
