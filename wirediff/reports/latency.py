"""Measure latency per backend: time to first byte, to the first SSE event, and duration.

They are shown as quantiles and as box plots drawn in inline SVG, with pixel positions computed
here. Quantiles are exact, every value kept, up to `EXACT_LIMIT` values of one backend, family
and measure; past that they come from a `ddsketch` DDSketch, with relative error within 1%. So
latency of any number of exchanges is counted in bounded memory, and the counts of several
families merge into those of all of them, in any order, with the same result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from ddsketch import DDSketch

from wirediff.reports.formatters import nice_ticks

__all__ = [
    "EXACT_LIMIT",
    "Latency",
    "LatencyCounts",
    "Measures",
    "Quantiles",
    "collect_latency",
    "finish_latency",
]

QUANTILES = (5, 25, 50, 75, 90, 95, 99)
EXACT_LIMIT = 65_536
"""Values of one measure kept exactly; more are counted in a sketch."""
RELATIVE_ACCURACY = 0.01
METRICS = {
    "ttfe": "Time to first SSE event",
    "ttfb": "Time to first byte",
    "duration": "Duration",
}


@dataclass(slots=True)
class Stats:
    n: int
    q: dict[int, float]
    max: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            **{f"p{k}": round(v, 3) for k, v in self.q.items()},
            "max": round(self.max, 3),
        }


def stats(values: pd.Series) -> Stats | None:
    v = values.dropna().to_numpy(dtype="float64")
    if not len(v):
        return None
    qs = np.percentile(v, QUANTILES)
    return Stats(len(v), {k: float(x) for k, x in zip(QUANTILES, qs, strict=True)}, float(v.max()))


class Quantiles:
    """Keep the values of one measure exactly up to `EXACT_LIMIT`, then in a DDSketch.

    Merging is associative and order-free, since a sketch's bins only count."""

    __slots__ = ("max", "n", "parts", "sketch")

    def __init__(self, values: np.ndarray | None = None) -> None:
        self.parts: list[np.ndarray] = []
        self.sketch: DDSketch | None = None
        self.n = 0
        self.max = -np.inf
        if values is not None:
            self.add(values)

    def add(self, values: np.ndarray) -> None:
        v = values[~np.isnan(values)]
        if not len(v):
            return
        self.n += len(v)
        self.max = max(self.max, float(v.max()))
        if self.sketch is not None:
            self._count(v)
            return
        self.parts.append(v)
        if self.n > EXACT_LIMIT:
            self.sketch = DDSketch(RELATIVE_ACCURACY)
            for part in self.parts:
                self._count(part)
            self.parts = []

    def _count(self, values: np.ndarray) -> None:
        assert self.sketch is not None
        add = self.sketch.add
        for x in values.tolist():
            add(x)

    def merge(self, other: Quantiles) -> None:
        if other.sketch is None:
            for part in other.parts:
                self.add(part)
            return
        if self.sketch is None:
            mine = self.parts
            self.parts, self.sketch = [], DDSketch(RELATIVE_ACCURACY)
            for part in mine:
                self._count(part)
        self.sketch.merge(other.sketch)
        self.n += other.n
        self.max = max(self.max, other.max)

    def stats(self) -> Stats | None:
        if not self.n:
            return None
        if self.sketch is None:
            qs = np.percentile(np.concatenate(self.parts), QUANTILES)
            q = {k: float(x) for k, x in zip(QUANTILES, qs, strict=True)}
        else:
            q = {k: float(self.sketch.get_quantile_value(k / 100) or 0.0) for k in QUANTILES}
        return Stats(self.n, q, self.max)


@dataclass(slots=True)
class Measures:
    """Count one backend and family: how many exchanges, and the values of each measure."""

    exchanges: int
    values: dict[str, Quantiles]


LatencyCounts = dict[tuple[str, str], Measures]
"""What `collect_latency` counts, per (label, family)."""


