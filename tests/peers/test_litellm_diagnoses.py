"""What LiteLLM (the real proxy) answers to what it cannot do — compact, a Responses
WebSocket turn it cannot serve, a request without a model — and the reason `diagnose` gives:
read from what the server said (status, body, close code) before any guess.

Observed with litellm 1.108.7 (scripts/install-peers.sh) and its models in litellm.yaml:
`standin-chat` is `custom_openai/…` (Responses through the upstream's chat completions),
`mock-chat` answers itself and has no upstream reachable from here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from websockets.exceptions import ConnectionClosedError

from tests.conftest import NOT_PROXIED, Mitmdump
from tests.fixtures.analysed import conformance, diagnose
from tests.fixtures.records import answer
from tests.peers.conftest import LiteLLM, sdk
from wirediff._types import Record

pytestmark = pytest.mark.peers


@pytest.fixture
def front(mitmdump: Callable[..., Mitmdump], litellm: LiteLLM) -> Mitmdump:
    return mitmdump([f"reverse:{litellm.url}"], label="litellm")


def by_code(records: list[Record]) -> dict[str, dict[Any, Any]]:
    return {str(r["code"]): r for r in diagnose(records).to_dict("records")}


def test_compact_it_does_not_support_is_not_an_unreachable_upstream(front: Mitmdump) -> None:
    """A 500 whose message says `COMPACT responses is not supported for custom_openai`
    (under an exception LiteLLM calls APIConnectionError) is about the operation: LiteLLM
    answered, nothing was out of reach."""
    with sdk(front.url + "/v1") as client, pytest.raises(openai.InternalServerError):
        client.responses.compact(model="standin-chat", input="Say hi")
    (rec,) = front.records(1)
    said = answer(rec)["body"]["error"]["message"]
    assert "APIConnectionError" in said and "COMPACT responses is not supported" in said
    found = by_code([rec])
    assert set(found) == {"endpoint_not_implemented"}
    row = found["endpoint_not_implemented"]
    assert row["provider"] == "litellm" and "POST /v1/responses/compact" in row["summary"]
    assert any("COMPACT responses is not supported" in e for e in row["evidence"])


def test_an_upstream_it_cannot_reach_is_its_own_upstream(front: Mitmdump) -> None:
    """LiteLLM answered a 500 naming the host it could not connect to: the gateway is up,
    its upstream is not — the remedy is not to start LiteLLM."""
    with sdk(front.url + "/v1") as client, pytest.raises(openai.InternalServerError):
        client.responses.compact(model="mock-chat", input="Say hi")
    (rec,) = front.records(1)
    assert "Cannot connect to host" in answer(rec)["body"]["error"]["message"]
    row = by_code([rec])["upstream_unreachable"]
    assert "LiteLLM answered, but could not reach its own upstream" in row["remedy"]
    assert "start the server" not in row["remedy"]


def test_a_websocket_closed_1011_before_any_event(front: Mitmdump) -> None:
    """The upgrade is accepted (101); the turn fails and LiteLLM closes with 1011 and its
    reason, before any event: the stream asked for never came, and the close says why."""
    with (
        sdk(front.url + "/v1") as client,
        pytest.raises(ConnectionClosedError) as closed,
        client.responses.connect(websocket_connection_options=NOT_PROXIED) as conn,
    ):
        conn.response.create(model="mock-chat", input="Say hi")
        for _ in conn:
            pass
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    (rec,) = front.records(1)
    ws = answer(rec)["websocket"]
    assert ws is not None and answer(rec)["status"] == 101 and ws["close_code"] == 1011
    assert ws["messages"] == {"client": 1, "server": 0}
    found = by_code([rec])
    assert set(found) == {"stream_truncated", "upstream_unreachable"}
    row = found["stream_truncated"]
    reason = ws["close_reason"]
    assert "closed by the server with 1011" in row["summary"] and reason in row["summary"]
    assert "closed cleanly" not in row["remedy"] and "1011" in row["remedy"]
    assert "could not reach its own upstream" in found["upstream_unreachable"]["remedy"]
    # and a stream asked for that never came breaks the client: breaking, not a deviation
    broke = conformance([rec]).query("kind == 'client'")
    assert list(broke["severity"]) == ["breaking"]
    assert f"closed with 1011 ({reason})" in broke["evidence"].iloc[0]


@pytest.mark.parametrize("path", ["/chat/completions", "/responses"])
def test_a_request_without_a_model_is_no_missing_model(front: Mitmdump, path: str) -> None:
    """`Invalid model name passed in model=None` answers a request that named no model:
    nothing is missing on the server, the request lacks a parameter."""
    body = {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"input": "hi"}
    with sdk(front.url + "/v1") as client, pytest.raises(openai.BadRequestError):
        client.post(path, body=body, cast_to=object)
    (rec,) = front.records(1)
    assert "model=None" in answer(rec)["body"]["error"]["message"]
    found = by_code([rec])
    assert set(found) == {"request_rejected"}
    row = found["request_rejected"]
    assert "over model" in row["summary"] and "has no model" in row["remedy"]
