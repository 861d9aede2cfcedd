"""What the real openai SDK makes of a server, feature by feature of the probe: the premises
its matrix stands on, checked apart from the probe's own grading.

For each feature the SDK sends the feature's request (its body through the method an app
calls: `client.chat.completions.create`, the stream helpers, `client.embeddings.create`)
and reads the answer as an app does: the text, the tool calls with their arguments parsed,
the structured output validated, the usage chunk. `Outcome.ok` says whether the app got
what it asked for; for an error feature, whether the SDK raised an API error.
`disagreement` then holds the probe's status against that: `pass` and `deviation` where the
app got what it asked for, `breaking` and `unsupported` where it did not, and for the error
features the status and shape the SDK saw.

Two ways to reach the answers:

- live (`sdk_outcomes(url, model)`): the bundled bodies with the probed model, sent to the
  server; a conversation (`previous_response_id`, a function call answered by `call_id`)
  is the SDK's own calls for the same thing. For servers that answer the same request the
  same way (the stand-ins, LiteLLM in front of one).
- replayed (`sdk_outcomes(url, model, replay=records)`): the probe's own records of the
  requests it sent, served back on loopback (`replaying`), so that the SDK reads the very
  answers the probe graded: for a model that samples (llama's tiny one), whose next answer
  to the same request is another. The routes, the WebSocket mode and the error features
  are asked live.

`responses.stream_grammar` is read as `client.responses.create(stream=True)` reads a stream
(every event, in order): the grammar row reports the grammar, and what the stream helper
makes of the same stream is `responses.stream`'s row.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
from pydantic import BaseModel, ValidationError

from tests.conftest import NOT_PROXIED
from wirediff._types import Record
from wirediff.probe.features import load_probe
from wirediff.probe.grade import grade

__all__ = [
    "Answer",
    "Outcome",
    "answering",
    "disagreement",
    "replaying",
    "sdk_outcomes",
    "upgrade_diagnosis",
]

ERRORS = {
    "chat.bad_parameter": 400,
    "errors.unknown_route": 404,
    "errors.wrong_method": 405,
    "errors.bad_key": 401,
}
"""The error features and the status OpenAI answers each with."""
ACCEPTED_BREAKS = {"errors.unknown_route", "errors.wrong_method"}
"""Error features where a success breaks the client (it reads an answer that is not there)."""
LIVE = {"models", "responses.websocket", "errors.unknown_route", "errors.wrong_method"}
"""Features asked of the server even when replaying: requests with no body to match."""
TERMINAL = ("response.completed", "response.failed", "response.incomplete", "error")
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
Bodies = list[dict[str, Any]]
"""A feature's request bodies, in the order they are sent (what it continues first)."""


class City(BaseModel):
    """The record the bundled structured-output requests ask for (openai-python's `City`)."""

    name: str
    country: str
    population: int


@dataclass
class Outcome:
    ok: bool
    """The app got what it asked for (for an error feature: the SDK raised an API error)."""
    said: str
    """What happened, in a few words."""
    status: int | None = None
    """The status of the API error the SDK raised."""
    shaped: bool = False
    """That error's body is OpenAI's error object (`error.message`)."""
    calls: int = 0
    """Tool calls in the answer."""


# --- the answers as an app reads them ----------------------------------------------------


def _send(method: Callable[..., Any], body: dict[str, Any], drop: tuple[str, ...] = ()) -> Any:
    """`method(**body)`: what it takes as arguments, the rest as `extra_body`."""
    takes = inspect.signature(method).parameters
    known = {k: v for k, v in body.items() if k in takes and k not in drop}
    extra = {k: v for k, v in body.items() if k not in takes and k not in drop}
    return method(**known, **({"extra_body": extra} if extra else {}))


def _text(got: str | None) -> Outcome:
    """An answer's text as an app reads it: there (a model may say nothing), not missing."""
    return Outcome(isinstance(got, str), f"text {got!r:.40}")


def _calls(arguments: list[str], want: int) -> Outcome:
    """Tool calls as an agent loop reads them: each one's arguments parsed to an object."""
    n = len(arguments)
    said = f"{n} tool call{'s' if n != 1 else ''}"
    for a in arguments:
        try:
            parsed = json.loads(a)
        except ValueError:
            return Outcome(False, f"{said}, arguments not JSON: {a!r:.40}", calls=n)
        if not isinstance(parsed, dict):
            return Outcome(False, f"{said}, arguments not an object: {a!r:.40}", calls=n)
    return Outcome(n >= want, said, calls=n)


