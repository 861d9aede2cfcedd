"""Bad input across every command, through the real command line: exit 2 and one line on
stderr, never a traceback, never a success (`nothing to diagnose`, `0 exchanges`, exit 0);
skipped lines are one warning each; each command's exit codes are in its `--help` and in
the README."""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.records import error_record, openai_session, replay
from wirediff.cli import build_parser, main
from wirediff.cli.runner import terminal

README = Path(__file__).resolve().parents[2] / "README.md"
NOWHERE = "http://127.0.0.1:9/v1"
"""A target never reached: `--dry-run` sends nothing."""


def _write(name: str, content: bytes) -> Callable[[Path], Path]:
    def make(d: Path) -> Path:
        p = d / name
        p.write_bytes(content)
        return p

    return make


def _not_utf8(p: Path) -> Path:
    """A whole capture, its second line a whole record with one byte UTF-8 refuses."""
    lines = [json.dumps(r).encode() for r in openai_session()]
    lines[1] = lines[1].replace(b'"gpt-4o-mini"', b'"gpt-4o-mini\xff"', 1)
    p.write_bytes(b"\n".join(lines) + b"\n")
    return p


def _directory(d: Path) -> Path:
    (d / "captures").mkdir()
    return d / "captures"


BAD_INPUTS: dict[str, Callable[[Path], Path]] = {
    "empty": _write("empty.jsonl", b""),
    "blank lines": _write("blank.jsonl", b"\n  \n\t\n"),
    "not JSON": _write("notes.jsonl", b"hello world\nsecond line\n"),
    "binary": _write("blob.jsonl", bytes(range(256)) * 4),
    "{} as HAR": _write("empty.har", b"{}"),
    "a HAR without entries": _write("none.har", b'{"log": {"version": "1.2", "entries": []}}'),
    "a HAR entry without a request": _write("odd.har", b'{"log": {"entries": [{}]}}'),
    "JSON, another format": _write("other.jsonl", b'{"format": "other/1", "id": "x"}\n'),
    "a JSON array": _write("array.jsonl", b"[1, 2]\n"),
    "one unfinished line": _write("cut.jsonl", b'{"format": "wirediff/1", "id": "a", "req'),
    "a record with one byte not UTF-8": lambda d: _not_utf8(d / "odd.jsonl"),
    "an HTML report": _write("report.html", b"<!doctype html>\n<html lang=en>\n"),
    "a gzipped capture": _write("s.jsonl.gz", gzip.compress(b'{"format": "wirediff/1"}\n')),
    "a UTF-16 capture": _write("u16.jsonl", '{"format": "wirediff/1"}\n'.encode("utf-16")),
    "a directory": _directory,
    "a missing file": lambda d: d / "missing.jsonl",
}

Argv = Callable[[Path, Path, Path], list[str]]
"""`(bad input, a good capture, a directory for outputs) -> argv`."""
COMMANDS: dict[str, Argv] = {
    "diagnose": lambda bad, good, out: ["diagnose", str(bad)],
    "diagnose --fail": lambda bad, good, out: ["diagnose", "--fail", str(bad), "--json"],
    "import": lambda bad, good, out: ["import", str(bad), "-o", str(out / "imported.jsonl")],
    "report": lambda bad, good, out: ["report", str(bad), "-o", str(out / "r.html")],
    "report, the second capture": lambda bad, good, out: [
        "report",
        str(good),
        str(bad),
        "-o",
        str(out / "r.html"),
    ],
    "check, the baseline": lambda bad, good, out: ["check", str(bad), str(good)],
    "check, a candidate": lambda bad, good, out: ["check", str(good), str(bad)],
    "replay": lambda bad, good, out: ["replay", str(bad), "--to", NOWHERE, "--dry-run"],
    "export": lambda bad, good, out: ["export", str(bad), "--parquet", str(out / "dataset")],
    "export, the second capture": lambda bad, good, out: [
        "export",
        str(good),
        str(bad),
        "--parquet",
        str(out / "dataset"),
    ],
}

