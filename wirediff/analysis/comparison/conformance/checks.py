"""Check one record against every reference and against what the real SDK made of it.

The references are the OpenAPI document, the SDK types, Open Responses and the stream grammars;
what the SDK made of the answer comes from `wirediff.analysis.comparison.breaks`. A problem is a
`deviation`, unless a break of the same answer implicates it: then it is `breaking`."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from wirediff._support import is_2xx, response_status
from wirediff._types import Event, Record, RecordResponse
from wirediff.analysis.comparison import impact as sdk
from wirediff.analysis.comparison.breaks import (
    LOST,
    Break,
    continues,
    implicates,
    record_breaks,
)
from wirediff.analysis.comparison.compare import error_message
from wirediff.analysis.comparison.conformance import (
    grammar,
    open_responses,
    openapi_check,
    sdk_types,
)
from wirediff.analysis.comparison.conformance.problems import GRAMMAR, Problem, remembered
from wirediff.analysis.comparison.rows import transport_of
from wirediff.analysis.comparison.shapes import structure
from wirediff.record.tags import is_error_body

__all__ = ["ConformanceRow", "RecordCheck", "record_check", "record_problems"]

WEBSOCKET_CLIENT_EVENT = "response.create"
"""The client's frame on a Responses WebSocket: it starts a turn, it is not an answer."""
WEBSOCKET_PROBE = "client.responses.connect()"


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """Hold what one record showed: the SDK's outcome, its breaks, and where it broke a rule."""

    outcome: sdk.Outcome
    breaks: tuple[Break, ...] = ()
    paths: frozenset[str] = frozenset()
    """Paths of its conformance problems (any source)."""
    grammar: tuple[str, ...] = ()
    """`path message` of its grammar problems (event differences are judged by them)."""


def _include_usage(record: Record) -> bool:
    body = (record.get("request") or {}).get("body")
    options = body.get("stream_options") if isinstance(body, dict) else None
    return isinstance(options, dict) and bool(options.get("include_usage"))


def _stream_problems(record: Record, events: list[Event], rules: bool) -> list[Problem]:
    """Check a stream against the references, or against its grammar when `rules` is true."""
    tags = record.get("tags") or {}
    family = tags.get("family")
    if family in ("chat.completions", "completions"):
        if rules:
            return grammar.chat_grammar(
                events, _include_usage(record) and family == "chat.completions"
            )
        method = (record.get("request") or {}).get("method")
        schemas = openapi_check.schemas_for(method, tags.get("endpoint"))
        model = sdk_types.ROUTES[("POST", "/v1/completions")] if family == "completions" else None
        found = openapi_check.chunk_problems(events, schemas[1]) if schemas and schemas[1] else []
        return found + (
            sdk_types.chunk_problems(events, model) if model else sdk_types.chunk_problems(events)
        )
    if family == "responses":
        out: list[Problem] = []
        websocket = transport_of(record) == "websocket"
        for turn in _turns(events):
            # a WebSocket turn may end in its own error frame: judged by the WebSocket
            # mode's schema, the events before it by the stream's rules less the terminal
            last = turn[-1].get("data") if turn else None
            ended = websocket and open_responses.is_websocket_error(last)
            before = turn[:-1] if ended else turn
            if rules:
                if before or not ended:
                    out += grammar.responses_grammar(before, terminal=not ended)
            else:
                out += openapi_check.event_problems(before) + sdk_types.event_problems(before)
                out += open_responses.event_problems(before)
                if ended:
                    out += open_responses.websocket_error_problems(last, len(before))
        return out
    return []


def _turns(events: list[Event]) -> list[list[Event]]:
    """Split the server's events into turns.

    SSE carries one stream; a WebSocket one turn per `response.create`."""
    turns: list[list[Event]] = [[]]
    for ev in events:
        data = ev.get("data")
        if isinstance(data, dict) and data.get("type") == WEBSOCKET_CLIENT_EVENT:
            if turns[-1]:
                turns.append([])
            continue
        turns[-1].append(ev)
    return [t for t in turns if t] or [[]]


def _stream_of(record: Record) -> list[Event] | None:
    """Return the events checked as a stream: a 2xx SSE answer's, or a WebSocket's."""
    resp = record.get("response")
    events = resp.get("events") if resp is not None else None
    if events and transport_of(record) == "websocket":
        return list(events)
    if events is None or not is_2xx(response_status(record)):
        return None
    return list(events)


def _answer_key(record: Record, resp: RecordResponse) -> tuple[Any, ...]:
    """Key what the references' verdict on a record depends on.

    That is its route, status and the structure of its answer `resp`, event by event. Positions
    count and texts do not, except the message of an error where a result belongs, which its
    problem quotes."""
    tags = record["tags"]
    events = resp.get("events")
    if events is not None:
        answer: Any = tuple(
            (_data_key(d), bool(ev.get("partial"))) for ev in events for d in (ev.get("data"),)
        )
    elif resp.get("body") is not None:
        answer = ("body", _data_key(resp["body"]))
    else:
        answer = ("text", resp.get("text"), resp.get("b64") is not None)
    return (
        (record.get("request") or {}).get("method"),
        tags.get("endpoint"),
        tags.get("family"),
        resp.get("status"),
        transport_of(record),
        answer,
    )


def _data_key(data: Any) -> Any:
    if type(data) not in (dict, list):
        return data
    return (structure(data), error_message(data)) if is_error_body(data) else structure(data)


