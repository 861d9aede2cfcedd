"""The lines of every finding, made by the partitions, merged back into the order of their
places among all the captures' findings.

Each partition keeps its findings in two files, both in order: their places (`place_bytes`)
and their lines (JSON Lines, `wirediff.reports.items.finding_line`). Merging reads every
partition's files a piece at a time, so it holds a piece of each, never all the lines.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["merged_lines", "place_bytes", "write_findings"]

_PLACE = struct.Struct(">BBQBQQ")
_PIECE = 4096
"""Places read from a partition's file at a time."""


def place_bytes(place: tuple[Any, ...]) -> bytes:
    """A finding's place among all (`wirediff.reports.partial.finding_order`: its group,
    two places — of a pair, `(0 | 1, n)`, or of a record, `n` — and its row) as bytes of
    one width that sort as the tuples do."""
    group, first, second, row = place
    a, b = first if type(first) is tuple else (0, first)
    c, d = second if type(second) is tuple else (0, second)
    return _PLACE.pack(group, a, b, c, d, row)


def write_findings(stem: Path, rows: Sequence[tuple[bytes, str]]) -> None:
    """A partition's findings, `(place_bytes(place), line)` in order, as its two files."""
    with stem.with_suffix(".places").open("wb") as fh:
        fh.writelines(place for place, _ in rows)
    with stem.with_suffix(".jsonl").open("wb") as fh:
        fh.writelines(text.encode("utf-8") for _, text in rows)


def _rows(stem: Path) -> Iterator[tuple[bytes, str]]:
    with (
        stem.with_suffix(".places").open("rb") as places,
        stem.with_suffix(".jsonl").open("rb") as lines,
    ):
        while piece := places.read(_PLACE.size * _PIECE):
            for at in range(0, len(piece), _PLACE.size):
                yield piece[at : at + _PLACE.size], lines.readline().decode("utf-8")


def merged_lines(stems: Sequence[Path]) -> Iterator[str]:
    """Every finding's line, in order of their places."""
    for _, text in heapq.merge(*map(_rows, stems), key=lambda row: row[0]):
        yield text
