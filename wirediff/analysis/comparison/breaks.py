"""Judge what the real clients made of an answer, as measured by `impact`, and find the breaks.

Each rule reads the observations of every client alike: openai-python's keys, and the Node SDK's
under `node:`. On one answer alone, `record_breaks` finds that a client raised where an app would
not expect it; tool-call arguments do not give an object to `json.loads` or the tool's schema
rejects them; a tool call has no `call_id` to answer it with, names a tool the request did not
offer, is refused by `runTools()`, or has another `call_id` in the final object than the stream
announced; structured content the request asked for is not what its schema accepts; usage asked
for with `stream_options.include_usage` never came; a stream was asked for and nothing was
streamed; a stream helper's final object lacks the text its events delivered.

A candidate against its baseline, in `pair_breaks`, breaks when it makes a client fail where the
baseline does not; it raises where the baseline did not, or another class; streamed chunks or
events, models or an embedding the baseline gave are gone; tool arguments that parse on the
baseline do not parse on it; usage, the reasoning text or the server's words in an error the
baseline gave are gone; both answers call tools and the `finish_reason`, or `status` on
Responses, that an agent loop branches on differs. Generated content, such as an empty text or
which tool was called, is not judged.

A break is `breaking` itself, a `client` finding in the client's words, and `implicates` makes
the findings that explain it breaking: a changed status, a soft error or another transport for a
raise, a loss or a failure; the paths of what was lost or judged, such as `usage`, `arguments`,
`tool_calls`, `finish_reason`, the content, `reasoning_content` or the error object; a key or
event a failure names, as in `no attribute 'output'`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from wirediff._support import clip, is_2xx, response_status
from wirediff._types import Record
from wirediff.analysis.comparison.clients.observations import Failure
from wirediff.analysis.comparison.compare import error_message
from wirediff.analysis.comparison.impact import SDK_SOURCE, Outcome
from wirediff.record.tags import is_error_body

__all__ = [
    "ARGUMENTS",
    "FAILURE",
    "FINISH",
    "LOST",
    "RAISES",
    "STRUCTURED",
    "TOOL_CALL",
    "USAGE",
    "Break",
    "continues",
    "implicates",
    "pair_breaks",
    "record_breaks",
    "server_words",
]

FAILURE, RAISES, LOST, ARGUMENTS, USAGE = "failure", "raises", "lost", "arguments", "usage"
FINISH, TOOL_CALL, STRUCTURED = "finish_reason", "tool_call", "structured"
CUT_RAISES = ("raises RemoteProtocolError", "raises OpenAIError: terminated")
"""How the clients' failures begin when the connection closed mid-stream: httpx's, fetch's."""
CLIENTS = ("", "node:")
"""Observation key prefixes: openai-python's, the Node SDK's."""
STREAMED = ("chunks", "events", "models", "embedding")
"""What a probe counts as received (`some`/`vector`) or not."""
WORDS = 160
"""Characters of the server's own error message quoted in a break."""
_NAMED = re.compile(r"'([A-Za-z_][\w.]*)'|`([^`]+)`")
_ATTRIBUTE = re.compile(r"\.([A-Za-z_]\w*)")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_LABEL = re.compile(r"^events\[([^\]]*)\]")
_CONTENT = frozenset({"content", "text", "output_text", "delta", "refusal", "parts"})
_TOOLS = frozenset({"tool_calls", "call_id", "function_call", "arguments"})
_ERROR = frozenset({"error", "message", "detail", "object", "code", "type"})


@dataclass(frozen=True, slots=True)
class Break:
    """Record that a client loses something on an answer.

    It says which call, in whose words, and what it explains."""

    rule: str
    probe: str
    message: str
    baseline: str = ""
    candidate: str = ""
    names: frozenset[str] = frozenset()
    """Keys and event types a failure names: the findings at them are its cause."""
    key: str = ""
    """The observation the break is about (`node:final.reasoning_content`)."""
    client: str = SDK_SOURCE
    """The client that broke (`openai-node 6.49.0`)."""


