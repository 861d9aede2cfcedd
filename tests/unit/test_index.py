"""The index: one row a record, read from files as loading reads them, and where each row
goes back to through `replay_of`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.fixtures.records import openai_session, replay
from tests.fixtures.sessions import fixture_sessions, write_fixtures
from wirediff.analysis.index.analyze import Index
from wirediff.analysis.index.kept import replay_roots
from wirediff.engine import scan
from wirediff.engine.run import Run
from wirediff.engine.sources import read_records
from wirediff.errors import UsageError
from wirediff.record.keys import digest
from wirediff.record.store import RecordWriter, load_records
from wirediff.record.validate import MAX_DEPTH


def scanned(paths: list[Path]) -> Index:
    with Run("local", progress=False, workers=1) as run:
        index, _ = run.scan([str(p) for p in paths])
    return index


def test_a_replay_goes_back_to_its_original_whatever_file_it_is_in(tmp_path: Path) -> None:
    files = write_fixtures(tmp_path)
    index = scanned(files)
    rows = index.rows
    records = index.read(range(len(rows)))
    assert rows["id"].tolist() == [r["id"] for r in records]
    replays = rows["replay_of"].notna().to_numpy()
    assert replays.any() and not replays.all()
    of = [r["replay_of"] for r in records if r.get("replay_of") is not None]
    assert replay_roots(rows)[replays].tolist() == [digest(str(r)) for r in of]


def test_the_scan_marks_records_to_read_carefully_and_reads_them_as_loading_does(
    tmp_path: Path,
) -> None:
    """Only a record with a body or an event's data past `MAX_DEPTH`, or a number orjson
    would not read as `json` does, is marked `careful`; read again, either way the records
    are those `load_records` gives."""
    base = openai_session()
    deep: object = {}
    for _ in range(MAX_DEPTH + 1):
        deep = {"a": deep}
    nested = copy.deepcopy(base[0])
    nested["id"], nested["request"]["body"] = "deep-1", deep
    events: Any = copy.deepcopy(base[1])
    events["id"] = "deep-2"
    events["response"]["events"] = [
        {"event": None, "data": {"ok": [1, 2]}},
        {"event": None, "data": deep},
    ]
    big = copy.deepcopy(base[0])
    big["id"], big["request"]["body"]["seed"] = "big-1", 18446744073709551616  # past 64 bits
    long_id = copy.deepcopy(base[0])
    long_id["id"] = "x12345678901234567890123"  # digits in a string: orjson reads it
    path = tmp_path / "d.jsonl"
    with RecordWriter(path) as w:
        for rec in [*base, nested, events, big, long_id]:
            w.write(rec)
    with Run("local", progress=False, workers=1) as run:
        index, _ = run.scan([str(path)])
        sources = run.sources
    frame = index.rows
    marked = dict(zip(frame["id"], frame["careful"].tolist(), strict=True))
    assert {i for i, d in marked.items() if d} == {"deep-1", "deep-2", "big-1"}
    loaded: dict[str, Any] = {r["id"]: r for r in load_records([path])}
    assert loaded["deep-1"]["request"]["depth_limited"]
    assert loaded["deep-2"]["response"]["events"][1]["depth_limited"]
    assert loaded["big-1"]["request"]["body"]["seed"] == 18446744073709551616
    where = (frame["src"].tolist(), frame["a"].tolist(), frame["b"].tolist())
    got = read_records(sources, *where, careful=frame["careful"].tolist())
    assert got == list(loaded.values())
    assert index.read(range(len(frame))) == list(loaded.values())


def test_failed_replay_attempts_tried_again_are_left_out_and_originals_all_stay(
    tmp_path: Path,
) -> None:
    """A replay attempt that got no
    answer is dropped when the same original was replayed to the same label later; an
    original stays whatever its error, however many originals the label has."""
    base = openai_session()
    lost: Any = copy.deepcopy(base[0])
    lost["id"], lost["started"] = "lost", base[0]["started"]  # not the label's newest
    lost["response"] = None
    lost["error"] = {"kind": "timeout", "message": "no answer"}
    first: Any = replay(base[0], id="first")
    first["response"] = None
    first["error"] = {"kind": "upstream_unreachable", "message": "connection refused"}
    again: Any = replay(base[0], id="again")
    again["started"] = first["started"] + 5
    other: Any = replay(base[1], id="other")
    other["response"] = None
    other["error"] = {"kind": "upstream_unreachable", "message": "connection refused"}
    path = tmp_path / "r.jsonl"
    records = [*base, lost, first, again, other]
    with RecordWriter(path) as w:
        for rec in records:
            w.write(rec)
    ids = scanned([path]).rows["id"].tolist()
    assert ids == Index.of(load_records([path])).rows["id"].tolist()
    assert ids == [r["id"] for r in records if r["id"] != "first"]


def test_start_times_of_every_type_are_floats_as_loading_makes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start times in integer nanoseconds in one file and a float in another: the index's
    starts are all floats, so the newest of two retried attempts one nanosecond apart is
    the one the analysis of the records keeps."""
    monkeypatch.setattr(scan, "CHUNK_BYTES", 1 << 12)  # a chunk a few records
    base, replays = fixture_sessions()
    t = 1_700_000_000_000_000_000
    original = copy.deepcopy(base[0]) | {"id": "o1", "started": 1.5}

    def attempt(name: str, started: int) -> Any:
        r = copy.deepcopy(replays["ollama"][0]) | {"id": name, "replay_of": "o1"}
        return r | {
            "started": started,
            "response": None,
            "error": {"kind": "timeout", "message": "t"},
        }

    pads = [copy.deepcopy(base[1]) | {"id": f"pad{k}", "started": t + 10 + k} for k in range(6)]
    files = [tmp_path / "ns.jsonl", tmp_path / "float.jsonl"]
    written = [[attempt("ra", t + 1), attempt("rb", t), *pads], [original]]
    for path, records in zip(files, written, strict=True):
        with RecordWriter(path) as w:
            for r in records:
                w.write(r)
    index = scanned(files)
    assert index.rows["started"].dtype == np.float64
    kept = index.rows["id"].tolist()
    assert kept == Index.of(load_records(files)).rows["id"].tolist()
    assert "ra" not in kept and "rb" in kept, "equal as floats: the later attempt is newest"


