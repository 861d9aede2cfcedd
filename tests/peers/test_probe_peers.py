"""`wirediff probe` on real servers — llama-cpp-python's server on its tiny model,
open-responses-server over it, LiteLLM in front of the `openai` stand-in — and, with the
stand-ins, against an independent probe, `llm-comply`.

On each peer: every feature's status is the one its wire behaviour implies (the table
below), its premises checked with the real openai SDK (`tests/probe_premises.py`: on the
server, or on the very answers the probe recorded where a model samples), and so is every
client row. Where `llm-comply` and the probe test the same feature (`SAME`), on the
peers and on every stand-in, they agree, or the disagreement is one docs/probe.md explains
with the wire evidence (`DOCUMENTED`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import missing
from tests.peers.conftest import CLIENT_KEY, LiteLLM, Llama, Ors, loopback_env
from tests.probe_premises import disagreement, sdk_outcomes, upgrade_diagnosis
from wirediff.analysis.comparison.clients import node
from wirediff.backends.standin import standin
from wirediff.cli.probe import main_probe
from wirediff.probe.features import load_probe
from wirediff.record.store import load_records

pytestmark = pytest.mark.peers

LLM_COMPLY = str(Path(sys.executable).with_name("llm-comply"))
KEY_ENV = "WIREDIFF_PEER_PROBE_KEY"
FEATURES = [f.id for f in load_probe().features]
SAME = {
    # llm-comply test (format, id) → the probe's feature that tests the same thing
    ("openai-chat", "chat-basic-response"): "chat.text",
    ("openai-chat", "chat-tool-calling"): "chat.tools",
    ("openai-chat", "chat-streaming-response"): "chat.stream",
    ("openai-chat", "chat-streaming-usage"): "chat.usage_chunk",
    ("openai-chat", "chat-error-handling"): "chat.bad_parameter",
    ("open-responses", "basic-response"): "responses.text",
    ("open-responses", "tool-calling"): "responses.tools",
    ("open-responses", "streaming-response"): "responses.stream_grammar",
}
ERROR_FEATURES = {f.id for f in load_probe().features if "error" in f.expect}
"""Where llm-comply's `passed` means the server refused the bad request as OpenAI does: the
probe's `pass`. Elsewhere its `passed` means a client works: the probe's `pass` or
`deviation`."""
TOOLS = frozenset({"chat.tools", "chat.parallel_tools", "chat.streamed_tool_calls"})
SAMPLED: dict[str, frozenset[str]] = {
    "llama": TOOLS,
    "ors": TOOLS | {"responses.stream"},
    "litellm": frozenset(),
}
"""Rows that follow what the tiny model samples: its tool calls are random tokens (their
arguments JSON now and then, most often not), and ORS streams a Response's text before its
item when the model says something, which the SDK's stream helper cannot read, and nothing
of the kind when it says nothing. No table holds them; their premises are checked on the
very answers the probe graded (`replay`), and llm-comply's tool test is compared nowhere."""
REPLAY = {"llama", "ors"}
"""Servers whose answers the SDK reads replayed from the probe's records (a sampling
model's next answer to the same request is another)."""

