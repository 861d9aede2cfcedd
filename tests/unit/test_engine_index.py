"""The engine's index: what pairs and partitions the records, exact across files."""

from __future__ import annotations

import copy
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from tests.fixtures.records import openai_session, replay
from tests.fixtures.sessions import write_fixtures
from wirediff.analysis.comparison.noise import NOISE_SAMPLES
from wirediff.engine import plan, scan
from wirediff.engine.columns import Columns, bucket_of
from wirediff.engine.engines import LocalEngine
from wirediff.engine.index import Index
from wirediff.engine.plan import NO_LINKS, content_pairing, root_pieces
from wirediff.engine.progress import Progress
from wirediff.engine.run import Run, scan_inputs
from wirediff.engine.sources import read_records
from wirediff.errors import UsageError
from wirediff.record.keys import digest
from wirediff.record.store import RecordWriter, load_records
from wirediff.record.validate import MAX_DEPTH


def records_of(index: Index) -> list[Any]:
    """The records of the index's rows, in its order (the index holds no id)."""
    frame = index.load()
    return read_records(
        index.sources, frame["src"].tolist(), frame["a"].tolist(), frame["b"].tolist()
    )


def roots_of(index: Index, links: np.ndarray = NO_LINKS) -> np.ndarray:
    """Every row's root digest, a piece at a time as the partitions take them."""
    return np.concatenate([np.zeros(0, np.uint64), *(r for _, r in root_pieces(index, links))])


def ids_of(index: Index) -> list[str]:
    return [r["id"] for r in records_of(index)]


def test_a_replay_goes_back_to_its_original_whatever_file_it_is_in(tmp_path: Path) -> None:
    """An originals-only file (every `replay_digest` 0) and files of replays (64-bit
    digests) together: the digests stay exact, so each replay's root is its original's."""
    files = [str(p) for p in write_fixtures(tmp_path)]
    index = scan_inputs(LocalEngine(1), files, Progress(False))
    frame, records = index.load(), records_of(index)
    replays = frame["replay"].to_numpy()
    assert replays.tolist() == [r.get("replay_of") is not None for r in records]
    assert replays.any() and not replays.all()
    of = [r["replay_of"] for r in records if r.get("replay_of") is not None]
    assert frame.loc[replays, "replay_digest"].tolist() == [digest(r) for r in of]
    assert frame["id_digest"].tolist() == [digest(r["id"]) for r in records]
    root = roots_of(index)
    assert root[replays].tolist() == [digest(r) for r in of]
    part = bucket_of(root, 7)
    place = dict(zip([r["id"] for r in records], part.tolist(), strict=True))
    assert [place[r] for r in of] == part[replays].tolist()
    assert len(np.unique(part)) > 1


def test_an_original_paired_by_content_and_its_replays_go_back_to_the_baseline_original(
    tmp_path: Path,
) -> None:
    """The links made over the whole index put both sides of a pair by content, and the
    candidate's own replays, in the baseline original's partition; the index holds what
    pairing by content reads (each original's fingerprint, none for a replay)."""
    base = openai_session()
    cand = []
    for rec in base:
        c = copy.deepcopy(rec)
        c["id"], c["label"], c["session"] = f"ollama-{rec['id']}", "ollama", "s2"
        cand.append(c)
    mirrored = replay(base[1], id="lm-1", label="lmstudio")
    again = replay(cand[0], id="vllm-0", label="vllm")  # a replay of a candidate
    path = tmp_path / "all.jsonl"
    with RecordWriter(path) as w:
        for rec in [*base, *cand, mirrored, again]:
            w.write(rec)
    index = scan_inputs(LocalEngine(1), [str(path)], Progress(False))
    frame, ids = index.load(), ids_of(index)
    prints = dict(zip(ids, frame["fingerprint"].tolist(), strict=True))
    assert prints["vllm-0"] == prints["lm-1"] == 0
    assert all(prints[c["id"]] == prints[b["id"]] != 0 for b, c in zip(base, cand, strict=True))

    chosen, content = content_pairing(index, None)
    assert (chosen.label, chosen.chosen_by) == ("openai", "replays")
    pairs = sorted((digest(c["id"]), digest(b["id"])) for b, c in zip(base, cand, strict=True))
    assert sorted(map(tuple, content.links.tolist())) == pairs
    assert content.unmatched.empty
    roots = roots_of(index, content.links)
    root = dict(zip(ids, roots.tolist(), strict=True))
    assert all(root[c["id"]] == digest(b["id"]) for b, c in zip(base, cand, strict=True))
    assert root["vllm-0"] == digest(base[0]["id"])
    assert root["lm-1"] == digest(base[1]["id"])
    part = dict(zip(ids, bucket_of(roots, 5).tolist(), strict=True))
    assert all(part[b["id"]] == part[c["id"]] for b, c in zip(base, cand, strict=True))
    assert part["vllm-0"] == part[base[0]["id"]]


