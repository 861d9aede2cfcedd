"""Conformance against the openai SDK types, the spec's required keys and the stream
grammar: nothing on OpenAI-shaped traffic, one row per deliberate quirk."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.records import (
    body,
    chat_record,
    drop_events,
    error_record,
    event_type,
    models_record,
    openai_session,
    payloads,
    replay,
    responses_record,
    set_payloads,
)
from wirediff._types import Record
from wirediff.analysis.comparison.conformance import (
    CONFORMANCE_COLUMNS,
    conformance,
    prune_union_errors,
)


def test_openai_shaped_traffic_conforms() -> None:
    frame = conformance(openai_session())
    assert frame.empty
    assert list(frame.columns) == CONFORMANCE_COLUMNS


def test_error_answers_are_not_held_against_the_sdk_types() -> None:
    assert conformance([error_record(status=404), error_record(status=500, text="oops")]).empty


# --- quirks -----------------------------------------------------------------------------


def done_without_name(rec: Record) -> None:
    """Ollama: `response.function_call_arguments.done` has no `name`."""
    for data in payloads(rec):
        if event_type(data) == "response.function_call_arguments.done":
            del data["name"]


def finish_reason_omitted(rec: Record) -> None:
    """vLLM: unset fields omitted instead of null."""
    for data in payloads(rec):
        if isinstance(data, dict):
            for choice in data["choices"]:
                if choice["finish_reason"] is None:
                    del choice["finish_reason"]


def error_mid_stream(rec: Record) -> None:
    """vLLM: a mid-stream error is `data: {"error": …}` then `[DONE]`."""
    data = payloads(rec)
    error = {
        "error": {
            "message": "engine overloaded",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
    }
    set_payloads(rec, [*data[:2], error, "[DONE]"])


def lmstudio_unexpected_endpoint(rec: Record) -> None:
    rec["response"]["body"] = {"error": "Unexpected endpoint or method. (POST /v1/responses)"}


def arguments_as_object(rec: Record) -> None:
    body(rec)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}


def no_done(rec: Record) -> None:
    drop_events(rec, lambda d: d != "[DONE]")


def events_after_done(rec: Record) -> None:
    data = payloads(rec)
    set_payloads(rec, [*data, data[-2]])


def no_truncation(rec: Record) -> None:
    del body(rec)["truncation"]


def no_refusal(rec: Record) -> None:
    del body(rec)["choices"][0]["message"]["refusal"]


def no_created(rec: Record) -> None:
    drop_events(rec, lambda d: event_type(d) != "response.created")


def sequence_gap(rec: Record) -> None:
    for data in payloads(rec)[4:]:
        data["sequence_number"] += 1


def delta_before_part(rec: Record) -> None:
    data = payloads(rec)
    data[3], data[4] = data[4], data[3]
    set_payloads(rec, data)


def delta_after_item_done(rec: Record) -> None:
    data = payloads(rec)
    set_payloads(rec, [*data[:-1], copy.deepcopy(data[4]), data[-1]])


def wrong_item_id(rec: Record) -> None:
    for data in payloads(rec):
        if event_type(data) == "response.function_call_arguments.delta":
            data["item_id"] = "fc_abc123_0"


def done_after_completed(rec: Record) -> None:
    """LiteLLM: `data: [DONE]` after a Responses stream."""
    set_payloads(rec, [*payloads(rec), "[DONE]"], renumber=False)


def event_name_differs(rec: Record) -> None:
    rec["response"]["events"][1]["event"] = "response.progress"


def not_an_event_type(rec: Record) -> None:
    payloads(rec)[1]["type"] = "response.thinking"
    rec["response"]["events"][1]["event"] = "response.thinking"


def truncated_stream(rec: Record) -> None:
    events = rec["response"]["events"]
    del events[-1]
    events[-1]["partial"] = True
    events[-1]["data"] = '{"type":"response.comp'


def models_without_owner(rec: Record) -> None:
    for model in body(rec)["data"]:
        del model["owned_by"]


def usage_tokens_null(rec: Record) -> None:
    body(rec)["usage"]["input_tokens"] = None


QUIRKS: list[tuple[str, Callable[[], Record], Callable[[Record], object], str, str]] = [
    ("ollama done without name", lambda: responses_record(stream=True, tool=True), done_without_name,
     "events[response.function_call_arguments.done].name", "error"),
    ("vllm finish_reason omitted", lambda: chat_record(stream=True), finish_reason_omitted,
     "events[chunk].choices[].finish_reason", "warning"),
    ("vllm error mid-stream", lambda: chat_record(stream=True), error_mid_stream, "events[error]", "error"),
    ("lmstudio 200 error", lambda: responses_record(), lmstudio_unexpected_endpoint, "error", "error"),
    ("arguments object", lambda: chat_record(tool=True), arguments_as_object,
     "choices[].message.tool_calls[].function.arguments", "error"),
    ("no [DONE]", lambda: chat_record(stream=True), no_done, "events[terminal]", "error"),
    ("chunk after [DONE]", lambda: chat_record(stream=True), events_after_done, "events[terminal]", "error"),
    ("response without truncation", lambda: responses_record(), no_truncation, "truncation", "warning"),
    ("message without refusal", lambda: chat_record(), no_refusal, "choices[].message.refusal", "warning"),
    ("created not first", lambda: responses_record(stream=True), no_created,
     "events[response.in_progress]", "error"),
    ("sequence gap", lambda: responses_record(stream=True), sequence_gap,
     "events[response.output_text.delta].sequence_number", "error"),
    ("delta before its part", lambda: responses_record(stream=True), delta_before_part,
     "events[response.output_text.delta]", "error"),
    ("delta after item done", lambda: responses_record(stream=True), delta_after_item_done,
     "events[response.output_text.delta]", "error"),
    ("delta for another item", lambda: responses_record(stream=True, tool=True), wrong_item_id,
     "events[response.function_call_arguments.delta]", "error"),
    ("[DONE] in a responses stream", lambda: responses_record(stream=True), done_after_completed,
     "events[[DONE]]", "error"),
    ("event name differs from type", lambda: responses_record(stream=True), event_name_differs,
     "events[response.in_progress]", "error"),
    ("unknown event type", lambda: responses_record(stream=True), not_an_event_type,
     "events[response.thinking]", "error"),
    ("cut inside an event", lambda: responses_record(stream=True), truncated_stream,
     "events[terminal]", "error"),
    ("model without owner", models_record, models_without_owner, "data[].owned_by", "error"),
    ("usage tokens null", lambda: responses_record(), usage_tokens_null,
     "usage.input_tokens", "error"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("base", "change", "path", "severity"), [q[1:] for q in QUIRKS], ids=[q[0] for q in QUIRKS]
)
def test_each_quirk_is_one_row(
    base: Callable[[], Record], change: Callable[[Record], object], path: str, severity: str
) -> None:
    rec = replay(base(), id="q1", label="quirky", change=change)
    frame = conformance([rec])
    assert list(zip(frame["path"], frame["severity"], strict=True)) == [(path, severity)], frame[
        "candidate"
    ].tolist()
    row = frame.iloc[0]
    assert (row["kind"], row["pair_id"], row["candidate_id"], row["label"], row["baseline"]) == (
        "conformance", "q1", "q1", "quirky", "",
    )  # fmt: skip


def test_a_quirk_in_every_chunk_is_one_row_that_counts_them() -> None:
    rec = replay(chat_record(stream=True), id="q1", label="vllm", change=finish_reason_omitted)
    [row] = conformance([rec]).itertuples()
    assert row.candidate == "required key missing (OpenAI spec) (4 events, first #0)"
    assert row.family == "chat.completions"
    assert row.endpoint == "/v1/chat/completions"


def test_the_response_carried_by_several_events_is_one_object() -> None:
    def no_store(rec: Record) -> None:
        for data in payloads(rec):
            if isinstance(data.get("response"), dict):
                data["response"].pop("store", None)

    rec = replay(responses_record(stream=True), id="q1", label="vllm", change=no_store)
    [row] = conformance([rec]).itertuples()
    assert row.path == "events[response.*].response.store"
    assert row.candidate == "required key missing (OpenAI spec) (3 events, first #0)"


def test_union_errors_keep_only_the_member_the_type_names() -> None:
    errors: list[dict[str, Any]] = [
        {
            "type": "string_type",
            "loc": ("tool_calls", 0, "FunctionCall", "function", "arguments"),
            "msg": "bad",
        },
        {
            "type": "missing",
            "loc": ("tool_calls", 0, "CustomCall", "custom"),
            "msg": "Field required",
        },
        {
            "type": "literal_error",
            "loc": ("tool_calls", 0, "CustomCall", "type"),
            "msg": "Input should be 'custom'",
        },
    ]
    assert prune_union_errors(errors) == [
        {"type": "string_type", "loc": ("tool_calls", 0, "function", "arguments"), "msg": "bad"}
    ]


def test_a_union_no_member_matches_is_one_error() -> None:
    errors: list[dict[str, Any]] = [
        {
            "type": "literal_error",
            "loc": ("item", "A", "type"),
            "msg": "x",
            "ctx": {"expected": "'a'"},
        },
        {
            "type": "literal_error",
            "loc": ("item", "B", "type"),
            "msg": "x",
            "ctx": {"expected": "'b'"},
        },
    ]
    assert prune_union_errors(errors) == [{"loc": ("item",), "msg": "`type` is none of 'a', 'b'"}]
