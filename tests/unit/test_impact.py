"""The SDK impact harness: recorded answers fed back into the real openai SDK. Base answers
(what OpenAI sends) give no failure; each change is judged by what the SDK does with it."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from tests.fixtures.records import (
    answer,
    chat_record,
    error_record,
    events_of,
    make_record,
    models_record,
    responses_record,
)
from wirediff._types import Event, Record
from wirediff.analysis.comparison import impact as impact_module
from wirediff.analysis.comparison.impact import impact, skeleton

BASES: list[tuple[str, Callable[[], Record], dict[str, str]]] = [
    ("chat", lambda: chat_record(), {"content": "text", "usage": "present"}),
    ("chat tool call", lambda: chat_record(tool=True), {"tool_arguments": "object"}),
    ("chat stream", lambda: chat_record(stream=True), {"content": "text", "final.content": "text"}),
    ("chat stream tool", lambda: chat_record(stream=True, tool=True), {"tool_arguments": "object"}),
    ("responses", lambda: responses_record(), {"output_text": "text", "usage": "present"}),
    ("responses tool", lambda: responses_record(tool=True), {"tool_arguments": "object"}),
    ("responses stream", lambda: responses_record(stream=True), {"final.output_text": "text"}),
    ("models", lambda: models_record(), {"models": "some"}),
    ("an error status", lambda: error_record(), {"raises": "NotFoundError"}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "make", "expected"), BASES, ids=[b[0] for b in BASES])
def test_openai_shaped_answers_give_what_apps_read(
    name: str, make: Callable[[], Record], expected: dict[str, str]
) -> None:
    outcome = impact(make())
    assert outcome.judged and outcome.failures == ()
    assert {k: outcome.get(k) for k in expected} == expected


def _events(rec: Record) -> list[Event]:
    return events_of(rec)


def test_response_created_without_output_breaks_the_stream_helper() -> None:
    rec = responses_record(stream=True)
    for ev in _events(rec):
        if ev["data"]["type"] == "response.created":
            del ev["data"]["response"]["output"]
    (failure,) = impact(rec).failures
    assert failure.probe == "client.responses.stream()"
    assert failure.error.startswith("raises AttributeError")
    assert failure.where.startswith("openai/lib/streaming/responses/")
    assert "snapshot.output" in failure.where
    assert failure.evidence.startswith("`client.responses.stream()` raises AttributeError")


def test_tool_arguments_as_an_object_do_not_parse() -> None:
    rec = chat_record(tool=True)
    call = answer(rec)["body"]["choices"][0]["message"]["tool_calls"][0]
    call["function"]["arguments"] = {"city": "Paris"}
    assert impact(rec).get("tool_arguments") == "not a string (dict)"


def test_streamed_tool_arguments_are_judged_joined() -> None:
    rec = chat_record(stream=True, tool=True)
    for ev in _events(rec):
        for choice in ev["data"].get("choices", []) if isinstance(ev["data"], dict) else []:
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                if call.get("function", {}).get("arguments"):
                    call["function"]["arguments"] = call["function"]["arguments"].replace('"', "'")
    assert impact(rec).get("tool_arguments") == "not JSON"


def test_include_usage_without_the_usage_chunk_loses_usage() -> None:
    rec = chat_record(stream=True)
    assert rec["request"]["body"]["stream_options"] == {"include_usage": True}
    events = _events(rec)
    answer(rec)["events"] = [
        ev for ev in events if not (isinstance(ev["data"], dict) and ev["data"].get("usage"))
    ]
    assert impact(chat_record(stream=True)).get("usage") == "present"
    assert impact(rec).get("usage") == "absent"


def test_a_soft_error_for_a_stream_yields_nothing_and_breaks_the_helper() -> None:
    """LM Studio's answer to an unknown endpoint: 200, JSON, `{"error": "Unexpected…"}`. The
    plain stream yields no chunk and raises nothing; the stream helper fails an assertion."""
    rec = make_record(
        id="s1",
        path="/v1/chat/completions",
        request_body={"model": "m", "messages": [], "stream": True},
        body={"error": "Unexpected endpoint or method. (POST /v1/chat/completions)"},
    )
    outcome = impact(rec)
    assert outcome.get("chunks") == "none" and outcome.get("content") == "empty"
    assert outcome.get("raises") is None
    (failure,) = outcome.failures
    assert failure.probe == "client.chat.completions.stream()"
    assert failure.error.startswith("raises AssertionError")
    assert "snapshot is not None" in failure.where


def test_an_error_event_in_a_stream_raises_api_error() -> None:
    rec = chat_record(stream=True)
    answer(rec)["events"] = [
        *_events(rec)[:2],
        {"t_ms": 90.0, "event": None, "data": {"error": {"message": "Context size exceeded"}}},
    ]
    assert impact(rec).get("raises") == "APIError: Context size exceeded"


def test_a_truncated_body_is_not_judged() -> None:
    rec = chat_record()
    answer(rec)["truncated"] = True
    assert not impact(rec).judged


def test_the_sdk_runs_once_per_answer_skeleton(monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated text and ids do not change the skeleton; emptiness and kinds do."""
    a, b = chat_record(id="a"), chat_record(id="b")
    answer(b)["body"]["choices"][0]["message"]["content"] = "Another answer entirely."
    answer(b)["body"]["id"] = "chatcmpl-other"
    assert skeleton(a) == skeleton(b)
    empty = copy.deepcopy(a)
    answer(empty)["body"]["choices"][0]["message"]["content"] = ""
    assert skeleton(empty) != skeleton(a)
    measured: list[str] = []
    real = impact_module._measure

    def counting(rec: Record) -> Any:
        measured.append(rec["id"])
        return real(rec)

    monkeypatch.setattr(impact_module, "_memo", {})
    monkeypatch.setattr(impact_module, "_measure", counting)
    assert impact(a) == impact(b)
    impact(empty)
    assert measured == [a["id"], empty["id"]]


