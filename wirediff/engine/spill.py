"""Rows that every table lists (each finding, each diagnosis) kept on disk while the
analysis runs, then read back in order: findings merged by their place among all the
captures' findings (each partition's rows are in order already: `wirediff.engine.listing`),
diagnoses batch by batch.

A finding is kept as its line of `--findings` (`wirediff.reports.items`), written where it
was found; the other tables read the lines back."""

from __future__ import annotations

import json
import pickle
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.diagnosis.explain import diagnosis_frame
from wirediff.engine.listing import merged_lines, write_findings
from wirediff.reports.rows import Rows

__all__ = ["Spill", "write_rows"]

CHUNK = 20_000
"""Rows per frame handed out."""
PICKLED = 100
"""Rows pickled together (a diagnosis batch's file is read back a chunk at a time)."""


def write_rows(path: Path, rows: list[Any]) -> None:
    """`rows` to a file of pickled chunks (a worker on this machine writes its own)."""
    with path.open("wb") as fh:
        for start in range(0, len(rows), PICKLED):
            pickle.dump(rows[start : start + PICKLED], fh, protocol=pickle.HIGHEST_PROTOCOL)


class Spill:
    """A directory of row files for one command; removed on `close`."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="wirediff-")
        self._n = 0
        self.findings: list[tuple[Path, int]] = []
        self.diagnoses: list[tuple[Any, Path, Path | None, int]] = []

    @property
    def directory(self) -> str:
        return self._dir.name

    def _write(self, rows: list[Any]) -> Path:
        path = Path(self._dir.name) / f"{self._n}.pickle"
        self._n += 1
        write_rows(path, rows)
        return path

    def add_findings(self, rows: list[tuple[bytes, str]]) -> None:
        """One partition's findings, `(place_bytes(place), text)`, in order."""
        if rows:
            stem = Path(self._dir.name) / f"findings-{self._n}"
            self._n += 1
            write_findings(stem, rows)
            self.findings.append((stem, len(rows)))

    def add_findings_file(self, stem: str, count: int) -> None:
        """One partition's findings, written by its worker into `directory`
        (`wirediff.engine.listing.write_findings`)."""
        if count:
            self.findings.append((Path(stem), count))

    def add_diagnoses(self, first: Any, rows: list[dict[str, Any]], texts: list[str]) -> None:
        """One batch of diagnosis rows, and their lines (`diagnosis_lines`) when the report
        is wanted; batches are read back by `first`."""
        if rows:
            written = self._write(texts) if texts else None
            self.diagnoses.append((first, self._write(rows), written, len(rows)))

    def add_diagnoses_file(self, first: Any, rows: str, texts: str | None, count: int) -> None:
        """One batch of diagnosis rows (and lines), written by its worker into `directory`."""
        self.diagnoses.append((first, Path(rows), None if texts is None else Path(texts), count))

    def finding_rows(self) -> Rows:
        """The findings, merged in order of their places."""
        stems = [p for p, _ in self.findings]
        count = sum(n for _, n in self.findings)

        def lines() -> Iterator[str]:
            return merged_lines(stems)

        def frames() -> Iterator[pd.DataFrame]:
            rows = (list(json.loads(text).values()) for text in lines())
            yield from _frames(rows, _findings_frame)

        return Rows(count, frames, lines)

    def diagnosis_rows(self) -> Rows:
        batches = sorted(self.diagnoses, key=lambda d: d[0])
        count = sum(n for *_, n in batches)

        def frames() -> Iterator[pd.DataFrame]:  # a batch's chains whole in one frame
            for _, p, _, _ in batches:
                yield diagnosis_frame(list(_read(p)))
            if not batches:
                yield diagnosis_frame([])

        def lines() -> Iterator[str]:
            for _, _, p, _ in batches:
                if p is not None:
                    yield from _read(p)

        complete = all(p is not None for _, _, p, _ in batches)
        return Rows(count, frames, lines if complete else None)

    def close(self) -> None:
        self._dir.cleanup()


def _chunks(path: Path) -> Iterator[list[Any]]:
    with path.open("rb") as fh:
        while True:
            try:
                chunk = pickle.load(fh)
            except EOFError:
                return
            yield chunk


def _read(path: Path) -> Iterator[Any]:
    for chunk in _chunks(path):
        yield from chunk


def _findings_frame(rows: list[tuple[str, ...]]) -> pd.DataFrame:
    return pd.DataFrame.from_records(rows, columns=DIVERGENCE_COLUMNS)


def _frames(
    rows: Iterable[Any], make: Callable[[list[Any]], pd.DataFrame]
) -> Iterator[pd.DataFrame]:
    """Frames of `CHUNK` rows; one empty frame when there are none."""
    batch: list[Any] = []
    made = False
    for row in rows:
        batch.append(row)
        if len(batch) == CHUNK:
            yield make(batch)
            made, batch = True, []
    if batch or not made:
        yield make(batch)
