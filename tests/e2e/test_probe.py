"""`wirediff probe` against every stand-in: the matrix and readiness rows each one's wire
behaviour implies, feature by feature, with the premises checked by the real openai SDK
(`tests/probe_premises.py`: each feature's call, made by the SDK, works where the row says
`pass` or `deviation` and fails where it says `breaking` or `unsupported`);
the exit codes; `--keep`, the report, summary.json and JUnit; and a server that is not there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from junitparser import Failure, JUnitXml

from tests.conftest import NOT_PROXIED
from tests.probe_premises import answering, disagreement, sdk_outcomes, upgrade_diagnosis
from wirediff.backends.standin import standin
from wirediff.cli.netutil import free_port
from wirediff.cli.probe import main_probe
from wirediff.cli.replay import main_replay
from wirediff.cli.report import main_report
from wirediff.probe.features import load_probe
from wirediff.probe.send_websocket import send_websocket
from wirediff.record.store import load_records
from wirediff.replay.targets import Target
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
        "responses.previous_response_id": "breaking",  # ignored: the object says null
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
RESPONSES_CORE = [
    "responses.stream",
    "responses.tools",
    "responses.function_call_round_trip",
    "responses.stream_grammar",
]
BLOCKED = {  # every client row's blocking features (the others are READY)
    "openai": {"openai-python": ["embeddings"], "openai-node": ["embeddings"]},
    "lmstudio": {
        "codex": RESPONSES_CORE,
        "openai-agents": RESPONSES_CORE,
        "vercel-ai": ["responses.text", "responses.stream", "responses.tools",
                      "responses.function_call_round_trip", "responses.structured_output",
                      "responses.stream_grammar"],
        "vercel-ai-chat": ["chat.usage_chunk"],
        "langchain-responses": ["responses.text", "responses.stream", "responses.stream_grammar"],
        "llamaindex-responses": ["responses.text", "responses.stream", "responses.stream_grammar"],
        "openai-python": ["responses.text", "responses.previous_response_id",
                          "responses.structured_output", "embeddings"],
        "openai-python-websocket": ["responses.websocket"],
        "openai-node": ["chat.usage_chunk", "responses.text", "responses.stream",
                        "responses.stream_grammar", "embeddings"],
    },
    "ollama": {
        "openai-python": ["responses.previous_response_id", "embeddings"],
        "openai-python-websocket": ["responses.websocket"],
        "openai-node": ["embeddings"],
    },
    "vllm": {
        "openai-python": ["responses.previous_response_id", "embeddings"],
        "openai-python-websocket": ["responses.websocket"],
        "openai-node": ["embeddings"],
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
        code, summary, out, err = run_probe(
            [url + "/v1", "--keep", str(tmp_path / "kept")], tmp_path, capsys
        )
        probe = summary["probe"]
        seen = sdk_outcomes(url + "/v1", probe["model"], embedding_model=probe["embedding_model"])
    got = {f["id"]: f["status"] for f in probe["features"]}
    want = {f: EXPECTED[name].get(f, "pass") for f in ALL}
    assert got == want, {f: (got[f], want[f]) for f in ALL if got[f] != want[f]}
    # a refused upgrade is told as one: the record holds the upgrade as it went on the wire
    [ws] = [f for f in probe["features"] if f["id"] == "responses.websocket"]
    kept = load_records(sorted((tmp_path / "kept").glob("wirediff-probe.*.jsonl")))
    status, codes = upgrade_diagnosis(ws, kept)
    assert "method_not_allowed" not in codes
    assert ("websocket_not_supported" in codes) == (status != 101), (status, codes)
    assert code == 1  # every stand-in has an unsupported feature (embeddings)
    # one progress line per feature, on stderr; the matrix on stdout
    assert sorted(
        line.split("] ", 1)[1] for line in err.splitlines() if "probe: [" in line
    ) == sorted(ALL)
    for f in ALL:
        assert any(line.split()[:2] == [want[f], f] for line in out.splitlines()), f
    clients = {c["id"]: c for c in probe["clients"]}
    assert len(clients) == len(load_probe().clients)
    assert {cid: c["blocking"] for cid, c in clients.items() if c["blocking"]} == BLOCKED[name]
    assert {cid for cid, c in clients.items() if c["state"] == "READY"} == set(clients) - set(
        BLOCKED[name]
    )
    for c in clients.values():  # NOT READY exactly when a need breaks or is missing
        failing = [n for n in c["needs"] if got[n] in ("breaking", "unsupported")]
        assert c["blocking"] == failing
    jsonschema.validate(summary, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    # the premises: the real SDK, making each feature's call, gets what the row implies
    wrong = {f: disagreement(f, got[f], seen[f]) for f in ALL}
    assert not {f: w for f, w in wrong.items() if w}, wrong


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
        clients = {c["id"]: c for c in summary["probe"]["clients"]}
        assert "chat.text" in clients["langchain"]["untested"]
        # nothing it needs failed, but not all of it was probed: not shown to be ready
        assert clients["codex"]["state"] == "NOT PROBED" and clients["codex"]["ready"] is False
        [codex] = [c for c in load_probe().clients if c.id == "codex"]
        code, summary, out, _ = run_probe(
            [url + "/v1", "--only", ",".join(codex.needs)], tmp_path, capsys
        )
        states = {c["id"]: c["state"] for c in summary["probe"]["clients"]}
        assert code == 0 and states["codex"] == "READY" and states["langchain"] == "NOT PROBED"
        [row] = [line for line in out.splitlines() if " LangChain " in line]
        assert row.split()[:3] == ["NOT", "PROBED", "LangChain"] and "not probed)" in row
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
    # a conversation goes on with the server's own ids: its response id, its call_id
    sent: dict[Any, Any] = {r["replay_of"]: r for r in load_records([kept[0]])}
    data = load_probe()
    first, second = (sent[i] for i in data.feature("responses.previous_response_id").exchanges)
    assert second["request"]["body"]["previous_response_id"] == first["response"]["body"]["id"]
    called, answered = (
        sent[i] for i in data.feature("responses.function_call_round_trip").exchanges
    )
    done = [e["data"]["item"] for e in called["response"]["events"]
            if e["event"] == "response.output_item.done"]  # fmt: skip
    [call_id] = [item["call_id"] for item in done if item["type"] == "function_call"]
    outputs = [
        i for i in answered["request"]["body"]["input"] if i.get("type") == "function_call_output"
    ]
    assert [o["call_id"] for o in outputs] == [call_id]
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
    # an earlier probe's records are neither emptied by the next nor written over by its outputs
    held = {p: p.read_bytes() for p in kept}
    nowhere = "http://127.0.0.1:9/v1"
    server = url.removeprefix("http://")
    assert main_probe([url + "/v1", "--keep", str(keep)]) == 2  # refused before it is reached
    assert f"wirediff-probe.{server}.jsonl holds an earlier probe's records of this server" in (
        capsys.readouterr().err
    )
    for option in ("-o", "--json", "--junit"):
        assert main_probe([nowhere, option, str(kept[0])]) == 2
        assert "a wirediff/1 capture; name another file" in capsys.readouterr().err
    elsewhere = keep / "wirediff-probe.127.0.0.1:9.jsonl"
    assert main_probe([nowhere, "--keep", str(keep), "-o", str(elsewhere)]) == 2
    assert "where --keep keeps the records" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in kept} == held
    # another server probed into the folder: its records beside, the originals kept once
    with standin("vllm") as other:
        assert main_probe([other + "/v1", "--only", "models", "--keep", str(keep)]) in (0, 1)
    capsys.readouterr()
    ids = [r["id"] for r in load_records([keep / "wirediff-probe.jsonl"])]
    assert len(ids) == len(set(ids)) and len(list(keep.iterdir())) == 3
    # the kept records are a capture and its replay: report, replay and diff them like any
    assert main_report([str(p) for p in kept] + ["-o", str(tmp_path / "kept.html")]) == 0
    [originals] = [p for p in kept if p.name == "wirediff-probe.jsonl"]
    elsewhere = tmp_path / "wirediff-probe.vllm.jsonl"
    with standin("vllm") as other:
        argv = [str(originals), "--to", other + "/v1", "--label", "vllm", "-o", str(elsewhere)]
        assert main_replay([*argv, "--model-map", "*=Qwen/Qwen2.5-0.5B-Instruct"]) == 0
    replayed = load_records([elsewhere])
    assert {r["replay_of"] for r in replayed} <= {r["id"] for r in load_records([originals])}
    diffed = ["-o", str(tmp_path / "diff.html"), "--json", str(tmp_path / "s.json")]
    assert main_report([str(originals), str(elsewhere), *diffed]) == 0
    labels = {v["label"] for v in json.loads((tmp_path / "s.json").read_text())["verdicts"]}
    assert "vllm" in labels


def test_websocket_mode_over_wss(
    mitmdump: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The WebSocket feature over TLS: a bare mitmdump reverse listener terminates it in
    front of the stand-in, and the probe trusts mitmproxy's CA through SSL_CERT_FILE."""
    with standin("openai") as url:
        tls = mitmdump([f"reverse:{url}"], addon=False)
        monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_cert))
        base = f"https://127.0.0.1:{tls.port}/v1"
        client = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
        with client, client.responses.connect(websocket_connection_options=NOT_PROXIED) as conn:
            conn.response.create(model="gpt-4o-mini", input="Say hi")
            kinds = []
            for event in conn:  # the premise: the SDK holds the session over wss
                kinds.append(event.type)
                if event.type == "response.completed":
                    break
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        keep = tmp_path / "kept"
        code, summary, _, _ = run_probe(
            [base, "--only", "responses.websocket", "--keep", str(keep)], tmp_path, capsys
        )
        # and it is TLS: trusting another CA (a second mitmdump's), the upgrade itself fails
        other = mitmdump(["regular"], addon=False, confdir=tmp_path / "other-ca")
        monkeypatch.setenv("SSL_CERT_FILE", str(other.ca_cert))
        data = load_probe()
        [original] = [data.by_id[i] for i in data.feature("responses.websocket").exchanges]
        failed = asyncio.run(send_websocket(original, Target("tls", base), None, 30.0, 1 << 16))
    assert failed.response is None and failed.error is not None
    assert "CERTIFICATE_VERIFY_FAILED" in failed.error.message
    [row] = summary["probe"]["features"]
    assert row["status"] == "pass" and code == 0, row
    kept = load_records([keep / f"wirediff-probe.{summary['probe']['label']}.jsonl"])
    [rec] = [r for r in kept if r["tags"].get("transport") == "websocket"]
    assert rec["request"]["url"] == base + "/responses"
    resp: Any = rec["response"]
    assert resp["status"] == 101
    sent = [e["data"]["type"] for e in resp["events"] if e["direction"] == "client"]
    assert (
        sent == ["response.create"] and resp["events"][-1]["data"]["type"] == "response.completed"
    )


