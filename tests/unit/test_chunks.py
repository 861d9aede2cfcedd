"""The scan's byte ranges: every byte of every JSON Lines source once, in order, in ranges of
`CHUNK_BYTES` at most."""

from __future__ import annotations

import itertools
import random

from wirediff.engine.scan import CHUNK_BYTES, chunks
from wirediff.engine.sources import JSONL, PARQUET, Source


def covered(sources: list[Source], spans: list[tuple[int, int, int]]) -> None:
    for src, source in enumerate(sources):
        mine = [(a, b) for s, a, b in spans if s == src]
        if source.kind != JSONL:
            assert not mine
            continue
        assert mine[0][0] == 0 and mine[-1][1] == max(source.size, 1)
        assert all(b == a2 for (_, b), (a2, _) in itertools.pairwise(mine))
        assert all(0 < b - a <= CHUNK_BYTES for a, b in mine)


def test_every_byte_once_whatever_the_sizes() -> None:
    rng = random.Random(30)
    for _ in range(200):
        sources = [
            Source(PARQUET, "d", ("f",))
            if rng.random() < 0.1
            else Source(JSONL, f"f{i}", size=rng.choice([0, 1, 7, 1 << 20, CHUNK_BYTES + 3]))
            for i in range(rng.randint(1, 4))
        ]
        covered(sources, chunks(sources))


def test_a_large_file_keeps_ranges_of_chunk_bytes() -> None:
    source = Source(JSONL, "f", size=10 * CHUNK_BYTES)
    spans = chunks([source])
    assert len(spans) == 10 and {b - a for _, a, b in spans} == {CHUNK_BYTES}
