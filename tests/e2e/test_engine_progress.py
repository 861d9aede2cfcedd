"""The progress bar of long analyses: partitions done and exchanges per second, drawn on a
terminal only; nothing at all otherwise (a CI log, a pipe)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixtures.sessions import write_fixtures
from wirediff.cli import main
from wirediff.cli.judge import judge
from wirediff.engine import scan
from wirediff.engine.run import Run

pytestmark = pytest.mark.e2e


def test_a_terminal_gets_parts_done_and_exchanges_per_second(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "CHUNK_BYTES", 16 << 10)
    files = [str(p) for p in write_fixtures(tmp_path)]
    with Run("local", progress=True) as run:
        run.diagnose(files)
        judge(run, files[0], files[1:])
    err = capsys.readouterr().err
    assert "scan" in err and "ex/s" in err
    parts = [int(n) for n in re.findall(r"(\d+)/\d+ parts", err)]
    assert parts and max(parts) > 1, err


def test_no_terminal_no_bar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """stderr is not a terminal under pytest, as in a pipe or a CI log."""
    files = [str(p) for p in write_fixtures(tmp_path)]
    assert main(["report", *files, "-o", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exchanges" in err, err
    assert "ex/s" not in err and "\r" not in err


def test_a_terminal_that_says_it_has_no_rows_still_gets_its_bars(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pseudo-terminal without a size (`script -qc …`) says 0 rows: tqdm would hide every
    bar below that."""
    import tqdm.std

    monkeypatch.setattr(tqdm.std, "_screen_shape_wrapper", lambda: lambda fp: (-1, -1))
    files = [str(p) for p in write_fixtures(tmp_path)]
    with Run("local", progress=True) as run:
        judge(run, files[0], files[1:])
    assert "ex/s" in capsys.readouterr().err
