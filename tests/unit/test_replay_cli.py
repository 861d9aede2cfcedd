"""`wirediff replay` without network: the dry run, usage and input errors, the config file,
what the sender writes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, cast

import pytest

from tests.fixtures.records import bare_record
from tests.fixtures.replay_records import (
    FP,
    INNER,
    Fake,
    as_error,
    broken,
    engine,
    rec,
    session,
    two_hop,
    write_capture,
)
from wirediff._types import Record
from wirediff.cli.replay import main_replay
from wirediff.errors import PlanError
from wirediff.record.store import load_records
from wirediff.replay.config import Options
from wirediff.replay.plan import make_plan
from wirediff.replay.sender import TargetRun


def test_dry_run_prints_and_sends_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cap = write_capture(tmp_path / "s.jsonl", session())
    code = main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "--label", "lm",
                        "--model-map", "gpt-4o-mini=qwen", "--api-key-env", "NOPE_UNSET", "--dry-run"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "replay → lm (http://127.0.0.1:9/v1, key from $NOPE_UNSET (NOT SET)): 9 to send, 1 to skip"
        in out
    )
    assert "POST http://127.0.0.1:9/v1/responses model=qwen" in out
    assert "after previous_response_id←#0" in out and "--allow-unsafe" in out
    assert not (tmp_path / "s.lm.jsonl").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"started": "soon"}, "record a: `started` is not a number ('soon')"),
        ({"started": True}, "record a: `started` is not a number (True)"),
        ({"request": None}, "record a: no request object"),
        ({"id": None}, "a record has no id (session 's')"),
    ],
)
def test_records_that_cannot_be_planned(change: dict[str, Any], message: str) -> None:
    with pytest.raises(PlanError, match=re.escape(message)):
        make_plan([cast(Record, {**rec("a"), **change})])  # malformed on purpose


def test_dry_run_says_what_is_not_sent_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    redacted = rec("fp", "GET", f"/v1/models?key={FP}&limit=2",
                   headers=[["x-portkey-api-key", FP], ["x-team", "qa"]])  # fmt: skip
    bad = broken(lambda q: q.update(b64="AAE"))
    hops = two_hop({}, {})
    cap = write_capture(tmp_path / "s.jsonl", [redacted, bad, *hops])
    code = main_replay([str(cap), "--to", "http://127.0.0.1:9/v1?api-version=1", "--label",
                        "lm", "--dry-run", "--allow-unsafe"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0
    assert "GET http://127.0.0.1:9/v1/models?limit=2&api-version=1  [fp]" in out
    assert (
        "not sent (the capture holds only a fingerprint): query parameter key, "
        "header x-portkey-api-key"
    ) in out
    assert "skip: the captured request body is not valid base64" in out
    assert "[inner]" not in out and "[outer]" in out
    assert err == (
        f"wirediff: note: 1 exchange on {INNER} is an inner hop of a two-hop capture (the same "
        "call seen again behind a gateway), not replayed; `--only listener=…` chooses listeners\n"
    )
    capsys.readouterr()
    main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "--dry-run", "--only", "listener=*"])
    out, err = capsys.readouterr()
    assert "[inner]" in out and err == ""


def test_an_output_two_targets_share_is_read_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its unfinished last line is told once, and each target resumes from its own records."""
    recs = session()
    cap = write_capture(tmp_path / "s.jsonl", recs)
    first, _ = engine(recs, Fake())
    out = tmp_path / "out.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in first) + '{"format": "wir')
    config = tmp_path / "targets.yaml"
    config.write_text(
        "targets: [{label: tgt, url: 'http://127.0.0.1:9/v1'},"
        " {label: other, url: 'http://127.0.0.1:9/v1'}]\n"
    )
    assert main_replay([str(cap), "--config", str(config), "-o", str(out), "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert "replay → tgt (http://127.0.0.1:9/v1, no key): 0 to send, 0 to skip, 10 already" in shown
    assert (
        "replay → other (http://127.0.0.1:9/v1, no key): 9 to send, 1 to skip, 0 already" in shown
    )
    said = [r.getMessage() for r in caplog.records if "unfinished" in r.getMessage()]
    assert said == [f"{out}:{len(first) + 1}: an unfinished last line (a write in progress, "
                    "or cut by a crash): skipped"]  # fmt: skip


def test_dry_run_counts_what_is_tried_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recs = session()
    cap = write_capture(tmp_path / "s.jsonl", recs)
    first, _ = engine(recs, Fake())
    as_error("timeout")(next(r for r in first if r["replay_of"] == "r1"))
    write_capture(tmp_path / "s.tgt.jsonl", first)
    assert main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "--label", "tgt",
                        "--dry-run"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "1 to send, 0 to skip (1 tried before), 9 already replayed" in out
    assert "[r1]" in out and "[r2]" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--to", "http://h/v1", "--api-key-env", "WIREDIFF_TEST_UNSET"],
            "WIREDIFF_TEST_UNSET is not set",
        ),
        ([], "give --to URL or --config FILE"),
        (["--to", "ftp://h"], "not an http(s) URL"),
        (["--to", "http://h/v1", "--only", "colour=red"], "--only"),
        (["--to", "http://h/v1", "--only", "stream=maybe"], "--only: stream is true or false"),
        (["--to", "http://h/v1", "--label", "a", "--label", "b"], "--label: given twice"),
        (["--to", "http://h/v1", "--header", "Authorization=Bearer x"], "--api-key-env"),
        (["--to", "http://h/v1", "--rate", "fast"], "--rate"),
        (["--to", "http://h/v1", "--concurrency", "0"], "--concurrency"),
        (["--label", "x"], "--label names the --to target"),
        (["--to", "http://h/v1", "--timeout", "nan"], "--timeout"),
        (["--to", "http://h/v1", "--timeout", "inf"], "--timeout"),
        (["--to", "http://h/v1", "--timeout", "0"], "--timeout"),
        (["--to", "http://h/v1", "--timeout", "-5"], "--timeout"),
        (["--to", "http://h/v1", "--rate", "nan/s"], "--rate"),
        (["--to", "http://h/v1", "--rate", "inf"], "--rate"),
        (["--to", "http://h/v1", "--label", "LABEL"], "target 'LABEL': the label of the exchanges"),
        (["--to", "http:///v1"], "--to http:///v1: no host in the URL"),
        (["--to", "http://[::1:8/v1"], "--to http://…: not a URL (Invalid IPv6 URL)"),
        (["--to", "http://u:Sup3rS3cretPw@:80/v1"], "--to http://sha256:"),
        (["--to", "http://h/v1", "--label", "."], "--label '.': a plain name, not a path"),
        (["--to", "http://h/v1", "--label", "2"], "--label '2': a name, not a number"),
        (["--to", "http://h/v1", "--api-key-env", ""], "--api-key-env: empty; name the"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    cap = write_capture(tmp_path / "s.jsonl", session()[:1])
    label = str(session()[0]["label"])
    assert main_replay([str(cap), *(a.replace("LABEL", label) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("wirediff: error: ")
    assert message.replace("LABEL", label) in err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read capture"),
        ('{"format": "wirediff/9", "id": "a"}\n', "not a wirediff/1 record (format='wirediff/9')"),
        ("garbage\nmore garbage\n", "not a wirediff/1 capture"),
        (json.dumps({**bare_record(), "started": "soon"}) + "\n",
         "c.jsonl:1: malformed wirediff/1 record (started must be a number, not string)"),
    ],
)  # fmt: skip
def test_bad_captures_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    p = tmp_path / "c.jsonl"
    if content is not None:
        p.write_text(content)
    assert main_replay([str(p), "--to", "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_config_file_targets_and_precedence(tmp_path: Path) -> None:
    from wirediff.cli.replay import add_arguments
    from wirediff.replay.config import options_from_args

    cfg = tmp_path / "wirediff.yaml"
    cfg.write_text(
        "defaults: {concurrency: 3, rate: 10/s, only: [family=responses], api_key_env: DEF,\n"
        "           model_map: {a: b, c: d}, headers: {x-one: '1', x-two: '2'}}\n"
        "ignore: [usage.*]\n"  # report's, in the same file
        "targets:\n"
        "  - {label: one, url: 'http://h1/v1', model_map: {a: z}, headers: {x-two: ''}}\n"
        "  - {url: 'http://h2:81/v1', api_key_env: TWO}\n"
    )
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["c.jsonl", "--config", str(cfg), "--model-map", "c=e", "--concurrency",
                         "7", "--to", "http://h3/v1", "--label", "three"])  # fmt: skip
    opts: Options = options_from_args(args)
    assert [t.label for t in opts.targets] == ["one", "h2:81", "three"]
    one, two, three = opts.targets
    assert dict(one.model_map) == {"a": "z", "c": "e"} and dict(two.model_map) == {
        "a": "b",
        "c": "e",
    }
    assert dict(one.headers) == {"x-one": "1", "x-two": None}
    assert (one.api_key_env, two.api_key_env, three.api_key_env) == ("DEF", "TWO", "DEF")
    assert opts.concurrency == 7 and opts.rate == 10.0 and len(opts.filters) == 1
    # a `*` maps every model: a later source's replaces the earlier ones' exact entries
    star = tmp_path / "star.yaml"
    star.write_text(
        "defaults: {model_map: {gpt-4o-mini: from-defaults}, headers: {x-version: 2}}\n"
        "targets: [{label: ol, url: 'http://h/v1', model_map: {'*': llama3.2}}]\n"
    )
    [ol] = options_from_args(p.parse_args(["c.jsonl", "--config", str(star)])).targets
    assert dict(ol.model_map) == {"*": "llama3.2"} and dict(ol.headers) == {"x-version": "2"}
    bad = tmp_path / "bad.yaml"
    for text, msg in [
        ("targets: [{label: x}]", "targets[0].url: Field required"),
        ("targets: [{url: 'http://h/v1', colour: red}]", "targets[0].colour: Extra inputs"),
        ("tragets: []", "tragets: Extra inputs are not permitted"),
        # a quoted "false" is no boolean: read as true, it would send what changes state
        ("defaults: {allow_unsafe: 'false'}", "defaults.allow_unsafe: Input should be a valid"),
        ("defaults: {api_key_env: 5}", "defaults.api_key_env: Input should be a valid string"),
        # a blank variable would read as no key, every request sent without one
        (
            "defaults: {api_key_env: ''}\ntargets: [{url: 'http://h/v1'}]",
            "bad.yaml: defaults.api_key_env: empty; name the environment variable",
        ),
        (
            "targets: [{url: 'http://h/v1', api_key_env: ' '}]",
            "bad.yaml: targets[0].api_key_env: empty; name the environment variable",
        ),
        ("defaults: {only: 5}", "defaults.only: not text or a list of text (5)"),
        ("defaults: {concurrency: -3}", "defaults.concurrency: Input should be greater"),
        ("defaults: {timeout: .nan}", "defaults.timeout: Input should be a finite number"),
        (
            "targets: [{url: 'http://h/v1', headers: {x-a: [1, 2]}}]",
            "targets[0].headers.x-a: not text or a number ([1, 2])",
        ),
        (
            "targets: [{url: 'http://h/v1', model_map: {1: x}}]",
            "targets[0].model_map[1]: Input should be a valid string",
        ),
        ("targets: [{url: 'http://h/v1', label: 0}]", "targets[0].label '0': a name, not a number"),
        # an empty model would be sent as `"model": ""`, every request refused
        (
            "targets: [{url: 'http://h/v1', model_map: {gpt-4o-mini: }}]",
            "targets[0].model_map: 'gpt-4o-mini' maps to no model; name one, or leave the key out",
        ),
        (
            "defaults: {model_map: {'*': ''}}\ntargets: [{url: 'http://h/v1'}]",
            "defaults.model_map: '*' maps to no model; name one, or leave the key out",
        ),
        ("defaults: {}", "bad.yaml lists no targets; give --to URL"),
        (
            "targets: [{url: 'http://a/v1', label: x}, {url: 'http://b/v1', label: x}]",
            "share the label",
        ),
        ("targets: [\n", "not valid YAML"),
    ]:
        bad.write_text(text)
        with pytest.raises(Exception, match=re.escape(msg)):
            options_from_args(p.parse_args(["c.jsonl", "--config", str(bad)]))


def test_records_written_by_the_engine_load_back(tmp_path: Path) -> None:
    out, _ = engine(session(), Fake())
    p = write_capture(tmp_path / "s.tgt.jsonl", out)
    assert len(load_records([p])) == len(out)


def test_unwritable_output_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cap = write_capture(tmp_path / "s.jsonl", session()[:1])
    blocker = tmp_path / "file"
    blocker.write_text("")
    out = blocker / "sub" / "out.jsonl"  # a directory that cannot be made: a file is in the way
    assert main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("wirediff: error: ")


def test_a_failure_while_recording_is_raised_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: TargetRun, node: Any, got: Any) -> Record:
        raise RuntimeError("builder bug")

    monkeypatch.setattr(TargetRun, "finalize", broken)
    with pytest.raises(RuntimeError, match="builder bug"):
        engine([rec("a", body={"model": "m"})], Fake())


def test_a_piped_capture_needs_an_output_and_stdout_is_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its replay would go beside it, in /dev; and a replay reads its output back to resume."""
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main_replay([str(fifo), "--to", "http://127.0.0.1:9/v1"]) == 2
    assert capsys.readouterr().err == (
        f"wirediff: error: {fifo}: a pipe has no folder to write its replay beside; give -o\n"
    )
    for stdin in ("-", "/dev/stdin"):  # stdin redirected from a file too: it is in /dev
        assert main_replay([stdin, "--to", "http://127.0.0.1:9/v1"]) == 2
        said = capsys.readouterr().err
        assert (
            said
            == f"wirediff: error: {stdin}: a pipe has no folder to write its replay beside; give -o\n"
        )
    cap = write_capture(tmp_path / "s.jsonl", session()[:1])
    assert main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "-o", "-"]) == 2
    assert "-o -: a replay appends to a file it reads back to resume" in capsys.readouterr().err
    assert not (tmp_path / "-").exists()


def test_a_stream_filter_may_be_a_pattern(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cap = write_capture(tmp_path / "s.jsonl", session()[:1])
    argv = [str(cap), "--to", "http://127.0.0.1:9/v1", "--only", "stream=*", "--dry-run"]
    assert main_replay(argv) == 0
    assert "1 to send" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("../../ESCAPED", "a path"),
        ("/tmp/ABS", "a path"),
        ("..", "a path"),
        ("a\nb", "a name with control characters"),
        ("a\0b", "a name with control characters"),
        ("a\u202eb", "a name with control characters"),
    ],
)
@pytest.mark.parametrize("dry", [True, False], ids=["dry run", "sent"])
def test_a_records_session_never_leads_the_output_out_of_its_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, said: str, dry: bool
) -> None:
    """The output is named by each record's session: one another tool wrote, `../x`, is refused
    before anything is sent or written, never followed."""
    recs = [cast(Record, dict(r, session=name)) for r in session()[:1]]
    (tmp_path / "deep").mkdir()
    cap = write_capture(tmp_path / "deep" / "t.jsonl", recs)
    args = [str(cap), "--to", "http://127.0.0.1:9/v1", "--label", "lm", *(["--dry-run"] * dry)]
    assert main_replay(args) == 2
    err = capsys.readouterr().err
    assert (
        f"exchange {recs[0]['id']!r}: its session {name!r} is {said}, not a file name beside the "
        "capture; name the output with -o OUT"
    ) in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["deep", "t.jsonl"]


@pytest.mark.parametrize("name", ["127.0.0.1", ".hidden", "s.1"])
def test_a_session_that_names_a_file_is_taken_however_a_capture_would_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """An imported HAR's session is its file's stem (`127.0.0.1.har`): the output beside the
    capture is `127.0.0.1.lm.jsonl`, though `capture --session 127.0.0.1` would be refused."""
    recs = [cast(Record, dict(r, session=name)) for r in session()[:1]]
    cap = write_capture(tmp_path / "t.jsonl", recs)
    assert (
        main_replay([str(cap), "--to", "http://127.0.0.1:9/v1", "--label", "lm", "--dry-run"]) == 0
    )
    assert capsys.readouterr().err == ""  # the dry run names the outputs, as above
