"""The findings' JSON Lines and CSV, assembled from each exchange's and each distinct finding's
text, are what writing each finding's row gives: `finding_line`, and pandas' `to_csv` of each
row, scrubbed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tests.fixtures.analysed import finding_line
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS, FINDING_COLUMNS
from wirediff.record.scrub import scrub_output
from wirediff.reports.findings import Listed
from wirediff.reports.items import csv_chunks, finding_lines

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


def frame(found: Listed) -> pd.DataFrame:
    """Make the findings' table with pandas, a row each."""
    values = found.values.iloc[found.template].reset_index(drop=True)
    return pd.concat([pd.DataFrame(found.meta()), values], axis=1)[DIVERGENCE_COLUMNS]


def to_csv(found: Listed) -> str:
    """Write the table with pandas, each row scrubbed on its own: the oracle."""
    table = frame(found)
    rows = (table.iloc[[k]].to_csv(index=False, header=False) for k in range(len(table)))
    return table.head(0).to_csv(index=False) + "".join(scrub_output(row) for row in rows)


@pytest.mark.parametrize("seed", range(25))
def test_assembled_texts_are_those_of_each_row(seed: int) -> None:
    rng = np.random.default_rng(seed)
    found = listed(
        rng, int(rng.integers(1, 40)), int(rng.integers(1, 12)), int(rng.integers(0, 150))
    )
    chunk = int(rng.integers(1, 60))
    assert "".join(csv_chunks(found, chunk)) == to_csv(found)
    rows = frame(found).itertuples(index=False, name=None)
    assert "".join(finding_lines(found, chunk)) == "".join(finding_line(r) for r in rows)


def test_no_findings_write_the_header_alone_and_no_line() -> None:
    found = listed(np.random.default_rng(0), 3, 2, 0)
    assert "".join(csv_chunks(found)) == ",".join(DIVERGENCE_COLUMNS) + "\n" == to_csv(found)
    assert list(finding_lines(found)) == []


def test_a_row_ending_in_a_scheme_keeps_the_next_rows_ids() -> None:
    """`token`, then the newline and the next row's id, is no token and its value."""
    found = listed(np.random.default_rng(1), 2, 1, 2)
    found.values["message"] = "refused: token"
    found.candidate[:], found.baseline[:] = [0, 1], [-1, -1]
    table = "".join(csv_chunks(found, 2))
    assert table.count("\nx1plain,") == 1 and table.count(",x1plain,") == 1, table
