"""Client contracts beyond `create()`: what agent loops read (finish reason, each tool
call's id, name and arguments against the tool's schema), structured output against the
request's schema and `parse()`, the vendor reasoning text, the server's words in an error,
and the final objects of the stream helpers. Each is measured by openai-python on the
recorded answer; each change of one graded by `breaks`."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.fixtures.records import (
    answer,
    body,
    chat_record,
    error_record,
    events_of,
    responses_record,
)
from wirediff._types import Record
from wirediff.analysis.comparison.breaks import (
    ARGUMENTS,
    FINISH,
    LOST,
    STRUCTURED,
    TOOL_CALL,
    implicates,
    pair_breaks,
    record_breaks,
    server_words,
)
from wirediff.analysis.comparison.clients.asked import arguments_kind, asked, structured_kind
from wirediff.analysis.comparison.impact import impact, skeleton

FORECAST = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}


def breaks_between(base: Record, cand: Record) -> tuple[Any, ...]:
    """What breaks on the candidate's answer that did not on the baseline's (both answered)."""
    return pair_breaks(impact(base), impact(cand), server_words(cand), None)


def structured_chat(content: str) -> Record:
    rec = chat_record()
    rec["request"]["body"]["response_format"] = {
        "type": "json_schema",
        "json_schema": {"name": "forecast", "schema": FORECAST, "strict": True},
    }
    body(rec)["choices"][0]["message"]["content"] = content
    return rec


def test_structured_content_is_judged_against_the_requested_schema() -> None:
    good = impact(structured_chat('{"city": "Paris", "unit": "celsius"}'))
    assert good.get("structured") == "valid" and good.get("parsed") == "object"
    assert good.failures == ()
    bad = structured_chat('{"city": "Paris", "unit": "kelvin"}')
    outcome = impact(bad)
    assert outcome.get("structured") == "rejected by the schema at /unit (enum)"
    (failure,) = outcome.failures  # what `parse()` raises, in the SDK's words
    assert failure.probe == "client.chat.completions.parse()"
    assert failure.error.startswith("raises ValidationError")
    assert skeleton(bad) != skeleton(structured_chat('{"city": "Paris", "unit": "celsius"}'))
    (brk,) = record_breaks(bad, outcome)
    assert brk.probe == "client.chat.completions.parse()"


def test_prose_for_a_schema_is_not_json() -> None:
    rec = structured_chat("Sure! It is sunny in Paris.")
    outcome = impact(rec)
    assert outcome.get("structured") == "not JSON"
    assert any(b.probe == "client.chat.completions.parse()" for b in record_breaks(rec, outcome))


def test_json_mode_asks_for_any_object() -> None:
    rec = chat_record()
    rec["request"]["body"]["response_format"] = {"type": "json_object"}
    body(rec)["choices"][0]["message"]["content"] = '{"anything": 1}'
    assert impact(rec).get("structured") == "valid"
    body(rec)["choices"][0]["message"]["content"] = "[1, 2]"
    outcome = impact(rec)
    assert outcome.get("structured") == "JSON list"
    (brk,) = record_breaks(rec, outcome)
    assert brk.rule == STRUCTURED and "JSON list" in brk.message


def _first_call(rec: Record) -> dict[str, Any]:
    call: dict[str, Any] = body(rec)["choices"][0]["message"]["tool_calls"][0]
    return call


def test_tool_arguments_are_judged_against_the_tools_schema() -> None:
    rec = chat_record(tool=True)
    _first_call(rec)["function"]["arguments"] = '{"town": "Paris"}'
    outcome = impact(rec)
    assert outcome.get("tool_arguments") == "rejected by the schema at / (required)"
    (brk,) = record_breaks(rec, outcome)
    assert brk.rule == ARGUMENTS and "the tool's schema" in brk.message
    assert skeleton(rec) != skeleton(chat_record(tool=True))


@pytest.mark.parametrize(
    ("change", "key", "value"),
    [
        (lambda call: call.update(id=""), "tool_call.id", "missing"),
        (lambda call: call["function"].update(name="rm_rf"), "tool_call.name", "not offered"),
    ],
    ids=["no id", "a tool not offered"],
)
def test_an_agent_loop_needs_an_id_and_an_offered_name(change: Any, key: str, value: str) -> None:
    rec = chat_record(tool=True)
    change(_first_call(rec))
    outcome = impact(rec)
    assert outcome.get(key) == value
    (brk,) = record_breaks(rec, outcome)
    assert brk.rule == TOOL_CALL
    assert implicates(brk, "schema_missing", "choices[].message.tool_calls[].id")
    assert not implicates(brk, "schema_extra", "system_fingerprint")


def test_a_responses_call_id_round_trips() -> None:
    rec = responses_record(tool=True)
    item = next(i for i in body(rec)["output"] if i["type"] == "function_call")
    del item["call_id"]
    outcome = impact(rec)
    assert outcome.get("tool_call.id") == "missing"
    assert any(b.rule == TOOL_CALL for b in record_breaks(rec, outcome))


def test_a_streamed_call_id_the_final_object_changes_breaks_the_round_trip() -> None:
    rec = responses_record(stream=True, tool=True)
    assert impact(rec).get("final.call_id") == "as streamed"
    for ev in events_of(rec):
        data = ev["data"]
        if isinstance(data, dict) and data.get("type") == "response.completed":
            for item in data["response"]["output"]:
                item["call_id"] = "call_elsewhere"
    outcome = impact(rec)
    assert outcome.get("final.call_id") == "not as streamed"
    (brk,) = record_breaks(rec, outcome)
    assert brk.rule == TOOL_CALL and "the stream announced" in brk.message


def test_finish_reason_on_an_answer_that_calls_tools() -> None:
    """`stop` where the baseline said `tool_calls`, on an answer that calls tools: an agent
    loop that branches on it never runs them. On a text answer a finish reason is the
    model's business."""
    base, cand = chat_record(tool=True), chat_record(tool=True, id="c1")
    body(cand)["choices"][0]["finish_reason"] = "stop"
    (brk,) = breaks_between(base, cand)
    assert brk.rule == FINISH and brk.baseline == "tool_calls" and brk.candidate == "stop"
    assert implicates(brk, "enum", "choices[].finish_reason")
    text, other = chat_record(), chat_record(id="c2")
    body(other)["choices"][0]["finish_reason"] = "length"
    assert breaks_between(text, other) == ()


