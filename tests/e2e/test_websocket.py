"""The Responses API over WebSocket, through a real mitmdump, from the real openai SDK
(`client.responses.connect()`), against the stand-ins on loopback.

The openai stand-in speaks the WebSocket mode; the others answer the upgrade as their
profiles answer any GET on /v1/responses (405, or LM Studio's 200), which the SDK sees as a
refused handshake and wirediff diagnoses as `websocket_not_supported`.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest
from websockets.exceptions import InvalidStatus

from tests.conftest import NOT_PROXIED
from tests.fixtures.analysed import diagnose
from wirediff.analysis.comparison.conformance.checks import record_problems
from wirediff.backends.standin import standin

pytestmark = pytest.mark.e2e

KEY = "sk-e2e-websocket-CANARY-7c1d"
MODEL = "gpt-4o-mini"


def sdk(base_url: str) -> openai.OpenAI:
    """The real SDK on loopback: no retries, no proxy from the environment."""
    return openai.OpenAI(
        base_url=base_url,
        api_key=KEY,
        max_retries=0,
        timeout=30.0,
        http_client=openai.DefaultHttpxClient(trust_env=False),
    )


def connect(client: openai.OpenAI) -> Any:
    """`client.responses.connect()`, not through a proxy the environment may name."""
    return client.responses.connect(websocket_connection_options=NOT_PROXIED)


def until(conn: Any, *terminals: str) -> list[Any]:
    """The events of one turn, as the SDK yields them, up to its terminal event."""
    out = []
    for event in conn:
        out.append(event)
        if event.type in terminals:
            return out
    raise AssertionError("the connection closed before the turn ended")


def test_a_session_is_recorded_message_by_message(mitmdump: Any) -> None:
    with standin("openai") as url:
        m = mitmdump([f"reverse:{url}"], label="openai")
        with sdk(m.url + "/v1") as client, connect(client) as conn:
            conn.response.create(model=MODEL, input="Say hello")
            first = until(conn, "response.completed")
            conn.response.create(
                model=MODEL, input="Again", previous_response_id=first[-1].response.id
            )
            second = until(conn, "response.completed")
            conn.response.create(model="gpt-9", input="Which model?")
            third = until(conn, "error")
        (rec,) = m.records(1)

    req, resp, tags = rec["request"], rec["response"], rec["tags"]
    assert (req["method"], req["path"], resp["status"]) == ("GET", "/v1/responses", 101)
    assert (tags["family"], tags["transport"], tags["model"]) == ("responses", "websocket", MODEL)
    assert resp["complete"] and rec["error"] is None
    assert resp["websocket"]["closed_by"] == "client" and resp["websocket"]["close_code"] == 1000
    events = resp["events"]
    sent = [e for e in events if e["direction"] == "client"]
    assert [e["data"]["input"] for e in sent] == ["Say hello", "Again", "Which model?"]
    assert sent[1]["data"]["previous_response_id"] == first[-1].response.id
    # every message the SDK received, in order, parsed as it was sent
    got = [e["data"] for e in events if e["direction"] == "server"]
    assert [d["type"] for d in got] == [e.type for e in first + second + third]
    assert got[-1]["error"]["code"] == "model_not_found"
    assert all(e["event"] == e["data"]["type"] for e in events)
    # the error frame is the WebSocket mode's own (`status`, the error nested, no
    # sequence_number): judged by Open Responses' WebSocketErrorEvent, it is clean
    assert "sequence_number" not in got[-1] and got[-1]["status"] == 404
    assert not [p for p in record_problems(rec) if p.path.startswith("events[error]")]
    times = [e["t_ms"] for e in events]
    assert times == sorted(times) and times[0] > 0
    assert KEY not in m.capture_file.read_text()

    df = diagnose([rec])  # only the third turn failed, in the server's own words
    assert set(df["code"]) == {"stream_error_event", "model_not_found"}
    evidence = " ".join(df.iloc[0]["evidence"])
    assert "The model `gpt-9` does not exist" in evidence


def test_a_session_cut_by_the_server_is_truncated(mitmdump: Any) -> None:
    with standin("openai") as url:
        m = mitmdump([f"reverse:{url}"])
        with sdk(m.url + "/v1") as client, connect(client) as conn:
            conn.response.create(model="fault-cut", input="Say hello")
            with pytest.raises(AssertionError, match="closed before the turn ended"):
                until(conn, "response.completed")
        (rec,) = m.records(1)
    assert rec["response"]["complete"] is False
    assert rec["error"]["kind"] == "upstream_disconnect"
    assert rec["response"]["events"][-1]["direction"] == "server"
    df = diagnose([rec])
    assert list(df["code"]) == ["stream_truncated"]


@pytest.mark.parametrize(
    ("profile", "status", "codes"),
    [
        ("vllm", 405, {"websocket_not_supported"}),
        ("ollama", 405, {"websocket_not_supported"}),
        ("lmstudio", 200, {"websocket_not_supported", "soft_error_200"}),
    ],
)
def test_an_upgrade_refused_by_a_stand_in(
    mitmdump: Any, profile: str, status: int, codes: set[str]
) -> None:
    with standin(profile) as url:
        m = mitmdump([f"reverse:{url}"])
        with sdk(m.url + "/v1") as client, pytest.raises(InvalidStatus) as refused:
            connect(client).enter()
        (rec,) = m.records(1)
    assert refused.value.response.status_code == status
    assert rec["request"]["method"] == "GET" and rec["response"]["status"] == status
    assert rec["tags"]["transport"] == "websocket" and rec["response"]["events"] is None
    df = diagnose([rec])
    assert set(df["code"]) == codes
    row = df[df["code"] == "websocket_not_supported"].iloc[0]
    assert "request: Upgrade: websocket" in row["evidence"]
    assert "client.responses.create" in row["remedy"]
