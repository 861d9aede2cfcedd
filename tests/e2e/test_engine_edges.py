"""Captures at the edges of the record format give the engine's summary what the whole
analysis in memory gives, however the engine partitions them: failed attempts in other
files, missing listeners, start times that are not finite (refused alike), `replay_of`
cycles and empty ids, text no UTF-8 can hold; and a malformed capture is named at its first
bad line whichever chunk finishes first."""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.fixtures.sessions import fixture_sessions, replicated, summary_and_lines
from wirediff._types import Record
from wirediff.analysis.index.analyze import analyze, diagnose_index
from wirediff.engine import run as engine_run
from wirediff.engine import scan
from wirediff.engine.run import Run
from wirediff.engine.sources import resolve as resolve_sources
from wirediff.errors import CaptureError
from wirediff.record.store import load_records
from wirediff.reports.model import build

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def dump(path: Path, records: list[Record]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def in_memory(paths: list[Path], out: Path) -> Any:
    records = load_records(paths)
    analysis = analyze(records)
    return summary_and_lines(build(analysis, diagnose_index(analysis.index), max_examples=3), out)


def on_engine(paths: list[Path], out: Path, **kw: Any) -> Any:
    with Run("local", progress=False, **kw) as run:
        model = run.report([str(p) for p in paths], ignore=(), max_examples=3)
        return summary_and_lines(model, out)


def same_everywhere(paths: list[Path], tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The summary in memory, asserted equal to the engine's in one partition and in a
    pool of two workers with partitions of a few records."""
    expected = in_memory(paths, tmp / "memory.json")
    assert on_engine(paths, tmp / "one.json") == expected
    monkeypatch.setattr(engine_run, "SMALL_BYTES", 0)
    monkeypatch.setattr(scan, "CHUNK_BYTES", 2 << 10)
    assert on_engine(paths, tmp / "pool.json", workers=2) == expected
    return expected


def attempt(rec: Record, suffix: str, started: float) -> Record:
    """A replay attempt at `rec`'s original that got no answer (a resumed run sends it
    again)."""
    out = copy.deepcopy(rec)
    out["id"] += suffix
    out["started"] = started
    out["response"] = None
    out["error"] = {"kind": "timeout", "message": "timed out"}
    return out


def test_a_failed_attempt_in_another_file_is_left_out_as_loading_them_together_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, replays = fixture_sessions()
    answered = replays["ollama"]
    first = attempt(answered[0], "-try1", answered[0]["started"] - 50)
    paths = [
        dump(tmp_path / "s.jsonl", base),
        dump(tmp_path / "s.ollama.jsonl", [first]),
        dump(tmp_path / "s.ollama2.jsonl", answered),
    ]
    summary = same_everywhere(paths, tmp_path, monkeypatch)
    assert summary["totals"]["exchanges"] == len(base) + len(answered)


def test_backends_without_a_listener_are_named_by_their_first_exchanges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, replays = fixture_sessions()
    records = [base, replays["ollama"], replays["lmstudio"]]
    for rec in (r for recs in records for r in recs):
        rec["listener"] = None  # as `wirediff import` writes them
    paths = [dump(tmp_path / f"{n}.jsonl", recs) for n, recs in enumerate(records)]
    summary = same_everywhere(paths, tmp_path, monkeypatch)
    providers = {d["provider"] for d in summary["diagnoses"]}
    assert providers and "unknown" not in providers


@pytest.mark.parametrize("started", [float("nan"), float("inf")])
def test_an_attempt_started_at_no_finite_time_is_refused_alike_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, started: float
) -> None:
    """`NaN` and `1e999` parse, but no JSON output can write them back: loading and the engine,
    one worker or two, name the same line."""
    _, replays = fixture_sessions()
    answered = replays["ollama"]
    tried = [attempt(answered[0], "-a", -5.0), attempt(answered[0], "-b", started)]
    path = dump(tmp_path / "o.jsonl", answered[1:] + tried)
    with pytest.raises(CaptureError) as loading:
        load_records([path])
    said = (
        f"{path}:{len(answered) + 1}: malformed wirediff/1 record (started must be a finite number)"
    )
    assert str(loading.value) == said
    for workers in (1, 2):
        monkeypatch.setattr(
            engine_run, "SMALL_BYTES", 0 if workers == 2 else engine_run.SMALL_BYTES
        )
        with Run("local", workers=workers, progress=False) as run, pytest.raises(CaptureError) as e:
            run.report([str(path)], ignore=(), max_examples=3)
        assert str(e.value) == said


@pytest.mark.parametrize("how", ["same replay twice", "two replays, one id", "replay as original"])
def test_an_id_read_again_is_left_out_everywhere_with_a_warning(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    """An id is one exchange: its first record is analysed, a later one with that id is
    left out with one warning, in memory and on the engine alike (before, each path kept
    a different record of the id and counted, paired or diagnosed one twice)."""
    base, replays = fixture_sessions()
    answered = replays["ollama"]
    again = copy.deepcopy(answered[0])
    if how == "two replays, one id":
        assert again["response"] is not None
        again["response"]["status"] = 500
    elif how == "replay as original":
        again = copy.deepcopy(base[1])
        again["id"] = answered[0]["id"]
    firsts = [dump(tmp_path / "s.jsonl", base), dump(tmp_path / "o.jsonl", answered)]
    alone = in_memory(firsts, tmp_path / "alone.json")
    caplog.clear()
    summary = same_everywhere([*firsts, dump(tmp_path / "x.jsonl", [again])], tmp_path, monkeypatch)
    assert summary == alone
    said = [r.getMessage() for r in caplog.records if "an id read before" in r.getMessage()]
    assert (
        said == ["1 record repeats an id read before: the first record of each id is analysed"] * 3
    )


@pytest.mark.parametrize("how", ["cycle", "self", "empty id"])
def test_replay_of_cycles_and_an_empty_id_analyse_alike_across_partitions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    base, replays = fixture_sessions()
    r = replays["ollama"]
    if how == "cycle":
        r[0]["replay_of"], r[1]["replay_of"] = r[1]["id"], r[0]["id"]
    elif how == "self":
        r[0]["replay_of"] = r[0]["id"]
    else:
        base[0]["id"], r[0]["replay_of"] = "", ""
    paths = [dump(tmp_path / "s.jsonl", base), dump(tmp_path / "o.jsonl", r)]
    same_everywhere(paths, tmp_path, monkeypatch)


def test_a_capture_written_to_while_read_is_told_as_it_was_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Lines begun after the scan read a file are not read, and said so, not when the line it
    read last just ended; the warning about an unfinished line names the line the scan stopped
    at, not the file's end after."""
    base, _ = fixture_sessions()
    lines = [json.dumps(r) + "\n" for r in base[:5]]
    path = tmp_path / "live.jsonl"
    path.write_text("".join(lines[:3]) + lines[3][:40])
    measured = resolve_sources

    def measure_then_grow(*args: Any, **kwargs: Any) -> Any:
        found = measured(*args, **kwargs)
        with path.open("a") as fh:  # the line measured unfinished ends, more come
            fh.write(lines[3][40:] + lines[4] + lines[4][:40])
        return found

    monkeypatch.setattr(engine_run, "resolve", measure_then_grow)
    with Run("local", progress=False, workers=1) as run:
        index, _ = run.scan([str(path)])
    said = [r.getMessage() for r in caplog.records]
    assert len(index) == 4  # a line begun within what was measured is read to its end
    assert said == [
        f"{path}: written to while it was read: the lines begun after its first "
        f"{len(''.join(lines[:4])):,} bytes are not read"
    ]
    caplog.clear()
    path.write_text("".join(lines[:3]) + lines[3][:40])  # only the line it measured ends

    def measure_then_end(*args: Any, **kwargs: Any) -> Any:
        found = measured(*args, **kwargs)
        with path.open("a") as fh:
            fh.write(lines[3][40:])
        return found

    monkeypatch.setattr(engine_run, "resolve", measure_then_end)
    with Run("local", progress=False, workers=1) as run:
        assert len(run.scan([str(path)])[0]) == 4
    assert caplog.records == []
    caplog.clear()
    path.write_text("".join(lines[:3]) + lines[3][:40])
    monkeypatch.setattr(engine_run, "resolve", measured)
    with Run("local", progress=False, workers=1) as run:
        assert len(run.scan([str(path)])[0]) == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}:4: an unfinished last line (a write in progress, or cut by a crash): skipped"
    ]


