"""Precision: the successful traffic of every stand-in, captured through a real mitmdump from
the real openai SDK, yields no diagnosis at all (the peers' is in tests/peers).

A diagnosis on a healthy exchange is a false alarm with a confident remedy; each row drives
everything the stand-in serves successfully — models, chat completions (plain, streamed
with usage, a tool call), the Responses API where the profile has it (plain, streamed, a
tool call, a continuation), its WebSocket mode where the profile has that — and gzip.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.conftest import NOT_PROXIED
from tests.fixtures.analysed import diagnose, format_diagnoses
from wirediff.backends.standin import standin
from wirediff.profiles import profile

pytestmark = pytest.mark.e2e

ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS: Any = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]  # fmt: skip
RESPONSE_TOOLS: Any = [{"type": "function", **TOOLS[0]["function"]}]


def drive(client: openai.OpenAI, name: str, model: str) -> int:
    """Every successful call the stand-in serves; returns how many exchanges that made."""
    prof = profile(name)
    calls = 0
    client.models.list()
    client.chat.completions.create(model=model, messages=ASK)
    for _ in client.chat.completions.create(
        model=model, messages=ASK, stream=True, stream_options={"include_usage": True}
    ):
        pass
    client.chat.completions.create(model=model, messages=ASK, tools=TOOLS)
    for _ in client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, stream=True):
        pass
    calls += 5
    if prof["streaming"]["responses"]["supported"]:
        first = client.responses.create(model=model, input="Say hello")
        with client.responses.stream(model=model, input="Say hello", tools=RESPONSE_TOOLS) as s:
            s.get_final_response()
        calls += 2
        if prof["responses"].get("previous_response_id") == "supported":
            client.responses.create(model=model, input="Again", previous_response_id=first.id)
            calls += 1
        if prof["streaming"]["responses"].get("websocket"):
            with client.responses.connect(websocket_connection_options=NOT_PROXIED) as conn:
                conn.response.create(model=model, input="Say hello")
                for event in conn:
                    if event.type == "response.completed":
                        break
            calls += 1
    return calls


@pytest.mark.parametrize(
    ("name", "gzip"),
    [("openai", False), ("openai", True), ("lmstudio", False), ("ollama", False), ("vllm", False)],
)
def test_successful_traffic_of_a_stand_in_yields_no_diagnosis(
    mitmdump: Any, name: str, gzip: bool
) -> None:
    model = profile(name)["models"]["served"][0]
    with standin(name, gzip=gzip) as url:
        m = mitmdump([f"reverse:{url}"], label=name)
        client = openai.OpenAI(
            base_url=m.url + "/v1",
            api_key="sk-e2e-precision",
            max_retries=0,
            http_client=openai.DefaultHttpxClient(trust_env=False),
        )
        with client:
            calls = drive(client, name, model)
        records = m.records(calls)
    assert len(records) == calls and all(r["response"]["status"] in (200, 101) for r in records)
    df = diagnose(records)
    assert df.empty, format_diagnoses(df)
