"""`wirediff probe` against every stand-in: the matrix and readiness rows each one's wire
behaviour implies, feature by feature, with the premises checked by the real openai SDK;
the exit codes; `--keep`, the report, summary.json and JUnit; and a server that is not there.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from junitparser import Failure, JUnitXml
from websockets.exceptions import InvalidStatus

from tests.conftest import NOT_PROXIED
from wirediff.backends.standin import standin
from wirediff.cli.probe import main_probe
from wirediff.probe.features import load_probe
from wirediff.reports.render import SCHEMA_PATH

pytestmark = pytest.mark.e2e

KEY = "sk-e2e-probe-CANARY-4a7e91"
KEY_ENV = "WIREDIFF_E2E_PROBE_KEY"
ALL = [f.id for f in load_probe().features]
CHAT = [f for f in ALL if f.startswith("chat.") and f != "chat.bad_parameter"]
RESPONSES = [f for f in ALL if f.startswith("responses.")]

# What each stand-in's profile makes of each feature (the rest pass).
EXPECTED: dict[str, dict[str, str]] = {
    "openai": {
        "chat.parallel_tools": "deviation",  # one call per answer
        "chat.bad_parameter": "deviation",  # temperature=5 accepted
        "embeddings": "unsupported",  # not emulated: 501
        "errors.bad_key": "deviation",  # no key checked
    },
    "lmstudio": {
        **{f: "deviation" for f in ("chat.text", "chat.tools", "chat.structured_output")},
        "chat.usage_chunk": "breaking",  # include_usage ignored
        "chat.parallel_tools": "deviation",
        "chat.bad_parameter": "deviation",
        **{f: "unsupported" for f in RESPONSES},  # 200 "Unexpected endpoint or method."
        "embeddings": "unsupported",
        "errors.unknown_route": "breaking",  # a soft error in a 200
        "errors.wrong_method": "breaking",
        "errors.bad_key": "deviation",
    },
    "ollama": {
        **{f: "deviation" for f in ("chat.text", "chat.tools", "chat.structured_output")},
        "chat.parallel_tools": "deviation",
        "chat.bad_parameter": "deviation",
        **{
            f: "deviation"
            for f in RESPONSES
            if f not in ("responses.stream_grammar", "responses.websocket")
        },
        "responses.websocket": "unsupported",  # 405 to the upgrade
        "embeddings": "unsupported",
        "errors.unknown_route": "deviation",  # a text 404, not an error object
        "errors.wrong_method": "deviation",
        "errors.bad_key": "deviation",
    },
    "vllm": {
        **{f: "deviation" for f in ("chat.text", "chat.tools", "chat.structured_output")},
        "chat.parallel_tools": "deviation",
        "chat.bad_parameter": "deviation",
        **{
            f: "deviation"
            for f in RESPONSES
            if f
            not in (
                "responses.stream_grammar",
                "responses.websocket",
                "responses.previous_response_id",
            )
        },
        "responses.previous_response_id": "unsupported",  # 404 Response … not found
        "responses.websocket": "unsupported",
        "embeddings": "unsupported",
        "errors.unknown_route": "deviation",  # FastAPI's {"detail": …}
        "errors.wrong_method": "deviation",
        "errors.bad_key": "deviation",
    },
}
BLOCKED = {
    "openai": {"openai-python": ["embeddings"], "openai-node": ["embeddings"]},
    "lmstudio": {
        "codex": ["responses.stream", "responses.tools", "responses.function_call_round_trip",
                  "responses.stream_grammar"],
        "openai-node": ["chat.usage_chunk", "responses.text", "responses.stream",
                        "responses.stream_grammar", "embeddings"],
        "langchain": ["responses.text", "responses.stream", "responses.stream_grammar"],
    },
    "ollama": {"openai-python": ["responses.websocket", "embeddings"], "codex": []},
    "vllm": {
        "openai-python": ["responses.previous_response_id", "responses.websocket", "embeddings"],
        "openai-agents": [],
    },
}  # fmt: skip


def sdk(url: str, key: str = "x") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=url + "/v1",
        api_key=key,
        max_retries=0,
        http_client=openai.DefaultHttpxClient(trust_env=False),
    )


def run_probe(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any], str, str]:
    out = tmp_path / "probe.json"
    code = main_probe([*argv, "--json", str(out)])
    printed = capsys.readouterr()
    summary = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {}
    return code, summary, printed.out, printed.err


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_standin_gets_the_matrix_its_wire_implies(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with standin(name) as url:
        code, summary, out, err = run_probe([url + "/v1"], tmp_path, capsys)
    probe = summary["probe"]
    got = {f["id"]: f["status"] for f in probe["features"]}
    want = {f: EXPECTED[name].get(f, "pass") for f in ALL}
    assert got == want, {f: (got[f], want[f]) for f in ALL if got[f] != want[f]}
    assert code == 1  # every stand-in has an unsupported feature (embeddings)
    # one progress line per feature, on stderr; the matrix on stdout
    assert sorted(
        line.split("] ", 1)[1] for line in err.splitlines() if "probe: [" in line
    ) == sorted(ALL)
    for f in ALL:
        assert any(line.split()[:2] == [want[f], f] for line in out.splitlines()), f
    clients = {c["id"]: c for c in probe["clients"]}
    assert len(clients) == 7
    for cid, blocking in BLOCKED[name].items():
        assert clients[cid]["blocking"] == blocking
        assert clients[cid]["ready"] is (not blocking)
    for c in clients.values():  # NOT READY exactly when a need breaks or is missing
        failing = [n for n in c["needs"] if got[n] in ("breaking", "unsupported")]
        assert c["blocking"] == failing
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


# --- the premises: what the real SDK makes of those answers ----------------------------


def test_premises_openai(tmp_path: Path) -> None:
    with standin("openai") as url, sdk(url) as client:
        tools: Any = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in ("a", "b")
        ]
        both = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}], tools=tools,
            parallel_tool_calls=True, tool_choice="required",
        )  # fmt: skip
        assert len(both.choices[0].message.tool_calls or []) == 1
        with pytest.raises(openai.APIStatusError) as e:
            client.embeddings.create(model="text-embedding-3-small", input="x")
        assert e.value.status_code == 501
        hot = client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}], temperature=5
        )
        assert hot.choices[0].message.content


def test_premises_lmstudio() -> None:
    with standin("lmstudio") as url, sdk(url) as client:
        stream = client.chat.completions.create(
            model="qwen2.5-7b-instruct", messages=[{"role": "user", "content": "x"}],
            stream=True, stream_options={"include_usage": True},
        )  # fmt: skip
        assert all(chunk.usage is None for chunk in stream)
        answer = client.responses.create(model="qwen2.5-7b-instruct", input="x")
        assert answer.output is None  # a Response built from {"error": …}: no exception


def test_premises_ollama_and_vllm() -> None:
    for name in ("ollama", "vllm"):
        with standin(name) as url, sdk(url) as client:
            with pytest.raises(InvalidStatus) as e:
                client.responses.connect(websocket_connection_options=NOT_PROXIED).__enter__()
            assert e.value.response.status_code == 405
    with standin("vllm") as url, sdk(url) as client:
        model = client.models.list().data[0].id
        first = client.responses.create(model=model, input="x")
        with pytest.raises(openai.NotFoundError):
            client.responses.create(model=model, input="y", previous_response_id=first.id)


# --- exit codes, --only, --strict, the outputs ------------------------------------------


def test_exit_codes_follow_only_and_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with standin("openai") as url:
        code, summary, _, _ = run_probe(
            [url + "/v1", "--only", "chat.text,chat.parallel_tools"], tmp_path, capsys
        )
        assert code == 0 and [f["id"] for f in summary["probe"]["features"]] == [
            "chat.text",
            "chat.parallel_tools",
        ]
        code, summary, _, _ = run_probe(
            [url + "/v1", "--only", "chat.parallel_tools", "--strict"], tmp_path, capsys
        )
        assert code == 1 and summary["probe"]["passed"] is False
        untested = {c["id"]: c["untested"] for c in summary["probe"]["clients"]}
        assert "chat.text" in untested["langchain"]
        assert main_probe([url + "/v1", "--only", "chat.nope"]) == 2
    assert "unknown feature chat.nope" in capsys.readouterr().err


def test_keep_report_junit_and_no_key_on_disk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    keep, html, junit = tmp_path / "kept", tmp_path / "probe.html", tmp_path / "probe.xml"
    with standin("openai", api_key=KEY) as url:
        code, summary, _, _ = run_probe(
            [url + "/v1", "--api-key-env", KEY_ENV, "--keep", str(keep), "-o", str(html),
             "--junit", str(junit)], tmp_path, capsys,
        )  # fmt: skip
    rows = {f["id"]: f["status"] for f in summary["probe"]["features"]}
    assert rows["errors.bad_key"] == "pass"  # the stand-in checks the key now: a 401
    assert rows["chat.text"] == "pass" and code == 1
    kept = sorted(keep.iterdir())
    assert [p.name for p in kept] == [
        f"wirediff-probe.{summary['probe']['label']}.jsonl",
        "wirediff-probe.jsonl",
    ]
    page = html.read_text(encoding="utf-8")
    assert page.index('id="probe"') < page.index('id="verdicts"')  # the report opens with it
    assert "NOT READY" in page and "chat.parallel_tools" in page
    [suite] = list(JUnitXml.fromfile(str(junit)))
    assert suite.name == "wirediff probe"
    cases = {c.name: c for c in suite}
    assert set(cases) == set(ALL)
    assert not any(isinstance(r, Failure) for r in cases["chat.text"].result)
    [failure] = [r for r in cases["embeddings"].result if isinstance(r, Failure)]
    assert failure.type == "unsupported" and "501" in (failure.message or "")
    for p in [*kept, html, junit, tmp_path / "probe.json"]:
        assert KEY.encode() not in p.read_bytes(), p
    # the kept records are a capture and its replay: report them like any
    from wirediff.cli.report import main_report

    assert main_report([str(p) for p in kept] + ["-o", str(tmp_path / "kept.html")]) == 0


# --- a server that is not there: one line, exit 2 ---------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def not_http() -> Iterator[str]:
    """A TCP server that answers anything with bytes that are not HTTP."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\x00\x01garbage\r\n\r\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}/v1"
    finally:
        stop.set()
        srv.close()
        t.join(5)


