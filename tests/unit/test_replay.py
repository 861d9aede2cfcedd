"""The replay planner and engine without sockets: dependency graph, remapping, filters,
safety, request preparation, and the engine against `httpx.MockTransport`."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from tests.fixtures.records import answer, bare_record, by_original, error_of, events_of
from wirediff._support import error_kind
from wirediff._types import Event, Record
from wirediff.cli.replay import main_replay
from wirediff.errors import PlanError
from wirediff.record.store import RecordWriter, latest_replays, load_records
from wirediff.record.tags import route
from wirediff.replay.config import Options
from wirediff.replay.connections import Connections
from wirediff.replay.filters import parse_filter
from wirediff.replay.output import replay_history
from wirediff.replay.plan import Plan, failure, make_plan, resolve, resumed
from wirediff.replay.request import prepare
from wirediff.replay.safety import unsafe_reason
from wirediff.replay.sender import TargetRun, TokenBucket
from wirediff.replay.slots import produced_slots
from wirediff.replay.targets import Target, default_label, parse_pairs, parse_rate

T = Target("tgt", "http://target.test:9000/v1")


def mock(handler: Callable[[httpx.Request], Any]) -> Connections:
    """The target as `handler` answers, over as many connections as a run asks for."""
    return Connections(64, lambda: httpx.MockTransport(handler))


_clock = iter(range(1, 10_000))


def rec(
    id: str,
    method: str = "POST",
    path: str = "/v1/responses",
    body: Any = None,
    *,
    resp: Any = None,
    events: list[Event] | None = None,
    status: int = 200,
    started: float | None = None,
    headers: list[list[str]] | None = None,
    label: str = "openai",
    listener: str | None = None,
    session: str = "s",
    replay_of: str | None = None,
    duration_ms: float | None = None,
) -> Record:
    """A small original record, as the capture would have written it."""
    family, endpoint, prefix = route(path)
    return {
        "format": "wirediff/1",
        "id": id,
        "session": session,
        "label": label,
        "seq": 0,
        "replay_of": replay_of,
        "listener": listener,
        "started": float(next(_clock)) if started is None else started,
        "ttfb_ms": None,
        "duration_ms": duration_ms,
        "request": {
            "method": method,
            "path": path,
            "url": "http://orig.test" + path,
            "http_version": "HTTP/1.1",
            "headers": headers
            if headers is not None
            else [
                ["host", "orig.test"],
                ["content-type", "application/json"],
                ["authorization", "Bearer sha256:abc"],
                ["user-agent", "OpenAI/Python 2.0.0"],
            ],
            "body": body,
            "text": None,
            "size": 0,
        },
        "response": {
            "status": status,
            "reason": "",
            "http_version": "HTTP/1.1",
            "headers": [],
            "body": resp,
            "text": None,
            "size": 0,
            "events": events,
            "complete": True,
        },
        "error": None,
        "tags": {
            "family": family,
            "endpoint": endpoint,
            "prefix": prefix,
            "method": method,
            "stream": isinstance(body, dict) and body.get("stream") is True,
            "model": None,
            "sdk": None,
            "retry": 0,
            "auth": {
                "header": "authorization",
                "scheme": "Bearer",
                "fingerprint": "sha256:abc",
                "forwarded": True,
            },
            "soft_error": False,
            "signature": None,
        },
    }


def fc_response(rid: str, call_id: str, item_id: str = "fc_1") -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "output": [{"type": "function_call", "id": item_id, "call_id": call_id, "name": "f"}],
    }


# --- what answers produce ------------------------------------------------------------------


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


# --- the dependency graph ------------------------------------------------------------------


def session() -> list[Record]:
    """r1 → r2 (previous_response_id); fc → fc2 (call_id + previous_response_id);
    chat tool call → chat tool result; GET / input_items / DELETE of r1; a model lookup."""
    return [
        rec("r1", body={"model": "gpt-4o-mini", "input": "hi"}, resp={"id": "resp_1"}),
        rec("r2", body={"model": "gpt-4o-mini", "input": "more", "previous_response_id": "resp_1"},
            resp={"id": "resp_2"}),
        rec("fc", body={"model": "gpt-4o-mini", "input": "w?", "tools": [{"name": "f"}]},
            resp=fc_response("resp_3", "call_1")),
        rec("fc2", body={"model": "gpt-4o-mini", "previous_response_id": "resp_3", "input": [
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f"},
            {"type": "function_call_output", "call_id": "call_1", "output": "{}"}]},
            resp={"id": "resp_4"}),
        rec("ct", path="/v1/chat/completions", body={"model": "gpt-4o-mini", "messages": [],
                                                     "tools": [{"type": "function"}]},
            resp={"id": "cc1", "choices": [{"index": 0, "message": {"tool_calls": [{"id": "call_c"}]}}]}),
        rec("ct2", path="/v1/chat/completions", body={"model": "gpt-4o-mini", "messages": [
            {"role": "assistant", "tool_calls": [{"id": "call_c", "type": "function"}]},
            {"role": "tool", "tool_call_id": "call_c", "content": "18C"}]}),
        rec("get", "GET", "/v1/responses/resp_1", resp={"id": "resp_1"}),
        rec("items", "GET", "/v1/responses/resp_1/input_items?limit=5&after=fc_1"),
        rec("del", "DELETE", "/v1/responses/resp_1"),
        rec("card", "GET", "/v1/models/gpt-4o-mini", resp={"id": "gpt-4o-mini"}),
    ]  # fmt: skip


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


# --- filters -------------------------------------------------------------------------------


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


OUTER = "reverse:http://127.0.0.1:4000"
INNER = "reverse:http://127.0.0.1:8001"


def two_hop(outer: dict[str, Any], inner: dict[str, Any]) -> list[Record]:
    """One call seen on two listeners: the client's (through a gateway) and the gateway's."""
    ask = [{"role": "user", "content": "Say hello"}]
    outer = {
        "body": {"model": "alias", "messages": ask},
        "started": 100.0,
        "duration_ms": 1000.0,
        "listener": OUTER,
        "label": "gateway",
        **outer,
    }
    inner = {
        "body": {"model": "qwen", "messages": [{"role": "system", "content": "Be nice."}, *ask]},
        "started": 100.1,
        "duration_ms": 500.0,
        "listener": INNER,
        "label": "upstream",
        **inner,
    }
    return [
        rec("outer", path="/v1/chat/completions", **outer),
        rec("inner", path="/v1/chat/completions", **inner),
        rec("after", "GET", "/v1/models", started=102.0, listener=OUTER, label="gateway"),
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


# --- remapping -----------------------------------------------------------------------------


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


# --- the request sent ----------------------------------------------------------------------


FP = "sha256:0123456789ab"
AZURE = "https://az.example/openai/v1?api-version=2024-10-21"
REBASE_BASE: dict[str, Any] = {
    "path": "/v1/chat/completions",
    "target": "http://t:1/v1",
    "known": ("/v1/responses",),
}
"""An original's path, the target URL, and the paths of its session's other exchanges."""
OUTSIDE = "outside"
"""The path leaves the target's base path: not sent."""


