"""Replay on loopback: a session captured through a real mitmdump from the real openai SDK,
replayed to the LM Studio, Ollama and vLLM stand-ins; resume after Ctrl-C and after a kill;
unreachable and broken targets."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import ROOT, free_port, wait_for
from tests.fixtures.records import answer, auth_of, error_of, events_of
from wirediff._support import error_kind
from wirediff._types import Record
from wirediff.analysis.comparison.impact import impact
from wirediff.analysis.index.analyze import Index
from wirediff.backends.standin import Standin, make_standin, standin
from wirediff.cli import main
from wirediff.cli.replay import main_replay
from wirediff.record.store import RETRIED_KINDS, latest_replays, load_records

pytestmark = pytest.mark.e2e

KEY = "sk-e2e-replay-CANARY-51f0c2"
TARGET_KEY = "sk-target-CANARY-9a7b33e1"
MODEL = "gpt-4o-mini"
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL_CHAT: Any = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
TOOL_RESP: Any = {"type": "function", "name": "get_weather", "parameters": PARAMS}
MODELS = {"lmstudio": "qwen2.5-7b-instruct", "ollama": "llama3.2", "vllm": "Qwen/Qwen2.5-0.5B-Instruct"}  # fmt: skip


def drive(client: openai.OpenAI) -> list[str]:
    """The session, one step name per exchange, in order."""
    client.chat.completions.create(model=MODEL, messages=ASK)
    for _ in client.chat.completions.create(
        model=MODEL,
        messages=ASK,
        stream=True,
        stream_options={"include_usage": True},
    ):
        pass
    first = client.chat.completions.create(model=MODEL, messages=ASK, tools=[TOOL_CHAT])
    call = (first.choices[0].message.tool_calls or [])[0]
    assistant: Any = first.choices[0].message.model_dump(exclude_none=True)
    result: Any = {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 18}'}
    client.chat.completions.create(
        model=MODEL, messages=[*ASK, assistant, result], tools=[TOOL_CHAT]
    )
    r1 = client.responses.create(model=MODEL, input="Say hello.")
    with client.responses.stream(model=MODEL, input="Tell me a story.") as s:
        s.get_final_response()
    client.responses.create(model=MODEL, input="And in French?", previous_response_id=r1.id)
    fc = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[TOOL_RESP])
    (fcall,) = [o for o in fc.output if o.type == "function_call"]
    with client.responses.stream(
        model=MODEL,
        previous_response_id=fc.id,
        input=[{"type": "function_call_output", "call_id": fcall.call_id, "output": "18C"}],
        tools=[TOOL_RESP],
    ) as s:
        s.get_final_response()
    client.models.list()
    with contextlib.suppress(openai.APIStatusError):  # the stand-in does not emulate it: 501
        client.responses.delete(r1.id)
    return ["chat", "chat_stream", "chat_tool", "chat_tool_result", "resp", "resp_stream",
            "resp_prev", "resp_tool", "resp_tool_result", "models", "delete"]  # fmt: skip


@pytest.fixture
def recorded(mitmdump: Any) -> Iterator[tuple[Path, dict[str, Record]]]:
    """The session captured through mitmdump from the `openai` stand-in; originals by step."""
    with standin("openai") as url:
        m = mitmdump([f"reverse:{url}"], label="openai")
        steps = drive(openai.OpenAI(base_url=m.url + "/v1", api_key=KEY, max_retries=0))
        recs = sorted(m.records(len(steps), timeout=30), key=lambda r: r["started"])
    assert [r["response"]["status"] for r in recs] == [200] * 10 + [501]
    yield m.capture_file, dict(zip(steps, recs, strict=True))


def config(tmp_path: Path, targets: dict[str, Standin]) -> Path:
    lines = ["targets:"]
    for name, st in targets.items():
        lines.append(
            f"  - {{label: {name}, url: '{st.url}/v1', api_key_env: WIREDIFF_E2E_KEY, "
            f"model_map: {{'*': '{MODELS[name]}'}}}}"
        )
    p = tmp_path / "wirediff.yaml"
    p.write_text("\n".join(lines) + "\n")
    return p


def body(rec: Record) -> Any:
    return rec["request"]["body"]


def test_replay_to_lmstudio_ollama_vllm(
    recorded: tuple[Path, dict[str, Record]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    capture, orig = recorded
    monkeypatch.setenv("WIREDIFF_E2E_KEY", TARGET_KEY)
    with contextlib.ExitStack() as stack:
        targets = {
            "lmstudio": stack.enter_context(make_standin("lmstudio")),
            "ollama": stack.enter_context(make_standin("ollama")),
            "vllm": stack.enter_context(make_standin("vllm", api_key=TARGET_KEY)),
        }
        code = main_replay([str(capture), "--config", str(config(tmp_path, targets)),
                            "--concurrency", "4"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    by_id = {r["id"]: step for step, r in orig.items()}
    for name, st in targets.items():
        out = capture.with_name(f"s.{name}.jsonl")
        recs = load_records([out])
        rep = {by_id[r["replay_of"] or ""]: r for r in recs}
        # one record per original, linked, in the capture's shape
        assert len(recs) == len(orig) and set(rep) == set(orig), name
        for step, r in rep.items():
            assert r["format"] == "wirediff/1" and r["label"] == name and r["session"] == "s"
            assert r["replay_of"] == orig[step]["id"] and r["id"] != orig[step]["id"]
            assert set(r) >= set(orig[step]) - {"forwarded_headers"}
            if r["error"] is None:
                assert answer(r)["complete"] is True, (name, step)
                assert r["request"]["path"].startswith("/v1/")
                sent = body(r)
                if isinstance(sent, dict) and "model" in sent:
                    assert sent["model"] == MODELS[name]
                assert auth_of(r)["fingerprint"] == auth_of(rep["chat"])["fingerprint"]
        # DELETE is unsafe: recorded as skipped, never sent
        assert error_of(rep["delete"])["kind"] == "skipped" and rep["delete"]["response"] is None
        assert "--allow-unsafe" in error_of(rep["delete"])["message"]
        assert not any(s.method == "DELETE" for s in st.seen)
        # streamed where the original was
        for step in ("chat_stream", "resp_stream", "resp_tool_result"):
            assert orig[step]["tags"]["stream"] is True
            if rep[step]["error"] is None:
                assert body(rep[step])["stream"] is True and rep[step]["tags"]["stream"] is True
        events = events_of(rep["chat_stream"])
        assert (
            events
            and events[-1]["data"] == "[DONE]"
            and all((e.get("t_ms") or 0) >= 0 for e in events)
        )
        # the chat tool round trip: the tool result names the target's own tool call
        target_call = answer(rep["chat_tool"])["body"]["choices"][0]["message"]["tool_calls"][0][
            "id"
        ]
        sent = body(rep["chat_tool_result"])["messages"]
        assert sent[2]["tool_call_id"] == sent[1]["tool_calls"][0]["id"] == target_call
        assert target_call != body(orig["chat_tool_result"])["messages"][2]["tool_call_id"]
        assert_seen(st, "tool_call_id", target_call)
        # the target's key came from the environment, fingerprinted on disk like any key
        auth = {v for s in st.seen for k, v in s.headers if k.lower() == "authorization"}
        assert auth == {f"Bearer {TARGET_KEY}"}

    # LM Studio (chat only) answers /v1/responses with 200 {"error": …}: what builds on it is
    # skipped with the reason, not sent
    lm = {
        by_id[r["replay_of"] or ""]: r
        for r in load_records([capture.with_name("s.lmstudio.jsonl")])
    }
    assert lm["resp"]["tags"]["signature"] == "lmstudio.unexpected_endpoint"
    assert answer(lm["resp_stream"])["events"] in (None, [])  # plain JSON, not a stream
    for step, producer in (("resp_prev", "resp"), ("resp_tool_result", "resp_tool")):
        e = error_of(lm[step])
        assert e["kind"] == "skipped" and lm[step]["response"] is None
        assert orig[producer]["id"] in e["message"] and "error body" in e["message"]
        assert "lmstudio.unexpected_endpoint" in e["message"]
    assert sum(1 for s in targets["lmstudio"].seen if s.path == "/v1/responses") == 3

    # Ollama and vLLM mint their own ids; the follow-ups carried them on the wire
    for name in ("ollama", "vllm"):
        rep = {
            by_id[r["replay_of"] or ""]: r
            for r in load_records([capture.with_name(f"s.{name}.jsonl")])
        }
        r1 = answer(rep["resp"])["body"]["id"]
        assert r1 != answer(orig["resp"])["body"]["id"]
        assert body(rep["resp_prev"])["previous_response_id"] == r1
        assert_seen(targets[name], "previous_response_id", r1)
        fc = answer(rep["resp_tool"])["body"]
        (call,) = [o for o in fc["output"] if o["type"] == "function_call"]
        sent = body(rep["resp_tool_result"])
        assert (
            sent["previous_response_id"] == fc["id"]
            and sent["input"][0]["call_id"] == call["call_id"]
        )
        assert call["call_id"] != body(orig["resp_tool_result"])["input"][0]["call_id"]
        assert_seen(targets[name], "call_id", call["call_id"])
        assert events_of(rep["resp_stream"])[-1]["event"] == "response.completed"
    # Ollama ignores previous_response_id; vLLM without its store refuses it — recorded as-is
    assert answer(rep["resp_prev"])["status"] == 404  # vllm, the last in the loop
    assert TARGET_KEY.encode() not in b"".join(p.read_bytes() for p in capture.parent.iterdir())
    assert KEY.encode() not in b"".join(p.read_bytes() for p in capture.parent.iterdir())


def assert_seen(st: Standin, key: str, value: str) -> None:
    """The stand-in received a request whose JSON body carries `key: value` somewhere."""
    needle = json.dumps({key: value})[1:-1].replace(" ", "")
    assert any(needle in s.body.decode().replace(" ", "") for s in st.seen), (key, value)


# --- durability ------------------------------------------------------------------------------


def cli(capture: Path, url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "wirediff.cli.replay", str(capture), "--to", url + "/v1",
         "--label", "slow", "--concurrency", "1", "--model-map", "*=llama3.2", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


def count(path: Path) -> int:
    return len(load_records([path])) if path.exists() else 0


def test_ctrl_c_and_kill_lose_nothing_and_resume_exactly_once(
    recorded: tuple[Path, dict[str, Record]],
) -> None:
    capture, orig = recorded
    out = capture.with_name("s.slow.jsonl")
    with make_standin("ollama", delay=0.1) as slow:
        # Ctrl-C: a clean stop, exit 130, how far it got and how to go on
        p = cli(capture, slow.url)
        wait_for(lambda: count(out) >= 1, 20, "a first replay record")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=20)
        assert p.returncode == 130, err
        assert "Traceback" not in err and "run the same command again to resume" in err
        after_int = count(out)
        assert 1 <= after_int < len(orig)
        # the gate lists the calls the stopped replay never sent, and warns of them
        untested = len(orig) - len({r["replay_of"] for r in load_records([out])})
        report = capture.with_name("check.json")
        assert main(["check", str(capture), str(out), "--json", str(report)]) in (0, 1)
        only = json.loads(report.read_text(encoding="utf-8"))["unmatched"]["slow"]
        assert only == {"only in the baseline": untested, "only in the candidate": 0}
        # kill -9 in the middle of the next run: whatever was recorded stays
        p = cli(capture, slow.url)
        wait_for(lambda: count(out) > after_int, 20, "more replay records")
        p.kill()
        p.communicate(timeout=10)
        after_kill = count(out)
        assert after_int < after_kill < len(orig)
    # the resumed run (same label, now a fast backend) sends only what is missing
    with make_standin("ollama") as fast:
        p = cli(capture, fast.url)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        recs = load_records([out])
        assert {r["replay_of"] for r in latest_replays(recs)} == {r["id"] for r in orig.values()}
        answered = Counter(r["replay_of"] for r in recs if kind(r) not in RETRIED_KINDS)
        skipped = Counter(r["replay_of"] for r in recs if kind(r) == "skipped")
        assert answered == {r["id"]: 1 for step, r in orig.items() if step != "delete"}, (
            "every original replayed exactly once"
        )
        assert skipped == {orig["delete"]["id"]: 1}  # unsafe: recorded once, not again
        sent_now = [r for r in recs[after_kill:] if r["error"] is None or r["response"]]
        assert len(fast.seen) == len(sent_now)
        # a request in flight at Ctrl-C is recorded as interrupted, sent again, and marked
        interrupted = [r for r in recs[:after_kill] if kind(r) == "interrupted"]
        assert len(interrupted) <= 1
        again = [  # by the killed run or the last: whichever sent it again first
            r for r in recs[after_int:] if r["replay_of"] in {i["replay_of"] for i in interrupted}
        ]
        assert [r.get("attempt") for r in again] == [2] * len(interrupted)
        done_before = after_kill - len(interrupted)
        assert f"{len(orig) - done_before} recorded" in err and f"{done_before} already done" in err
        # nothing left: a third run sends nothing
        p = cli(capture, fast.url)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0 and len(fast.seen) == len(sent_now)
        assert "0 recorded" in err and count(out) == len(orig) + len(interrupted)


# --- bad targets ---------------------------------------------------------------------------


def kind(rec: Record) -> str | None:
    return error_kind(rec)


def test_unreachable_target_is_recorded_then_exit_2_and_retried_once_back(
    recorded: tuple[Path, dict[str, Record]], capsys: pytest.CaptureFixture[str]
) -> None:
    capture, orig = recorded
    port = free_port()
    args = [str(capture), "--to", f"http://127.0.0.1:{port}/v1", "--label", "down",
            "--model-map", "*=llama3.2"]  # fmt: skip
    assert main_replay(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("wirediff: error: could not connect to down")
    assert "run the same command again to retry them" in err[-1]
    out = capture.with_name("s.down.jsonl")
    recs = load_records([out])
    kinds = Counter(error_of(r)["kind"] for r in recs)
    # independent steps were tried and failed to connect; what depends on them is skipped
    assert len(recs) == len(orig) and kinds["upstream_unreachable"] == 7
    assert kinds["upstream_unreachable"] + kinds["skipped"] == len(orig)

    with make_standin("ollama", port=port) as back:
        # the same command, the target up: what got no answer, and what was skipped for
        # it, is sent and appended; the unsafe DELETE stays skipped, and is not re-recorded
        assert main_replay(args) == 0, capsys.readouterr().err
        recs = load_records([out])  # every attempt, appended
        assert len(recs) == 2 * len(orig) - 1
        newest = {r["replay_of"]: r for r in latest_replays(recs)}
        kept = Index.of(recs).rows["id"].tolist()  # what the analysis reads
        assert kept == [r["id"] for r in latest_replays(recs)]
        assert set(newest) == {r["id"] for r in orig.values()}
        answered = Counter(r["replay_of"] for r in recs if kind(r) is None)
        assert answered == {r["id"]: 1 for step, r in orig.items() if step != "delete"}
        assert kind(newest[orig["delete"]["id"]]) == "skipped"
        sent = len(back.seen)
        assert sent == len(orig) - 1
        # nothing left: nothing sent; with --allow-unsafe, the DELETE, with the target's id
        assert main_replay(args) == 0 and len(back.seen) == sent
        assert len(load_records([out])) == len(recs)
        assert main_replay([*args, "--allow-unsafe"]) == 0
        resp_id = answer(newest[orig["resp"]["id"]])["body"]["id"]
        assert [(s.method, s.path) for s in back.seen[sent:]] == [
            ("DELETE", f"/v1/responses/{resp_id}")
        ]
        final = latest_replays(load_records([out]))
        assert kind(next(r for r in final if r["replay_of"] == orig["delete"]["id"])) is None


def test_broken_answers_are_recorded_as_they_came(
    recorded: tuple[Path, dict[str, Record]], capsys: pytest.CaptureFixture[str]
) -> None:
    capture, orig = recorded
    with standin("ollama") as url:
        for fault in ("fault-binary", "fault-cut"):
            code = main_replay([str(capture), "--to", url + "/v1", "--label", fault,
                                "--model-map", f"*={fault}", "--only", "endpoint=/v1/chat/completions"])  # fmt: skip
            assert code == 0, capsys.readouterr().err
        # what the real SDK raises on the cut answers, plain and streamed, on the wire
        client = openai.OpenAI(api_key="k", base_url=url + "/v1", max_retries=0)
        asked: dict[str, Any] = {
            "model": "fault-cut",
            "messages": [{"role": "user", "content": "hi"}],
        }
        with pytest.raises(openai.APIConnectionError, match="Connection error") as plain_raised:
            client.chat.completions.create(**asked)
        with pytest.raises(Exception) as stream_raised:  # whatever it is: named below
            list(client.chat.completions.create(**asked, stream=True))
    binary = load_records([capture.with_name("s.fault-binary.jsonl")])
    plain = [r for r in binary if r["response"] and not r["tags"]["stream"]]
    assert plain and all(answer(r)["b64"] for r in plain)  # not UTF-8: kept as base64
    # the SDK reads those bytes and raises: the gate fails, on what the real client did
    capsys.readouterr()
    assert main(["check", str(capture), str(capture.with_name("s.fault-binary.jsonl"))]) == 1
    said, warned = capsys.readouterr()
    assert "FAIL  fault-binary chat.completions         breaking" in said
    # `--only` sent the chat calls: the others are listed and warned of, as untested
    others = [r for r in orig.values() if r["tags"]["endpoint"] != "/v1/chat/completions"]
    assert others and f"{len(others)} of the baseline's calls have no replay to it" in warned
    # the report lists what replays compare, not what they left out
    assert main(["report", str(capture), str(capture.with_name("s.fault-binary.jsonl")),
                 "-o", str(capture.with_name("r.html")), "--json", "-"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["unmatched"] == []
    listed = f"; only in the baseline: {len(others)}\n"
    assert re.search(rf"pairs  fault-binary +\d+ replayed{listed}", said), said
    assert "`client.chat.completions.create()` raises UnicodeDecodeError" in said
    # and each is diagnosed, as the SDK fails on it
    assert (
        main(["diagnose", str(capture.with_name("s.fault-binary.jsonl")), "--json", "--fail"]) == 1
    )
    unread = {d["exchange_ids"][-1]: d for d in json.loads(capsys.readouterr().out)}
    assert {r["id"] for r in plain} <= set(unread)
    assert {unread[r["id"]]["code"] for r in plain} == {"answer_unreadable"}
    cut = load_records([capture.with_name("s.fault-cut.jsonl")])
    sent = [r for r in cut if r["error"] and r["error"]["kind"] != "skipped"]
    assert sent and all(error_of(r)["kind"] == "upstream_disconnect" for r in sent)
    assert all(answer(r)["complete"] is False for r in sent)
    skipped = [r for r in cut if error_of(r)["kind"] == "skipped"]
    assert [orig_step(orig, r) for r in skipped] == ["chat_tool_result"]
    # the impact harness, served each recorded cut answer, raises what the real SDK raised
    for rec in sent:
        seen = impact(rec)
        python = [f.error for f in seen.failures if not f.client] + [f"raises {seen.get('raises')}"]
        real = stream_raised if rec["tags"]["stream"] else plain_raised
        assert any(e.startswith(f"raises {type(real.value).__name__}") for e in python), python
    # every cut answer is diagnosed, plain or streamed: the SDK raises on each
    capsys.readouterr()
    assert main(["diagnose", str(capture.with_name("s.fault-cut.jsonl")), "--json", "--fail"]) == 1
    diagnosed = {d["exchange_ids"][-1]: d for d in json.loads(capsys.readouterr().out)}
    assert set(diagnosed) == {r["id"] for r in sent}
    for r in sent:
        code, summary = diagnosed[r["id"]]["code"], diagnosed[r["id"]]["summary"]
        if r["tags"]["stream"]:
            assert code == "stream_truncated", summary
        else:
            assert (code, "the answer stopped before its end" in summary) == (
                "upstream_unreachable",
                True,
            )


def orig_step(orig: dict[str, Record], rec: Record) -> str:
    return next(step for step, r in orig.items() if r["id"] == rec["replay_of"])


def test_a_key_in_a_header_of_any_name_is_fingerprinted(
    recorded: tuple[Path, dict[str, Record]], capsys: pytest.CaptureFixture[str]
) -> None:
    """A key given by `--header x-team=sk-…` is recorded as its fingerprint, as the key in
    `Authorization` is: no record of the replay holds it."""
    capture, _ = recorded
    secret = "sk-team-SECRET-0987654321zzzz"
    with standin("ollama") as url:
        code = main_replay([str(capture), "--to", url + "/v1", "--label", "team",
                            "--header", f"x-team={secret}", "--only", "endpoint=/v1/models"])  # fmt: skip
        assert code == 0, capsys.readouterr().err
    out = capture.with_name("s.team.jsonl")
    assert secret not in out.read_text(encoding="utf-8")
    (rec,) = load_records([out])
    sent = dict(rec["request"]["headers"])
    assert sent["x-team"].startswith("sha256:"), sent