def _structured(text: str | None) -> Outcome:
    """Structured output as `.parse()` reads it: the text validated as the asked-for record."""
    try:
        City.model_validate_json(text or "")
    except ValidationError as e:
        return Outcome(False, f"not a City: {e.errors()[0]['msg']} in {text!r:.40}")
    return Outcome(True, "a City")


def _chat(c: openai.OpenAI, b: Bodies) -> Any:
    return _send(c.chat.completions.create, b[-1])


def _chat_calls(want: int) -> Call:
    def call(c: openai.OpenAI, b: Bodies) -> Outcome:
        calls = _chat(c, b).choices[0].message.tool_calls or []
        return _calls([t.function.arguments for t in calls if t.type == "function"], want)

    return call


def _streamed_calls(c: openai.OpenAI, b: Bodies) -> Outcome:
    with _send(c.chat.completions.stream, b[-1], drop=("stream",)) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    return _calls([t.function.arguments for t in calls if t.type == "function"], 1)


def _chat_stream(c: openai.OpenAI, b: Bodies) -> Outcome:
    chunks = list(_chat(c, b))
    return _text("".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices))


def _usage(c: openai.OpenAI, b: Bodies) -> Outcome:
    chunks = list(_chat(c, b))
    usage = [ch.usage for ch in chunks if ch.usage is not None]
    return Outcome(bool(usage), f"{len(usage)} usage chunk(s) in {len(chunks)}")


def _responses_calls(c: openai.OpenAI, b: Bodies) -> Outcome:
    """The agent's tool call: with `tool_choice` left to the model, an answer in text is the
    model's choice, and the SDK reads it; a call must have arguments it can parse."""
    answer = _send(c.responses.create, b[-1])
    return _calls([i.arguments for i in answer.output if i.type == "function_call"], 0)


def _responses_stream(c: openai.OpenAI, b: Bodies) -> Outcome:
    with _send(c.responses.stream, b[-1], drop=("stream",)) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    text = final.output_text
    return Outcome(isinstance(text, str), f"{len(kinds)} events, then {text!r:.30}")


def _raw_stream(c: openai.OpenAI, b: Bodies) -> Outcome:
    kinds = [e.type for e in _send(c.responses.create, b[-1])]
    return Outcome(bool(kinds), f"{len(kinds)} events, the last {kinds[-1:]}")


def _chain(c: openai.OpenAI, b: Bodies) -> Outcome:
    """A conversation as the probe sent it (its ids those of the answers replayed): each
    request in turn, the last one's answer read; a stream through the stream helper."""
    answer: Any = None
    for body in b:
        if body.get("stream"):
            with _send(c.responses.stream, body, drop=("stream",)) as stream:
                for _ in stream:
                    pass
                answer = stream.get_final_response()
        else:
            answer = _send(c.responses.create, body)
    return _continued(answer, b[-1].get("previous_response_id"))


def _continued(answer: Any, previous: Any) -> Outcome:
    """An answer's text, and for a turn that continues one, whether the server says it did.

    The Response object names the response it continued: a server that keeps no conversation
    answers the turn alone, and says null. A gateway may name it by an id of its own (LiteLLM
    names its upstream's)."""
    text = _text(answer.output_text)
    if previous is None or not text.ok:
        return text
    kept = isinstance(answer.previous_response_id, str) and bool(answer.previous_response_id)
    said = f"{text.said}, previous_response_id {answer.previous_response_id!r}"
    return Outcome(kept, said)


def _round_trip(c: openai.OpenAI, b: Bodies) -> Outcome:
    """A function call, its output sent back by `call_id`, and the answer to that (no call
    to answer: the model's choice, as `responses.tools`)."""
    model = b[-1]["model"]
    ask: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.responses.create(model=model, input=ask, tools=[WEATHER])
    calls = [item for item in first.output if item.type == "function_call"]
    if not calls:
        return Outcome(True, "no function call to answer")
    done: Any = [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}]
    again: Any = [*ask, *first.output, *done]
    return _text(c.responses.create(model=model, input=again, tools=[WEATHER]).output_text)