@pytest.mark.parametrize(
    ("change", "url"),
    [
        ({}, "http://t:1/v1/chat/completions"),
        ({"target": "http://t:1/v1/"}, "http://t:1/v1/chat/completions"),
        ({"target": "http://t:1/api/v1"}, "http://t:1/api/v1/chat/completions"),
        ({"path": "/chat/completions"}, "http://t:1/v1/chat/completions"),
        ({"path": "/openai/v1/responses?x=1"}, "http://t:1/v1/responses?x=1"),
        ({"path": "/v1/models/gpt-4o-mini"}, "http://t:1/v1/models/llama3.2"),
        # a path no route knows: cut after the session's API prefix, else kept whole, which
        # only a target without a base path takes
        ({"path": "/v1/ask_url"}, "http://t:1/v1/ask_url"),
        ({"path": "/v1/ask_url?q=1"}, "http://t:1/v1/ask_url?q=1"),
        ({"path": "/v1"}, "http://t:1/v1"),
        ({"path": "/v1/v1/ask_url"}, "http://t:1/v1/v1/ask_url"),  # doubled as it was
        ({"path": "/health"}, OUTSIDE),
        ({"path": "/health", "target": "http://t:1"}, "http://t:1/health"),
        ({"path": "/v1x/ask"}, OUTSIDE),
        ({"path": "/v1x/ask", "target": "http://t:1/"}, "http://t:1/v1x/ask"),
        ({"path": "/v1/ask_url", "target": "http://t:1/api/v1"}, "http://t:1/api/v1/ask_url"),
        ({"path": "/health", "target": "http://t:1/api/v1"}, OUTSIDE),
        ({"path": "/openai/v1/ask", "known": ("/openai/v1/responses",)}, "http://t:1/v1/ask"),
        ({"path": "/v1/ask", "known": ("/openai/v1/responses",)}, "http://t:1/v1/ask"),
        ({"path": "/ask_url", "known": ("/chat/completions",)}, "http://t:1/v1/ask_url"),
        ({"path": "/v1/ask_url", "known": ()}, "http://t:1/v1/ask_url"),  # /v1 assumed
        ({"path": "/health", "known": ()}, OUTSIDE),
        # the target URL's own query goes on every request, after the original's
        ({"target": AZURE}, "https://az.example/openai/v1/chat/completions?api-version=2024-10-21"),
        ({"target": AZURE, "path": "/v1/chat/completions?x=1&api-version=2024-02-01"},
         "https://az.example/openai/v1/chat/completions?x=1&api-version=2024-10-21"),
        ({"target": AZURE, "path": "/v1/ask_url"},
         "https://az.example/openai/v1/ask_url?api-version=2024-10-21"),
        ({"target": AZURE, "path": "/health"}, OUTSIDE),
        ({"target": "https://az.example/?api-version=1", "path": "/health"},
         "https://az.example/health?api-version=1"),
        ({"target": AZURE, "path": f"/v1/chat/completions?key={FP}"},
         "https://az.example/openai/v1/chat/completions?api-version=2024-10-21"),
        # key-like query parameters hold fingerprints: never sent
        ({"path": f"/v1/models?key={FP}&limit=5"}, "http://t:1/v1/models?limit=5"),
        ({"path": f"/v1/models?limit=5&API_KEY={FP}"}, "http://t:1/v1/models?limit=5"),
        ({"path": f"/v1/models?api%5Fkey={FP}&a=1"}, "http://t:1/v1/models?a=1"),
        ({"path": f"/v1/models?api-key={FP}&apikey={FP}&access_token={FP}&token={FP}"},
         "http://t:1/v1/models"),
        ({"path": f"/v1/ask_url?token={FP}&tokens=3"}, "http://t:1/v1/ask_url?tokens=3"),
    ],
)  # fmt: skip
def test_rebase(change: dict[str, Any], url: str) -> None:
    case = {**REBASE_BASE, **change}
    known = [rec(f"k{i}", "GET", p) for i, p in enumerate(case["known"])]
    probe = rec("probe", "GET", case["path"])
    node = make_plan([*known, probe]).by_id["probe"]
    t = Target("t", case["target"], model_map={"gpt-4o-mini": "llama3.2"})
    if url == OUTSIDE:
        with pytest.raises(
            PlanError, match=f"leads to .*, outside the target's base path '{t.path}'"
        ):
            prepare(probe, t, None, {}, api_prefixes=node.api_prefixes)
        return
    out = prepare(probe, t, None, {}, api_prefixes=node.api_prefixes)
    assert out.url == url
    secret = [p.partition("=")[0] for p in case["path"].partition("?")[2].split("&") if FP in p]
    assert out.dropped == tuple(f"query parameter {n.replace('%5F', '_')}" for n in secret)


