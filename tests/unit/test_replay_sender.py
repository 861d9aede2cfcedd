"""The replay sender against `httpx.MockTransport`: order, skips, concurrency, failures,
resuming and retrying, pacing."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.fixtures.records import answer, by_original, error_of, events_of
from tests.fixtures.replay_records import (
    FP,
    Fake,
    T,
    as_error,
    as_json,
    engine,
    kind,
    mock,
    rec,
    session,
    streamed,
    write_capture,
)
from wirediff._types import Record
from wirediff.record.store import RecordWriter, latest_replays, load_records
from wirediff.replay.output import replay_history
from wirediff.replay.plan import Plan, make_plan, resolve, resumed
from wirediff.replay.sender import TargetRun, TokenBucket
from wirediff.replay.targets import Target
from wirediff.replay.wire import connect_failure_kind


def test_engine_sends_dependents_after_producers_with_the_targets_ids() -> None:
    recs = session()
    recs[3]["request"]["body"]["stream"] = True
    recs[3]["tags"]["stream"] = True
    fake = Fake()
    out, run = engine(recs, fake)
    by = by_original(out)
    assert len(out) == len(recs) and set(by) == {r["id"] for r in recs}
    # what the target answered to fc, and what it was sent next
    fc_answer = answer(by["fc"])["body"]
    sent = by["fc2"]["request"]["body"]
    assert sent["previous_response_id"] == fc_answer["id"] != "resp_3"
    assert {i["call_id"] for i in sent["input"]} == {fc_answer["output"][0]["call_id"]}
    paths = [(r.method, r.url.path, json.loads(r.content or b"{}").get("input")) for r in fake.seen]
    r1 = paths.index(("POST", "/v1/responses", "hi"))
    assert paths.index(("GET", f"/v1/responses/{answer(by['r1'])['body']['id']}", None)) > r1
    # the chat tool result names the target's own tool call
    msgs = by["ct2"]["request"]["body"]["messages"]
    call = answer(by["ct"])["body"]["choices"][0]["message"]["tool_calls"][0]["id"]
    assert msgs[1]["tool_call_id"] == msgs[0]["tool_calls"][0]["id"] == call
    # the stream was recorded event by event through the capture's StreamTap
    stream = events_of(by["fc2"])
    assert [e["event"] for e in stream] == ["response.created", "response.completed"]
    assert all((e.get("t_ms") or 0) >= 0 for e in stream)
    # DELETE is unsafe: a skipped record, not a request
    assert by["del"]["response"] is None and error_of(by["del"])["kind"] == "skipped"
    assert all(r.method != "DELETE" for r in fake.seen)
    # records have the capture's shape, linked to their originals
    for r in out:
        assert r["format"] == "wirediff/1" and r["label"] == "tgt" and r["session"] == "s"
        assert r["listener"] == "replay:http://target.test:9000/v1"
        assert r["replay_of"] != r["id"]
    sent_rec = by["r1"]
    auth = sent_rec["tags"]["auth"]
    assert auth is not None and auth["scheme"] == "Bearer"
    assert "sk-target" not in json.dumps(out)  # the key is fingerprinted like in a capture
    assert run.counts.skipped == 1 and run.counts.ok == len(recs) - 1


def test_engine_skips_what_the_target_made_meaningless() -> None:
    out, _ = engine(session(), Fake(calls=False))
    by = by_original(out)
    for rid in ("fc2", "ct2"):
        assert by[rid]["response"] is None and error_of(by[rid])["kind"] == "skipped"
    assert "no function call #1" in error_of(by["fc2"])["message"]
    assert "no tool call #1" in error_of(by["ct2"])["message"]
    assert answer(by["r2"])["status"] == 200  # unaffected


def test_engine_concurrency_is_bounded_and_used() -> None:
    recs = [rec(f"i{i}", body={"model": "m"}) for i in range(20)]
    fake = Fake()
    engine(recs, fake, concurrency=5)
    assert fake.peak == 5
    fake1 = Fake()
    engine(recs, fake1, concurrency=1)
    assert fake1.peak == 1


def test_engine_records_connection_failures() -> None:
    out, run = engine(session()[:2], Fake(fail=lambda r: True))
    first = next(r for r in out if r["replay_of"] == "r1")
    assert error_of(first)["kind"] == "upstream_unreachable" and first["response"] is None
    second = next(r for r in out if r["replay_of"] == "r2")
    assert error_of(second)["kind"] == "skipped" and "did not answer" in error_of(second)["message"]
    assert run.counts.sent == run.counts.unreachable == 1


def test_engine_sends_unknown_paths_and_queries_where_they_belong() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return as_json({"error": "not here"}, 404)

    recs = [
        rec("chat", path="/v1/chat/completions", body={"model": "m"}),
        rec("ask", "GET", "/v1/ask_url?q=1"),
        rec("health", "GET", "/health"),
        rec("keyed", "GET", f"/v1/models?key={FP}&limit=2"),
    ]
    azure = Target("az", "https://az.example/openai/v1?api-version=2024-10-21")
    out, _ = engine(recs, handler, target=azure)
    q = "api-version=2024-10-21"
    assert sorted(seen) == [
        f"https://az.example/openai/v1/ask_url?q=1&{q}",
        f"https://az.example/openai/v1/chat/completions?{q}",
        f"https://az.example/openai/v1/models?limit=2&{q}",
    ]
    assert {r["listener"] for r in out} == {"replay:https://az.example/openai/v1"}
    assert FP not in json.dumps([r["request"] for r in out])
    (health,) = [r for r in out if r["replay_of"] == "health"]
    assert error_of(health) == {
        "kind": "skipped",
        "message": "the captured path '/health' leads to '/health', outside the target's base "
        "path '/openai/v1'",
    }


def test_engine_records_garbage_as_it_came() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return streamed(200, b"<html>oops</html>", "text/html")

    plan = make_plan([rec("a", body={"model": "m"})])
    out: list[Record] = []
    asyncio.run(TargetRun(plan, T, None, out.append, {}, concurrency=1).run(mock(handler)))  # fmt: skip
    assert answer(out[0])["text"] == "<html>oops</html>" and answer(out[0])["complete"]


def test_engine_resumes_from_earlier_records(tmp_path: Path) -> None:
    recs = session()
    first, _ = engine(recs, Fake())
    earlier = {r["replay_of"]: r for r in first if r["replay_of"] in ("r1", "fc", "ct2")}
    p = write_capture(tmp_path / "s.tgt.jsonl", list(earlier.values()))
    done, _ = replay_history({"tgt": [p, tmp_path / "missing.jsonl"]})["tgt"]
    assert set(done) == {"r1", "fc", "ct2"} and replay_history({"other": [p]})["other"][0] == {}
    fake = Fake()
    rest, run = engine(recs, fake, done=done)
    assert {r["replay_of"] for r in rest} == {r["id"] for r in recs} - set(done)
    assert run.counts.resumed == 3 and run.counts.done == len(recs) - 3
    inputs = [json.loads(r.content or b"{}").get("input") for r in fake.seen]
    assert "hi" not in inputs and "w?" not in inputs  # producers are not sent again…
    by = by_original(rest)
    # …and their dependents use the ids the target returned in the earlier run
    fc_then = answer(earlier["fc"])["body"]
    assert (
        by["r2"]["request"]["body"]["previous_response_id"] == (answer(earlier["r1"])["body"]["id"])
    )
    assert by["fc2"]["request"]["body"]["previous_response_id"] == fc_then["id"]
    assert by["fc2"]["request"]["body"]["input"][1]["call_id"] == fc_then["output"][0]["call_id"]


def test_an_output_is_named_as_one_only_when_it_is_no_capture(tmp_path: Path) -> None:
    """A file at the output that holds no record is no earlier replay: the error says to name
    another output. One that is a capture, with a bad record further on, is told as any
    capture's bad record, for a resume not to be given up over it."""
    from wirediff.errors import CaptureError

    notes = tmp_path / "notes.txt"
    notes.write_text("<html>\n")
    with pytest.raises(CaptureError, match="the replay would append its records to it"):
        replay_history({"tgt": [notes]})
    first, _ = engine(session(), Fake())
    p = write_capture(tmp_path / "s.tgt.jsonl", first[:1])
    with p.open("a") as fh:
        fh.write('{"format": "wirediff/1", "id": 1}\n')
    with pytest.raises(CaptureError) as caught:
        replay_history({"tgt": [p]})
    assert ":2: malformed wirediff/1 record" in str(caught.value)
    assert "append" not in str(caught.value)


