"""Drive openai-python on a recorded answer: the calls apps make, and what they read.

The answer is served to `openai.OpenAI` through an `httpx.MockTransport`. Per route it calls
`create()`, streamed or not; the stream helpers `chat.completions.stream()` with
`get_final_completion()` and `responses.stream()` with `get_final_response()`; and `parse()`
where the request asked for structured output. It reads what apps and agent loops read: the text;
`finish_reason`, or `status` on Responses; each tool call's `call_id`, name and arguments, run
through `json.loads` and then the tool's schema from the request; structured content against the
request's schema; the vendor reasoning text in `reasoning_content`, where vLLM and DeepSeek
document reading it; usage; and for an error status the exception and whether it carries the
server's words.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
from pydantic import RootModel, model_validator

from wirediff._support import clip
from wirediff.analysis.comparison.clients.asked import (
    VALID,
    Asked,
    arguments_kind,
    asked,
    parsed_kind,
    structured_kind,
)
from wirediff.analysis.comparison.clients.observations import (
    MESSAGE_LIMIT,
    Failure,
    Observations,
    Served,
    error_text,
    failing_line,
    said,
)

__all__ = ["CLIENT", "ROUTES", "kind_of", "measure", "see_calls"]

CLIENT = f"openai-python {openai.__version__}"
_PROMPT: Any = [{"role": "user", "content": "x"}]


class AppError(Exception):
    """Stand for what an app's next line does with a value the SDK returned, not the SDK raising."""


def _run(p: Observations, probe: str, words: str, call: Callable[[], None]) -> None:
    p.current = probe
    try:
        call()
    except openai.APIStatusError as e:
        p.see_first("raises", type(e).__name__)
        p.see_first("error.message", _carries(str(e.message), words))
    except openai.APIConnectionError as e:  # the answer cut: the SDK's words, not the server's
        p.see_first("raises", f"APIConnectionError: {clip(e.message, MESSAGE_LIMIT)}")
    except openai.APIError as e:  # an error event in a stream: the app sees an exception
        p.see_first("raises", f"APIError: {clip(e.message, MESSAGE_LIMIT)}")
    except AppError as e:
        p.failures.append(Failure(probe, str(e)))
    except Exception as e:
        p.failures.append(Failure(probe, error_text(e), failing_line(e)))


def _carries(message: str, words: str) -> str:
    return "the server's words" if words and words in message else "no server words"


def kind_of(value: Any) -> str:
    if value is None:
        return "none"
    if not isinstance(value, str):
        return type(value).__name__
    return "text" if value else "empty"


def _usage(value: Any) -> str:
    return "present" if value is not None else "absent"


def _returned(value: Any, call: str, what: str) -> Any:
    """Return `value`; raise `AppError` when it is nothing an app can read `what` of."""
    if value is None:
        raise AppError(f"returns None: `{call}.{what}` raises AttributeError")
    return value


def _first(items: Any, call: str, what: str) -> Any:
    if not items:
        shown = "None" if items is None else "[]"
        raise AppError(f"returns `{what}: {shown}`: `{call}.{what}[0]` raises an error")
    return items[0]


def see_calls(p: Observations, prefix: str, calls: list[tuple[Any, Any, Any]], ask: Asked) -> None:
    """Observe tool calls as an agent loop reads them, each an `(id, name, arguments)`.

    It notes how many there are, whether each has an id to answer with, a name the request
    offered, and arguments its tool accepts."""
    p.see(f"{prefix}tool_calls", str(len(calls)))
    if not calls:
        return
    ids = [c[0] for c in calls]
    missing = any(not isinstance(i, str) or not i for i in ids)
    p.see(
        f"{prefix}tool_call.id",
        "missing" if missing else "repeated" if len(set(ids)) < len(ids) else "present",
    )
    offered = all(c[1] in ask.names for c in calls) if ask.tools else True
    p.see(f"{prefix}tool_call.name", "offered" if offered else "not offered")
    kinds = [arguments_kind(c[2], ask.tool_schema(c[1])) for c in calls]
    p.see(f"{prefix}tool_arguments", next((k for k in kinds if k != "object"), "object"))


def _structured_model(ask: Asked) -> type[RootModel[Any]] | None:
    """Build a type for `parse()` that validates as jsonschema does with the request's schema."""
    if ask.structured != "json_schema" or ask.schema is None:
        return None

    def check(value: Any) -> None:
        verdict = parsed_kind(value, ask)
        if verdict != VALID:
            raise ValueError(verdict)

    class Structured(RootModel[Any]):
        @model_validator(mode="after")
        def _schema(self) -> Structured:
            check(self.root)
            return self

    return Structured


# --- Chat Completions ----------------------------------------------------------------------