def test_target_urls_base_origin_and_query() -> None:
    t = Target("az", AZURE + "#frag")
    assert (t.base, t.origin, t.query) == (
        "https://az.example/openai/v1", "https://az.example", "api-version=2024-10-21",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("header", "override", "sent", "dropped"),
    [
        (("x-team", "a"), None, ("x-team", "a"), ()),
        # the body is sent decoded, as the capture holds it
        (("content-encoding", "gzip"), None, None, ()),
        # a value the capture replaced by its fingerprint is not the value: not sent…
        (("x-portkey-api-key", FP), None, None, ("header x-portkey-api-key",)),
        (("x-gateway-auth", f"Bearer {FP}"), None, None, ("header x-gateway-auth",)),
        # …unless --header sets it
        (("x-portkey-api-key", FP), "pk-new", ("x-portkey-api-key", "pk-new"), ()),
        # a value that only looks alike is a value
        (("x-trace", "sha256:0123"), None, ("x-trace", "sha256:0123"), ()),
        (("x-trace", FP + "cd"), None, ("x-trace", FP + "cd"), ()),
    ],
)  # fmt: skip
def test_headers_passed_through_or_not(
    header: tuple[str, str], override: str | None, sent: tuple[str, str] | None,
    dropped: tuple[str, ...],
) -> None:  # fmt: skip
    base = [["host", "orig.test"], ["content-type", "application/json"],
            ["authorization", f"Bearer {FP}"]]  # fmt: skip
    r = rec("a", body={"model": "m"}, headers=[*base, list(header)])
    t = Target("t", "http://t:1/v1", headers={header[0]: override} if override else {})
    out = prepare(r, t, "sk-target", {})
    expected = [("content-type", "application/json"), ("authorization", "Bearer sk-target")]
    assert out.headers == expected + ([sent] if sent else [])
    assert out.dropped == dropped


def test_headers_auth_model_and_body() -> None:
    headers = [
        ["host", "orig.test"], ["content-length", "99"], ["connection", "keep-alive"],
        ["transfer-encoding", "chunked"], ["cookie", "sha256:c"], ["x-wirediff-label", "l"],
        ["accept-encoding", "gzip, deflate, br"], ["authorization", "Bearer sha256:abc"],
        ["x-stainless-lang", "python"], ["x-team", "a"], ["x-drop", "1"],
    ]  # fmt: skip
    r = rec("a", path="/v1/chat/completions", body={"model": "gpt-4o-mini", "n": "é"},
            headers=headers)  # fmt: skip
    t = Target("t", "http://t:1/v1", model_map={"*": "qwen"},
               headers={"X-Team": "b", "x-drop": None, "x-new": "1"})  # fmt: skip
    out = prepare(r, t, "sk-target", {})
    assert out.headers == [
        ("accept-encoding", "gzip, deflate, br"), ("authorization", "Bearer sk-target"),
        ("x-stainless-lang", "python"), ("x-team", "b"), ("x-new", "1"),
        ("content-type", "application/json"),
    ]  # fmt: skip
    assert out.content == '{"model":"qwen","n":"é"}'.encode()
    assert out.model == "qwen" and r["request"]["body"]["model"] == "gpt-4o-mini"
    assert ("authorization", "Bearer sk-target") not in prepare(r, t, None, {}).headers
    assert not any(k == "authorization" for k, _ in prepare(r, t, None, {}).headers)


def test_auth_keeps_the_originals_header_name_and_scheme() -> None:
    azure = rec("a", body={}, headers=[["api-key", "sha256:k"]])
    azure["tags"]["auth"] = {"header": "api-key", "scheme": None, "fingerprint": "sha256:k",
                             "forwarded": True}  # fmt: skip
    assert prepare(azure, T, "k2", {}).headers[0] == ("api-key", "k2")
    none = rec("b", body={}, headers=[])
    none["tags"]["auth"] = None
    assert ("authorization", "Bearer k3") in prepare(none, T, "k3", {}).headers


def test_text_and_binary_bodies() -> None:
    r = rec("a", path="/v1/files", headers=[["content-type", "text/plain"]])
    r["request"]["text"] = "plain"
    assert prepare(r, T, None, {}).content == b"plain"
    r["request"]["text"], r["request"]["b64"] = None, "AAEC"
    assert prepare(r, T, None, {}).content == b"\x00\x01\x02"


