"""The `openai` stand-in is the baseline of every comparison, so it must be spec-clean: the
real openai SDK's demo-like traffic through `mitmdump -s addons/capture.py` to it gives no
finding from the OpenAPI document, the SDK's types, Open Responses, the stream grammars or
the SDK impact harness."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import wait_for
from wirediff.analysis.index.analyze import analyze
from wirediff.backends.standin import standin
from wirediff.cli.demo import MODEL, WEATHER_CHAT, WEATHER_RESP, drive_sdk
from wirediff.cli.mitm import CaptureProxy
from wirediff.record.store import load_records

pytestmark = pytest.mark.e2e


def more_traffic(client: Any) -> int:
    """What the demo does not send: models, a streamed chat tool call, a streamed Responses
    tool call, a stream without usage."""
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    client.models.list()
    for _ in client.chat.completions.create(
        model=MODEL, messages=ask, tools=[WEATHER_CHAT], stream=True
    ):
        pass
    for _ in client.chat.completions.create(model=MODEL, messages=ask, stream=True):
        pass
    with client.responses.stream(model=MODEL, input="Weather?", tools=[WEATHER_RESP]) as s:
        s.get_final_response()
    return 4


def test_the_openai_standin_is_spec_clean(tmp_path: Path) -> None:
    with standin("openai") as url, CaptureProxy([url], tmp_path, "clean", label="openai") as proxy:
        n = drive_sdk(proxy.urls[0] + "/v1", "sk-clean")
        with openai.OpenAI(base_url=proxy.urls[0] + "/v1", api_key="sk-clean", max_retries=0) as c:
            n += more_traffic(c)
        records = wait_for(
            lambda: (
                proxy.capture_file.exists()
                and (r := load_records([proxy.capture_file]))
                and len(r) >= n
                and r
            ),
            what=f"{n} records",
        )
    assert {r["response"]["status"] for r in records} == {200}
    analysis = analyze(records)
    assert analysis.conformance.empty, analysis.conformance[
        ["path", "source", "message"]
    ].to_string()
    assert set(analysis.verdicts["verdict"]) == {"compatible"}
    assert set(analysis.verdicts["family"]) == {"chat.completions", "responses", "models"}