def _chat(client: openai.OpenAI, body: dict[str, Any], p: Observations, words: str) -> None:
    ask = asked(body)
    model = str(body.get("model") or "m")
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    extra: dict[str, Any] = {"tools": tools} if tools else {}
    if not body.get("stream"):
        _run(
            p,
            "client.chat.completions.create()",
            words,
            lambda: _chat_create(client, model, extra, ask, p),
        )
        _chat_parse(client, model, tools, ask, p, words)
        return
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    if include_usage:
        extra["stream_options"] = {"include_usage": True}
    probe = "client.chat.completions.create(stream=True)"
    _run(p, probe, words, lambda: _chat_chunks(client, model, extra, ask, include_usage, p))
    _run(
        p,
        "client.chat.completions.stream()",
        words,
        lambda: _chat_helper(client, model, extra, ask, p),
    )
    model_type = _structured_model(ask)
    if model_type is not None:
        parse = "client.chat.completions.stream(response_format=Model)"

        def parsed() -> None:
            with client.chat.completions.stream(
                model=model, messages=_PROMPT, response_format=model_type, **extra
            ) as stream:
                for _ in stream:
                    pass
                final = stream.get_final_completion()
            choice = _first(final.choices, "get_final_completion()", "choices")
            p.see("final.parsed", "object" if choice.message.parsed is not None else "none")

        _run(p, parse, words, parsed)


def _message(p: Observations, prefix: str, message: Any, finish: Any, ask: Asked) -> None:
    p.see(f"{prefix}content", kind_of(message.content))
    p.see(f"{prefix}finish_reason", str(finish))
    calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
    see_calls(p, prefix, calls, ask)
    verdict = structured_kind(message.content, ask)
    if verdict is not None:
        p.see(f"{prefix}structured", verdict)
    p.see(f"{prefix}reasoning_content", kind_of(getattr(message, "reasoning_content", None)))


def _chat_create(
    client: Any, model: str, extra: dict[str, Any], ask: Asked, p: Observations
) -> None:
    call = "client.chat.completions.create()"
    r = _returned(
        client.chat.completions.create(model=model, messages=_PROMPT, **extra), call, "choices"
    )
    choice = _first(r.choices, call, "choices")
    _message(p, "", choice.message, choice.finish_reason, ask)
    p.see("usage", _usage(r.usage))
    if r.usage is not None:
        p.see("usage.total_tokens", type(r.usage.total_tokens).__name__)


def _chat_parse(
    client: Any, model: str, tools: list[Any], ask: Asked, p: Observations, words: str
) -> None:
    """Call `parse()` where an app would: when structured output is asked, or tools are strict."""
    strict = [
        t
        for t in tools
        if isinstance(t.get("function"), dict) and t["function"].get("strict") is True
    ]
    model_type = _structured_model(ask)
    if model_type is None and not strict:
        return
    extra: dict[str, Any] = {"tools": strict} if strict else {}
    if model_type is not None:
        extra["response_format"] = model_type

    def parse() -> None:
        r = client.chat.completions.parse(model=model, messages=_PROMPT, **extra)
        choice = _first(r.choices, "client.chat.completions.parse()", "choices")
        if model_type is not None:
            p.see("parsed", "object" if choice.message.parsed is not None else "none")

    _run(p, "client.chat.completions.parse()", words, parse)


def _chat_chunks(
    client: Any, model: str, extra: dict[str, Any], ask: Asked, include_usage: bool, p: Observations
) -> None:
    """Assemble the plain stream as apps do.

    Content and reasoning are joined, tool calls gathered by `index`, and the last
    `finish_reason` kept."""
    chunks = 0
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[Any, list[Any]] = {}
    finish: Any = None
    usage = None
    for chunk in client.chat.completions.create(
        model=model, messages=_PROMPT, stream=True, **extra
    ):
        chunks += 1
        usage = chunk.usage or usage
        for choice in chunk.choices or []:
            delta = choice.delta
            finish = choice.finish_reason or finish
            if delta.content:
                content.append(delta.content)
            piece = getattr(delta, "reasoning_content", None)
            if isinstance(piece, str):
                reasoning.append(piece)
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, [None, None, ""])
                slot[0] = call.id or slot[0]
                fn = call.function
                if fn is not None:
                    slot[1] = fn.name or slot[1]
                    if fn.arguments is not None:
                        slot[2] = slot[2] + str(fn.arguments)
    p.see("chunks", "some" if chunks else "none")
    p.see("content", "text" if content else "empty")
    p.see("finish_reason", str(finish))
    see_calls(p, "", [tuple(c) for c in calls.values()], ask)  # type: ignore[misc]
    verdict = structured_kind("".join(content), ask)
    if verdict is not None:
        p.see("structured", verdict)
    p.see("reasoning_content", "text" if "".join(reasoning) else "none")
    if include_usage:
        p.see("usage", _usage(usage))


def _chat_helper(
    client: Any, model: str, extra: dict[str, Any], ask: Asked, p: Observations
) -> None:
    said = False
    with client.chat.completions.stream(model=model, messages=_PROMPT, **extra) as stream:
        for event in stream:
            said |= event.type == "content.delta" and bool(event.delta)
        final = stream.get_final_completion()
    p.see("streamed.content", "text" if said else "empty")
    if final.choices:
        choice = final.choices[0]
        _message(p, "final.", choice.message, choice.finish_reason, ask)


# --- Responses -----------------------------------------------------------------------------