def collect_latency(ex: pd.DataFrame) -> LatencyCounts:
    """Collect the measures of these exchanges per backend and family.

    Their labels and families are filled."""
    frame = pd.DataFrame(
        {
            "label": ex["label"].astype(str),
            "family": ex["family"].astype(str),
            "ttfb": pd.to_numeric(ex["ttfb_ms"], errors="coerce").astype("float64"),
            "ttfe": ex["first_event_ms"].astype("float64"),
            "duration": pd.to_numeric(ex["duration_ms"], errors="coerce").astype("float64"),
        }
    )
    out: LatencyCounts = {}
    for (lab, fam), part in frame.groupby(["label", "family"], sort=False):
        values = {m: Quantiles(part[m].to_numpy()) for m in METRICS}
        out[(str(lab), str(fam))] = Measures(len(part), values)
    return out


def _merged(parts: Iterable[Quantiles]) -> Quantiles:
    out = Quantiles()
    for q in parts:
        out.merge(q)
    return out


@dataclass(slots=True)
class Bar:
    """Place one backend's box in a latency chart, its pixel positions computed."""

    label: str
    stats: Stats
    y: int
    x5: float
    x25: float
    x50: float
    x75: float
    x95: float

    @property
    def median_at(self) -> float:
        """Centre the median's label on the median, unless that pushes it into the names.

        The names are the backends', left of the plot."""
        return max(self.x50, CHART_LEFT + VALUE_HALF)


@dataclass(slots=True)
class Chart:
    metric: str
    title: str
    bars: list[Bar]
    ticks: list[tuple[float, float]]
    width: int
    height: int


CHART_LEFT, CHART_WIDTH, ROW = 130, 460, 44
"""The plot's left edge and width, and the height of one backend's row.

A row holds the median's value above its box, the box, and the p95's value after its whisker."""
VALUE_HALF = 40
"""Half the width of a value's label: a label centred on the median stays in the plot."""


def chart(metric: str, title: str, per_label: Mapping[str, Stats]) -> Chart:
    top = max((s.q[95] for s in per_label.values()), default=1.0) or 1.0
    axis = nice_ticks(top)
    scale = CHART_WIDTH / (axis[-1] or 1.0)

    def x(v: float) -> float:
        return round(CHART_LEFT + min(v, axis[-1]) * scale, 1)

    bars = [
        Bar(label, s, 8 + i * ROW, x(s.q[5]), x(s.q[25]), x(s.q[50]), x(s.q[75]), x(s.q[95]))
        for i, (label, s) in enumerate(per_label.items())
    ]
    return Chart(
        metric,
        title,
        bars,
        [(t, x(t)) for t in axis],
        CHART_LEFT + CHART_WIDTH + 90,
        28 + len(bars) * ROW,
    )


@dataclass(slots=True)
class Latency:
    charts: list[Chart]
    table: list[dict[str, Any]]
    per_label: dict[str, dict[str, Stats]]


def finish_latency(counts: LatencyCounts, labels: Sequence[str]) -> Latency:
    """Compute quantiles, charts and the table from the counted measures."""
    per_label: dict[str, dict[str, Stats]] = {}
    for label in labels:
        mine = [v for (lab, _), v in counts.items() if lab == label]
        per_label[label] = {
            m: s for m in METRICS if (s := _merged(v.values[m] for v in mine).stats()) is not None
        }
    charts = []
    for m in ("ttfe", "duration"):
        rows = {label: per_label[label][m] for label in labels if m in per_label[label]}
        if rows:
            charts.append(chart(m, METRICS[m], rows))
    table = []
    for (lab, fam), measures in counts.items():
        row: dict[str, Any] = {"label": lab, "family": fam, "n": measures.exchanges}
        for m in METRICS:
            s = measures.values[m].stats()
            row[m] = s.q[50] if s else None
            row[f"{m}_p95"] = s.q[95] if s else None
        table.append(row)
    order = {label: i for i, label in enumerate(labels)}
    table.sort(key=lambda r: (order.get(r["label"], len(order)), r["family"]))
    return Latency(charts, table, per_label)