def _unreachable_r1_skipped_r2(prior: dict[str, Record], plan: Plan) -> None:
    as_error("upstream_unreachable")(prior["r1"])
    why = resolve(plan.by_id["r2"], {"r1": prior["r1"]}.get)[1]
    as_error("skipped", why)(prior["r2"])


def _textual_fc_skipped_fc2(
    prior: dict[str, Record], plan: Plan, message: str | None = None
) -> None:
    answer(prior["fc"])["body"]["output"] = [{"type": "message", "id": "msg_T"}]
    why = message or resolve(plan.by_id["fc2"], prior.get)[1]
    as_error("skipped", why)(prior["fc2"])


@pytest.mark.parametrize(
    ("change", "allow_unsafe", "again"),
    [
        (None, False, set()),  # the DELETE's skip would be the same: done
        (None, True, {"del"}),  # now allowed: sent
        # no answer: tried again (what builds on r1 keeps its earlier answer)
        (lambda p, _: as_error("upstream_unreachable")(p["r1"]), False, {"r1"}),
        (lambda p, _: as_error("timeout")(p["r1"]), False, {"r1"}),
        (lambda p, _: as_error("upstream_disconnect")(p["card"]), False, {"card"}),
        # an answer, even an error, or a broken one, is the target's answer: done
        (lambda p, _: p["r1"]["response"].update(status=500), False, set()),
        (lambda p, _: as_error("upstream_protocol")(p["r1"]), False, set()),
        # a step skipped for a producer that is tried again is tried again with it…
        (_unreachable_r1_skipped_r2, False, {"r1", "r2"}),
        # …one skipped for an answer that stays is done; for a reason that changed, not
        (_textual_fc_skipped_fc2, False, set()),
        (lambda p, plan: _textual_fc_skipped_fc2(p, plan, "an older reason"), False, {"fc2"}),
        (lambda p, _: p.pop("r1"), False, {"r1"}),  # never recorded
    ],
)  # fmt: skip
def test_resume_retries_what_got_no_answer(
    change: Callable[[dict[str, Record], Plan], object] | None, allow_unsafe: bool, again: set[str]
) -> None:
    recs = session()
    first, _ = engine(recs, Fake())
    prior = by_original(first)
    plan = make_plan(recs, allow_unsafe=allow_unsafe)
    if change is not None:
        change(prior, plan)
    done = resumed(plan, prior, T)
    assert {n.id for n in plan.nodes} - set(done) == again
    assert all(done[k] is prior[k] for k in done)


