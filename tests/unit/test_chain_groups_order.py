"""A chain's diagnoses are grouped by chain wherever its rows are in the frame."""

from __future__ import annotations

import random

import pandas as pd
import pytest

from wirediff.analysis.diagnosis.explain import DIAGNOSIS_COLUMNS, diagnosis_frame
from wirediff.reports.hops import ChainGroup, chain_groups

CODES = ["auth_dropped", "method_changed", "endpoint_not_implemented", "stream_truncated"]


def rows(rng: random.Random, chains: int) -> list[dict[str, object]]:
    """Make each chain's rows together, as `diagnose_chains` writes them."""
    out = []
    for n in range(chains):
        label = rng.choice(["openai", "ollama"])
        for code in rng.sample(CODES, rng.randint(1, 3)):
            out.append(
                {
                    "chain_id": f"ch-{n}",
                    "code": code,
                    "exchange_ids": [f"x{n}"],
                    "label": label,
                    "endpoint": "/v1/chat/completions",
                    "provider": "openai",
                    "summary": f"{code} in x{n}",
                    "evidence": [f"said {rng.randint(0, 2)}"],
                    "remedy": "fix it",
                    "recovered": n % 3 == 0,
                    "title": "POST /v1/chat/completions → 401",
                }
            )
    return out


def frame(given: list[dict[str, object]]) -> pd.DataFrame:
    return diagnosis_frame({c: [r[c] for r in given] for c in DIAGNOSIS_COLUMNS})


def seen(groups: list[ChainGroup]) -> list[tuple[object, ...]]:
    return [
        (g.anchor, g.codes, g.count, g.recovered, [c.chain_id for c in g.chains], g.evidence)
        for g in groups
    ]


@pytest.mark.parametrize("seed", range(20))
def test_rows_of_a_chain_apart_group_as_rows_together(seed: int) -> None:
    rng = random.Random(seed)
    by_chain: dict[object, list[dict[str, object]]] = {}
    for r in rows(rng, rng.randint(2, 12)):
        by_chain.setdefault(r["chain_id"], []).append(r)
    left = [list(rs) for rs in by_chain.values()]
    apart = []  # the chains' rows interleaved, each chain's in its order
    while left:
        pick = rng.choice(left)
        apart.append(pick.pop(0))
        left = [rs for rs in left if rs]
    firsts = list(dict.fromkeys(r["chain_id"] for r in apart))
    together = [r for chain in firsts for r in by_chain[chain]]
    groups = chain_groups(frame(together), {})
    assert seen(chain_groups(frame(apart), {})) == seen(groups)
    assert sum(g.count for g in groups) == len(by_chain)
