"""The replay plan without sockets: what answers produce, the dependency graph, filters
and the remapping of ids to what the target returned."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fixtures.replay_records import (
    INNER,
    OUTER,
    T,
    as_error,
    fc_response,
    rec,
    session,
    two_hop,
)
from wirediff._types import Event, Record
from wirediff.errors import PlanError
from wirediff.replay.filters import parse_filter
from wirediff.replay.plan import failure, make_plan, resolve
from wirediff.replay.request import prepare
from wirediff.replay.safety import unsafe_reason
from wirediff.replay.slots import produced_slots


def test_slots_of_a_response_object_and_a_chat_completion() -> None:
    r = rec("a", body={"model": "m"}, resp=fc_response("resp_1", "call_1"))
    assert produced_slots(r) == {
        ("id",): "resp_1",
        ("item", "function_call", 0): "fc_1",
        ("call", 0): "call_1",
    }
    chat = {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "message": {"tool_calls": [{"id": "call_a"}, {"id": "call_b"}]}}],
    }
    c = rec("b", path="/v1/chat/completions", body={}, resp=chat)
    assert produced_slots(c) == {
        ("id",): "chatcmpl-1",
        ("tool_call", 0, 0): "call_a",
        ("tool_call", 0, 1): "call_b",
    }


def test_slots_of_streams() -> None:
    done = fc_response("resp_9", "call_9")
    events: list[Event] = [
        {"event": "response.created", "data": {"response": {"id": "resp_9", "output": []}}},
        {"event": "response.completed", "data": {"response": done}},
    ]
    assert (
        produced_slots(rec("a", body={"stream": True}, resp=None, events=events))[("call", 0)]
        == "call_9"
    )
    # no terminal event: items are taken from output_item events
    partial: list[Event] = [
        {"event": None, "data": {"response": {"id": "resp_8"}}},
        {
            "event": None,
            "data": {"output_index": 0, "item": {"type": "function_call", "call_id": "call_8"}},
        },
    ]
    assert produced_slots(rec("b", resp=None, events=partial)) == {
        ("id",): "resp_8",
        ("call", 0): "call_8",
    }
    chunks: list[Event] = [
        {"event": None, "data": {"id": "chatcmpl-2", "choices": [
            {"index": 0, "delta": {"role": "assistant"}}]}},
        {"event": None, "data": {"id": "chatcmpl-2", "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_s"}]}}]}},
        {"event": None, "data": "[DONE]"},
    ]  # fmt: skip
    c = rec("c", path="/v1/chat/completions", resp=None, events=chunks)
    assert produced_slots(c) == {("id",): "chatcmpl-2", ("tool_call", 0, 0): "call_s"}


def test_lookups_and_model_cards_produce_nothing() -> None:
    card = rec("m", "GET", "/v1/models/gpt-4o-mini", resp={"id": "gpt-4o-mini"})
    get = rec("g", "GET", "/v1/responses/resp_1", resp={"id": "resp_1"})
    assert produced_slots(card) == {} and produced_slots(get) == {}


def deps(plan: Any) -> dict[str, list[tuple[str, str, bool]]]:
    return {
        n.id: sorted((r.producer, r.where, r.essential) for r in n.refs)
        for n in plan.nodes
        if n.refs
    }


def test_dependency_graph() -> None:
    plan = make_plan(session())
    assert deps(plan) == {
        "r2": [("r1", "previous_response_id", True)],
        "fc2": [("fc", "call_id", True), ("fc", "id", False), ("fc", "previous_response_id", True)],
        "ct2": [("ct", "id", False), ("ct", "tool_call_id", True)],
        "get": [("r1", "path", True)],
        "items": [("fc", "query", False), ("r1", "path", True)],
        "del": [("r1", "path", True)],
    }
    assert plan.dependents["r1"] == ["r2", "get", "items", "del"]
    # the model name in a card lookup and in bodies is never taken for an id
    assert "card" not in deps(plan)


def test_order_is_start_time_not_file_order() -> None:
    a = rec("a", body={}, resp={"id": "resp_a"}, started=10.0)
    b = rec("b", body={"previous_response_id": "resp_a"}, started=20.0)
    plan = make_plan([b, a])  # a stream that ended late is written after what followed it
    assert [n.id for n in plan.nodes] == ["a", "b"] and deps(plan) == {
        "b": [("a", "previous_response_id", True)]
    }


def test_replays_skipped_records_and_duplicates_are_not_replayed() -> None:
    orig = rec("o", body={})
    replay = rec("x", body={}, replay_of="o")
    skipped = rec("y", body={})
    as_error("skipped", "m")(skipped)
    assert [n.id for n in make_plan([orig, replay, skipped, orig]).nodes] == ["o"]


@pytest.mark.parametrize(
    ("method", "path", "unsafe"),
    [
        ("POST", "/v1/chat/completions", False),
        ("POST", "/v1/completions", False),
        ("POST", "/v1/responses", False),
        ("POST", "/v1/embeddings", False),
        ("POST", "/v1/moderations", False),
        ("GET", "/v1/files/file_1/content", False),
        ("GET", "/anything/else", False),
        ("DELETE", "/v1/responses/resp_1", True),
        ("POST", "/v1/responses/resp_1/cancel", True),
        ("POST", "/v1/files", True),
        ("POST", "/v1/batches", True),
        ("POST", "/v1/images/generations", True),
        ("PUT", "/v1/chat/completions", True),
    ],
)
def test_only_generation_and_read_endpoints_are_safe(method: str, path: str, unsafe: bool) -> None:
    assert (unsafe_reason(rec("a", method, path)) is not None) == unsafe


def test_unsafe_and_truncated_are_skipped_unless_allowed() -> None:
    trunc = rec("t", body={"x": 1})
    trunc["request"]["truncated"] = True
    plan = make_plan([*session(), trunc])
    skips = {n.id: n.skip for n in plan.nodes if n.skip}
    assert set(skips) == {"del", "t"}
    assert "--allow-unsafe" in str(skips["del"]) and "truncated" in str(skips["t"])
    allowed = make_plan([*session(), trunc], allow_unsafe=True)
    assert {n.id for n in allowed.nodes if n.skip} == {"t"}


def test_filters_and_their_dependencies() -> None:
    recs = session()
    recs[1]["tags"]["stream"] = True
    only = [parse_filter("family=responses,stream=true")]
    plan = make_plan(recs, filters=only)
    # r2 is selected; r1 comes along because r2 continues it
    assert [(n.id, n.wanted) for n in plan.nodes] == [("r1", False), ("r2", True)]
    both = [parse_filter("method=get,path!=/v1/models*"), parse_filter("endpoint=/v1/chat/*")]
    assert [n.id for n in make_plan(recs, filters=both).nodes if n.wanted] == [
        "ct", "ct2", "get", "items",
    ]  # fmt: skip
    assert [n.id for n in make_plan(recs, filters=[parse_filter("id=fc2")]).nodes] == [
        "fc", "fc2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("outer", "inner", "only", "replayed", "left_out"),
    [
        ({}, {}, None, ["outer", "after"], {INNER: 1}),
        # not an inner hop
        ({}, {"started": 101.5}, None, ["outer", "inner", "after"], {}),  # after the outer one
        ({}, {"duration_ms": 1000.0}, None, ["outer", "inner", "after"], {}),  # ends after it
        ({}, {"body": {"model": "qwen", "messages": [{"role": "user", "content": "Other"}]}},
         None, ["outer", "inner", "after"], {}),
        ({}, {"listener": OUTER}, None, ["outer", "inner", "after"], {}),
        ({}, {"session": "t"}, None, ["outer", "inner", "after"], {}),
        ({"started": 100.2}, {}, None, ["inner", "outer", "after"], {}),  # inner came first
        # an outer hop without a duration contains what starts soon after it
        ({"duration_ms": None}, {}, None, ["outer", "after"], {INNER: 1}),
        # a filter naming a listener or a label chooses hops itself
        ({}, {}, "listener=*:8001", ["inner"], {}),
        ({}, {}, "label=upstream", ["inner"], {}),
        ({}, {}, "listener=*", ["outer", "inner", "after"], {}),
        ({}, {}, "label=gateway", ["outer", "after"], {}),
        ({}, {}, "method=POST", ["outer"], {INNER: 1}),
    ],
)  # fmt: skip
def test_inner_hops_are_not_replayed_twice(
    outer: dict[str, Any], inner: dict[str, Any], only: str | None, replayed: list[str],
    left_out: dict[str, int],
) -> None:  # fmt: skip
    plan = make_plan(two_hop(outer, inner), filters=[parse_filter(only)] if only else [])
    assert [n.id for n in plan.nodes] == replayed
    assert plan.hops_left_out == left_out


@pytest.mark.parametrize("bad", ["", "colour=red", "family", " , "])
def test_bad_filters(bad: str) -> None:
    with pytest.raises(PlanError, match="--only"):
        parse_filter(bad)


def outcome(rid: str, **kw: Any) -> Record:
    """A replay record: the target's answer to an original."""
    return rec(rid, replay_of=rid, **kw)


