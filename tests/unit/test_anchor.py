"""An anchor's readable part, made from the text's start, is the whole text's slug cut."""

from __future__ import annotations

import hashlib
import random
import re

import pytest

from wirediff.reports.formatters import ANCHOR_HASH, SLUG, anchor


def whole(*parts: object) -> str:
    """Make the anchor from the whole text: the slug of every character, then cut."""
    text = "\x1f".join(str(p) for p in parts)
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:SLUG]
    return f"{slug}-{hashlib.sha1(text.encode()).hexdigest()[:ANCHOR_HASH]}"


@pytest.mark.parametrize("seed", range(10))
def test_an_anchor_is_the_whole_texts(seed: int) -> None:
    rng = random.Random(seed)
    letters = "abcXYZ019 -_.,/→İ()'\"\x1f"  # İ lowers to two characters
    for _ in range(500):
        parts: list[object] = [
            "".join(rng.choice(letters) for _ in range(rng.randint(0, 6 * SLUG)))
            for _ in range(rng.randint(1, 4))
        ]
        if rng.random() < 0.3:  # a run of dashes across where the start is cut
            parts.insert(0, "-" * rng.randint(3 * SLUG, 5 * SLUG) + "x")
        if rng.random() < 0.2:
            parts.append(rng.randint(0, 10**6))
        assert anchor(*parts) == whole(*parts)
