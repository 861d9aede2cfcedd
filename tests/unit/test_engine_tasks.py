"""What a task leaves behind: its objects out of collections until there are many, and
each finding written as one line of JSON."""

from __future__ import annotations

import gc
import json
import random
import warnings
import weakref
from typing import Any

import pytest

from tests.fixtures.analysed import finding_line
from wirediff._support import task_gc
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS


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
            held = [[n] for n in range(20_000)]  # objects the collector counts
        del held
        assert gone() is not None  # a cycle: reference counting does not free it
        with task_gc():
            assert gone() is None
    finally:
        gc.unfreeze()


def test_objects_frozen_past_the_limit_are_collected_though_no_task_counted_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Objects made between tasks are frozen at a task's end though no task counted them:
    the exact count of frozen objects, every `FROZEN_CHECK_TASKS` tasks, still collects."""
    import wirediff._support as support

    gc.unfreeze()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    monkeypatch.setattr(support, "_left_by_tasks", 0)
    monkeypatch.setattr(support, "FROZEN_CHECK_TASKS", 1 << 30)
    try:
        with task_gc():
            pass
        monkeypatch.setattr(support, "LEFT_BY_TASKS", gc.get_freeze_count() + 10_000)
        between = [[n] for n in range(30_000)]  # made between tasks
        gc.collect(0)  # the collector's count of them starts again, as its own runs do
        with task_gc():
            node = _Node()
            gone = weakref.ref(node)
            del node
        assert support._left_by_tasks < 10_000, "no task counted the objects made between"
        with task_gc():
            assert gone() is not None, "the count alone starts no collection"
        monkeypatch.setattr(support, "FROZEN_CHECK_TASKS", 1)
        with task_gc():
            assert gone() is None
        del between
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
