"""The same analysis on either engine: `report`, `check` and `diagnose` give the same outputs
with `--engine local` and `--engine dask` (a `LocalCluster` of 2 worker processes), on the
fixtures and on a 10k set cut into many partitions; a worker killed while it works on a
partition costs Dask a retry of that task, never the result."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import missing, wait_for
from tests.fixtures.records import body, chat_record, openai_session, replay, retag
from tests.fixtures.sessions import masked, replicated, summary_and_lines, write_fixtures
from wirediff._types import Record
from wirediff.analysis.index.analyze import analyze, diagnose_index
from wirediff.cli import main
from wirediff.engine import run as engine_run
from wirediff.engine import scan
from wirediff.engine.run import Run
from wirediff.record.store import RecordWriter, load_records
from wirediff.reports.model import build
from wirediff.reports.render import write_findings

pytestmark = pytest.mark.e2e

SMALL_PARTS = 64 << 10
"""Bytes per scan task that cut the fixtures into several, the 10k set into many."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    try:
        from distributed import LocalCluster
    except ImportError:
        missing("dask.distributed is not installed (pip install -e '.[dev]')")
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as c:
        yield c


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_fixtures(tmp_path_factory.mktemp("fixtures"))


@pytest.fixture(scope="module")
def ten_k(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return replicated(tmp_path_factory.mktemp("ten_k"), 10_000)


def summary_of(run: Run, paths: list[Path], out: Path) -> Any:
    model = run.report([str(p) for p in paths], ignore=(), max_examples=3)
    return summary_and_lines(model, out)


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scan tasks of `SMALL_PARTS` bytes, and a local engine that runs them on its pool."""
    monkeypatch.setattr(scan, "CHUNK_BYTES", SMALL_PARTS)
    monkeypatch.setattr(engine_run, "SMALL_BYTES", 0)


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().out


@pytest.mark.usefixtures("small_parts")
def test_report_check_and_diagnose_say_the_same_on_either_engine(
    cluster: Any, fixtures: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = [str(p) for p in fixtures]
    engines = {
        "local": ["--engine", "local"],
        "dask": ["--engine", "dask", "--scheduler", cluster.scheduler_address],
    }
    said: dict[str, list[Any]] = {}
    for name, flags in engines.items():
        out = tmp_path / name
        report = ["report", *files, "-o", str(out / "r.html"), "--json", str(out / "s.json")]
        report += ["--findings", str(out / "f.jsonl")]
        code, _ = cli([*report, "--csv", str(out / "d.csv"), *flags], capsys)
        assert code == 0
        summary = masked(json.loads((out / "s.json").read_text()))
        summary["lines"] = (out / "f.jsonl").read_text()
        check = cli(["check", *files, "--json", str(out / "check.json"), *flags], capsys)
        diagnosed = cli(["diagnose", *files, "--fail", *flags], capsys)
        as_json = cli(["diagnose", *files, "--json", *flags], capsys)
        csv = (out / "d.csv").read_text()
        said[name] = [summary, csv, check, (out / "check.json").read_text(), diagnosed, as_json]
    assert said["dask"] == said["local"]
    summary = said["local"][0]
    assert summary["totals"]["pairs"] and summary["totals"]["divergences"]
    assert summary["totals"]["diagnoses"]
    assert said["local"][2][0] == 1, "lmstudio's responses are unsupported: the gate fails"
    assert said["local"][4][0] == 1, "a chain failed"


def test_export_to_a_relative_path_lands_here_whatever_the_workers_directory(
    cluster: Any,
    fixtures: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The workers write the files, from a directory of their own: the target is sent as
    the absolute path it names here, as inputs are."""
    monkeypatch.chdir(tmp_path)  # the workers were started elsewhere
    argv = ["export", *map(str, fixtures), "--parquet", "dataset"]
    code, out = cli([*argv, "--engine", "dask", "--scheduler", cluster.scheduler_address], capsys)
    assert code == 0 and out.endswith("→ dataset\n")
    assert (tmp_path / "dataset" / "wirediff-dataset.json").is_file()
    assert cli(["diagnose", "dataset", "--json"], capsys) == cli(
        ["diagnose", *map(str, fixtures), "--json"], capsys
    )


def test_an_unreadable_input_on_a_cluster_is_the_one_line_it_is_here(
    fixtures: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task that meets a damaged file says so as the command would: no worker's log,
    no traceback, no warning about the tasks cancelled after it (a cluster of the
    command's own, whose processes write where it does)."""
    dataset = tmp_path / "dataset"
    assert main(["export", *map(str, fixtures), "--parquet", str(dataset)]) == 0
    capsys.readouterr()
    damaged = max((dataset / "exchanges").rglob("*.parquet"), key=lambda f: f.stat().st_size)
    damaged.write_bytes(damaged.read_bytes()[:1000])
    command = [sys.executable, "-m", "wirediff", "diagnose", str(dataset), "--engine", "dask"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith(f"wirediff: error: {damaged}: not a readable Parquet file (")
    assert done.stderr.count("\n") == 1, done.stderr


def test_summary_is_the_same_on_either_engine_on_a_10k_set(
    cluster: Any, ten_k: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local engine as a user runs it (one partition, here) against the whole analysis
    held in memory, Dask over many partitions, and the local engine's pool over as many."""
    with Run("local", progress=False) as run:
        reference = summary_of(run, ten_k, tmp_path / "local.json")
    assert reference["totals"]["exchanges"] >= 10_000
    records = load_records(ten_k)
    analysis = analyze(records)
    diagnoses = diagnose_index(analysis.index)
    in_memory = summary_and_lines(build(analysis, diagnoses, max_examples=3), tmp_path / "mem")
    assert in_memory == reference, "as held all in memory"
    del records, analysis, diagnoses
    monkeypatch.setattr(scan, "CHUNK_BYTES", SMALL_PARTS)
    with Run("dask", cluster.scheduler_address, progress=False) as run:
        assert summary_of(run, ten_k, tmp_path / "dask.json") == reference
    monkeypatch.setattr(engine_run, "SMALL_BYTES", 0)
    with Run("local", workers=2, progress=False) as run:
        model = run.report([str(p) for p in ten_k], ignore=(), max_examples=3)
        assert summary_and_lines(model, tmp_path / "pool") == reference
        written = (tmp_path / "pool" / "findings.jsonl").read_bytes()
        pipe, got = tmp_path / "pipe", []  # `--findings /dev/stdout | jq`: written in order
        os.mkfifo(pipe)
        reader = threading.Thread(target=lambda: got.append(pipe.read_bytes()))
        reader.start()
        write_findings(model, pipe)
        reader.join(timeout=120)
        assert got == [written]


def _independent_captures(tmp_path: Path) -> list[str]:
    """One app run against `openai` and against `ollama` (independent captures: a call only
    in each, a call repeated, two calls in another order, chat answers without `refusal`),
    `openai`'s traffic mirrored to `lmstudio` (`replay_of`, as the shadow records it) and
    one of `ollama`'s calls replayed to `vllm`."""
    base = openai_session()
    again = copy.deepcopy(base[0])
    again["id"], again["seq"] = "o-again", len(base)
    base.append(again)
    calls = [base[1], base[0], *base[2:3], *base[4:]]  # o3 missed, o0 and o1 swapped
    extra = chat_record(id="extra", seq=99)
    extra["request"]["body"]["messages"][0]["content"] = "Something else"
    retag(extra)
    ollama = []
    for seq, rec in enumerate([*calls, extra]):
        c = copy.deepcopy(rec)
        c["id"], c["label"], c["session"], c["seq"] = f"ollama-{rec['id']}", "ollama", "s2", seq
        if isinstance(c["request"]["body"], dict):
            c["request"]["body"]["model"] = "local-model"
        message = (body(c) or {}).get("choices", [{}])[0].get("message")
        if isinstance(message, dict):
            message.pop("refusal", None)
        retag(c)
        ollama.append(c)
    mirrored = [replay(b, id=f"lm-{b['id']}", label="lmstudio") for b in base]
    replayed = [replay(ollama[0], id="vllm-0", label="vllm")]
    files: list[str] = []
    for name, records in (
        ("openai", base),
        ("ollama", ollama),
        ("lmstudio", mirrored),
        ("vllm", replayed),
    ):
        path = tmp_path / f"{name}.jsonl"
        with RecordWriter(path) as w:
            for rec in records:
                w.write(rec)
        files.append(str(path))
    return files


def _in_memory(paths: list[str], out: Path) -> Any:
    records: list[Record] = load_records(paths)
    analysis = analyze(records)
    diagnoses = diagnose_index(analysis.index)
    return summary_and_lines(build(analysis, diagnoses, max_examples=3), out)


def test_independent_captures_and_mirrors_give_the_same_on_either_engine(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pairing by content made once over all the captures: each content pair compared in
    one partition, the unmatched calls and the baseline's choice listed once, as the whole
    analysis held in memory lists them, whatever the engine and however many partitions."""
    files = _independent_captures(tmp_path)
    reference = _in_memory(files, tmp_path / "mem.json")
    unmatched = [(u["label"], u["side"], u["id"]) for u in reference["unmatched"]]
    assert unmatched == [
        ("ollama", "only in the baseline", "o3"),
        ("ollama", "only in the candidate", "ollama-extra"),
    ]
    assert reference["baseline"] == ["ollama", "openai"]  # ollama: vllm replayed from it
    assert reference["baseline_chosen_by"] == "replays"
    backends = {b["label"]: (b["pairs"], b["unmatched"]) for b in reference["backends"]}
    assert backends["ollama"][1] == {"only in the baseline": 1, "only in the candidate": 1}
    assert backends["lmstudio"][0] == {"replay": 10, "content": 0}
    assert backends["vllm"][0] == {"replay": 1, "content": 0}
    assert reference["totals"]["pairs"] == 20  # 9 of them by content
    assert reference["totals"]["divergences"]

    paths = [Path(f) for f in files]
    with Run("local", progress=False) as run:
        assert summary_of(run, paths, tmp_path / "local.json") == reference
    monkeypatch.setattr(scan, "CHUNK_BYTES", 4 << 10)  # a scan task or so per original
    with Run("dask", cluster.scheduler_address, progress=False) as run:
        assert summary_of(run, paths, tmp_path / "dask.json") == reference
    monkeypatch.setattr(engine_run, "SMALL_BYTES", 0)
    with Run("local", workers=2, progress=False) as run:
        assert summary_of(run, paths, tmp_path / "pool.json") == reference


@pytest.mark.usefixtures("small_parts")
def test_check_on_independent_captures_says_the_same_on_either_engine(
    cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _independent_captures(tmp_path)
    said = {}
    for name, flags in {
        "local": ["--engine", "local"],
        "dask": ["--engine", "dask", "--scheduler", cluster.scheduler_address],
    }.items():
        out = tmp_path / f"{name}.json"
        said[name] = (*cli(["check", *files, "--json", str(out), *flags], capsys), out.read_text())
    assert said["dask"] == said["local"]
    code, text, doc = said["local"]
    assert code == 0, "no candidate fails the gate"
    assert "11 replayed and 9 paired-by-content exchanges compared with 10 baseline" in text
    assert (
        "pairs  ollama       9 by content; only in the baseline: 1, only in the candidate: 1"
        in text
    )
    assert json.loads(doc)["unmatched"] == {
        "ollama": {"only in the baseline": 1, "only in the candidate": 1}
    }


def test_a_worker_killed_mid_run_is_survived(
    cluster: Any, ten_k: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distributed import Client

    with Run("local", progress=False) as run:
        reference = summary_of(run, ten_k, tmp_path / "local.json")
    outcome: dict[str, Any] = {}
    monkeypatch.setattr(scan, "CHUNK_BYTES", SMALL_PARTS)

    def analyse() -> None:
        try:
            with Run("dask", cluster.scheduler_address, progress=False) as run:
                outcome["summary"] = summary_of(run, ten_k, tmp_path / "dask.json")
        except BaseException as e:  # handed to the test's thread
            outcome["error"] = e

    with Client(cluster.scheduler_address) as observer:
        pids: dict[str, int] = observer.run(os.getpid)
        worker = threading.Thread(target=analyse)
        worker.start()

        def scanning() -> tuple[str, str] | None:
            """A worker and the scan task it is working on, if any."""
            for address, keys in observer.processing().items():
                for key in keys:
                    if str(key).startswith("wirediff-"):
                        return address, str(key)
            return None

        address, key = wait_for(scanning, timeout=120, what="a scan task running")
        os.kill(pids[address], signal.SIGKILL)
        worker.join(timeout=300)
        assert not worker.is_alive(), "the run went on after the worker was killed"
        workers = observer.scheduler_info()["workers"]
        assert address not in workers, f"the worker running {key} outlived SIGKILL"
        wait_for(lambda: len(observer.scheduler_info()["workers"]) == 2, 60, "a new worker")
    if "error" in outcome:
        raise outcome["error"]
    assert outcome["summary"] == reference


def test_captures_past_this_machines_memory_are_refused_on_a_cluster_too(
    cluster: Any,
    fixtures: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The workers of a cluster scan elsewhere, but the table they make is analysed here: what
    would not fit this machine's memory is one line before anything is sent to them."""
    from wirediff.engine.engines import DaskEngine

    def sent(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("work was sent to the cluster")

    monkeypatch.setattr(engine_run, "_available", lambda: 1 << 10)
    monkeypatch.setattr(DaskEngine, "run", sent)
    out = tmp_path / "r.html"
    argv = ["report", *map(str, fixtures), "-o", str(out)]
    assert main([*argv, "--engine", "dask", "--scheduler", cluster.scheduler_address]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "k exchanges a GB on either engine" in err, err
    assert not out.exists()
