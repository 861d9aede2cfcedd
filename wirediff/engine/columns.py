"""The index on disk, a file a column: memory holds a piece of the columns a step reads
while it reads them, never the index of every exchange.

A column's file is a sequence of pickled pieces (protocol 5: an array is written and read
as its bytes). The scan appends a piece a chunk, in the order chunks come; the index keeps
each column in pieces of `PIECE_ROWS` rows, the same for all its columns, so that a step
walks the rows a piece at a time (`Columns.pieces`); `Buckets` spreads rows over ranges of
a digest, so that a step over all the rows (a join, a sort, a count per key) holds one
bucket at a time."""

from __future__ import annotations

import itertools
import math
import pickle
import shutil
import tempfile
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["PIECE_ROWS", "Buckets", "Columns", "bucket_of", "looked_up"]

PIECE_ROWS = 1 << 16
"""Rows of an index piece: what a step walking the rows holds of a column at once."""


class Columns:
    """Named columns of the same rows, appended in pieces and read whole or a piece at a
    time; the directory is removed on `close` (or when the object is collected)."""

    def __init__(self, prefix: str = "wirediff-index-") -> None:
        self._dir = Path(tempfile.mkdtemp(prefix=prefix))
        self._removed = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        self._files: dict[str, Path] = {}
        self._starts: dict[str, list[int]] = {}
        """Where each piece of a column starts in its file."""
        self._kinds: dict[Path, pd.CategoricalDtype] = {}
        """A category column's categories, held once: its pieces are stored as codes."""
        self._numbers = itertools.count()

    @property
    def names(self) -> list[str]:
        return list(self._files)

    def __contains__(self, name: str) -> bool:
        return name in self._files

    def append(self, frame: pd.DataFrame) -> None:
        """The rows of `frame` after the others, a piece of each of its columns."""
        for name in map(str, frame.columns):
            self.add(name, frame[name])

    def add(self, name: str, values: Any) -> None:
        """A piece of column `name`, after its others."""
        if name not in self._files:
            self._files[name] = self._dir / f"{next(self._numbers)}.pickle"
            self._starts[name] = []
        path = self._files[name]
        with path.open("ab") as fh:
            self._starts[name].append(fh.tell())
            pickle.dump(self._stored(path, values), fh, protocol=5)

    def _stored(self, path: Path, values: Any) -> Any:
        """What is pickled of a piece: a category piece with the file's categories (its
        first piece's) as its codes alone, so that a column of many distinct values holds
        them once, not once a piece."""
        if not isinstance(values, pd.Series) or not isinstance(values.dtype, pd.CategoricalDtype):
            return values
        kind = self._kinds.setdefault(path, values.dtype)
        if values.dtype is not kind and values.dtype != kind:
            return values
        return _Codes(values.cat.codes.to_numpy())

    def _loaded(self, path: Path, stored: Any) -> Any:
        if isinstance(stored, _Codes):
            return pd.Series(pd.Categorical.from_codes(stored.codes, dtype=self._kinds[path]))
        return stored

    def put(self, name: str, column: pd.Series) -> None:
        """`column` as the whole of `name`, in pieces of `PIECE_ROWS` rows."""
        self.put_pieces(name, [column])

    def put_pieces(self, name: str, parts: Iterable[pd.Series]) -> None:
        """The whole of `name` made of `parts` one after the other (they may be read from
        `name` itself: the new file replaces the old once written), cut into pieces of
        `PIECE_ROWS` rows; a piece at a time held beside the part being read."""
        path = self._dir / f"{next(self._numbers)}.pickle"
        starts: list[int] = []
        try:
            self._write_pieces(path, starts, parts)
        except BaseException:
            self._kinds.pop(path, None)
            path.unlink(missing_ok=True)
            raise
        self.drop(name)
        self._files[name], self._starts[name] = path, starts

    def _write_pieces(self, path: Path, starts: list[int], parts: Iterable[pd.Series]) -> None:
        held: list[pd.Series] = []
        with path.open("wb") as fh:

            def write(piece: pd.Series) -> None:
                starts.append(fh.tell())
                pickle.dump(self._stored(path, piece.reset_index(drop=True)), fh, protocol=5)

            for part in parts:
                held.append(part)
                if sum(map(len, held)) < PIECE_ROWS:
                    continue
                whole = pd.concat(held, ignore_index=True) if len(held) > 1 else held[0]
                cut = len(whole) - len(whole) % PIECE_ROWS
                for at in range(0, cut, PIECE_ROWS):
                    write(whole.iloc[at : at + PIECE_ROWS])
                held = [whole.iloc[cut:]] if cut < len(whole) else []
                del whole
            rest = [p for p in held if len(p)]
            if rest:
                write(pd.concat(rest, ignore_index=True) if len(rest) > 1 else rest[0])
            elif not starts and held:  # no row at all: one empty piece keeps the type
                write(held[0])

    def piece(self, name: str, k: int) -> Any:
        """The `k`th piece of `name`."""
        path = self._files[name]
        with path.open("rb") as fh:
            fh.seek(self._starts[name][k])
            return self._loaded(path, pickle.load(fh))

    def read_pieces(self, name: str) -> Iterator[Any]:
        path = self._files[name]
        with path.open("rb") as fh:
            for _ in self._starts[name]:
                yield self._loaded(path, pickle.load(fh))

    def pieces(self, *names: str) -> Iterator[tuple[int, pd.DataFrame]]:
        """These columns a piece at a time, with the row each piece starts at: columns put
        whole (`put`, `put_pieces`) are cut alike; others must have been added alike."""
        start = 0
        for values in zip(*(self.read_pieces(n) for n in names), strict=True):
            if len({len(v) for v in values}) > 1:
                raise ValueError(f"columns {', '.join(names)} are not cut alike")
            frame = pd.DataFrame(dict(zip(names, values, strict=True)), copy=False)
            yield start, frame
            start += len(frame)

    def column(self, name: str) -> pd.Series:
        """The whole column, its pieces one after the other."""
        pieces: list[pd.Series] = list(self.read_pieces(name))
        if len(pieces) == 1:
            return pieces[0].reset_index(drop=True)
        return pd.concat(pieces, ignore_index=True)

    def frame(self, names: Sequence[str], rows: np.ndarray | None = None) -> pd.DataFrame:
        """These columns (at `rows`, in their order), read one at a time and, at `rows`, a
        piece at a time: a step holds what it asked for, and one piece while it reads."""
        if rows is None:
            return pd.DataFrame({name: self.column(name) for name in names}, copy=False)
        rows = np.asarray(rows, dtype=np.int64)
        order = np.argsort(rows, kind="stable")
        ordered = rows[order]
        back = None if (order[1:] > order[:-1]).all() else np.argsort(order, kind="stable")
        del order
        out = {}
        for name in names:
            taken: list[pd.Series] = []
            start = 0
            for piece in self.read_pieces(name):
                lo, hi = np.searchsorted(ordered, [start, start + len(piece)])
                if hi > lo or not taken:
                    taken.append(piece.take(ordered[lo:hi] - start))
                start += len(piece)
            if len(ordered) and not 0 <= ordered[0] <= ordered[-1] < start:
                raise IndexError(f"rows out of {start:,} in {name}")
            column = pd.concat(taken, ignore_index=True) if len(taken) > 1 else taken[0]
            column = column.reset_index(drop=True)
            out[name] = column if back is None else column.take(back).reset_index(drop=True)
            del taken, column
        return pd.DataFrame(out, copy=False)

    def drop(self, *names: str) -> None:
        """Columns no step ahead reads, removed."""
        for name in names:
            path = self._files.pop(name, None)
            self._starts.pop(name, None)
            if path is not None:
                self._kinds.pop(path, None)
                path.unlink(missing_ok=True)

    def close(self) -> None:
        self._removed()