def broken(change: Callable[[dict[str, Any]], object]) -> Record:
    r = rec("bad", path="/v1/files", headers=[["content-type", "application/octet-stream"]])
    r["request"]["body"], r["request"]["b64"] = None, "AAEC"
    change(cast(dict[str, Any], r["request"]))  # made malformed on purpose
    return r


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda q: None, None),
        (lambda q: q.update(b64="AAE"), "not valid base64"),
        (lambda q: q.update(b64="AA-C"), "not valid base64"),
        (lambda q: q.update(method=None), "has no method"),
        (lambda q: q.update(path=7), "has no path"),
        (lambda q: q.update(headers=[["x-only-a-name"]]), "not [name, value] pairs"),
        (lambda q: q.update(headers="x-a: 1"), "not [name, value] pairs"),
        (lambda q: q.update(headers=[["Upgrade", "websocket"]]), "WebSocket session"),
    ],
)
def test_malformed_originals_are_skipped_with_the_reason(
    change: Callable[[dict[str, Any]], object], why: str | None
) -> None:
    r, ok = broken(change), rec("ok", body={"model": "m"})
    plan = make_plan([r, ok], allow_unsafe=True)
    skip = plan.by_id["bad"].skip
    assert skip is None if why is None else why in str(skip)
    out, run = engine([r, ok], Fake(), allow_unsafe=True)
    by = by_original(out)
    assert kind(by["ok"]) is None and run.counts.done == 2
    if why is not None:
        assert kind(by["bad"]) == "skipped" and why in error_of(by["bad"])["message"]


def test_an_original_that_fails_while_being_sent_is_skipped_not_a_traceback() -> None:
    odd_name = rec("odd", body={"model": "m"}, headers=[["x-caf\u00e9", "1"]])
    latin = rec("latin", body={"model": "m"}, headers=[["x-city", "Z\u00fcrich"]])
    fake = Fake()
    out, _ = engine([odd_name, latin], fake)
    by = by_original(out)
    assert kind(by["odd"]) == "skipped"
    assert error_of(by["odd"])["message"].startswith("the captured request cannot be sent again")
    # a non-ASCII value goes out as the capture decoded it
    assert kind(by["latin"]) is None
    assert (b"x-city", "Zürich".encode()) in fake.seen[0].headers.raw


def test_targets_and_option_values() -> None:
    with pytest.raises(PlanError, match="not an http"):
        Target("x", "ftp://host/v1")
    with pytest.raises(PlanError, match="--api-key-env"):
        Target("x", "http://h/v1", headers={"authorization": "Bearer sk-secret"})
    assert default_label("http://127.0.0.1:1234/v1") == "127.0.0.1:1234"
    assert default_label("https://api.example.com/v1") == "api.example.com"
    assert parse_rate("5") == 5 and parse_rate("120/m") == 2 and parse_rate("3600/h") == 1
    for bad in ("0", "x/s", "5/fortnight", "-1"):
        with pytest.raises(PlanError, match="--rate"):
            parse_rate(bad)
    assert parse_pairs(["a=b=c", "k="], "--header", allow_empty=True) == {"a": "b=c", "k": ""}
    with pytest.raises(PlanError, match="--model-map"):
        parse_pairs(["a="], "--model-map", allow_empty=False)


# --- the engine, against a mock transport ---------------------------------------------------


def sse(events: list[tuple[str, dict[str, Any]]]) -> bytes:
    return b"".join(f"event: {n}\ndata: {json.dumps(d)}\n\n".encode() for n, d in events)


def streamed(status: int, data: bytes, ctype: str = "application/json") -> httpx.Response:
    """An answer that arrives as a stream, in arbitrary chunks, like one off a socket."""

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 7):
            yield data[i : i + 7]

    return httpx.Response(status, headers={"content-type": ctype}, content=chunks())


def as_json(obj: Any, status: int = 200) -> httpx.Response:
    return streamed(status, json.dumps(obj).encode())


