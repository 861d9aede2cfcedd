"""Run what `report`, `check`, `diagnose` and `export` ask of the engine, for one command.

The engine's workers scan the captures into the index (`scan`), which this process holds as
one table and analyses (`wirediff.analysis.index`); a few records are read again where a
report quotes them. `Run` is a context manager: its engine lives as long as it."""

from __future__ import annotations

import bisect
import itertools
import math
import os
import sys
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import numpy as np
import pandas as pd

from wirediff import FORMAT
from wirediff._support import give_back_memory, map_large_blocks, terminal_bar
from wirediff._types import Record
from wirediff.analysis.comparison.reading import Reading
from wirediff.analysis.index.analyze import Index, analyse, diagnose_index
from wirediff.analysis.index.kept import kept_rows, replay_roots
from wirediff.analysis.index.row import concat_index
from wirediff.engine import parquet
from wirediff.engine.engines import Call, open_engine
from wirediff.engine.scan import Scanned, chunks, scan_chunk, scan_file
from wirediff.engine.sources import (
    DATASET_MARK,
    JSONL,
    PARQUET,
    Source,
    is_url,
    open_binary,
    read_ranges,
    read_records,
    resolve,
)
from wirediff.errors import CaptureError, UsageError
from wirediff.record.lines import newlines_before
from wirediff.record.store import log as store_log
from wirediff.reports.model import ReportModel, build

__all__ = ["EXCHANGE_BYTES", "Run"]

EXCHANGE_BYTES = 1_500
"""Memory a command holds per exchange at its peak, about, on either engine.

That is mostly the index, the findings and the pairs: at 1M exchanges of the bench's session
the command peaks at 1,360 MiB, its workers gone by then; the index frame is about 245 bytes
an exchange. Every engine checks the captures against it before it starts."""
EXPORT_EXCHANGE_BYTES = 1_000
"""Memory `export` holds per exchange at its peak, about: the index, without the analysis.

At 100k exchanges of the bench's session it peaks 92 MiB above its imports."""
SMALL_BYTES = 64 << 20
"""Less than this to scan, and a local engine scans in this process.

Workers would be no faster there, each warming caches of its own (the SDK's types): the 10k
bench file, 52 MB, took 5.7-6.6 s on two workers against 5.5-7.3 in one process, with 2.7 s
more CPU and twice the memory."""


