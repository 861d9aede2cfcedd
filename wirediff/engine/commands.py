"""What `report`, `check`, `diagnose` and `export` ask of the engine, for one command's run:
the engine and the rows spilled to disk live as long as the `Run` (a context manager)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import numpy as np
import pandas as pd

from wirediff.engine import parquet, run
from wirediff.engine.engines import Call, open_engine
from wirediff.engine.progress import Progress
from wirediff.engine.spill import Spill
from wirediff.errors import UsageError
from wirediff.reports.examples import lay_out
from wirediff.reports.model import ReportModel, finish
from wirediff.reports.partial import GateCounts
from wirediff.reports.rows import Rows

__all__ = ["CheckResult", "Run"]


def _none(count: int) -> Rows:
    """`count` rows that are not kept (no table lists them)."""
    return Rows(count, lambda: iter([pd.DataFrame()]))


@dataclass
class CheckResult:
    verdicts: pd.DataFrame
    gate: GateCounts
    baseline: int
    """Exchanges of the baseline."""
    linked: int
    """Exchanges of the candidates that replay one of the baseline."""


class Run:
    """One command's analysis on an engine (`local`, or `dask` at `scheduler`)."""

    def __init__(
        self,
        engine: str = "local",
        scheduler: str | None = None,
        *,
        workers: int | None = None,
        progress: bool | None = None,
        part_bytes: int = run.PART_BYTES,
    ) -> None:
        self.engine = open_engine(engine, scheduler, workers)
        self.progress = Progress(progress)
        self.spill = Spill()
        self.part_bytes = part_bytes

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.spill.close()
        self.engine.close()

    def report(
        self, args: Sequence[str], *, ignore: Sequence[str], max_examples: int, rows: bool
    ) -> ReportModel:
        """The report's model; with `rows`, every finding and diagnosis kept for
        `summary.json` and the CSV (on disk, until the run closes)."""
        index = run.scan_inputs(self.engine, args, self.progress)
        if not len(index):
            raise UsageError(f"no exchanges in {', '.join(args)}")
        spill = self.spill if rows else None
        part = run.compare(
            self.engine,
            index,
            self.progress,
            ignore=ignore,
            max_examples=max_examples,
            spill=spill,
            part_bytes=self.part_bytes,
        )
        diagnosed = run.diagnose(self.engine, index, self.progress, spill=spill)
        findings = self.spill.finding_rows() if rows else _none(0)
        diagnoses = self.spill.diagnosis_rows() if rows else _none(diagnosed.rows)
        model = finish(part, diagnosed.chains, findings, diagnoses)
        lay_out(model.kinds, run.fetch(self.engine, index, model.examples_to_lay_out()))
        return model

    def check(self, baseline: str, candidates: Sequence[str]) -> CheckResult:
        """The drop-in verdicts of the candidates against the baseline, and what the gate
        reads; a candidate that replays nothing of the baseline is a usage error."""
        index = run.scan_inputs(self.engine, [baseline, *candidates], self.progress)
        frame, scope = index.frame, index.scope
        base_ids = set(frame.loc[scope == 0, "id"].tolist())
        linked = 0
        for n, path in enumerate(candidates, 1):
            mine = frame.loc[scope == n, "replay_of"]
            found = int(mine.isin(base_ids).sum()) if len(mine) else 0
            if not found:
                raise UsageError(
                    f"{path}: no exchange replays {baseline} (run `wirediff replay` first)"
                )
            linked += found
        part = run.compare(
            self.engine,
            index,
            self.progress,
            max_examples=1,
            report=False,
            part_bytes=self.part_bytes,
        )
        from wirediff.analysis.comparison.verdicts import roles_of, verdict_frame

        role_of = roles_of(part.labels, part.baseline_labels, part.candidate_labels)
        verdicts = verdict_frame(part.family_cells, role_of)
        return CheckResult(verdicts, part.gate, int((scope == 0).sum()), linked)

    def diagnose(self, args: Sequence[str]) -> Rows:
        """Every diagnosis, in frames, in the order `diagnose` gives them."""
        index = run.scan_inputs(self.engine, args, self.progress)
        run.diagnose(self.engine, index, self.progress, report=False, spill=self.spill)
        return self.spill.diagnosis_rows()

    def export(self, args: Sequence[str], out: str) -> tuple[int, int]:
        """The captures as a Parquet dataset at `out`; how many exchanges and events."""
        index = run.scan_inputs(self.engine, args, self.progress, retried=True)
        frame = index.frame
        if not len(frame):
            raise UsageError(f"no exchanges in {', '.join(args)}")
        total = int(frame["nbytes"].sum()) if len(frame) else 0
        count = max(1, math.ceil(total / parquet.EXPORT_BYTES))
        if self.engine.workers > 1 and total > run.SMALL_BYTES:
            count = max(count, self.engine.workers)
        roots = run.root_digests(frame) if len(frame) else np.zeros(0, dtype=np.uint64)
        part_of = run.partitions(frame, count) if count > 1 else np.zeros(len(frame), dtype=int)
        calls: list[Call] = []
        for p in range(count):
            rows = np.flatnonzero(part_of == p)
            if len(rows):
                where = run.locators(frame, rows)
                args_ = (index.sources, where, rows.tolist(), roots[rows].tolist(), out, p)
                calls.append((args_, {}))
        bar = self.progress.phase("export", len(frame), "ex", len(calls))
        exchanges = events = 0
        for _, (n, m) in self.engine.run(parquet.export_part, calls, small=total < run.SMALL_BYTES):
            exchanges, events = exchanges + n, events + m
            bar.done(1, n)
        bar.close()
        parquet.mark(out, exchanges, events, len(calls))
        return exchanges, events
