"""Counting exchanges by their answer's status from its values gives what a text per exchange
gives."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from wirediff.reports.captures import SKIPPED
from wirediff.reports.model import _status_mix


def per_exchange(ex: pd.DataFrame) -> Counter[tuple[str, str]]:
    """Say each exchange's status as a text, then count: the oracle."""
    no_answer = ex["error_kind"].astype(object).where(ex["error_kind"] == SKIPPED, "none")
    status = ex["status"].astype(object).where(ex["status"].notna(), no_answer).astype(str)
    soft = ex["soft_error"].eq(True).fillna(False).to_numpy(dtype=bool)
    status = status.where(~soft, status + " error body")
    return Counter(zip(ex["label"].tolist(), status.tolist(), strict=True))


def exchanges(rng: np.random.Generator, n: int, *, huge: bool) -> pd.DataFrame:
    statuses = [200, 404, 500, None, 101, 0]
    status = pd.Series([statuses[i] for i in rng.integers(0, len(statuses), n)], dtype="Int64")
    if huge:  # past 64 bits, the index keeps statuses as floats
        status = status.astype("float64").mask(np.arange(n) == rng.integers(0, n), 1e20)
    kinds = np.array([None, SKIPPED, "timeout", "stopped_in_flight"], dtype=object)
    soft = pd.array([[True, False, None][i] for i in rng.integers(0, 3, n)], dtype="boolean")
    return pd.DataFrame(
        {
            "label": np.array(["openai", "ollama", "é"], dtype=object)[rng.integers(0, 3, n)],
            "status": status,
            "error_kind": pd.Categorical(kinds[rng.integers(0, len(kinds), n)]),
            "soft_error": soft,
        }
    )


@pytest.mark.parametrize("seed", range(30))
def test_status_mix_is_that_of_a_text_per_exchange(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ex = exchanges(rng, int(rng.integers(1, 300)), huge=seed % 5 == 0)
    assert _status_mix(ex) == per_exchange(ex)
