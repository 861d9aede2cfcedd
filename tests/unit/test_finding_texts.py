"""The findings' JSON Lines and CSV, assembled from each exchange's and each distinct finding's
text, are what writing each finding's row gives: `finding_line`, and pandas' `to_csv` of each
chunk scrubbed whole."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS, FINDING_COLUMNS
from wirediff.record.scrub import scrub_output
from wirediff.reports.findings import Listed
from wirediff.reports.items import csv_chunks, finding_line, finding_lines

TEXTS = np.array(
    [
        *("", "plain", "a,b", 'say "hi"', "two\nlines", "cr\rhere", " lead", "é ü", "{}", "{0}"),
        *("Authorization: Bearer abcdef123456", "sk-proj-ABCDEFGH0123", "max_tokens", "a\\b"),
        *("token", "x,token", '"', ",", "\n"),
    ],
    dtype=object,
)
"""Texts to write: quoted in CSV or not, escaped in JSON, credentials and near misses."""


def listed(rng: np.random.Generator, exchanges: int, templates: int, findings: int) -> Listed:
    def texts(n: int) -> np.ndarray:
        return np.asarray(TEXTS[rng.integers(0, len(TEXTS), n)], dtype=object)

    ids = np.array([f"x{i}{TEXTS[i % len(TEXTS)]}" for i in range(exchanges)], dtype=object)
    return Listed(
        values=pd.DataFrame({c: texts(templates) for c in FINDING_COLUMNS}),
        template=rng.integers(0, templates, findings),
        candidate=rng.integers(0, exchanges, findings),
        baseline=rng.integers(-1, exchanges, findings),
        ids=pa.array(ids),
        labels=texts(exchanges),
        families=texts(exchanges),
        endpoints=texts(exchanges),
    )


def to_csv(found: Listed, chunk: int) -> str:
    """Write the table with pandas, a chunk at a time, each scrubbed whole: the oracle."""
    if not len(found):
        return pd.DataFrame(columns=DIVERGENCE_COLUMNS).to_csv(index=False)
    return "".join(
        scrub_output(found.frame(slice(s, s + chunk)).to_csv(index=False, header=not s))
        for s in range(0, len(found), chunk)
    )


@pytest.mark.parametrize("seed", range(25))
def test_assembled_texts_are_those_of_each_row(seed: int) -> None:
    rng = np.random.default_rng(seed)
    found = listed(
        rng, int(rng.integers(1, 40)), int(rng.integers(1, 12)), int(rng.integers(0, 300))
    )
    chunk = int(rng.integers(1, 120))
    assert "".join(csv_chunks(found, chunk)) == to_csv(found, chunk)
    rows = found.frame().itertuples(index=False, name=None)
    assert "".join(finding_lines(found, chunk)) == "".join(finding_line(r) for r in rows)


def test_no_findings_write_the_header_alone_and_no_line() -> None:
    found = listed(np.random.default_rng(0), 3, 2, 0)
    assert "".join(csv_chunks(found)) == ",".join(DIVERGENCE_COLUMNS) + "\n" == to_csv(found, 5)
    assert list(finding_lines(found)) == []