def test_no_exchange_at_all_is_a_usage_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with Run("local", progress=False) as run, pytest.raises(UsageError, match="no exchanges in"):
        run.report([str(empty)], ignore=(), max_examples=3)


def roots_by_walking(frame: pd.DataFrame) -> list[int]:
    """Each row's root as its `replay_of` pointers lead, followed one by one: the first
    id that is no captured replay's, or the least digest of the cycle they fall into."""
    parent = {
        i: o for i, o in zip(frame["id"], frame["replay_of"], strict=True) if isinstance(o, str)
    }
    out = []
    for own in frame["id"].tolist():
        x, path = own, []
        while x in parent and x not in path:
            path.append(x)
            x = parent[x]
        out.append(min(digest(p) for p in path[path.index(x) :]) if x in path else digest(x))
    return out


def frame_of(of: dict[str, str], ids: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": ids, "replay_of": [of.get(i) for i in ids]})


def test_replays_of_replays_go_back_to_their_original() -> None:
    of = {"r3": "r2", "r2": "r1", "r1": "o1", "s1": "o2", "x1": "gone"}  # "gone": not captured
    ids = ["r3", "o1", "s1", "r2", "o2", "r1", "x1"]
    root = {"r3": "o1", "r2": "o1", "r1": "o1", "o1": "o1", "s1": "o2", "o2": "o2", "x1": "gone"}
    assert replay_roots(frame_of(of, ids)).tolist() == [digest(root[i]) for i in ids]


def test_replay_roots_go_back_along_long_chains_and_cycles_to_one_digest() -> None:
    of = {f"r{i}": f"r{i - 1}" for i in range(1, 100)}
    of |= {"c1": "c2", "c2": "c3", "c3": "c1"}  # a cycle: no original at all
    ids = list(reversed([*of, "r0"]))
    root = dict(zip(ids, replay_roots(frame_of(of, ids)).tolist(), strict=True))
    assert {root[f"r{i}"] for i in range(100)} == {digest("r0")}
    assert {root[c] for c in ("c1", "c2", "c3")} == {min(digest(c) for c in ("c1", "c2", "c3"))}


def test_replay_roots_are_the_pointers_followed_one_by_one() -> None:
    rng = np.random.default_rng(11)
    for n in (1, 2, 9, 60, 400):
        ids = [f"x{k}" for k in rng.permutation(n)]
        parents = [ids[k] for k in rng.integers(0, n, n)]
        of = {
            i: ("gone" if rng.random() < 0.1 else p)
            for i, p in zip(ids, parents, strict=True)
            if rng.random() < 0.6
        }
        frame = frame_of(of, ids)
        assert replay_roots(frame).tolist() == roots_by_walking(frame)


def test_captures_past_this_machines_memory_are_one_line_that_says_what_helps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command holds the index in memory, on either engine: what would not fit is said
    before any of it is read, never an OOM kill, with the limit and what helps (Dask
    spreads the scan, not the table: it is not suggested)."""
    from wirediff.cli import main
    from wirediff.engine import run as engine_run

    files = write_fixtures(tmp_path)
    monkeypatch.setattr(engine_run, "_available", lambda: 1 << 10)
    assert main(["report", *map(str, files), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "k exchanges a GB on either engine" in err, err
    assert "fewer captures at a time, or on a machine with more memory" in err
    assert "--engine dask" not in err
    assert not (tmp_path / "r.html").exists()


def test_a_dataset_past_this_machines_memory_is_counted_by_its_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Parquet dataset has no JSON Lines size to estimate from: its mark says how many
    exchanges it holds, and those are counted as a capture's would be."""
    from wirediff.cli import main
    from wirediff.engine import run as engine_run

    files = write_fixtures(tmp_path)
    dataset = tmp_path / "dataset"
    assert main(["export", *map(str, files), "--parquet", str(dataset)]) == 0
    said = json.loads((dataset / "wirediff-dataset.json").read_text())["exchanges"]
    capsys.readouterr()
    # room for all but one of them
    monkeypatch.setattr(engine_run, "_available", lambda: (said - 1) * engine_run.EXCHANGE_BYTES)
    assert main(["report", str(dataset), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"about {said:,} exchanges" in err, err
    assert not (tmp_path / "r.html").exists()


def test_export_is_held_to_what_it_holds_not_to_what_the_analysis_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Export keeps the index without the analysis: captures the analysis would not fit in
    are exported, and only past export's own share are refused."""
    from wirediff.cli import main
    from wirediff.engine import run as engine_run

    files = write_fixtures(tmp_path)
    lines = sum(len(p.read_bytes().splitlines()) for p in files)
    room = lines * (engine_run.EXPORT_EXCHANGE_BYTES + engine_run.EXCHANGE_BYTES) // 2
    monkeypatch.setattr(engine_run, "_available", lambda: room)
    assert main(["report", *map(str, files), "-o", str(tmp_path / "r.html")]) == 2
    assert "exchanges a GB on either engine" in capsys.readouterr().err
    assert main(["export", *map(str, files), "--parquet", str(tmp_path / "dataset")]) == 0
    monkeypatch.setattr(
        engine_run, "_available", lambda: lines * engine_run.EXPORT_EXCHANGE_BYTES // 2
    )
    assert main(["export", *map(str, files), "--parquet", str(tmp_path / "again")]) == 2
    assert "run it on fewer captures at a time" in capsys.readouterr().err


def test_the_estimate_reads_the_whole_capture_not_only_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Small records first and large ones after: counting lines by the first megabyte alone
    made nearly three times the exchanges there are, and refused captures that fit. Windows
    across all of it count within a few tenths of the truth."""
    from tests.fixtures.records import chat_record
    from wirediff.cli import main
    from wirediff.engine import run as engine_run
    from wirediff.record.store import RecordWriter

    path = tmp_path / "s.jsonl"
    small, large = 2000, 200
    with RecordWriter(path) as w:
        for i in range(small):
            w.write(chat_record(id=f"s{i}", seq=i))
        for i in range(large):
            big = chat_record(id=f"l{i}", seq=small + i)
            big["request"]["body"]["messages"][0]["content"] = "word " * 10_000
            w.write(big)
    assert path.stat().st_size > 64 * engine_run.WINDOW * 4  # windows, not the whole file
    truth = small + large
    monkeypatch.setattr(engine_run, "_available", lambda: truth * engine_run.EXCHANGE_BYTES // 3)
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 2
    said = capsys.readouterr().err
    estimate = int(said.split("about ", 1)[1].split(" exchanges", 1)[0].replace(",", ""))
    assert truth / 1.5 <= estimate <= truth * 1.5, said
