"""Independent captures of one app against different backends, paired by request content and
order: the request fingerprint (a table of "base plus one change"), the alignment, the
baseline's choice, what is left unmatched, and the analysis and `check` on top."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fixtures.analysed import pair_frame
from tests.fixtures.records import (
    answer,
    body,
    chat_record,
    models_record,
    openai_session,
    replay,
    responses_record,
    retag,
)
from wirediff._types import Record
from wirediff.analysis.comparison.pairing import (
    CONTENT,
    ONLY_BASELINE,
    ONLY_CANDIDATE,
    REPLAY,
    UNMATCHED_COLUMNS,
    align,
    choose_baseline,
    pair_exchanges,
)
from wirediff.analysis.index.analyze import Index, analyze
from wirediff.cli import main
from wirediff.errors import UsageError
from wirediff.record.keys import request_fingerprint
from wirediff.record.store import RecordWriter

# --- the fingerprint ----------------------------------------------------------------------


def _changed(rec: Record, change: Callable[[dict[str, Any]], object]) -> Record:
    out = copy.deepcopy(rec)
    change(out["request"]["body"])
    retag(out)
    return out


def _set(**fields: Any) -> Callable[[dict[str, Any]], object]:
    return lambda b: b.update(fields)


SAME_CALL = {
    "another model": _set(model="qwen2.5-7b-instruct"),
    "stream options": _set(stream_options={"include_usage": False}),
    "a user id": _set(user="u-42"),
    "metadata": _set(metadata={"team": "a"}),
    "store": _set(store=False),
    "a seed": _set(seed=7),
    "an explicit null": _set(temperature=None),
    "the previous response's id": _set(previous_response_id="resp_other"),
    "whitespace in the words": lambda b: b.update(input="  Say   hello "),
    "one user message for the string": lambda b: b.update(
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Say hello"}]}]
    ),
}
OTHER_CALL = {
    "another question": _set(input="Say goodbye"),
    "streamed": _set(stream=True),
    "a temperature": _set(temperature=0.2),
    "instructions": _set(instructions="Be brief."),
    "a tool": _set(tools=[{"type": "function", "name": "f", "parameters": {}}]),
}


@pytest.mark.parametrize("change", list(SAME_CALL.values()), ids=list(SAME_CALL))
def test_what_one_backend_adds_or_mints_leaves_the_fingerprint(
    change: Callable[[dict[str, Any]], object],
) -> None:
    base = responses_record(id="o1")
    base["request"]["body"]["previous_response_id"] = "resp_mine"
    assert request_fingerprint(_changed(base, change)) == request_fingerprint(base)


@pytest.mark.parametrize("change", list(OTHER_CALL.values()), ids=list(OTHER_CALL))
def test_what_the_app_asks_changes_the_fingerprint(
    change: Callable[[dict[str, Any]], object],
) -> None:
    base = responses_record(id="o1")
    assert request_fingerprint(_changed(base, change)) != request_fingerprint(base)


def test_a_conversation_turn_ignores_what_the_backend_said_before() -> None:
    """The second turn carries the first answer (generated words, a tool call's id and
    arguments, the tool's result): its shape counts, not its values."""

    def turn(answer: str, call_id: str, arguments: str, result: str) -> Record:
        rec = chat_record(id="o2", tool=True)
        rec["request"]["body"]["messages"] += [
            {"role": "assistant", "content": answer, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "get_weather", "arguments": arguments}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
        ]  # fmt: skip
        return rec

    one = turn("Let me look.", "call_1", '{"city": "Paris"}', "18C")
    other = turn("", "call_zz", '{"city":"example"}', "sunny")
    assert request_fingerprint(one) == request_fingerprint(other)
    fewer = copy.deepcopy(one)
    fewer["request"]["body"]["messages"].pop()
    assert request_fingerprint(fewer) != request_fingerprint(one)


def test_ids_in_the_path_and_tools_in_another_order_are_the_same_call() -> None:
    get = models_record(id="g1")
    get["request"]["path"] = "/v1/responses/resp_abc"
    retag(get)
    other = copy.deepcopy(get)
    other["request"]["path"] = "/v1/responses/resp_xyz"
    retag(other)
    assert request_fingerprint(get) == request_fingerprint(other)

    tools: list[dict[str, Any]] = [
        {"type": "function", "name": n, "parameters": {}} for n in ("a", "b")
    ]
    one = _changed(responses_record(id="o1"), _set(tools=tools))
    two = _changed(responses_record(id="o1"), _set(tools=tools[::-1]))
    assert request_fingerprint(one) == request_fingerprint(two)


# --- the alignment ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "pairs", "only_a", "only_b"),
    [
        ("abc", "abc", [(0, 0), (1, 1), (2, 2)], [], []),
        ("abcd", "abd", [(0, 0), (1, 1), (3, 2)], [2], []),
        ("abd", "abxd", [(0, 0), (1, 1), (2, 3)], [], [2]),
        ("aab", "ab", [(0, 0), (2, 1)], [1], []),
        ("abcd", "acbd", [(0, 0), (1, 2), (2, 1), (3, 3)], [], []),  # two calls reordered
        ("axb", "ayb", [(0, 0), (2, 2)], [1], [1]),
        ("", "ab", [], [], [0, 1]),
    ],
)
def test_align(
    a: str, b: str, pairs: list[tuple[int, int]], only_a: list[int], only_b: list[int]
) -> None:
    assert align(list(a), list(b)) == (pairs, only_a, only_b)


