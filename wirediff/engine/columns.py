"""The index on disk, a file a column: memory holds the columns a step reads while it reads
them, never the index of every exchange.

A column's file is a sequence of pickled pieces (protocol 5: an array is written and read
as its bytes). The scan appends a piece a chunk, in the order chunks come; the index is
then one piece a column, in load order; the comparison's locators a piece a partition."""

from __future__ import annotations

import itertools
import pickle
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["Columns"]


class Columns:
    """Named columns of the same rows, appended in pieces and read whole; the directory is
    removed on `close` (or when the object is collected)."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="wirediff-index-"))
        self._removed = weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)
        self._files: dict[str, Path] = {}
        self._starts: dict[str, list[int]] = {}
        """Where each piece of a column starts in its file."""
        self._numbers = itertools.count()

    @property
    def names(self) -> list[str]:
        return list(self._files)

    def append(self, frame: pd.DataFrame) -> None:
        """The rows of `frame` after the others, a piece of each of its columns."""
        for name in map(str, frame.columns):
            self.add(name, frame[name])

    def add(self, name: str, values: pd.Series) -> None:
        """A piece of column `name`, after its others."""
        if name not in self._files:
            self._files[name] = self._dir / f"{next(self._numbers)}.pickle"
            self._starts[name] = []
        with self._files[name].open("ab") as fh:
            self._starts[name].append(fh.tell())
            pickle.dump(values, fh, protocol=5)

    def put(self, name: str, column: pd.Series) -> None:
        """`column` as the whole of `name`, in one piece."""
        self.drop(name)
        self.add(name, column)

    def piece(self, name: str, k: int) -> Any:
        """The `k`th piece of `name`."""
        with self._files[name].open("rb") as fh:
            fh.seek(self._starts[name][k])
            return pickle.load(fh)

    def read_pieces(self, name: str) -> Iterator[Any]:
        with self._files[name].open("rb") as fh:
            for _ in self._starts[name]:
                yield pickle.load(fh)

    def column(self, name: str) -> pd.Series:
        """The whole column, its pieces one after the other."""
        pieces: list[pd.Series] = list(self.read_pieces(name))
        if len(pieces) == 1:
            return pieces[0].reset_index(drop=True)
        return pd.concat(pieces, ignore_index=True)

    def frame(self, names: Sequence[str], rows: np.ndarray | None = None) -> pd.DataFrame:
        """These columns (at `rows`, in their order), read one at a time: a step holds what
        it asked for, and one whole column while it reads."""
        out = {}
        for name in names:
            column = self.column(name)
            out[name] = column if rows is None else column.take(rows).reset_index(drop=True)
            del column
        return pd.DataFrame(out, copy=False)

    def drop(self, *names: str) -> None:
        """Columns no step ahead reads, removed."""
        for name in names:
            path = self._files.pop(name, None)
            self._starts.pop(name, None)
            if path is not None:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        self._removed()
