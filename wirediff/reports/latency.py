"""Measure latency per backend: time to first byte, to the first SSE event, and duration.

They are shown as exact quantiles and as box plots drawn in inline SVG, with pixel positions
computed here. The measures are columns of the index the analysis holds in memory, so the
quantiles are numpy's over every value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from wirediff.reports.formatters import nice_ticks

__all__ = ["Latency", "latency"]

QUANTILES = (5, 25, 50, 75, 90, 95, 99)
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


def stats(values: np.ndarray) -> Stats | None:
    """Give the quantiles of the values that are numbers, or None when none is."""
    v = values[~np.isnan(values)]
    if not len(v):
        return None
    qs = np.percentile(v, QUANTILES)
    return Stats(len(v), {k: float(x) for k, x in zip(QUANTILES, qs, strict=True)}, float(v.max()))


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


def latency(ex: pd.DataFrame, labels: Sequence[str]) -> Latency:
    """Measure these exchanges per backend and family, and per backend in charts.

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
    table = []
    for (lab, fam), part in frame.groupby(["label", "family"], sort=False):
        row: dict[str, Any] = {"label": lab, "family": fam, "n": len(part)}
        for m in METRICS:
            s = stats(part[m].to_numpy())
            row[m] = s.q[50] if s else None
            row[f"{m}_p95"] = s.q[95] if s else None
        table.append(row)
    order = {label: i for i, label in enumerate(labels)}
    table.sort(key=lambda r: (order.get(r["label"], len(order)), r["family"]))
    per_label: dict[str, dict[str, Stats]] = {label: {} for label in labels}
    for lab, part in frame.groupby("label", sort=False):
        if str(lab) in per_label:
            found = {m: stats(part[m].to_numpy()) for m in METRICS}
            per_label[str(lab)] = {m: s for m, s in found.items() if s is not None}
    charts = []
    for m in ("ttfe", "duration"):
        rows = {label: per_label[label][m] for label in labels if m in per_label[label]}
        if rows:
            charts.append(chart(m, METRICS[m], rows))
    return Latency(charts, table, per_label)