# --- a server that is not there: one line, exit 2 ---------------------------------------


@pytest.fixture
def not_http() -> Iterator[str]:
    """A TCP server that answers anything with bytes that are not HTTP."""
    with tcp_server(b"SSH-2.0-OpenSSH_9.2\r\n\x00\x01garbage\r\n\r\n") as url:
        yield url


@contextlib.contextmanager
def tcp_server(reply: bytes | None) -> Iterator[str]:
    """Serve TCP on loopback: read, then send `reply` and close, or with None hold the
    connection unanswered until the server stops."""
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
                if reply is None:
                    stop.wait()
                else:
                    conn.sendall(reply)

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
    with answering(lambda *_: (404, "text/html", b"<html><body>Not here</body></html>")) as url:
        yield url


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("wirediff: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_probe([f"http://127.0.0.1:{free_port()}/v1"]) == 2
    assert "is unreachable" in _one_line(capsys)


def test_tls_to_a_plain_http_server(capsys: pytest.CaptureFixture[str]) -> None:
    with standin("openai") as url:
        assert main_probe([url.replace("http://", "https://") + "/v1"]) == 2
    assert "TLS failed" in _one_line(capsys)


def test_a_server_that_takes_the_connection_and_answers_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Closed at once, or held past the probe's timeout: reached, so not `unreachable`."""
    with tcp_server(b"") as url:
        assert main_probe([url]) == 2
        said = _one_line(capsys)
        assert "took the connection and closed it without an answer" in said, said
    with tcp_server(None) as url:
        assert main_probe([url, "--timeout", "0.5"]) == 2
        said = _one_line(capsys)
        assert "took the connection and did not answer in time" in said, said


def test_not_http(not_http: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_probe([not_http]) == 2
    assert "does not speak HTTP" in _one_line(capsys)


def test_not_an_openai_api(html_site: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main_probe([html_site]) == 2
    line = _one_line(capsys)
    assert "does not look like an OpenAI-style API" in line and "404 (text/html)" in line


def test_a_redirecting_server_is_named_with_where_it_leads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The real SDK follows the redirect of `GET /models`; the probe names where it leads."""
    with standin("openai") as behind, standin("openai", redirect=behind) as url:
        listed = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0).models.list()
        assert listed.data, "the SDK follows the redirect to the list"
        assert main_probe([url + "/v1"]) == 2
    line = _one_line(capsys)
    assert f"GET /models answered 301 to {behind}/v1/models" in line, line
    assert f"probe {behind}/v1 for the server behind it" in line, line


def test_a_redirect_probed_is_graded_as_the_sdk_follows_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK follows a GET there and gets the list; a POST turned GET gets 405."""
    with standin("openai") as behind, standin("openai", redirect=behind) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        assert client.models.list().data
        with pytest.raises(openai.APIStatusError) as refused:
            client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
            )
        argv = [url + "/v1", "--model", "gpt-4o-mini", "--only", "models,chat.text"]
        code, summary, _, _ = run_probe(argv, tmp_path, capsys)
    assert refused.value.status_code == 405
    assert code == 1
    rows = {f["id"]: f for f in summary["probe"]["features"]}
    assert rows["models"]["status"] == "deviation", rows["models"]
    assert "clients follow it there, unprobed" in rows["models"]["evidence"], rows["models"]
    assert rows["chat.text"]["status"] == "breaking", rows["chat.text"]
    assert "redirect_method_change" in rows["chat.text"]["evidence"], rows["chat.text"]


@pytest.mark.parametrize("name", ["openai", "lmstudio"])
def test_a_server_that_lists_no_model(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with standin(name, models=[]) as url:
        with sdk(url) as client:  # the premise: an empty list, in the SDK's terms
            assert client.models.list().data == []
        assert main_probe([url + "/v1"]) == 2
        assert _one_line(capsys).endswith(f"{url}/v1 lists no model at GET /models; give --model")
        # with --model the probe goes on, and the server's refusal of it is the evidence
        assert main_probe([url + "/v1", "--model", "gpt-4o-mini", "--only", "chat.text"]) == 1
    assert "model_not_found" in capsys.readouterr().out


def test_a_key_it_needs_and_a_key_it_refuses(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each refusal says what to give; a probe refused keeps nothing, so that the same command
    with the key runs, into the same `--keep` folder and beside another server's records."""
    monkeypatch.setenv(KEY_ENV, "sk-e2e-not-the-one")
    kept = tmp_path / "kept"
    with standin("openai", api_key=KEY) as url:
        assert main_probe([url + "/v1", "--keep", str(kept / "a" / "b")]) == 2
        assert "wants a key (401): give it with --api-key-env VAR" in _one_line(capsys)
        assert not kept.exists()
        with standin("ollama") as other:
            assert main_probe([other + "/v1", "--only", "chat.text", "--keep", str(kept)]) == 0
        before = {p.name: p.read_bytes() for p in kept.iterdir()}
        assert main_probe([url + "/v1", "--api-key-env", KEY_ENV, "--keep", str(kept)]) == 2
        assert f"refused the key in ${KEY_ENV} (401" in _one_line(capsys)
        assert {p.name: p.read_bytes() for p in kept.iterdir()} == before
        monkeypatch.setenv(KEY_ENV, KEY)
        args = [url + "/v1", "--api-key-env", KEY_ENV, "--only", "chat.text", "--keep", str(kept)]
        assert main_probe(args) == 0, capsys.readouterr().err
        assert len(list(kept.iterdir())) == len(before) + 1


def test_one_output_on_stdout_the_matrix_then_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`-o -`: the report alone on stdout; two outputs there are refused before probing."""
    with standin("openai") as url:
        assert main_probe([url + "/v1", "--only", "chat.text", "-o", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("<!doctype html>") and out.rstrip().endswith("</html>")
    assert "chat.text" in err and "report:" not in out + err
    assert main_probe(["http://127.0.0.1:9/v1", "--json", "-", "--junit", "-"]) == 2
    assert "--json - and --junit -: only one of them can go to stdout" in capsys.readouterr().err


def test_a_websocket_closed_without_a_close_frame_is_a_cut_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fault-cut` drops the socket mid-turn, as `test_websocket` shows the SDK failing on:
    graded breaking, the matrix still written, nothing raised."""
    with standin("openai") as url:
        argv = [url + "/v1", "--model", "fault-cut", "--only", "responses.websocket"]
        code, summary, out, err = run_probe(argv, tmp_path, capsys)
    assert code == 1, err
    assert "Error" not in err and "never awaited" not in err
    (row,) = summary["probe"]["features"]
    assert (row["id"], row["status"]) == ("responses.websocket", "breaking"), row
    assert "(stream_truncated)" in row["evidence"] and "stream_truncated" in out