BAD_USAGE: dict[str, list[str]] = {
    "no command": [],
    "an unknown command": ["frobnicate"],
    "capture without --to": ["capture"],
    "capture --to not a URL": ["capture", "--to", "api.openai.com"],
    "capture --port not a number": ["capture", "--to", NOWHERE, "--port", "eighty"],
    "capture --session a path": ["capture", "--to", NOWHERE, "--session", "../x"],
    "capture --session a part's name": ["capture", "--to", NOWHERE, "--session", "s.1"],
    "capture --port past 65535": ["capture", "--to", NOWHERE, "--port", "99999"],
    "capture --port negative": ["capture", "--to", NOWHERE, "--port=-1"],
    "replay --config not UTF-8": ["replay", "GOOD", "--to", NOWHERE, "--config", "BINARY"],
    "replay --config missing": ["replay", "GOOD", "--to", NOWHERE, "--config", "nosuch.yaml"],
    "replay --header a line break": ["replay", "GOOD", "--to", NOWHERE, "--header", "x=a\nb: c"],
    "replay --header a space in the name": ["replay", "GOOD", "--to", NOWHERE, "--header", "a b=c"],
    "report --ignore-config not YAML": ["report", "GOOD", "--ignore-config", "BADYAML"],
    "report --ignore-config not UTF-8": ["report", "GOOD", "--ignore-config", "BINARY"],
    "replay --header not ASCII": ["replay", "GOOD", "--to", NOWHERE, "--header", "x-team=\u00e9"],
    "replay without a capture": ["replay", "--to", NOWHERE],
    "replay --to a port past 65535": ["replay", "GOOD", "--to", "http://127.0.0.1:99999/v1"],
    "replay --to a port past 65535, --dry-run": [
        "replay",
        "GOOD",
        "--to",
        "http://127.0.0.1:99999/v1",
        "--label",
        "x",
        "--dry-run",
    ],
    "capture --to a port past 65535": ["capture", "--to", "http://127.0.0.1:99999/v1"],
    "probe a port past 65535": ["probe", "http://127.0.0.1:99999/v1"],
    "report without a capture": ["report"],
    "diagnose an unknown option": ["diagnose", "--fial", "x.jsonl"],
    "check without a candidate": ["check", "base.jsonl"],
    "check --fail-on an unknown kind": ["check", "GOOD", "GOOD", "--fail-on", "nonsense"],
    "import without a file": ["import"],
    "export without --parquet": ["export", "GOOD"],
    "export over an existing file": ["export", "GOOD", "--parquet", "GOOD"],
    "report --engine unknown": ["report", "GOOD", "--engine", "spark"],
    "demo an unknown option": ["demo", "--fast"],
    "stand-in an unknown one": ["stand-in", "nope"],
    "stand-in --port past 65535": ["stand-in", "openai", "--port", "99999"],
    "stand-in an unset key variable": [
        "stand-in",
        "openai",
        "--api-key-env",
        "WIREDIFF_TEST_UNSET_KEY_VAR",
    ],
    "addon-path an extra argument": ["addon-path", "extra"],
    "addon-path two addons": ["addon-path", "shadow", "capture"],
    "probe without a URL": ["probe"],
    "probe a URL that is not http": ["probe", "ftp://127.0.0.1/v1"],
    "probe an unknown feature": ["probe", "http://127.0.0.1:9/v1", "--only", "chat.nope"],
    "probe an unset key variable": [
        "probe",
        "http://127.0.0.1:9/v1",
        "--api-key-env",
        "WIREDIFF_TEST_UNSET_KEY_VAR",
    ],
    "probe a timeout of 0": ["probe", "http://127.0.0.1:9/v1", "--timeout", "0"],
    "report --baseline without a label": ["report", "GOOD", "--baseline"],
    "report --baseline a label no capture has": ["report", "GOOD", "--baseline", "nosuch"],
    "check --baseline a label the baseline lacks": ["check", "GOOD", "GOOD", "--baseline", "x"],
}
NO_CAPTURE_INPUT = {"capture", "demo", "addon-path", "probe", "stand-in"}
"""Commands that read no capture: bad usage is all they can be given."""


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


@pytest.fixture
def good(tmp_path: Path) -> Path:
    p = tmp_path / "good.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in openai_session()))
    return p


def one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("wirediff: error: "), err
    assert "unexpected" not in err, f"a foreseen error, not the catch-all: {err}"
    assert not re.search(r"[A-Z]\w*(Error|Exception)\b", err), f"words, not an exception: {err}"
    return err


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("bad_input", BAD_INPUTS)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    good: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    bad_input: str,
) -> None:
    bad = BAD_INPUTS[bad_input](tmp_path)
    out = tmp_path / "out"
    code = main(COMMANDS[command](bad, good, out))
    stdout, err = capsys.readouterr()
    assert code == 2, f"exit {code}: {stdout}{err}"
    assert str(bad) in one_error_line(err)
    assert stdout == "", "nothing reads as a result"
    assert not out.exists(), "nothing written"