def test_the_reasoning_text_moved_is_lost_to_apps_reading_it() -> None:
    base, cand = chat_record(), chat_record(id="c1")
    body(base)["choices"][0]["message"]["reasoning_content"] = "Thinking about it."
    body(cand)["choices"][0]["message"]["reasoning"] = "Thinking about it."
    assert impact(base).get("reasoning_content") == "text"
    (brk,) = breaks_between(base, cand)
    assert brk.rule == LOST and "reasoning_content" in brk.message
    assert implicates(brk, "schema_missing", "choices[].message.reasoning_content")
    assert not implicates(brk, "schema_extra", "usage.prompt_tokens_details")


def test_a_final_object_without_the_streamed_text_loses_it() -> None:
    rec = responses_record(stream=True)
    for ev in events_of(rec):
        if isinstance(ev["data"], dict) and ev["data"].get("type") == "response.completed":
            ev["data"]["response"]["output"] = []
    outcome = impact(rec)
    assert outcome.get("streamed.output_text") == "text"
    assert outcome.get("final.output_text") == "empty"
    (brk,) = record_breaks(rec, outcome)
    assert brk.rule == LOST and "though the stream delivered text" in brk.message


def test_an_error_without_the_servers_words_is_observed_as_such() -> None:
    rec = error_record(status=400, text="Bad Request")
    assert impact(rec).get("error.message") == "no server words"
    assert impact(error_record()).get("error.message") == "the server's words"


def test_a_null_body_is_what_create_returns_not_a_harness_error() -> None:
    rec = chat_record()
    answer(rec)["body"], answer(rec)["text"] = None, "null"
    (failure,) = impact(rec).failures
    assert failure.error.startswith("returns None") and failure.where == ""


def test_the_skeleton_holds_what_the_checks_read_of_the_request() -> None:
    """The tools' schemas and the response format are read: another schema, another skeleton."""
    rec = chat_record(tool=True)
    other = copy.deepcopy(rec)
    other["request"]["body"]["tools"][0]["function"]["parameters"]["required"] = []
    assert skeleton(rec) != skeleton(other)
    assert asked(rec["request"]["body"]).names == {"get_weather"}


@pytest.mark.parametrize(
    ("arguments", "kind"),
    [
        ('{"city": "Paris"}', "object"),
        ({"city": "Paris"}, "not a string (dict)"),
        ('{"city": ', "not JSON"),
        ("[1]", "JSON list"),
        ('{"city": 3}', "rejected by the schema at /city (type)"),
    ],
)
def test_arguments_kinds(arguments: Any, kind: str) -> None:
    schema = asked({"tools": [{"type": "function", "function": {
        "name": "get_weather", "parameters": FORECAST | {"required": ["city"]}}}]}).tool_schema("get_weather")  # fmt: skip
    assert arguments_kind(arguments, schema) == kind


def test_no_structured_output_asked_is_not_judged() -> None:
    assert structured_kind("prose", asked({"model": "m"})) is None
