"""Columns on disk read a piece at a time, and buckets of a digest: what a whole read gives."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from wirediff.engine import columns
from wirediff.engine.columns import Buckets, Columns, bucket_of


def test_pieces_and_rows_read_a_piece_at_a_time_are_what_the_whole_column_gives() -> None:
    rng = np.random.default_rng(7)
    labels = pd.Series([["a", "b", None][k] for k in rng.integers(0, 3, 23)]).astype("category")
    numbers = pd.Series(rng.integers(0, 1 << 63, 23, dtype=np.uint64))
    store = Columns()
    try:
        store.put("label", labels)
        store.put("n", numbers)
        assert [len(f) for _, f in store.pieces("label", "n")] == [5, 5, 5, 5, 3]
        assert [s for s, _ in store.pieces("n")] == [0, 5, 10, 15, 20]
        pd.testing.assert_series_equal(store.column("label"), labels)
        rows = rng.permutation(23)[:11]  # out of order, across pieces
        got = store.frame(["label", "n"], rows)
        pd.testing.assert_series_equal(
            got["label"], labels.take(rows).reset_index(drop=True), check_names=False
        )
        assert got["n"].to_numpy().tolist() == numbers.to_numpy()[rows].tolist()
        none = store.frame(["label"], np.zeros(0, dtype=np.int64))["label"]
        assert len(none) == 0 and isinstance(none.dtype, pd.CategoricalDtype)
    finally:
        store.close()


def test_a_column_remade_from_its_own_pieces_is_cut_again_into_whole_pieces() -> None:
    store = Columns()
    try:
        store.put("n", pd.Series(np.arange(23)))
        keep = np.arange(23) % 3 != 0
        store.put_pieces("n", (f["n"][keep[s : s + len(f)]] for s, f in store.pieces("n")))
        assert store.column("n").tolist() == np.arange(23)[keep].tolist()
        lengths = [len(f) for _, f in store.pieces("n")]
        assert lengths == [5, 5, 5] and sum(lengths) == keep.sum()
        store.put_pieces("n", (f["n"][:0] for _, f in store.pieces("n")))
        assert len(store.column("n")) == 0
    finally:
        store.close()


def test_buckets_hold_every_row_with_its_key_in_that_keys_bucket_in_the_order_added() -> None:
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 1 << 64, 40, dtype=np.uint64)
    keys[10:20] = keys[0]  # a key many rows have
    with Buckets(len(keys)) as buckets:
        assert buckets.count == 8  # 40 rows, `PIECE_ROWS` 5 a bucket
        for start in range(0, 40, 13):  # added in parts, as a step adds its pieces
            rows = np.arange(start, min(start + 13, 40))
            buckets.add(keys[rows], row=rows)
        seen = []
        for bucket in buckets:
            assert len(np.unique(bucket_of(bucket["key"], buckets.count))) == 1
            assert (np.diff(bucket["row"]) > 0).all()
            assert (keys[bucket["row"]] == bucket["key"]).all()
            seen += bucket["row"].tolist()
    assert sorted(seen) == list(range(40))
    assert columns.PIECE_ROWS == 5  # the unit suite's small pieces


def test_a_column_of_many_distinct_values_holds_them_once_not_once_a_piece() -> None:
    values = pd.Series([f"https://host/{k}" for k in range(2000)]).astype("category")
    store = Columns()
    try:
        store.put("url", values)  # 400 pieces of 5 rows
        whole = len(pickle.dumps(values, protocol=5))
        assert store._files["url"].stat().st_size < 2 * whole
        pd.testing.assert_series_equal(store.column("url"), values, check_names=False)
        other = pd.Series(["x", "y"]).astype("category")  # a piece of its own categories
        store.add("url", other)
        assert store.column("url").tolist()[-2:] == ["x", "y"]
    finally:
        store.close()


def test_columns_not_cut_alike_are_not_read_side_by_side() -> None:
    store = Columns()
    try:
        store.add("a", pd.Series([1, 2, 3]))
        store.add("b", pd.Series([1, 2]))
        with pytest.raises(ValueError, match="not cut alike"):
            list(store.pieces("a", "b"))
    finally:
        store.close()
