"""Divergence kinds, one table row each: a realistic OpenAI baseline, one change, and the
exact (kind, path) findings that change must produce — no more."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

from tests.fixtures.analysed import conformance, divergences
from tests.fixtures.records import (
    ARGUMENT_FRAGMENTS,
    TEXT_FRAGMENTS,
    WEATHER_ARGUMENTS,
    answer,
    as_events,
    body,
    chat_record,
    drop_events,
    error_record,
    event_type,
    events_of,
    models_record,
    openai_error,
    openai_headers,
    payloads,
    replay,
    responses_record,
    set_header,
    set_payloads,
)
from wirediff._types import Record
from wirediff.analysis.comparison.compare import Finding, compare, error_message
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.comparison.kinds import kind_names
from wirediff.analysis.comparison.noise import glob_regex
from wirediff.analysis.comparison.observe import CHUNK_ARGUMENTS, observe

Change = Callable[[Record], object]
KINDS = kind_names(compared_only=True)


def compare_records(baseline: Record, candidate: Record) -> list[Finding]:
    """Every difference between two records, without noise control."""
    return compare(observe(baseline), observe(candidate))


def _chat(**kw: Any) -> Callable[[], Record]:
    return lambda: chat_record(**kw)


def _responses(**kw: Any) -> Callable[[], Record]:
    return lambda: responses_record(**kw)


def _not_found() -> Record:
    return error_record()


# --- changes ----------------------------------------------------------------------------


def server_error(rec: Record) -> None:
    answer(rec).update(
        {
            "status": 500,
            "body": openai_error(
                "The server had an error while processing your request.", "server_error"
            ),
        }
    )


def error_in_200(rec: Record) -> None:
    answer(rec)["body"] = openai_error("Model is loading", "invalid_request_error")


def lmstudio_unexpected_endpoint(rec: Record) -> None:
    answer(rec)["body"] = {"error": "Unexpected endpoint or method. (POST /v1/responses)"}


def integer_error_code(rec: Record) -> None:
    body(rec)["error"]["code"] = 404


def fastapi_not_found(rec: Record) -> None:
    answer(rec)["body"] = {"detail": "Not Found"}


def ollama_page_not_found(rec: Record) -> None:
    answer(rec).update(
        {"body": None, "text": "404 page not found", "headers": openai_headers("text/plain")}
    )


def ollama_error_type(rec: Record) -> None:
    body(rec)["error"].update(
        message="model 'gpt-5-nano' not found", type="not_found_error", code=None
    )


def answered_json_to_a_stream(rec: Record) -> None:
    fresh = answer(chat_record())
    answer(rec).update({"body": fresh["body"], "events": None, "headers": fresh["headers"]})


def no_response(rec: Record) -> None:
    rec["response"] = None
    rec["error"] = {"kind": "upstream_unreachable", "message": "Connection refused"}


def drop_system_fingerprint(rec: Record) -> None:
    del body(rec)["system_fingerprint"]


def add_reasoning_content(rec: Record) -> None:
    body(rec)["choices"][0]["message"]["reasoning_content"] = "The user greets me."


def arguments_as_object(rec: Record) -> None:
    body(rec)["output"][0]["arguments"] = {"city": "Paris"}


def chat_arguments_as_object(rec: Record) -> None:
    body(rec)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}


def arguments_repeated_in_last_delta(rec: Record) -> None:
    payloads(rec)[len(ARGUMENT_FRAGMENTS)]["choices"][0]["delta"]["tool_calls"][0]["function"][
        "arguments"
    ] = WEATHER_ARGUMENTS


def whole_tool_call_in_one_delta(rec: Record) -> None:
    chunks = payloads(rec)
    chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] = WEATHER_ARGUMENTS
    set_payloads(rec, [chunks[0], *chunks[1 + len(ARGUMENT_FRAGMENTS) :]])


def role_in_every_delta(rec: Record) -> None:
    """Ollama: no role-only first chunk; every delta repeats role and content."""
    chunks = payloads(rec)[1:]
    for data in chunks[: len(TEXT_FRAGMENTS)]:
        data["choices"][0]["delta"]["role"] = "assistant"
    set_payloads(rec, chunks)


def finish_reason_eos(rec: Record) -> None:
    body(rec)["choices"][0]["finish_reason"] = "eos"


def object_text_completion(rec: Record) -> None:
    body(rec)["object"] = "text_completion"


def drop_in_progress(rec: Record) -> None:
    drop_events(rec, lambda d: event_type(d) != "response.in_progress")


def drop_completed(rec: Record) -> None:
    drop_events(rec, lambda d: event_type(d) != "response.completed")


def add_queued(rec: Record) -> None:
    data = payloads(rec)
    queued = {"type": "response.queued", "response": data[0]["response"]}
    set_payloads(rec, [data[0], queued, *data[1:]])


def usage_chunk_before_finish(rec: Record) -> None:
    data = payloads(rec)
    set_payloads(rec, [*data[:-3], data[-2], data[-3], data[-1]])


def drop_done(rec: Record) -> None:
    drop_events(rec, lambda d: d != "[DONE]")


def numbered_from_one(rec: Record) -> None:
    for data in payloads(rec):
        data["sequence_number"] += 1


def response_without_store(rec: Record) -> None:
    for data in payloads(rec):
        if isinstance(data.get("response"), dict):
            data["response"].pop("store", None)


def done_without_name(rec: Record) -> None:
    for data in payloads(rec):
        if event_type(data) == "response.function_call_arguments.done":
            del data["name"]


def omit_nulls(rec: Record) -> None:
    """vLLM: unset fields are omitted instead of null."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    set_payloads(rec, [strip(d) for d in payloads(rec)])