class Run:
    """Run one command's analysis on an engine: `local`, or `dask` at `scheduler`."""

    def __init__(
        self,
        engine: str = "local",
        scheduler: str | None = None,
        *,
        workers: int | None = None,
        progress: bool | None = None,
    ) -> None:
        map_large_blocks()  # before the workers fork: theirs too
        self.engine = open_engine(engine, scheduler, workers)
        self.progress = sys.stderr.isatty() if progress is None else progress
        """Whether to draw progress bars: on a terminal, by default."""
        self.sources: list[Source] = []

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(now=kind is not None)

    def close(self, now: bool = False) -> None:
        """Close the engine; with `now`, the run was cut short and its tasks are not waited for."""
        self.engine.close(now)

    def scan(
        self,
        args: Sequence[str],
        *,
        scoped: bool = False,
        retried: bool = False,
        holds: int = EXCHANGE_BYTES,
    ) -> tuple[Index, np.ndarray]:
        """Index every record of the inputs, with the argument each row came from.

        Failed replay attempts tried again are left out, unless `retried`: over all the inputs, as
        loading them together does, or with `scoped` within each argument, as `check` loads each
        capture on its own. Captures of more exchanges than this machine's memory holds at
        `holds` bytes each are refused first."""
        sources: list[Source] = []
        scopes: list[int] = []
        for scope, found in enumerate(resolve(args, scoped=scoped)):
            sources += found
            scopes += [scope if scoped else 0] * len(found)
        _fits(sources, holds)  # the table is held here, wherever the workers run
        name = uuid.uuid4().hex
        calls: list[Call] = [((scan_chunk, name, sources, *span), {}) for span in chunks(sources)]
        for src, source in enumerate(sources):
            if source.kind == PARQUET:
                calls += [
                    ((scan_file, name, sources, src, f), {}) for f in range(len(source.files))
                ]
        small = not any(s.kind == PARQUET for s in sources)
        small &= sum(s.size for s in sources) < SMALL_BYTES
        scans: list[Scanned] = []
        with self._bar("scan", None, len(calls)) as bar:
            for k, (_, result) in enumerate(self.engine.run(_call, calls, small=small), 1):
                bar.set_postfix_str(f"{k}/{len(calls)} parts", refresh=False)
                bar.update(len(result.frame))
                scans.append(result)
        scans.sort(key=lambda s: (s.src, s.start))
        _warn_torn_raise_first_error(sources, scans)
        readings, evidence = _complete(scans, calls)
        frame = concat_index(s.frame for s in scans)
        del scans
        # a dataset's rows back in the order they were exported (a file's, by offset)
        order = np.lexsort((frame["ordinal"].to_numpy(), frame["src"].to_numpy()))
        frame = frame.iloc[order].reset_index(drop=True)
        self.sources = sources
        scope = np.asarray(scopes, dtype=np.int64)[frame["src"].to_numpy()]
        at = kept_rows(frame, scope if scoped else None, retried=retried)
        frame = frame.iloc[at].reset_index(drop=True)
        give_back_memory()  # the scan's pieces, gone
        return Index(frame, readings, evidence, _Reading(sources, frame)), scope[at]

    def _bar(self, name: str, total: int | None, tasks: int) -> Any:
        """Start a bar of `total` exchanges, None to count as they come, over `tasks` tasks.

        It shows tasks done and exchanges per second on stderr, drawn only when `progress`."""
        hidden = not (self.progress and tasks)
        return terminal_bar(
            total=total, desc=f"{name:<8}", unit="ex", unit_scale=True, leave=False, disable=hidden
        )

    def report(
        self,
        args: Sequence[str],
        *,
        ignore: Sequence[str],
        max_examples: int,
        baseline: str | None = None,
    ) -> ReportModel:
        """Build the report's model.

        `baseline` is the label independent captures are compared with, `--baseline`; when the
        captures imply none and none was asked for, stderr says which it is."""
        index, _ = self.scan(args)
        if not len(index):
            raise UsageError(f"no exchanges in {', '.join(args)}")
        analysis = analyse(index, ignore=ignore, baseline=baseline)
        chosen = analysis.baseline
        if chosen.chosen_by == "first capture" and index.rows["label"].nunique() > 1:
            print(
                f"wirediff: baseline: {chosen.label} (the first capture's label; "
                "--baseline LABEL chooses another)",
                file=sys.stderr,
            )
        give_back_memory()
        diagnosed = diagnose_index(index)
        give_back_memory()
        return build(analysis, diagnosed, max_examples=max_examples)

    def diagnose(self, args: Sequence[str]) -> pd.DataFrame:
        """Give every diagnosis, in the order `diagnose` prints them."""
        index, _ = self.scan(args)
        return diagnose_index(index).frame

    def export(self, args: Sequence[str], out: str) -> tuple[int, int]:
        """Write the captures as a Parquet dataset at `out`; return how many exchanges and events."""
        index, _ = self.scan(args, retried=True, holds=EXPORT_EXCHANGE_BYTES)
        rows = index.rows
        if not len(rows):
            raise UsageError(f"no exchanges in {', '.join(args)}")
        total = sum(s.size for s in self.sources)
        count = max(1, math.ceil(total / parquet.EXPORT_BYTES))
        if self.engine.workers > 1 and total > SMALL_BYTES:
            count = max(count, self.engine.workers)
        root = replay_roots(rows)
        task = (root % np.uint64(count)).astype(np.int64)
        order = np.lexsort((np.arange(len(rows)), root, task))
        bounds = np.searchsorted(task[order], np.arange(count + 1))
        sources = self.sources
        calls: list[Call] = []
        for k in range(count):
            at = order[bounds[k] : bounds[k + 1]]
            if not len(at):
                continue
            where = tuple(rows[c].to_numpy()[at].tolist() for c in ("src", "a", "b"))
            calls.append(
                ((parquet.export_part, sources, where, at.tolist(), root[at].tolist(), out, k), {})
            )
        exchanges = events = files = 0
        with self._bar("export", len(rows), len(calls)) as bar:
            done = self.engine.run(_call, calls, small=total < SMALL_BYTES)
            for k, (_, (n, m, f)) in enumerate(done, 1):
                exchanges, events, files = exchanges + n, events + m, files + f
                bar.set_postfix_str(f"{k}/{len(calls)} parts", refresh=False)
                bar.update(n)
        parquet.mark(out, exchanges, events, files)
        return exchanges, events


def _call(fn: Any, *args: Any) -> Any:
    return fn(*args)


def _complete(
    scans: list[Scanned], calls: Sequence[Call]
) -> tuple[dict[int, Reading], dict[int, bytes]]:
    """Collect the readings and evidence the scans handed back.

    A worker hands back each one once. One lost with its worker after that, when a task is
    retried elsewhere, is read again here by scanning again the chunks that need it."""
    readings: dict[int, Reading] = {}
    evidence: dict[int, bytes] = {}
    for s in scans:
        readings.update(s.readings)
        evidence.update(s.evidence)
    again = uuid.uuid4().hex
    for k, s in enumerate(scans):
        frame = s.frame
        if not len(frame):
            continue
        keys = set(frame["reading"].unique().tolist())
        failing = set(frame["evidence"].unique().tolist()) - {0}
        if keys <= readings.keys() and failing <= evidence.keys():
            continue
        (fn, _, *args), _ = next(c for c in calls if c[0][3:5] == (s.src, s.start))
        redone = fn(again, *args)
        readings.update(redone.readings)
        evidence.update(redone.evidence)
        scans[k] = redone
    return readings, evidence


