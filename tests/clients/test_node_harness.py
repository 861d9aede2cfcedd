"""The impact harness's Node side: the npm `openai` package of the clients tier, in one Node
process, fed recorded answers. It sees what openai-python does not (an error body without
its `error` object loses the server's words in the npm package), runs `runTools()`, and
the report says when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.records import body, chat_record, error_record, responses_record
from wirediff.analysis.comparison import impact as impact_module
from wirediff.analysis.comparison.clients import node
from wirediff.analysis.comparison.impact import SDK_SOURCE, clients, impact, prepare

pytestmark = pytest.mark.clients

FLAT = {
    "object": "error",
    "message": "This model's maximum context length is 2048 tokens.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
"""vLLM's error body before v0.10.1 (vllm-project/vllm #12886)."""


@pytest.fixture
def node_sdk(node_client: Path, monkeypatch: pytest.MonkeyPatch) -> node.NodeSdk:
    monkeypatch.setenv(node.NODE_SDK_ENV, str(node_client))
    monkeypatch.setattr(impact_module, "_memo", {})
    sdk = node.node_sdk()
    assert isinstance(sdk, node.NodeSdk), sdk
    return sdk


def test_the_npm_package_loses_the_words_of_a_flat_error(node_sdk: node.NodeSdk) -> None:
    flat, shaped = error_record(status=400, body=FLAT), error_record(id="b2")
    prepare([flat, shaped])
    assert impact(flat).clients == (SDK_SOURCE, node_sdk.client)
    assert impact(flat).get("node:raises") == "BadRequestError"
    assert impact(flat).get("node:error.message") == "no server words"
    assert impact(flat).get("error.message") == "the server's words"  # openai-python keeps them
    assert impact(shaped).get("node:error.message") == "the server's words"


def test_run_tools_refuses_arguments_that_are_an_object(node_sdk: node.NodeSdk) -> None:
    rec = chat_record(tool=True)
    body(rec)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"city": "x"}
    outcome = impact(rec)
    assert impact(chat_record(tool=True)).get("node:runTools") == "tools called"
    assert outcome.get("node:runTools") == "no tool called"
    assert "is not valid JSON" in str(outcome.get("node:runTools.refused"))


def test_one_process_measures_every_answer_of_every_batch(node_sdk: node.NodeSdk) -> None:
    prepare([chat_record(), chat_record(stream=True)])
    first = node._process.proc
    assert first is not None and first.poll() is None
    prepare([responses_record(stream=True), responses_record(tool=True)])
    assert node._process.proc is first
    assert impact(responses_record(stream=True)).get("node:final.output_text") == "text"
    assert clients()[1] == f"{node_sdk.client} (Node)"


def test_without_the_package_the_report_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(node.NODE_SDK_ENV, str(tmp_path))
    monkeypatch.setattr(impact_module, "_memo", {})
    assert impact(chat_record()).clients == (SDK_SOURCE,)
    said = clients()[1]
    assert said.startswith("openai-node: not measured (no npm `openai` package in ")
    assert str(tmp_path) in said
