"""The `wirediff` console script in its own process, as a user runs it: one line and exit 2
on bad input, a capture through a pipe, a reader that goes away."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.records import error_record, openai_session, replay
from tests.unit.test_cli_bad_input import BAD_INPUTS, NOWHERE, one_error_line
from wirediff._types import Record

pytestmark = pytest.mark.e2e

WIREDIFF = str(Path(sys.executable).with_name("wirediff"))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["import", "{bad}"], "not a HAR file"),
        (["diagnose", "{bad}"], "`wirediff import` converts"),
        (["capture"], "required: --to"),
    ],
)
def test_the_installed_command_says_one_line(tmp_path: Path, argv: list[str], message: str) -> None:
    """The console script, in its own process, as a user runs it."""
    bad = BAD_INPUTS["{} as HAR"](tmp_path)
    proc = subprocess.run(
        [WIREDIFF, *(a.format(bad=bad) for a in argv)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert message in one_error_line(proc.stderr)


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "/dev/stdin", "-o", "r.html", "--json", "-"],
        ["diagnose", "/dev/stdin", "--json"],
        ["check", "/dev/stdin", "candidate.jsonl"],
        ["export", "/dev/stdin", "--parquet", "dataset"],
    ],
    ids=lambda argv: argv[0],
)
@pytest.mark.parametrize("stdin", ["/dev/stdin", "-"])
def test_a_capture_through_a_pipe_is_read(tmp_path: Path, argv: list[str], stdin: str) -> None:
    """`cat s.jsonl | wirediff report -`, `wirediff check <(zcat s.jsonl.gz) …`: a pipe
    reads once, so the command copies it to a file the engine reads in ranges."""
    argv = [stdin if a == "/dev/stdin" else a for a in argv]
    base = openai_session()
    lines = b"".join(json.dumps(r).encode() + b"\n" for r in base)
    candidate = b"".join(
        json.dumps(replay(r, id=f"c{i}", label="vllm")).encode() + b"\n" for i, r in enumerate(base)
    )
    (tmp_path / "candidate.jsonl").write_bytes(candidate)
    (temp := tmp_path / "temp").mkdir()
    proc = subprocess.run(
        [WIREDIFF, *argv],
        input=lines,
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    assert {
        "report": f'"exchanges": {len(base)}' in out,
        "diagnose": out == "[]\n",
        "check": f"\n{len(base)} replayed exchanges compared with {len(base)} baseline" in out,
        "export": out.startswith(f"{len(base)} exchanges"),
    }[argv[0]], out
    assert not list(temp.iterdir()), "the copy was left behind"


def test_a_pipe_given_twice_is_refused(tmp_path: Path) -> None:
    """Its second reading would be empty: refused before anything is read, nothing left in the
    temporary folder; a named FIFO given twice, whose second open would wait for a writer
    for good, too."""
    lines = b"".join(json.dumps(r).encode() + b"\n" for r in openai_session())
    (temp := tmp_path / "temp").mkdir()
    proc = subprocess.run(
        [WIREDIFF, "diagnose", "/dev/stdin", "/dev/stdin"], input=lines, capture_output=True,
        timeout=120, cwd=tmp_path, env={**os.environ, "TMPDIR": str(temp)},
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == b""
    said = "/dev/stdin: the same pipe given twice; a pipe is read once"
    assert said in one_error_line(proc.stderr.decode())
    assert not list(temp.iterdir())
    dashes = subprocess.run(
        [WIREDIFF, "diagnose", "-", "-"], input=lines, capture_output=True, timeout=120,
        cwd=tmp_path,
    )  # fmt: skip
    assert dashes.returncode == 2, dashes.stderr
    assert "-: the same pipe given twice" in one_error_line(dashes.stderr.decode())
    zipped = subprocess.run(
        [WIREDIFF, "report", "-", "-o", "r.html"], input=gzip.compress(lines),
        capture_output=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert one_error_line(zipped.stderr.decode()) == (
        "wirediff: error: -: gzip-compressed; give it decompressed, through a pipe: "
        "zcat FILE | wirediff COMMAND -\n"
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    named = subprocess.run(
        [WIREDIFF, "diagnose", "fifo", str(fifo)], capture_output=True, timeout=120,
        cwd=tmp_path,
    )  # fmt: skip
    assert named.returncode == 2, named.stderr
    said = f"fifo and {fifo}: the same pipe given twice; a pipe is read once"
    assert said in one_error_line(named.stderr.decode())


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (b"garbage\n", "wirediff: error: /dev/stdin: not a wirediff/1 capture"),
        (b"", "wirediff: error: /dev/stdin: empty, not a wirediff/1 capture"),
        (b"LINES" + b"hello\n", "wirediff: warning: /dev/stdin:10: not a JSON record"),
        (b"LINES" + b'{"format": "wirediff/1"', "wirediff: warning: /dev/stdin:10: an unfinished"),
    ],
    ids=["no record", "empty", "a torn line", "an unfinished last line"],
)
def test_what_a_pipe_holds_is_said_of_the_pipe(tmp_path: Path, given: bytes, said: str) -> None:
    """Not of the private copy the command reads it through, gone once it ends."""
    lines = b"".join(json.dumps(r).encode() + b"\n" for r in openai_session())
    proc = subprocess.run(
        [WIREDIFF, "report", "/dev/stdin", "-o", "r.html"],
        input=given.replace(b"LINES", lines),
        capture_output=True,
        timeout=120,
        cwd=tmp_path,
    )
    err = proc.stderr.decode()
    assert said in err and "wirediff-pipe-" not in err, err


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """`wirediff replay … --dry-run | head -1`: no error about a broken pipe, exit 141."""
    base = openai_session()
    capture = tmp_path / "s.jsonl"
    capture.write_text(
        "".join(json.dumps({**base[i % len(base)], "id": f"r{i}"}) + "\n" for i in range(3000))
    )
    proc = subprocess.Popen(
        [WIREDIFF, "replay", str(capture), "--to", NOWHERE, "--dry-run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"replay ")
    proc.stdout.close()  # as `head -1` does, long before the plan's 3,000 lines are out
    with proc.stderr:
        assert proc.wait(timeout=120) == 141
        assert proc.stderr.read() == b""


def test_a_terminal_without_utf8_or_without_stdout_gets_the_command_done(tmp_path: Path) -> None:
    """`diagnose` prints `→`: on a latin-1 terminal it comes as its escape; and with stdout
    closed (`>&-`) the gate's JUnit file is still written and its exit code still true."""
    base = openai_session()

    def write(name: str, recs: list[Record]) -> None:
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in recs))

    write("s.jsonl", base)
    write("s.vllm.jsonl", [replay(r, id=f"c{i}", label="vllm") for i, r in enumerate(base)])
    write("e.jsonl", [error_record(status=404)])
    latin = subprocess.run(
        [WIREDIFF, "diagnose", "e.jsonl"], capture_output=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONIOENCODING": "latin-1"},
    )  # fmt: skip
    assert latin.returncode == 0, latin.stderr
    assert (
        b"Traceback" not in latin.stderr
        and b"POST /v1/chat/completions \\u2192 404" in latin.stdout
    )
    argv = [WIREDIFF, "check", "s.jsonl", "s.vllm.jsonl", "--junit", "gate.xml"]
    closed = subprocess.run(argv, stdout=subprocess.DEVNULL, timeout=120, cwd=tmp_path,
                            capture_output=False, stderr=subprocess.PIPE,
                            preexec_fn=lambda: os.close(1))  # fmt: skip
    assert closed.returncode == 0 and closed.stderr == b"", closed.stderr
    assert (tmp_path / "gate.xml").read_text().startswith("<?xml")