def drop_fingerprint_and_request_id(rec: Record) -> None:
    drop_system_fingerprint(rec)
    drop_request_id(rec)


def different_words(rec: Record) -> None:
    b = body(rec)
    b.update(id="chatcmpl-other", created=1764479999, system_fingerprint="fp_ollama")
    b["choices"][0]["message"]["content"] = "Hi there, what can I do for you?"
    b["usage"]["completion_tokens"] = 12


def charset_on_sse(rec: Record) -> None:
    set_header(rec, "content-type", "text/event-stream; charset=utf-8")


def drop_request_id(rec: Record) -> None:
    set_header(rec, "x-request-id", None)


def drop_rate_limits(rec: Record) -> None:
    answer(rec)["headers"] = [
        h for h in answer(rec)["headers"] if not h[0].startswith("x-ratelimit-")
    ]


CASES: list[tuple[str, Callable[[], Record], Change, set[tuple[str, str]]]] = [
    ("status", _chat(), server_error, {("status", "status")}),
    ("soft_error", _chat(), error_in_200, {("soft_error", "error")}),
    ("soft_error lmstudio", _responses(), lmstudio_unexpected_endpoint,
     {("soft_error", "error"), ("error_shape", "error")}),
    ("error_shape integer code", _not_found, integer_error_code, {("error_shape", "error.code")}),
    ("error_shape fastapi", _not_found, fastapi_not_found, {("error_shape", "error")}),
    ("error_shape text/plain", _not_found, ollama_page_not_found, {("error_shape", "error")}),
    ("enum error.type", _not_found, ollama_error_type, {("enum", "error.type")}),
    ("transport", _chat(stream=True), answered_json_to_a_stream, {("transport", "content-type")}),
    ("transport no response", _chat(), no_response, {("transport", "response")}),
    ("schema_missing", _chat(), drop_system_fingerprint, {("schema_missing", "system_fingerprint")}),
    ("schema_extra", _chat(), add_reasoning_content,
     {("schema_extra", "choices[].message.reasoning_content")}),
    ("schema_type responses arguments", _responses(tool=True), arguments_as_object,
     {("schema_type", "output[].arguments")}),
    ("schema_type chat arguments", _chat(tool=True), chat_arguments_as_object,
     {("schema_type", "choices[].message.tool_calls[].function.arguments")}),
    ("reassembled arguments", _chat(stream=True, tool=True), arguments_repeated_in_last_delta,
     {("schema_type", CHUNK_ARGUMENTS + "@json")}),
    ("enum finish_reason", _chat(), finish_reason_eos, {("enum", "choices[].finish_reason")}),
    ("enum object", _chat(), object_text_completion, {("enum", "object")}),
    ("event_missing", _responses(stream=True), drop_in_progress,
     {("event_missing", "events[response.in_progress]")}),
    ("event_missing whole tool call", _chat(stream=True, tool=True), whole_tool_call_in_one_delta,
     {("event_missing", "events[chunk.tool_calls.delta+]")}),
    ("event_missing role chunk", _chat(stream=True), role_in_every_delta,
     {("event_missing", "events[chunk.role]"),
      ("schema_missing", "events[chunk].choices[].delta.refusal")}),
    ("event_extra", _responses(stream=True), add_queued, {("event_extra", "events[response.queued]")}),
    ("event_order usage chunk", _chat(stream=True), usage_chunk_before_finish,
     {("event_order", "events[chunk.usage]")}),
    ("event_terminal [DONE]", _chat(stream=True), drop_done, {("event_terminal", "events[terminal]")}),
    ("event_terminal completed", _responses(stream=True), drop_completed,
     {("event_terminal", "events[terminal]")}),
    ("event_sequence", _responses(stream=True), numbered_from_one,
     {("event_sequence", "events[response.created].sequence_number")}),
    ("event shape", _responses(stream=True, tool=True), done_without_name,
     {("schema_missing", "events[response.function_call_arguments.done].name")}),
    ("embedded response shape", _responses(stream=True), response_without_store,
     {("schema_missing", "events[response.*].response.store")}),
    ("header request id", _chat(), drop_request_id, {("header", "headers.x-request-id")}),
    ("header rate limits", _chat(), drop_rate_limits, {("header", "headers.x-ratelimit-*")}),
    ("header charset", _chat(stream=True), charset_on_sse, {("header", "headers.content-type")}),
    ("vllm omits nulls", _chat(stream=True), omit_nulls, {
        ("schema_type", "events[chunk].usage"),
        ("schema_type", "events[chunk].choices[].finish_reason"),
        ("schema_missing", "events[chunk].choices[].logprobs"),
        ("schema_missing", "events[chunk].choices[].delta.refusal"),
    }),
    ("text ids and timestamps are not compared", _chat(), different_words, set()),
]  # fmt: skip


