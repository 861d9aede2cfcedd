"""What the engine keeps on disk and how it reads it back: findings merged by their places,
each a line of JSON, and each task's objects left out of collections."""

from __future__ import annotations

import gc
import json
import random
import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest

from wirediff._support import task_gc
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.engine.listing import place_bytes
from wirediff.engine.spill import Spill
from wirediff.reports.items import finding_line


def _place(rng: random.Random) -> tuple[Any, ...]:
    """A place as `finding_order` makes them: a divergence, a client row, a conformance row."""
    pair = (rng.randint(0, 1), rng.randint(0, 1 << 40))
    at, row = rng.randint(0, 1 << 40), rng.randint(0, 5000)
    return rng.choice(
        [
            (0, pair, (rng.randint(0, 1), rng.randint(0, 9)), row),
            (1, pair, at, row),
            (2, at, at, row),
        ]
    )


def test_places_as_bytes_sort_as_the_places_do() -> None:
    rng = random.Random(7)
    places = [_place(rng) for _ in range(5000)]
    places += [(0, (0, 3), (0, 3), 1), (0, (0, 3), (0, 3), 0), (1, (1, 0), 2, 0), (2, 2, 2, 0)]
    assert sorted(places, key=place_bytes) == sorted(places)


def test_findings_come_back_merged_by_place_across_partitions() -> None:
    rng = random.Random(3)
    places = sorted({_place(rng) for _ in range(3000)})
    parts: list[list[tuple[bytes, str]]] = [[], [], []]
    for n, place in enumerate(places):
        parts[rng.randrange(3)].append((place_bytes(place), f"finding {n}\n"))
    spill = Spill()
    try:
        for part in parts:
            spill.add_findings(part)
        rows = spill.finding_rows()
        assert rows.count == len(places)
        assert rows.lines is not None
        assert list(rows.lines()) == [f"finding {n}\n" for n in range(len(places))]
    finally:
        spill.close()


def test_closing_removes_the_files() -> None:
    spill = Spill()
    spill.add_findings([(place_bytes((2, n, n, 0)), "x" * 100 + "\n") for n in range(1000)])
    spill.close()
    assert not Path(spill.directory).exists()


class _Node:
    def __init__(self) -> None:
        self.me = self


def test_cycles_tasks_leave_are_collected_once_there_are_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Frozen garbage is out of reach of the collector: past `LEFT_BY_TASKS` objects left
    by earlier tasks, the next task starts with a collection."""
    import wirediff._support as support

    # what earlier tests of this process left frozen is theirs: their unclosed sockets
    # would warn here, at the collection this test makes
    gc.unfreeze()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    monkeypatch.setattr(support, "LEFT_BY_TASKS", 10_000)
    try:
        with task_gc():
            node = _Node()
            gone = weakref.ref(node)
            del node
            held = [{"n": n} for n in range(20_000)]
        del held
        assert gone() is not None  # a cycle: reference counting does not free it
        with task_gc():
            assert gone() is None
    finally:
        gc.unfreeze()


def test_a_finding_line_is_its_dict_as_json_on_one_line() -> None:
    rng = random.Random(3)
    values: list[Any] = ["a", 'b"', "c\n%s", "\\", "ü", "\u2028", "", "\x00", "%", 1 << 70]
    rows = [[rng.choice(values) for _ in DIVERGENCE_COLUMNS] for _ in range(200)]
    for row in rows:
        text = finding_line(row)
        assert text.endswith("\n") and text.count("\n") == 1
        assert json.loads(text) == dict(zip(DIVERGENCE_COLUMNS, row, strict=True))
    with pytest.raises(ValueError):
        finding_line(rows[0][:-1])
