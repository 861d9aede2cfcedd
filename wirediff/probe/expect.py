"""Check what a feature's answers must show, `expect:` in features.yaml, on the probe's records.

Each check gives its problems, `(severity, evidence)`, or none.

`answered`: every exchange got a whole 2xx answer with no error in it (`exchange_ok`); a
whole event stream under another content-type is a deviation (`mislabeled_events`).
`tool_calls`: the first answer holds at least N calls (`none`: the severity when it holds
no call at all). `structured`: its text is JSON valid
under the schema the request gave. `error`: the refusal the request must get.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import jsonschema

from wirediff._support import clip, is_2xx, response_status
from wirediff._types import Event, Record
from wirediff.analysis.comparison.breaks import server_words
from wirediff.analysis.diagnosis.chains import redirect_location
from wirediff.analysis.diagnosis.outcome import (
    exchange_ok,
    stream_end,
    stream_problem,
    unreadable_answer,
)
from wirediff.record.sse import parse_events, split_events
from wirediff.record.websocket import is_websocket, server_events

__all__ = [
    "CHECKS",
    "Problem",
    "check",
    "content_type",
    "final_text",
    "mislabeled_events",
    "part",
    "tool_calls",
]

EVIDENCE = 160
"""Characters of a server's words quoted in a problem."""


@dataclass(frozen=True, slots=True)
class Problem:
    severity: str
    """`breaking`, `deviation`, or `unsupported` / `skipped` (decided with the diagnoses)."""
    evidence: str
    record_id: str = ""


def content_type(rec: Record) -> str:
    """Return the answer's content-type, or `no content-type`."""
    headers = part(rec, "response").get("headers") or ()
    return next((str(v) for k, v in headers if str(k).lower() == "content-type"), "no content-type")


def part(rec: Record, key: str) -> dict[str, Any]:
    """Return a record's `response`, `error` or `tags` object, `{}` when it has none."""
    value = rec.get(key)
    return value if isinstance(value, dict) else {}


def _body_events(rec: Record) -> list[Event]:
    """Split the body of a stream asked for that came under another type than `text/event-stream`.

    The SDKs read a streamed answer's body as events whatever its type; the recorder splits
    events by the type, so the record has none. Empty when the body holds no event."""
    resp, tags = part(rec, "response"), part(rec, "tags")
    text = resp.get("text")
    if (
        not tags.get("stream")
        or tags.get("soft_error")
        or resp.get("events") is not None
        or not is_2xx(resp.get("status"))
        or not isinstance(text, str)
    ):
        return []
    return parse_events(split_events(text.encode())[0])


def _as_labeled(rec: Record) -> Record | None:
    """Give the record as if its body's events had come as `text/event-stream`, or None.

    None: the stream asked for came as an event stream, or its body holds no event."""
    events = _body_events(rec)
    if not events:
        return None
    return cast(Record, {**rec, "response": {**part(rec, "response"), "events": events}})


def mislabeled_events(rec: Record) -> list[Event] | None:
    """Give the events of a stream under another type than `text/event-stream`, or None.

    Only a stream that would be whole under its own type: one `exchange_ok` takes."""
    labeled = _as_labeled(rec)
    if labeled is None or not exchange_ok(labeled):
        return None
    return list(part(labeled, "response")["events"])


def _events(rec: Record) -> list[dict[str, Any]]:
    raw = part(rec, "response").get("events") or mislabeled_events(rec) or ()
    return [e for e in server_events(raw) if isinstance(e, dict)]


def _final_response(rec: Record) -> dict[str, Any] | None:
    """Return a Responses answer's Response object: the body, or the stream's last one."""
    resp = part(rec, "response")
    body = resp.get("body")
    if isinstance(body, dict) and "output" in body:
        return body
    for ev in reversed(_events(rec)):
        data = ev.get("data")
        if isinstance(data, dict) and isinstance(data.get("response"), dict):
            return dict(data["response"])
    return None


def _chat_stream(rec: Record) -> tuple[str, set[Any]]:
    text, calls = [], set()
    for ev in _events(rec):
        data = ev.get("data")
        for choice in data.get("choices") or () if isinstance(data, dict) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                text.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    calls.add(call.get("index", call.get("id")))
    return "".join(text), calls