@pytest.mark.parametrize(
    ("base", "change", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_one_change_gives_exactly_its_divergence(
    base: Callable[[], Record], change: Change, expected: set[tuple[str, str]]
) -> None:
    original = base()
    found = compare_records(original, replay(original, change=change))
    assert {(f.kind, f.path) for f in found} == expected
    assert all(f.kind in KINDS for f in found)


def test_every_kind_has_a_case() -> None:
    """Every kind a comparison finds (`client` comes from the SDK impact harness:
    tests/unit/test_severity.py)."""
    covered = {kind for _, _, _, expected in CASES for kind, _ in expected}
    assert covered == set(KINDS) - {"client"}


@pytest.mark.parametrize(
    "make", [_chat(), _chat(stream=True, tool=True), _responses(stream=True), models_record]
)
def test_a_replay_identical_on_the_wire_has_no_divergence(make: Callable[[], Record]) -> None:
    original = make()
    assert compare_records(original, replay(original)) == []


def test_values_are_short_json_and_message_is_one_line() -> None:
    original = chat_record(stream=True)
    found = compare_records(original, replay(original, change=omit_nulls))
    finish = next(f for f in found if f.path.endswith("finish_reason"))
    assert (finish.baseline, finish.candidate) == ("null|string", "string")
    assert all("\n" not in f.message for f in found)


def test_a_type_change_reports_the_topmost_path_only() -> None:
    original = responses_record(tool=True)
    found = compare_records(original, replay(original, change=arguments_as_object))
    [finding] = found
    assert (finding.baseline, finding.candidate) == ("string", "object")


# --- the frame, several targets and noise -----------------------------------------------


def _analyse(records: list[Record], ignore: tuple[str, ...] = ()) -> pd.DataFrame:
    return divergences(records, ignore)


def _found(frame: pd.DataFrame) -> set[tuple[str, str, str, str]]:
    return set(zip(frame["pair_id"], frame["label"], frame["kind"], frame["path"], strict=True))


def test_the_frame_has_one_row_per_finding_per_target() -> None:
    base = chat_record(id="o1")
    records = [
        base,
        replay(base, id="r-ollama", label="ollama", change=drop_system_fingerprint),
        replay(base, id="r-vllm", label="vllm", change=drop_request_id),
    ]
    frame = _analyse(records)
    assert list(frame.columns) == DIVERGENCE_COLUMNS
    assert _found(frame) == {
        ("r-ollama", "ollama", "schema_missing", "system_fingerprint"),
        ("r-vllm", "vllm", "header", "headers.x-request-id"),
    }
    assert set(frame["baseline_id"]) == {"o1"}
    assert set(frame["baseline_label"]) == {"openai"}


def test_no_pairs_gives_an_empty_frame_with_the_columns() -> None:
    frame = _analyse([chat_record(id="o1")])
    assert frame.empty
    assert list(frame.columns) == DIVERGENCE_COLUMNS


def test_a_path_that_differs_between_two_replays_to_one_label_is_noise() -> None:
    base = chat_record(id="o1")

    def flaky_and_no_request_id(rec: Record) -> None:
        drop_request_id(rec)
        drop_system_fingerprint(rec)

    records = [
        base,
        replay(base, id="r1", label="vllm", change=flaky_and_no_request_id),
        replay(base, id="r2", label="vllm", change=drop_request_id),
    ]
    assert _found(_analyse(records)) == {
        ("r1", "vllm", "header", "headers.x-request-id"),
        ("r2", "vllm", "header", "headers.x-request-id"),
    }


def test_noise_of_one_label_does_not_hide_another_labels_divergence() -> None:
    base = chat_record(id="o1")
    records = [
        base,
        replay(base, id="r1", label="vllm", change=drop_system_fingerprint),
        replay(base, id="r2", label="vllm"),
        replay(base, id="r3", label="ollama", change=drop_system_fingerprint),
    ]
    assert _found(_analyse(records)) == {("r3", "ollama", "schema_missing", "system_fingerprint")}


def test_what_differs_between_repeated_originals_is_noise() -> None:
    first = chat_record(id="o1", seq=0)
    second = replay(first, id="o2", label="openai", change=drop_system_fingerprint)
    second["replay_of"] = None
    records = [
        first,
        second,
        replay(
            first,
            id="r1",
            label="vllm",
            change=drop_fingerprint_and_request_id,
        ),
        replay(second, id="r2", label="vllm", change=drop_request_id),
    ]
    found = _found(_analyse(records))
    assert found == {
        ("r1", "vllm", "header", "headers.x-request-id"),
        ("r2", "vllm", "header", "headers.x-request-id"),
    }


def test_what_differs_when_replayed_to_the_baselines_own_label_is_noise() -> None:
    base = chat_record(id="o1")
    records = [
        base,
        replay(base, id="r-self", label="openai", change=drop_system_fingerprint),
        replay(
            base,
            id="r-vllm",
            label="vllm",
            change=drop_fingerprint_and_request_id,
        ),
    ]
    assert _found(_analyse(records)) == {("r-vllm", "vllm", "header", "headers.x-request-id")}


def test_ignored_paths_are_dropped_with_or_without_an_event_prefix() -> None:
    base = chat_record(id="o1", stream=True)
    records = [base, replay(base, id="r1", label="vllm", change=omit_nulls)]
    frame = _analyse(records, ignore=("usage.*", "choices[].logprobs"))
    assert set(frame["path"]) == {
        "events[chunk].choices[].finish_reason",
        "events[chunk].choices[].delta.refusal",
    }


def test_a_descendant_of_a_noisy_path_is_noise() -> None:
    base = chat_record(id="o1")

    def no_usage(rec: Record) -> None:
        del body(rec)["usage"]

    def retyped_usage_detail(rec: Record) -> None:
        body(rec)["usage"]["prompt_tokens_details"] = None

    records = [
        base,
        replay(base, id="r1", label="vllm", change=no_usage),
        replay(base, id="r2", label="vllm", change=retyped_usage_detail),
    ]
    assert _analyse(records).empty


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("usage.*", "usage", True),
        ("usage.*", "usage.prompt_tokens_details.cached_tokens", True),
        ("usage.*", "usage_extra", False),
        ("system_fingerprint", "system_fingerprint", True),
        ("system_fingerprint", "system_fingerprint.x", False),
        ("choices[].message.*", "choices[].message.content", True),
        ("headers.x-ratelimit-*", "headers.x-ratelimit-*", True),
    ],
)
def test_ignore_globs(pattern: str, path: str, hit: bool) -> None:
    rx = glob_regex([pattern])
    assert rx is not None
    assert bool(rx.fullmatch(path)) is hit