EXPECTED: dict[str, dict[str, str]] = {
    "llama": {
        "models": "deviation",  # no `created` in the model objects
        "chat.text": "deviation",  # no `message.refusal`
        "chat.stream": "pass",
        "chat.usage_chunk": "breaking",  # include_usage asked, no usage chunk
        "chat.structured_output": "breaking",  # 500: response_format json_schema refused
        "chat.bad_parameter": "deviation",  # temperature 5 answered 200
        **{f: "unsupported" for f in FEATURES if f.startswith("responses.")},  # 404
        "embeddings": "breaking",  # 500: the model was not loaded for embeddings
        "errors.unknown_route": "deviation",  # FastAPI's {"detail": …}
        "errors.wrong_method": "deviation",
        "errors.bad_key": "deviation",  # no key checked: 200
    },
    "ors": {
        "models": "deviation",  # llama's, passed through
        "chat.text": "deviation",
        "chat.stream": "deviation",  # llama's stream, labeled application/json
        "chat.usage_chunk": "breaking",
        "chat.structured_output": "breaking",
        "chat.bad_parameter": "deviation",
        # Responses bodies the SDK cannot read (no `output`), streams without a terminal event
        **{f: "breaking" for f in FEATURES if f.startswith("responses.")},
        "responses.stream_grammar": "deviation",  # ends with response.in_progress
        "responses.websocket": "unsupported",  # a 404 at the root it serves: no WS mode
        "embeddings": "breaking",
        "errors.unknown_route": "deviation",
        "errors.wrong_method": "deviation",
        "errors.bad_key": "deviation",
    },
    "litellm": {
        "models": "pass",
        "chat.text": "pass",
        "chat.tools": "pass",
        "chat.structured_output": "pass",
        # chunks without `finish_reason`; Responses objects short of required fields
        **{f: "deviation" for f in FEATURES if f.startswith(("chat.", "responses."))
           and f not in ("chat.text", "chat.tools", "chat.structured_output")},
        "chat.parallel_tools": "deviation",  # one call of two (the stand-in's)
        "embeddings": "breaking",  # 400: encoding_format base64 not supported
        "errors.unknown_route": "deviation",
        "errors.wrong_method": "deviation",
        "errors.bad_key": "deviation",  # 400 "No connected db."
    },
}  # fmt: skip
NOT_READY = {
    "llama": {
        "codex": ["responses.stream", "responses.tools", "responses.function_call_round_trip",
                  "responses.stream_grammar"],
        "openai-agents": ["responses.stream", "responses.tools",
                          "responses.function_call_round_trip", "responses.stream_grammar"],
        "vercel-ai": ["responses.text", "responses.stream", "responses.tools",
                      "responses.function_call_round_trip", "responses.structured_output",
                      "responses.stream_grammar"],
        "vercel-ai-chat": ["chat.usage_chunk", "chat.structured_output"],
        "langchain": ["chat.structured_output"],
        "langchain-responses": ["responses.text", "responses.stream", "responses.stream_grammar"],
        "llamaindex-responses": ["responses.text", "responses.stream", "responses.stream_grammar"],
        "openai-python": ["chat.structured_output", "responses.text",
                          "responses.previous_response_id", "responses.structured_output",
                          "embeddings"],
        "openai-python-websocket": ["responses.websocket"],
        "openai-node": ["chat.usage_chunk", "responses.text", "responses.stream",
                        "responses.stream_grammar", "embeddings"],
    },
    "ors": {  # responses.stream left out (SAMPLED)
        "codex": ["responses.tools", "responses.function_call_round_trip"],
        "openai-agents": ["responses.tools", "responses.function_call_round_trip"],
        "vercel-ai": ["responses.text", "responses.tools", "responses.function_call_round_trip",
                      "responses.structured_output"],
        "vercel-ai-chat": ["chat.usage_chunk", "chat.structured_output"],
        "langchain": ["chat.structured_output"],
        "langchain-responses": ["responses.text"],
        "llamaindex-responses": ["responses.text"],
        "openai-python": ["chat.structured_output", "responses.text",
                          "responses.previous_response_id", "responses.structured_output",
                          "embeddings"],
        "openai-python-websocket": ["responses.websocket"],
        "openai-node": ["chat.usage_chunk", "responses.text", "embeddings"],
    },
    "litellm": {"openai-python": ["embeddings"], "openai-node": ["embeddings"]},
}  # fmt: skip
"""Each client row that is NOT READY, with the features that stop it (`SAMPLED` ones left
out); every other row is READY."""

# Where the two probes disagree, and why (docs/probe.md shows the wire): llm-comply fails a
# spec violation that openai-python parses (the probe's `deviation`); its error test sends
# another bad request (no `model`) than the probe's (temperature 5); it validates every
# stream event's Response against the Open Responses schema where the probe's grammar row
# reads the grammar.
PARSED = "failed/deviation"
DOCUMENTED: dict[str, set[tuple[str, str, str]]] = {
    "llama": {("chat-basic-response", "chat.text", PARSED)},
    "ors": {("streaming-response", "responses.stream_grammar", PARSED)},
    "litellm": {
        ("chat-error-handling", "chat.bad_parameter", "passed/deviation"),
        ("basic-response", "responses.text", PARSED),
        ("tool-calling", "responses.tools", PARSED),
        ("streaming-response", "responses.stream_grammar", PARSED),
    },
    "openai": set(),
    "lmstudio": {
        ("chat-basic-response", "chat.text", PARSED),
        ("chat-tool-calling", "chat.tools", PARSED),
        ("chat-error-handling", "chat.bad_parameter", "passed/deviation"),
    },
    "ollama": {
        ("chat-basic-response", "chat.text", PARSED),
        ("chat-tool-calling", "chat.tools", PARSED),
        ("tool-calling", "responses.tools", PARSED),
    },
    "vllm": {
        ("chat-basic-response", "chat.text", PARSED),
        ("chat-tool-calling", "chat.tools", PARSED),
        ("basic-response", "responses.text", PARSED),
        ("tool-calling", "responses.tools", PARSED),
        ("streaming-response", "responses.stream_grammar", "failed/pass"),
    },
}
ONLY_RESPONSES = {"ors"}
"""ORS serves the Responses API at its root; its chat completions are its upstream's."""
ERRORS: dict[Any, Any] = {}
"""llm-comply's reasons, by (server URL, test id): shown when a comparison fails."""