def test_text_no_utf8_holds_is_analysed_and_exported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone surrogate, as the recorder keeps a header's undecodable bytes and as a
    hostile upstream's JSON may name a key, in the index's strings and in a divergence's
    path; written as its UTF-8 bytes, which JSON readers take."""
    base, replays = fixture_sessions()
    r = replays["ollama"]
    sdk: Any = r[0]["tags"]["sdk"]
    sdk["version"] = "1.\udc80"
    r[1]["request"]["path"] += "\udcff"
    answer = r[2]["response"]
    assert answer is not None and isinstance(answer["body"], dict)
    answer["body"]["\ud800odd"] = 1
    base[3]["session"] = "s\udc80"
    paths = [dump(tmp_path / "s.jsonl", base), tmp_path / "o.jsonl"]
    paths[1].write_bytes(
        b"".join(
            json.dumps(x, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n" for x in r
        )
    )
    summary = same_everywhere(paths, tmp_path, monkeypatch)
    assert any("\\ud800odd" in f["path"] for f in summary["findings"])  # its escape
    out = tmp_path / "ds"
    with Run("local", progress=False) as run:
        run.export([str(p) for p in paths], str(out))
    assert on_engine([out], tmp_path / "dataset.json") == summary


def test_the_first_bad_line_is_named_whichever_chunk_finishes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = replicated(tmp_path, 3000)[0]
    lines = path.read_bytes().split(b"\n")[:-1]
    half = len(lines) // 2
    bad = b'{"format":"wirediff/1","id":"bad"}'
    lines[half - 2] = lines[half + 3] = bad  # near the end of the first chunk; the second's start
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(CaptureError) as loading:
        load_records([path])
    assert f":{half - 1}:" in str(loading.value)
    monkeypatch.setattr(scan, "CHUNK_BYTES", sum(len(line) + 1 for line in lines[:half]))
    monkeypatch.setattr(engine_run, "SMALL_BYTES", 0)
    with Run("local", workers=2, progress=False) as run, pytest.raises(CaptureError) as scanned:
        run.report([str(path)], ignore=(), max_examples=3)
    assert str(scanned.value) == str(loading.value)


INTERRUPTED = textwrap.dedent(
    """
    import signal, sys, time
    from pathlib import Path
    from wirediff.engine.run import Run

    # as a command started from a terminal: a suite run in the background (`make test &`)
    # would hand it an ignored SIGINT
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def work(i):
        (Path(sys.argv[1]) / f"started-{i}").touch()
        time.sleep(120)  # a long partition: only the interrupt ends it
        return i

    if __name__ == "__main__":  # a Dask cluster's processes import this module
        try:
            with Run(sys.argv[2], workers=2, progress=False) as run:
                for _ in run.engine.run(work, [((i,), {}) for i in range(4)]):
                    pass
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)
    """
)


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_ctrl_c_stops_the_workers_at_once_without_a_traceback_of_theirs(
    tmp_path: Path, engine: str
) -> None:
    """On a local Dask cluster too: its processes are the command's to stop."""
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), engine],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a terminal's Ctrl-C: SIGINT to the whole group
    )
    try:
        wait_for(lambda: len(list(tmp_path.glob("started-*"))) == 2, 60, "two partitions running")
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=30)  # long before the partitions would end
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130
    assert err.strip() == "interrupted"


def test_the_workers_are_gone_once_the_scan_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command analyses what the workers read without them: their memory is given back."""
    monkeypatch.setattr(engine_run, "SMALL_BYTES", 0)
    monkeypatch.setattr(scan, "CHUNK_BYTES", 2 << 10)
    paths = [str(p) for p in replicated(tmp_path, 50)]
    with Run("local", progress=False, workers=2) as run:
        seen: list[int] = []
        original = run.engine.run

        def counting(*args: Any, **kwargs: Any) -> Any:
            for done in original(*args, **kwargs):
                seen.append(len(multiprocessing.active_children()))
                yield done

        monkeypatch.setattr(run.engine, "run", counting)
        index, _ = run.scan(paths)
        assert len(index) >= 50 and max(seen) == 2  # the scan ran in two workers
        assert multiprocessing.active_children() == []
        seen.clear()
        assert len(run.scan(paths)[0]) == len(index)  # a second run has workers of its own
        assert max(seen) == 2 and multiprocessing.active_children() == []