def test_a_gzipped_capture_is_named_with_the_pipe_that_reads_it(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    packed = tmp_path / "s.jsonl.gz"
    packed.write_bytes(gzip.compress(good.read_bytes()))
    assert main(["report", str(packed), "-o", str(tmp_path / "r.html")]) == 2
    assert one_error_line(capsys.readouterr().err) == (
        f"wirediff: error: {packed}: gzip-compressed; give it decompressed, through a pipe: "
        f"zcat {packed} | wirediff COMMAND -\n"
    )


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_a_utf16_capture_is_named_with_how_to_convert_it(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str], encoding: str
) -> None:
    """What PowerShell's `>` writes: read as UTF-8 it would be torn lines and a few records."""
    u16 = tmp_path / "u16.jsonl"
    u16.write_bytes(good.read_text(encoding="utf-8").encode(encoding))
    assert main(["check", str(good), str(u16)]) == 2
    assert one_error_line(capsys.readouterr().err) == (
        f"wirediff: error: {u16}: UTF-16 text (what PowerShell's `>` writes), where a "
        f"wirediff/1 capture is UTF-8; convert it: iconv -f UTF-16 -t UTF-8 {u16} > capture.jsonl\n"
    )


@pytest.mark.parametrize(
    "text", [b'{"log": {"entries": []}}\n', b'{\n  "log": {\n    "entries": []']
)
def test_a_har_archive_named_as_a_capture_is_named_a_har(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: bytes
) -> None:
    """Whatever its name, and pretty-printed as browsers save them."""
    har = tmp_path / "session.jsonl"
    har.write_bytes(text)
    assert main(["report", str(har), "-o", str(tmp_path / "r.html")]) == 2
    assert one_error_line(capsys.readouterr().err) == (
        f"wirediff: error: {har}: a HAR archive, not a wirediff/1 capture; `wirediff import` "
        "converts it\n"
    )


def test_a_capture_given_to_import_is_one_line_and_exit_2(
    tmp_path: Path, good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(good)]) == 2
    assert "already a wirediff/1 capture" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("usage", BAD_USAGE)
