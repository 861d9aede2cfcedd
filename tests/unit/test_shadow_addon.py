"""The shadow addon under mitmproxy's own test helpers, the candidates `httpx.MockTransport`s:
options, what is mirrored and how (keys, models, filter, safety), state (ids remapped, a step
skipped with its reason), a full queue, failing and hanging candidates."""

from __future__ import annotations

import asyncio
import json
import logging
import marshal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from mitmproxy import exceptions, http
from mitmproxy.test import taddons, tflow, tutils

from tests.fixtures.records import answer as answer_of
from tests.fixtures.records import error_of
from tests.fixtures.replay_records import as_json
from wirediff._types import Record
from wirediff.addons import shadow as shadow_module
from wirediff.addons.capture import Capture
from wirediff.addons.shadow import Shadow
from wirediff.analysis.index.analyze import analyze
from wirediff.record.store import load_records
from wirediff.replay import mirror_process
from wirediff.replay.mirror_process import Mirroring
from wirediff.replay.targets import Target

KEY = "sk-client-CANARY-77aa01"
CANDIDATE_KEY = "sk-candidate-CANARY-3b9f"


def flow(
    body: dict[str, Any] | None = None,
    *,
    method: bytes = b"POST",
    path: bytes = b"/v1/responses",
    answer: dict[str, Any] | None = None,
) -> http.HTTPFlow:
    f = tflow.tflow(resp=True)
    content = json.dumps(body).encode() if body is not None else b""
    f.request = tutils.treq(
        method=method, path=path, host="api.openai.test", port=443, scheme=b"https",
        headers=http.Headers(((b"content-type", b"application/json"),
                              (b"authorization", f"Bearer {KEY}".encode()),
                              (b"x-api-key", KEY.encode()))),
        content=content,
    )  # fmt: skip
    answered = json.dumps(answer or {"id": "resp_P", "object": "response", "output": []}).encode()
    f.response = tutils.tresp(
        headers=http.Headers(((b"content-type", b"application/json"),
                              (b"content-length", str(len(answered)).encode()))),
        content=answered,
    )  # fmt: skip
    return f


class Candidate:
    """A candidate that mints its own ids (`resp_<label><n>`) and keeps what it was sent."""

    def __init__(
        self, label: str, answer: Callable[[httpx.Request, str], httpx.Response] | None = None
    ) -> None:
        self.label, self.n = label, 0
        self.seen: list[httpx.Request] = []
        self.answer = answer
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        await self.release.wait()
        self.n += 1
        rid = f"resp_{self.label}{self.n}"
        if self.answer is not None:
            return self.answer(request, rid)
        return as_json({"id": rid, "object": "response", "output": []})


class InProcess:
    """The mirror process's work done on the test's event loop, each frame through
    `marshal` as down the real pipe; `refuse`: a process that is behind or gone."""

    def __init__(self, mirroring: Mirroring, refuse: bool = False) -> None:
        self.mirroring, self.refuse = mirroring, refuse

    def send(self, item: Any) -> bool:
        if self.refuse:
            return False
        self.mirroring.handle(marshal.loads(marshal.dumps(item)))
        return True

    async def aclose(self) -> None:
        await self.mirroring.close()


class Rig:
    """Capture and shadow in one `taddons` context; flows pass through both."""

    def __init__(self, tmp_path: Path, candidates: list[Candidate]) -> None:
        self.tmp, self.candidates = tmp_path, {c.label: c for c in candidates}
        self.capture, self.shadow = Capture(), Shadow()
        self.mirroring = Mirroring(
            lambda t: httpx.MockTransport(self.candidates[t.label]), logging.info
        )
        self.shadow.pipe_for = lambda: InProcess(self.mirroring)

    def configure(self, tctx: Any, **options: Any) -> None:
        tctx.configure(self.capture, capture_dir=str(self.tmp), capture_session="t")
        to = ",".join(f"{label}=http://{label}.test/v1" for label in self.candidates)
        tctx.configure(self.shadow, **{"shadow_to": to, **options})
        self.shadow.running()

    def live(self, f: http.HTTPFlow) -> None:
        """The hooks mitmproxy calls for one exchange, in its order."""
        self.capture.requestheaders(f)
        self.shadow.request(f)
        self.capture.responseheaders(f)
        self.capture.response(f)
        self.shadow.response(f)

    async def settle(self) -> None:
        mirror = self.mirroring.mirror
        assert mirror is not None
        while mirror.pending:
            await asyncio.sleep(0)

    def records(self, label: str) -> list[Record]:
        path = self.tmp / f"t.{label}.jsonl"
        return load_records([path]) if path.exists() else []