def test_a_long_alignment_falls_back_to_equal_calls_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("wirediff.analysis.comparison.pairing.ALIGN_LIMIT", 1)
    assert align(list("xabcy"), list("xbacy")) == ([(0, 0), (1, 2), (2, 1), (3, 3), (4, 4)], [], [])


# --- pairs, the baseline, unmatched -------------------------------------------------------


def _captured(label: str, records: list[Record], session: str = "s2") -> list[Record]:
    """`records` as an independent capture of the same app against `label`."""
    out = []
    for rec in records:
        c = copy.deepcopy(rec)
        c["id"], c["label"], c["session"] = f"{label}-{rec['id']}", label, session
        if isinstance(c["request"]["body"], dict):
            c["request"]["body"]["model"] = "local-model"
        retag(c)
        out.append(c)
    return out


def _pairing(records: list[Record], baseline: str | None = None) -> Any:
    """The pairing of the records' index, its pairs with both sides' columns."""
    index = Index.of(records).rows
    got = pair_exchanges(index, baseline=baseline)
    return SimpleNamespace(
        baseline=got.baseline, pairs=pair_frame(index, got.pairs), unmatched=got.unmatched
    )


def test_two_captures_of_one_app_pair_by_content_and_list_what_only_one_made() -> None:
    base = openai_session()
    cand = _captured("ollama", base[:3] + base[4:])  # the candidate run missed one call
    cand.append(_captured("ollama", [chat_record(id="extra", seq=99)])[0])
    cand[-1]["request"]["body"]["messages"][0]["content"] = "Something else"
    got = _pairing(base + cand)

    assert got.baseline.label == "openai" and got.baseline.chosen_by == "first capture"
    assert set(got.pairs["pairing"]) == {CONTENT}
    assert len(got.pairs) == len(base) - 1
    assert all(
        c == f"ollama-{b}"
        for b, c in zip(got.pairs["baseline_id"], got.pairs["candidate_id"], strict=True)
    )
    assert list(got.unmatched.columns) == UNMATCHED_COLUMNS
    assert got.unmatched[["label", "side", "id"]].values.tolist() == [
        ["ollama", ONLY_BASELINE, base[3]["id"]],
        ["ollama", ONLY_CANDIDATE, "ollama-extra"],
    ]


def test_retries_are_left_out_and_replays_pair_by_replay_of() -> None:
    base = [chat_record(id="o1", seq=0), chat_record(id="o2", seq=1, stream=True)]
    cand = _captured("vllm", base)
    retried = copy.deepcopy(cand[1])
    retried["id"], retried["seq"] = "vllm-retry", 2
    retried["request"]["headers"] = [
        [k, "1" if k.lower() == "x-stainless-retry-count" else v]
        for k, v in retried["request"]["headers"]
    ]
    retag(retried)
    replays = [replay(b, id=f"r{i}", label="lmstudio") for i, b in enumerate(base)]
    got = _pairing(base + cand + [retried] + replays)

    assert sorted(zip(got.pairs["candidate_id"], got.pairs["pairing"], strict=True)) == [
        ("r0", REPLAY), ("r1", REPLAY), ("vllm-o1", CONTENT), ("vllm-o2", CONTENT),
    ]  # fmt: skip
    assert got.unmatched.empty
    assert got.baseline.chosen_by == "replays"


