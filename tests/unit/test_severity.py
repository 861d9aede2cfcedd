"""Severity by client impact, one rule per row: an OpenAI baseline, its replay with one
change, and the severity each resulting finding gets (and, for a breaking one, whose words
say why). The SDK impact harness runs the real openai SDK on both answers."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pandas as pd
import pytest

from tests.fixtures.records import (
    answer,
    body,
    chat_record,
    drop_events,
    event_type,
    openai_error,
    payloads,
    replay,
    responses_record,
    set_header,
    set_payloads,
)
from wirediff._types import Record
from wirediff.analysis.index.analyze import analyze

Change = Callable[[Record], object]
Row = tuple[str, str, str]
"""(kind, path, severity)"""


def reasoning_null(rec: Record) -> None:
    body(rec)["reasoning"] = None


def fingerprint_null(rec: Record) -> None:
    body(rec)["system_fingerprint"] = None


def no_cache_write_tokens(rec: Record) -> None:
    del body(rec)["usage"]["input_tokens_details"]["cache_write_tokens"]


def no_usage_chunk(rec: Record) -> None:
    drop_events(rec, lambda d: not (isinstance(d, dict) and d.get("usage")))


def arguments_object(rec: Record) -> None:
    body(rec)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"city": "x"}


def created_without_output(rec: Record) -> None:
    for data in payloads(rec):
        if event_type(data) == "response.created":
            del data["response"]["output"]


def repeated_created(rec: Record) -> None:
    data = payloads(rec)
    set_payloads(rec, [*data[:3], copy.deepcopy(data[0]), *data[3:]])


def no_in_progress(rec: Record) -> None:
    drop_events(rec, lambda d: event_type(d) != "response.in_progress")


def no_request_id(rec: Record) -> None:
    set_header(rec, "x-request-id", None)


def extra_key(rec: Record) -> None:
    body(rec)["choices"][0]["message"]["reasoning_content"] = "thinking"


def server_error(rec: Record) -> None:
    answer(rec).update(
        {"status": 500, "body": openai_error("The server had an error", "server_error")}
    )


def numbered_from_one(rec: Record) -> None:
    for data in payloads(rec):
        data["sequence_number"] += 1


def no_usage(rec: Record) -> None:
    del body(rec)["usage"]


def continued(*, stream: bool = False) -> Record:
    """An OpenAI answer to a turn that continues `resp_prev`, which its object echoes."""
    rec = responses_record(stream=stream)
    rec["request"]["body"]["previous_response_id"] = "resp_prev"
    for obj in _response_objects(rec):
        obj["previous_response_id"] = "resp_prev"
    return rec


def _response_objects(rec: Record) -> list[dict[str, object]]:
    if not rec["tags"]["stream"]:
        return [body(rec)]
    return [d["response"] for d in payloads(rec) if isinstance(d.get("response"), dict)]


def conversation_dropped(rec: Record) -> None:
    """Ollama's answer: it ignores `previous_response_id`, and its object says null."""
    for obj in _response_objects(rec):
        obj["previous_response_id"] = None


def cut_mid_stream(rec: Record) -> None:
    """The connection closed after three chunks, as `fault-cut` closes it."""
    resp = answer(rec)
    resp["events"] = (resp["events"] or [])[:3]
    resp["complete"] = False
    rec["error"] = {"kind": "upstream_disconnect", "message": "the server closed the connection"}


SDK_ROW = ("client", "client.chat.completions.create(stream=True)", "breaking")
RULES: list[tuple[str, Callable[[], Record], Change, set[Row]]] = [
    ("a spec-allowed null is cosmetic", responses_record, reasoning_null,
     {("schema_type", "reasoning", "cosmetic")}),
    ("a null the spec rejects is a deviation", chat_record, fingerprint_null,
     {("schema_type", "system_fingerprint", "deviation"),
      ("conformance", "system_fingerprint", "deviation")}),
    ("a missing cache_write_tokens, which the SDK accepts, is a deviation", responses_record,
     no_cache_write_tokens,
     {("schema_missing", "usage.input_tokens_details.cache_write_tokens", "deviation"),
      ("conformance", "usage.input_tokens_details.cache_write_tokens", "deviation")}),
    ("include_usage with no usage chunk is breaking", lambda: chat_record(stream=True),
     no_usage_chunk,
     {("event_missing", "events[chunk.usage]", "breaking"),
      ("schema_type", "events[chunk].usage", "breaking"),
      ("conformance", "events[chunk.usage]", "breaking"), SDK_ROW}),
    ("tool arguments as an object are breaking", lambda: chat_record(tool=True), arguments_object,
     {("schema_type", "choices[].message.tool_calls[].function.arguments", "breaking"),
      ("conformance", "choices[].message.tool_calls[].function.arguments", "breaking"),
      ("client", "client.chat.completions.create()", "breaking")}),
    ("response.created without output is breaking", lambda: responses_record(stream=True),
     created_without_output,
     {("conformance", "events[response.*].response.output", "breaking"),
      ("client", "client.responses.stream()", "breaking")}),
    ("a repeated response.created breaks the grammar, not the SDK",
     lambda: responses_record(stream=True), repeated_created,
     {("event_extra", "events[response.created]", "deviation"),
      ("conformance", "events[response.created]", "deviation")}),
    ("an event no rule requires is cosmetic", lambda: responses_record(stream=True),
     no_in_progress, {("event_missing", "events[response.in_progress]", "cosmetic")}),
    ("a sequence the grammar rejects is a deviation", lambda: responses_record(stream=True),
     numbered_from_one,
     {("event_sequence", "events[response.created].sequence_number", "deviation"),
      ("conformance", "events[response.created].sequence_number", "deviation")}),
    ("headers are cosmetic", chat_record, no_request_id,
     {("header", "headers.x-request-id", "cosmetic")}),
    ("an extra key is cosmetic", chat_record, extra_key,
     {("schema_extra", "choices[].message.reasoning_content", "cosmetic")}),
    ("a status the SDK raises on is breaking", chat_record, server_error,
     {("status", "status", "breaking"),
      ("client", "client.chat.completions.create()", "breaking")}),
    ("a conversation the server dropped is breaking", continued, conversation_dropped,
     {("schema_type", "previous_response_id", "breaking"),
      ("client", "client.responses.create()", "breaking")}),
    ("a streamed conversation the server dropped is breaking",
     lambda: continued(stream=True), conversation_dropped,
     {("schema_type", "events[response.*].response.previous_response_id", "breaking"),
      ("client", "client.responses.stream()", "breaking")}),
    ("a stream cut mid-way is breaking, as the SDK raises", lambda: chat_record(stream=True),
     cut_mid_stream,
     {("event_missing", "events[chunk.finish]", "breaking"),
      ("event_missing", "events[chunk.usage]", "breaking"),
      ("event_terminal", "events[terminal]", "breaking"),
      ("schema_type", "events[chunk].choices[].finish_reason", "cosmetic"),
      ("schema_type", "events[chunk].usage", "cosmetic"),
      ("conformance", "events[terminal]", "deviation"),
      SDK_ROW, ("client", "client.chat.completions.stream()", "breaking")}),
    ("usage the baseline gave, gone, is breaking", chat_record, no_usage,
     {("schema_missing", "usage", "breaking"),
      ("client", "client.chat.completions.create()", "breaking")}),
]  # fmt: skip


