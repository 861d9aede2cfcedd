"""What the engine keeps on disk and how it reads it back: findings merged by their places,
lists written as `json.dump` writes them, and each task's objects left out of collections."""

from __future__ import annotations

import gc
import io
import json
import os
import random
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest

from wirediff._support import task_gc
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.engine.spill import Spill, merge_runs, place_bytes
from wirediff.reports.items import finding_text, item_text, write_list
from wirediff.reports.render import copy_file


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
        parts[rng.randrange(3)].append((place_bytes(place), f"finding {n}"))
    spill = Spill()
    try:
        for part in parts:
            spill.add_findings(part)
        rows = spill.finding_rows()
        assert rows.count == len(places)
        assert rows.texts is not None
        assert list(rows.texts()) == [f"finding {n}" for n in range(len(places))]
    finally:
        spill.close()


def test_sorted_runs_of_any_chunks_merge_into_one_order() -> None:
    rng = random.Random(11)
    for _ in range(200):
        places = rng.sample(range(10_000), rng.randint(0, 300))
        runs: list[list[tuple[bytes, int]]] = [[] for _ in range(rng.randint(1, 6))]
        for p in sorted(places):
            runs[rng.randrange(len(runs))].append((p.to_bytes(2), p))
        chunked = []
        for run in runs:
            cuts = sorted(rng.sample(range(1, len(run)), min(len(run) - 1, 4))) if run else []
            chunked.append(
                iter([run[a:b] for a, b in zip([0, *cuts], [*cuts, len(run)], strict=True)])
            )
        blocks = list(merge_runs(chunked))
        assert [p for block in blocks for _, p in block] == sorted(places)


def test_a_list_is_written_as_json_dump_writes_it() -> None:
    for count in (0, 1, 2, 2500):
        items = [{"kind": "value", "path": f"$.choices[{n}]", "n": n} for n in range(count)]
        fh = io.StringIO()
        fh.write('{\n "findings": ')
        write_list(fh, (item_text(i) for i in items))
        fh.write("\n}")
        assert fh.getvalue() == json.dumps({"findings": items}, ensure_ascii=False, indent=1)


def test_a_task_leaves_what_it_made_out_of_the_next_collections() -> None:
    """Without this, the first allocation after a task walks every object the task made and
    still holds; with it, the collector counts from nothing, and is on again."""
    assert gc.isenabled()
    try:
        with task_gc():
            assert not gc.isenabled()
            held = [{"n": n} for n in range(50_000)]
        assert gc.isenabled()
        assert gc.get_count()[0] < 100
        assert gc.get_freeze_count() >= len(held)
        with task_gc():  # what earlier tasks left frozen goes back to the collector
            assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


def test_the_findings_list_is_written_beside_as_write_list_writes_it() -> None:
    rng = random.Random(5)
    places = sorted({_place(rng) for _ in range(2500)})
    parts: list[list[tuple[bytes, str]]] = [[], []]
    for n, place in enumerate(places):
        parts[rng.randrange(2)].append((place_bytes(place), item_text({"n": n})))
    spill = Spill()
    try:
        for part in parts:
            spill.add_findings(part)
        spill.list_findings()
        rows = spill.finding_rows()
        assert rows.listed is not None and rows.texts is not None
        expected = io.StringIO()
        write_list(expected, rows.texts())
        assert rows.listed().read_text(encoding="utf-8") == expected.getvalue()
    finally:
        spill.close()


@pytest.mark.parametrize("kernel", ["copies", "refuses", "stops halfway"])
def test_the_findings_list_is_appended_whole_whoever_copies_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kernel: str
) -> None:
    """`write_summary` appends the list after the head it wrote: from where the source
    stands to its end, after what the destination holds, through the kernel or not."""
    data = random.Random(3).randbytes(3 << 20)
    (tmp_path / "src").write_bytes(data)
    real = os.copy_file_range
    calls = []

    def copy_file_range(src: int, dst: int, count: int) -> int:
        calls.append(count)
        if kernel == "refuses" or (kernel == "stops halfway" and len(calls) > 1):
            raise OSError(18, "Invalid cross-device link")
        return real(src, dst, min(count, 1 << 20))

    monkeypatch.setattr(os, "copy_file_range", copy_file_range)
    with (tmp_path / "src").open("rb") as src, (tmp_path / "dst").open("wb") as dst:
        src.seek(7)
        dst.write(b"head")
        dst.flush()
        copy_file(src, dst)
        dst.write(b"tail")
    assert (tmp_path / "dst").read_bytes() == b"head" + data[7:] + b"tail"
    assert calls


def test_closing_stops_the_findings_list_being_written() -> None:
    spill = Spill()
    spill.add_findings([(place_bytes((2, n, n, 0)), "x" * 100) for n in range(100_000)])
    spill.list_findings()
    spill.close()
    assert not any(t.name == "wirediff-findings" for t in threading.enumerate())
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


def test_items_are_written_as_json_dumps_writes_them() -> None:
    rng = random.Random(2)
    texts = ["a", 'b"', "c\n", "\\", "ü", "\u2028", ""]
    items: list[dict[str, Any]] = [{"evidence": ["x"], "ids": [], "n": [1, "a"], "d": {"k": ["v"]}}]
    for _ in range(300):
        items.append({f"k{i}": rng.sample(texts, rng.randint(0, 4)) for i in range(3)})
    for item in items:
        expected = json.dumps({"items": [item]}, ensure_ascii=False, indent=1)
        assert expected == '{\n "items": [\n  ' + item_text(item) + "\n ]\n}"


def test_a_finding_row_is_written_as_json_dumps_writes_its_dict() -> None:
    rng = random.Random(3)
    values: list[Any] = ["a", 'b"', "c\n%s", "\\", "ü", "\u2028", "", "\x00", "%"]
    rows = [[rng.choice(values) for _ in DIVERGENCE_COLUMNS] for _ in range(200)]
    rows += [[*row[:-1], odd] for row, odd in zip(rows, [None, 3, 1.5, ["x"]], strict=False)]
    for row in rows:
        item = dict(zip(DIVERGENCE_COLUMNS, row, strict=True))
        expected = json.dumps({"items": [item]}, ensure_ascii=False, indent=1)
        assert expected == '{\n "items": [\n  ' + finding_text(row) + "\n ]\n}"
    with pytest.raises(ValueError):
        finding_text(rows[0][:-1])
