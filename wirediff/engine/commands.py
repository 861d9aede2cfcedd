"""What `report`, `check`, `diagnose` and `export` ask of the engine, for one command's run:
the engine and the rows spilled to disk live as long as the `Run` (a context manager)."""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import numpy as np
import pandas as pd

from wirediff.analysis.comparison.pairing import CONTENT, REPLAY
from wirediff.engine import parquet, plan, run
from wirediff.engine.engines import Call, Calls, open_engine
from wirediff.engine.index import Index
from wirediff.engine.progress import Progress
from wirediff.engine.scan import plain
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
    """Exchanges of the baseline capture."""
    label: str
    """The baseline's label."""
    replayed: int
    """Pairs of a replay with its original."""
    by_content: dict[str, int]
    """Per candidate label: its originals paired by content with the baseline's."""
    unmatched: pd.DataFrame
    """Exchanges of independent captures without a counterpart (`UNMATCHED_COLUMNS`)."""


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
        try:
            self.progress = Progress(progress)
            self.spill = Spill()
        except BaseException:
            self.engine.close(now=True)
            raise
        self.part_bytes = part_bytes
        self._indexes: list[Index] = []

    def _scan(self, args: Sequence[str], **how: bool) -> Index:
        """`run.scan_inputs`, the index removed when the run closes."""
        index = run.scan_inputs(self.engine, args, self.progress, **how)
        self._indexes.append(index)
        return index

    def __enter__(self) -> Run:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(now=kind is not None)

    def close(self, now: bool = False) -> None:
        """The engine first (its workers may still write into the spill), then the spill
        and the indexes; `now`: the run was cut short, its tasks are stopped, not waited
        for."""
        try:
            self.engine.close(now)
        finally:
            self.spill.close()
            for index in self._indexes:
                index.close()

    def report(
        self,
        args: Sequence[str],
        *,
        ignore: Sequence[str],
        max_examples: int,
        rows: bool,
        baseline: str | None = None,
    ) -> ReportModel:
        """The report's model; with `rows`, every finding and diagnosis kept for
        `--findings` and the CSV (on disk, until the run closes). `baseline`: the label
        independent captures are compared with (`--baseline`); when the captures did not
        imply one and none was asked for, stderr says which it is."""
        index = self._scan(args)
        if not len(index):
            raise UsageError(f"no exchanges in {', '.join(args)}")
        chosen, content = run.content_pairing(self.engine, index, baseline)
        if chosen.chosen_by == "first capture" and len(index.labels(missing=False)) > 1:
            print(
                f"wirediff: baseline: {chosen.label} (the first capture's label; "
                "--baseline LABEL chooses another)",
                file=sys.stderr,
            )
        index.let_go(*plan.PAIRING_ONLY)
        spill = self.spill if rows else None
        part = run.compare(
            self.engine,
            index,
            self.progress,
            ignore=ignore,
            max_examples=max_examples,
            spill=spill,
            part_bytes=self.part_bytes,
            links=content.links,
        )
        index.let_go(*plan.COMPARING_ONLY)
        diagnosed = run.diagnose(self.engine, index, self.progress, spill=spill)
        findings = self.spill.finding_rows() if rows else _none(0)
        diagnoses = self.spill.diagnosis_rows() if rows else _none(diagnosed.rows)
        model = finish(
            part,
            diagnosed.chains,
            findings,
            diagnoses,
            unmatched=content.unmatched,
            baseline=chosen,
        )
        lay_out(model.kinds, run.fetch(self.engine, index, model.examples_to_lay_out()))
        return model

    def check(
        self, baseline: str, candidates: Sequence[str], label: str | None = None
    ) -> CheckResult:
        """The drop-in verdicts of the candidates against the baseline (its `label`: by
        default that of most of its originals), and what the gate reads; a candidate none
        of whose exchanges pairs with one of the captures (by replay or by content) is a
        usage error."""
        # every file read (and its records checked) before any is judged
        index = self._scan([baseline, *candidates], scoped=True)
        scope = index.scope
        mine = plain(
            index.load("label", "replay", rows=np.flatnonzero(scope == 0)), ["label", "replay"]
        )
        originals = Counter(mine.loc[~mine["replay"], "label"].fillna("").astype(str))
        if not originals:
            raise UsageError(f"{baseline}: no original exchange to compare with (only replays)")
        base_label = originals.most_common(1)[0][0]
        if label is not None:
            labels = list(dict.fromkeys(mine["label"].fillna("").astype(str)))
            if label not in labels:
                raise UsageError(
                    f"--baseline {label}: {baseline} has no exchange of that label "
                    f"(labels: {', '.join(labels)})"
                )
            base_label = label
        _, content = run.content_pairing(self.engine, index, base_label)
        paired = plan.paired_scopes(index, content.links)
        for n, path in enumerate(candidates, 1):
            if n not in paired:
                raise UsageError(
                    f"{path}: no exchange pairs with {baseline} ({base_label}): none replays "
                    "it and none asks what it asks (capture the same app, or `wirediff replay` it)"
                )
        part = run.compare(
            self.engine,
            index,
            self.progress,
            max_examples=1,
            report=False,
            part_bytes=self.part_bytes,
            links=content.links,
        )
        from wirediff.analysis.comparison.verdicts import roles_of, verdict_frame

        role_of = roles_of(part.labels, part.baseline_labels, part.candidate_labels)
        verdicts = verdict_frame(part.family_cells, role_of)
        return CheckResult(
            verdicts,
            part.gate,
            int((scope == 0).sum()),
            base_label,
            sum(n for (_, how), n in part.paired.items() if how == REPLAY),
            {lab: n for (lab, how), n in sorted(part.paired.items()) if how == CONTENT},
            content.unmatched,
        )

    def diagnose(self, args: Sequence[str], baseline: str | None = None) -> Rows:
        """Every diagnosis, in frames, in the order `diagnose` gives them; a `baseline`
        label (`--baseline`) is only checked to be one of the captures' (a diagnosis
        explains one backend's own chain, whichever the baseline)."""
        index = self._scan(args)
        if baseline is not None:
            labels = index.labels()
            if baseline not in labels:
                raise UsageError(
                    f"--baseline {baseline}: no capture has that label "
                    f"(labels: {', '.join(labels)})"
                )
        index.let_go(*plan.PAIRING_ONLY, *plan.COMPARING_ONLY)
        run.diagnose(self.engine, index, self.progress, report=False, spill=self.spill)
        return self.spill.diagnosis_rows()

    def export(self, args: Sequence[str], out: str) -> tuple[int, int]:
        """The captures as a Parquet dataset at `out`; how many exchanges and events."""
        index = self._scan(args, retried=True)
        if not len(index):
            raise UsageError(f"no exchanges in {', '.join(args)}")
        total = run.total_bytes(index)
        count = max(1, math.ceil(total / parquet.EXPORT_BYTES))
        if self.engine.workers > 1 and total > run.SMALL_BYTES:
            count = max(count, self.engine.workers)
        by_part = plan.split(index, count, ["src", "a", "b"], roots=True)

        def call(k: int) -> Call:  # made as a worker takes it: one partition's rows read
            part = by_part.read(k)
            where = (part["src"].tolist(), part["a"].tolist(), part["b"].tolist())
            rows, roots = part["row"].tolist(), part["root"].tolist()
            return (index.sources, where, rows, roots, out, by_part.parts[k]), {}

        exchanges = events = files = 0
        try:
            calls = Calls(len(by_part.parts), call)
            bar = self.progress.phase("export", len(index), "ex", len(calls))
            for _, (n, m, f) in self.engine.run(
                parquet.export_part, calls, small=total < run.SMALL_BYTES
            ):
                exchanges, events, files = exchanges + n, events + m, files + f
                bar.done(1, n)
        finally:
            by_part.close()
        bar.close()
        parquet.mark(out, exchanges, events, files)
        return exchanges, events