def run_probe(url: str, tmp: Path, *extra: str) -> tuple[dict[str, Any], list[Any]]:
    """The probe's summary and its kept records."""
    out, keep = tmp / "probe.json", tmp / "kept"
    code = main_probe([url, "--json", str(out), "--keep", str(keep), *extra])
    assert code == 1, code  # every server here lacks a feature
    doc = json.loads(out.read_text(encoding="utf-8"))["probe"]
    return doc, load_records(sorted(p for p in keep.iterdir() if p.name.count(".") > 1))


def comply(url: str, model: str, key: str) -> dict[tuple[str, str], str]:
    found = {}
    for fmt in ("openai-chat", "open-responses"):
        done = subprocess.run(
            [LLM_COMPLY, "--format", fmt, "-u", url, "-k", key, "-m", model, "--json",
             "--timeout", "60"],
            capture_output=True, text=True, env=loopback_env(), timeout=600, check=False,
        )  # fmt: skip
        doc = json.loads(done.stdout)
        found.update({(fmt, r["id"]): r["status"] for r in doc["results"]})
        ERRORS.update({(url, r["id"]): r.get("errors") for r in doc["results"]})
    return found


def disagreements(
    mine: dict[str, str], theirs: dict[tuple[str, str], str], skip: frozenset[str] = frozenset()
) -> set[tuple[str, str, str]]:
    out = set()
    for test, feature in SAME.items():
        if test not in theirs or feature not in mine or feature in skip:
            continue
        if theirs[test] == "skipped":
            continue
        works = ("pass",) if feature in ERROR_FEATURES else ("pass", "deviation")
        if (theirs[test] == "passed") != (mine[feature] in works):
            out.add((test[1], feature, f"{theirs[test]}/{mine[feature]}"))
    return out


@pytest.fixture
def peers(
    llama: Llama, ors: Ors, litellm: LiteLLM, monkeypatch: pytest.MonkeyPatch
) -> dict[str, tuple[str, list[str], str, str]]:
    """name → (base URL, probe options, the model, its key)."""
    monkeypatch.setenv(KEY_ENV, CLIENT_KEY)
    return {
        "llama": (llama.url + "/v1", [], "tiny", "x"),
        "ors": (ors.url, ["--model", "tiny"], "tiny", "x"),
        "litellm": (
            litellm.url + "/v1",
            ["--api-key-env", KEY_ENV, "--model", "standin-chat"],
            "standin-chat",
            CLIENT_KEY,
        ),
    }


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_probe_on_real_peers(
    name: str, peers: dict[str, tuple[str, list[str], str, str]], tmp_path: Path
) -> None:
    url, opts, model, key = peers[name]
    if isinstance(node.node_sdk(), str):
        missing(f"the rows are openai-node's too: {node.node_sdk()}")
    doc, records = run_probe(url, tmp_path, *opts)
    got = {f["id"]: f["status"] for f in doc["features"]}
    sampled = SAMPLED[name]
    want = {f: status for f, status in EXPECTED[name].items() if f not in sampled}
    assert {f: got[f] for f in FEATURES if f not in sampled} == want
    # a refused upgrade is told as one, not as a method to change: WebSocket mode opens by GET
    [ws] = [f for f in doc["features"] if f["id"] == "responses.websocket"]
    status, codes = upgrade_diagnosis(ws, records)
    assert "method_not_allowed" not in codes
    assert ("websocket_not_supported" in codes) == (status != 101), (status, codes)
    # the premises: the real SDK, making each feature's call, gets what the row implies
    seen = sdk_outcomes(
        url, doc["model"], key, doc["embedding_model"], records if name in REPLAY else None
    )
    wrong = {f: disagreement(f, got[f], seen[f]) for f in FEATURES}
    assert not {f: w for f, w in wrong.items() if w}, (wrong, doc["features"])
    # the client rows
    clients = {c["id"]: c for c in doc["clients"]}
    blocked = {
        cid: [b for b in c["blocking"] if b not in sampled]
        for cid, c in clients.items()
        if c["state"] != "READY"
    }
    assert blocked == NOT_READY[name]
    for c in clients.values():
        assert c["blocking"] == [n for n in c["needs"] if got[n] in ("breaking", "unsupported")]
    # and llm-comply on the same server
    theirs = comply(url, model, key)
    if name in ONLY_RESPONSES:
        theirs = {k: v for k, v in theirs.items() if k[0] == "open-responses"}
    assert disagreements(got, theirs, sampled & TOOLS) == DOCUMENTED[name], ERRORS


@pytest.mark.parametrize("name", ["lmstudio", "ollama", "openai", "vllm"])
def test_probe_and_llm_comply_on_standins(name: str, tmp_path: Path) -> None:
    with standin(name) as root:
        doc, _ = run_probe(root + "/v1", tmp_path)
        theirs = comply(root + "/v1", doc["model"], "x")
    mine = {f["id"]: f["status"] for f in doc["features"]}
    assert disagreements(mine, theirs) == DOCUMENTED[name], ERRORS
