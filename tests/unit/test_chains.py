"""Chains: retries, redirects, hops and fallbacks grouped; everything else a chain of one."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from tests.fixtures.chain_records import (
    INNER_LISTENER,
    MODEL,
    OTHER_KEY,
    SSE_CT,
    T0,
    chat_body,
    chat_events,
    record,
    redirected_post,
    responses_body,
    responses_events,
    sdk_headers,
)
from wirediff._types import Event, Record
from wirediff.analysis.diagnosis.chains import CHAIN_COLUMNS, chain_rows
from wirediff.analysis.diagnosis.outcome import exchange_ok, stream_end, stream_problem
from wirediff.analysis.index.analyze import Index


def chains(records: list[Record]) -> pd.DataFrame:
    index = Index.of(records).rows
    rows = chain_rows(index)
    ok = dict(zip(index["id"], index["ok"], strict=True))
    members = CHAIN_COLUMNS.index("exchange_ids")
    failing = [row for row in rows if not all(ok[i] for i in row[members])]
    assert chain_rows(index, failing_only=True) == failing
    return pd.DataFrame.from_records(rows, columns=CHAIN_COLUMNS)


def groups(df: pd.DataFrame) -> list[list[str]]:
    return sorted(list(ids) for ids in df["exchange_ids"])


def test_columns_and_singletons() -> None:
    df = chains([record(id="a"), record(id="b", body=chat_body("other"), started=T0 + 1)])
    assert list(df.columns) == CHAIN_COLUMNS
    assert groups(df) == [["a"], ["b"]]
    assert df["kinds"].map(len).eq(0).all() and df["ok"].all()
    assert df["failed"].map(len).eq(0).all()


def test_empty() -> None:
    assert chain_rows(Index.of([]).rows) == []


def test_sdk_retries_are_one_chain_and_a_new_call_starts_another() -> None:
    recs = [
        record(id="r0", status=503, resp_body={"error": {"message": "busy"}}),
        record(
            id="r1",
            headers=sdk_headers(retry=1),
            started=T0 + 0.5,
            status=503,
            resp_body={"error": {"message": "busy"}},
        ),
        record(id="r2", headers=sdk_headers(retry=2), started=T0 + 1.5),
        record(id="n0", started=T0 + 5),  # same body, retry 0: a new call
    ]
    df = chains(recs).set_index("chain_id")
    assert groups(df) == [["n0"], ["r0", "r1", "r2"]]
    row = df.loc["ch-r0"]
    assert row["kinds"] == ["retry"] and row["ok"] and row["final_id"] == "r2"
    assert row["failed"] == ["r0", "r1"]
    assert row["links"] == [("retry", "r0", "r1"), ("retry", "r1", "r2")]


def test_retry_needs_the_same_body() -> None:
    recs = [
        record(id="a", status=500, resp_body={"error": {"message": "x"}}),
        record(id="b", headers=sdk_headers(retry=1), body=chat_body("other"), started=T0 + 1),
    ]
    assert groups(chains(recs)) == [["a"], ["b"]]


def test_redirect_links_to_the_request_for_location_even_with_a_new_method() -> None:
    recs = redirected_post(get_url="https://api.test:443/v1/chat/completions")
    df = chains(recs)
    assert groups(df) == [["p", "g"]]
    row = df.iloc[0]
    assert row["kinds"] == ["redirect"] and not row["ok"] and row["final_id"] == "g"
    assert row["links"] == [("redirect", "p", "g")]
    assert "301" in row["title"] and "405" in row["title"]


def test_relative_location_resolves_against_the_request_url() -> None:
    recs = [
        record(
            id="p",
            path="/chat/completions",
            status=308,
            content_type=None,
            resp_body=None,
            resp_headers=[("location", "/v1/chat/completions")],
        ),
        record(id="q", started=T0 + 0.1),
    ]
    df = chains(recs)
    assert groups(df) == [["p", "q"]] and df.iloc[0]["ok"]


def test_redirect_target_must_follow_in_time() -> None:
    recs = [
        record(id="q", started=T0 - 1),
        record(
            id="p",
            path="/chat/completions",
            status=308,
            content_type=None,
            resp_body=None,
            resp_headers=[("location", "/v1/chat/completions")],
        ),
    ]
    assert groups(chains(recs)) == [["p"], ["q"]]


def hop(outer: dict[str, Any], inner: dict[str, Any]) -> list[Record]:
    base: dict[str, Any] = dict(label="gateway", duration_ms=200.0)
    o = record(**{**base, "id": "outer", **outer})
    i = record(
        **{
            "id": "inner",
            "listener": INNER_LISTENER,
            "label": "upstream",
            "started": T0 + 0.02,
            "duration_ms": 100.0,
            **inner,
        }
    )
    return [o, i]


def test_hop_is_the_same_request_on_another_listener_inside_the_outer_one() -> None:
    df = chains(hop({}, {}))
    assert len(df) == 1
    row = df.iloc[0]
    assert row["exchange_ids"] == ["outer", "inner"]
    assert row["kinds"] == ["hop"] and row["label"] == "gateway" and row["final_id"] == "outer"
    assert row["links"] == [("hop", "outer", "inner")]


UPSTREAM_MODEL = "qwen2.5-7b-instruct"
SAY_HELLO = [{"role": "user", "content": "Say hello"}]


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        # a gateway renames the model alias to the upstream's name...
        ({"body": chat_body("my-alias")}, {"body": chat_body(UPSTREAM_MODEL)}),
        # ...adds `stream: false`, or `stream_options` to a stream...
        ({}, {"body": {"model": UPSTREAM_MODEL, "messages": SAY_HELLO, "stream": False}}),
        (
            {"body": chat_body(stream=True)},
            {"body": {**chat_body(stream=True), "stream_options": {"include_usage": True}}},
        ),
        # ...puts a system prompt first or sends the text as content parts...
        ({}, {"body": {"model": MODEL, "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": [{"type": "text", "text": "Say   hello"}]}]}}),
        # ...and may translate a Responses call into a chat completion.
        (
            {"path": "/v1/responses", "body": responses_body("my-alias")},
            {"path": "/v1/chat/completions", "body": chat_body(UPSTREAM_MODEL)},
        ),
        (
            {"path": "/v1/responses", "body": {"model": "a", "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Say hello"}]}]}},
            {"path": "/v1/chat/completions", "body": chat_body(UPSTREAM_MODEL)},
        ),
        # a request without a prompt is a hop when its body is the same
        ({"method": "GET", "path": "/v1/models"}, {"method": "GET", "path": "/v1/models"}),
    ],
)  # fmt: skip
def test_hop_survives_what_a_gateway_changes(outer: dict[str, Any], inner: dict[str, Any]) -> None:
    df = chains(hop(outer, inner))
    assert len(df) == 1
    assert df.iloc[0]["links"] == [("hop", "outer", "inner")]


@pytest.mark.parametrize(
    ("outer", "inner"),
    [
        ({}, {"started": T0 + 1.0}),  # starts after the outer one ended
        ({}, {"started": T0 + 0.18}),  # starts inside but ends after the outer one
        ({}, {"started": T0 - 0.01}),  # started first
        ({}, {"listener": "reverse:http://127.0.0.1:8000"}),  # same listener
        ({}, {"body": {"model": MODEL, "messages": [{"role": "user", "content": "Other"}]}}),
        ({}, {"body": {"model": MODEL, "messages": [*SAY_HELLO, {"role": "user", "content": "More"}]}}),
        ({}, {"replay_of": "outer"}),  # a replay is not a hop
        ({"method": "GET", "path": "/v1/models"}, {"method": "GET", "path": "/v1/files"}),
    ],
)  # fmt: skip
def test_not_a_hop(outer: dict[str, Any], inner: dict[str, Any]) -> None:
    df = chains(hop(outer, inner))
    assert groups(df) == [["inner"], ["outer"]]
    assert all(not any(kind == "hop" for kind, _, _ in links) for links in df["links"])


def test_concurrent_equal_calls_each_get_their_own_inner_hop() -> None:
    outers = [record(id=f"o{k}", started=T0 + k * 0.01, duration_ms=500.0) for k in range(3)]
    inners = [
        record(id=f"i{k}", listener=INNER_LISTENER, body=chat_body(UPSTREAM_MODEL),
               started=T0 + 0.1 + k * 0.01, duration_ms=100.0)
        for k in range(3)
    ]  # fmt: skip
    df = chains(outers + inners)
    assert len(df) == 3
    assert all(len(ids) == 2 and ids[0][0] == "o" for ids in df["exchange_ids"])


def test_replays_of_one_original_to_two_targets_at_once_are_not_hops() -> None:
    recs = [
        record(id="orig", started=T0 - 10),
        record(id="slow", listener="replay:http://127.0.0.1:7001/v1", replay_of="orig",
               label="ollama", duration_ms=500.0),
        record(id="fast", listener="replay:http://127.0.0.1:7002/v1", replay_of="orig",
               label="vllm", started=T0 + 0.01, duration_ms=50.0, body=chat_body("qwen")),
    ]  # fmt: skip
    assert groups(chains(recs)) == [["fast"], ["orig"], ["slow"]]


def test_three_listeners_nest_into_one_chain() -> None:
    mid = "reverse:http://127.0.0.1:9500"
    recs = [
        record(id="a", duration_ms=1000.0, body=chat_body("alias")),
        record(id="b", listener=mid, started=T0 + 0.1, duration_ms=500.0),
        record(id="c", listener=INNER_LISTENER, started=T0 + 0.2, duration_ms=100.0,
               body=chat_body(UPSTREAM_MODEL)),
    ]  # fmt: skip
    df = chains(recs)
    assert len(df) == 1
    row = df.iloc[0]
    assert row["links"] == [("hop", "a", "b"), ("hop", "b", "c")] and row["final_id"] == "a"


def test_hops_and_retries_make_one_chain_whose_final_exchange_is_outer() -> None:
    err: dict[str, Any] = dict(status=502, content_type="text/html", resp_text="Bad Gateway")
    recs = [
        record(id="A0", duration_ms=100.0, **err),
        record(id="B0", listener=INNER_LISTENER, started=T0 + 0.01, duration_ms=50.0, **err),
        record(id="A1", headers=sdk_headers(retry=1), started=T0 + 0.6, duration_ms=100.0),
        record(
            id="B1",
            headers=sdk_headers(retry=1),
            listener=INNER_LISTENER,
            started=T0 + 0.61,
            duration_ms=50.0,
        ),
    ]
    df = chains(recs)
    assert len(df) == 1
    row = df.iloc[0]
    assert row["exchange_ids"] == ["A0", "B0", "A1", "B1"]
    assert row["kinds"] == ["hop", "retry"] and row["final_id"] == "A1" and row["ok"]
    assert "B0" in row["failed"] and "⇒" in row["title"]


def fallback(
    second: dict[str, Any] | None = None, first: dict[str, Any] | None = None
) -> list[Record]:
    one: dict[str, Any] = {
        "id": "resp",
        "path": "/v1/responses",
        "body": responses_body(),
        "status": 404,
        "resp_body": {"detail": "Not Found"},
        **(first or {}),
    }
    two: dict[str, Any] = {"id": "chat", "started": T0 + 0.2, **(second or {})}
    return [record(**one), record(**two)]


def test_fallback_from_responses_to_chat_completions() -> None:
    df = chains(fallback())
    assert len(df) == 1
    row = df.iloc[0]
    assert row["kinds"] == ["fallback"] and row["ok"] and row["failed"] == ["resp"]


def test_fallback_after_a_soft_error() -> None:
    first = dict(
        status=200, resp_body={"error": "Unexpected endpoint or method. (POST /v1/responses)"}
    )
    assert chains(fallback(first=first)).iloc[0]["kinds"] == ["fallback"]


def test_a_fallback_may_go_to_another_backend_with_another_key_and_model() -> None:
    """The same conversation asked of another server right after the refusal: the client
    gave up on the first backend, whatever it calls the model there."""
    second = {"host": "http://127.0.0.1:9999", "headers": sdk_headers(key=OTHER_KEY),
              "body": chat_body("other-model")}  # fmt: skip
    assert chains(fallback(second)).iloc[0]["kinds"] == ["fallback"]


def test_the_same_conversation_in_either_api_is_one_ask() -> None:
    """Responses' `instructions` and `input` items are chat's system and user messages;
    a tool offered in either shape is the same tool; a streamed call asks the same."""
    tool = {"name": "get_weather", "parameters": {"type": "object"}}
    first = {
        "body": {
            "model": MODEL,
            "instructions": "Be brief.",
            "stream": True,
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Say  hello"}]}],
            "tools": [{"type": "function", **tool}],
        }
    }
    second = {"body": {"model": MODEL, "messages": [
        {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Say hello"}],
        "tools": [{"type": "function", "function": tool}], "temperature": 0}}  # fmt: skip
    assert chains(fallback(second, first)).iloc[0]["kinds"] == ["fallback"]


ELSEWHERE = {"status": 200, "resp_body": {"id": "resp_1", "object": "response"}}


@pytest.mark.parametrize(
    ("second", "first"),
    [
        ({"headers": [("User-Agent", "ai/7.0.173")]}, None),  # another client
        ({"body": chat_body() | {"messages": [{"role": "user", "content": "Hi"}]}}, None),
        ({"body": chat_body() | {"tools": [{"type": "function", "function": {"name": "f"}}]}},
         None),  # the same words with a tool to call: another ask
        ({"body": chat_body() | {"messages": [{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "Say hello"}]}},
         None),  # the same words under other instructions
        ({"started": T0 + 3600}, None),  # much later
        ({"started": T0 + 0.01}, {"duration_ms": 100.0}),  # before the refusal came
        ({}, ELSEWHERE),  # it worked
        ({}, {"status": 400, "resp_body": {"error": {"message": "bad"}}}),  # not an endpoint miss
        ({"replay_of": "o2"}, {"replay_of": "o1"}),  # a replayer's order, not a client's choice
        ({"path": "/v1/responses", "body": responses_body()}, None),  # the same URL again
    ],
)  # fmt: skip
def test_not_a_fallback(second: dict[str, Any] | None, first: dict[str, Any] | None) -> None:
    assert len(chains(fallback(second, first))) == 2


@pytest.mark.parametrize(
    ("change", "ok", "problem"),
    [
        ({}, True, None),
        # the SDK closes after [DONE]; mitmproxy then reports a client disconnect: normal
        ({"complete": False, "error": {"kind": "client_disconnect", "message": "Client disconnected."}},
         True, None),
        ({"events": chat_events(done=False)}, False, "no [DONE] after 3 events"),
        ({"events": chat_events(done=False), "complete": False,
          "error": {"kind": "client_disconnect", "message": "Client disconnected."}},
         False, "no [DONE] after 3 events"),
        ({"events": chat_events(partial_tail=True)}, False, "last event cut mid-frame"),
        ({"complete": False, "error": {"kind": "upstream_disconnect", "message": "Server disconnected."}},
         False, "response incomplete (upstream_disconnect)"),
    ],
)  # fmt: skip
def test_stream_end_and_ok(change: dict[str, Any], ok: bool, problem: str | None) -> None:
    kw: dict[str, Any] = {
        "body": chat_body(stream=True),
        "content_type": SSE_CT,
        "events": chat_events(),
        **change,
    }
    rec = record(**kw)
    end = stream_end(rec)
    assert end is not None
    assert stream_problem(rec, end) == problem
    assert exchange_ok(rec) is ok


@pytest.mark.parametrize(
    ("terminal", "ok"),
    [("response.completed", True), ("response.incomplete", True), ("response.failed", False),
     (None, False)],
)  # fmt: skip
def test_responses_stream_terminals(terminal: str | None, ok: bool) -> None:
    rec = record(
        path="/v1/responses",
        body=responses_body(stream=True),
        content_type=SSE_CT,
        events=responses_events(terminal=terminal),
    )
    assert exchange_ok(rec) is ok
    end = stream_end(rec)
    assert end is not None and end.terminal == terminal


def test_not_sse_has_no_stream_end() -> None:
    rec = record()
    assert stream_end(rec) is None and stream_problem(rec, None) is None and exchange_ok(rec)


def ws_session(*turns: list[Event]) -> Record:
    """A Responses WebSocket session: per turn a client `response.create`, then the
    server's events."""
    events: list[Event] = []
    for server in turns:
        events.append({"t_ms": 1.0, "event": "response.create", "direction": "client",
                       "data": {"type": "response.create", "model": MODEL}})  # fmt: skip
        events.extend({**ev, "direction": "server"} for ev in server)
    rec = record(
        method="GET", path="/v1/responses", body=None, status=101, content_type=None,
        resp_body=None, events=events,
    )  # fmt: skip
    rec["tags"]["transport"] = "websocket"
    return rec