def test_the_scan_marks_records_to_read_carefully_and_partitions_read_them_as_loading_does(
    tmp_path: Path,
) -> None:
    """Only a record with a body or an event's data past `MAX_DEPTH`, or a number orjson
    would not read as `json` does, is marked `careful`; a record not marked is read again
    by orjson alone, a marked one keeps the body as text and the number whole: either way
    the records are those `load_records` gives."""
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
    index = scan_inputs(LocalEngine(1), [str(path)], Progress(False))
    frame = index.load()
    marked = dict(zip(ids_of(index), frame["careful"].tolist(), strict=True))
    assert {i for i, d in marked.items() if d} == {"deep-1", "deep-2", "big-1"}
    loaded: dict[str, Any] = {r["id"]: r for r in load_records([path])}
    assert loaded["deep-1"]["request"]["depth_limited"]
    assert loaded["deep-2"]["response"]["events"][1]["depth_limited"]
    assert loaded["big-1"]["request"]["body"]["seed"] == 18446744073709551616
    where = (frame["src"].tolist(), frame["a"].tolist(), frame["b"].tolist())
    assert read_records(index.sources, *where) == list(loaded.values())
    got = read_records(index.sources, *where, careful=frame["careful"].tolist())
    assert got == list(loaded.values())


def test_failed_replay_attempts_tried_again_are_left_out_and_originals_all_stay(
    tmp_path: Path,
) -> None:
    """As `load_records` leaves them out (`drop_retried`): a replay attempt that got no
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
    with RecordWriter(path) as w:
        for rec in [*base, lost, first, again, other]:
            w.write(rec)
    ids = ids_of(scan_inputs(LocalEngine(1), [str(path)], Progress(False)))
    assert ids == [r["id"] for r in load_records([path])]
    assert "first" not in ids and {"lost", "again", "other"} <= set(ids)


def test_first_rows_are_those_a_groupby_cumcount_keeps_whatever_the_pieces() -> None:
    rng = np.random.default_rng(4)
    for n, labels, listeners, limit in [
        (0, 1, 1, 3),
        (40, 1, 1, 3),
        (500, 3, 4, 5),
        (300, 2, 2, 400),
    ]:
        a = rng.integers(-1, labels, n).astype(np.int8)  # -1: a missing value
        b = rng.integers(-1, listeners, n).astype(np.int16)
        frame = pd.DataFrame(
            {
                "a": pd.Categorical.from_codes(a, pd.Index([f"l{i}" for i in range(labels)])),
                "b": pd.Categorical.from_codes(b, pd.Index([f"h{i}" for i in range(listeners)])),
            }
        )
        rank = frame.groupby(["a", "b"], dropna=False, sort=False).cumcount().to_numpy()
        pairs = [(a[k : k + 11], b[k : k + 11]) for k in range(0, n, 11)]  # index pieces
        got = plan.first_rows(pairs, (labels, listeners), limit)
        assert got.tolist() == np.flatnonzero(rank < limit).tolist()


def test_replays_of_replays_go_back_to_their_original() -> None:
    of = {"r3": "r2", "r2": "r1", "r1": "o1", "s1": "o2", "x1": "gone"}  # "gone": not captured
    ids = ["r3", "o1", "s1", "r2", "o2", "r1", "x1"]
    frame = pd.DataFrame(
        {
            "id_digest": np.array([digest(i) for i in ids], dtype=np.uint64),
            "replay_digest": np.array([digest(of[i]) if i in of else 0 for i in ids], np.uint64),
            "replay": [i in of for i in ids],
        }
    )
    root = {"r3": "o1", "r2": "o1", "r1": "o1", "o1": "o1", "s1": "o2", "o2": "o2", "x1": "gone"}
    with closing(index_of(frame)) as index:
        assert roots_of(index).tolist() == [digest(root[i]) for i in ids]


def test_replay_roots_go_back_along_long_chains_and_cycles_to_one_digest() -> None:
    of = {f"r{i}": f"r{i - 1}" for i in range(1, 100)}  # a chain longer than it is followed
    of |= {"c1": "c2", "c2": "c3", "c3": "c1"}  # a cycle: no original at all
    ids = list(reversed([*of, "r0"]))
    frame = pd.DataFrame(
        {
            "id_digest": np.array([digest(i) for i in ids], dtype=np.uint64),
            "replay_digest": np.array([digest(of[i]) if i in of else 0 for i in ids], np.uint64),
            "replay": [i in of for i in ids],
        }
    )
    with closing(index_of(frame)) as index:  # in pieces of 5 rows, chains found by buckets
        root = dict(zip(ids, roots_of(index).tolist(), strict=True))
    assert {root[f"r{i}"] for i in range(100)} == {digest("r0")}
    assert {root[c] for c in ("c1", "c2", "c3")} == {min(digest(c) for c in ("c1", "c2", "c3"))}


def index_of(frame: pd.DataFrame) -> Index:
    """An index of these columns alone (in pieces of the unit suite's `PIECE_ROWS`)."""
    columns = Columns()
    for name in frame.columns:
        columns.put(str(name), frame[name].reset_index(drop=True))
    return Index([], columns, np.zeros(len(frame), dtype=np.int8))


def random_replays(rng: np.random.Generator, n: int) -> pd.DataFrame:
    """Originals and replays (of originals, of replays, in cycles, of what is not
    captured), some not sent, a few requests repeated, labels with one missing."""
    ids = np.unique(rng.integers(1 << 20, np.iinfo(np.uint64).max, 2 * n + 1, dtype=np.uint64))
    ids = rng.permutation(ids)[:n]  # 64-bit digests: spread over every bucket
    replay = rng.random(n) < 0.6
    parent = ids[rng.integers(0, n, n)]
    parent[rng.random(n) < 0.1] = np.uint64(7)  # an original not captured
    return pd.DataFrame(
        {
            "id_digest": ids,
            "replay_digest": np.where(replay, parent, np.uint64(0)),
            "replay": replay,
            "error_kind": pd.Categorical(rng.choice(np.array(["skipped", "timeout", ""]), n)),
            "request_digest": rng.integers(1, 6, n).astype(np.uint64),
            "label": pd.Categorical.from_codes(rng.integers(-1, 3, n), pd.Index(["a", "b", "c"])),
        }
    )


def roots_by_walking(frame: pd.DataFrame, links: np.ndarray) -> list[int]:
    """Each row's root as its `replay_of` pointers lead, followed one by one: the first
    that is no replay's id, or the smallest id of the cycle they fall into; then the
    baseline of the first content link whose candidate it is."""
    replays = frame[frame["replay"] & (frame["replay_digest"] != 0)]
    parent = dict(zip(replays["id_digest"], replays["replay_digest"], strict=True))
    base: dict[int, int] = {}
    for c, b in links.tolist():
        base.setdefault(c, b)
    out = []
    for own, of, named in frame[["id_digest", "replay_digest", "replay"]].itertuples(False):
        x, path = (of if named and of else own), []
        while x in parent and x not in path:
            path.append(x)
            x = parent[x]
        root = min(path[path.index(x) :]) if x in path else x
        out.append(base.get(root, root))
    return out


def test_replay_roots_a_piece_at_a_time_are_the_pointers_followed_one_by_one() -> None:
    rng = np.random.default_rng(11)
    for n in (1, 2, 9, 60, 400):
        frame = random_replays(rng, n)
        links = frame["id_digest"].to_numpy()[rng.integers(0, n, (3, 2))].astype(np.uint64)
        with closing(index_of(frame)) as index:
            for with_links in (NO_LINKS, links):
                assert roots_of(index, with_links).tolist() == roots_by_walking(frame, with_links)


def noise_by_groupby(frame: pd.DataFrame, links: np.ndarray) -> list[tuple[int, list[int]]]:
    """The noise samples as a whole analysis meets them, with pandas: each compared
    original (one a sent replay names, then a content link's baseline) at its first
    pair, its requests grouped in that order."""
    known = set(frame["id_digest"].tolist())
    row_of = {d: r for r, d in enumerate(frame["id_digest"].tolist())}
    sent = frame["replay"] & (frame["error_kind"] != "skipped")
    met = [(r, int(d)) for r, d in frame.loc[sent, "replay_digest"].items() if int(d) in known]
    met += [(len(frame) + k, int(d)) for k, d in enumerate(links[:, 1].tolist()) if d in known]
    first = pd.DataFrame(met, columns=["at", "original"]).groupby("original")["at"].min()
    rows = [row_of[o] for o in first.sort_values(kind="stable").index.tolist()]
    met_rows = pd.DataFrame({"row": rows, "request": frame["request_digest"].to_numpy()[rows]})
    out = []
    for request, group in met_rows.groupby("request", sort=False):
        if len(group) >= 2:
            out.append((int(str(request)), group["row"].tolist()[: 1 + NOISE_SAMPLES]))
    return out


def test_noise_samples_by_buckets_are_those_a_whole_analysis_meets_in_its_order() -> None:
    rng = np.random.default_rng(5)
    for n in (0, 3, 40, 500):
        frame = random_replays(rng, n)
        links = np.zeros((0, 2), dtype=np.uint64)
        if n:
            links = frame["id_digest"].to_numpy()[rng.integers(0, n, (6, 2))].astype(np.uint64)
            links[0, 1] = 7  # a baseline not captured
        index = index_of(frame)
        try:
            assert plan.noise_samples(index, links) == noise_by_groupby(frame, links)
        finally:
            index.close()


def test_the_rows_pairing_decides_from_are_each_labels_first_and_first_replayed() -> None:
    rng = np.random.default_rng(8)
    for n in (1, 30, 300):
        frame = random_replays(rng, n)
        label = frame["label"].astype(object).fillna("").to_numpy()
        original = ~frame["replay"].to_numpy()
        replays = frame.loc[frame["replay"], "replay_digest"]
        replayed = original & frame["id_digest"].isin(set(replays.tolist())).to_numpy()
        taken = set()
        for mask in (original, replayed):
            seen = pd.Series(label[mask], index=np.flatnonzero(mask))
            taken |= set(seen[~seen.duplicated()].index.tolist())
        asked = set(frame["id_digest"].to_numpy()[sorted(taken)].tolist())
        mine = replays[replays.isin(asked)]
        expected = sorted(taken | set(mine[~mine.duplicated()].index.tolist()))
        index = index_of(frame)
        try:
            rows, labels = plan._deciding(index)
            assert rows.tolist() == expected
            assert labels == len(set(label[original].tolist()))
        finally:
            index.close()


def test_a_column_has_the_type_every_chunk_together_gives_whatever_the_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Start times in integer nanoseconds in one file and a float in another: the index's
    starts are all floats, as loading makes them, so the newest of two retried attempts
    one nanosecond apart is the one loading keeps."""
    from tests.fixtures.sessions import fixture_sessions

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
    index = scan_inputs(LocalEngine(1), [str(f) for f in files], Progress(False))
    try:
        assert index.load("started")["started"].dtype == np.float64
        assert ids_of(index) == [r["id"] for r in load_records(files)]
    finally:
        index.close()


def test_no_exchange_at_all_is_a_usage_error_naming_no_label(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with Run("local", progress=False) as run, pytest.raises(UsageError, match=r"\(labels: \)"):
        run.diagnose([str(empty)], baseline="x")


@pytest.mark.parametrize(
    ("src", "ordinal"),
    [
        ([0] * 7, [3, 0, 6, 1, 5, 2, 4]),  # a dataset's places: moved a piece at a time
        ([0] * 7, [50, 10, 30, 20, 70, 60, 40]),  # ordinals that are no places: sorted
        ([0, 0, 0, 1, 1, 1, 1, 2, 2], [0, 100, 250, 2, 0, 3, 1, 7, 9]),  # files and a dataset
        ([0, 0, 1, 1, 1, 1], [0, 1, 1, 1, 0, 2]),  # a place twice: sorted
    ],
)
def test_rows_go_back_to_source_order_and_each_sources_own(
    src: list[int], ordinal: list[int]
) -> None:
    from wirediff.engine.index import _in_order

    columns = Columns()
    try:
        columns.put("src", pd.Series(src))
        columns.put("ordinal", pd.Series(ordinal))
        columns.put("row", pd.Series(range(len(src))))
        _in_order(columns)
        expected = np.lexsort((np.array(ordinal), np.array(src))).tolist()
        assert columns.column("row").tolist() == expected
    finally:
        columns.close()
