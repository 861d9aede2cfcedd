"""The Codex CLI (`codex exec`) with the README's model provider, through `wirediff capture`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clients.conftest import (
    REPLAY_KEY,
    assert_no_key_on_disk,
    assert_replayed_and_reported,
    assert_stream_complete,
    client_env,
    npm_version,
    replay_and_report,
    run_client,
)
from tests.conftest import WirediffCapture
from tests.fixtures.records import answer, auth_of, events_of, sdk_of
from tests.readme_blocks import readme_block, readme_command, with_proxy

pytestmark = pytest.mark.clients

KEY = "sk-clients-CODEX-CANARY-91c2d7e4"


def test_codex_exec(
    codex_client: Path, capture: WirediffCapture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    codex = codex_client
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    config = with_proxy(readme_block("codex-config"), capture.proxy_url)
    assert capture.base_url in config
    (home / "config.toml").write_text(config, encoding="utf-8")
    argv = readme_command("codex")
    assert argv[:2] == ["codex", "exec"], argv
    env = client_env(CODEX_HOME=str(home), OPENAI_API_KEY=KEY, TERM="dumb")
    out = run_client([str(codex / "node_modules/.bin/codex"), *argv[1:]], cwd=work, env=env)
    records = capture.stop()

    # One turn: the stand-in asks for the first tool (a shell command with a placeholder),
    # Codex runs it in its sandbox and sends the output back, the stand-in answers in text.
    assert out.strip().startswith("Tool said:"), out
    assert [(r["request"]["method"], r["tags"]["endpoint"]) for r in records] == [
        ("POST", "/v1/responses"), ("POST", "/v1/responses"),
    ]  # fmt: skip
    first, second = records
    call = next(
        e["data"]["item"] for e in events_of(first)
        if e["event"] == "response.output_item.done" and e["data"]["item"]["type"] == "function_call"
    )  # fmt: skip
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {"cmd": "example"}
    answered = [
        i for i in second["request"]["body"]["input"] if i.get("type") == "function_call_output"
    ]
    assert [i["call_id"] for i in answered] == [call["call_id"]]

    version = npm_version(codex, "@openai/codex")
    for r in records:
        assert r["tags"]["family"] == "responses" and r["tags"]["model"] == "gpt-4o-mini"
        assert answer(r)["status"] == 200
        assert_stream_complete(r)
        sdk = sdk_of(r)
        assert (sdk["user_agent"] or "").startswith(f"codex_exec/{version} (")
        assert (sdk["client"], sdk["client_version"]) == ("codex_exec", version)
        assert "lang" not in sdk  # no X-Stainless-* headers: Codex is not an OpenAI SDK
        assert auth_of(r)["scheme"] == "Bearer"

    replayed = replay_and_report(capture.capture_file, tmp_path, monkeypatch)
    assert_replayed_and_reported(records, replayed)
    assert_no_key_on_disk(replayed.files, KEY, REPLAY_KEY)
