"""`wirediff check` and the drop-in verdicts it gates on: several candidates, one line per
candidate and family, exit 0 compatible, 1 not, 2 bad input; the JUnit file parses and the
JSON's verdicts follow summary.schema.json."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest
from junitparser import Failure, JUnitXml

from tests.fixtures.records import (
    answer,
    body,
    chat_record,
    drop_events,
    error_record,
    make_record,
    openai_error,
    openai_session,
    replay,
    responses_record,
    retag,
    set_header,
)
from wirediff._types import Record
from wirediff.analysis.comparison.verdicts import verdict_frame
from wirediff.analysis.index.analyze import analyze
from wirediff.cli import main
from wirediff.record.store import RecordWriter
from wirediff.reports.render import SCHEMA_PATH


def write(path: Path, records: list[Record]) -> str:
    with RecordWriter(path) as w:
        for rec in records:
            w.write(rec)
    return str(path)


def deviating(rec: Record) -> None:
    """Ollama-like: no request id (cosmetic), no `refusal` on chat messages (deviation)."""
    set_header(rec, "x-request-id", None)
    message = (body(rec) or {}).get("choices", [{}])[0].get("message")
    if isinstance(message, dict):
        message.pop("refusal", None)


def no_usage_chunk(rec: Record) -> None:
    if answer(rec)["events"] is not None and rec["tags"]["family"] == "chat.completions":
        drop_events(rec, lambda d: not (isinstance(d, dict) and d.get("usage")))


@pytest.fixture
def captures(tmp_path: Path) -> tuple[str, str, str]:
    base = openai_session()
    good = [replay(b, id=f"g{i}", label="ollama", change=deviating) for i, b in enumerate(base)]
    bad = [
        replay(b, id=f"x{i}", label="lmstudio", change=no_usage_chunk) for i, b in enumerate(base)
    ]
    return (
        write(tmp_path / "s.jsonl", base),
        write(tmp_path / "s.ollama.jsonl", good),
        write(tmp_path / "s.lmstudio.jsonl", bad),
    )


def test_a_candidate_with_only_cosmetic_and_deviations_passes(
    captures: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, good, _ = captures
    assert main(["check", base, good]) == 0
    out = capsys.readouterr().out
    assert "ok    ollama       chat.completions         compatible with deviations" in out
    assert out.rstrip().endswith("compatible: no candidate fails the gate")
    capsys.readouterr()
    assert main(["check", base, good, "--fail-on-severity", "deviation"]) == 1
    assert "a deviation finding (--fail-on-severity deviation) — `choices[]" in (
        capsys.readouterr().out
    )
    # what fails a cell its verdict does not fail is named, in the lines, the JSON and JUnit
    doc, junit = tmp_path / "c.json", tmp_path / "c.xml"
    argv = ["check", base, good, "--fail-on", "header", "--json", str(doc), "--junit", str(junit)]
    assert main(argv) == 1
    failing = [line for line in capsys.readouterr().out.splitlines() if "FAIL" in line]
    assert failing and all("a header finding (--fail-on) — " in line for line in failing)
    rows = [r for r in json.loads(doc.read_text())["verdicts"] if r["fails"]]
    assert rows and all(r["fails_on"] == ["a header finding (--fail-on)"] for r in rows)
    [suite] = list(JUnitXml.fromfile(str(junit)))
    messages = [r.message for c in suite for r in c.result if isinstance(r, Failure)]
    assert messages and all(m.startswith("a header finding (--fail-on); ") for m in messages)


def test_the_gate_leaves_out_the_paths_an_ignore_config_names(
    captures: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The paths `report --ignore-config` leaves out are left out of the gate too."""
    base, good, _ = captures
    config = tmp_path / "wirediff.yaml"
    config.write_text("ignore:\n  - choices[].message.refusal\n")
    strict = ["check", base, good, "--fail-on-severity", "deviation"]
    assert main(strict) == 1
    assert "`choices[].message.refusal` is missing" in capsys.readouterr().out
    assert main([*strict, "--ignore-config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "refusal" not in out
    assert f"ok    ollama       chat.completions         {'compatible':<27} `x-request-id`" in out


def test_several_candidates_one_line_each_and_the_breaking_one_fails(
    captures: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, good, bad = captures
    junit, doc = tmp_path / "out" / "check.xml", tmp_path / "out" / "check.json"
    code = main(["check", base, good, bad, "--junit", str(junit), "--json", str(doc)])
    assert code == 1
    lines = capsys.readouterr().out.splitlines()
    # the bottom line first, a sentence per candidate
    assert lines[0].startswith("lmstudio cannot replace openai: chat.completions breaks: ")
    assert lines[1] == (
        "ollama can replace openai for chat.completions, responses and models, "
        "with 1 deviation no client notices."
    )
    cells = [line.split()[:3] for line in lines if line.startswith("  ")]
    assert cells == [
        ["base", "openai", "chat.completions"],
        ["base", "openai", "responses"],
        ["base", "openai", "models"],
        ["FAIL", "lmstudio", "chat.completions"],
        ["ok", "lmstudio", "responses"],
        ["ok", "lmstudio", "models"],
        ["ok", "ollama", "chat.completions"],
        ["ok", "ollama", "responses"],
        ["ok", "ollama", "models"],
    ]
    assert "include_usage" in next(line for line in lines if line.startswith("  FAIL"))

    [suite] = list(JUnitXml.fromfile(str(junit)))
    assert (suite.name, suite.tests, suite.failures) == ("wirediff check", 6, 1)
    cases = {(c.classname, c.name): c for c in suite}
    assert len(cases) == 6
    failed = cases[("wirediff.lmstudio", "chat.completions")]
    [failure] = [r for r in failed.result if isinstance(r, Failure)]
    assert failure.type == "breaking"
    assert "`stream_options.include_usage` asked for it" in failure.message
    assert not cases[("wirediff.ollama", "responses")].result or not any(
        isinstance(r, Failure) for r in cases[("wirediff.ollama", "responses")].result
    )

    written = json.loads(doc.read_text())
    assert (written["format"], written["passed"]) == ("wirediff-check/1", False)
    assert written["bottom_line"] == lines[:2]
    schema = json.loads(SCHEMA_PATH.read_text())
    row_schema = {**schema["$defs"]["verdict_row"], "$defs": schema["$defs"]}
    for row in written["verdicts"]:
        jsonschema.validate(row, row_schema)
    assert [r["fails"] for r in written["verdicts"] if r["label"] == "lmstudio"] == [
        True,
        False,
        False,
    ]


def test_one_input_holding_every_label_is_checked_as_its_captures_are(
    captures: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Alone, the baseline's other labels are the candidates: the same lines, and the same JSON."""
    base, good, bad = captures
    apart = tmp_path / "apart.json"
    assert main(["check", base, good, bad, "--json", str(apart)]) == 1
    expected = capsys.readouterr().out
    both = tmp_path / "all.jsonl"
    both.write_bytes(b"".join(Path(p).read_bytes() for p in (base, good, bad)))
    together = tmp_path / "together.json"
    assert main(["check", str(both), "--json", str(together)]) == 1
    assert capsys.readouterr().out == expected
    assert json.loads(together.read_text()) == json.loads(apart.read_text())


def asking_something_else() -> Record:
    """An exchange of another label that asks what the baseline never does: it pairs with none."""
    other = chat_record(id="z1", label="vllm")
    other["request"]["body"]["messages"] = [{"role": "user", "content": "something else"}]
    return other


def test_one_input_says_which_labels_pair_with_nothing(
    captures: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A label none of whose exchanges pairs is warned about, and its rows are not the baseline's."""
    base, good, _ = captures
    other = asking_something_else()
    both = tmp_path / "all.jsonl"
    both.write_bytes(Path(base).read_bytes() + Path(good).read_bytes())
    with both.open("a") as fh:
        fh.write(json.dumps(other) + "\n")
    assert main(["check", str(both)]) == 0
    out, err = capsys.readouterr()
    assert err == (
        f"wirediff: warning: {both}: vllm: no exchange pairs with the baseline (openai); "
        "not compared\n"
    )
    assert "  -     vllm         chat.completions" in out and "  base  vllm" not in out


def test_one_input_with_nothing_to_compare_is_bad_input(
    captures: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    base, _, _ = captures
    assert main(["check", base]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"wirediff: error: {base}: no exchange of another label pairs with its baseline (openai); "
        "name the candidates' captures after it\n"
    )


def test_a_candidate_that_pairs_with_nothing_is_bad_input(
    captures: tuple[str, str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, good, _ = captures
    other = asking_something_else()
    stray = write(tmp_path / "other.jsonl", [other])
    assert main(["check", base, good, stray]) == 2
    err = capsys.readouterr().err
    assert f"{stray}: no exchange pairs with {base} (openai)" in err and err.count("\n") == 1
    assert main(["check", base, base]) == 2
    assert f"{base}: the baseline itself; a candidate is another capture" in (
        capsys.readouterr().err
    )
    assert main(["check", base, good, good]) == 2
    assert capsys.readouterr().err == f"wirediff: error: {good}: given twice\n"
    copy = tmp_path / "copy.jsonl"  # the same exchanges again, under another name
    copy.write_bytes(Path(good).read_bytes())
    assert main(["check", base, good, str(copy)]) == 2
    assert capsys.readouterr().err.endswith(
        f"wirediff: error: {copy}: every exchange repeats one read before, by its id, as when a "
        f"dataset holds this capture: give each once (`wirediff check {base}` alone gates the "
        "other labels it holds)\n"
    )


@pytest.mark.parametrize("kind", ["interrupted", "proxy_shutdown"])
def test_a_candidate_our_own_stop_cut_whole_is_bad_input_not_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Its exchanges are judged by no verdict: with nothing else, the gate would pass it."""
    base = [chat_record(id="o1"), chat_record(id="o2", seq=1)]
    cut = [replay(b, id=f"c{i}", label="vllm") for i, b in enumerate(base)]
    for rec in cut:
        rec["response"], rec["error"] = None, {"kind": kind, "message": "stopped"}
    assert main(["check", write(tmp_path / "s.jsonl", base), write(tmp_path / "v.jsonl", cut)]) == 2
    assert capsys.readouterr().err == (
        "wirediff: error: vllm: every exchange paired with the baseline was cut by a stop (a "
        "replay's Ctrl-C, or the capture's), so none can be judged: resume the replay with the "
        "same command, or capture again\n"
    )
    one = [*cut[:1], replay(base[1], id="c9", label="vllm")]  # one answered: judged by it
    assert main(["check", str(tmp_path / "s.jsonl"), write(tmp_path / "w.jsonl", one)]) == 0
    assert "1 replayed exchange compared" in capsys.readouterr().out


def test_a_candidate_with_the_baseline_label_is_bad_input_not_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its answers would be shown as the baseline's and never gated: a pass on nothing."""
    base = openai_session()
    broken = [
        replay(b, id=f"x{i}", label="openai", change=no_usage_chunk) for i, b in enumerate(base)
    ]
    again = copy.deepcopy(base)  # the same app run again, its capture labelled alike
    for i, rec in enumerate(again):
        rec["id"], rec["session"] = f"r{i}", "run2"
    for candidate in (broken, again):
        path = write(tmp_path / "c.jsonl", candidate)
        assert main(["check", write(tmp_path / "s.jsonl", base), path]) == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"wirediff: error: {path}: its exchanges carry the baseline's label, openai; check "
            "compares labels: capture or replay the candidate with a label of its own (--label NAME)"
        )


def unreachable(rec: Record) -> None:
    rec["response"] = None
    rec["error"] = {"kind": "upstream_unreachable", "message": "connection refused"}


def test_a_candidate_that_got_no_answer_fails_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = openai_session()
    down = [
        replay(b, id=f"d{i}", label="down", change=unreachable if i < 2 else None)
        for i, b in enumerate(base)
    ]
    cand = write(tmp_path / "s.down.jsonl", down)
    assert main(["check", write(tmp_path / "s.jsonl", base), cand]) == 1
    captured = capsys.readouterr()
    assert "unexpected" not in captured.err and "FAIL  down" in captured.out


def test_a_family_neither_serves_fails_no_candidate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shadow of OpenAI's `/v1/embeddings` with an embeddings-less stand-in in front: a 501
    on both sides is no reason the candidate cannot replace the baseline."""
    text = "embeddings are not implemented here"
    embed = error_record(
        id="e0", status=501, path="/v1/embeddings", body={"error": {"message": text}}
    )
    base = [*openai_session(), embed]
    same = [replay(b, id=f"g{i}", label="ollama") for i, b in enumerate(base)]
    assert (
        main(["check", write(tmp_path / "s.jsonl", base), write(tmp_path / "o.jsonl", same)]) == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        "ollama can replace openai for chat.completions, responses and models; neither serves "
        "embeddings."
    )
    assert "ok    ollama       embeddings               unsupported" in out
    assert (
        "base  openai       embeddings               unsupported                 POST /v1/embeddings"
        in out
    )

    def soft(rec: Record) -> None:  # a 200 whose body is the error: clients break on it
        answer(rec)["status"] = 200
        retag(rec)

    apart = [*same[:-1], replay(embed, id="s0", label="ollama", change=soft)]
    assert main(["check", str(tmp_path / "s.jsonl"), write(tmp_path / "a.jsonl", apart)]) == 1
    assert "FAIL  ollama       embeddings               unsupported" in capsys.readouterr().out


# --- verdicts ----------------------------------------------------------------------------


def verdict_of(
    records: list[Record], label: str, family: str, transport: str = "http"
) -> tuple[str, list[str]]:
    v = analyze(records).verdicts
    row = v[(v["label"] == label) & (v["family"] == family) & (v["transport"] == transport)]
    assert len(row) == 1, v.to_string()
    return str(row["verdict"].iloc[0]), list(row["reasons"].iloc[0])


def test_a_family_nothing_of_which_is_here_is_unsupported() -> None:
    base = responses_record(id="o1")
    cand = replay(
        base,
        id="c1",
        label="lmstudio",
        change=lambda r: answer(r).update(
            {"body": {"error": "Unexpected endpoint or method. (POST /v1/responses)"}}
        ),
    )
    verdict, reasons = verdict_of([base, cand], "lmstudio", "responses")
    assert verdict == "unsupported"
    assert reasons == [
        "POST /v1/responses: not here (200 with an error body: Unexpected endpoint or method. "
        "(POST /v1/responses))"
    ]


def compact(id: str, label: str = "openai", replay_of: str | None = None) -> Record:
    answer = {
        "id": "resp_cmp_1",
        "object": "response.compaction",
        "created_at": 1764478800,
        "output": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA"}],
        "usage": {
            "input_tokens": 9,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 12,
        },
    }
    return make_record(
        id=id,
        label=label,
        replay_of=replay_of,
        seq=9,
        path="/v1/responses/compact",
        request_body={"model": "gpt-4o-mini", "input": "hi"},
        body=answer,
    )


def test_one_endpoint_missing_while_the_family_works_is_breaking() -> None:
    base = [responses_record(id="o1"), compact("o2")]
    works = replay(base[0], id="c1", label="vllm")
    missing = error_record(
        id="c2",
        label="vllm",
        replay_of="o2",
        path="/v1/responses/compact",
        status=404,
        body={"detail": "Not Found"},
    )
    verdict, reasons = verdict_of([*base, works, missing], "vllm", "responses")
    assert verdict == "breaking"
    assert reasons[0] == "POST /v1/responses/compact: not implemented (404: Not Found)"
    assert verdict_of([*base, works, missing], "openai", "responses")[0] == "compatible"


def test_a_route_the_baseline_does_not_serve_is_no_divergence() -> None:
    """The baseline answers compact 405: there is nothing to compare the candidates'
    answers with. Its own verdict says the route is not there; the candidates' 404 and 500
    are no divergences, and their family verdicts rest on what the baseline serves."""
    said = "Invalid method for URL (POST /v1/responses/compact)"
    refused = error_record(id="o2", path="/v1/responses/compact", status=405,
                           body=openai_error(said, "invalid_request_error", None, None))  # fmt: skip
    refused["request"]["body"] = {"model": "gpt-4o-mini", "input": "hi"}
    retag(refused)
    base = [responses_record(id="o1"), refused]
    records = [*base, replay(base[0], id="c1", label="vllm"),
               replay(base[0], id="d1", label="litellm"),
               error_record(id="c2", label="vllm", replay_of="o2", path="/v1/responses/compact",
                            status=404, body={"detail": "Not Found"}),
               error_record(id="d2", label="litellm", replay_of="o2",
                            path="/v1/responses/compact", status=500,
                            body={"error": {"message": "COMPACT responses is not supported"}})]  # fmt: skip
    found = analyze(records).divergences
    assert not set(found["candidate_id"]) & {"c2", "d2"}, found.to_string()
    for label in ("vllm", "litellm"):  # only their error bodies' own shapes (conformance)
        verdict, reasons = verdict_of(records, label, "responses")
        assert verdict == "compatible with deviations"
        assert not any("not implemented" in r or "became" in r for r in reasons)
    verdict, reasons = verdict_of(records, "openai", "responses")
    assert verdict == "compatible with deviations"
    assert reasons == [f"POST /v1/responses/compact: not here (405: {said})"]
    analysis = analyze(records)  # per endpoint, as the report's matrix shows it
    by_endpoint = verdict_frame(analysis.cells(("endpoint",)), analysis.roles(), by=("endpoint",))
    row = by_endpoint[
        (by_endpoint["label"] == "openai") & (by_endpoint["endpoint"] == "/v1/responses/compact")
    ]
    assert list(row["verdict"]) == ["unsupported"]


def websocket_refused(id: str, replay_of: str) -> Record:
    rec = error_record(
        id=id,
        label="vllm",
        replay_of=replay_of,
        path="/v1/responses",
        status=405,
        body={"detail": "Method Not Allowed"},
        method="GET",
    )
    rec["request"]["headers"].append(["upgrade", "websocket"])
    retag(rec)
    return rec


def test_a_refused_websocket_upgrade_is_its_own_transport() -> None:
    """POST /v1/responses works; the WebSocket mode of the same family does not."""
    base = responses_record(id="o1")
    upgrade = websocket_refused("o2", "")
    upgrade["label"], upgrade["replay_of"] = "openai", None
    answer(upgrade)["status"] = 101
    records = [base, upgrade, replay(base, id="c1", label="vllm"), websocket_refused("c2", "o2")]
    assert verdict_of(records, "vllm", "responses")[0] == "compatible"
    verdict, reasons = verdict_of(records, "vllm", "responses", "websocket")
    assert verdict == "unsupported"
    assert reasons == ["GET /v1/responses: not here (405: Method Not Allowed)"]


def test_the_baseline_is_judged_by_its_conformance() -> None:
    base = chat_record(id="o1")
    del body(base)["choices"][0]["message"]["refusal"]
    verdict, reasons = verdict_of(
        [base, replay(base, id="c1", label="x")], "openai", "chat.completions"
    )
    assert verdict == "compatible with deviations"
    assert reasons == ["`choices[].message.refusal`: 'refusal' is a required property"]


def test_a_servers_control_characters_reach_neither_the_terminal_nor_the_junit_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A candidate whose 500 carries ANSI colours, a NUL and a carriage return (servers
    that log-format their errors): the gate line shows them escaped and the JUnit file,
    which XML 1.0 would refuse them in, parses."""
    base = [chat_record(id="o1")]
    message = "\x1b[31mengine crashed\x1b[0m\x00\rOK\u202e"
    failed = replay(base[0], id="c1", label="vllm\x1b[2J")
    answer(failed).update(answer(error_record(status=500, body={"error": {"message": message}})))
    junit = tmp_path / "check.xml"
    candidate = write(tmp_path / "s.vllm.jsonl", [failed])
    assert main(["check", write(tmp_path / "s.jsonl", base), candidate, "--junit", str(junit)]) == 1
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x00\r\u202e") and "\\x1b[31mengine crashed" in out
    [suite] = list(JUnitXml.fromfile(str(junit)))
    [case] = list(suite)
    [failure] = [r for r in case.result if isinstance(r, Failure)]
    assert case.classname == "wirediff.vllm\\x1b[2J"
    assert "\\x1b[31mengine crashed\\x1b[0m\\x00\\x0dOK\\u202e" in failure.message


def test_junit_on_stdout_for_a_pipeline(
    captures: tuple[str, str, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--junit -`: stdout is the XML alone, as the file holds it, the lines go to stderr."""
    monkeypatch.chdir(tmp_path)
    base, good, bad = captures
    assert main(["check", base, good, bad, "--junit", "check.xml"]) == 1
    capsys.readouterr()
    assert main(["check", base, good, bad, "--junit", "-"]) == 1
    said = capsys.readouterr()
    assert said.out == (tmp_path / "check.xml").read_text(encoding="utf-8")
    assert said.err.rstrip().splitlines()[-1].startswith("not compatible: lmstudio")
    assert not (tmp_path / "-").exists()
    assert main(["check", base, good, "--junit", "-", "--json", "-"]) == 2
    assert "--json - and --junit -: only one" in capsys.readouterr().err


def test_json_on_stdout_for_a_pipeline(
    captures: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`wirediff check … --json - | jq`: stdout is the JSON alone, the lines go to stderr
    (as `report --json -` does)."""
    base, good, bad = captures
    assert main(["check", base, good, bad, "--json", "-"]) == 1
    said = capsys.readouterr()
    doc = json.loads(said.out)
    assert (doc["format"], doc["passed"]) == ("wirediff-check/1", False)
    assert said.err.rstrip().splitlines()[-1].startswith("not compatible: lmstudio")
    assert not Path("-").exists()


def test_one_exchange_is_counted_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [base] = openai_session()[:1]
    cand = write(tmp_path / "s.vllm.jsonl", [replay(base, id="c0", label="vllm")])
    assert main(["check", write(tmp_path / "s.jsonl", [base]), cand]) == 0
    assert "\n1 replayed exchange compared with 1 baseline exchange (openai);" in (
        capsys.readouterr().out
    )