def judged(base: Record, change: Change) -> pd.DataFrame:
    analysis = analyze([base, replay(base, id="c1", change=change)])
    found = analysis.frame()
    return found[found["candidate_id"] == "c1"]


@pytest.mark.parametrize(
    ("make", "change", "expected"), [r[1:] for r in RULES], ids=[r[0] for r in RULES]
)
def test_each_rule_gives_its_severity(
    make: Callable[[], Record], change: Change, expected: set[Row]
) -> None:
    base = make()
    assert analyze([base]).frame().empty
    found = judged(base, change)
    got = set(zip(found["kind"], found["path"], found["severity"], strict=True))
    assert got == expected, found[["kind", "path", "severity", "message"]].to_string()


def test_a_breaking_finding_carries_the_harness_traceback_line() -> None:
    found = judged(responses_record(stream=True), created_without_output)
    breaking = found[found["severity"] == "breaking"]
    [evidence] = set(breaking["evidence"])
    assert evidence.startswith("`client.responses.stream()` raises AttributeError")
    assert " at openai/lib/streaming/responses/" in evidence and "snapshot.output" in evidence
    client = found[found["kind"] == "client"].iloc[0]
    assert (client["source"], client["message"]) == (
        f"openai-python {__import__('openai').__version__}",
        evidence,
    )


def test_a_stream_cut_mid_way_is_told_as_the_sdk_raises_not_as_nothing_streamed() -> None:
    """The SDK yields the chunks that came, then raises: nothing was not what it streamed."""
    found = judged(chat_record(stream=True), cut_mid_stream)
    evidence = set(found.loc[found["severity"] == "breaking", "evidence"])
    assert not [e for e in evidence if "nothing" in e], evidence
    [terminal] = found.loc[found["kind"] == "event_terminal", "evidence"]
    assert terminal.startswith(
        "`client.chat.completions.create(stream=True)` raises RemoteProtocolError"
    ), terminal


def _conversation_breaks(rec: Record) -> list[str]:
    found = analyze([rec]).frame()
    return [m for m in found.loc[found["kind"] == "client", "message"] if "previous_resp" in m]


def test_a_turn_is_judged_by_whether_it_continued_one_though_the_answers_read_alike() -> None:
    """OpenAI's object says null where no turn was continued: the same answer, twice."""
    alone = responses_record()
    asked = continued()
    conversation_dropped(asked)
    assert _conversation_breaks(alone) == []
    [said] = _conversation_breaks(asked)
    assert said.startswith("`client.responses.create()`: `previous_response_id` is null"), said
    assert _conversation_breaks(alone) == []  # whichever is read first


def test_an_object_that_leaves_the_key_out_is_not_taken_for_one_that_dropped_it() -> None:
    """The SDK reads an absent key as None; only an object that says null is at its word."""
    rec = continued()
    for obj in _response_objects(rec):
        del obj["previous_response_id"]
    assert _conversation_breaks(rec) == []


def test_a_raise_is_told_in_the_servers_words() -> None:
    found = judged(chat_record(), server_error)
    status = found[found["kind"] == "status"].iloc[0]
    assert status["evidence"] == (
        "`client.chat.completions.create()` raises InternalServerError: The server had an error"
    )


def test_the_candidate_answering_where_the_baseline_failed_is_cosmetic() -> None:
    base = chat_record()
    server_error(base)
    fixed = replay(base, id="c1", change=lambda r: answer(r).update(answer(chat_record())))
    found = analyze([base, fixed]).divergences
    assert set(zip(found["kind"], found["severity"], strict=True)) == {("status", "cosmetic")}