def test_bad_usage_is_one_line_and_exit_2(
    good: Path, capsys: pytest.CaptureFixture[str], usage: str
) -> None:
    binary = good.with_name("binary.yaml")
    binary.write_bytes(b"\xff\xfe\x00 not text")
    bad_yaml = good.with_name("bad.yaml")
    bad_yaml.write_text("ignore: [unclosed\n")
    given = {"GOOD": str(good), "BINARY": str(binary), "BADYAML": str(bad_yaml)}
    argv = [given.get(a, a) for a in BAD_USAGE[usage]]
    assert main(argv) == 2
    stdout, err = capsys.readouterr()
    assert stdout == ""
    one_error_line(err)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["probe", NOWHERE, "--timeout", "nan"], "argument --timeout: seconds, more than 0: 'nan'"),
        (["probe", NOWHERE, "--timeout", "inf"], "argument --timeout: seconds, more than 0: 'inf'"),
        (["probe", NOWHERE, "--only", ","], "--only: no feature named; leave --only out"),
        (["replay", "GOOD", "--to", NOWHERE, "--to", NOWHERE, "--dry-run"], "--to: given twice"),
        (["stand-in", "openai", "--delay", "nan"], "argument --delay: seconds, at least 0: 'nan'"),
        (["stand-in", "openai", "--delay", "-1"], "argument --delay: seconds, at least 0: '-1'"),
        (["stand-in", "openai", "--delay", "1e308"], "argument --delay: seconds, at most 9,223,372,036: '1e308'"),
        (["replay", "GOOD", "--to", NOWHERE, "--timeout", "1e10"], "argument --timeout: seconds, at most"),
        (["stand-in", "openai", "--port", "70000"], "--port 70000: a port from 0"),
        (["stand-in", "openai", "--redirect", "notaurl"], "--redirect 'notaurl': an http://"),
        (["report", "", "-o", "r.html"], "'': empty; name a capture file"),
        (["replay", " ", "--to", NOWHERE], "' ': empty; name a capture file"),
        (["probe", NOWHERE, "--model", ""], "--model: empty; name a model"),
        (["demo", "--out", "GOOD"], "argument --out: a file, not a folder: 'GOOD'"),
        (["demo", "--out", " "], "argument --out: empty: name a folder"),
        (["probe", NOWHERE, "--keep", "GOOD"], "argument --keep: a file, not a folder: 'GOOD'"),
        (["check", "GOOD", "--fail-on", ""], "--fail-on: unknown kind (none)"),
        (["probe", NOWHERE, "--api-key-env", ""], "--api-key-env: empty; name the environment"),
    ],
    ids=[
        *("probe --timeout nan", "probe --timeout inf", "probe --only naming none"),
        *("replay --to twice", "stand-in --delay nan", "stand-in --delay -1"),
        *("stand-in --delay past what a thread waits", "replay --timeout past it"),
        *("stand-in --port", "stand-in --redirect no URL"),
        *("report an empty name", "replay a blank name"),
        *("probe --model empty", "demo --out a file", "demo --out empty"),
        *("probe --keep a file", "check --fail-on empty", "probe --api-key-env empty"),
    ],
)  # fmt: skip
def test_a_value_that_would_be_taken_otherwise_is_named(
    good: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """Not sent on with a NaN deadline, every feature, or the last `--to` alone."""
    assert main([str(good) if a == "GOOD" else a for a in argv]) == 2
    said = said.replace("'GOOD'", repr(str(good)))
    assert f"wirediff: error: {said}" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    "argv",
    [["probe", NOWHERE], ["replay", "GOOD", "--to", NOWHERE], ["stand-in", "openai"]],
    ids=["probe", "replay", "stand-in"],
)
def test_a_key_variable_set_empty_is_told_as_empty(
    good: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    monkeypatch.setenv("WIREDIFF_EMPTY_KEY", "")
    argv = [str(good) if a == "GOOD" else a for a in argv]
    assert main([*argv, "--api-key-env", "WIREDIFF_EMPTY_KEY"]) == 2
    assert "environment variable WIREDIFF_EMPTY_KEY is empty" in one_error_line(
        capsys.readouterr().err
    )


def test_every_command_is_in_the_tables() -> None:
    commands = set(subcommands())
    with_input = {argv(Path("b"), Path("g"), Path("o"))[0] for argv in COMMANDS.values()}
    assert commands == with_input | NO_CAPTURE_INPUT, "add the command's rows to the tables"
    misused = {argv[0] for argv in BAD_USAGE.values() if argv and argv[0] in commands}
    assert misused == commands


READ, OTHER = "a capture this command reads", "OTHER: a wirediff/1 capture; name another file"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["report", "GOOD", "-o", "GOOD"], READ),
        (["report", "GOOD", "-o", "r.html", "--json", "GOOD"], READ),
        (["report", "GOOD", "-o", "r.html", "--csv", "./good.jsonl"], READ),
        (["report", "GOOD", "-o", "PART"], READ),
        (["check", "GOOD", "GOOD", "--junit", "GOOD"], READ),
        (["check", "GOOD", "GOOD", "--json", "GOOD"], READ),
        (["replay", "GOOD", "--to", NOWHERE, "-o", "GOOD", "--dry-run"], READ),
        (["report", "GOOD", "-o", "OTHER"], OTHER),
        (["report", "GOOD", "-o", "r.html", "--json", "OTHER"], OTHER),
        (["report", "GOOD", "-o", "r.html", "--findings", "OTHER"], OTHER),
        (["report", "GOOD", "-o", "r.html", "--csv", "OTHER"], OTHER),
        (["check", "GOOD", "GOOD", "--junit", "OTHER"], OTHER),
    ],
    ids=[
        *("-o", "--json", "--csv", "-o a part", "check --junit", "check --json", "replay -o"),
        *("another: -o", "another: --json", "another: --findings", "another: --csv"),
        "another: check --junit",
    ],
)
def test_an_output_that_is_a_capture_is_refused_before_anything_is_written(
    good: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    said: str,
) -> None:
    """`wirediff report s.jsonl -o s.jsonl` would write the report over the capture; so would
    `-o b.jsonl`, b a capture forgotten among the inputs."""
    monkeypatch.chdir(good.parent)
    part, other = good.with_name("good.1.jsonl"), good.with_name("other.jsonl")
    for p in (part, other):
        p.write_bytes(good.read_bytes())
    held = good.read_bytes()
    given = {"GOOD": str(good), "PART": str(part), "OTHER": str(other)}
    assert main([given.get(a, a) for a in argv]) == 2
    assert said.replace("OTHER", str(other)) in one_error_line(capsys.readouterr().err)
    assert all(p.read_bytes() == held for p in (good, part, other))
    assert not (good.parent / "r.html").exists() and not (good.parent / "report.html").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["report", "GOOD", "-o", "NEXT"], "NEXT: named as a part of a session this command reads"),
        (["report", "GOOD", "-o", "r.json", "--json", "r.json"], "-o and --json both name r.json"),
        (["report", "GOOD", "--json", "r.json", "--findings", "./r.json"], "--json and --findings"),
        (["check", "GOOD", "--json", "c.xml", "--junit", "c.xml"], "--json and --junit both name"),
        (["probe", NOWHERE, "-o", "p.html", "--junit", "p.html"], "-o and --junit both name"),
        (["report", "DATA", "-o", "DATA/wirediff-dataset.json"], "inside the wirediff dataset"),
        (["report", "GOOD", "-o", "r.html", "--csv", "DATA/x.csv"], "inside the wirediff dataset"),
        (["export", "GOOD", "--parquet", "DATA/exchanges/more"], "inside the wirediff dataset"),
        (["export", "GOOD", "--parquet", "DATA"], "--parquet DATA: a wirediff dataset already"),
        (["report", "GOOD", "--json", "DATA"], "--json DATA: a directory; name a file"),
        (["probe", NOWHERE, "-o", "DATA"], "-o DATA: a directory; name a file"),
        (["replay", "GOOD", "--to", NOWHERE, "-o", "DATA"], "-o DATA: a directory; name a file"),
        (["check", "GOOD", "--junit", "new/"], "--junit new/: a directory; name a file"),
        (["report", "GOOD", "-o", "new/"], "-o new/: a directory; name a file"),
        (["report", "GOOD", "--json", "new/."], "--json new/.: a directory; name a file"),
        (["replay", "DATA", "--to", NOWHERE], "DATA: a Parquet dataset; this command reads the JSON"),
        (["replay", "file://DATA", "--to", NOWHERE], "file://DATA: a URL; this command reads capture"),
        (["replay", "GOOD", "--to", NOWHERE, "-o", "DATA/../notes.txt", "--label", "x"],
         "notes.txt: not a wirediff/1 capture (no line is a JSON record); the replay would append"),
    ],
    ids=[
        "the session's next part",
        *("two outputs: report", "two outputs: one written twice", "check", "probe"),
        *("the dataset's mark", "a new file in a dataset", "export into a dataset"),
        "export over a dataset",
        *("a directory: report", "probe, before probing", "replay"),
        *("a directory to be: check", "report", "report --json"),
        *("replay a dataset", "replay a URL", "replay -o a file that is no capture"),
    ],
)  # fmt: skip
def test_an_output_that_would_lose_something_else_is_refused(
    good: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    said: str,
) -> None:
    """A file read as the session's next part, a dataset's own files, and one file named by
    two outputs, whose second would replace the first: refused, nothing written."""
    data = tmp_path / "data"
    assert main(["export", str(good), "--parquet", str(data)]) == 0
    (tmp_path / "notes.txt").write_text("<html>\n")
    monkeypatch.chdir(good.parent)
    before = sorted(p for p in tmp_path.rglob("*"))
    mark = (data / "wirediff-dataset.json").read_bytes()
    capsys.readouterr()
    given = {"GOOD": str(good), "NEXT": str(good.with_name("good.2.jsonl"))}
    argv = [given.get(a, a.replace("DATA", str(data))) for a in argv]
    assert main(argv) == 2
    said = said.replace("NEXT", given["NEXT"]).replace("DATA", str(data))
    assert said in one_error_line(capsys.readouterr().err)
    assert sorted(p for p in tmp_path.rglob("*")) == before
    assert (data / "wirediff-dataset.json").read_bytes() == mark
    assert (tmp_path / "notes.txt").read_text() == "<html>\n"


