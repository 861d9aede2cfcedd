"""Side by side from live traffic, with real mitmdump processes and the real openai SDK:
the shadow addon mirroring an app's session to LM Studio and Ollama stand-ins while it runs
against the `openai` stand-in (the same findings as replaying the capture afterwards), and
the same app run twice, once per backend, compared with `check`."""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import ROOT, free_port, wait_for
from tests.e2e.test_replay_e2e import ASK, KEY, MODEL, MODELS, body, drive
from tests.fixtures.records import answer, error_of
from tests.readme_blocks import readme_command, readme_output
from wirediff._types import Record
from wirediff.analysis.index.analyze import analyze
from wirediff.backends.standin import Standin, make_standin, standin
from wirediff.cli import main
from wirediff.cli.replay import main_replay
from wirediff.record.store import load_records

pytestmark = pytest.mark.e2e

SHADOW_ADDON = str(ROOT / "addons" / "shadow.py")
CANDIDATES = ("lmstudio", "ollama")
CANDIDATE_KEY = "sk-e2e-candidate-CANARY-9d41"
MODEL_MAP = ",".join(f"{label}:*={MODELS[label]}" for label in CANDIDATES)


def _holds(path: Path, n: int) -> bool:
    return path.exists() and len(load_records([path])) == n


@pytest.fixture
def shadowed(
    mitmdump: Any,
) -> Iterator[tuple[Path, dict[str, Record], dict[str, Standin], str]]:
    """The replay tests' session, run once through capture + shadow against the `openai`
    stand-in, mirrored to LM Studio and Ollama stand-ins; mitmdump stopped (drained)."""
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(standin("openai"))
        cands = {label: stack.enter_context(make_standin(label)) for label in CANDIDATES}
        to = ",".join(f"{label}={st.url}/v1" for label, st in cands.items())
        m = mitmdump(
            [f"reverse:{primary}"],
            label="openai",
            extra=["-s", SHADOW_ADDON, "--set", f"shadow_to={to}",
                   "--set", f"shadow_model_map={MODEL_MAP}", "--set", "termlog_verbosity=info"],
        )  # fmt: skip
        steps = drive(openai.OpenAI(base_url=m.url + "/v1", api_key=KEY, max_retries=0))
        originals = sorted(m.records(len(steps), timeout=30), key=lambda r: r["started"])
        for label in CANDIDATES:
            mirrors = m.capture_dir / f"s.{label}.jsonl"
            wait_for(
                functools.partial(_holds, mirrors, len(steps)),
                30,
                f"{len(steps)} mirrors in {mirrors}",
            )
        m.stop()
        yield m.capture_file, dict(zip(steps, originals, strict=True)), cands, m.log.read_text()


def test_the_shadow_mirrors_every_call_state_aware(
    shadowed: tuple[Path, dict[str, Record], dict[str, Standin], str],
) -> None:
    capture, orig, cands, _ = shadowed
    by_id = {r["id"]: step for step, r in orig.items()}
    mirrors = {
        label: {
            by_id[str(r["replay_of"])]: r
            for r in load_records([capture.with_name(f"s.{label}.jsonl")])
        }
        for label in CANDIDATES
    }
    for label, rep in mirrors.items():
        assert set(rep) == set(orig), label  # one record per live exchange
        for step, r in rep.items():
            assert (
                r["label"] == label and r["session"] == "s" and r["replay_of"] == orig[step]["id"]
            )
            assert r["listener"] == f"shadow:{cands[label].url}/v1"
        assert error_of(rep["delete"])["kind"] == "skipped"  # unsafe: not without the option
        assert not any(s.method == "DELETE" for s in cands[label].seen)
        assert body(rep["chat"])["model"] == MODELS[label]
    # Ollama mints its own ids: the chained calls carried them
    ol = mirrors["ollama"]
    r1 = answer(ol["resp"])["body"]["id"]
    assert r1 != answer(orig["resp"])["body"]["id"]
    assert body(ol["resp_prev"])["previous_response_id"] == r1 and ol["resp_prev"]["error"] is None
    fc = answer(ol["resp_tool"])["body"]
    (call,) = [o for o in fc["output"] if o["type"] == "function_call"]
    sent = body(ol["resp_tool_result"])
    assert (
        sent["previous_response_id"] == fc["id"] and sent["input"][0]["call_id"] == call["call_id"]
    )
    chat_call = answer(ol["chat_tool"])["body"]["choices"][0]["message"]["tool_calls"][0]["id"]
    assert body(ol["chat_tool_result"])["messages"][2]["tool_call_id"] == chat_call
    # LM Studio answers /v1/responses with 200 {"error": …}: what builds on it is skipped
    lm = mirrors["lmstudio"]
    for step, producer in (("resp_prev", "resp"), ("resp_tool_result", "resp_tool")):
        e = error_of(lm[step])
        assert e["kind"] == "skipped" and lm[step]["response"] is None
        assert e["message"].endswith(
            f" comes from {orig[producer]['id']}, but the target answered it with HTTP 200 "
            "and an error body (lmstudio.unexpected_endpoint)"
        )
    first = answer(orig["resp"])["body"]["id"]
    assert error_of(lm["resp_prev"])["message"].startswith(f"previous_response_id {first} ")
    assert sum(1 for s in cands["lmstudio"].seen if s.path == "/v1/responses") == 3
    # the client's key never left for a candidate
    assert not any(KEY in v for st in cands.values() for s in st.seen for _, v in s.headers)