class _Reading:
    """Read the records at rows of the index again, by their locators."""

    def __init__(self, sources: list[Source], frame: pd.DataFrame) -> None:
        self.sources = sources
        self.where = frame[["src", "a", "b", "careful"]]

    def __call__(self, rows: Sequence[int]) -> list[Record]:
        part = self.where.iloc[list(rows)]
        return read_records(
            self.sources,
            part["src"].tolist(),
            part["a"].tolist(),
            part["b"].tolist(),
            careful=part["careful"].tolist(),
        )


def _fits(sources: Sequence[Source], holds: int) -> None:
    """Refuse captures that would hold more in memory than this machine has.

    Each exchange holds `holds` bytes. The estimate counts the datasets by their marks and the
    JSON Lines files' lines by `_lines`; the refusal is a usage error of one line."""
    have = _available()
    if have is None:  # nothing to hold the estimate to: nothing read for it
        return
    exchanges = sum(s.exchanges or 0 for s in sources if s.kind == PARQUET)
    exchanges += _lines([s for s in sources if s.kind != PARQUET and s.size])
    need = exchanges * holds
    if need > have:
        raise UsageError(
            f"about {exchanges:,} exchanges: more than this machine's memory holds for the "
            f"command ({need / 2**30:.1f} GB of {have / 2**30:.1f} GB available, about "
            f"{2**30 // holds // 1000:,}k exchanges a GB on either engine); run it on "
            "fewer captures at a time, or on a machine with more memory"
        )


SAMPLES, WINDOW = 64, 16 << 10
"""The estimate reads `SAMPLES` windows of `WINDOW` bytes, one amid each equal share of the
captures' bytes, so records of one size at the start and another later are both counted."""


def _lines(files: Sequence[Source]) -> int:
    """Estimate the lines of JSON Lines files: their bytes, by the newlines a byte of windows."""
    size = sum(s.size for s in files)
    starts = list(itertools.accumulate((s.size for s in files), initial=0))
    if size <= SAMPLES * WINDOW:
        places = [(i, 0, s.size) for i, s in enumerate(files)]
    else:
        share = size // SAMPLES
        places = []
        for k in range(SAMPLES):
            at = k * share + (share - WINDOW) // 2
            i = bisect.bisect_right(starts, at) - 1
            places.append((i, at - starts[i], WINDOW))  # past its file's end, less is read
    newlines = read = 0
    for i, here in itertools.groupby(places, key=lambda p: p[0]):
        for data in read_ranges(files[i].url, [(offset, n) for _, offset, n in here]):
            newlines, read = newlines + data.count(b"\n"), read + len(data)
    return size * max(newlines, 1) // max(read, 1)


def _available() -> int | None:
    """Give the memory this process may still take, in bytes, or None when not known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def line_number(url: str, offset: int) -> int:
    """Count the line of a file that starts at byte `offset`, by the newlines before it."""
    with open_binary(url) as fh:
        return newlines_before(fh, offset) + 1


def _grown(url: str, read: int) -> bool:
    """Tell whether a local file is now longer than the `read` bytes the scan read of it."""
    try:
        return not is_url(url) and os.path.getsize(url) > read
    except OSError:  # gone, or moved: nothing to tell
        return False


def _warn_torn_raise_first_error(sources: Sequence[Source], scans: Sequence[Scanned]) -> None:
    """Warn about torn lines and raise the first problem, file by file.

    The messages are those of loading each file whole, `wirediff.record.store.iter_records`."""
    by_src: dict[int, list[Scanned]] = {}
    for s in scans:
        by_src.setdefault(s.src, []).append(s)
    for src, parts in sorted(by_src.items()):
        url, name = sources[src].url, sources[src].name
        error = next((s.error for s in parts if s.error is not None), None)
        torn = [t for s in parts for t in s.torn]
        if error is not None:
            torn = [t for t in torn if t[0] < error[0]]
        if any(s.records for s in parts):
            for offset, why in torn:
                store_log.warning(f"{name}:{line_number(url, offset)}: {why}")
        if error is not None:
            raise CaptureError(f"{name}:{line_number(url, error[0])}: {error[1]}")
        if sum(s.lines for s in parts) and not sum(s.records for s in parts):
            raise CaptureError(f"{name}: not a {FORMAT} capture (no line is a JSON record)")
        read = max(s.stop for s in parts)
        if sources[src].kind == JSONL and _grown(url, read):
            store_log.warning(
                f"{name}: written to while it was read: the lines begun after its first "
                f"{read:,} bytes are not read"
            )
        said, held = sources[src].exchanges, sum(s.records for s in parts)
        if said is not None and held != said:
            raise CaptureError(
                f"{name}: {held:,} exchanges where its {DATASET_MARK} says {said:,}: "
                "a file of the dataset was changed"
            )
