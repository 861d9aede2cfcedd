"""The latency quantiles: exact, per backend and family, and per backend over its families."""

from __future__ import annotations

import numpy as np
import pandas as pd

from wirediff.reports.latency import latency


def _exchanges(rng: np.random.Generator) -> pd.DataFrame:
    n = 300_000  # 75k values in each backend and family: exact at any size
    label = rng.choice(["openai", "ollama"], n)
    family = rng.choice(["chat", "responses"], n)
    # each family its own range, so a backend's quantiles over one family alone are wrong
    base = np.where(family == "chat", 10.0, 1000.0)
    duration = base + rng.exponential(50.0, n)
    duration[rng.random(n) < 0.1] = np.nan  # no measure: left out, not counted
    return pd.DataFrame(
        {
            "label": label,
            "family": family,
            "ttfb_ms": base / 2,
            "first_event_ms": np.full(n, np.nan),
            "duration_ms": duration,
        }
    )


def test_quantiles_are_numpys_over_every_value_of_a_backend_and_of_its_families() -> None:
    ex = _exchanges(np.random.default_rng(7))
    out = latency(ex, ["openai", "ollama", "vllm"])
    for label in ("openai", "ollama"):
        mine = ex[ex["label"] == label]["duration_ms"].dropna().to_numpy()
        got = out.per_label[label]["duration"]
        assert got.n == len(mine) and got.max == mine.max()
        assert got.q[95] == np.percentile(mine, 95) and got.q[5] == np.percentile(mine, 5)
        assert "ttfe" not in out.per_label[label]  # no stream: no time to its first event
    assert out.per_label["vllm"] == {}  # a backend with no exchange has no measures
    rows = {(r["label"], r["family"]): r for r in out.table}
    assert [(r["label"], r["family"]) for r in out.table] == sorted(
        rows, key=lambda k: (["openai", "ollama"].index(k[0]), k[1])
    )
    for (label, family), row in rows.items():
        part = ex[(ex["label"] == label) & (ex["family"] == family)]
        assert row["n"] == len(part)
        assert row["duration"] == np.percentile(part["duration_ms"].dropna(), 50)
        assert row["ttfe"] is None
    assert [c.metric for c in out.charts] == ["duration"]
