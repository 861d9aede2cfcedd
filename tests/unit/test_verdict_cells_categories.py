"""Verdict cells are the same whether the exchanges' names come as text or as categories.

The analysis hands them categories, missing values named, so that a million exchanges are
grouped on codes; pandas' grouping by categories must keep the order of first appearance and
the names' text, as grouping by strings does, whatever order the categories have."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from wirediff.analysis.comparison.verdicts import Findings, verdict_cells
from wirediff.analysis.index.analyze import _named

NAMES = {
    "label": (["b", "a", None, "c"], ""),
    "family": (["responses", "chat.completions", None], "other"),
    "transport": (["http", "websocket", None], "http"),
    "method": (["POST", "GET", None], ""),
    "endpoint": (["/v1/x", "/v1/a", None], "(none)"),
}
FACTS = pd.DataFrame(
    {
        "severity": ["breaking", "cosmetic"],
        "kind": ["missing", "header"],
        "path": ["a", "b"],
        "evidence": ["", ""],
        "text": ["t1", "t2"],
    }
)


def exchanges(rng: random.Random, n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The same exchanges twice: their names as text, and as `_named` categories."""
    text, coded = {}, {}
    for name, (values, missing) in NAMES.items():
        column = pd.Series(
            pd.Categorical(
                [rng.choice(values) for _ in range(n)],
                categories=sorted({v for v in values if v is not None}, reverse=True),
            )
        )
        text[name] = column.astype("str").fillna(missing)
        coded[name] = _named(column, missing)
    rest = {
        "status": pd.array([rng.choice([200, 404, None]) for _ in range(n)], dtype="Int64"),
        "soft_error": pd.array([rng.choice([True, False, None]) for _ in range(n)], "boolean"),
        "outcome": np.array(
            [rng.choice(["ok", "breaking", "unsupported", "skipped"]) for _ in range(n)],
            dtype=object,
        ),
        "answered": np.array([rng.choice(["200", "404: no"]) for _ in range(n)], dtype=object),
        "not_implemented": np.array([rng.choice(["x)", "y)"]) for _ in range(n)], dtype=object),
        "answer_status": np.array([rng.choice(["200", "404"]) for _ in range(n)], dtype=object),
        "original_ok": np.array([rng.random() < 0.5 for _ in range(n)]),
    }
    return pd.DataFrame({**text, **rest}), pd.DataFrame({**coded, **rest})


@pytest.mark.parametrize("by", [("family", "transport"), ("endpoint",)])
def test_cells_of_categories_are_those_of_text(by: tuple[str, ...]) -> None:
    rng = random.Random(1)
    for _ in range(150):
        n = rng.randint(1, 40)
        as_text, as_categories = exchanges(rng, n)
        m = rng.randint(0, 30)
        findings = Findings(
            np.array([rng.randrange(n) for _ in range(m)], dtype=np.int32),
            np.array([rng.randrange(len(FACTS)) for _ in range(m)], dtype=np.int64),
            FACTS,
        )
        expected = verdict_cells(as_text, findings, by)
        got = verdict_cells(as_categories, findings, by)
        assert list(got.items()) == list(expected.items())
        assert all(type(k) is str for key in got for k in key)