def _reference_problems(record: Record, resp: RecordResponse) -> list[Problem]:
    status = resp.get("status")
    stream = _stream_of(record)
    if stream is not None:
        return _stream_problems(record, stream, rules=False)
    if isinstance(status, int) and status >= 400:
        return openapi_check.error_problems(resp)
    if not is_2xx(status):
        return []
    method, endpoint = record["request"].get("method"), record["tags"].get("endpoint")
    schemas = openapi_check.schemas_for(method, endpoint)
    body = resp.get("body")
    if body is None:
        return openapi_check.missing_body(schemas[0], resp) if schemas else []
    out = openapi_check.body_problems(schemas[0] if schemas else None, body)
    if schemas is None or is_error_body(body):
        return out
    model = sdk_types.body_model(endpoint, method)
    out += sdk_types.body_problems(model, body) if model is not None else []
    return out + open_responses.response_problems(body)


_by_answer: dict[tuple[Any, ...], list[Problem]] = {}


def record_problems(record: Record) -> list[Problem]:
    """Find everything wrong with one answer, by every reference and by its stream grammar.

    Only references that speak to the answer count; their problems are remembered per answer
    structure."""
    resp = record.get("response")
    if resp is None or resp.get("truncated"):
        return []
    key = _answer_key(record, resp)
    found = remembered(_by_answer, key, lambda: _reference_problems(record, resp))
    stream = _stream_of(record)
    return found + _stream_problems(record, stream, rules=True) if stream is not None else found


def merge(problems: Iterable[Problem]) -> list[tuple[Problem, int]]:
    """Merge problems into one per path, message and source, with how often each occurred.

    The first of each is kept."""
    seen: dict[tuple[str, str, str], list[Any]] = {}
    for p in problems:
        key = (p.path, p.message, p.source)
        if key in seen:
            seen[key][1] += 1
        else:
            seen[key] = [p, 1]
    return [(p, n) for p, n in seen.values()]


def _problem_text(problem: Problem, count: int) -> str:
    if problem.position is None:
        return problem.message
    where = (
        f"event #{problem.position}" if count == 1 else f"{count} events, first #{problem.position}"
    )
    return f"{problem.message} ({where})"


@functools.lru_cache(maxsize=1 << 14)
def _intern(value: Any) -> Any:
    """Share one object per distinct value: records share a few sets of paths, hashed once."""
    return value


_breaks: dict[tuple[int, bool, bool, bool, bool], tuple[sdk.Outcome, tuple[Break, ...]]] = {}


def _record_breaks(record: Record, outcome: sdk.Outcome) -> tuple[Break, ...]:
    """Call `record_breaks`, remembered per outcome and what the request asked."""
    body = (record.get("request") or {}).get("body")
    stream = isinstance(body, dict) and body.get("stream") is True
    key = (
        id(outcome),
        stream,
        _include_usage(record),
        is_2xx(response_status(record)),
        continues(record),
    )
    found = _breaks.get(key)
    if found is None or found[0] is not outcome:
        if len(_breaks) >= 1 << 14:
            _breaks.clear()
        found = _breaks[key] = (outcome, record_breaks(record, outcome))
    return found[1]


def _unanswered_turns(record: Record) -> tuple[Break, ...]:
    """Find a WebSocket turn the server sent no event for before it closed.

    In a session that upgraded with 101, the stream such a turn asked for never came. The real
    SDK iterating that connection raises ConnectionClosedError on a 1011, as
    tests/peers/test_litellm_diagnoses.py shows."""
    resp = record.get("response")
    if resp is None or resp.get("status") != 101 or transport_of(record) != "websocket":
        return ()
    answered: list[int] = []
    for ev in resp.get("events") or ():
        data = ev.get("data")
        if isinstance(data, dict) and data.get("type") == WEBSOCKET_CLIENT_EVENT:
            answered.append(0)
        elif answered and ev.get("direction") != "client":
            answered[-1] += 1
    if 0 not in answered:
        return ()
    ws = resp.get("websocket")
    code, reason = (ws.get("close_code"), ws.get("close_reason")) if ws else (None, None)
    closed = f" before the server closed with {code}" if isinstance(code, int) else ""
    closed += f" ({reason})" if closed and reason else ""
    message = f"`{WEBSOCKET_PROBE}`: no event{closed}, a stream was asked for"
    return (Break(LOST, WEBSOCKET_PROBE, message, "", "none"),)


ConformanceRow = tuple[str, str, str, str, str, str, str, str, str]
"""A conformance or `client` row of one record, `FINDING_COLUMNS` values."""


def record_check(rec: Record) -> tuple[RecordCheck, tuple[ConformanceRow, ...]]:
    """Return what one record showed, for judging its divergences, and its conformance rows.

    There is one row per distinct problem and one `client` row per break. `prepare` the records
    first to measure Node's calls in one batch."""
    outcome = sdk.impact(rec)
    breaks = _record_breaks(rec, outcome) + _unanswered_turns(rec)
    problems = merge(record_problems(rec))
    if not problems and not breaks:
        return RecordCheck(outcome), ()
    rows: list[ConformanceRow] = []
    for problem, count in problems:
        text = _problem_text(problem, count)
        cause = next((b for b in breaks if implicates(b, "conformance", problem.path)), None)
        rows.append(
            (
                "conformance",
                problem.path,
                "",
                text,
                "breaking" if cause else "deviation",
                problem.source,
                problem.pointer,
                cause.message if cause else "",
                f"`{problem.path}`: {text}",
            )
        )
    for b in breaks:
        rows.append(
            ("client", b.probe, "", b.candidate, "breaking", b.client, "", b.message, b.message)
        )
    check = RecordCheck(
        outcome,
        breaks,
        _intern(frozenset(p.path for p, _ in problems)),
        _intern(tuple(f"{p.path} {p.message}" for p, _ in problems if p.source == GRAMMAR)),
    )
    return check, tuple(rows)
