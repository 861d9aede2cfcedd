"""The `clients` tier: the OpenAI-API clients people use, captured, replayed and reported.

The clients are installed by `scripts/install-clients.sh`, each in its own directory under
`.clients/` (LangChain pulls openai 3.x, which cannot share a venv with mitmproxy); without
them the tier skips, telling you to run it (with `WIREDIFF_REQUIRED=1`, as `make test` sets
it, it fails instead).

Each test runs the README's own code for its client (`tests/readme_blocks.py`) through the
README's `wirediff capture` command in front of the `openai` stand-in, then replays the
capture to the `lmstudio` stand-in and renders the report:

    client ─► wirediff capture (mitmdump + addons/capture.py) ─► openai stand-in
    capture ─► wirediff replay ─► lmstudio stand-in;  wirediff report (both)
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WirediffCapture, missing
from tests.fixtures.records import answer, events_of, sdk_of
from tests.readme_blocks import readme_command
from wirediff._types import Record
from wirediff.backends.standin import standin
from wirediff.cli.replay import main_replay
from wirediff.cli.report import main_report
from wirediff.record.store import load_records
from wirediff.reports.captures import Client

ROOT = Path(__file__).resolve().parent.parent.parent
CLIENTS_DIR = Path(os.environ.get("WIREDIFF_CLIENTS_DIR") or ROOT / ".clients")
INSTALL_HINT = "run scripts/install-clients.sh"
MODEL = "gpt-4o-mini"  # served by the openai stand-in
REPLAY_MODEL = "qwen2.5-7b-instruct"  # served by the lmstudio stand-in
REPLAY_KEY = "sk-clients-REPLAY-CANARY-0b7e41d2"
REPLAY_KEY_ENV = "WIREDIFF_CLIENTS_REPLAY_KEY"
CLIENT_TIMEOUT = 120.0
"""A client that has not finished by then is stuck (Codex reconnects forever when it can)."""


def client_dir(name: str, needs: str) -> Path:
    """`.clients/<name>`, or skip (fail when required) when it is not installed."""
    path = CLIENTS_DIR / name
    if not (path / ".installed").is_file() or not (path / needs).exists():
        missing(f"client {name} is not installed in {CLIENTS_DIR}: {INSTALL_HINT}")
    return path


@pytest.fixture
def node_client() -> Path:
    return client_dir("node", "node_modules/openai/package.json")


@pytest.fixture
def codex_client() -> Path:
    return client_dir("codex", "node_modules/.bin/codex")


@pytest.fixture
def langchain_client() -> Path:
    return client_dir("langchain", "bin/python")


@pytest.fixture
def llamaindex_client() -> Path:
    return client_dir("llamaindex", "bin/python")


def client_env(**extra: str) -> dict[str, str]:
    """This environment without proxy settings or Python paths, plus `extra`."""
    drop = {"http_proxy", "https_proxy", "all_proxy", "no_proxy", "pythonpath", "virtual_env"}
    env = {k: v for k, v in os.environ.items() if k.lower() not in drop}
    return {**env, **extra}


def run_client(argv: list[str], *, cwd: Path, env: dict[str, str]) -> str:
    """Run a client to the end; its stdout, or a failure quoting its output."""
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, (
        f"{argv[0]} exited with {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-3000:]}"
    )
    return done.stdout


def npm_version(client: Path, package: str) -> str:
    pkg = client / "node_modules" / package / "package.json"
    return str(json.loads(pkg.read_text(encoding="utf-8"))["version"])


def pip_version(venv: Path, dist: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({dist!r}))"
    return run_client([str(venv / "bin" / "python"), "-c", code], cwd=venv, env=client_env())


def start_capture(upstream: str, workdir: Path, session: str) -> WirediffCapture:
    """The README's `wirediff capture` with the stand-in as `--to`, on a free port."""
    argv = readme_command("capture")
    assert argv[:2] == ["wirediff", "capture"], argv
    argv = [upstream if a == "https://api.openai.com/v1" else a for a in argv[2:]]
    argv += ["--port", "0", "--session", session, "--dir", str(workdir / "captures")]
    return WirediffCapture.start(argv, workdir / f"capture-{session}.out", client_env())