async def test_every_request_goes_to_every_candidate_recorded_as_its_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LM_KEY", CANDIDATE_KEY)
    rig = Rig(tmp_path, [Candidate("lmstudio"), Candidate("ollama")])
    with taddons.context(rig.capture, rig.shadow) as tctx:
        rig.configure(tctx, shadow_key_env="lmstudio=LM_KEY",
                      shadow_model_map="gpt-4o-mini=qwen,ollama:gpt-4o-mini=llama3.2")  # fmt: skip
        f = flow({"model": "gpt-4o-mini", "input": "hi", "api_key": KEY})
        rig.live(f)
        await rig.settle()
        await rig.shadow.done()
    for label, model in (("lmstudio", "qwen"), ("ollama", "llama3.2")):
        [rec] = rig.records(label)
        assert rec["replay_of"] == f.id and rec["label"] == label and rec["session"] == "t"
        assert rec["listener"] == f"shadow:http://{label}.test/v1"
        assert answer_of(rec)["body"]["id"] == f"resp_{label}1"
        [sent] = rig.candidates[label].seen
        assert json.loads(sent.content) == {
            "model": model,
            "input": "hi",
        }  # the key field is left out
        assert KEY not in str(sent.headers) and KEY.encode() not in sent.content
    assert rig.candidates["lmstudio"].seen[0].headers["authorization"] == f"Bearer {CANDIDATE_KEY}"
    assert "authorization" not in rig.candidates["ollama"].seen[0].headers
    assert KEY not in (tmp_path / "t.lmstudio.jsonl").read_text()
    assert load_records([tmp_path / "t.jsonl"])[0]["id"] == f.id  # the capture's own record


async def test_the_filter_and_the_safety_rules_choose_what_is_mirrored(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [Candidate("c")])
    with taddons.context(rig.capture, rig.shadow) as tctx:
        rig.configure(tctx, shadow_filter="~u /v1/responses")
        rig.live(flow({"model": "m", "messages": []}, path=b"/v1/chat/completions"))
        kept = flow({"model": "m", "input": "x"})
        rig.live(kept)
        rig.live(flow(None, method=b"DELETE", path=b"/v1/responses/resp_1"))
        await rig.settle()
        [sent, deleted] = rig.records("c")
        assert sent["replay_of"] == kept.id and sent["error"] is None
        assert (
            error_of(deleted)["kind"] == "skipped"
            and "shadow_allow_unsafe" in error_of(deleted)["message"]
        )
        assert [r.method for r in rig.candidates["c"].seen] == ["POST"]
        tctx.configure(rig.shadow, shadow_allow_unsafe=True, shadow_filter="")
        rig.live(flow(None, method=b"DELETE", path=b"/v1/responses/resp_1"))
        await rig.settle()
        await rig.shadow.done()
    assert [r.method for r in rig.candidates["c"].seen] == ["POST", "DELETE"]


async def test_a_chained_call_waits_for_the_primary_answer_still_on_its_way(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, [Candidate("c")])
    with taddons.context(rig.capture, rig.shadow) as tctx:
        rig.configure(tctx)
        first = flow(
            {"model": "m", "input": "hi"},
            answer={"id": "resp_P1", "object": "response", "output": []},
        )
        rig.capture.requestheaders(first)
        rig.shadow.request(first)  # its answer is not handed over yet (a stream ending)
        await rig.settle()
        rig.live(flow({"model": "m", "input": "more", "previous_response_id": "resp_P1"}))
        for _ in range(20):  # the mirror runs as far as it can: to the wait
            await asyncio.sleep(0)
        assert len(rig.candidates["c"].seen) == 1
        rig.capture.responseheaders(first)
        rig.capture.response(first)
        rig.shadow.response(first)
        await rig.settle()
        await rig.shadow.done()
    sent = rig.candidates["c"].seen
    assert json.loads(sent[1].content)["previous_response_id"] == "resp_c1"


def soft_error(request: httpx.Request, rid: str) -> httpx.Response:
    return as_json({"error": "Unexpected endpoint or method. (POST /v1/responses)"})