def test_a_stream_event_of_one_label_keeps_its_position_as_evidence() -> None:
    base = responses_record(id="o1", stream=True)
    cand = replay(base, id="r1", label="ollama", change=drop_in_progress)
    [row] = _analyse([base, cand]).itertuples()
    assert (row.baseline, row.candidate) == ("#1", "")


def test_events_are_labelled_from_their_data_not_their_timing() -> None:
    base = chat_record(id="o1", stream=True)

    def slower(rec: Record) -> None:
        answer(rec)["events"] = as_events(payloads(rec), named=False)
        for ev in events_of(rec):
            ev["t_ms"] = (ev.get("t_ms") or 0.0) * 3

    assert compare_records(base, replay(base, change=slower)) == []


def test_generated_argument_values_are_never_compared() -> None:
    """Review F15: `{"type": "celsius"}` vs `{"type": "fahrenheit"}` is the model's choice."""
    base = chat_record(tool=True)
    body(base)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = (
        '{"city": "Paris", "type": "celsius"}'
    )

    def other_unit(rec: Record) -> None:
        body(rec)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = (
            '{"city": "Paris", "type": "fahrenheit"}'
        )

    assert compare_records(base, replay(base, change=other_unit)) == []


@pytest.mark.parametrize(
    ("make", "odd", "finding", "flagged"),
    [
        (
            lambda: chat_record(stream=True),
            {"choices": 5, "object": "chat.completion.chunk"},
            ("schema_type", "events[chunk].choices"),
            "`events[chunk].choices`: 5 is not of type 'array'",
        ),
        (
            lambda: responses_record(stream=True),
            {"type": {"nested": True}, "sequence_number": 1},
            ("event_extra", "events[message]"),
            "`events[text]`: not a typed JSON event",
        ),
    ],
)
def test_odd_but_valid_json_events_are_reported(
    make: Callable[[], Record], odd: Any, finding: tuple[str, str], flagged: str
) -> None:
    """Review F18: an upstream may send any JSON; the analysis reports it, never crashes."""
    base = make()
    cand = replay(
        base, change=lambda rec: set_payloads(rec, [*payloads(rec)[:1], odd], renumber=False)
    )
    assert finding in {(f.kind, f.path) for f in compare_records(base, cand)}
    rows = conformance([base, cand])
    assert set(rows["pair_id"]) == {cand["id"]}
    assert rows["message"].str.startswith(flagged).any(), list(rows["message"])


def test_the_sequence_finding_says_which_number_came() -> None:
    original = _responses(stream=True)()
    found = compare_records(original, replay(original, change=numbered_from_one))
    said = [f.message for f in found if f.kind == "event_sequence"]
    assert said == ["`sequence_number` is 1 where 0 expected"]


def test_a_quoted_error_message_cut_short_says_so() -> None:
    """A server's message past the quote's length ends in an ellipsis, never mid-word silently."""
    said = "wirediff stand-in: OpenAI API implements POST /v1/embeddings, but the stand-in does not"
    quoted = error_message({"error": {"message": said + " emulate it"}})
    assert len(quoted) == 80 and quoted == said[:79] + "…"
    assert error_message({"error": {"message": "short"}}) == "short"