class Fake:
    """A target that mints its own ids and remembers every request it received."""

    def __init__(self, *, calls: bool = True, fail: Callable[[httpx.Request], bool] | None = None):
        self.seen: list[httpx.Request] = []
        self.n = 0
        self.calls, self.fail = calls, fail
        self.in_flight = self.peak = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(0)  # let other workers start: concurrency is observable
            return self.answer(request)
        finally:
            self.in_flight -= 1

    def answer(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if self.fail and self.fail(request):
            raise httpx.ConnectError("Connection refused", request=request)
        self.n += 1
        try:
            body = json.loads(request.content or b"null") or {}
        except ValueError:  # not JSON: an upload
            body = {}
        rid = f"resp_T{self.n}"
        if request.url.path.endswith("/chat/completions"):
            msg: dict[str, Any] = {"role": "assistant", "content": "hi"}
            if body.get("tools") and self.calls:
                msg["tool_calls"] = [{"id": f"call_T{self.n}", "type": "function"}]
            return as_json({"id": f"cc_T{self.n}", "choices": [{"index": 0, "message": msg}]})
        output: list[dict[str, Any]] = [{"type": "message", "id": f"msg_T{self.n}"}]
        if body.get("tools") and self.calls:
            output = [{"type": "function_call", "id": f"fc_T{self.n}",
                       "call_id": f"call_T{self.n}", "name": "f"}]  # fmt: skip
        obj = {"id": rid, "object": "response", "output": output}
        if body.get("stream"):
            data = sse([("response.created", {"response": {**obj, "output": []}}),
                        ("response.completed", {"response": obj})])  # fmt: skip
            return streamed(200, data, "text/event-stream")
        if request.method == "GET":
            return as_json({"id": request.url.path.split("/")[3]})
        return as_json(obj)


def engine(
    records: list[Record], fake: Callable[[httpx.Request], Any], *, concurrency: int = 4,
    allow_unsafe: bool = False, done: Mapping[str, Record] | None = None, target: Target = T,
) -> tuple[list[Record], TargetRun]:  # fmt: skip
    out: list[Record] = []
    plan = make_plan(records, allow_unsafe=allow_unsafe)
    run = TargetRun(plan, target, "sk-target", out.append, dict(done or {}),
                    concurrency=concurrency)  # fmt: skip
    asyncio.run(run.run(mock(fake)))
    return out, run


def test_engine_sends_dependents_after_producers_with_the_targets_ids() -> None:
    recs = session()
    recs[3]["request"]["body"]["stream"] = True
    recs[3]["tags"]["stream"] = True
    fake = Fake()
    out, run = engine(recs, fake)
    by = by_original(out)
    assert len(out) == len(recs) and set(by) == {r["id"] for r in recs}
    # what the target answered to fc, and what it was sent next
    fc_answer = answer(by["fc"])["body"]
    sent = by["fc2"]["request"]["body"]
    assert sent["previous_response_id"] == fc_answer["id"] != "resp_3"
    assert {i["call_id"] for i in sent["input"]} == {fc_answer["output"][0]["call_id"]}
    paths = [(r.method, r.url.path, json.loads(r.content or b"{}").get("input")) for r in fake.seen]
    r1 = paths.index(("POST", "/v1/responses", "hi"))
    assert paths.index(("GET", f"/v1/responses/{answer(by['r1'])['body']['id']}", None)) > r1
    # the chat tool result names the target's own tool call
    msgs = by["ct2"]["request"]["body"]["messages"]
    call = answer(by["ct"])["body"]["choices"][0]["message"]["tool_calls"][0]["id"]
    assert msgs[1]["tool_call_id"] == msgs[0]["tool_calls"][0]["id"] == call
    # the stream was recorded event by event through the capture's StreamTap
    stream = events_of(by["fc2"])
    assert [e["event"] for e in stream] == ["response.created", "response.completed"]
    assert all((e.get("t_ms") or 0) >= 0 for e in stream)
    # DELETE is unsafe: a skipped record, not a request
    assert by["del"]["response"] is None and error_of(by["del"])["kind"] == "skipped"
    assert all(r.method != "DELETE" for r in fake.seen)
    # records have the capture's shape, linked to their originals
    for r in out:
        assert r["format"] == "wirediff/1" and r["label"] == "tgt" and r["session"] == "s"
        assert r["listener"] == "replay:http://target.test:9000/v1"
        assert r["replay_of"] != r["id"]
    sent_rec = by["r1"]
    auth = sent_rec["tags"]["auth"]
    assert auth is not None and auth["scheme"] == "Bearer"
    assert "sk-target" not in json.dumps(out)  # the key is fingerprinted like in a capture
    assert run.counts.skipped == 1 and run.counts.ok == len(recs) - 1


def test_engine_skips_what_the_target_made_meaningless() -> None:
    out, _ = engine(session(), Fake(calls=False))
    by = by_original(out)
    for rid in ("fc2", "ct2"):
        assert by[rid]["response"] is None and error_of(by[rid])["kind"] == "skipped"
    assert "no function call #1" in error_of(by["fc2"])["message"]
    assert "no tool call #1" in error_of(by["ct2"])["message"]
    assert answer(by["r2"])["status"] == 200  # unaffected


def test_engine_concurrency_is_bounded_and_used() -> None:
    recs = [rec(f"i{i}", body={"model": "m"}) for i in range(20)]
    fake = Fake()
    engine(recs, fake, concurrency=5)
    assert fake.peak == 5
    fake1 = Fake()
    engine(recs, fake1, concurrency=1)
    assert fake1.peak == 1


def test_engine_records_connection_failures() -> None:
    out, run = engine(session()[:2], Fake(fail=lambda r: True))
    first = next(r for r in out if r["replay_of"] == "r1")
    assert error_of(first)["kind"] == "upstream_unreachable" and first["response"] is None
    second = next(r for r in out if r["replay_of"] == "r2")
    assert error_of(second)["kind"] == "skipped" and "did not answer" in error_of(second)["message"]
    assert run.counts.sent == run.counts.unreachable == 1


def test_engine_sends_unknown_paths_and_queries_where_they_belong() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return as_json({"error": "not here"}, 404)

    recs = [
        rec("chat", path="/v1/chat/completions", body={"model": "m"}),
        rec("ask", "GET", "/v1/ask_url?q=1"),
        rec("health", "GET", "/health"),
        rec("keyed", "GET", f"/v1/models?key={FP}&limit=2"),
    ]
    azure = Target("az", "https://az.example/openai/v1?api-version=2024-10-21")
    out, _ = engine(recs, handler, target=azure)
    q = "api-version=2024-10-21"
    assert sorted(seen) == [
        f"https://az.example/openai/v1/ask_url?q=1&{q}",
        f"https://az.example/openai/v1/chat/completions?{q}",
        f"https://az.example/openai/v1/models?limit=2&{q}",
    ]
    assert {r["listener"] for r in out} == {"replay:https://az.example/openai/v1"}
    assert FP not in json.dumps([r["request"] for r in out])
    (health,) = [r for r in out if r["replay_of"] == "health"]
    assert error_of(health) == {
        "kind": "skipped",
        "message": "the captured path '/health' leads to '/health', outside the target's base "
        "path '/openai/v1'",
    }


def test_engine_records_garbage_as_it_came() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return streamed(200, b"<html>oops</html>", "text/html")

    plan = make_plan([rec("a", body={"model": "m"})])
    out: list[Record] = []
    asyncio.run(TargetRun(plan, T, None, out.append, {}, concurrency=1).run(mock(handler)))  # fmt: skip
    assert answer(out[0])["text"] == "<html>oops</html>" and answer(out[0])["complete"]


def test_engine_resumes_from_earlier_records(tmp_path: Path) -> None:
    recs = session()
    first, _ = engine(recs, Fake())
    earlier = {r["replay_of"]: r for r in first if r["replay_of"] in ("r1", "fc", "ct2")}
    p = write_capture(tmp_path / "s.tgt.jsonl", list(earlier.values()))
    done, _ = replay_history([p, tmp_path / "missing.jsonl"], "tgt")
    assert set(done) == {"r1", "fc", "ct2"} and replay_history([p], "other")[0] == {}
    fake = Fake()
    rest, run = engine(recs, fake, done=done)
    assert {r["replay_of"] for r in rest} == {r["id"] for r in recs} - set(done)
    assert run.counts.resumed == 3 and run.counts.done == len(recs) - 3
    inputs = [json.loads(r.content or b"{}").get("input") for r in fake.seen]
    assert "hi" not in inputs and "w?" not in inputs  # producers are not sent again…
    by = by_original(rest)
    # …and their dependents use the ids the target returned in the earlier run
    fc_then = answer(earlier["fc"])["body"]
    assert (
        by["r2"]["request"]["body"]["previous_response_id"] == (answer(earlier["r1"])["body"]["id"])
    )
    assert by["fc2"]["request"]["body"]["previous_response_id"] == fc_then["id"]
    assert by["fc2"]["request"]["body"]["input"][1]["call_id"] == fc_then["output"][0]["call_id"]


def kind(r: Record) -> str | None:
    return error_kind(r)


def as_error(kind: str, message: str | None = None) -> Callable[[Record], None]:
    def change(r: Record) -> None:
        r["response"] = None
        r["error"] = {"kind": kind, "message": message or f"it went {kind}"}

    return change


def _unreachable_r1_skipped_r2(prior: dict[str, Record], plan: Plan) -> None:
    as_error("upstream_unreachable")(prior["r1"])
    why = resolve(plan.by_id["r2"], {"r1": prior["r1"]}.get)[1]
    as_error("skipped", why)(prior["r2"])


def _textual_fc_skipped_fc2(
    prior: dict[str, Record], plan: Plan, message: str | None = None
) -> None:
    answer(prior["fc"])["body"]["output"] = [{"type": "message", "id": "msg_T"}]
    why = message or resolve(plan.by_id["fc2"], prior.get)[1]
    as_error("skipped", why)(prior["fc2"])


@pytest.mark.parametrize(
    ("change", "allow_unsafe", "again"),
    [
        (None, False, set()),  # the DELETE's skip would be the same: done
        (None, True, {"del"}),  # now allowed: sent
        # no answer: tried again (what builds on r1 keeps its earlier answer)
        (lambda p, _: as_error("upstream_unreachable")(p["r1"]), False, {"r1"}),
        (lambda p, _: as_error("timeout")(p["r1"]), False, {"r1"}),
        (lambda p, _: as_error("upstream_disconnect")(p["card"]), False, {"card"}),
        # an answer, even an error, or a broken one, is the target's answer: done
        (lambda p, _: p["r1"]["response"].update(status=500), False, set()),
        (lambda p, _: as_error("upstream_protocol")(p["r1"]), False, set()),
        # a step skipped for a producer that is tried again is tried again with it…
        (_unreachable_r1_skipped_r2, False, {"r1", "r2"}),
        # …one skipped for an answer that stays is done; for a reason that changed, not
        (_textual_fc_skipped_fc2, False, set()),
        (lambda p, plan: _textual_fc_skipped_fc2(p, plan, "an older reason"), False, {"fc2"}),
        (lambda p, _: p.pop("r1"), False, {"r1"}),  # never recorded
    ],
)  # fmt: skip
def test_resume_retries_what_got_no_answer(
    change: Callable[[dict[str, Record], Plan], object] | None, allow_unsafe: bool, again: set[str]
) -> None:
    recs = session()
    first, _ = engine(recs, Fake())
    prior = by_original(first)
    plan = make_plan(recs, allow_unsafe=allow_unsafe)
    if change is not None:
        change(prior, plan)
    done = resumed(plan, prior, T)
    assert {n.id for n in plan.nodes} - set(done) == again
    assert all(done[k] is prior[k] for k in done)


def test_latest_replays_keeps_the_newest_per_original_and_label() -> None:
    orig = rec("o", body={})

    def attempt(rid: str, label: str, started: float) -> Record:
        return rec(rid, body={}, started=started, replay_of="o", label=label)

    old, new, tie_a, tie_b = (attempt("a1", "x", 5.0), attempt("a2", "x", 9.0),
                              attempt("a3", "y", 7.0), attempt("a4", "y", 7.0))  # fmt: skip
    other = rec("b1", body={}, replay_of="p", label="x")
    assert [r["id"] for r in latest_replays([orig, new, old, tie_a, tie_b, other])] == [
        "o", "a2", "a4", "b1",
    ]  # fmt: skip


def test_engine_retries_what_got_no_answer(tmp_path: Path) -> None:
    recs = session()
    out = tmp_path / "s.tgt.jsonl"
    down, run = engine(recs, Fake(fail=lambda r: True))
    write_capture(out, down)
    assert run.counts.unreachable == run.counts.sent > 0

    def again(allow_unsafe: bool = False) -> tuple[list[Record], Fake, TargetRun]:
        plan = make_plan(recs, allow_unsafe=allow_unsafe)
        done = resumed(plan, replay_history([out], "tgt")[0], T)
        fake = Fake()
        new, run = engine(recs, fake, done=done, allow_unsafe=allow_unsafe)
        with RecordWriter(out) as w:
            for r in new:
                w.write(r)
        return new, fake, run

    # the target is back: everything that got no answer, or was skipped for it, is sent
    new, fake, run = again()
    assert {r["replay_of"] for r in new} == {r["id"] for r in recs} - {"del"}
    assert run.counts.resumed == 1 and run.counts.ok == len(recs) - 1
    newest = by_original(latest_replays(load_records([out])))
    assert set(newest) == {r["id"] for r in recs}
    assert all(kind(r) is None for k, r in newest.items() if k != "del")
    answered = [r["replay_of"] or "" for r in load_records([out]) if kind(r) is None]
    assert sorted(answered) == sorted(r["id"] for r in recs if r["id"] != "del")
    # a third run sends nothing; with --allow-unsafe, the DELETE that was skipped
    new, fake, _ = again()
    assert new == [] and fake.seen == []
    new, fake, _ = again(allow_unsafe=True)
    assert [(r.method, r.url.path) for r in fake.seen] == [
        ("DELETE", f"/v1/responses/{answer(newest['r1'])['body']['id']}")
    ]


def test_token_bucket_paces_without_real_sleeping() -> None:
    now = [0.0]
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    async def go() -> None:
        bucket = TokenBucket(2.0, clock=lambda: now[0], sleep=fake_sleep)
        for _ in range(5):
            await bucket.take()

    asyncio.run(go())
    assert slept == [0.5, 0.5, 0.5, 0.5] and now[0] == 2.0


# --- the command line, no network -----------------------------------------------------------


def write_capture(path: Path, recs: list[Record]) -> Path:
    with RecordWriter(path) as w:
        for r in recs:
            w.write(r)
    return path


def test_dry_run_prints_and_sends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cap = write_capture(tmp_path / "s.jsonl", session())
    code = main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "--label", "lm",
                        "--model-map", "gpt-4o-mini=qwen", "--api-key-env", "NOPE_UNSET", "--dry-run"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "replay → lm (http://127.0.0.1:9/v1, key from $NOPE_UNSET (NOT SET)): 9 to send, 1 to skip"
        in out
    )
    assert "POST http://127.0.0.1:9/v1/responses model=qwen" in out
    assert "after previous_response_id←#0" in out and "--allow-unsafe" in out
    assert not (tmp_path / "s.lm.jsonl").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"started": "soon"}, "record a: `started` is not a number ('soon')"),
        ({"started": True}, "record a: `started` is not a number (True)"),
        ({"request": None}, "record a: no request object"),
        ({"id": None}, "a record has no id (session 's')"),
    ],
)
def test_records_that_cannot_be_planned(change: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError, match=re.escape(message)):
        make_plan([cast(Record, {**rec("a"), **change})])  # malformed on purpose


