"""Scan the captures once: each record read, checked as loading checks it, and indexed.

Each record becomes its row of the index (`wirediff.analysis.index.row`), in chunks of a file
or of a dataset's files, side by side on the engine's workers. Each worker hands back its
chunk's rows with their locators, and the readings and evidence records it had not handed
back before.

Problems are placed by byte offset. The command turns offsets into line numbers, counting
newlines only when there is something to say, so the messages are those of loading the file
whole (`wirediff.record.store.iter_records`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from wirediff._support import task_gc
from wirediff.analysis.comparison.reading import Reading
from wirediff.analysis.index.row import Reader, index_frame
from wirediff.engine.sources import JSONL, Source, dataset_record, open_binary, reading_parquet
from wirediff.errors import CaptureError
from wirediff.record.lines import (
    BATCH_LINES,
    LineError,
    Torn,
    line_batches,
    parse_batch,
    skip_line,
)
from wirediff.record.store import checked

__all__ = ["CHUNK_BYTES", "Scanned", "chunks", "scan_chunk", "scan_file"]

CHUNK_BYTES = 16 << 20
"""Bytes of a capture file scanned by one task."""
_readers: dict[str, Reader] = {}
"""This process's reader of each scan, which hands back each reading and evidence record once.

A worker of a Dask cluster serves many commands."""


def _reader(scan: str) -> Reader:
    if scan not in _readers:
        while len(_readers) >= 4:  # scans of commands gone
            _readers.pop(next(iter(_readers)))
        _readers[scan] = Reader()
    return _readers[scan]


@dataclass
class Scanned:
    """Hold what a chunk of a file gave: its index rows, locators and what loading would say.

    The locators `src`, `a`, `b` are a file and a byte range, or a dataset's file and row.
    `careful` says that reading the record again must check it as the scan did: orjson would not
    read it as `json` does, or a body nested too deeply was kept as text. Beside them: what
    loading the chunk would have said, torn lines skipped or the first line that is no record,
    and the readings and evidence its process read first here."""

    src: int
    start: int
    frame: pd.DataFrame
    readings: dict[int, Reading] = field(default_factory=dict)
    evidence: dict[int, bytes] = field(default_factory=dict)
    lines: int = 0
    records: int = 0
    torn: Torn = field(default_factory=list)
    """Torn lines skipped, as `(offset, why)`."""
    error: tuple[int, str] | None = None
    """The chunk's first unreadable line, as `(offset, why)`; the rest is not read."""
    stop: int = 0
    """Where its reading stopped: past the last line it read, whole or unfinished."""


def _located(
    scanned: Scanned, rows: list[tuple[Any, ...]], where: list[tuple[int, int]], careful: list[bool]
) -> Scanned:
    """Make `scanned`'s frame of rows, locators and `careful`."""
    frame = index_frame(rows)
    frame["src"] = scanned.src
    frame["a"] = [a for a, _ in where]
    frame["b"] = [b for _, b in where]
    frame["careful"] = careful
    frame["ordinal"] = frame["a"]
    scanned.frame = frame
    scanned.records = len(rows)
    return scanned


def scan_chunk(scan: str, sources: Sequence[Source], src: int, start: int, end: int) -> Scanned:
    """Index the lines of a JSON Lines file that start in `[start, end)`, for the scan `scan`."""
    with task_gc():
        return _scan_chunk(_reader(scan), sources[src], src, start, end)


def _scan_chunk(reader: Reader, source: Source, src: int, start: int, end: int) -> Scanned:
    p = Path(source.name)  # in messages
    out = Scanned(src, start, pd.DataFrame())
    where: list[tuple[int, int]] = []
    rows: list[tuple[Any, ...]] = []
    careful: list[bool] = []

    def flush(batch: list[tuple[int, bytes]]) -> None:
        lengths = {offset: len(line) for offset, line in batch}
        parsed, exact = parse_batch(p, batch, out.torn)
        records = []
        for (offset, text, rec, limited), by_orjson in zip(checked(p, parsed), exact, strict=True):
            skipped = lengths[offset] - len(text)  # a torn fragment before a whole record
            where.append((offset + skipped, len(text)))
            careful.append(limited or not by_orjson)
            records.append(rec)
        rows.extend(reader.rows(records))

    with open_binary(source.url) as fh:
        at = start
        if start > 0:
            fh.seek(start - 1)
            if fh.read(1) != b"\n":
                at = start + skip_line(fh)  # that line belongs to the chunk before
        try:
            for batch in line_batches(fh, out.torn, at, end, by_offset=True):
                out.lines += len(batch)
                flush(batch)
        except LineError as e:
            out.error = (e.lineno, e.text)
        out.stop = fh.tell()
    out.readings, out.evidence = reader.take()
    return _located(out, rows, where, careful)


def scan_file(scan: str, sources: Sequence[Source], src: int, file: int) -> Scanned:
    """Index the records of one file of a dataset in their order, for the scan `scan`."""
    import pyarrow.parquet as pq

    reader = _reader(scan)
    url = sources[src].files[file]
    with task_gc(), open_binary(url) as fh, reading_parquet(url):
        pf = pq.ParquetFile(fh)
        missing = {"ordinal", "record"} - set(pf.schema_arrow.names)
        if missing:
            raise CaptureError(
                f"{url}: not a file of a wirediff dataset (no `{'`, `'.join(sorted(missing))}`)"
            )
        # every column read, though two are used: a damaged page anywhere is said, not skipped
        table = pf.read().select(["ordinal", "record"])
    texts = table.column("record").to_pylist()
    read = [dataset_record(url, i, text) for i, text in enumerate(texts)]
    rows: list[tuple[Any, ...]] = []
    for begin in range(0, len(read), BATCH_LINES):
        rows += reader.rows([rec for _, rec in read[begin : begin + BATCH_LINES]])
    out = Scanned(src, file, pd.DataFrame(), lines=len(read))
    out.readings, out.evidence = reader.take()
    out = _located(out, rows, [(file, i) for i in range(len(read))], [True] * len(read))
    out.frame["ordinal"] = table.column("ordinal").to_pylist()
    return out


def chunks(sources: Sequence[Source]) -> list[tuple[int, int, int]]:
    """Cut the JSON Lines sources into `(src, start, end)` byte ranges of `CHUNK_BYTES`."""
    out = []
    for src, source in enumerate(sources):
        if source.kind != JSONL:
            continue
        size = max(source.size, 1)
        for start in range(0, size, CHUNK_BYTES):
            out.append((src, start, min(start + CHUNK_BYTES, size)))
    return out