def test_a_c_locale_exports_into_a_folder_of_any_name(tmp_path: Path) -> None:
    """Under the C locale without UTF-8 mode, an argument's bytes come as `surrogateescape`
    characters and stdout takes ASCII alone: the dataset is written at the folder named, whose
    bytes `export` prints back as given, on stdout and in an error on stderr, its `→` as an
    escape; `report` reads the dataset there."""
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in openai_session()))
    folder = "pq \u00fc"
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0"}
    env.pop("PYTHONIOENCODING", None)
    done = subprocess.run(
        [WIREDIFF, "export", "s.jsonl", "--parquet", folder], capture_output=True, timeout=120,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(b" events \\u2192 pq \xc3\xbc\n"), done.stdout
    assert any((tmp_path / folder / "exchanges").rglob("*.parquet"))
    twice = subprocess.run(
        [WIREDIFF, "export", "s.jsonl", "--parquet", folder], capture_output=True, timeout=120,
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert twice.returncode == 2, twice.stderr
    assert b"error: --parquet pq \xc3\xbc: a wirediff dataset already;" in twice.stderr
    report = [WIREDIFF, "report", folder, "-o", f"{folder}.html"]
    again = subprocess.run(report, capture_output=True, timeout=120, cwd=tmp_path, env=env)
    assert again.returncode == 0 and (tmp_path / f"{folder}.html").is_file(), again.stderr