def _previous(c: openai.OpenAI, b: Bodies) -> Outcome:
    model = b[-1]["model"]
    first = c.responses.create(model=model, input="My name is Ada. Say hi.")
    second = c.responses.create(
        model=model, input="What is my name?", previous_response_id=first.id
    )
    return _continued(second, first.id)


def _websocket(c: openai.OpenAI, b: Bodies, model: str) -> Outcome:
    with c.responses.connect(websocket_connection_options=NOT_PROXIED) as conn:
        conn.response.create(model=model, input="Say hi")
        kinds = []
        for event in conn:
            kinds.append(event.type)
            if event.type in TERMINAL:
                break
    return Outcome(kinds[-1:] == ["response.completed"], f"events {kinds}")


Call = Callable[[openai.OpenAI, Bodies], Outcome]
CALLS: dict[str, Call] = {
    "models": lambda c, b: Outcome(bool(c.models.list().data), "a list"),
    "chat.text": lambda c, b: _text(_chat(c, b).choices[0].message.content),
    "chat.stream": _chat_stream,
    "chat.usage_chunk": _usage,
    "chat.tools": _chat_calls(1),
    "chat.parallel_tools": _chat_calls(1),
    "chat.streamed_tool_calls": _streamed_calls,
    "chat.structured_output": lambda c, b: _structured(_chat(c, b).choices[0].message.content),
    "chat.bad_parameter": lambda c, b: _text(_chat(c, b).choices[0].message.content),
    "responses.text": lambda c, b: _text(_send(c.responses.create, b[-1]).output_text),
    "responses.stream": _responses_stream,
    "responses.tools": _responses_calls,
    "responses.function_call_round_trip": _round_trip,
    "responses.previous_response_id": _previous,
    "responses.structured_output": lambda c, b: _structured(
        _send(c.responses.create, b[-1]).output_text
    ),
    "responses.stream_grammar": _raw_stream,
    "embeddings": lambda c, b: Outcome(
        bool(_send(c.embeddings.create, b[-1]).data[0].embedding), "a vector"
    ),
    "errors.unknown_route": lambda c, b: Outcome(
        True, str(c.get("/wirediff/no-such-route", cast_to=httpx.Response).status_code)
    ),
    "errors.wrong_method": lambda c, b: Outcome(
        True, str(c.get("/chat/completions", cast_to=httpx.Response).status_code)
    ),
}
REPLAYED: dict[str, Call] = {
    "responses.function_call_round_trip": _chain,
    "responses.previous_response_id": _chain,
}
"""What a conversation is when replaying: the probe's own requests, in turn."""


# --- the requests: bundled, or the probe's own, served back ------------------------------


def _bundled(feature: str, model: str, embedding_model: str) -> Bodies:
    """The bodies of the feature's requests in the bundle, asking for the probed model."""
    data = load_probe()
    out = []
    for i in data.feature(feature).exchanges:
        body = data.by_id[i]["request"]["body"]
        if isinstance(body, dict):
            out.append({**body, "model": embedding_model if feature == "embeddings" else model})
    return out


def _recorded(feature: str, records: list[Record]) -> Bodies:
    """The bodies the probe sent for the feature (its records replay the bundled ones)."""
    by_original = {str(r["replay_of"]): r for r in records if r.get("response") is not None}
    out = []
    for i in load_probe().feature(feature).exchanges:  # one not sent: what it continues is all
        body = by_original[i]["request"]["body"] if i in by_original else None
        if isinstance(body, dict):
            out.append(body)
    return out


def _wire(rec: Record) -> tuple[int, str, bytes]:
    """A recorded answer as it came: status, content-type, body (events joined as SSE)."""
    resp: Any = rec["response"]
    ctype = next(
        (str(v) for k, v in resp["headers"] if str(k).lower() == "content-type"), "text/plain"
    )
    if resp.get("events") is not None:
        parts = []
        for e in resp["events"]:
            data = e["data"] if isinstance(e["data"], str) else json.dumps(e["data"])
            parts.append((f"event: {e['event']}\n" if e.get("event") else "") + f"data: {data}\n\n")
        return resp["status"], ctype, "".join(parts).encode()
    if resp.get("body") is not None:
        return resp["status"], ctype, json.dumps(resp["body"]).encode()
    return resp["status"], ctype, str(resp.get("text") or "").encode()


Answer = Callable[[str, str, bytes], tuple[int, str, bytes]]
"""`(method, path, body) -> (status, content-type, body)`."""