def test_dry_run_says_what_is_not_sent_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    redacted = rec("fp", "GET", f"/v1/models?key={FP}&limit=2",
                   headers=[["x-portkey-api-key", FP], ["x-team", "qa"]])  # fmt: skip
    bad = broken(lambda q: q.update(b64="AAE"))
    hops = two_hop({}, {})
    cap = write_capture(tmp_path / "s.jsonl", [redacted, bad, *hops])
    code = main_replay([str(cap), "--to", "http://127.0.0.1:9/v1?api-version=1", "--label",
                        "lm", "--dry-run", "--allow-unsafe"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0
    assert "GET http://127.0.0.1:9/v1/models?limit=2&api-version=1  [fp]" in out
    assert (
        "not sent (the capture holds only a fingerprint): query parameter key, "
        "header x-portkey-api-key"
    ) in out
    assert "skip: the captured request body is not valid base64" in out
    assert "[inner]" not in out and "[outer]" in out
    assert err == (
        f"wirediff: note: 1 exchange on {INNER} is an inner hop of a two-hop capture (the same "
        "call seen again behind a gateway), not replayed; `--only listener=…` chooses listeners\n"
    )
    capsys.readouterr()
    main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "--dry-run", "--only", "listener=*"])
    out, err = capsys.readouterr()
    assert "[inner]" in out and err == ""


