"""How deep a body nests: `depth_exceeds` against a plain recursive count, at the limit."""

from __future__ import annotations

import random
from typing import Any

from wirediff.record.validate import MAX_DEPTH, depth_exceeds


def depth(value: Any) -> int:
    """Count the levels of lists and objects in `value`, recursively."""
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


PLAIN = [1, "a", None, 2.5, True, "{[{[", "}]", float("nan")]
"""Leaves of every JSON kind, and text with brackets in it."""
ODD = [1 << 70, "\udcff"]
"""Leaves a JSON writer may refuse: an integer past 64 bits, a lone surrogate."""


def nested(rng: random.Random, levels: int, odd: bool) -> Any:
    """Build a value nested exactly `levels` deep, with shallow siblings along the way."""
    if levels == 0:
        return rng.choice(PLAIN + ODD if odd else PLAIN)
    inner = nested(rng, levels - 1, odd)
    siblings = [nested(rng, rng.randrange(min(levels, 3)), odd) for _ in range(rng.randrange(3))]
    if rng.random() < 0.5:
        items = [*siblings, inner]
        rng.shuffle(items)
        return items
    return {**{f"k{i}": s for i, s in enumerate(siblings)}, "deep": inner}


def test_a_value_exceeds_the_limit_exactly_when_it_nests_deeper() -> None:
    rng = random.Random(30)
    for _ in range(400):
        levels = rng.choice([0, 1, 2, 3, 4, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 300])
        value = nested(rng, levels, odd=rng.random() < 0.2)
        for limit in (MAX_DEPTH, MAX_DEPTH + 1, 3):
            assert depth_exceeds(value, limit) == (depth(value) > limit), (levels, limit)


def test_many_shallow_containers_are_not_deep_and_one_chain_is() -> None:
    wide = {"messages": [{"role": "user", "content": [{"type": "text"}]} for _ in range(500)]}
    assert not depth_exceeds(wide)
    assert depth_exceeds([[[[0]]]], 3) and not depth_exceeds([[[0]]], 3)
    chain: Any = 0
    for i in range(MAX_DEPTH + 1):  # lists and objects in turn, 65 levels, with siblings
        chain = [1, "x", chain] if i % 2 else {"a": chain, "b": [2] if i else 2}
    assert depth(chain) == MAX_DEPTH + 1
    assert depth_exceeds(chain) and not depth_exceeds(chain, MAX_DEPTH + 1)
    assert depth_exceeds(0, 0) and not depth_exceeds("text")
