"""open-responses-server (ORS, the real one, from PyPI) over the llama-cpp-python peer, behind
`mitmdump -s addons/capture.py`, driven by the real openai SDK: what it puts on the wire, and
what wirediff diagnoses.

Observed with open-responses-server 0.4.1 (pinned in scripts/install-peers.sh): it serves
`POST /responses` (not under /v1) by calling the upstream's chat completions, re-serves
`POST /v1/chat/completions`, and forwards anything else to `UPSTREAM/v1/{path}` — so
`/v1/responses` goes to the upstream's `/v1/v1/responses`. Upstream failures come back as
200s: an error frame in a stream, `{"error": "…"}` in a body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from openai.types.responses import ResponseCompletedEvent
from websockets.exceptions import InvalidStatus

from tests.conftest import NOT_PROXIED, Mitmdump, missing
from tests.fixtures.analysed import conformance, diagnose
from tests.fixtures.records import answer, events_of
from tests.peers.conftest import LLAMA_CTX, TINY_ANSWER, Ors, sdk
from wirediff._types import Record
from wirediff.analysis.comparison.clients import node
from wirediff.record.tags import header_get

pytestmark = pytest.mark.peers

INPUT: Any = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]}
]
HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hi"}]
TOO_LONG: Any = [{"type": "message", "role": "user",
                  "content": [{"type": "input_text", "text": "a" * LLAMA_CTX}]}]  # fmt: skip


@pytest.fixture
def front(mitmdump: Callable[..., Mitmdump], ors: Ors) -> Mitmdump:
    return mitmdump([f"reverse:{ors.url}"], label="ors")


def codes(records: list[Record]) -> set[str]:
    return set(diagnose(records)["code"])


def test_responses_stream_at_the_root(front: Mitmdump) -> None:
    """created, in_progress, a delta per upstream chunk, completed: no `event:` lines, no
    `sequence_number`, no output_item/content_part events, no `[DONE]`."""
    with sdk(front.url) as client:
        events = list(client.responses.create(model="tiny", input=INPUT, stream=True))
        assert client.responses.create(model="tiny", input=INPUT) is None  # the body is null
    assert [e.type for e in events] == [
        "response.created", "response.in_progress", *["response.output_text.delta"] * 3,
        "response.completed",
    ]  # fmt: skip
    last = events[-1]
    assert isinstance(last, ResponseCompletedEvent)
    done = last.response
    assert done.output_text == TINY_ANSWER and done.status == "completed" and done.usage is None

    stream, plain = front.records(2)
    recorded = events_of(stream)
    assert (
        header_get(answer(stream)["headers"], "content-type") == "text/event-stream; charset=utf-8"
    )
    assert all(e["event"] is None and "sequence_number" not in e["data"] for e in recorded)
    assert recorded[-1]["data"]["type"] == "response.completed"
    assert (answer(plain)["status"], answer(plain)["text"]) == (200, "null")


def test_what_it_lacks_at_its_root_is_no_missing_v1(front: Mitmdump) -> None:
    """ORS answered `POST /responses` at its root (200, the JSON body `null`); compact and
    the WebSocket upgrade there are answered 404 by its upstream. The prefix works: the
    diagnoses are no compact and no WebSocket mode, not "append /v1"."""
    with sdk(front.url) as client:
        assert client.responses.create(model="tiny", input=INPUT) is None
        with pytest.raises(openai.NotFoundError):
            client.responses.compact(model="tiny", input=INPUT)
        with pytest.raises(InvalidStatus) as upgrade:
            client.responses.connect(websocket_connection_options=NOT_PROXIED).enter()
    assert upgrade.value.response.status_code == 404
    records = front.records(3)
    plain, compact, ws = records
    assert (answer(plain)["status"], answer(plain)["text"]) == (200, "null")
    assert [r["request"]["path"] for r in records] == [
        "/responses", "/responses/compact", "/responses"
    ]  # fmt: skip
    df = diagnose(records)
    by_id = {r["id"]: set(df[df["exchange_ids"].map(lambda e, i=r["id"]: i in e)]["code"])
             for r in records}  # fmt: skip
    assert by_id == {
        plain["id"]: set(),
        compact["id"]: {"endpoint_not_implemented"},
        ws["id"]: {"websocket_not_supported"},
    }
    assert "append /v1" not in " ".join(df["remedy"])
    # the null body: JSON, and what the SDK does with it is return None
    found = conformance([plain])
    # openai-python hands the app None; openai-node raises reading it
    sdk_node = node.node_sdk()
    if isinstance(sdk_node, str):
        missing(f"openai-node reads this answer too: {sdk_node}")
    assert [(k, m.split(" at ")[0]) for k, m in zip(found["kind"], found["message"], strict=True)] == [
        ("conformance", "`body`: the JSON body null where Response belongs"),
        ("client", "`client.responses.create()` returns None: "
                   "`client.responses.create().output` raises AttributeError"),
        ("client", f"`client.responses.create()` ({sdk_node.client}) raises TypeError: "
                   "Cannot use 'in' operator to search for 'object' in null"),
    ]  # fmt: skip


def test_responses_under_v1_reaches_the_upstreams_v1_v1(front: Mitmdump) -> None:
    """`/v1/responses` is proxied to the upstream's `/v1/v1/responses`: a stream gets its
    404 body under a 200 (the content type copied from the request's Accept), a plain
    call the 404 itself."""
    with sdk(front.url + "/v1") as client:
        assert list(client.responses.create(model="tiny", input="Hi", stream=True)) == []
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model="tiny", input="Hi")
    stream, plain = front.records(2)
    assert answer(stream)["status"] == 200
    assert answer(stream)["body"] == {"detail": "Not Found"}
    assert header_get(answer(stream)["headers"], "content-type") == "application/json"
    assert answer(plain)["status"] == 404
    assert header_get(answer(plain)["headers"], "vary") == "Origin, Origin"  # both servers'
    assert codes([stream]) == {"soft_error_200", "endpoint_not_implemented"}
    assert codes([plain]) == {"endpoint_not_implemented"}


def test_a_wrong_method_and_a_websocket_upgrade_are_answered_404(front: Mitmdump) -> None:
    with sdk(front.url + "/v1") as client:
        with pytest.raises(openai.NotFoundError):
            client.get("/chat/completions", cast_to=object)
        with pytest.raises(InvalidStatus) as upgrade:
            client.responses.connect(websocket_connection_options=NOT_PROXIED).enter()
    assert upgrade.value.response.status_code == 404
    get_chat, ws = front.records(2)
    (row,) = diagnose([get_chat]).to_dict("records")
    assert row["code"] == "method_not_allowed"
    assert "answered 404 for GET; /v1/chat/completions takes POST" in row["evidence"]
    assert codes([ws]) == {"websocket_not_supported"}


def test_previous_response_id_is_ignored(front: Mitmdump) -> None:
    """An id it never made is ignored silently: a normal answer, nothing to diagnose."""
    with sdk(front.url) as client:
        events = list(
            client.responses.create(
                model="tiny", input=INPUT, stream=True, previous_response_id="resp_doesnotexist"
            )
        )
    assert events[-1].type == "response.completed"
    (rec,) = front.records(1)
    assert rec["request"]["body"]["previous_response_id"] == "resp_doesnotexist"
    assert diagnose([rec]).empty


def test_a_context_overflow_upstream(front: Mitmdump) -> None:
    """The upstream streams nothing (llama-cpp-python's empty 200): ORS sends created and
    in_progress, then ends the stream. Its chat completions turn the upstream's 400 into a
    200 `{"error": "Client error '400 Bad Request' for url '…/v1/chat/completions'…"}`."""
    with sdk(front.url) as client:
        events = list(client.responses.create(model="tiny", input=TOO_LONG, stream=True))
    with sdk(front.url + "/v1") as client:
        too_long: list[ChatCompletionMessageParam] = [{"role": "user", "content": "a" * LLAMA_CTX}]
        soft = client.chat.completions.create(model="tiny", messages=too_long)
    assert [e.type for e in events] == ["response.created", "response.in_progress"]
    assert soft.choices is None  # the SDK builds a ChatCompletion out of {"error": …}
    stream, chat = front.records(2)
    assert codes([stream]) == {"stream_truncated"}
    error = chat["response"]["body"]["error"]
    assert error.startswith("Client error '400 Bad Request' for url 'http://127.0.0.1:")
    # the path inside the upstream's URL is no echo of this request's route
    assert codes([chat]) == {"soft_error_200"}


def test_an_upstream_that_is_not_there(mitmdump: Callable[..., Mitmdump], ors: Ors) -> None:
    front = mitmdump([f"reverse:{ors.no_upstream.url}"], label="ors")
    with (
        sdk(front.url) as client,
        pytest.raises(openai.APIError, match="All connection attempts failed"),
    ):
        list(client.responses.create(model="tiny", input=INPUT, stream=True))
    with sdk(front.url + "/v1") as client:
        soft = client.chat.completions.create(model="tiny", messages=HI)
    assert soft.choices is None
    stream, chat = front.records(2)
    assert [e["data"] for e in events_of(stream)] == [
        {"type": "error", "error": {"message": "All connection attempts failed"}}
    ]
    assert chat["response"] == {**chat["response"], "status": 200,
                                "body": {"error": "All connection attempts failed"}}  # fmt: skip
    by_code = {r["code"]: r for r in diagnose([stream]).to_dict("records")}
    assert set(by_code) == {"stream_error_event", "upstream_unreachable"}
    assert "could not reach its own upstream" in by_code["upstream_unreachable"]["remedy"]
    assert (
        'error event 1 of 1: "All connection attempts failed"'
        in (by_code["stream_error_event"]["evidence"])
    )
    assert codes([chat]) == {"soft_error_200", "upstream_unreachable"}


def test_an_upstream_that_rejects_its_key(mitmdump: Callable[..., Mitmdump], ors: Ors) -> None:
    front = mitmdump([f"reverse:{ors.rejected.url}"], label="ors")
    with sdk(front.url) as client, pytest.raises(openai.APIError, match="Error from LLM API: 401"):
        list(client.responses.create(model="tiny", input=INPUT, stream=True))
    (rec,) = front.records(1)
    assert answer(rec)["status"] == 200 and len(events_of(rec)) == 1
    (row,) = diagnose([rec]).to_dict("records")
    assert row["code"] == "stream_error_event" and "Error from LLM API: 401" in row["summary"]
