"""`wirediff replay` to a real LiteLLM proxy: a session recorded against the openai stand-in
is re-sent through the gateway (model mapped to a `custom_openai/` model that forwards to a
stand-in), recorded, linked and compared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import Mitmdump
from tests.fixtures.records import answer, auth_of, events_of
from tests.peers.conftest import CLIENT_KEY, LiteLLM, sdk
from wirediff.analysis.index.analyze import analyze
from wirediff.backends.standin import standin
from wirediff.cli.replay import main_replay
from wirediff.record.redact import fingerprint
from wirediff.record.store import load_records

pytestmark = pytest.mark.peers
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]


def test_replay_to_litellm(
    mitmdump: Callable[..., Mitmdump],
    litellm: LiteLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with standin("openai") as url:
        m = mitmdump([f"reverse:{url}"], label="openai")
        with sdk(m.url + "/v1", api_key="sk-baseline-key-0001") as client:
            client.chat.completions.create(model="gpt-4o-mini", messages=ASK)
            for _ in client.chat.completions.create(model="gpt-4o-mini", messages=ASK, stream=True):
                pass
            client.responses.create(model="gpt-4o-mini", input="Say hello.")
        originals = m.records(3)

    monkeypatch.setenv("WIREDIFF_TEST_LITELLM_KEY", CLIENT_KEY)
    out = tmp_path / "replay.litellm.jsonl"
    code = main_replay(
        [str(m.capture_file), "--to", litellm.url + "/v1", "--label", "litellm",
         "--api-key-env", "WIREDIFF_TEST_LITELLM_KEY", "--model-map", "gpt-4o-mini=standin-chat",
         "-o", str(out)]
    )  # fmt: skip
    assert code == 0
    replays = load_records([out])
    by_original = {r["replay_of"]: r for r in replays}
    assert set(by_original) == {r["id"] for r in originals}
    for original in originals:
        replay = by_original[original["id"]]
        assert replay["label"] == "litellm" and answer(replay)["status"] == 200
        assert replay["request"]["body"]["model"] == "standin-chat"
        assert replay["tags"]["stream"] == original["tags"]["stream"]
        assert auth_of(replay)["fingerprint"] == fingerprint(CLIENT_KEY)
    stream = next(r for r in replays if r["tags"]["stream"])
    assert events_of(stream)[-1]["data"] == "[DONE]"
    # The gateway answers with its own alias and its own headers: found, not hidden.
    found = analyze(originals + replays)
    assert len(found.pairs) == 3
    assert "header" in set(found.divergences["kind"])
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert CLIENT_KEY.encode() not in path.read_bytes()
