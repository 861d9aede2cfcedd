"""Conformance without a baseline, by three references — OpenAI's OpenAPI document, the
openai SDK's types, Open Responses — and the stream grammars: nothing on OpenAI-shaped
traffic, each deliberate quirk named by the references that speak to it, with their pointers."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.fixtures.analysed import conformance
from tests.fixtures.records import (
    answer,
    as_events,
    body,
    chat_record,
    drop_events,
    error_record,
    event_type,
    events_of,
    make_record,
    models_record,
    openai_session,
    payloads,
    replay,
    response_events,
    responses_record,
    retag,
    set_payloads,
)
from wirediff._types import Record
from wirediff.analysis.comparison.conformance.sdk_types import prune_union_errors
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.comparison.impact import SDK_SOURCE
from wirediff.analysis.index.analyze import analyze

SPEC = "openai-openapi 2.3.0"
SDK = SDK_SOURCE
GRAMMAR = "stream-grammar"
OPEN = "open-responses 2026-04-24"


def test_openai_shaped_traffic_conforms() -> None:
    frame = conformance(openai_session())
    assert frame.empty
    assert list(frame.columns) == DIVERGENCE_COLUMNS


def test_error_answers_are_held_against_the_error_object() -> None:
    """Without a baseline too: OpenAI's own errors pass, others are named where they differ."""
    assert conformance([error_record(status=404), error_record(status=401)]).empty
    vllm_flat = {"object": "error", "message": "The model `x` does not exist.", "code": 404}
    frame = conformance(
        [
            error_record(id="t", status=500, text="oops", content_type="text/plain"),
            error_record(id="v", status=404, body=vllm_flat),
        ]
    )
    rows = set(zip(frame["candidate_id"], frame["path"], frame["schema_pointer"], strict=True))
    assert rows == {
        ("t", "error", "#/components/schemas/ErrorResponse"),
        ("v", "error", "#/components/schemas/ErrorResponse/required"),
    }
    assert set(frame["source"]) == {SPEC} and set(frame["severity"]) == {"deviation"}


def test_a_2xx_error_on_a_route_without_a_schema_is_a_row() -> None:
    rec = make_record(
        id="f1",
        path="/v1/files",
        method="GET",
        request_body=None,
        body={"error": "Unexpected endpoint or method. (GET /v1/files)"},
    )
    frame = conformance([rec])
    assert list(zip(frame["path"], frame["schema_pointer"], strict=True)) == [
        ("error", "#/components/schemas/ErrorResponse"),
        ("error", "#/components/schemas/Error/type"),
    ]
    assert frame["message"].iloc[0].startswith("`error`: an error in a 2xx answer: Unexpected")


def compact_record(output: Any) -> Record:
    answer = {
        "id": "resp_cmp_1",
        "object": "response.compaction",
        "created_at": 1764478800,
        "output": output,
        "usage": {
            "input_tokens": 9,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 12,
        },
    }
    return make_record(
        id="k1",
        path="/v1/responses/compact",
        request_body={"model": "m", "input": "hi"},
        body=answer,
    )


def test_compact_answers_are_validated() -> None:
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA"}
    assert conformance([compact_record([item])]).empty
    frame = conformance([compact_record("not a list")])
    assert list(zip(frame["path"], frame["source"], strict=True)) == [("output", SPEC)]


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
    answer(rec)["body"] = {"error": "Unexpected endpoint or method. (POST /v1/responses)"}


def arguments_as_object(rec: Record) -> None:
    body(rec)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}


def no_done(rec: Record) -> None:
    drop_events(rec, lambda d: d != "[DONE]")


def events_after_done(rec: Record) -> None:
    data = payloads(rec)
    set_payloads(rec, [*data, data[-2]])


def no_truncation(rec: Record) -> None:
    del body(rec)["truncation"]


def phase_null(rec: Record) -> None:
    """An output message with `"phase": null`: OpenAI's document and SDK allow it, Open
    Responses allows only `commentary` or `final_answer`."""
    body(rec)["output"][0]["phase"] = None


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
    events_of(rec)[1]["event"] = "response.progress"


def not_an_event_type(rec: Record) -> None:
    payloads(rec)[1]["type"] = "response.thinking"
    events_of(rec)[1]["event"] = "response.thinking"


def truncated_stream(rec: Record) -> None:
    events = events_of(rec)
    del events[-1]
    events[-1]["partial"] = True
    events[-1]["data"] = '{"type":"response.comp'


def models_without_owner(rec: Record) -> None:
    for model in body(rec)["data"]:
        del model["owned_by"]


def usage_tokens_null(rec: Record) -> None:
    body(rec)["usage"]["input_tokens"] = None