def test_the_baseline_can_be_chosen_and_is_checked() -> None:
    base = openai_session()[:2]
    records = base + _captured("ollama", base)
    chosen = _pairing(records, baseline="ollama")
    assert chosen.baseline.chosen_by == "option"
    assert set(chosen.pairs["baseline_label"]) == {"ollama"} and set(chosen.pairs["label"]) == {
        "openai"
    }

    ex = Index.of(records).rows
    with pytest.raises(
        UsageError, match=r"--baseline vllm: no capture has that label \(labels: openai, ollama\)"
    ):
        choose_baseline(ex, "vllm")
    replays = Index.of([*records, replay(base[0], id="r1", label="vllm")]).rows
    with pytest.raises(UsageError, match="replayed from openai"):
        choose_baseline(replays, "ollama")
    assert choose_baseline(replays, "openai").chosen_by == "replays"
    with pytest.raises(UsageError, match="--baseline vllm: its exchanges are all replays"):
        choose_baseline(replays, "vllm")


def test_independent_captures_give_the_same_findings_as_replays() -> None:
    """A candidate's answers compared by content or as replays: the same divergences."""
    base = openai_session()

    def no_refusal(rec: Record) -> None:
        message = (body(rec) or {}).get("choices", [{}])[0].get("message")
        if isinstance(message, dict):
            message.pop("refusal", None)

    replays = [replay(b, id=f"x{b['id']}", label="ollama", change=no_refusal) for b in base]
    captured = copy.deepcopy(replays)
    for rec in captured:
        rec["replay_of"] = None
    by_replay = analyze(base + replays)
    by_content = analyze(base + captured)

    def found(a: Any) -> list[tuple[str, str, str, str]]:
        return sorted(
            a.divergences[["candidate_id", "kind", "path", "severity"]].itertuples(
                index=False, name=None
            )
        )

    assert found(by_content) == found(by_replay) != []
    assert by_content.verdicts.drop(columns="reasons").equals(
        by_replay.verdicts.drop(columns="reasons")
    )


# --- the CLI ------------------------------------------------------------------------------


def _write(path: Path, records: list[Record]) -> str:
    with RecordWriter(path) as w:
        for rec in records:
            w.write(rec)
    return str(path)


def test_check_and_report_take_two_live_captures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = openai_session()
    soft = _captured("lmstudio", base[:-1])
    for rec in soft:
        if rec["tags"]["family"] == "responses":  # LM Studio's 200 "Unexpected endpoint"
            resp = answer(rec)
            resp["body"] = {"error": "Unexpected endpoint or method. (POST /v1/responses)"}
            resp["events"] = None
            resp["headers"] = [["content-type", "application/json"]]
            retag(rec)
    a, b = _write(tmp_path / "openai.jsonl", base), _write(tmp_path / "lmstudio.jsonl", soft)

    assert main(["check", a, b, "--json", str(tmp_path / "check.json")]) == 1
    out = capsys.readouterr().out
    assert f"{len(soft)} paired-by-content exchanges compared with {len(base)}" in out
    assert (
        f"pairs  lmstudio     {len(soft)} by content; only in the baseline: 1, only in the candidate: 0"
        in out
    )
    assert "FAIL  lmstudio     responses                unsupported" in out
    assert "Unexpected endpoint or method." in out
    assert main(["check", a, b, "--fail-on", "soft_error"]) == 1
    assert "not compatible: lmstudio responses" in capsys.readouterr().out

    assert (
        main(["report", b, a, "-o", str(tmp_path / "r.html"), "--json", str(tmp_path / "s.json")])
        == 0
    )
    err = capsys.readouterr().err
    assert (
        "wirediff: baseline: lmstudio (the first capture's label; --baseline LABEL chooses another)"
        in err
    )
    assert main(["report", b, a, "--baseline", "openai", "-o", str(tmp_path / "r.html"),
                 "--json", str(tmp_path / "s.json")]) == 0  # fmt: skip
    assert "wirediff: baseline:" not in capsys.readouterr().err
    html = (tmp_path / "r.html").read_text()
    assert "only in the baseline: 1" in html and "Unmatched calls" in html
    assert main(["report", a, b, "--baseline", "vllm", "-o", str(tmp_path / "x.html")]) == 2