def _output(p: Observations, prefix: str, r: Any, ask: Asked) -> None:
    p.see(f"{prefix}output_text", kind_of(r.output_text))  # the SDK's property reads `output`
    p.see(f"{prefix}status", str(r.status))
    calls = [
        (item.call_id, item.name, item.arguments)
        for item in r.output
        if getattr(item, "type", None) == "function_call"
    ]
    see_calls(p, prefix, calls, ask)
    verdict = structured_kind(r.output_text, ask)
    if verdict is not None:
        p.see(f"{prefix}structured", verdict)
    p.see(f"{prefix}usage", _usage(r.usage))
    p.see(f"{prefix}previous_response_id", kind_of(r.previous_response_id))


def _responses(client: openai.OpenAI, body: dict[str, Any], p: Observations, words: str) -> None:
    ask = asked(body)
    model = str(body.get("model") or "m")
    tools = [
        t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"
    ]
    extra: dict[str, Any] = {"tools": tools} if tools else {}
    model_type = _structured_model(ask)
    if not body.get("stream"):

        def create() -> None:
            r = client.responses.create(model=model, input="x", **extra)
            _output(p, "", _returned(r, "client.responses.create()", "output"), ask)

        _run(p, "client.responses.create()", words, create)
        if model_type is not None:

            def parse() -> None:
                r = client.responses.parse(model=model, input="x", text_format=model_type, **extra)
                p.see("parsed", "object" if r.output_parsed is not None else "none")

            _run(p, "client.responses.parse()", words, parse)
        return

    def create_stream() -> None:
        events = [
            e.type for e in client.responses.create(model=model, input="x", stream=True, **extra)
        ]
        p.see("events", "some" if events else "none")

    _run(p, "client.responses.create(stream=True)", words, create_stream)

    def helper(**options: Any) -> Callable[[], None]:
        def run() -> None:
            said, announced = False, set()
            with client.responses.stream(model=model, input="x", **extra, **options) as stream:
                for event in stream:
                    said |= event.type == "response.output_text.delta" and bool(event.delta)
                    item = getattr(event, "item", None)
                    if item is not None and getattr(item, "type", None) == "function_call":
                        announced.add(item.call_id)
                final = stream.get_final_response()
            p.see("streamed.output_text", "text" if said else "empty")
            if announced:  # an agent loop may answer by the id the stream announced
                kept = announced <= {getattr(i, "call_id", None) for i in final.output}
                p.see("final.call_id", "as streamed" if kept else "not as streamed")
            if options:
                p.see("final.parsed", "object" if final.output_parsed is not None else "none")
            else:
                _output(p, "final.", final, ask)

        return run

    _run(p, "client.responses.stream()", words, helper())
    if model_type is not None:
        _run(p, "client.responses.stream(text_format=Model)", words, helper(text_format=model_type))


# --- the other routes ----------------------------------------------------------------------


def _embeddings(client: openai.OpenAI, body: dict[str, Any], p: Observations, words: str) -> None:
    def create() -> None:
        r = client.embeddings.create(model=str(body.get("model") or "m"), input="x")
        first = r.data[0].embedding if r.data else None
        p.see("embedding", "vector" if first else "empty")

    _run(p, "client.embeddings.create()", words, create)


def _models(client: openai.OpenAI, body: dict[str, Any], p: Observations, words: str) -> None:
    def listed() -> None:
        p.see("models", "some" if [m.id for m in client.models.list()] else "none")

    _run(p, "client.models.list()", words, listed)


ROUTES: dict[
    tuple[str, str], Callable[[openai.OpenAI, dict[str, Any], Observations, str], None]
] = {
    ("POST", "/v1/chat/completions"): _chat,
    ("POST", "/v1/responses"): _responses,
    ("POST", "/v1/embeddings"): _embeddings,
    ("GET", "/v1/models"): _models,
}


class _Cut(httpx.SyncByteStream):
    """Give the bytes that came, then fail as httpx does on a connection closed mid-body."""

    def __init__(self, content: bytes) -> None:
        self.content = content

    def __iter__(self) -> Iterator[bytes]:
        if self.content:
            yield self.content
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body (incomplete chunked read)"
        )


def _client(answer: Served) -> openai.OpenAI:
    def serve(request: httpx.Request) -> httpx.Response:
        headers = list(answer.headers)
        if answer.cut:
            return httpx.Response(
                answer.status, headers=headers, stream=_Cut(answer.content), request=request
            )
        return httpx.Response(
            answer.status, headers=headers, content=answer.content, request=request
        )

    return openai.OpenAI(
        api_key="sk-impact",
        base_url="http://wirediff.invalid/v1",
        max_retries=0,
        http_client=httpx.Client(transport=httpx.MockTransport(serve)),
    )


def measure(route: tuple[str, str], body: dict[str, Any], answer: Served) -> Observations | None:
    """Observe what openai-python's calls for `route` make of `answer` to a request `body`.

    It is None for a route no probe covers."""
    probe = ROUTES.get(route)
    if probe is None:
        return None
    p = Observations()
    with _client(answer) as client, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK warns while tolerating odd values: not impact
        probe(client, body, p, said(answer))
    if not 200 <= answer.status < 300:
        p.see_first("raises", "nothing")
    return p