def server_words(record: Record) -> str:
    """Quote the server's own error message in an answer, shortened.

    That is an error object's `message`, a bare `message` or FastAPI's `detail`, an error event,
    or the text."""
    resp = record.get("response")
    if resp is None:
        return ""
    doc = resp.get("body")
    for ev in resp.get("events") or ():
        if isinstance(ev, dict) and is_error_body(ev.get("data")):
            doc = ev["data"]
            break
    if isinstance(doc, dict) and "error" not in doc:
        said = doc.get("message") or doc.get("detail")
        doc = said if isinstance(said, str) else None
    if doc is None:
        doc = resp.get("text")
    return clip(error_message(doc), WORDS) if doc not in (None, "") else ""


def _names(failure: Failure) -> frozenset[str]:
    code = failure.where.split(": ", 1)[1] if ": " in failure.where else ""
    found = {a or b for a, b in _NAMED.findall(failure.error)}
    found |= set(_ATTRIBUTE.findall(code))
    return frozenset(found)


def _client_of(outcome: Outcome, prefix: str) -> str:
    """Name the client whose keys start with `prefix`."""
    if not prefix:
        return SDK_SOURCE
    return next((c for c in outcome.clients if c.startswith("openai-node")), "openai-node")


def failure_break(failure: Failure) -> Break:
    return Break(
        FAILURE,
        failure.probe,
        failure.evidence,
        candidate=failure.error,
        names=_names(failure),
        client=failure.client or SDK_SOURCE,
    )


def _probe_and_client(probe: str, client: str) -> str:
    return f"`{probe}`" + (f" ({client})" if client != SDK_SOURCE else "")


def _arguments(probe: str, kind: str, key: str, client: str, baseline: str = "") -> Break:
    if kind.startswith("rejected by the schema"):
        said = f"tool-call arguments are {kind}: the tool's schema from the request"
    else:
        said = f"tool-call arguments are {kind}, `json.loads` gives no object"
    return Break(
        ARGUMENTS,
        probe,
        f"{_probe_and_client(probe, client)}: {said}",
        baseline,
        kind,
        key=key,
        client=client,
    )


def _usage(probe: str, client: str, baseline: str = "") -> Break:
    message = f"{_probe_and_client(probe, client)}: no usage, though `stream_options.include_usage` asked for it"
    return Break(USAGE, probe, message, baseline, "absent", key="usage", client=client)


def _lost(probe: str, key: str, kind: str, client: str, baseline: str = "") -> Break:
    message = (
        f"{_probe_and_client(probe, client)}: {key.split(':')[-1]} {kind}, a stream was asked for"
    )
    return Break(LOST, probe, message, baseline, kind, key=key, client=client)


def continues(record: Record) -> bool:
    """Tell whether a request continues a conversation the server keeps: `previous_response_id`."""
    body = (record.get("request") or {}).get("body")
    previous = body.get("previous_response_id") if isinstance(body, dict) else None
    return isinstance(previous, str) and bool(previous)


def _says_none_continued(record: Record) -> bool:
    """Tell whether the answer's last Response object says `previous_response_id` is null.

    The SDK reads a key left out as None too: only an object that says so is taken at its word."""
    resp: dict[str, Any] = dict(record.get("response") or {})
    objects = [resp.get("body")]
    for ev in resp.get("events") or ():
        data = ev.get("data") if isinstance(ev, dict) else None
        objects.append(data.get("response") if isinstance(data, dict) else None)
    said = [o["previous_response_id"] for o in objects if isinstance(o, dict) and
            "previous_response_id" in o]  # fmt: skip
    return bool(said) and not said[-1]


def _forgotten(outcome: Outcome) -> list[Break]:
    """Find an answer to a continued conversation that says it continued none.

    The SDK returns it as any answer; the app's next turn then runs without the earlier ones."""
    for key in ("previous_response_id", "final.previous_response_id"):
        got = outcome.get(key)
        if got is not None and got != "text":
            probe = outcome.probe_of(key)
            message = (
                f"{_probe_and_client(probe, SDK_SOURCE)}: `previous_response_id` is "
                f"{'null' if got == 'none' else got}, though the request continued a response: "
                "the answer was made without the conversation before it"
            )
            return [Break(LOST, probe, message, "text", got, key=key, client=SDK_SOURCE)]
    return []


