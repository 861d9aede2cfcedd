"""Precision: the successful traffic of every peer, captured through a real mitmdump from the
real openai SDK, yields no diagnosis at all (the stand-ins' is in tests/e2e/test_precision.py).

Each row drives what that peer serves successfully, with its quirks — llama-cpp-python's
ignored `stream_options`, open-responses-server's Responses stream without
`sequence_number` and at the root, LiteLLM's translated Responses stream ending in
`[DONE]` — none of which is a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from openai.types.responses import ResponseCompletedEvent

from tests.conftest import Mitmdump
from tests.fixtures.analysed import diagnose, format_diagnoses
from tests.fixtures.records import answer
from tests.peers.conftest import sdk

pytestmark = pytest.mark.peers

HI: Any = [{"role": "user", "content": "hello, say hi"}]


def consume(stream: Any) -> None:
    for _ in stream:
        pass


def llama_calls(url: str) -> int:
    with sdk(url + "/v1") as client:
        client.models.list()
        client.chat.completions.create(model="tiny", messages=HI)
        consume(
            client.chat.completions.create(
                model="tiny", messages=HI, stream=True, stream_options={"include_usage": True}
            )
        )
        client.completions.create(model="tiny", prompt="Hi")
        consume(client.completions.create(model="tiny", prompt="Hi", stream=True))
        client.chat.completions.create(model="any-name-at-all", messages=HI, max_tokens=1)
    return 6  # fmt: skip


def ors_calls(url: str) -> int:
    with sdk(url) as client:
        events = list(client.responses.create(model="tiny", input=HI, stream=True))
        last = events[-1]
        assert isinstance(last, ResponseCompletedEvent)
        consume(
            client.responses.create(
                model="tiny", input=HI, stream=True, previous_response_id=last.response.id
            )
        )
        client.models.list()  # forwarded to the upstream's /v1/models
    with sdk(url + "/v1") as client:
        client.chat.completions.create(model="tiny", messages=HI)
        consume(client.chat.completions.create(model="tiny", messages=HI, stream=True))
    return 5  # fmt: skip


def litellm_calls(url: str) -> int:
    with sdk(url + "/v1") as client:
        client.models.list()
        client.chat.completions.create(model="mock-chat", messages=HI)
        consume(client.chat.completions.create(model="mock-chat", messages=HI, stream=True))
        client.chat.completions.create(model="standin-chat", messages=HI)
        client.responses.create(model="standin-chat", input="Say hello.")
        consume(client.responses.create(model="standin-chat", input="Say hello.", stream=True))
    return 6


def fakellm_calls(url: str) -> int:
    tools: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]  # fmt: skip
    with sdk(url + "/v1") as client:
        client.chat.completions.create(model="m", messages=HI)
        consume(client.chat.completions.create(model="m", messages=HI, stream=True))
        consume(client.chat.completions.create(model="m", messages=HI, tools=tools, stream=True))
    return 3


PEERS: dict[str, Callable[[str], int]] = {
    "llama": llama_calls,
    "ors": ors_calls,
    "litellm": litellm_calls,
    "fakellm": fakellm_calls,
}


@pytest.mark.parametrize("name", list(PEERS))
def test_successful_traffic_of_a_peer_yields_no_diagnosis(
    name: str, mitmdump: Callable[..., Mitmdump], request: pytest.FixtureRequest
) -> None:
    peer = request.getfixturevalue(name)
    front = mitmdump([f"reverse:{peer.url}"], label=name)
    calls = PEERS[name](front.url)
    records = front.records(calls)
    assert len(records) == calls and {answer(r)["status"] for r in records} == {200}
    df = diagnose(records)
    assert df.empty, format_diagnoses(df)


def test_a_soft_error_among_them_is_still_found(
    mitmdump: Callable[..., Mitmdump], request: pytest.FixtureRequest
) -> None:
    """The same capture with one failing call: precision is not silence."""
    ors = request.getfixturevalue("ors")
    front = mitmdump([f"reverse:{ors.url}"], label="ors")
    calls = ors_calls(front.url)
    with sdk(front.url + "/v1") as client:
        assert list(client.responses.create(model="tiny", input=HI, stream=True)) == []
    df = diagnose(front.records(calls + 1))
    assert set(df["code"]) == {"soft_error_200", "endpoint_not_implemented"}
    assert df["exchange_ids"].map(len).eq(1).all()
