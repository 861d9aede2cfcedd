"""Each backend's first exchanges are those a walk over the rows in order finds."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pandas as pd
import pytest

from wirediff.analysis.diagnosis.explain import BACKEND_SCAN, Backends, backend_key


def walked(exchanges: pd.DataFrame) -> dict[tuple[Any, Any], list[int]]:
    """Find the first `BACKEND_SCAN` rows of each backend by walking the rows in order."""
    out: dict[tuple[Any, Any], list[int]] = {}
    heads = exchanges[["label", "listener"]].astype(object)
    for row, (label, listener) in enumerate(zip(heads["label"], heads["listener"], strict=True)):
        rows = out.setdefault(backend_key(label, listener), [])
        if len(rows) < BACKEND_SCAN:
            rows.append(row)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_first_rows_of_each_backend(seed: int) -> None:
    rng = random.Random(seed)
    labels: list[Any] = ["openai", "ollama", None, np.nan, 5]  # a label that is no text: none
    listeners: list[Any] = ["reverse:http://a", "replay:http://b", None]
    n = rng.randint(0, 4 * BACKEND_SCAN)
    frame = pd.DataFrame(
        {
            "label": [rng.choice(labels) for _ in range(n)],
            "listener": [rng.choice(listeners) for _ in range(n)],
        },
        index=rng.sample(range(10 * n + 1), n),  # rows are places, whatever the index says
    )
    if seed % 2:
        frame = frame.astype({"listener": "category"})
    found = Backends(frame, lambda rows: []).rows
    assert found == walked(frame)
    assert list(found) == list(walked(frame))
