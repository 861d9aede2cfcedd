"""Latency per backend: time to first byte, to the first SSE event, and duration, as
quantiles and as box plots drawn in inline SVG (pixel positions computed here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from wirediff.reports.formatters import nice_ticks

__all__ = ["Latency", "latency"]

QUANTILES = (5, 25, 50, 75, 90, 95, 99)


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


@dataclass(slots=True)
class Bar:
    """One backend's box in a latency chart (pixel positions precomputed)."""

    label: str
    stats: Stats
    y: int
    x5: float
    x25: float
    x50: float
    x75: float
    x95: float


@dataclass(slots=True)
class Chart:
    metric: str
    title: str
    bars: list[Bar]
    ticks: list[tuple[float, float]]
    width: int
    height: int


CHART_LEFT, CHART_WIDTH, ROW = 130, 460, 30


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
        CHART_LEFT + CHART_WIDTH + 60,
        28 + len(bars) * ROW,
    )


@dataclass(slots=True)
class Latency:
    charts: list[Chart]
    table: list[dict[str, Any]]
    per_label: dict[str, dict[str, Stats]]


def latency(ex: pd.DataFrame, events: pd.DataFrame, labels: Sequence[str]) -> Latency:
    """Time to first byte, to the first SSE event, and duration, per backend (and family)."""
    first = (
        events.groupby("id", sort=False)["t_ms"].min()
        if len(events)
        else pd.Series(dtype="float64")
    )
    frame = pd.DataFrame(
        {
            "label": ex["label"].astype(str),
            "family": ex["family"].fillna("other").astype(str),
            "ttfb": pd.to_numeric(ex["ttfb_ms"], errors="coerce"),
            "ttfe": ex["id"].map(first).astype("float64"),
            "duration": pd.to_numeric(ex["duration_ms"], errors="coerce"),
        }
    )
    metrics = {
        "ttfe": "Time to first SSE event",
        "ttfb": "Time to first byte",
        "duration": "Duration",
    }
    per_label: dict[str, dict[str, Stats]] = {}
    for label in labels:
        part = frame[frame["label"] == label]
        per_label[label] = {m: s for m in metrics if (s := stats(part[m])) is not None}
    charts = []
    for m in ("ttfe", "duration"):
        rows = {label: per_label[label][m] for label in labels if m in per_label[label]}
        if rows:
            charts.append(chart(m, metrics[m], rows))
    table = []
    for (lab, fam), part in frame.groupby(["label", "family"], sort=False):
        row: dict[str, Any] = {"label": str(lab), "family": str(fam), "n": len(part)}
        for m in metrics:
            s = stats(part[m])
            row[m] = s.q[50] if s else None
            row[f"{m}_p95"] = s.q[95] if s else None
        table.append(row)
    order = {label: i for i, label in enumerate(labels)}
    table.sort(key=lambda r: (order.get(r["label"], len(order)), r["family"]))
    return Latency(charts, table, per_label)