def test_the_skeleton_is_json() -> None:
    key = skeleton(responses_record(stream=True, tool=True))
    assert key is not None and json.loads(key)


def _set_positions(rec: Record, **values: int) -> None:
    for data in (ev["data"] for ev in _events(rec) if isinstance(ev["data"], dict)):
        for key, value in values.items():
            if key in data:
                data[key] = value
        for choice in data.get("choices", []) if "index" in values else []:
            choice["index"] = values["index"]


@pytest.mark.parametrize(
    ("make", "positions", "where"),
    [
        (lambda: responses_record(stream=True), {"output_index": 5}, "snapshot.output[event"),
        (lambda: responses_record(stream=True), {"content_index": 3}, "output.content[event"),
        (lambda: chat_record(stream=True), {"index": 2}, "choices[choice.index]"),
    ],
    ids=["output_index", "content_index", "a choice's index"],
)
def test_a_stream_pointing_past_what_it_sent_breaks_the_helper_whatever_was_judged_before(
    make: Callable[[], Record], positions: dict[str, int], where: str
) -> None:
    """The stream helpers look their snapshots up by these numbers: an answer that differs
    from one judged before only in them is judged again, and the helper raises."""
    assert impact(make()).failures == ()
    rec = make()
    _set_positions(rec, **positions)
    (failure,) = impact(rec).failures
    assert failure.error.startswith("raises IndexError") and where in failure.where
    assert skeleton(rec) != skeleton(make())


def test_a_text_answer_is_judged_by_what_it_parses_to() -> None:
    """The SDK tries a text answer as JSON: one that parses is read as that value, one that
    does not raises, whatever answer of the same kind was judged before it. What the SDK
    returned is said as such, never as a line of wirediff's own."""
    rec = chat_record()
    answer(rec)["body"], answer(rec)["text"] = None, '{"choices": null}'
    (parsed,) = impact(rec).failures
    assert parsed.error.startswith("returns `choices: None`") and parsed.where == ""
    answer(rec)["text"] = "plain words"
    (unparsed,) = impact(rec).failures
    assert unparsed.error.startswith("raises JSONDecodeError: Expecting value")
    assert skeleton(rec) != skeleton({**rec, "response": {**answer(rec), "text": "{}"}})


