"""Rows that every table lists (each finding, each diagnosis) kept on disk while the
analysis runs, then read back in order: findings merged by their place among all the
captures' findings (each partition's rows are in order already), diagnoses batch by batch.

A finding is kept as the text `summary.json` lists it (`wirediff.reports.items`), written
where it was found: `summary.json` copies the texts, the other tables read them back."""

from __future__ import annotations

import bisect
import json
import pickle
import struct
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

import pandas as pd

from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.diagnosis.diagnose import diagnosis_frame
from wirediff.reports.items import write_list
from wirediff.reports.rows import Rows

__all__ = ["Spill", "merge_runs", "place_bytes", "write_rows"]

CHUNK = 20_000
"""Rows per frame handed out."""
PICKLED = 100
"""Rows pickled together: reading the files back merges them holding one or two such
chunks per file (one file per partition) and a block of about one per file, so this bounds
the merge's memory, which grows with the partitions (a million exchanges: about a hundred
files, some 20 MB of findings held; chunks of 1000 would hold ten times as much)."""


_PLACE = struct.Struct(">BBQBQQ")


def place_bytes(place: tuple[Any, ...]) -> bytes:
    """A finding's place among all (`wirediff.reports.partial.finding_order`: its group,
    two places — of a pair, `(0 | 1, n)`, or of a record, `n` — and its row) as bytes that
    sort as the tuples do: merging the partitions' rows then unpickles and compares bytes,
    not nested tuples."""
    group, first, second, row = place
    a, b = first if type(first) is tuple else (0, first)
    c, d = second if type(second) is tuple else (0, second)
    return _PLACE.pack(group, a, b, c, d, row)


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
        self._listing: _Listing | None = None

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
            self.findings.append((self._write(rows), len(rows)))

    def add_findings_file(self, path: str, count: int) -> None:
        """One partition's findings, written by its worker into `directory`."""
        if count:
            self.findings.append((Path(path), count))

    def add_diagnoses(self, first: Any, rows: list[dict[str, Any]], texts: list[str]) -> None:
        """One batch of diagnosis rows, and their texts in `summary.json` when the report
        is wanted; batches are read back by `first`."""
        if rows:
            written = self._write(texts) if texts else None
            self.diagnoses.append((first, self._write(rows), written, len(rows)))

    def add_diagnoses_file(self, first: Any, rows: str, texts: str | None, count: int) -> None:
        """One batch of diagnosis rows (and texts), written by its worker into `directory`."""
        self.diagnoses.append((first, Path(rows), None if texts is None else Path(texts), count))

    def list_findings(self) -> None:
        """Start writing, in the background, the list of every finding as `summary.json`
        holds it (`write_list`): merging the partitions' rows is the longest step left to
        the command once they are all in, and this way it overlaps the diagnoses."""
        files = [p for p, _ in self.findings]
        path = Path(self._dir.name) / "findings.list"
        self._listing = _Listing(path, lambda stop: _merged_texts(files, stop))

    def finding_rows(self) -> Rows:
        files = [p for p, _ in self.findings]
        count = sum(n for _, n in self.findings)

        def texts() -> Iterator[str]:
            return _merged_texts(files)

        def frames() -> Iterator[pd.DataFrame]:
            rows = (list(json.loads(text).values()) for text in texts())
            yield from _frames(rows, _findings_frame)

        return Rows(count, frames, texts, self._listing.result if self._listing else None)

    def diagnosis_rows(self) -> Rows:
        batches = sorted(self.diagnoses, key=lambda d: d[0])
        count = sum(n for *_, n in batches)

        def frames() -> Iterator[pd.DataFrame]:  # a batch's chains whole in one frame
            for _, p, _, _ in batches:
                yield diagnosis_frame(list(_read(p)))
            if not batches:
                yield diagnosis_frame([])

        def texts() -> Iterator[str]:
            for _, _, p, _ in batches:
                if p is not None:
                    yield from _read(p)

        complete = all(p is not None for _, _, p, _ in batches)
        return Rows(count, frames, texts if complete else None)

    def close(self) -> None:
        if self._listing is not None:
            self._listing.stop()
        self._dir.cleanup()


class _Listing:
    """A list of texts written to `path` by a thread (`Spill.list_findings`)."""

    def __init__(self, path: Path, texts: Callable[[threading.Event], Iterator[str]]) -> None:
        self.path = path
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._write, args=(texts,), name="wirediff-findings", daemon=True
        )
        self._thread.start()

    def _write(self, texts: Callable[[threading.Event], Iterator[str]]) -> None:
        try:
            with self.path.open("w", encoding="utf-8") as fh:
                write_list(fh, texts(self._stop))
        except BaseException as e:  # handed to the caller of `result`
            self._error = e

    def result(self) -> Path:
        """The file, once written (the thread's error, if it failed)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.path

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _merged_texts(files: list[Path], stop: threading.Event | None = None) -> Iterator[str]:
    """The findings' texts of the partitions' files, merged by place (until `stop`)."""
    for block in merge_runs([_chunks(p) for p in files]):
        if stop is not None and stop.is_set():
            return
        yield from map(itemgetter(1), block)


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


Placed = tuple[bytes, Any]
"""A row with its place (`place_bytes`)."""
_PLACE_OF = itemgetter(0)


@dataclass(slots=True)
class _Run:
    chunk: list[Placed]
    at: int
    rest: Iterator[list[Placed]]


def _next_chunk(run: Iterator[list[Placed]]) -> list[Placed]:
    """The run's next chunk with rows in it (none left: empty)."""
    return next((chunk for chunk in run if chunk), [])


def merge_runs(runs: list[Iterator[list[Placed]]]) -> Iterator[list[Placed]]:
    """Runs of `(place, row)` in order of their places (no two equal), read chunk by
    chunk, merged into blocks in order: each block is what every run holds up to the
    smallest of their last places read, sorted — a merge of sorted runs, which the sort
    does at C speed, where merging row by row (`heapq.merge`) costs a Python step each.
    Each run is kept `PICKLED` rows ahead at least, so that every block takes about as
    many of each run: with a hundred runs, a block of one run's chunk would cost a
    hundred searches for a hundred rows."""
    heads = [_Run([], 0, run) for run in runs]
    while True:
        for head in heads:
            while len(head.chunk) - head.at < PICKLED and (more := _next_chunk(head.rest)):
                head.chunk, head.at = head.chunk[head.at :] + more, 0
        heads = [head for head in heads if head.at < len(head.chunk)]
        if not heads:
            return
        bound = min(head.chunk[-1][0] for head in heads)
        block: list[Placed] = []
        for head in heads:
            cut = bisect.bisect_right(head.chunk, bound, lo=head.at, key=_PLACE_OF)
            block += head.chunk[head.at : cut]
            head.at = cut
        block.sort(key=_PLACE_OF)
        yield block


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
