"""Two-hop capture: one mitmdump, two reverse listeners, LiteLLM in between.

    client ─K1─► A ─► LiteLLM ─K2─► B ─► stand-in (openai profile, accepts only K2)

Every call is recorded twice, once per hop. The records of a pair carry their listener,
are found again by content (the gateway renames the model and may rewrite the path and
the body, so equal bodies are not to be expected), and show the two keys as two
fingerprints; neither key is on disk in plaintext.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import Mitmdump
from tests.fixtures.records import answer, auth_of, events_of, sdk_of
from tests.peers.conftest import (
    CLIENT_KEY,
    DROPPED_MESSAGES,
    LITELLM_PLACEHOLDER_KEY,
    UPSTREAM_KEY,
    UPSTREAM_MODEL,
    LiteLLM,
    by_listener,
    listener_url,
    sdk,
)
from wirediff._types import Record
from wirediff.record.redact import fingerprint
from wirediff.record.store import load_records

pytestmark = pytest.mark.peers


def prompt_of(rec: Record) -> str:
    """The user's text in a chat or Responses request: what a hop pair has in common."""
    body = rec["request"]["body"] or {}
    if isinstance(body.get("input"), str):
        return str(body["input"])
    return str(body["messages"][-1]["content"])


def answer_of(rec: Record) -> str:
    """The assistant's text in a chat/Responses answer, streamed or not."""
    res = answer(rec)
    if res["events"] is not None:
        return "".join(
            ch["delta"].get("content") or ""
            for e in events_of(rec)
            if isinstance(e["data"], dict)
            for ch in e["data"].get("choices", [])
        )
    body = res["body"]
    if body.get("object") == "response":
        return "".join(
            c["text"] for item in body["output"] for c in item.get("content", []) if "text" in c
        )
    return str(body["choices"][0]["message"]["content"])


@dataclass
class HopRun:
    m: Mitmdump
    outer: dict[str, Record]  # prompt → the client's record (listener A)
    inner: dict[str, Record]  # prompt → the gateway's record (listener B)
    answers: dict[str, str]  # prompt → what the SDK returned


CALLS = {
    "two-hop chat": ("chat", "hop-chat"),
    "two-hop chat stream": ("chat-stream", "hop-chat"),
    "two-hop responses via custom_openai": ("responses", "hop-chat"),
    "two-hop responses via openai": ("responses", "hop-openai"),
}


def endpoints(run: HopRun, prompt: str) -> tuple[str, str]:
    """The route each hop of one call took."""
    return run.outer[prompt]["tags"]["endpoint"], run.inner[prompt]["tags"]["endpoint"]


@pytest.fixture(scope="module")
def hop_run(litellm: LiteLLM) -> HopRun:
    m = litellm.two_hop
    answers: dict[str, str] = {}
    with sdk(listener_url(m, 0) + "/v1") as client:
        for prompt, (kind, model) in CALLS.items():
            msgs: Any = [{"role": "user", "content": prompt}]
            if kind == "chat":
                out = client.chat.completions.create(model=model, messages=msgs)
                answers[prompt] = out.choices[0].message.content or ""
            elif kind == "chat-stream":
                chunks = client.chat.completions.create(model=model, messages=msgs, stream=True)
                answers[prompt] = "".join(
                    c.choices[0].delta.content or "" for c in chunks if c.choices
                )
            else:
                answers[prompt] = client.responses.create(model=model, input=prompt).output_text
    records = m.records(2 * len(CALLS))
    outer = {prompt_of(r): r for r in by_listener(records, m, 0)}
    inner = {prompt_of(r): r for r in by_listener(records, m, 1)}
    return HopRun(m, outer, inner, answers)


def test_each_call_is_recorded_once_per_hop_with_its_listener(
    hop_run: HopRun, litellm: LiteLLM
) -> None:
    m = hop_run.m
    assert sorted(hop_run.outer) == sorted(hop_run.inner) == sorted(CALLS)
    gateway_host = litellm.url.removeprefix("http://")
    upstream_host = litellm.upstream.removeprefix("http://")
    for rec in hop_run.outer.values():
        assert rec["listener"] == f"reverse:{litellm.url}@{m.ports[0]}"
        assert rec["label"] == gateway_host and answer(rec)["status"] == 200
    for rec in hop_run.inner.values():
        assert rec["listener"] == f"reverse:{litellm.upstream}@{m.ports[1]}"
        assert rec["label"] == upstream_host and answer(rec)["status"] == 200
    assert {r["session"] for r in [*hop_run.outer.values(), *hop_run.inner.values()]} == {"two-hop"}