async def test_a_chained_call_is_sent_with_the_candidates_id_or_skipped_with_the_reason(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, [Candidate("ollama"), Candidate("lmstudio", soft_error)])
    with taddons.context(rig.capture, rig.shadow) as tctx:
        rig.configure(tctx)
        first = flow(
            {"model": "m", "input": "hi"},
            answer={"id": "resp_P1", "object": "response", "output": []},
        )
        rig.live(first)
        await rig.settle()
        second = flow({"model": "m", "input": "more", "previous_response_id": "resp_P1"})
        rig.live(second)
        lookup = flow(None, method=b"GET", path=b"/v1/responses/resp_P1")
        rig.live(lookup)
        await rig.settle()
        await rig.shadow.done()
    ollama = rig.candidates["ollama"].seen
    assert json.loads(ollama[1].content)["previous_response_id"] == "resp_ollama1"
    assert ollama[2].url.path == "/v1/responses/resp_ollama1"
    assert len(rig.candidates["lmstudio"].seen) == 1  # the chained calls were never sent
    skipped = {r["replay_of"]: r["error"] for r in rig.records("lmstudio") if r["error"]}
    assert skipped.keys() == {second.id, lookup.id}
    why = skipped[second.id]["message"]
    assert skipped[second.id]["kind"] == "skipped"
    assert why.startswith(
        f"previous_response_id resp_P1 comes from {first.id}, but the target answered it with HTTP 200 and an error body"
    )


async def test_a_full_queue_drops_mirrors_counts_them_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    slow = Candidate("slow")
    slow.release.clear()  # answers nothing until released
    rig = Rig(tmp_path, [slow])
    with taddons.context(rig.capture, rig.shadow) as tctx:
        rig.configure(tctx, shadow_queue=2, shadow_concurrency=1)
        for _ in range(5):
            rig.live(flow({"model": "m", "input": "x"}))  # returns at once, whatever waits
        mirror = rig.mirroring.mirror
        assert mirror is not None and mirror.pending == 2 and mirror.candidates[0].dropped == 3
        slow.release.set()
        await rig.settle()
        rig.live(flow({"model": "m", "input": "x"}))
        await rig.settle()
        await rig.shadow.done()
    assert len(rig.records("slow")) == 3
    said = [r.getMessage() for r in caplog.records]
    assert sum("dropping its mirrors" in line for line in said) == 1
    assert any(
        line.startswith("shadow: slow: 3 mirrored (3 ok") and "3 dropped" in line for line in said
    )


async def test_failing_and_hanging_candidates_are_recorded_never_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(request: httpx.Request, rid: str) -> httpx.Response:
        raise httpx.ConnectError("Connection refused", request=request)

    hang = Candidate("hang")
    hang.release.clear()
    rig = Rig(tmp_path, [Candidate("down", refuse), hang])
    monkeypatch.setattr(mirror_process, "DRAIN_SECONDS", 0.05)
    with taddons.context(rig.capture, rig.shadow) as tctx:
        caplog.set_level(logging.INFO)
        rig.configure(tctx)
        f = flow({"model": "m", "input": "x"})
        rig.live(f)
        rig.live(flow(method=b"DELETE", path=b"/v1/responses/resp_1"))  # unsafe: not sent
        rig.live(flow({"model": "m", "input": "y"}))
        while len(hang.seen) < 2:
            await asyncio.sleep(0)
        await rig.shadow.done()
    down = [r for r in rig.records("down") if error_of(r)["kind"] != "skipped"]
    assert [error_of(r)["kind"] for r in down] == ["upstream_unreachable"] * 2
    assert down[0]["replay_of"] == f.id
    cut = [r for r in rig.records("hang") if error_of(r)["kind"] != "skipped"]
    assert [(error_of(r)["kind"], r["response"]) for r in cut] == [("interrupted", None)] * 2
    said = [r.getMessage() for r in caplog.records]
    # the dead candidate is said while it runs, once; the stop's cut is not a transport error
    assert [line for line in said if "cannot reach" in line] == [
        "shadow: down: cannot reach http://down.test/v1 (cannot connect to down.test:80: "
        "Connection refused): its mirrors are recorded unanswered until it answers"
    ]
    assert (
        "shadow: hang: 1 mirrored (0 ok, 0 error answers, 0 transport errors, 1 skipped), "
        "2 cut by the stop (recorded as interrupted)"
    ) in said, said


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"shadow_to": "lm"}, "shadow_to: expected KEY=VALUE"),
        ({"shadow_to": "lm=ftp://x"}, "not an http(s) URL"),
        (
            {"shadow_to": "lm=http://127.0.0.1:99999/v1"},
            "port '99999' of http://127.0.0.1:99999/v1 is not a number from 1 to 65535",
        ),
        ({"shadow_to": "../x=http://x/v1"}, "a label is a file name part"),
        (
            {"shadow_to": "lm=http://x/v1", "shadow_key_env": "lm=WIREDIFF_UNSET_VAR"},
            "shadow_key_env: the key for lm: environment variable WIREDIFF_UNSET_VAR is not set",
        ),
        (
            {"shadow_to": "lm=http://x/v1", "shadow_key_env": "other=HOME"},
            "other is not a label of shadow_to",
        ),
        (
            {"shadow_to": "lm=http://x/v1", "shadow_filter": "~u ("},
            "not a mitmproxy filter expression",
        ),
        ({"shadow_to": "lm=http://x/v1", "shadow_queue": 0}, "shadow_queue must be 1 or more"),
    ],
)
async def test_a_bad_option_is_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, options: dict[str, Any], says: str
) -> None:
    sh = Shadow()
    mirroring = Mirroring(lambda t: httpx.MockTransport(lambda r: httpx.Response(200)))
    sh.pipe_for = lambda: InProcess(mirroring)
    with taddons.context(Capture(), sh) as tctx:
        tctx.configure(sh, **options)  # at startup: logged, and mitmdump stops
        assert sh.config is None
        [error] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert error.startswith("shadow: ") and says in error and "\n" not in error
        sh.is_running = True  # at run time: refused, mirroring goes on as it was
        tctx.configure(
            sh,
            shadow_to="ok=http://ok.test/v1",
            shadow_key_env="",
            shadow_filter="",
            shadow_queue=8,
        )
        with pytest.raises(exceptions.OptionsError) as refused:
            tctx.configure(sh, **options)
        assert says in str(refused.value)
        assert sh.config is not None and sh.config["candidates"][0][0] == "ok"
        assert mirroring.mirror is not None and mirroring.mirror.candidates[0].label == "ok"


