"""npm `openai` on Node: reverse mode through `wirediff capture`, and forward mode (HTTPS
through mitmproxy's CA) with the README's undici recipes, to an upstream with a private CA."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

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
from tests.fixtures.records import answer, events_of, sdk_of
from tests.readme_blocks import readme_block, readme_command, with_proxy
from wirediff._types import Record
from wirediff.backends.standin import standin

pytestmark = pytest.mark.clients

KEY = "sk-clients-NODE-CANARY-3f9a0c6e"
WORKLOAD = (Path(__file__).with_name("workload.mjs")).read_text(encoding="utf-8")
FAMILIES = ["chat.completions", "chat.completions", "responses", "responses", "models"]


def node_app(node: Path, workdir: Path, code: str) -> Path:
    """`app.mjs` in `workdir`, importing from the installed client's node_modules."""
    (workdir / "node_modules").symlink_to(node / "node_modules")
    app = workdir / "app.mjs"
    app.write_text(code + "\n" + WORKLOAD, encoding="utf-8")
    return app


def run_node(app: Path, **env: str) -> dict[str, Any]:
    out = run_client(["node", str(app)], cwd=app.parent, env=client_env(**env))
    return dict(json.loads(out.splitlines()[-1]))


def assert_workload(out: dict[str, Any], records: list[Record]) -> None:
    """What the SDK got, and what the capture holds of it: the same, every event."""
    assert out["chat"].startswith("Echo:") and out["responses"].startswith("Echo:")
    assert out["models"] == ["gpt-4o-mini", "gpt-4.1-mini"]
    assert [r["tags"]["family"] for r in records] == FAMILIES
    assert [r["tags"]["stream"] for r in records] == [False, True, False, True, False]
    assert all(answer(r)["status"] == 200 for r in records)
    chat_stream, responses_stream = records[1], records[3]
    for r in (chat_stream, responses_stream):
        assert_stream_complete(r)
    assert len(events_of(chat_stream)) == out["chatChunks"] + 1  # and [DONE]
    assert [e["event"] for e in events_of(responses_stream)] == out["responseEvents"]


def test_reverse_mode(
    node_client: Path, capture: WirediffCapture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = with_proxy(readme_block("node"), capture.proxy_url)
    out = run_node(node_app(node_client, tmp_path, code), OPENAI_API_KEY=KEY)
    records = capture.stop()
    assert_workload(out, records)
    version = npm_version(node_client, "openai")
    for r in records:
        sdk = sdk_of(r)
        assert (sdk["lang"], sdk["version"], sdk["runtime"]) == ("js", version, "node")
        assert sdk["user_agent"] == f"OpenAI/JS {version}" and "client" not in sdk
        assert sdk["async"] is True  # the JS SDK sends no X-Stainless-Async; it is all async
        assert (
            sdk["runtime_version"]
            == subprocess.check_output(["node", "--version"]).decode().strip()
        )
        assert "x-stainless-async" not in [k.lower() for k, _ in r["request"]["headers"]]
    replayed = replay_and_report(capture.capture_file, tmp_path, monkeypatch)
    assert_replayed_and_reported(records, replayed)
    assert_no_key_on_disk(replayed.files, KEY, REPLAY_KEY)


# --- forward mode ----------------------------------------------------------------------------


def private_ca_upstream(mitmdump: Any, backend: str, workdir: Path) -> tuple[str, Path]:
    """An HTTPS upstream whose certificate a CA of its own signed (a bare mitmdump reverse
    listener terminating TLS in front of the stand-in): `(https base URL, that CA)`."""
    confdir = workdir / "private-ca"
    tls = mitmdump([f"reverse:{backend}"], addon=False, confdir=confdir)
    return f"https://127.0.0.1:{tls.port}/v1", confdir / "mitmproxy-ca-cert.pem"


def forward_capture(mitmdump: Any, upstream_ca: Path) -> Any:
    """The README's forward-mode capture for an upstream with a private CA."""
    argv = readme_command("forward-private-ca")
    sets = [a for a in argv if a.startswith("ssl_verify_upstream_trusted_ca=")]
    assert sets == ["ssl_verify_upstream_trusted_ca=/path/to/internal-ca.pem"], argv
    return mitmdump(
        ["regular"],
        label="openai",
        extra=["--set", f"ssl_verify_upstream_trusted_ca={upstream_ca}"],
    )


def readme_run_env(proxy: Any) -> dict[str, str]:
    """The README's `HTTPS_PROXY=… NODE_EXTRA_CA_CERTS=… node app.mjs`, for this proxy."""
    argv = readme_command("node-forward-run")
    assert argv[-2:] == ["node", "app.mjs"], argv
    env = dict(a.split("=", 1) for a in argv[:-2])
    assert set(env) == {"HTTPS_PROXY", "NODE_EXTRA_CA_CERTS"}, env
    env["HTTPS_PROXY"] = with_proxy(env["HTTPS_PROXY"], proxy.url)
    assert env["NODE_EXTRA_CA_CERTS"] == "~/.mitmproxy/mitmproxy-ca-cert.pem"
    env["NODE_EXTRA_CA_CERTS"] = str(proxy.ca_cert)
    return env


@pytest.mark.parametrize("recipe", ["node-env-proxy", "node-proxy-agent"])
def test_forward_mode_with_undici_to_a_private_ca_upstream(
    recipe: str, node_client: Path, mitmdump: Any, tmp_path: Path
) -> None:
    with standin("openai") as backend:
        upstream, upstream_ca = private_ca_upstream(mitmdump, backend, tmp_path)
        proxy = forward_capture(mitmdump, upstream_ca)
        code = with_proxy(readme_block(recipe), proxy.url)
        if "const client" not in code:  # the process-wide recipe leaves the app unchanged
            code += '\nimport OpenAI from "openai";\nconst client = new OpenAI();\n'
        env = readme_run_env(proxy)
        if recipe == "node-proxy-agent":
            del env["HTTPS_PROXY"]  # the agent alone sends it through the proxy
        out = run_node(
            node_app(node_client, tmp_path, code),
            OPENAI_API_KEY=KEY,
            OPENAI_BASE_URL=upstream,
            **env,
        )
        records = proxy.records(5)
    assert_workload(out, records)
    assert all(r["request"]["url"].startswith(upstream) for r in records)
    assert all(r["listener"].startswith("regular") for r in records)
    assert_no_key_on_disk([proxy.capture_file], KEY)


def test_node_20_fetch_ignores_https_proxy(
    node_client: Path, mitmdump: Any, tmp_path: Path
) -> None:
    """Why the README's Node recipes exist: unchanged code goes around the proxy."""
    major = int(subprocess.check_output(["node", "--version"]).decode().lstrip("v").split(".")[0])
    if major != 20:
        pytest.skip(f"the README's claim is about Node 20; this is Node {major}")
    with standin("openai") as backend:
        upstream, upstream_ca = private_ca_upstream(mitmdump, backend, tmp_path)
        proxy = forward_capture(mitmdump, upstream_ca)
        code = 'import OpenAI from "openai";\nconst client = new OpenAI();\n'
        env = {**readme_run_env(proxy), "NODE_EXTRA_CA_CERTS": str(upstream_ca)}
        out = run_node(
            node_app(node_client, tmp_path, code),
            OPENAI_API_KEY=KEY,
            OPENAI_BASE_URL=upstream,
            **env,
        )
    assert out["chat"].startswith("Echo:")  # it worked, directly:
    assert proxy.records() == []
    assert os.environ.get("NODE_USE_ENV_PROXY") is None
