"""What the engine keeps on disk and how it reads it back: findings merged by their places,
lists written as `json.dump` writes them, and each task's objects left out of collections."""

from __future__ import annotations

import gc
import io
import json
import random
import weakref
from pathlib import Path
from typing import Any

import pytest

from wirediff._support import task_gc
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.engine.listing import (
    list_range,
    merged_texts,
    place_bytes,
    plan_ranges,
    write_findings,
)
from wirediff.engine.spill import Spill
from wirediff.reports.items import finding_text, item_text, write_list


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


@pytest.mark.parametrize("range_bytes", [1, 700, 5000, 1 << 30])
def test_ranges_of_any_size_cover_the_list_in_order_and_in_place(
    tmp_path: Path, range_bytes: int
) -> None:
    """Cut anywhere, the ranges hold every row once, in order of places, each range where
    the rows before it end: together, the list `write_list` writes."""
    rng = random.Random(range_bytes)
    places = sorted({_place(rng) for _ in range(3000)})
    parts: list[list[tuple[bytes, str]]] = [[] for _ in range(7)]
    for n, place in enumerate(places):  # texts of any size, some not ASCII
        text = item_text({"n": n, "s": "é" * rng.randrange(0, 3) + "x" * rng.randrange(0, 200)})
        parts[rng.randrange(len(parts) - 1)].append((place_bytes(place), text))
    stems = []
    for k, part in enumerate(parts):  # the last partition found nothing
        stems.append(tmp_path / f"part-{k}")
        write_findings(stems[-1], part)
    ranges = plan_ranges(stems, range_bytes)
    if range_bytes == 1:
        assert len(ranges) > 5  # a cut at every place sampled
    out = tmp_path / "list"
    out.write_bytes(b"")
    at = 0
    for i, r in enumerate(ranges):
        assert r.at == at
        at += list_range(r.pieces, str(out), r.at, i == 0)
        assert at == r.at + r.size
    expected = io.StringIO()
    texts = [text for part in parts for _, text in part]
    order = sorted(range(len(texts)), key=[p for part in parts for p, _ in part].__getitem__)
    write_list(expected, [texts[i] for i in order])
    assert out.read_bytes() + b"\n ]" == expected.getvalue().encode()
    assert list(merged_texts(stems)) == [texts[i] for i in order]


def test_a_texts_file_cut_short_is_an_error_not_a_hole(tmp_path: Path) -> None:
    rows = [(place_bytes((2, n, n, 0)), item_text({"n": n})) for n in range(50)]
    write_findings(tmp_path / "part", rows)
    texts = (tmp_path / "part").with_suffix(".texts")
    texts.write_bytes(texts.read_bytes()[:-10])
    (tmp_path / "list").write_bytes(b"")
    (r,) = plan_ranges([tmp_path / "part"])
    with pytest.raises(OSError, match="shorter than its places say"):
        list_range(r.pieces, str(tmp_path / "list"), 0, True)


def test_no_findings_make_no_range(tmp_path: Path) -> None:
    write_findings(tmp_path / "none", [])
    assert plan_ranges([tmp_path / "none"]) == []
    assert list(merged_texts([tmp_path / "none"])) == []


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


@pytest.mark.parametrize("count", [0, 1, 2500])
def test_the_findings_list_is_written_into_the_file_as_write_list_writes_it(
    tmp_path: Path, count: int
) -> None:
    rng = random.Random(5)
    places = sorted({_place(rng) for _ in range(count)})
    parts: list[list[tuple[bytes, str]]] = [[], []]
    for n, place in enumerate(places):
        parts[rng.randrange(2)].append((place_bytes(place), item_text({"n": n})))
    spill = Spill()
    try:
        for part in parts:
            spill.add_findings(part)
        rows = spill.finding_rows()
        assert rows.list_into is not None and rows.texts is not None
        expected = io.StringIO()
        expected.write('{\n "divergences": ')
        write_list(expected, rows.texts())
        out = tmp_path / "summary.json"
        out.write_text('{\n "divergences": ', encoding="utf-8")
        end = rows.list_into(str(out), len('{\n "divergences": '))
        assert out.read_text(encoding="utf-8") == expected.getvalue()
        assert end == len(expected.getvalue().encode())
    finally:
        spill.close()


def test_closing_removes_the_files() -> None:
    spill = Spill()
    spill.add_findings([(place_bytes((2, n, n, 0)), "x" * 100) for n in range(1000)])
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