def test_an_empty_capture_name_is_refused_in_a_dataset_folder_too(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Path("")` is `.`: in a dataset's folder, that dataset would be read for nothing named."""
    data = tmp_path / "data"
    assert main(["export", str(good), "--parquet", str(data)]) == 0
    monkeypatch.chdir(data)
    capsys.readouterr()
    assert main(["report", "", "-o", str(tmp_path / "r.html")]) == 2
    assert "'': empty; name a capture file" in one_error_line(capsys.readouterr().err)


def test_an_output_that_cannot_be_written_stops_the_command_before_any_other_is(
    good: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the report written, then an error for the summary: all of them, or none."""
    monkeypatch.chdir(good.parent)
    blocked = good / "s.json"  # a file where its folder would be
    assert main(["report", str(good), "-o", "r.html", "--json", str(blocked)]) == 2
    said = one_error_line(capsys.readouterr().err)
    assert f"--json {blocked}: cannot be written (Not a directory)" in said
    assert sorted(p.name for p in good.parent.iterdir()) == ["good.jsonl"]


@pytest.mark.parametrize(
    "wrap",
    [
        lambda data: b"\xef\xbb\xbf\n\n" + data,
        lambda data: gzip.compress(data),
    ],
    ids=["a mark and blank lines first", "gzipped"],
)
def test_an_output_that_opens_as_a_capture_is_refused_however_it_opens(
    good: Path, capsys: pytest.CaptureFixture[str], wrap: Callable[[bytes], bytes]
) -> None:
    """What reading a capture passes over, or a capture kept gzipped, is a capture all the same."""
    other = good.with_name("other.jsonl")
    other.write_bytes(wrap(good.read_bytes()))
    held = other.read_bytes()
    assert main(["report", str(good), "-o", str(other)]) == 2
    assert f"{other}: a wirediff/1 capture" in one_error_line(capsys.readouterr().err)
    assert other.read_bytes() == held


def test_replay_appends_to_a_capture_it_does_not_read(
    good: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay's output is a capture it appends to, such as a resumed replay's: not refused."""
    monkeypatch.chdir(good.parent)
    other = good.with_name("other.jsonl")
    other.write_bytes(good.read_bytes())
    assert main(["replay", str(good), "--to", NOWHERE, "-o", str(other), "--dry-run"]) == 0
    assert "capture" not in capsys.readouterr().err


def test_a_report_given_as_a_capture_is_named_as_one(
    good: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wirediff report report.html` in the demo's folder: the input is the problem, not the
    `-o` it was not given (whose default names the same file)."""
    monkeypatch.chdir(good.parent)
    (good.parent / "report.html").write_text("<!doctype html>\n<html lang=en>\n")
    assert main(["report", "report.html"]) == 2
    err = one_error_line(capsys.readouterr().err)
    assert err.startswith("wirediff: error: report.html: an HTML or XML page, not a wirediff/1")
    assert "-o" not in err


# --- lines skipped: one warning each, once ------------------------------------------------


def damage(path: Path) -> list[str]:
    """The capture at `path` with its third line torn and an unfinished line appended; the
    warnings every command gives about it."""
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:2], lines[2][:60], *lines[3:]]) + "\n" + lines[0][:40])
    return [
        f"wirediff: warning: {path}:3: not a JSON record (a torn write): skipped",
        f"wirediff: warning: {path}:{len(lines) + 1}: an unfinished last line (a write in "
        "progress, or cut by a crash): skipped",
    ]


SKIPPING: dict[str, tuple[str, Argv]] = {
    "diagnose": ("base", lambda b, c, o: ["diagnose", str(b)]),
    "report": ("base", lambda b, c, o: ["report", str(b), str(c), "-o", str(o / "r.html")]),
    "check, the baseline": ("base", lambda b, c, o: ["check", str(b), str(c)]),
    "check, a candidate": ("candidate", lambda b, c, o: ["check", str(b), str(c)]),
    "replay": ("base", lambda b, c, o: ["replay", str(b), "--to", NOWHERE, "--dry-run"]),
}


def unreplayed(command: str) -> list[str]:
    """The warning `check` adds when the candidate's torn line held a replay: its original is
    not judged, whatever the cause."""
    if command != "check, a candidate":
        return []
    return [
        "wirediff: warning: candidate: 1 of the baseline's calls has no replay to it, so not "
        "judged: a replay stopped or filtered, or a shadow's mirrors dropped"
    ]


@pytest.mark.parametrize("command", SKIPPING)
def test_skipped_lines_are_one_warning_each_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    records = openai_session()
    base, candidate = tmp_path / "base.jsonl", tmp_path / "candidate.jsonl"
    base.write_text("".join(json.dumps(r) + "\n" for r in records))
    candidate.write_text(
        "".join(json.dumps(replay(r, id=f"c{i}")) + "\n" for i, r in enumerate(records))
    )
    damaged, argv = SKIPPING[command]
    warnings = damage(base if damaged == "base" else candidate)
    warnings += unreplayed(command)
    assert main(argv(base, candidate, tmp_path)) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error" not in err, err
    assert [line for line in err.splitlines() if "warning" in line] == warnings


@pytest.mark.parametrize("torn", [False, True], ids=["whole", "torn"])
@pytest.mark.parametrize("command", SKIPPING)
def test_a_byte_not_utf8_in_a_whole_line_is_an_error_in_a_torn_one_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, torn: bool
) -> None:
    records = openai_session()
    captures = {
        "base": [json.dumps(r).encode() for r in records],
        "candidate": [json.dumps(replay(r, id=f"c{i}")).encode() for i, r in enumerate(records)],
    }
    damaged, argv = SKIPPING[command]
    lines = captures[damaged]
    at = lines[2].index(b'"gpt-4o-mini"') + 1
    lines[2] = lines[2][:at] + b"\xff" + lines[2][at : at + 20 if torn else None]
    for name, held in captures.items():
        (tmp_path / f"{name}.jsonl").write_bytes(b"".join(line + b"\n" for line in held))
    path = tmp_path / f"{damaged}.jsonl"
    code = main(argv(tmp_path / "base.jsonl", tmp_path / "candidate.jsonl", tmp_path))
    err = capsys.readouterr().err
    if torn:
        assert code == 0, err
        assert [line for line in err.splitlines() if "wirediff: " in line] == [
            f"wirediff: warning: {path}:3: not a JSON record (a torn write): skipped",
            *unreplayed(command),
        ]
    else:
        assert code == 2
        assert one_error_line(err) == (
            f"wirediff: error: {path}:3: not UTF-8 text (byte 0xff at column {at + 1}); "
            "the recorder writes UTF-8 only\n"
        )


# --- diagnose --fail ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failing", "flags", "expect"),
    [(True, ["--fail"], 1), (True, [], 0), (False, ["--fail"], 0), (True, ["--fail", "--json"], 1)],
)
def test_diagnose_fail_exits_1_when_a_chain_failed(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    failing: bool,
    flags: list[str],
    expect: int,
) -> None:
    records = openai_session() + ([error_record(id="e1")] if failing else [])
    p = tmp_path / "s.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["diagnose", str(p), *flags]) == expect
    out = capsys.readouterr().out
    assert ("model_not_found" in out) == failing


# --- the exit codes, documented -----------------------------------------------------------


def help_codes(parser: argparse.ArgumentParser) -> set[int]:
    help_text = parser.format_help()
    block = help_text.split("exit codes:\n", 1)[1]
    # the list ends the help, as the README says
    assert all(line.startswith("  ") for line in block.rstrip().splitlines()), parser.prog
    return {int(m) for m in re.findall(r"^  (\d+) ", block, re.M)}


def readme_codes() -> dict[str, set[int]]:
    section = README.read_text(encoding="utf-8").split("\n## Commands and exit codes\n", 1)[1]
    table = section.strip().split("\n\n", 1)[0]
    header, _, *rows = table.splitlines()
    codes = [int(c) for c in header.strip("|").split("|")[1:]]
    out = {}
    for row in rows:
        name, *cells = (c.strip() for c in row.strip("|").split("|"))
        out[name.strip("`").removeprefix("wirediff ")] = {
            code for code, cell in zip(codes, cells, strict=True) if cell != "—"
        }
    return out


def test_every_command_documents_its_exit_codes_in_help_and_readme(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parsers = subcommands()
    readme = readme_codes()
    assert set(readme) == set(parsers)
    for name, parser in parsers.items():
        assert help_codes(parser) == readme[name], name
    with pytest.raises(SystemExit) as done:
        main(["capture", "--help"])
    assert done.value.code == 0
    assert "exit codes:\n  2    bad usage" in capsys.readouterr().out


def test_a_target_url_with_credentials_is_shown_fingerprinted(
    good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--to http://user:pass@host/v1`: the plan, the notes and the errors show the
    password's fingerprint, never the password."""
    secret = "pw-CANARY-to-9876"
    target = f"http://alice:{secret}@127.0.0.1:9/v1"
    assert main(["replay", str(good), "--to", target, "--dry-run"]) == 0
    said = capsys.readouterr()
    assert "127.0.0.1:9" in said.out and secret not in said.out + said.err
    assert main(["capture", "--to", target]) == 2
    err = capsys.readouterr().err
    assert "without query, fragment or credentials" in err and secret not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "x.jsonl"],
        ["check", "a.jsonl", "b.jsonl"],
        ["diagnose", "x.jsonl"],
        ["export", "x.jsonl", "--parquet", "out"],
        ["replay", "x.jsonl"],
        ["probe", "http://127.0.0.1:9/v1"],
    ],
    ids=lambda argv: argv[0],
)
def test_an_unknown_option_points_to_its_commands_help(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's own `--help` lists what it takes, not the top one."""
    assert main([*argv, "--bogus"]) == 2
    line = one_error_line(capsys.readouterr().err).rstrip()
    assert line.endswith(f"unrecognized arguments: --bogus (see `wirediff {argv[0]} --help`)")


def test_a_capture_folder_that_cannot_be_made_is_named_as_the_dir_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wirediff.cli import capture_command

    monkeypatch.setattr(capture_command, "check_port", lambda port: port)  # no socket here
    (tmp_path / "file").write_text("")
    where = tmp_path / "file" / "captures"
    assert main(["capture", "--to", NOWHERE, "--port", "0", "--dir", str(where)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"--dir {where}: cannot make the folder (Not a directory)" in line
    # nothing made for a command refused for another reason
    made = tmp_path / "made"
    assert main(["capture", "--to", NOWHERE, "--session", "../x", "--dir", str(made)]) == 2
    assert not made.exists()


def test_filters_matching_nothing_are_said(good: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in a filter would replay nothing without a word; a filter that fits other
    captures a job is given is no error, so it is a warning."""
    assert main(["replay", str(good), "--to", NOWHERE, "--only", "family=nosuch"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "wirediff: warning: no filter (--only, a config's `only`) matches any of the 9 exchanges "
        f"to replay in {good}",
        f"wirediff: nothing to replay in {good}",
    ]


@pytest.mark.parametrize(
    ("argv", "read"),
    [(["report", "--json", "-", "-o", "r.html"], '"exchanges": 9,'),
     (["diagnose", "--json"], "[]"),
     (["replay", "--dry-run", "--to", NOWHERE], "9 to send, 0 to skip")],
    ids=["report", "diagnose", "replay"],
)  # fmt: skip
def test_a_capture_given_twice_is_read_once_and_said(
    good: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    read: str,
) -> None:
    """By another name too; `check` refuses it, as its arguments each play a part."""
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "good.jsonl", str(good), "./good.jsonl"]) == 0
    out, err = capsys.readouterr()
    assert read in out
    assert err.splitlines()[:2] == [
        f"wirediff: warning: good.jsonl and {good}: the same capture given twice; read once",
        "wirediff: warning: good.jsonl and ./good.jsonl: the same capture given twice; read once",
    ]


@pytest.mark.parametrize(
    "argv",
    [["report", "GOOD", "-o"], ["check", "GOOD", "CANDIDATE", "--json"],
     ["check", "GOOD", "CANDIDATE", "--junit"]],
    ids=["report", "check --json", "check --junit"],
)  # fmt: skip
def test_a_write_that_fails_names_its_file(
    good: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A full disk fails the write, not the open: the error still says which output, alone."""
    candidate = good.with_name("good.vllm.jsonl")
    replays = [replay(r, id=f"{r['id']}-v", label="vllm") for r in openai_session()]
    candidate.write_text("".join(json.dumps(r) + "\n" for r in replays))
    named = {"GOOD": str(good), "CANDIDATE": str(candidate)}
    assert main([*(named.get(a, a) for a in argv), "/dev/full"]) == 2
    out, err = capsys.readouterr()
    assert one_error_line(err) == "wirediff: error: /dev/full: No space left on device\n"
    assert out == ""  # no verdict table before it, as if the gate had run


def test_outputs_that_are_no_plain_files_are_written_as_before(
    good: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The output checks leave alone what they only look at: a named pipe's reader gets the
    whole summary, devices may take several outputs, and a link to nothing stays one."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert main(["report", str(good), "-o", "/dev/null", "--json", str(fifo)]) == 0
    reader.join(30)
    assert json.loads(got[0])["totals"]["exchanges"] == len(openai_session())
    argv = ["report", str(good), "-o", "/dev/null", "--json", "/dev/null", "--csv", "/dev/null"]
    assert main(argv) == 0
    link, target = tmp_path / "link.html", tmp_path / "target.html"
    link.symlink_to(target)
    assert main(["report", str(tmp_path / "missing.jsonl"), "-o", str(link)]) == 2
    assert link.is_symlink() and not target.exists()
    capsys.readouterr()


def test_an_export_that_cannot_be_written_is_refused_before_the_scan(
    good: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = good / "dataset"  # a file where its folder would be
    assert main(["export", str(good), "--parquet", str(blocked)]) == 2
    said = one_error_line(capsys.readouterr().err)
    assert f"--parquet {blocked}: cannot be written (Not a directory)" in said


def test_a_terminal_that_lacks_a_character_gets_its_escape() -> None:
    """`→` on a latin-1 terminal (`PYTHONIOENCODING=latin-1`, a Windows code page) is written
    as `\\u2192`, not an error after the work is done; an argument's bytes that are no text
    in the locale are written as given; a closed stream takes it to nowhere."""
    raw = io.BytesIO()
    latin = io.TextIOWrapper(raw, encoding="latin-1")
    out = terminal(latin)
    out.write("replay → lm: café …\n")
    out.flush()
    assert raw.getvalue() == b"replay \\u2192 lm: caf\xe9 \\u2026\n"
    # the C locale: an argument's bytes come back as given, in runs, whatever else is lacking
    raw = io.BytesIO()
    out = terminal(io.TextIOWrapper(raw, encoding="ascii", errors="surrogateescape"))
    given = b"pq \xc3\xbc\xff".decode("ascii", "surrogateescape")
    out.write(f"→ {given} \U0001f600→→\n")
    out.flush()
    assert raw.getvalue() == b"\\u2192 pq \xc3\xbc\xff \\U0001f600\\u2192\\u2192\n"
    closed = terminal(None)
    try:
        assert closed.write("→") == 1
    finally:
        closed.close()


def test_a_working_directory_that_is_gone_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert main(["check", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err == "wirediff: error: the working directory no longer exists; cd to one that does\n"