async def test_without_the_capture_addon_it_says_what_to_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sh = Shadow()
    with taddons.context(sh) as tctx:
        tctx.configure(sh, shadow_to="lm=http://x/v1")
    assert any("load addons/capture.py first" in r.getMessage() for r in caplog.records)


async def test_a_mirror_process_behind_drops_mirrors_counts_them_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rig = Rig(tmp_path, [Candidate("c")])
    rig.shadow.pipe_for = lambda: InProcess(rig.mirroring, refuse=True)
    with taddons.context(rig.capture, rig.shadow) as tctx:
        rig.configure(tctx)
        flows = [flow({"model": "m", "input": "x"}) for _ in range(3)]
        for f in flows:
            rig.live(f)  # the client's exchange goes on
        await rig.shadow.done()
        rig.capture.done()
    assert [r["id"] for r in load_records([tmp_path / "t.jsonl"])] == [f.id for f in flows]
    assert not rig.candidates["c"].seen and not rig.records("c")
    said = [r.getMessage() for r in caplog.records]
    assert sum("mirror process is behind or gone" in line for line in said) == 1
    assert any(line.startswith("shadow: 3 live requests not mirrored") for line in said)


def chat_answer(**change: Any) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "system_fingerprint": "fp_1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    for key, value in change.items():
        if value is None:
            del answer[key]
        else:
            answer[key] = value
    return answer


async def test_a_secondary_at_the_primarys_url_tells_noise_from_divergence(
    tmp_path: Path,
) -> None:
    # the primary's own answers vary in system_fingerprint; Ollama lacks it and usage too
    def secondary(request: httpx.Request, rid: str) -> httpx.Response:
        return as_json(chat_answer(system_fingerprint=None))

    def ollama(request: httpx.Request, rid: str) -> httpx.Response:
        return as_json(chat_answer(system_fingerprint=None, usage=None))

    rig = Rig(tmp_path, [Candidate("openai", secondary), Candidate("ollama", ollama)])
    with taddons.context(rig.capture, rig.shadow) as tctx:
        tctx.configure(rig.capture, capture_label="openai")
        rig.configure(tctx)
        ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        rig.live(flow(ask, path=b"/v1/chat/completions", answer=chat_answer()))
        await rig.settle()
        await rig.shadow.done()
        rig.capture.done()
    capture, mirrors = tmp_path / "t.jsonl", tmp_path / "t.ollama.jsonl"
    assert [r["label"] for r in rig.records("openai")] == ["openai"]

    def paths(files: list[Path]) -> set[tuple[str, str]]:
        found = analyze(load_records(files)).divergences
        return set(found[["label", "path"]].itertuples(index=False, name=None))

    alone = paths([capture, mirrors])
    with_secondary = paths([capture, mirrors, tmp_path / "t.openai.jsonl"])
    assert {("ollama", "system_fingerprint"), ("ollama", "usage")} <= alone
    assert with_secondary == alone - {("ollama", "system_fingerprint")}


def test_targets_carry_the_model_maps() -> None:
    [(lm, _), (ol, _)] = shadow_module.parse_targets(
        "lm=http://a/v1,ol=http://b/v1", "", "*=m1,ol:*=m2"
    )
    assert isinstance(lm, Target) and lm.map_model("x") == "m1" and ol.map_model("x") == "m2"