def test_resolve_maps_original_ids_to_the_targets() -> None:
    plan = make_plan(session())
    done = {
        "fc": outcome("fc", body={}, resp=fc_response("resp_T3", "call_T1", "fc_T1")),
        "r1": outcome("r1", body={}, resp={"id": "resp_T1"}),
    }
    mapping, why = resolve(plan.by_id["fc2"], done.get)
    assert why is None
    assert mapping == {"resp_3": "resp_T3", "call_1": "call_T1", "fc_1": "fc_T1"}
    out = prepare(plan.by_id["fc2"].rec, T, "sk-new", mapping)
    body = json.loads(out.content or b"")
    assert body["previous_response_id"] == "resp_T3"
    assert [i["call_id"] for i in body["input"]] == ["call_T1", "call_T1"]
    assert body["input"][0]["id"] == "fc_T1"
    mapping, why = resolve(plan.by_id["items"], done.get)  # the path and a paging cursor
    assert why is None
    assert prepare(plan.by_id["items"].rec, T, None, mapping).url == (
        "http://target.test:9000/v1/responses/resp_T1/input_items?limit=5&after=fc_T1"
    )


def test_a_step_the_target_made_meaningless_is_skipped_with_the_reason() -> None:
    plan = make_plan(session())
    text_only = outcome("fc", body={}, resp={"id": "resp_T3", "output": [{"type": "message"}]})
    _, why = resolve(plan.by_id["fc2"], {"fc": text_only}.get)
    assert why is not None and "call_id call_1" in why and "no function call #1" in why
    lm = outcome("r1", body={}, resp={"error": "Unexpected endpoint or method."})
    lm["tags"]["soft_error"], lm["tags"]["signature"] = True, "lmstudio.unexpected_endpoint"
    _, why = resolve(plan.by_id["r2"], {"r1": lm}.get)
    assert why == (
        "previous_response_id resp_1 comes from r1, but the target answered it with HTTP 200 "
        "and an error body (lmstudio.unexpected_endpoint)"
    )
    _, why = resolve(plan.by_id["get"], {"r1": outcome("r1", body={}, status=404)}.get)
    assert why is not None and "HTTP 404" in why
    skipped = outcome("r1")
    as_error("skipped", "x")(skipped)
    assert failure(skipped) == "it was skipped (x)"


def test_unmappable_soft_references_keep_the_original_value() -> None:
    plan = make_plan(session())
    no_item_ids = outcome("fc", body={}, resp={"id": "resp_T3", "output": [
        {"type": "function_call", "call_id": "call_T1"}]})  # fmt: skip
    mapping, why = resolve(plan.by_id["fc2"], {"fc": no_item_ids}.get)
    assert why is None and "fc_1" not in mapping
    body = json.loads(prepare(plan.by_id["fc2"].rec, T, None, mapping).content or b"")
    assert body["input"][0] == {"type": "function_call", "id": "fc_1", "call_id": "call_T1",
                                "name": "f"}  # fmt: skip