def test_latest_replays_keeps_the_newest_per_original_and_label() -> None:
    orig = rec("o", body={})

    def attempt(rid: str, label: str, started: float) -> Record:
        return rec(rid, body={}, started=started, replay_of="o", label=label)

    old, new, tie_a, tie_b = (attempt("a1", "x", 5.0), attempt("a2", "x", 9.0),
                              attempt("a3", "y", 7.0), attempt("a4", "y", 7.0))  # fmt: skip
    other = rec("b1", body={}, replay_of="p", label="x")
    assert [r["id"] for r in latest_replays([orig, new, old, tie_a, tie_b, other])] == [
        "o", "a2", "a4", "b1",
    ]  # fmt: skip


def test_engine_retries_what_got_no_answer(tmp_path: Path) -> None:
    recs = session()
    out = tmp_path / "s.tgt.jsonl"
    down, run = engine(recs, Fake(fail=lambda r: True))
    write_capture(out, down)
    assert run.counts.unreachable == run.counts.sent > 0

    def again(allow_unsafe: bool = False) -> tuple[list[Record], Fake, TargetRun]:
        plan = make_plan(recs, allow_unsafe=allow_unsafe)
        done = resumed(plan, replay_history({"tgt": [out]})["tgt"][0], T)
        fake = Fake()
        new, run = engine(recs, fake, done=done, allow_unsafe=allow_unsafe)
        with RecordWriter(out) as w:
            for r in new:
                w.write(r)
        return new, fake, run

    # the target is back: everything that got no answer, or was skipped for it, is sent
    new, fake, run = again()
    assert {r["replay_of"] for r in new} == {r["id"] for r in recs} - {"del"}
    assert run.counts.resumed == 1 and run.counts.ok == len(recs) - 1
    newest = by_original(latest_replays(load_records([out])))
    assert set(newest) == {r["id"] for r in recs}
    assert all(kind(r) is None for k, r in newest.items() if k != "del")
    answered = [r["replay_of"] or "" for r in load_records([out]) if kind(r) is None]
    assert sorted(answered) == sorted(r["id"] for r in recs if r["id"] != "del")
    # a third run sends nothing; with --allow-unsafe, the DELETE that was skipped
    new, fake, _ = again()
    assert new == [] and fake.seen == []
    new, fake, _ = again(allow_unsafe=True)
    assert [(r.method, r.url.path) for r in fake.seen] == [
        ("DELETE", f"/v1/responses/{answer(newest['r1'])['body']['id']}")
    ]