_TOOL_WORDS = {
    "missing": "a tool call has no id (`call_id`): the agent loop cannot send its result back",
    "repeated": "two tool calls share an id: the agent loop cannot tell their results apart",
    "not offered": "a tool call names a tool the request did not offer",
}


def _tool_breaks(outcome: Outcome, prefix: str, client: str) -> list[Break]:
    out = []
    for key in (f"{prefix}tool_call.id", f"{prefix}final.tool_call.id"):
        value = outcome.get(key)
        if value in ("missing", "repeated"):
            probe = outcome.probe_of(key)
            message = f"{_probe_and_client(probe, client)}: {_TOOL_WORDS[value]}"
            out.append(Break(TOOL_CALL, probe, message, "present", value, key=key, client=client))
            break
    for key in (f"{prefix}tool_call.name", f"{prefix}final.tool_call.name"):
        if outcome.get(key) == "not offered":
            probe = outcome.probe_of(key)
            message = f"{_probe_and_client(probe, client)}: {_TOOL_WORDS['not offered']}"
            out.append(
                Break(TOOL_CALL, probe, message, "offered", "not offered", key=key, client=client)
            )
            break
    if outcome.get(f"{prefix}final.call_id") == "not as streamed":
        key = f"{prefix}final.call_id"
        probe = outcome.probe_of(key)
        message = (
            f"{_probe_and_client(probe, client)}: the final object's `call_id` is not the one the stream "
            "announced: a result sent back under the streamed id answers no call"
        )
        out.append(
            Break(
                TOOL_CALL, probe, message, "as streamed", "not as streamed", key=key, client=client
            )
        )
    refused = outcome.get(f"{prefix}runTools.refused")
    if refused is not None:
        probe = outcome.probe_of(f"{prefix}runTools.refused")
        message = f"{_probe_and_client(probe, client)} does not call the tool, it answers the model: {refused}"
        out.append(
            Break(
                TOOL_CALL,
                probe,
                message,
                "tools called",
                refused,
                key=f"{prefix}runTools",
                client=client,
            )
        )
    return out


def _structured(outcome: Outcome, prefix: str, client: str, parse_failed: bool) -> list[Break]:
    if parse_failed:
        return []
    for key in (f"{prefix}structured", f"{prefix}final.structured"):
        verdict = outcome.get(key)
        if verdict is not None and verdict != "valid":
            probe = outcome.probe_of(key)
            message = f"{_probe_and_client(probe, client)}: the structured output the request asked for is {verdict}"
            return [Break(STRUCTURED, probe, message, "valid", verdict, key=key, client=client)]
    return []


def _final_lost(outcome: Outcome, prefix: str, client: str) -> list[Break]:
    """Find a stream helper's final object that lacks the text its events delivered."""
    out = []
    for text in ("content", "output_text"):
        key = f"{prefix}final.{text}"
        if outcome.get(f"{prefix}streamed.{text}") == "text" and outcome.get(key) in (
            "empty",
            "none",
        ):
            probe = outcome.probe_of(key)
            got = str(outcome.get(key))
            message = f"{_probe_and_client(probe, client)}: the final object's `{text}` is {got}, though the stream delivered text"
            out.append(Break(LOST, probe, message, "text", got, key=key, client=client))
    return out


def record_breaks(record: Record, outcome: Outcome) -> tuple[Break, ...]:
    """Find what breaks on this answer alone."""
    if not outcome.judged:
        return ()
    out = [failure_break(f) for f in outcome.failures]
    parse_failed = any("parse" in f.probe or "Model" in f.probe for f in outcome.failures)
    body = (record.get("request") or {}).get("body")
    body = body if isinstance(body, dict) else {}
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    streamed = body.get("stream") is True and is_2xx(response_status(record))
    for prefix in CLIENTS:
        client = _client_of(outcome, prefix)
        for key in (f"{prefix}tool_arguments", f"{prefix}final.tool_arguments"):
            kind = outcome.get(key)
            if kind is not None and kind != "object":
                out.append(_arguments(outcome.probe_of(key), kind, key, client))
                break
        out += _tool_breaks(outcome, prefix, client)
        out += _structured(outcome, prefix, client, parse_failed)
        out += _final_lost(outcome, prefix, client)
    if include_usage and outcome.get("usage") == "absent":
        out.append(_usage(outcome.probe_of("usage"), SDK_SOURCE))
    if continues(record) and _says_none_continued(record):
        out += _forgotten(outcome)
    if streamed:
        for key in ("chunks", "events"):
            if outcome.get(key) == "none":
                out.append(_lost(outcome.probe_of(key), key, "none", SDK_SOURCE))
    return tuple(out)