@dataclass
class _Codes:
    """A category piece as its codes (the categories are its column's)."""

    codes: np.ndarray


def bucket_of(keys: np.ndarray, count: int) -> np.ndarray:
    """The bucket, of `count`, of each 64-bit digest: a range of its value, so that the
    buckets of digests are even."""
    part = np.asarray(keys, dtype=np.uint64) >> np.uint64(32)
    part *= np.uint64(count)
    part >>= np.uint64(32)
    return part.view(np.int64)  # below `count`: the same bits


def looked_up(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each of `values` looked up in `keys` (sorted, not empty): its place there, and
    whether it is there — a dict lookup over digests, in arrays."""
    at = np.searchsorted(keys, values)
    np.minimum(at, len(keys) - 1, out=at)
    return at, keys[at] == values


class Buckets:
    """Rows spread over buckets by a 64-bit digest (`bucket_of`), each bucket's arrays on
    disk: a step over all the rows by key (a join, a count) reads a bucket at a time, and
    every row with a key is in that key's bucket. Within a bucket, rows keep the order
    they were added in."""

    def __init__(self, rows: int) -> None:
        self.count = max(1, math.ceil(rows / PIECE_ROWS))
        """Buckets: about `PIECE_ROWS` rows each for `rows` rows."""
        self._store = Columns(prefix="wirediff-buckets-")

    def add(self, keys: np.ndarray, **arrays: np.ndarray) -> None:
        """Rows of these arrays (and `key`), each to the bucket of its key."""
        where = bucket_of(keys, self.count)
        order = np.argsort(where, kind="stable")
        bounds = np.searchsorted(where[order], np.arange(self.count + 1))
        values = {"key": np.asarray(keys, dtype=np.uint64), **arrays}
        for b in np.flatnonzero(np.diff(bounds)).tolist():
            at = order[bounds[b] : bounds[b + 1]]
            self._store.add(str(b), {n: np.asarray(v)[at] for n, v in values.items()})

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        """Each bucket that has rows: its arrays, `key` among them."""
        for b in range(self.count):
            if str(b) not in self._store:
                continue
            parts = list(self._store.read_pieces(str(b)))
            yield {n: np.concatenate([p[n] for p in parts]) for n in parts[0]}
            del parts

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Buckets:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
