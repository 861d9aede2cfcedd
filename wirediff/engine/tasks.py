"""The functions the engine runs on its workers (a local process pool, or a Dask cluster):
each reads its own records from the sources by their locators and returns a small result.
They take and return only picklable values, and import nothing but what they use."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from wirediff._support import task_gc
from wirediff._types import Record
from wirediff.analysis.comparison.analyze import analyze
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.comparison.noise import group_sample_noise
from wirediff.analysis.comparison.pairing import UNMATCHED_COLUMNS, ContentLinks
from wirediff.analysis.diagnosis.chains import CHAIN_COLUMNS
from wirediff.analysis.diagnosis.explain import (
    Backends,
    diagnose_chain,
    diagnosis_frame,
)
from wirediff.analysis.diagnosis.provider import Provider, identify
from wirediff.analysis.diagnosis.subject import Served
from wirediff.analysis.diagnosis.view import view
from wirediff.engine.chaining import ChainBatch
from wirediff.engine.listing import place_bytes, write_findings
from wirediff.engine.scan import Scanned, scan_chunk
from wirediff.engine.sources import Source, read_records
from wirediff.engine.spill import write_rows
from wirediff.record.keys import digest
from wirediff.reports.hops import ChainCounts, collect_chains
from wirediff.reports.items import diagnosis_lines, finding_line
from wirediff.reports.partial import Partial, collect

__all__ = [
    "Locators",
    "compare_part",
    "diagnose_batch",
    "fetch",
    "learn_noise",
    "providers",
    "scan",
]

Locators = tuple[list[int], list[int], list[int]]
"""`(src, a, b)` of each record, in order (`wirediff.engine.sources`)."""


def scan(sources: Sequence[Source], src: int, start: int, end: int) -> Scanned:
    with task_gc():
        return scan_chunk(sources[src], src, start, end)


def fetch(sources: Sequence[Source], where: Locators) -> list[Record]:
    with task_gc():
        return read_records(sources, *where)


def learn_noise(
    sources: Sequence[Source], samples: Sequence[tuple[int, Locators]]
) -> dict[int, set[str]]:
    """The noise of each repeated request, from its first repeats (`noise_samples`)."""
    out: dict[int, set[str]] = {}
    with task_gc():
        for request, where in samples:
            paths = group_sample_noise(read_records(sources, *where))
            if paths:
                out[request] = paths
    return out


@dataclass
class Compared:
    """A comparison partition's result: its `Partial`, and when the tables that list every
    finding are wanted, each with its place, in order: `(place_bytes(place), line)`, its
    line of `--findings` (`finding_line`)."""

    part: Partial
    rows: list[tuple[bytes, str]]
    exchanges: int
    spilled: tuple[str, int] | None = None
    """Where the worker wrote `rows` itself, and how many (then `rows` is empty)."""


def compare_part(
    sources: Sequence[Source],
    where: tuple[Iterable[int], Iterable[int], Iterable[int]],
    positions: Iterable[int],
    *,
    ignore: Sequence[str],
    noise: Mapping[int, set[str]],
    max_examples: int,
    report: bool,
    rows: bool,
    links: Sequence[tuple[int, int, int]] = (),
    spill_to: str | None = None,
    careful: Sequence[bool] | None = None,
) -> Compared:
    """Pair, diff, validate and judge one partition: originals with all their replays, and
    the originals paired by content with the baseline's here (`links`: candidate and
    baseline id digests and the link's place among all, made over all the captures; what found no
    counterpart is listed once, from there, not per partition).
    `spill_to`: a directory this worker shares with the command, where it writes the
    finding rows itself (they never travel back). `careful`: per record, what the scan
    found (`wirediff.engine.sources.read_records`)."""
    with task_gc():
        src, a, b = ([int(x) for x in column] for column in where)  # arrays, as sent
        places = [int(p) for p in positions]
        records = read_records(sources, src, a, b, careful=careful)
        named = {digest(r["id"]): r["id"] for r in records} if links else {}
        paired = [(named[cand], named[base], n) for cand, base, n in links]
        # no baseline label: it was chosen over all the captures (a part may hold none of its
        # originals), and the links given are all that pairing by content needs
        content = ContentLinks(
            [(cand, base) for cand, base, _ in paired], pd.DataFrame(columns=UNMATCHED_COLUMNS)
        )
        analysis = analyze(
            records, ignore=ignore, content=content, repeat_noise=noise, judge_cells=False
        )
        part, ffr, order = collect(
            analysis,
            places,
            max_examples=max_examples,
            report=report,
            linked={c: n for c, _, n in paired},
        )
        count = len(records)
        del records, named, analysis  # the rows' lines are made without them
        out = []
        if rows:  # columns read whole: iterating a frame's Arrow strings row by row is slow
            values = zip(*(ffr[c].tolist() for c in DIVERGENCE_COLUMNS), strict=True)
            out = list(zip(map(place_bytes, order), map(finding_line, values), strict=True))
        out.sort(key=lambda r: r[0])
        if spill_to is not None and out:
            stem = Path(spill_to) / f"findings-{uuid.uuid4().hex}"
            write_findings(stem, out)
            return Compared(part, [], count, (str(stem), len(out)))
        return Compared(part, out, count)


def providers(
    sources: Sequence[Source], backends: Sequence[tuple[tuple[Any, Any], Locators]]
) -> dict[tuple[Any, Any], Provider]:
    """Each backend's provider, from its first exchanges (`Backends`)."""
    out = {}
    with task_gc():
        for key, where in backends:
            out[key] = identify([], (view(r) for r in read_records(sources, *where)))
    return out


@dataclass
class Diagnosed:
    """A batch of failing chains: their diagnosis rows; and when the report is wanted, the
    rows' lines of `--findings` (`diagnosis_lines`) and the chains as it folds them."""

    rows: list[dict[str, Any]]
    lines: list[str]
    chains: ChainCounts
    count: int
    spilled: tuple[str, str | None, int] | None = None
    """Where the worker wrote `rows` and `lines` itself, and how many rows (then both are
    empty)."""


def diagnose_batch(
    sources: Sequence[Source],
    batch: ChainBatch,
    where: Locators,
    served: Served,
    known: Mapping[tuple[Any, Any], Provider],
    first: int,
    report: bool,
    spill_to: str | None = None,
    *,
    careful: Sequence[bool] | None = None,
) -> Diagnosed:
    """Diagnose a batch of failing chains whose records are at `where`; `spill_to`: a
    directory this worker shares with the command, where it writes the rows itself;
    `careful`: as `compare_part`'s."""
    with task_gc():
        records = read_records(sources, *where, careful=careful)
        chains = batch.rows(records)
        by_id = {r["id"]: r for r in records}
        backends = Backends.identified(known)
        rows: list[dict[str, Any]] = []
        for row in chains:
            chain = dict(zip(CHAIN_COLUMNS, row, strict=True))
            rows.extend(diagnose_chain(chain, by_id, served, backends))
        lines: list[str] = []
        counts: ChainCounts = {}
        if report:
            frame = diagnosis_frame(rows)
            counts = collect_chains(frame, by_id, first)
            lines = diagnosis_lines(rows)
        if spill_to is None or not rows:
            return Diagnosed(rows, lines, counts, len(chains))
        path = Path(spill_to) / f"diagnoses-{uuid.uuid4().hex}.pickle"
        write_rows(path, rows)
        written = None
        if lines:
            written = path.with_suffix(".lines.pickle")
            write_rows(written, lines)
        spilled = (str(path), None if written is None else str(written), len(rows))
        return Diagnosed([], [], counts, len(chains), spilled)