def _class(raised: str) -> str:
    return raised.split(":", 1)[0]


def _finish_keys(prefix: str) -> list[tuple[str, str]]:
    """List the `(finish key, tool-call count key)` of each call that reports both."""
    return [
        (f"{prefix}{stage}{finish}", f"{prefix}{stage}tool_calls")
        for stage in ("", "final.")
        for finish in ("finish_reason", "status")
    ]


def _pair_for(b: Outcome, c: Outcome, words: str, prefix: str) -> list[Break]:
    client = _client_of(c, prefix)
    out: list[Break] = []
    b_raised, c_raised = b.get(f"{prefix}raises"), c.get(f"{prefix}raises")
    if c_raised is not None and (b_raised is None or _class(b_raised) != _class(c_raised)):
        probe = c.probe_of(f"{prefix}raises")
        if _class(c_raised) == "APIConnectionError":  # no server's words: the answer was cut
            words = c_raised.split(": ", 1)[-1]
        message = f"{_probe_and_client(probe, client)} raises {_class(c_raised)}" + (
            f": {words}" if words else ""
        )
        out.append(
            Break(
                RAISES,
                probe,
                message,
                b_raised or "nothing raised",
                c_raised,
                key=f"{prefix}raises",
                client=client,
            )
        )
    failed = {f.probe for f in c.failures if bool(f.client) == bool(prefix)}
    if c_raised is not None:
        failed.add(c.probe_of(f"{prefix}raises"))
    for name in STREAMED:
        key = f"{prefix}{name}"
        got, had = c.get(key), b.get(key)
        if got is None and b.probe_of(key) in failed:  # it raised mid-way: that is the break
            continue
        if had in ("some", "vector") and got != had:
            out.append(
                _lost(c.probe_of(key) or b.probe_of(key), key, got or "nothing", client, had)
            )
    for key in (f"{prefix}tool_arguments", f"{prefix}final.tool_arguments"):
        got = c.get(key)
        if b.get(key) == "object" and got != "object" and got is not None:
            out.append(_arguments(c.probe_of(key) or b.probe_of(key), got, key, client, "object"))
    for key in (f"{prefix}usage", f"{prefix}final.usage"):
        if b.get(key) == "present" and c.get(key) == "absent":
            probe = c.probe_of(key)
            message = (
                f"{_probe_and_client(probe, client)}: usage is absent, the baseline's answer had it"
            )
            out.append(Break(USAGE, probe, message, "present", "absent", key=key, client=client))
    for key in (f"{prefix}reasoning_content", f"{prefix}final.reasoning_content"):
        if b.get(key) == "text" and c.get(key) not in ("text", None):
            probe = c.probe_of(key)
            message = (
                f"{_probe_and_client(probe, client)}: `reasoning_content` is {c.get(key)}, the baseline's "
                "answer had the reasoning there"
            )
            out.append(Break(LOST, probe, message, "text", str(c.get(key)), key=key, client=client))
            break
    key = f"{prefix}error.message"
    if b.get(key) == "the server's words" and c.get(key) == "no server words":
        probe = c.probe_of(key)
        message = (
            f"{_probe_and_client(probe, client)} raises an error without the server's words"
            + (f" ({words!r} is lost)" if words else "")
        )
        out.append(
            Break(LOST, probe, message, "the server's words", "lost", key=key, client=client)
        )
    for finish, count in _finish_keys(prefix):
        had, got = b.get(finish), c.get(finish)
        calls = b.get(count) not in (None, "0") and c.get(count) not in (None, "0")
        if had is not None and got is not None and had != got and calls:
            probe = c.probe_of(finish)
            message = (
                f"{_probe_and_client(probe, client)}: `{finish.split('.')[-1]}` is {got!r} on an answer that calls "
                f"tools, the baseline's was {had!r}: an agent loop branches on it"
            )
            out.append(Break(FINISH, probe, message, had, got, key=finish, client=client))
            break
    return out