def test_token_bucket_paces_without_real_sleeping() -> None:
    now = [0.0]
    slept: list[float] = []

    async def fake_sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    async def go() -> None:
        bucket = TokenBucket(2.0, clock=lambda: now[0], sleep=fake_sleep)
        for _ in range(5):
            await bucket.take()

    asyncio.run(go())
    assert slept == [0.5, 0.5, 0.5, 0.5] and now[0] == 2.0


def test_ctrl_c_records_the_request_in_flight_and_the_next_run_marks_its_attempt() -> None:
    plan = make_plan([rec("a", body={"model": "m", "input": "hi"})])
    out: list[Record] = []
    on_the_wire = asyncio.Event()

    async def never_answers(request: httpx.Request) -> httpx.Response:
        on_the_wire.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def interrupt() -> None:
        run = TargetRun(plan, T, None, out.append, {}, concurrency=1)
        task = asyncio.create_task(run.run(mock(never_answers)))
        await on_the_wire.wait()
        task.cancel()  # what Ctrl-C does to asyncio.run's task
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt())
    (first,) = out
    assert error_of(first)["kind"] == "interrupted" and "attempt" not in first
    assert resumed(plan, {"a": first}, T) == {}  # sent again by the next run…
    again: list[Record] = []
    run = TargetRun(plan, T, None, again.append, {}, concurrency=1, attempts={"a": 1})
    asyncio.run(run.run(mock(lambda r: as_json({"id": "x"}))))
    assert again[0]["attempt"] == 2 and again[0]["error"] is None  # …and says so


def _raised_from(*chain: BaseException) -> BaseException:
    """Raise each exception from the one after it, as httpx raises from httpcore, from ssl."""
    caught: BaseException | None = None
    for e in reversed(chain):
        try:
            raise e from caught
        except BaseException as got:
            caught = got
    assert caught is not None
    return caught


@pytest.mark.parametrize(
    ("chain", "kind"),
    [
        ((httpx.ConnectError("[SSL: WRONG_VERSION_NUMBER]"), ssl.SSLError(1, "wrong version")), "tls"),
        ((httpx.ConnectError("certificate verify failed"), ssl.SSLCertVerificationError()), "tls"),
        ((httpx.ConnectError("ssl-gw.internal: refused"), ConnectionRefusedError()), "upstream_unreachable"),
        ((httpx.ConnectError("skilled-llm.internal: closed"), OSError("closed")), "upstream_unreachable"),
        ((httpx.ConnectTimeout("timed out"), TimeoutError()), "timeout"),
        ((TimeoutError(),), "timeout"),
        ((ConnectionRefusedError("tls? no"),), "upstream_unreachable"),
    ],
    ids=["tls", "certificate", "host named ssl", "host named killed", "httpx timeout",
         "timeout", "refused"],
)  # fmt: skip
def test_a_failed_connection_is_named_by_its_cause_never_its_words(
    chain: tuple[BaseException, ...], kind: str
) -> None:
    assert connect_failure_kind(_raised_from(*chain)) == kind