@pytest.fixture
def capture(tmp_path: Path) -> Iterator[WirediffCapture]:
    """`wirediff capture` in front of a fresh `openai` stand-in, stopped after the test.

    Tests ask for their client's fixture first, so a missing client skips before this starts.
    """
    with standin("openai") as url:
        cap = start_capture(url + "/v1", tmp_path, "client")
        try:
            yield cap
        finally:
            cap.kill()


@dataclass
class Replayed:
    records: list[Record]
    summary: dict[str, Any]
    files: list[Path]


def replay_and_report(
    capture_file: Path, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> Replayed:
    """`wirediff replay` of the capture to the `lmstudio` stand-in, then `wirediff report`."""
    monkeypatch.setenv(REPLAY_KEY_ENV, REPLAY_KEY)
    out = workdir / "replay.lmstudio.jsonl"
    html, summary = workdir / "report.html", workdir / "summary.json"
    with standin("lmstudio") as url:
        code = main_replay(
            [str(capture_file), "--to", url + "/v1", "--label", "lmstudio",
             "--api-key-env", REPLAY_KEY_ENV, "--model-map", f"*={REPLAY_MODEL}", "-o", str(out)]
        )  # fmt: skip
    assert code == 0
    code = main_report([str(capture_file), str(out), "-o", str(html), "--json", str(summary)])
    assert code == 0
    return Replayed(
        load_records([out]),
        json.loads(summary.read_text(encoding="utf-8")),
        [capture_file, out, html, summary],
    )


def assert_replayed_and_reported(originals: list[Record], replayed: Replayed) -> None:
    """Every original replayed once; both backends in the report, with every family."""
    assert sorted(r["replay_of"] or "" for r in replayed.records) == sorted(
        r["id"] for r in originals
    )
    assert {r["label"] for r in replayed.records} == {"lmstudio"}
    backends = {b["label"]: b for b in replayed.summary["backends"]}
    assert set(backends) == {"openai", "lmstudio"}
    families = {r["tags"]["family"] for r in originals}
    assert backends["openai"]["exchanges"] == backends["lmstudio"]["exchanges"] == len(originals)
    assert set(backends["openai"]["verdicts"]) == families
    assert set(backends["openai"]["verdicts"].values()) == {"compatible"}
    assert set(backends["lmstudio"]["verdicts"]) == families
    # the report names the client that produced the traffic, on the capture's clients line
    [captured] = backends["openai"]["captures"]
    agents = {sdk_of(r)["user_agent"] for r in originals}
    assert {c["user_agent"] for c in captured["clients"]} == agents
    html = replayed.files[2].read_text(encoding="utf-8")
    assert all(f"<b>{Client(c).name}</b>" in html for c in captured["clients"])


def assert_no_key_on_disk(files: list[Path], *keys: str) -> None:
    assert all(p.is_file() for p in files), files
    for p in files:
        data = p.read_bytes()
        for key in keys:
            assert key.encode() not in data, f"a key in plaintext in {p}"


def assert_stream_complete(record: Record) -> None:
    """A streamed answer recorded whole: every event, ending as its API ends a stream.

    A client may hang up once it has the last event, before the server ends the body (Codex
    does, now and then, under load): recorded as it happened, a client disconnect, the
    events whole all the same."""
    events = events_of(record)
    error = record.get("error")
    said = (record["id"], error, events[-1:] if events else None)
    hung_up = error is not None and error["kind"] == "client_disconnect"
    assert record["tags"]["stream"] and (answer(record)["complete"] is True or hung_up), said
    assert events and not any(e.get("partial") for e in events)
    if record["tags"]["family"] == "chat.completions":
        assert events[-1]["data"] == "[DONE]"
    else:
        assert [e["data"]["sequence_number"] for e in events] == list(range(len(events)))
        assert events[-1]["event"] == "response.completed"
