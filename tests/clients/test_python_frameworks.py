"""LangChain (`ChatOpenAI`) and LlamaIndex (`OpenAILike`, `OpenAIResponses`), each in its own
venv, through `wirediff capture`. Neither says who it is: what the capture holds is the
openai Python SDK underneath, and the small marks each leaves on the wire."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import (
    REPLAY_KEY,
    assert_no_key_on_disk,
    assert_replayed_and_reported,
    assert_stream_complete,
    client_env,
    pip_version,
    replay_and_report,
    run_client,
)
from tests.conftest import WirediffCapture
from tests.fixtures.records import answer, sdk_of
from tests.readme_blocks import readme_block, with_proxy
from wirediff._types import Record
from wirediff.record.tags import header_get

pytestmark = pytest.mark.clients

KEY = "sk-clients-PY-CANARY-6d0e5b18"

LANGCHAIN_WORKLOAD = """
import asyncio, json

out = {"invoke": chat.invoke("Say hi").content}
out["stream"] = "".join(c.content for c in chat.stream("Say hi"))
out["responses_invoke"] = responses.invoke("Say hi").text
out["responses_stream"] = len(list(responses.stream("Say hi")))
out["ainvoke"] = asyncio.run(chat.ainvoke("Say hi")).content
print(json.dumps(out))
"""

LLAMAINDEX_WORKLOAD = """
import asyncio, json
from llama_index.core.llms import ChatMessage

ask = [ChatMessage(role="user", content="Say hi")]
out = {"complete": llm.complete("Say hi").text}
out["stream_chat"] = "".join(r.delta or "" for r in llm.stream_chat(ask))
out["responses_chat"] = responses.chat(ask).message.content
out["responses_stream"] = "".join(r.delta or "" for r in responses.stream_chat(ask))
out["achat"] = asyncio.run(llm.achat(ask)).message.content
print(json.dumps(out))
"""

# Both drive the same five calls: chat, chat streamed, responses, responses streamed, async chat.
SHAPE = [
    ("chat.completions", False, False), ("chat.completions", True, False),
    ("responses", False, False), ("responses", True, False), ("chat.completions", False, True),
]  # fmt: skip


def drive(
    venv: Path, readme: str, workload: str, capture: WirediffCapture, workdir: Path
) -> tuple[dict[str, Any], list[Record], str]:
    """Run the README's block plus the workload in the client's venv; what it printed, the
    records, and the openai SDK version in that venv."""
    script = workdir / f"{readme}_app.py"
    script.write_text(with_proxy(readme_block(readme), capture.proxy_url) + workload)
    out = run_client(
        [str(venv / "bin" / "python"), str(script)], cwd=workdir, env=client_env(OPENAI_API_KEY=KEY)
    )
    records = capture.stop()
    assert [
        (r["tags"]["family"], r["tags"]["stream"], sdk_of(r)["async"]) for r in records
    ] == SHAPE
    for r in records:
        assert answer(r)["status"] == 200 and r["tags"]["model"] == "gpt-4o-mini"
        if r["tags"]["stream"]:
            assert_stream_complete(r)
    return json.loads(out.splitlines()[-1]), records, pip_version(venv, "openai").strip()


def assert_python_sdk(records: list[Record], version: str) -> None:
    for r in records:
        sdk = sdk_of(r)
        prefix = "AsyncOpenAI" if sdk["async"] else "OpenAI"
        assert sdk["user_agent"] == f"{prefix}/Python {version}"
        assert (sdk["lang"], sdk["version"], sdk["runtime"]) == ("python", version, "CPython")
        assert "client" not in sdk  # nothing names LangChain or LlamaIndex


def test_langchain(
    langchain_client: Path,
    capture: WirediffCapture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, records, version = drive(
        langchain_client, "langchain", LANGCHAIN_WORKLOAD, capture, tmp_path
    )
    assert out["invoke"].startswith("Echo:") and out["stream"].startswith("Echo:")
    assert out["responses_invoke"].startswith("Echo:") and out["responses_stream"] > 1
    assert_python_sdk(records, version)
    assert version.startswith("3."), "langchain-openai brings openai 3.x"
    for r in records:
        headers = r["request"]["headers"]
        # LangChain's one mark: it asks the SDK for the raw response when not streaming
        raw = header_get(headers, "x-stainless-raw-response")
        assert raw == (None if r["tags"]["stream"] else "true")
        assert r["request"]["body"]["stream"] is r["tags"]["stream"]  # always explicit
    replayed = replay_and_report(capture.capture_file, tmp_path, monkeypatch)
    assert_replayed_and_reported(records, replayed)
    assert_no_key_on_disk(replayed.files, KEY, REPLAY_KEY)


def test_llamaindex(
    llamaindex_client: Path,
    capture: WirediffCapture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out, records, version = drive(
        llamaindex_client, "llamaindex", LLAMAINDEX_WORKLOAD, capture, tmp_path
    )
    assert all(out[k].startswith("Echo:") for k in out)
    assert_python_sdk(records, version)
    assert version.startswith("2."), "llama-index-llms-openai keeps openai < 3"
    for r in records:
        headers, body = r["request"]["headers"], r["request"]["body"]
        # LlamaIndex's marks: its default timeout and temperature
        assert header_get(headers, "x-stainless-read-timeout") == "60.0"
        assert header_get(headers, "x-stainless-raw-response") is None
        assert body["temperature"] == 0.1
        if r["tags"]["family"] == "responses":  # and explicit nulls
            assert body["instructions"] is None and body["previous_response_id"] is None
    replayed = replay_and_report(capture.capture_file, tmp_path, monkeypatch)
    assert_replayed_and_reported(records, replayed)
    assert_no_key_on_disk(replayed.files, KEY, REPLAY_KEY)