@pytest.mark.parametrize(
    ("text", "raised"),
    [
        ("caf\u00e9 \u2603", "JSONDecodeError: Expecting value"),
        ("caf\udce9", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9"),
        ("\ud83d", "JSONDecodeError: Expecting value"),  # json reads it back as the escape
    ],
    ids=["non-ASCII", "an undecodable byte", "a lone escape"],
)
def test_headers_and_text_any_capture_holds_are_served_as_their_bytes(
    text: str, raised: str
) -> None:
    """A header value or a text body the SDK would never see as such (not ASCII, a byte no
    UTF-8 decodes, a lone surrogate escape) is served as the bytes it stands for."""
    rec = chat_record()
    answer(rec)["headers"] = [*answer(rec)["headers"], ["x-note", text]]
    assert impact(rec).failures == ()
    answer(rec)["body"], answer(rec)["text"] = None, text
    (failure,) = impact(rec).failures  # the SDK parses the bytes it was sent
    assert failure.error.startswith(f"raises {raised}")


def test_a_body_kept_as_base64_is_served_as_its_bytes() -> None:
    """A 2xx body no UTF-8 decodes, as the `fault-binary` stand-in sends, breaks the SDK's
    read of it; JSON in UTF-16, which Python's JSON reads, does not. A value that is no base64
    is not judged, and is no empty body, which is."""
    rec = chat_record()
    answer(rec)["body"], answer(rec)["b64"] = None, base64.b64encode(b"\x89\xff not utf-8").decode()
    (failure,) = impact(rec).failures
    assert failure.error.startswith("raises UnicodeDecodeError: 'utf-8' codec can't decode")
    utf16 = json.dumps(answer(chat_record())["body"]).encode("utf-16")
    answer(rec)["b64"] = base64.b64encode(utf16).decode()
    assert impact(rec).failures == () and impact(rec).judged
    for hostile in ("not base64!", 5):
        cast(Any, answer(rec))["b64"] = hostile
        assert not impact(rec).judged
        empty = chat_record()
        answer(empty)["body"] = None
        (failure,) = impact(empty).failures
        assert failure.error.startswith("raises JSONDecodeError")


def test_an_outcome_measured_with_the_node_sdk_is_not_reused_without_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """One process may analyse with the Node SDK on, then off (as pytest's tiers do): the
    remembered outcome of the first must not carry a Node failure into the second."""
    from wirediff.analysis.comparison.clients import node
    from wirediff.analysis.comparison.clients.observations import Failure, Observations

    found = Observations(failures=[Failure("client.chat.completions.stream()", "raises X")])
    sdk = node.NodeSdk("node", tmp_path, "6.0.0")
    monkeypatch.setattr(node, "node_sdk", lambda: sdk)
    monkeypatch.setattr(node, "measure", lambda jobs: [found for _ in jobs])
    rec = chat_record(stream=True)
    assert [f.error for f in impact(rec).failures] == ["raises X"]
    monkeypatch.setattr(node, "node_sdk", lambda: "turned off")
    assert impact(rec).failures == ()


def test_a_node_sdk_not_found_names_no_path_of_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report says why openai-node measured nothing; a report may be shared, so the
    folders looked in by default stay out of it, and a folder the user named is named back."""
    from wirediff.analysis.comparison.clients import node

    monkeypatch.setattr("shutil.which", lambda name: "/usr/bin/node")
    monkeypatch.setattr(node, "_candidates", lambda: [tmp_path / "nowhere"])
    node._find.cache_clear()
    said = node._find("", "", str(tmp_path))
    assert said == (
        "no npm `openai` package found (set WIREDIFF_NODE_SDK to a folder holding "
        "node_modules/openai)"
    )
    assert str(tmp_path) not in said
    node._find.cache_clear()
    assert node._find(str(tmp_path), "", str(tmp_path)) == (
        f"no npm `openai` package in {tmp_path} (WIREDIFF_NODE_SDK)"
    )
    node._find.cache_clear()


@pytest.mark.parametrize(
    ("one", "other"),
    [('{"id": "chatcmpl-1", "obj', "plain words"), ("plain words", "plain wordz")],
    ids=["it breaks elsewhere", "it reads otherwise"],
)
def test_texts_that_fail_to_parse_apart_are_keyed_apart(one: str, other: str) -> None:
    """The clients raise with where the JSON broke (Python) or the text's start (Node): two
    such answers share no outcome."""
    rec, another = chat_record(), chat_record()
    answer(rec)["body"], answer(rec)["text"] = None, one
    answer(another)["body"], answer(another)["text"] = None, other
    assert skeleton(rec) != skeleton(another)


def test_an_event_cut_mid_frame_is_keyed_apart_from_a_whole_one() -> None:
    """It is served without its ending blank line, so no client reads it: a Responses stream
    whose `response.completed` came so breaks the stream helper, the whole one does not."""
    whole = responses_record(stream=True)
    cut = copy.deepcopy(whole)
    events_of(cut)[-1]["partial"] = True
    assert skeleton(whole) != skeleton(cut)
    assert not [f for f in impact(whole).failures if not f.client]
    assert any("response.completed" in f.error for f in impact(cut).failures if not f.client)