def _chat_message(rec: Record) -> dict[str, Any]:
    body = part(rec, "response").get("body")
    choices = body.get("choices") if isinstance(body, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    return message if isinstance(message, dict) else {}


def _family(rec: Record) -> str:
    return str(part(rec, "tags").get("family") or "")


def tool_calls(rec: Record) -> int:
    """Return the tool calls in an answer, chat or Responses, streamed or not."""
    if _family(rec) == "chat.completions":
        if _events(rec):
            return len(_chat_stream(rec)[1])
        return len(_chat_message(rec).get("tool_calls") or ())
    final = _final_response(rec)
    output = final.get("output") if final else None
    return sum(1 for i in output or () if isinstance(i, dict) and i.get("type") == "function_call")


def final_text(rec: Record) -> str | None:
    """Return the answer's text as an app reads it: `message.content`, `output_text`."""
    if _family(rec) == "chat.completions":
        if _events(rec):
            return _chat_stream(rec)[0]
        content = _chat_message(rec).get("content")
        return content if isinstance(content, str) else None
    final = _final_response(rec)
    if final is None:
        return None
    parts = [
        c.get("text")
        for item in final.get("output") or ()
        if isinstance(item, dict) and item.get("type") == "message"
        for c in item.get("content") or ()
        if isinstance(c, dict) and c.get("type") == "output_text"
    ]
    return "".join(p for p in parts if isinstance(p, str))


def _schema(rec: Record) -> Any:
    body = (rec.get("request") or {}).get("body")
    if not isinstance(body, dict):
        return None
    if _family(rec) == "chat.completions":
        fmt = body.get("response_format")
        inner = fmt.get("json_schema") if isinstance(fmt, dict) else None
        return inner.get("schema") if isinstance(inner, dict) else None
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    return fmt.get("schema") if isinstance(fmt, dict) else None


def _words(rec: Record) -> str:
    said = server_words(rec)
    return f": {clip(said, EVIDENCE)}" if said else ""


def _answer(rec: Record) -> str:
    """Say how an exchange ended in a few words: `404: Invalid URL (…)`, `no answer (timeout)`."""
    resp = rec.get("response")
    err = part(rec, "error")
    if resp is None:
        return (
            f"no answer ({err.get('kind') or 'error'}: {clip(str(err.get('message') or ''), 100)})"
        )
    status = resp.get("status")
    if part(rec, "tags").get("soft_error"):
        return f"{status} with an error in the body{_words(rec)}"
    if is_2xx(status) or (status == 101 and is_websocket(rec)):
        return f"{status}, {_how_cut(rec)}"
    return f"{status}{_words(rec)}"


def _how_cut(rec: Record) -> str:
    """Say how a 2xx answer fell short: a stream cut or ended badly, or no stream at all."""
    resp, err = part(rec, "response"), part(rec, "error")
    end = stream_end(rec)
    if end is None and part(rec, "tags").get("stream"):
        labeled = _as_labeled(rec)
        if labeled is not None:
            return f"an event stream answered as {content_type(rec)}, {_how_cut(labeled)}"
        if resp.get("complete") is not False and not err:
            return f"a stream asked for and {content_type(rec)} answered, not an event stream"
    why = stream_problem(rec, end)
    if why is not None:
        return why
    if resp.get("complete") is False or err:
        return f"cut before its end ({err.get('kind') or 'incomplete'})"
    unreadable = unreadable_answer(rec)
    if unreadable is not None:
        return f"{unreadable}, which no client reads"
    return f"the stream did not end well{_words(rec)}"


def answered(records: Sequence[Record | None], _: Mapping[str, Any]) -> list[Problem]:
    out = []
    for rec in records:
        if rec is None:
            out.append(Problem("breaking", "not sent"))
            continue
        err = part(rec, "error")
        if err.get("kind") == "skipped":
            out.append(Problem("skipped", f"not sent: {err.get('message')}", str(rec["id"])))
        elif mislabeled_events(rec) is not None:
            status = part(rec, "response").get("status")
            said = f"{status}, an event stream answered as {content_type(rec)}"
            sdk = "the SDKs read it, a type check would not"
            out.append(Problem("deviation", f"{said}: {sdk}", str(rec["id"])))
        elif (followed := _followed(rec)) is not None:
            out.append(Problem("deviation", followed, str(rec["id"])))
        elif not exchange_ok(rec):
            out.append(Problem("failed", _answer(rec), str(rec["id"])))
    return out


def _followed(rec: Record) -> str | None:
    """Say where a redirect that keeps the request goes: clients follow it there, unprobed.

    That is a 307 or 308, or any redirect of a `GET`; a 301, 302 or 303 turns a `POST` into a
    `GET`, which `redirect_method_change` diagnoses."""
    location = redirect_location(rec)
    status = part(rec, "response").get("status")
    kept = status in (307, 308) or part(rec, "request").get("method") == "GET"
    if location is None or not kept:
        return None
    return f"answered {status} to {clip(location, 100)}: clients follow it there, unprobed"


def _first_answered(records: Sequence[Record | None]) -> Record | None:
    first = records[0] if records else None
    if first is None or not (exchange_ok(first) or mislabeled_events(first) is not None):
        return None
    return first


def at_least_calls(records: Sequence[Record | None], args: Mapping[str, Any]) -> list[Problem]:
    rec = _first_answered(records)
    if rec is None:
        return []  # `answered` says why
    want, got = int(args.get("at_least", 1)), tool_calls(rec)
    if got >= want:
        return []
    what = f"{got} tool call{'s' if got != 1 else ''} where the request asked for {want}"
    text = final_text(rec)
    if got == 0 and text:
        what += f" (it answered in text: {clip(text, 60)!r})"
    severity = args.get("none") if got == 0 and "none" in args else args.get("severity")
    return [Problem(str(severity or "breaking"), what, str(rec["id"]))]


def structured(records: Sequence[Record | None], _: Mapping[str, Any]) -> list[Problem]:
    rec = _first_answered(records)
    if rec is None:
        return []
    schema, text = _schema(rec), final_text(rec) or ""
    rid = str(rec["id"])
    try:
        value = json.loads(text)
    except ValueError:
        return [
            Problem(
                "breaking", f"the answer is not JSON, `.parse()` raises: {clip(text, 60)!r}", rid
            )
        ]
    if isinstance(schema, dict):
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as e:
            return [
                Problem(
                    "breaking", f"the JSON breaks the request's schema: {clip(e.message, 100)}", rid
                )
            ]
        except jsonschema.SchemaError:
            return []
    return []


def error(records: Sequence[Record | None], args: Mapping[str, Any]) -> list[Problem]:
    rec = records[0] if records else None
    if rec is None or rec.get("response") is None:
        return [Problem("breaking", "no answer" if rec is None else _answer(rec))]
    want, status = int(args["status"]), response_status(rec)
    rid = str(rec["id"])
    if is_2xx(status):
        soft = part(rec, "tags").get("soft_error")
        what = "with an error in the body" if soft else "as a success"
        return [
            Problem(
                str(args.get("accepted", "breaking")),
                f"answered {status} {what}{_words(rec) if soft else ''}; OpenAI answers {want}",
                rid,
            )
        ]
    if status != want:
        return [
            Problem(
                str(args.get("other_status", "deviation")),
                f"answered {status}{_words(rec)}; OpenAI answers {want}",
                rid,
            )
        ]
    return []


CHECKS: dict[str, Callable[[Sequence[Record | None], Mapping[str, Any]], list[Problem]]] = {
    "answered": answered,
    "tool_calls": at_least_calls,
    "structured": structured,
    "error": error,
}


def check(expect: Mapping[str, Any], records: Sequence[Record | None]) -> list[Problem]:
    """Find every problem the feature's answers show, by its `expect:` checks in order."""
    out: list[Problem] = []
    for name, args in expect.items():
        if name not in CHECKS:
            raise ValueError(f"features.yaml: unknown check {name!r} (known: {', '.join(CHECKS)})")
        out += CHECKS[name](records, args or {})
    return out