def repeated_created(rec: Record) -> None:
    data = payloads(rec)
    set_payloads(rec, [*data[:3], copy.deepcopy(data[0]), *data[3:]])


def created_without_output(rec: Record) -> None:
    del payloads(rec)[0]["response"]["output"]


Row = tuple[str, str, str, str]
"""(kind, path, source, severity)"""
ARGS = "choices[].message.tool_calls[].function.arguments"
QUIRKS: list[tuple[str, Callable[[], Record], Callable[[Record], object], list[Row]]] = [
    ("ollama done without name", lambda: responses_record(stream=True, tool=True), done_without_name,
     [("conformance", "events[response.function_call_arguments.done].name", s, "deviation") for s in (SPEC, SDK)]),
    ("vllm finish_reason omitted", lambda: chat_record(stream=True), finish_reason_omitted,
     [("conformance", "events[chunk].choices[].finish_reason", SPEC, "deviation")]),
    ("vllm error mid-stream", lambda: chat_record(stream=True), error_mid_stream,
     [("conformance", "events[error].error", SPEC, "deviation"),
      ("conformance", "events[error].error.code", SPEC, "deviation")]),
    ("lmstudio 200 error", lambda: responses_record(), lmstudio_unexpected_endpoint,
     [("conformance", "error", SPEC, "deviation"), ("conformance", "error", SPEC, "deviation"),
      ("client", "client.responses.create()", SDK, "breaking")]),
    ("arguments object", lambda: chat_record(tool=True), arguments_as_object,
     [("conformance", ARGS, SPEC, "breaking"), ("conformance", ARGS, SDK, "breaking"),
      ("client", "client.chat.completions.create()", SDK, "breaking")]),
    ("no [DONE]", lambda: chat_record(stream=True), no_done,
     [("conformance", "events[terminal]", GRAMMAR, "deviation")]),
    ("chunk after [DONE]", lambda: chat_record(stream=True), events_after_done,
     [("conformance", "events[terminal]", GRAMMAR, "deviation")]),
    ("response without truncation", lambda: responses_record(), no_truncation,
     [("conformance", "truncation", OPEN, "deviation")]),
    ("phase null", lambda: responses_record(), phase_null,
     [("conformance", "output[].phase", OPEN, "deviation")]),
    ("message without refusal", lambda: chat_record(), no_refusal,
     [("conformance", "choices[].message.refusal", SPEC, "deviation")]),
    ("created not first", lambda: responses_record(stream=True), no_created,
     [("conformance", "events[response.in_progress]", GRAMMAR, "breaking"),
      ("client", "client.responses.stream()", SDK, "breaking")]),
    ("repeated created", lambda: responses_record(stream=True), repeated_created,
     [("conformance", "events[response.created]", GRAMMAR, "deviation")]),
    ("created without output", lambda: responses_record(stream=True), created_without_output,
     [("conformance", "events[response.*].response.output", SPEC, "breaking"),
      ("conformance", "events[response.*].response.output", SDK, "breaking"),
      ("client", "client.responses.stream()", SDK, "breaking")]),
    ("sequence gap", lambda: responses_record(stream=True), sequence_gap,
     [("conformance", "events[response.output_text.delta].sequence_number", GRAMMAR, "deviation")]),
    ("delta before its part", lambda: responses_record(stream=True), delta_before_part,
     [("conformance", "events[response.output_text.delta]", GRAMMAR, "deviation"),
      ("client", "client.responses.stream()", SDK, "breaking")]),
    ("delta after item done", lambda: responses_record(stream=True), delta_after_item_done,
     [("conformance", "events[response.output_text.delta]", GRAMMAR, "deviation")]),
    ("delta for another item", lambda: responses_record(stream=True, tool=True), wrong_item_id,
     [("conformance", "events[response.function_call_arguments.delta]", GRAMMAR, "deviation")]),
    ("[DONE] in a responses stream", lambda: responses_record(stream=True), done_after_completed,
     [("conformance", "events[[DONE]]", GRAMMAR, "deviation")]),
    ("event name differs from type", lambda: responses_record(stream=True), event_name_differs,
     [("conformance", "events[response.in_progress]", GRAMMAR, "deviation")]),
    ("unknown event type", lambda: responses_record(stream=True), not_an_event_type,
     [("conformance", "events[response.thinking].type", SPEC, "deviation")]),
    ("model without owner", models_record, models_without_owner,
     [("conformance", "data[].owned_by", s, "deviation") for s in (SPEC, SDK)]),
    ("usage tokens null", lambda: responses_record(), usage_tokens_null,
     [("conformance", "usage.input_tokens", s, "deviation") for s in (SPEC, SDK)]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("base", "change", "expected"), [q[1:] for q in QUIRKS], ids=[q[0] for q in QUIRKS]
)
def test_each_quirk_is_named_by_the_references_that_speak_to_it(
    base: Callable[[], Record], change: Callable[[Record], object], expected: list[Row]
) -> None:
    assert conformance([base()]).empty
    rec = replay(base(), id="q1", label="quirky", change=change)
    frame = conformance([rec])
    got = zip(frame["kind"], frame["path"], frame["source"], frame["severity"], strict=True)
    assert sorted(got) == sorted(expected), frame["candidate"].tolist()
    row = frame.iloc[0]
    assert (row["pair_id"], row["candidate_id"], row["label"], row["baseline"]) == (
        "q1", "q1", "quirky", "",
    )  # fmt: skip
    assert all(frame.loc[frame["kind"] == "conformance", "schema_pointer"] != "")


def test_a_breaking_problem_carries_the_harness_traceback_line() -> None:
    rec = replay(responses_record(stream=True), id="q1", change=created_without_output)
    frame = conformance([rec])
    spec = frame[frame["source"] == SPEC].iloc[0]
    assert spec["schema_pointer"] == "#/components/schemas/Response/allOf/2/required"
    assert spec["evidence"].startswith("`client.responses.stream()` raises AttributeError")
    assert "snapshot.output" in spec["evidence"]
    assert set(frame["evidence"]) == {spec["evidence"]}


def test_the_grammar_flags_a_repeated_response_created() -> None:
    rec = replay(responses_record(stream=True), id="q1", change=repeated_created)
    [row] = conformance([rec]).itertuples()
    assert row.schema_pointer == "grammar:responses/one-created"
    assert row.candidate == "response.created came 2 times (event #3)"


def test_open_responses_keys_are_cited_as_open_responses() -> None:
    def no_penalties(rec: Record) -> None:
        for key in ("presence_penalty", "frequency_penalty", "store", "completed_at"):
            del body(rec)[key]

    frame = conformance([replay(responses_record(), id="q1", change=no_penalties)])
    assert set(frame["source"]) == {OPEN}
    assert set(frame["schema_pointer"]) == {"#/components/schemas/ResponseResource/required"}
    assert "OpenAI spec" not in " ".join(frame["message"])


def websocket_record(turns: list[list[Any]]) -> Record:
    """Responses over a WebSocket: each turn the client's `response.create`, then the
    server's events."""
    data: list[Any] = []
    for events in turns:
        data += [{"type": "response.create", "model": "gpt-4o-mini", "input": "hi"}, *events]
    rec = make_record(
        id="w1",
        path="/v1/responses",
        method="GET",
        request_body=None,
        status=101,
        events=as_events(data, named=False),
    )
    rec["request"]["headers"].append(["upgrade", "websocket"])
    retag(rec)
    return rec


def test_websocket_turns_get_the_same_checks() -> None:
    assert conformance([websocket_record([response_events(), response_events()])]).empty
    cut = response_events()[:-1]
    frame = conformance([websocket_record([response_events(), cut])])
    assert list(zip(frame["path"], frame["schema_pointer"], strict=True)) == [
        ("events[terminal]", "grammar:responses/one-terminal")
    ]


WS_ERROR: dict[str, Any] = {
    "type": "error",
    "status": 400,
    "error": {"type": "invalid_request_error", "code": "model_not_found",
              "message": "The model `gpt-9` does not exist.", "param": "model"},
}  # fmt: skip


def test_a_websocket_error_frame_is_judged_by_the_websocket_schema() -> None:
    """The documented WebSocket envelope, alone or after a turn's first events, is clean;
    judged as the SSE error event it would lack `code`, `message` and `sequence_number`."""
    started = response_events()[:2]
    assert conformance([websocket_record([response_events(), [WS_ERROR]])]).empty
    assert conformance([websocket_record([[*started, WS_ERROR]])]).empty
    bad = {**WS_ERROR, "error": {**WS_ERROR["error"], "code": None}}
    frame = conformance([websocket_record([[bad]])])
    assert list(zip(frame["path"], frame["source"], strict=True)) == [
        ("events[error].error.code", OPEN)
    ]
    assert frame["schema_pointer"].iloc[0].startswith("#/components/schemas/WebSocketErrorEvent/")


def test_a_quirk_in_every_chunk_is_one_row_that_counts_them() -> None:
    rec = replay(chat_record(stream=True), id="q1", label="vllm", change=finish_reason_omitted)
    [row] = conformance([rec]).itertuples()
    assert row.candidate == "'finish_reason' is a required property (4 events, first #0)"
    assert row.family == "chat.completions"
    assert row.endpoint == "/v1/chat/completions"


def test_the_response_carried_by_several_events_is_one_object() -> None:
    def no_store(rec: Record) -> None:
        for data in payloads(rec):
            if isinstance(data.get("response"), dict):
                data["response"].pop("store", None)

    rec = replay(responses_record(stream=True), id="q1", label="vllm", change=no_store)
    [row] = conformance([rec]).itertuples()
    assert (row.path, row.source) == ("events[response.*].response.store", OPEN)
    assert row.candidate == "required key missing (Open Responses) (3 events, first #0)"


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


@pytest.mark.parametrize(
    ("key", "within", "past", "message"),
    [
        ("temperature", 0.7, 3.5, "3.5 is greater than the maximum of 2"),
        ("top_logprobs", 5, 50, "50 is greater than the maximum of 20"),
        ("safety_identifier", "user-1", "u" * 65, "is too long"),
    ],
    ids=["a number", "an integer", "a text's length"],
)
def test_a_value_the_document_bounds_is_judged_on_each_answer(
    key: str, within: Any, past: Any, message: str
) -> None:
    """Verdicts are remembered per structure: a value in bounds and one past them, in
    answers otherwise alike, are each judged on their own, whichever comes first."""
    ok, bad = responses_record(id="ok"), responses_record(id="bad")
    body(ok)[key], body(bad)[key] = within, past
    for session in ([ok, bad], [bad, ok]):
        frame = conformance(copy.deepcopy(session))
        assert set(frame["candidate_id"]) == {"bad"}
        assert frame["message"].str.contains(message, regex=False).all()


def test_an_error_where_a_result_belongs_is_quoted_from_its_own_answer() -> None:
    """Verdicts are remembered per structure, but the problem quotes the error's message:
    two such answers alike in structure each get their own."""
    said = {
        "a1": "alpha: quota exceeded",
        "b1": "beta: model not found",
        "c1": "alpha: quota exceeded",
    }
    records = []
    for rid, message in said.items():
        rec = responses_record(id=rid)
        answer(rec)["body"] = {
            "error": {"message": message, "type": "x", "param": None, "code": None}
        }
        records.append(rec)
    for session in (records, records[::-1]):
        frame = conformance(copy.deepcopy(session))
        mine = frame[frame["path"] == "error"]
        got = dict(zip(mine["candidate_id"], mine["message"], strict=True))
        assert got == {
            rid: f"`error`: an error where Response belongs: {m}" for rid, m in said.items()
        }


@pytest.mark.parametrize("baseline_phase", [None, "final_answer"])
def test_a_null_phase_is_a_deviation_not_a_cosmetic_difference(baseline_phase: str | None) -> None:
    """The SDK types take `phase: null` (Optional), Open Responses does not: the spec is
    broken and the SDK tolerates it, whether the baseline sends no phase or a real one."""
    base = responses_record(id="o1")
    if baseline_phase is not None:
        body(base)["output"][0]["phase"] = baseline_phase
    found = analyze([base, replay(base, id="c1", label="x", change=phase_null)]).divergences
    assert list(zip(found["path"], found["severity"], strict=True)) == [
        ("output[].phase", "deviation")
    ]


@pytest.mark.parametrize(
    ("make", "schema", "call"),
    [(chat_record, "CreateChatCompletionResponse", "client.chat.completions.create()"),
     (responses_record, "Response", "client.responses.create()")],
)  # fmt: skip
def test_a_json_null_body_is_json_and_the_sdk_returns_none(
    make: Any, schema: str, call: str
) -> None:
    """A 200 whose body is the JSON `null` (recorded as its text): the SDK parses it and
    returns None, which is what the evidence says — not how the harness read None."""
    rec = make(id="o1")
    answer(rec).update({"body": None, "text": "null"})
    frame = conformance([rec])
    assert list(frame["kind"]) == ["conformance", "client"]
    conformance_message, client_message = frame["message"]
    assert conformance_message == f"`body`: the JSON body null where {schema} belongs"
    assert client_message.startswith(f"`{call}` returns None: `{call}.")  # what an app reads next
    assert "impact.py" not in " ".join(frame["evidence"])


def test_a_websocket_turn_closed_before_any_event_is_breaking() -> None:
    """101, the client's `response.create`, then a close with 1011 and no event: the stream
    the turn asked for never came."""
    rec = websocket_record([[]])
    answer(rec)["websocket"] = {
        "close_code": 1011, "close_reason": "Internal server error", "closed_by": "server",
        "messages": {"client": 1, "server": 0}, "bytes": {"client": 60, "server": 0},
    }  # fmt: skip
    frame = conformance([rec])
    client = frame[frame["kind"] == "client"]
    assert list(zip(client["path"], client["severity"], strict=True)) == [
        ("client.responses.connect()", "breaking")
    ]
    assert "closed with 1011 (Internal server error)" in client["evidence"].iloc[0]
    assert conformance([websocket_record([response_events()])]).empty  # answered: no break