def test_hops_pair_by_content(hop_run: HopRun) -> None:
    for prompt, (kind, alias) in CALLS.items():
        outer, inner = hop_run.outer[prompt], hop_run.inner[prompt]
        # The gateway's call starts while the client's is under way.
        outer_end = outer["started"] + (outer["duration_ms"] or 0.0) / 1000
        assert outer["started"] <= inner["started"] <= outer_end
        # Same conversation, same answer; the model is renamed on the way.
        assert outer["tags"]["model"] == alias and inner["tags"]["model"] == UPSTREAM_MODEL
        assert answer_of(outer) == answer_of(inner) == hop_run.answers[prompt] != ""
        assert outer["tags"]["stream"] == inner["tags"]["stream"] == (kind == "chat-stream")
        assert outer["request"]["body"] != inner["request"]["body"]

    # custom_openai/ rewrites the path: the client's Responses call is a chat completion
    # upstream; openai/ keeps it a Responses call.
    rewritten = endpoints(hop_run, "two-hop responses via custom_openai")
    assert rewritten == ("/v1/responses", "/v1/chat/completions")
    assert endpoints(hop_run, "two-hop responses via openai") == ("/v1/responses", "/v1/responses")
    # ...and the gateway asks the upstream for a usage chunk the client did not ask for.
    streamed = hop_run.inner["two-hop chat stream"]["request"]["body"]
    assert streamed["stream_options"] == {"include_usage": True}
    assert "stream_options" not in hop_run.outer["two-hop chat stream"]["request"]["body"]


def test_the_hops_carry_different_keys(hop_run: HopRun, litellm: LiteLLM) -> None:
    for prompt in CALLS:
        outer, inner = hop_run.outer[prompt], hop_run.inner[prompt]
        assert auth_of(outer)["fingerprint"] == fingerprint(CLIENT_KEY)
        assert auth_of(inner)["fingerprint"] == fingerprint(UPSTREAM_KEY)
        assert auth_of(outer)["scheme"] == auth_of(inner)["scheme"] == "Bearer"
        # Who is calling differs too: the test's SDK, then LiteLLM's own async openai SDK,
        # or, for openai/'s Responses call, LiteLLM's own HTTP client.
        assert sdk_of(outer)["version"] == openai.__version__
        assert sdk_of(outer)["async"] is False
        if prompt == "two-hop responses via openai":
            assert inner["tags"]["sdk"] == {
                "user_agent": f"litellm/{litellm.version}", "client": "litellm",
                "client_version": litellm.version,
            }  # fmt: skip
        else:
            assert sdk_of(inner)["async"] is True
            assert (sdk_of(inner)["user_agent"] or "").startswith("AsyncOpenAI/Python ")


def test_no_key_in_plaintext_on_disk(hop_run: HopRun, auth_dropped_capture: Path) -> None:
    files = [p for p in hop_run.m.capture_dir.rglob("*") if p.is_file()]
    assert auth_dropped_capture in files and hop_run.m.capture_file in files
    for p in files:
        data = p.read_bytes()
        for key in (CLIENT_KEY, UPSTREAM_KEY):
            assert key.encode() not in data, f"a key in plaintext in {p}"


def test_auth_dropped_by_the_gateway(auth_dropped_capture: Path, litellm: LiteLLM) -> None:
    m = litellm.dropped
    records = load_records([auth_dropped_capture])
    assert len(records) == 2
    (outer,) = by_listener(records, m, 0)
    (inner,) = by_listener(records, m, 1)
    prompt = DROPPED_MESSAGES[-1]["content"]
    assert prompt_of(outer) == prompt_of(inner) == prompt
    assert outer["started"] <= inner["started"]

    # The client's key reached the gateway, which accepted it and called the upstream...
    assert auth_of(outer)["fingerprint"] == fingerprint(CLIENT_KEY)
    assert (outer["tags"]["family"], outer["tags"]["model"]) == ("chat.completions", "hop-nokey")
    # ...with neither that key nor its own upstream key: hosted_vllm's placeholder.
    auth = auth_of(inner)
    assert auth["fingerprint"] == fingerprint(LITELLM_PLACEHOLDER_KEY)
    assert auth["fingerprint"] not in (fingerprint(CLIENT_KEY), fingerprint(UPSTREAM_KEY))
    assert inner["tags"]["sdk"] == {
        "user_agent": f"litellm/{litellm.version}", "client": "litellm",
        "client_version": litellm.version,
    }  # fmt: skip
    assert inner["request"]["body"] == {
        "model": UPSTREAM_MODEL,
        "messages": DROPPED_MESSAGES,
        "stream": False,
    }

    # The upstream rejects it as OpenAI would, and the gateway relays a 401 of its own.
    assert answer(inner)["status"] == 401
    assert answer(inner)["body"]["error"]["code"] == "invalid_api_key"
    assert answer(outer)["status"] == 401
    err = answer(outer)["body"]["error"]
    assert (err["type"], err["code"]) == ("authentication_error", "401")
    assert "invalid_api_key" in err["message"]  # the upstream's answer, quoted as text
