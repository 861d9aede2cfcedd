"""Counting a report's findings by label and kind from codes gives what counting a text per
finding gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wirediff.reports.findings import Listed


def per_finding(found: Listed) -> dict[str, dict[str, int]]:
    """Count as a value per finding, the oracle."""
    counts = pd.DataFrame(
        {
            "label": found.labels[found.candidate],
            "kind": found.values["kind"].to_numpy()[found.template],
        }
    ).value_counts(sort=False)
    out: dict[str, dict[str, int]] = {}
    for (label, kind), n in zip(counts.index.tolist(), counts.tolist(), strict=True):
        out.setdefault(str(label), {})[str(kind)] = int(n)
    return out


def listed(rng: np.random.Generator, exchanges: int, templates: int, findings: int) -> Listed:
    names = np.array(["openai", "ollama", "lm studio", "é", ""], dtype=object)
    kinds = np.array(["header", "body", "status", "sse", "missing_field"], dtype=object)
    labels = names[rng.integers(0, rng.integers(1, len(names) + 1), exchanges)]
    values = pd.DataFrame({"kind": kinds[rng.integers(0, len(kinds), templates)]})
    ids = np.array([f"x{i}" for i in range(exchanges)], dtype=object)
    return Listed(
        values=values,
        template=rng.integers(0, templates, findings),
        candidate=rng.integers(0, exchanges, findings),
        baseline=rng.integers(-1, exchanges, findings),
        ids=pa.array(ids),
        labels=labels,
        families=ids,
        endpoints=ids,
    )


@pytest.mark.parametrize("seed", range(30))
def test_kind_counts_are_those_of_a_text_per_finding(seed: int) -> None:
    rng = np.random.default_rng(seed)
    found = listed(
        rng, int(rng.integers(1, 50)), int(rng.integers(1, 9)), int(rng.integers(0, 400))
    )
    assert found.kind_counts() == per_finding(found)


def test_no_findings_count_nothing() -> None:
    found = listed(np.random.default_rng(0), 3, 2, 0)
    assert found.kind_counts() == {}
