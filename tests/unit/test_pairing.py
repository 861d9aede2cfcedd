"""Pairing originals with their replays (one comparison per target label), and the whole
analysis that starts from the pairs."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.fixtures.analysed import pairs_of
from tests.fixtures.records import answer, chat_record, error_record, replay, set_header
from wirediff._types import Record
from wirediff.analysis.comparison.divergences import DIVERGENCE_COLUMNS
from wirediff.analysis.comparison.pairing import PAIR_COLUMNS, factorize_together, index_in
from wirediff.analysis.index.analyze import analyze
from wirediff.cli.report import load_ignore
from wirediff.errors import UsageError


def pairs_frame(records: list[Record]) -> pd.DataFrame:
    """The pairs of the records' analysis, both sides' columns side by side."""
    analysis = analyze(records)
    return pairs_of(analysis)


def test_a_session_replayed_to_two_targets_gives_one_pair_per_target() -> None:
    originals = [chat_record(id="o1", seq=0), chat_record(id="o2", seq=1, stream=True)]
    replays = [
        replay(o, id=f"{o['id']}-{label}", label=label)
        for label in ("ollama", "vllm")
        for o in originals
    ]
    pairs = pairs_frame(originals + replays)

    assert list(pairs.columns) == PAIR_COLUMNS
    assert len(pairs) == 4
    assert sorted(zip(pairs["baseline_id"], pairs["label"], strict=True)) == [
        ("o1", "ollama"), ("o1", "vllm"), ("o2", "ollama"), ("o2", "vllm"),
    ]  # fmt: skip
    assert (pairs["pair_id"] == pairs["candidate_id"]).all()
    assert set(pairs["baseline_label"]) == {"openai"}


def test_pair_columns_carry_both_sides() -> None:
    base = chat_record(id="o1", stream=True, ttfb_ms=90.0, duration_ms=400.0)
    cand = replay(base, id="r1", label="vllm")
    cand.update({"ttfb_ms": 150.0, "duration_ms": 700.0})
    row = pairs_frame([base, cand]).iloc[0]

    assert (row["family"], row["endpoint"], row["method"], bool(row["stream"])) == (
        "chat.completions", "/v1/chat/completions", "POST", True,
    )  # fmt: skip
    assert (row["baseline_status"], row["candidate_status"]) == (200, 200)
    assert (row["baseline_ttfb_ms"], row["candidate_ttfb_ms"]) == (90.0, 150.0)
    assert (row["baseline_duration_ms"], row["candidate_duration_ms"]) == (400.0, 700.0)
    assert row["baseline_first_event_ms"] == 40.0


def test_first_event_is_nan_without_events_and_status_follows_each_side() -> None:
    base = chat_record(id="o1")
    cand = error_record(id="r1", status=404, label="ollama", replay_of="o1")
    row = pairs_frame([base, cand]).iloc[0]

    assert math.isnan(row["baseline_first_event_ms"])
    assert (row["baseline_status"], row["candidate_status"]) == (200, 404)


def test_replays_without_their_original_and_originals_without_replays_are_not_pairs() -> None:
    lonely = chat_record(id="o1")
    orphan = replay(chat_record(id="missing"), id="r9", label="vllm")
    pairs = pairs_frame([lonely, orphan])

    assert pairs.empty
    assert list(pairs.columns) == PAIR_COLUMNS


@pytest.mark.parametrize("how", ["itself", "a cycle", "a replay"])
def test_a_replay_pairs_with_an_original_only_and_leaves_the_roles_alone(how: str) -> None:
    base = chat_record(id="o1")
    cand = replay(base, id="r1", label="vllm")
    odd = [replay(chat_record(id="r2"), id="r2", label="vllm")]
    if how == "a cycle":
        odd = [
            replay(chat_record(id="r3"), id="r2", label="vllm"),
            replay(odd[0], id="r3", label="vllm"),
        ]
    elif how == "a replay":
        odd = [replay(cand, id="r2", label="ollama")]
    analysis = analyze([base, cand, *odd])

    assert pairs_of(analysis)["candidate_id"].tolist() == ["r1"]
    assert analysis.roles()["vllm"] == "candidate"


def test_a_record_loaded_twice_pairs_once() -> None:
    base = chat_record(id="o1")
    cand = replay(base, id="r1", label="vllm")
    assert len(pairs_frame([base, cand, base, cand])) == 1


# --- the whole analysis -------------------------------------------------------------------


def test_analyze_builds_every_frame_from_records() -> None:
    base = chat_record(id="o1", stream=True)
    other = chat_record(id="o2", seq=1)

    def no_request_id(rec: Record) -> None:
        set_header(rec, "x-request-id", None)

    records = [base, other, replay(base, id="r1", label="vllm", change=no_request_id),
               replay(other, id="r2", label="vllm")]  # fmt: skip
    result = analyze(records, ignore=["usage.*"])

    assert set(result.exchanges["id"]) == {"o1", "o2", "r1", "r2"}
    assert len(result.pairs) == 2
    assert list(result.divergences.columns) == DIVERGENCE_COLUMNS
    assert result.divergences[["pair_id", "kind", "path"]].values.tolist() == [
        ["r1", "header", "headers.x-request-id"]
    ]
    assert list(result.conformance.columns) == DIVERGENCE_COLUMNS
    assert result.conformance.empty


def test_ignored_paths_leave_the_conformance_rows_too() -> None:
    def no_refusal(rec: Record) -> None:
        del answer(rec)["body"]["choices"][0]["message"]["refusal"]

    records = [replay(chat_record(id="o1"), id="r1", label="vllm", change=no_refusal)]
    assert analyze(records).conformance["path"].tolist() == ["choices[].message.refusal"]
    assert analyze(records, ignore=["choices[].message.*"]).conformance.empty


def test_load_ignore_reads_the_ignore_list(tmp_path: Path) -> None:
    (tmp_path / "wirediff.yaml").write_text("ignore:\n  - usage.*\n  - system_fingerprint\n")
    assert load_ignore(tmp_path) == ("usage.*", "system_fingerprint")
    assert load_ignore(tmp_path / "wirediff.yaml") == ("usage.*", "system_fingerprint")
    with pytest.raises(UsageError, match=r"absent\.yaml: no such ignore config"):
        load_ignore(tmp_path / "absent.yaml")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"empty: a folder without a wirediff\.yaml; name the"):
        load_ignore(tmp_path / "empty")


@pytest.mark.parametrize(
    "text", ["ignore: usage.*\n", "- a\n- b\n", "ignore: [1, 2]\n", "ignore: [\n"]
)
def test_load_ignore_rejects_a_malformed_file_in_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "wirediff.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=r"wirediff\.yaml(:\d+)?: ") as e:
        load_ignore(path)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("seed", range(3))
def test_rows_are_numbered_together_as_a_multiindex_numbers_them(seed: int) -> None:
    """Codes and distinct rows as factorizing a `MultiIndex` gives them, missing values too."""
    rng = random.Random(seed)
    for _ in range(100):
        n = rng.randint(1, 40)
        mixed = pd.Series([rng.choice([None, math.nan, "a", "b", ""]) for _ in range(n)])
        numbers = pd.Series([rng.randint(0, 3) for _ in range(n)], dtype=np.int64)
        strings = pd.Series([rng.choice(["x", "y", None]) for _ in range(n)], dtype="str")
        kinds = pd.Series([rng.choice(["b", "a", None]) for _ in range(n)], dtype="category")
        flags = pd.Series([rng.random() < 0.5 for _ in range(n)])
        for columns in (
            (numbers, mixed),
            (mixed, strings),
            (numbers, numbers, mixed),
            (kinds, flags, numbers),
        ):
            expected_codes, expected = pd.factorize(pd.MultiIndex.from_arrays(list(columns)))
            codes, uniques = factorize_together(*columns)
            assert codes.tolist() == expected_codes.tolist()
            assert [tuple(map(str, row)) for row in uniques] == [
                tuple(map(str, row)) for row in expected.tolist()
            ]


@pytest.mark.parametrize("dtype", ["str", object])
def test_texts_are_placed_as_pandas_places_them(dtype: str | type) -> None:
    """Arrow's lookup gives what `get_indexer` and `isin` give, missing texts and repeats too."""
    rng = random.Random(7)
    words = ["a", "b", "é", "🙂", "", None]
    for _ in range(200):
        column = pd.Series([rng.choice(words) for _ in range(rng.randint(0, 12))], dtype=dtype)
        values = pd.Series([rng.choice(words) for _ in range(rng.randint(0, 6))], dtype=dtype)
        values = values.dropna()
        placed = index_in(column, values)
        assert ((placed >= 0) == column.isin(values).to_numpy(dtype=bool)).all()
        distinct = values.drop_duplicates()
        first = index_in(column, distinct)
        assert (first == pd.Index(distinct).get_indexer(column.to_numpy())).all()