def _findings(records: list[Record]) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    result = analyze(records)
    found = result.frame()
    rows = set(
        found[["label", "endpoint", "kind", "path", "severity"]].itertuples(index=False, name=None)
    )
    verdicts = set(
        result.verdicts[["label", "family", "transport", "verdict"]].itertuples(
            index=False, name=None
        )
    )
    return rows, verdicts


def test_the_shadow_finds_what_replaying_the_capture_finds(
    shadowed: tuple[Path, dict[str, Record], dict[str, Standin], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    capture, orig, _, _ = shadowed
    replayed = tmp_path / "replayed" / "s.jsonl"
    replayed.parent.mkdir()
    shutil.copy(capture, replayed)
    with contextlib.ExitStack() as stack:
        for label in CANDIDATES:
            st = stack.enter_context(make_standin(label))
            args = [
                str(replayed),
                "--to",
                f"{st.url}/v1",
                "--label",
                label,
                "--model-map",
                f"*={MODELS[label]}",
            ]
            assert main_replay(args) == 0, capsys.readouterr().err
    originals = load_records([capture])
    shadow = originals + load_records([capture.with_name(f"s.{c}.jsonl") for c in CANDIDATES])
    replay = originals + load_records([replayed.with_name(f"s.{c}.jsonl") for c in CANDIDATES])
    by_shadow, by_replay = _findings(shadow), _findings(replay)
    assert by_shadow[0] == by_replay[0] and by_shadow[0]
    assert by_shadow[1] == by_replay[1]

    # the report shows the three backends side by side
    out = tmp_path / "report"
    files = [str(capture)] + [str(capture.with_name(f"s.{c}.jsonl")) for c in CANDIDATES]
    assert main(["report", *files, "-o", str(out / "r.html"), "--json", str(out / "s.json")]) == 0
    summary = json.loads((out / "s.json").read_text())
    assert {b["label"]: b["role"] for b in summary["backends"]} == {
        "openai": "baseline", "lmstudio": "candidate", "ollama": "candidate",
    }  # fmt: skip
    assert summary["baseline_chosen_by"] == "replays"
    assert all(
        b["pairs"]["replay"] == len(orig) for b in summary["backends"] if b["role"] == "candidate"
    )


def app(client: openai.OpenAI, model: str) -> None:
    """An app that keeps going when a call fails, run once per backend (its model set for
    each, as an app's configuration would)."""
    steps: list[Callable[[], object]] = [
        lambda: client.chat.completions.create(model=model, messages=ASK),
        lambda: list(client.chat.completions.create(model=model, messages=ASK, stream=True)),
        lambda: client.models.list(),
    ]
    for step in steps:
        with contextlib.suppress(openai.OpenAIError):
            step()
    first = None
    with contextlib.suppress(openai.OpenAIError):
        first = client.responses.create(model=model, input="Say hello.")
    with contextlib.suppress(openai.OpenAIError):
        previous = first.id if first is not None else None
        client.responses.create(model=model, input="And in French?", previous_response_id=previous)
    with contextlib.suppress(openai.OpenAIError):
        client.chat.completions.create(model=model, messages=ASK, temperature=0.2)


def test_the_same_app_run_twice_is_compared_by_content(
    mitmdump: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {}
    for label in ("openai", "lmstudio"):
        with standin(label) as url:
            m = mitmdump([f"reverse:{url}"], label=label, session=f"run-{label}")
            client = openai.OpenAI(base_url=m.url + "/v1", api_key=KEY, max_retries=0)
            app(client, MODELS.get(label, MODEL))
            files[label] = m.records(6, timeout=30) and m.capture_file
            m.stop()
    a, b = str(files["openai"]), str(files["lmstudio"])
    named = {"captures/run-openai.jsonl": a, "captures/run-lmstudio.jsonl": b}
    argv = [named.get(arg, arg) for arg in readme_command("check-two-captures")]
    assert argv[0] == "wirediff" and set(named.values()) <= set(argv)
    assert main([*argv[1:], "--json", str(tmp_path / "c.json")]) == 1
    out = capsys.readouterr().out
    assert [line.rstrip() for line in out.splitlines()] == readme_output(
        "check-two-captures"
    ).splitlines()  # what the README shows
    assert "5 paired-by-content exchanges compared with 6 baseline exchanges (openai)" in out
    # LM Studio has no /v1/responses (and no response id to chain): the chained call differs
    assert (
        "pairs  lmstudio     5 by content; only in the baseline: 1, only in the candidate: 1" in out
    )
    assert "ok    lmstudio     chat.completions" in out
    assert "FAIL  lmstudio     responses                unsupported" in out
    assert out.endswith("not compatible: lmstudio responses (unsupported)\n")
    result = analyze(load_records([a, b]))
    soft = result.divergences[result.divergences["kind"] == "soft_error"]
    assert set(soft["label"]) == {"lmstudio"} and set(soft["endpoint"]) == {"/v1/responses"}
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["unmatched"] == {"lmstudio": {"only in the baseline": 1, "only in the candidate": 1}}
    assert main(["report", b, a, "-o", str(tmp_path / "r.html")]) == 0
    assert "wirediff: baseline: lmstudio (the first capture's label" in capsys.readouterr().err


def test_the_client_never_sees_a_candidate_and_a_secondary_mirrors_the_primary(
    mitmdump: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WIREDIFF_E2E_OLLAMA_KEY", CANDIDATE_KEY)
    with standin("openai") as primary, make_standin("ollama") as ollama:
        down = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
        to = f"openai={primary}/v1,ollama={ollama.url}/v1,down={down}"
        m = mitmdump(
            [f"reverse:{primary}"],
            label="openai",
            extra=["-s", SHADOW_ADDON, "--set", f"shadow_to={to}",
                   "--set", "shadow_key_env=ollama=WIREDIFF_E2E_OLLAMA_KEY",
                   "--set", f"shadow_model_map=ollama:*={MODELS['ollama']}"],
        )  # fmt: skip
        client = openai.OpenAI(base_url=m.url + "/v1", api_key=KEY, max_retries=0)
        answers = [client.chat.completions.create(model=MODEL, messages=ASK) for _ in range(3)]
        assert all(a.choices[0].message.content for a in answers)  # none of it reached here
        m.records(3, timeout=30)
        m.stop()
        seen = list(ollama.seen)
    originals = load_records([m.capture_file])
    ids = {r["id"] for r in originals}
    mirrors = {
        label: load_records([m.capture_file.with_name(f"s.{label}.jsonl")])
        for label in ("openai", "ollama", "down")
    }
    for label, recs in mirrors.items():
        assert {r["replay_of"] for r in recs} == ids and {r["label"] for r in recs} == {label}
    assert all(error_of(r)["kind"] == "upstream_unreachable" for r in mirrors["down"])
    assert all(r["error"] is None for r in mirrors["openai"] + mirrors["ollama"])
    # keys only from the environment: the candidate's own, never the client's
    auth = [[v for k, v in s.headers if k.lower() == "authorization"] for s in seen]
    assert auth == [[f"Bearer {CANDIDATE_KEY}"]] * 3
    assert KEY not in m.log.read_text() and CANDIDATE_KEY not in m.log.read_text()
    # the secondary (the primary's own label) is the baseline's noise, not a candidate
    result = analyze(originals + [r for recs in mirrors.values() for r in recs])
    roles = result.verdicts.groupby("label")["role"].agg(set).to_dict()
    assert roles == {"openai": {"baseline"}, "ollama": {"candidate"}, "down": {"candidate"}}


def test_the_readmes_shadow_command(
    mitmdump: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The README's mitmdump command as it stands, the stand-ins in place of its URLs."""
    captures = tmp_path / "captures"
    monkeypatch.setenv("LMSTUDIO_KEY", CANDIDATE_KEY)
    argv = readme_command("shadow")
    assert argv[0] == "mitmdump"
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(standin("openai"))
        lm = stack.enter_context(make_standin("lmstudio"))
        ol = stack.enter_context(make_standin("ollama"))
        urls = {
            "http://127.0.0.1:1234/v1": f"{lm.url}/v1",
            "http://127.0.0.1:11434/v1": f"{ol.url}/v1",
        }
        at = argv.index("--mode")
        mode, rest = argv[at + 1], argv[1:at] + argv[at + 2 :]
        assert mode == "reverse:https://api.openai.com"
        extra = []
        for arg in rest:
            for old, new in urls.items():
                arg = arg.replace(old, new)
            arg = {"addons/capture.py": str(ROOT / "addons" / "capture.py"),
                   "addons/shadow.py": SHADOW_ADDON}.get(arg, arg)  # fmt: skip
            extra.append(arg.replace("capture_dir=captures", f"capture_dir={captures}"))
        m = mitmdump([f"reverse:{primary}"], session="mysession", addon=False, extra=extra)
        client = openai.OpenAI(base_url=m.url + "/v1", api_key=KEY, max_retries=0)
        client.chat.completions.create(model=MODEL, messages=ASK)
        first = client.responses.create(model=MODEL, input="Say hello.")
        client.responses.create(model=MODEL, input="And in French?", previous_response_id=first.id)
        for label in ("lmstudio", "ollama"):
            wait_for(functools.partial(_holds, captures / f"mysession.{label}.jsonl", 3), 30)
        m.stop()
        seen = {"lmstudio": list(lm.seen), "ollama": list(ol.seen)}
    lm_recs, ol_recs = (
        sorted(load_records([captures / f"mysession.{label}.jsonl"]), key=lambda r: r["seq"])
        for label in ("lmstudio", "ollama")
    )
    assert [body(r)["model"] for r in lm_recs[:2]] == ["qwen2.5-7b-instruct"] * 2
    assert {body(r)["model"] for r in ol_recs} == {"llama3.2"}
    auth = {k.lower(): v for s in seen["lmstudio"] for k, v in s.headers}["authorization"]
    assert auth == f"Bearer {CANDIDATE_KEY}"
    assert error_of(lm_recs[2])["kind"] == "skipped"  # LM Studio has no response to chain
    chained = body(ol_recs[2])["previous_response_id"]
    assert chained == answer(ol_recs[1])["body"]["id"] != first.id


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["shadow_to=lmstudio"], "shadow: shadow_to: expected KEY=VALUE, got 'lmstudio'"),
        (["shadow_to=lm=http://127.0.0.1:9/v1", "shadow_queue=many"],
         "shadow: shadow_queue must be a whole number, not 'many'"),
    ],
)  # fmt: skip
def test_a_bad_shadow_option_stops_mitmdump_with_one_line(
    tmp_path: Path, option: list[str], says: str
) -> None:
    cmd = [
        str(Path(sys.executable).with_name("mitmdump")), "-q", "--listen-host", "127.0.0.1",
        "-p", "0", "--set", f"confdir={tmp_path / 'conf'}",
        "-s", str(ROOT / "addons" / "capture.py"), "-s", SHADOW_ADDON,
        "--set", f"capture_dir={tmp_path}",
        *(arg for o in option for arg in ("--set", o)),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode != 0 and "Traceback" not in done.stdout + done.stderr
    assert [line.split("] ", 1)[-1] for line in lines] == [
        says,
        "Error logged during startup, exiting...",
    ]