@contextmanager
def answering(answer: Answer) -> Iterator[str]:
    """A loopback HTTP server answering each request with `answer`; yields its base URL
    (`…/v1`)."""

    class Handler(BaseHTTPRequestHandler):
        def respond(self) -> None:
            asked = self.rfile.read(int(self.headers.get("content-length") or 0))
            status, ctype, raw = answer(self.command, self.path, asked)
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = respond

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def replaying(records: list[Record]) -> AbstractContextManager[str]:
    """A loopback server answering each POST the probe recorded (matched by its body) with
    the answer recorded for it; yields its base URL (`…/v1`)."""
    answers = [
        (r["request"]["body"], _wire(r))
        for r in records
        if r.get("response") is not None and r["request"]["method"] == "POST"
    ]

    def answer(method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
        asked = json.loads(body) if body else None
        found = next((wire for sent, wire in answers if sent == asked), None)
        return found or (599, "text/plain", b"not recorded")

    return answering(answer)


# --- the outcomes and what they imply ----------------------------------------------------


def _shaped(e: openai.APIStatusError) -> bool:
    body = e.body  # the SDK's `error` object, when the answer has one
    return isinstance(body, dict) and isinstance(body.get("message"), str)


def _client(base_url: str, api_key: str) -> openai.OpenAI:
    http = openai.DefaultHttpxClient(trust_env=False)
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http)


def sdk_outcomes(
    base_url: str,
    model: str,
    key: str = "x",
    embedding_model: str | None = None,
    replay: list[Record] | None = None,
) -> dict[str, Outcome]:
    """Each feature's call made with the real SDK against `base_url` (an SDK's base URL), or
    with `replay`, against the answers the probe recorded (see the module's docstring)."""
    out: dict[str, Outcome] = {}
    with (
        _client(base_url, key) as live,
        _client(base_url, "sk-wirediff-probe-not-a-valid-key") as bad,
        replaying(replay or []) as served,
        _client(served, key) as recorded,
    ):
        calls: dict[str, Call] = {
            **CALLS,
            **(REPLAYED if replay is not None else {}),
            "responses.websocket": lambda c, b: _websocket(c, b, model),
            "errors.bad_key": lambda c, b: Outcome(True, f"{len(bad.models.list().data)} models"),
        }
        for feature, call in calls.items():
            if replay is not None and feature not in LIVE:
                c, bodies = recorded, _recorded(feature, replay)
            else:
                c, bodies = live, _bundled(feature, model, embedding_model or model)
            try:
                out[feature] = call(c, bodies)
            except openai.APIStatusError as e:
                said = f"raised {type(e).__name__} {e.status_code}"
                out[feature] = Outcome(False, said, e.status_code, _shaped(e))
            except Exception as e:  # what the SDK raises on an answer it cannot read
                out[feature] = Outcome(False, f"raised {type(e).__name__}: {e}"[:200])
    for feature in ERRORS:  # the SDK raising is what these features want
        o = out[feature]
        out[feature] = Outcome(o.status is not None, o.said, o.status, o.shaped)
    return out


def disagreement(feature: str, status: str, o: Outcome) -> str | None:
    """Why the probe's `status` does not follow from what the SDK saw (None: it does)."""
    if feature in ERRORS:
        want = ERRORS[feature]
        if not o.ok:  # the server accepted the request
            expected = "breaking" if feature in ACCEPTED_BREAKS else "deviation"
        elif o.status == want and o.shaped:
            expected = "pass"
        else:
            expected = "deviation"
        return None if status == expected else f"SDK: {o.said}, so {expected}"
    if feature == "chat.parallel_tools" and o.ok:
        expected = "pass" if o.calls >= 2 else "deviation"
        return None if status == expected else f"SDK: {o.said}, so {expected}"
    if (status in ("pass", "deviation")) != o.ok:
        return f"SDK: {o.said} ({'works' if o.ok else 'fails'})"
    return None


def upgrade_diagnosis(
    feature: dict[str, Any], records: list[Record]
) -> tuple[int | None, list[str]]:
    """Give the status the probe's WebSocket upgrade got and the codes of its diagnoses.

    The probe's records are those of one server, graded as the probe grades them."""
    ids = set(feature["exchanges"])
    status = next(
        (r["response"]["status"] for r in records if r["id"] in ids and r["response"]), None
    )
    return status, grade(records).codes_for(ids)
