"""Chains group alike wherever their rows are in the frame, however their records are read."""

from __future__ import annotations

import random
from typing import Any, TypeVar

import pandas as pd
import pytest

from tests.fixtures.records import chat_record
from wirediff.analysis.diagnosis.evidence import EvidenceById, evidence_key, packed
from wirediff.analysis.diagnosis.explain import DIAGNOSIS_COLUMNS, diagnosis_frame
from wirediff.reports.hops import ChainGroup, chain_groups

T = TypeVar("T")
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


def evidence_pool(rng: random.Random) -> list[Any]:
    """Make evidence records that differ in what a chain's drawing reads of them."""
    return [
        {
            "id": "",
            "listener": rng.choice(["reverse:http://a", "regular"]),
            "label": rng.choice(["openai", "ollama"]),
            "request": {"method": rng.choice(["GET", "POST"]), "path": "/v1/chat/completions"},
            "response": {"status": rng.choice([401, 404, 405])},
            "error": None,
            "tags": {"auth": {"header": "authorization", "scheme": "Bearer"}},
        }
        for _ in range(4)
    ]


@pytest.mark.parametrize("seed", range(30))
def test_chains_keyed_by_evidence_keys_group_as_read_one_by_one(seed: int) -> None:
    """Chains keyed by evidence keys group as their records read one by one group them.

    Most chains share a key; chains alike but for one thing stay apart."""
    rng = random.Random(seed)
    pool = evidence_pool(rng)

    def mostly(*values: T) -> T:  # the first value, else one of the others
        return values[0] if rng.random() < 0.8 else rng.choice(values[1:])

    keys, shared = {}, {}
    given = []
    for n in range(rng.randint(40, 80)):
        ids = [f"x{n}.{k}" for k in range(int(mostly(1, 2)))]
        for rid in ids:
            record = mostly(*pool)
            keys[rid] = evidence_key(record)
            shared[keys[rid]] = packed(record)
        chain = {
            "chain_id": f"ch-{n}",
            "exchange_ids": ids,
            "label": mostly("openai", "ollama"),
            "endpoint": mostly("/v1/chat/completions", "/v1/responses"),
            "provider": mostly("openai", "ollama"),
            "evidence": [mostly("said 0", "said 1")],
            "recovered": mostly(False, True),
            "title": "POST /v1/chat/completions → 401",
        }
        for code in {mostly(*CODES), mostly(*CODES)}:
            given.append(
                {
                    **chain,
                    "code": code,
                    "summary": mostly(f"{code} here", f"{code} there"),
                    "remedy": mostly("fix it", "retry"),
                }
            )
    evidence = EvidenceById(keys, shared)
    keyed = chain_groups(frame(given), evidence)
    assert keyed == chain_groups(frame(given), {rid: evidence[rid] for rid in evidence})
    assert max(g.count for g in keyed) > 1


def test_records_read_again_are_not_keyed_alike_by_their_evidence_keys() -> None:
    """Two records read again can share an evidence key and still differ (NaN reads as null
    to the key): their chains stay apart, as their records read one by one keep them."""
    evidence = EvidenceById({}, {})
    evidence.add(dict(chat_record(), id="a", label=None))  # type: ignore[arg-type]
    evidence.add(dict(chat_record(), id="b", label=float("nan")))  # type: ignore[arg-type]
    assert evidence.key("a") == evidence.key("b")
    given = [
        {
            "chain_id": f"ch-{rid}",
            "code": "auth_dropped",
            "exchange_ids": [rid],
            "label": "openai",
            "endpoint": "/v1/chat/completions",
            "provider": "openai",
            "summary": "auth_dropped here",
            "evidence": ["said 0"],
            "remedy": "fix it",
            "recovered": False,
            "title": "POST /v1/chat/completions → 401",
        }
        for rid in ("a", "b")
    ]
    keyed = chain_groups(frame(given), evidence)
    assert keyed == chain_groups(frame(given), {rid: evidence[rid] for rid in evidence})
    assert [g.count for g in keyed] == [1, 1]