@pytest.mark.parametrize(
    ("turns", "ok", "terminal"),
    [
        ([], True, None),  # a session that asked nothing
        ([responses_events()], True, "response.completed"),
        ([responses_events(), responses_events()], True, "response.completed"),
        ([responses_events(), responses_events(terminal=None)], False, None),  # the last turn cut
        ([responses_events(terminal="error")], False, "error"),
    ],
)
def test_websocket_sessions_end_with_their_last_turn(
    turns: list[list[Event]], ok: bool, terminal: str | None
) -> None:
    rec = ws_session(*turns)
    end = stream_end(rec)
    assert (end.terminal if end else None) == terminal
    assert exchange_ok(rec) is ok


def test_a_url_that_does_not_parse_is_the_same_as_itself_only() -> None:
    """A port that is no number: as a redirect's target, and on an exchange beside one."""
    odd = "http://api.test:abc/v1/chat/completions"
    recs = [
        *redirected_post(),
        record(id="bad", url="http://127.0.0.1:abc/v1/chat/completions", started=T0 + 5),
        record(id="to-odd", url="http://api.test/v1/x", status=301, content_type=None,
               resp_body=None, resp_headers=[("location", odd)], started=T0 + 7),
        record(id="odd", method="GET", body=None, url=odd, started=T0 + 7.1),
    ]  # fmt: skip
    assert groups(chains(recs)) == [["bad"], ["p", "g"], ["to-odd", "odd"]]
