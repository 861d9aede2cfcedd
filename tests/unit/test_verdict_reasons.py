"""A verdict cell's reasons, summed up from its findings on numbers alone, are what sorting
and grouping the findings by their strings gives: the same problems, counts, worst severity,
words and first finding, in the same order, whether the findings held strings or categories."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pandas as pd
import pytest

from wirediff.analysis.comparison import verdicts
from wirediff.analysis.comparison.kinds import SEVERITIES
from wirediff.analysis.comparison.pairing import factorize_together
from wirediff.analysis.comparison.sameness import problem_key
from wirediff.analysis.comparison.verdicts import RANKS, Findings, Reason, _reasons

TEXTS = ("b broke", "a broke", "`x` is missing", "c", "")
PATHS = ("choices[0].delta", "usage", "headers.x-request-id", "events[x]")
EVIDENCE = ("", "", "openai-python raised `KeyError: 'id'` on call_ab12", "raised 3 times")


def by_strings(findings: pd.DataFrame, cell_at: np.ndarray) -> list[tuple[Any, ...]]:
    """Sum the reasons up as the cells did by sorting and grouping the findings' strings."""
    said, texts = pd.factorize(findings["text"], sort=True)
    pairs = zip(findings["path"], findings["evidence"], strict=True)
    keys = [problem_key(str(p), str(e)) for p, e in pairs]
    problem, problem_keys = pd.factorize(np.array(keys, dtype=object))
    mine = pd.DataFrame(
        {
            "row": findings["row"].to_numpy(),
            "_cell": cell_at[findings["row"].to_numpy()],
            "_rank": findings["severity"].map(RANKS).fillna(len(SEVERITIES)).to_numpy(int),
            "_order": np.arange(len(findings)),
            "_header": findings["kind"].to_numpy() == "header",
            "_problem": problem,
            "_text": said,
        }
    )
    mine = mine[mine["_cell"].to_numpy() >= 0]
    mine = mine.sort_values(["_rank", "_text", "_order"], kind="stable")
    problems = mine.groupby(["_cell", "_header", "_problem"], sort=False)
    firsts = problems[["_rank", "_text"]].first()
    return [
        (at, header, problem_keys[key], Reason(int(n), int(rank), text, first))
        for (at, header, key), n, rank, text, first in zip(
            firsts.index.tolist(),
            problems["row"].nunique().tolist(),
            firsts["_rank"].tolist(),
            texts.to_numpy(dtype=object)[firsts["_text"].to_numpy()].tolist(),
            problems["_order"].min().tolist(),
            strict=True,
        )
    ]


def generated(rng: random.Random) -> tuple[pd.DataFrame, np.ndarray]:
    """Findings of a few exchanges, some in no cell, of repeated words, paths and severities."""
    exchanges = rng.randint(1, 12)
    n = rng.randint(1, 60)
    findings = pd.DataFrame(
        {
            "row": [rng.randrange(exchanges) for _ in range(n)],
            "severity": [rng.choice([*SEVERITIES, "unknown"]) for _ in range(n)],
            "kind": [rng.choice(["header", "missing", "type"]) for _ in range(n)],
            "path": [rng.choice(PATHS) for _ in range(n)],
            "evidence": [rng.choice(EVIDENCE) for _ in range(n)],
            "text": [rng.choice(TEXTS) for _ in range(n)],
        }
    )
    cell_at = np.array([rng.choice([-1, 0, 1, 2]) for _ in range(exchanges)], dtype=np.int64)
    return findings, cell_at


def coded(findings: pd.DataFrame) -> Findings:
    """The findings as the cells read them: each one's exchange and fact, and the facts."""
    columns = ["severity", "kind", "path", "evidence", "text"]
    fact, facts = factorize_together(*(findings[c] for c in columns))
    return Findings(findings["row"].to_numpy(), fact, pd.DataFrame(facts, columns=columns))


def as_categories(findings: pd.DataFrame) -> pd.DataFrame:
    """The same findings, their strings as categories in an order of their own."""
    out = findings.copy()
    for name in ("severity", "kind", "path", "evidence", "text"):
        values = sorted(set(out[name]), reverse=True)
        out[name] = pd.Categorical(out[name], categories=values)
    return out


@pytest.mark.parametrize("block", [verdicts.REASON_BLOCK, 7])
@pytest.mark.parametrize("seed", range(4))
def test_reasons_from_numbers_are_those_from_strings(
    seed: int, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verdicts, "REASON_BLOCK", block)  # 7: many blocks of a few exchanges
    rng = random.Random(seed)
    for _ in range(150):
        findings, cell_at = generated(rng)
        expected = by_strings(findings, cell_at)
        assert list(_reasons(coded(findings), cell_at)) == expected
        # categories unsorted: the words that sort first are still chosen by the strings
        assert list(_reasons(coded(as_categories(findings)), cell_at)) == expected


def test_no_finding_in_a_cell_gives_no_reason() -> None:
    findings, _ = generated(random.Random(7))
    assert list(_reasons(coded(findings), np.full(12, -1, dtype=np.int64))) == []