@pytest.fixture
def html_site() -> Iterator[str]:
    """A web server that is not an API: every path a 404 HTML page."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>Not here</body></html>"
            self.send_response(404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("wirediff: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_probe([f"http://127.0.0.1:{_free_port()}/v1"]) == 2
    assert "is unreachable" in _one_line(capsys)


def test_tls_to_a_plain_http_server(capsys: pytest.CaptureFixture[str]) -> None:
    with standin("openai") as url:
        assert main_probe([url.replace("http://", "https://") + "/v1"]) == 2
    assert "TLS failed" in _one_line(capsys)


def test_not_http(not_http: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_probe([not_http]) == 2
    assert "does not speak HTTP" in _one_line(capsys)


def test_not_an_openai_api(html_site: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_probe([html_site]) == 2
    line = _one_line(capsys)
    assert "does not look like an OpenAI-style API" in line and "404 (text/html)" in line


def test_a_key_it_needs_and_a_key_it_refuses(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-e2e-not-the-one")
    with standin("openai", api_key=KEY) as url:
        assert main_probe([url + "/v1"]) == 2
        assert "wants a key (401): give it with --api-key-env VAR" in _one_line(capsys)
        assert main_probe([url + "/v1", "--api-key-env", KEY_ENV]) == 2
        assert f"refused the key in ${KEY_ENV} (401" in _one_line(capsys)