def test_dry_run_counts_what_is_tried_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs = session()
    cap = write_capture(tmp_path / "s.jsonl", recs)
    first, _ = engine(recs, Fake())
    as_error("timeout")(next(r for r in first if r["replay_of"] == "r1"))
    write_capture(tmp_path / "s.tgt.jsonl", first)
    assert main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "--label", "tgt",
                        "--dry-run"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "1 to send, 0 to skip (1 tried before), 9 already replayed" in out
    assert "[r1]" in out and "[r2]" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--to", "http://h/v1", "--api-key-env", "WIREDIFF_TEST_UNSET"],
            "WIREDIFF_TEST_UNSET is not set",
        ),
        ([], "give --to URL or --config FILE"),
        (["--to", "ftp://h"], "not an http(s) URL"),
        (["--to", "http://h/v1", "--only", "colour=red"], "--only"),
        (["--to", "http://h/v1", "--header", "Authorization=Bearer x"], "--api-key-env"),
        (["--to", "http://h/v1", "--rate", "fast"], "--rate"),
        (["--to", "http://h/v1", "--concurrency", "0"], "--concurrency"),
        (["--label", "x"], "--label names the --to target"),
        (["--to", "http://h/v1", "--timeout", "nan"], "--timeout"),
        (["--to", "http://h/v1", "--timeout", "inf"], "--timeout"),
        (["--to", "http://h/v1", "--timeout", "0"], "--timeout"),
        (["--to", "http://h/v1", "--timeout", "-5"], "--timeout"),
        (["--to", "http://h/v1", "--rate", "nan/s"], "--rate"),
        (["--to", "http://h/v1", "--rate", "inf"], "--rate"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    cap = write_capture(tmp_path / "s.jsonl", session()[:1])
    assert main_replay([str(cap), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("wirediff: error: ") and message in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read capture"),
        ('{"format": "wirediff/9", "id": "a"}\n', "not a wirediff/1 record (format='wirediff/9')"),
        ("garbage\nmore garbage\n", "not a wirediff/1 capture"),
        (json.dumps({**bare_record(), "started": "soon"}) + "\n",
         "c.jsonl:1: malformed wirediff/1 record (started must be a number, not str)"),
    ],
)  # fmt: skip
def test_bad_captures_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    p = tmp_path / "c.jsonl"
    if content is not None:
        p.write_text(content)
    assert main_replay([str(p), "--to", "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_config_file_targets_and_precedence(tmp_path: Path) -> None:
    from wirediff.cli.replay import add_arguments
    from wirediff.replay.config import options_from_args

    cfg = tmp_path / "wirediff.yaml"
    cfg.write_text(
        "defaults: {concurrency: 3, rate: 10/s, only: [family=responses], api_key_env: DEF,\n"
        "           model_map: {a: b, c: d}, headers: {x-one: '1', x-two: '2'}}\n"
        "targets:\n"
        "  - {label: one, url: 'http://h1/v1', model_map: {a: z}, headers: {x-two: ''}}\n"
        "  - {url: 'http://h2:81/v1', api_key_env: TWO}\n"
    )
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["c.jsonl", "--config", str(cfg), "--model-map", "c=e", "--concurrency",
                         "7", "--to", "http://h3/v1", "--label", "three"])  # fmt: skip
    opts: Options = options_from_args(args)
    assert [t.label for t in opts.targets] == ["one", "h2:81", "three"]
    one, two, three = opts.targets
    assert dict(one.model_map) == {"a": "z", "c": "e"} and dict(two.model_map) == {
        "a": "b",
        "c": "e",
    }
    assert dict(one.headers) == {"x-one": "1", "x-two": None}
    assert (one.api_key_env, two.api_key_env, three.api_key_env) == ("DEF", "TWO", "DEF")
    assert opts.concurrency == 7 and opts.rate == 10.0 and len(opts.filters) == 1
    bad = tmp_path / "bad.yaml"
    for text, msg in [
        ("targets: [{label: x}]", "needs at least `url`"),
        ("targets: [{url: 'http://h/v1', colour: red}]", "unknown key(s) colour"),
        ("tragets: []", "unknown key(s) tragets"),
        (
            "targets: [{url: 'http://a/v1', label: x}, {url: 'http://b/v1', label: x}]",
            "share the label",
        ),
        ("targets: [\n", "not valid YAML"),
    ]:
        bad.write_text(text)
        with pytest.raises(Exception, match=msg.replace("(", r"\(").replace(")", r"\)")):
            options_from_args(p.parse_args(["c.jsonl", "--config", str(bad)]))


def test_records_written_by_the_engine_load_back(tmp_path: Path) -> None:
    out, _ = engine(session(), Fake())
    p = write_capture(tmp_path / "s.tgt.jsonl", out)
    assert len(load_records([p])) == len(out)


def test_unwritable_output_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cap = write_capture(tmp_path / "s.jsonl", session()[:1])
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "sub" / "out.jsonl"  # a directory that cannot be made: a file is in the way
    assert main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("wirediff: error: ")


def test_a_failure_while_recording_is_raised_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: TargetRun, node: Any, got: Any) -> Record:
        raise RuntimeError("builder bug")

    monkeypatch.setattr(TargetRun, "finalize", broken)
    with pytest.raises(RuntimeError, match="builder bug"):
        engine([rec("a", body={"model": "m"})], Fake())


# --- keys and fingerprints: only where and how the user configured them ---------------------


def test_a_fingerprint_is_never_sent_as_a_value() -> None:
    body = {"model": "m", "input": "hi", "api_key": "sha256:0123456789ab",
            "auth": {"password": "sha256:aaaaaaaaaaaa", "user": "u"}}  # fmt: skip
    out = prepare(rec("a", body=body), T, None, {})
    sent = json.loads(out.content or b"")
    assert sent == {"model": "m", "input": "hi", "auth": {"user": "u"}}
    assert {"body field api_key", "body field auth.password"} <= set(out.dropped)


def test_basic_auth_carries_user_and_password_as_basic_wants_them() -> None:
    original = rec("a", body={"model": "m"})
    original["tags"]["auth"] = {"header": "authorization", "scheme": "Basic",
                                "fingerprint": "sha256:abc", "forwarded": True}  # fmt: skip
    out = prepare(original, T, "alice:pw-123", {})
    assert ("authorization", "Basic YWxpY2U6cHctMTIz") in out.headers
    out = prepare(original, T, "sk-raw-key", {})
    assert all(k != "authorization" for k, _ in out.headers)
    assert any("user:password" in d for d in out.dropped)


def test_ctrl_c_records_the_request_in_flight_and_the_next_run_marks_its_attempt() -> None:
    plan = make_plan([rec("a", body={"model": "m", "input": "hi"})])
    out: list[Record] = []
    on_the_wire = asyncio.Event()

    async def never_answers(request: httpx.Request) -> httpx.Response:
        on_the_wire.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def interrupt() -> None:
        run = TargetRun(plan, T, None, out.append, {}, concurrency=1)
        task = asyncio.create_task(run.run(mock(never_answers)))
        await on_the_wire.wait()
        task.cancel()  # what Ctrl-C does to asyncio.run's task
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt())
    (first,) = out
    assert error_of(first)["kind"] == "interrupted" and "attempt" not in first
    assert resumed(plan, {"a": first}, T) == {}  # sent again by the next run…
    again: list[Record] = []
    run = TargetRun(plan, T, None, again.append, {}, concurrency=1, attempts={"a": 1})
    asyncio.run(run.run(mock(lambda r: as_json({"id": "x"}))))
    assert again[0]["attempt"] == 2 and again[0]["error"] is None  # …and says so