def pair_breaks(b: Outcome, c: Outcome, words: str, no_answer: str | None) -> tuple[Break, ...]:
    """Find what breaks on the candidate's answer that did not on the baseline's.

    `words` are the server's own, from `server_words`; `no_answer` says why the candidate got no
    answer, and is None when it got one."""
    if not b.judged:
        return ()
    if no_answer is not None:
        probe = b.probes[0][1] if b.probes else ""
        message = f"`{probe}` raises APIConnectionError: no answer ({no_answer})"
        return (
            Break(
                RAISES, probe, message, b.get("raises") or "", "APIConnectionError", key="raises"
            ),
        )
    if not c.judged:
        return ()
    known = {(f.probe, f.client, f.error) for f in b.failures}
    out = [failure_break(f) for f in c.failures if (f.probe, f.client, f.error) not in known]
    for prefix in CLIENTS:
        out += _pair_for(b, c, words, prefix)
    return tuple(out)


def segments(path: str) -> list[str]:
    """Split a path into its names, without brackets.

    `events[chunk].choices[].delta.tool_calls[].function.arguments@json` gives `events`,
    `choices`, `delta`, `tool_calls`, `function`, `arguments`, `json`."""
    return [s for s in re.split(r"[.@]", _BRACKETS.sub("", path)) if s]


def _about(brk: Break, parts: list[str], path: str) -> bool | None:
    """Tell whether a path is what the break judged or lost; None when the rule names no paths."""
    key = brk.key.split(":")[-1].split(".")[-1]
    if brk.rule == USAGE:
        return "usage" in parts or path == "events[chunk.usage]"
    if brk.rule in (ARGUMENTS, TOOL_CALL):
        return bool(_TOOLS & set(parts)) or "function_call" in path
    if brk.rule == FINISH:
        return "finish_reason" in parts or parts[-1:] == ["status"]
    if brk.rule == STRUCTURED:
        return bool(_CONTENT & set(parts)) or "output_text" in path
    if brk.rule == LOST and key == "previous_response_id":
        return key in parts
    if brk.rule == LOST and key == "reasoning_content":
        return "reasoning_content" in parts or "reasoning" in parts
    if brk.rule == LOST and key == "message":
        return bool(_ERROR & set(parts)) or not parts
    if brk.rule == LOST and key in ("content", "output_text"):
        return bool(_CONTENT & set(parts)) or "output" in parts
    return None


def _unreadable_stream(brk: Break) -> bool:
    """Tell whether the break means the stream as a whole could not be read.

    A helper gave up on the event protocol, its failure naming an event; the connection closed
    mid-stream, as httpx and fetch say it; or nothing streamed."""
    if brk.rule == FAILURE:
        return brk.candidate.startswith(CUT_RAISES) or any(
            name.startswith("response.") for name in brk.names
        )
    return brk.rule == LOST and brk.key.split(":")[-1] in ("chunks", "events")


def implicates(brk: Break, kind: str, path: str, baseline: str = "", candidate: str = "") -> bool:
    """Tell whether a finding of another kind than `client` is a cause of the break."""
    if kind in ("status", "soft_error", "transport"):
        return brk.rule in (RAISES, LOST, FAILURE) or (
            brk.rule == STRUCTURED and kind == "transport"
        )
    if kind == "error_shape" and brk.rule == LOST:
        return brk.key.endswith("error.message")
    if kind.startswith("event_") and _unreadable_stream(brk):
        return True
    label = _LABEL.match(path)
    parts = segments(path)
    named = label.group(1).rstrip("+").split(".") if label else []
    about = _about(brk, named + parts, path)
    if about is not None:
        return about
    if kind.startswith("event_") or (label and label.end() == len(path)):
        labels = {label.group(1) if label else "", baseline, candidate}
        return any(x.rstrip("+") in brk.names for x in labels if x)
    return bool(parts) and parts[-1] in brk.names
