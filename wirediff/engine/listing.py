"""The list of every finding, as `summary.json` holds it, made from the partitions' files.

Each partition keeps its findings in two files: their places (`place_bytes`, with the size
of each text) in order, and their texts (UTF-8, one after the other). The list is cut into
ranges of places of about `RANGE_BYTES`; since every text's size is known, so is where each
range stands in the list, and each is merged and written there on its own (`list_range`):
side by side on the engine's workers, into the summary itself, never copied.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "RANGE_BYTES",
    "Piece",
    "Range",
    "list_range",
    "merged_texts",
    "place_bytes",
    "plan_ranges",
    "write_at",
    "write_findings",
]

RANGE_BYTES = 16 << 20
"""Bytes of the list merged by one task (held while it is)."""
SAMPLE = 512
"""Rows of a partition between two of the places the ranges are cut at."""
_PLACE = struct.Struct(">BBQBQQ")
_RECORD = np.dtype([("place", f"S{_PLACE.size}"), ("size", "<u4")])
"""A finding's place (`place_bytes`: fixed width, so bytes order is place order) and the
size of its text."""
_BATCH = 512
"""Items encoded, or written by one `pwritev` (with their separators, within `IOV_MAX`:
1024 on Linux and macOS), at a time."""
_OPEN, _NEXT = b"[\n  ", b",\n  "
"""What comes before the first item of a list, and before each other (`write_list`)."""


def place_bytes(place: tuple[Any, ...]) -> bytes:
    """A finding's place among all (`wirediff.reports.partial.finding_order`: its group,
    two places — of a pair, `(0 | 1, n)`, or of a record, `n` — and its row) as bytes of
    one width that sort as the tuples do: the ranges are cut and merged over bytes, not
    nested tuples."""
    group, first, second, row = place
    a, b = first if type(first) is tuple else (0, first)
    c, d = second if type(second) is tuple else (0, second)
    return _PLACE.pack(group, a, b, c, d, row)


def _places(stem: Path) -> Path:
    return stem.with_suffix(".places")


def _texts(stem: Path) -> Path:
    return stem.with_suffix(".texts")


def write_findings(stem: Path, rows: Sequence[tuple[bytes, str]]) -> None:
    """A partition's findings, `(place_bytes(place), text)` in order, as its two files
    (the texts encoded a batch at a time: a partition's are tens of MB)."""
    records = np.empty(len(rows), dtype=_RECORD)
    records["place"] = [place for place, _ in rows]
    with _texts(stem).open("wb") as fh:
        for k in range(0, len(rows), _BATCH):
            texts = [text.encode("utf-8") for _, text in rows[k : k + _BATCH]]
            records["size"][k : k + len(texts)] = [len(t) for t in texts]
            fh.writelines(texts)
    with _places(stem).open("wb") as fh:
        records.tofile(fh)


@dataclass(frozen=True, slots=True)
class Piece:
    """One partition's rows in one range: rows `[first, last)`, whose texts are bytes
    `[start, end)` of its texts' file."""

    stem: str
    first: int
    last: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Range:
    """Rows of places in a range, from every partition: where their items stand in the
    list (`at`, from the list's first byte) and how many bytes they take."""

    pieces: tuple[Piece, ...]
    at: int
    size: int


def _read(stem: Path) -> np.ndarray:
    return np.fromfile(_places(stem), dtype=_RECORD)


def plan_ranges(stems: Sequence[Path], range_bytes: int = RANGE_BYTES) -> list[Range]:
    """The list's ranges, in order, none empty: cut at places sampled from every partition
    so that each holds about `range_bytes`."""
    samples, weights = [], []
    total = 0
    for stem in stems:
        records = _read(stem)
        if not len(records):
            continue
        items = records["size"].astype(np.int64) + len(_NEXT)
        total += int(items.sum())
        samples.append(records["place"][::SAMPLE].copy())  # not a view: holds all the records
        weights.append(np.add.reduceat(items, np.arange(0, len(items), SAMPLE)))
    if not total:
        return []
    count = math.ceil(total / range_bytes)
    cuts = np.zeros(0, dtype=_RECORD["place"])
    if count > 1:
        places = np.concatenate(samples)
        order = np.argsort(places, kind="stable")
        held = np.cumsum(np.concatenate(weights)[order])
        wanted = np.arange(1, count) * (total / count)
        cuts = np.unique(places[order][np.searchsorted(held, wanted)])
    rows: list[np.ndarray] = []  # per partition, the row each range starts at (and its end)
    spans: list[np.ndarray] = []
    for stem in stems:
        records = _read(stem)
        rows.append(np.concatenate([[0], np.searchsorted(records["place"], cuts), [len(records)]]))
        ends = np.concatenate([[0], np.cumsum(records["size"], dtype=np.int64)])
        spans.append(ends[rows[-1]])
    out: list[Range] = []
    at = 0
    for k in range(len(cuts) + 1):
        pieces = tuple(
            Piece(str(stem), int(r[k]), int(r[k + 1]), int(s[k]), int(s[k + 1]))
            for stem, r, s in zip(stems, rows, spans, strict=True)
            if r[k + 1] > r[k]
        )
        if pieces:
            size = sum(p.end - p.start + len(_NEXT) * (p.last - p.first) for p in pieces)
            out.append(Range(pieces, at, size))
            at += size
    return out


def _merged(pieces: Sequence[Piece]) -> tuple[memoryview, list[int], list[int]]:
    """The texts of the pieces in one buffer, and where each row's text starts and ends
    in it, in order of their places."""
    buffer = bytearray(sum(p.end - p.start for p in pieces))
    view = memoryview(buffer)
    places, starts, sizes = [], [], []
    held = 0
    for p in pieces:
        records = np.fromfile(
            _places(Path(p.stem)),
            dtype=_RECORD,
            count=p.last - p.first,
            offset=p.first * _RECORD.itemsize,
        )
        with _texts(Path(p.stem)).open("rb") as fh:
            fh.seek(p.start)
            if fh.readinto(view[held : held + p.end - p.start]) != p.end - p.start:
                raise OSError(f"{_texts(Path(p.stem))}: shorter than its places say")
        size = records["size"].astype(np.int64)
        places.append(records["place"])
        starts.append(held + np.cumsum(size) - size)
        sizes.append(size)
        held += p.end - p.start
    order = np.argsort(np.concatenate(places), kind="stable")
    start = np.concatenate(starts)[order]
    end = start + np.concatenate(sizes)[order]
    return view, start.tolist(), end.tolist()


def list_range(pieces: Sequence[Piece], path: str, at: int, first: bool) -> int:
    """One range of the list written at byte `at` of the file at `path` (the first range
    opens the list); how many bytes. The items go from where they were read to the file
    as they are, a separator before each: no copy of the range is made."""
    buffer, starts, ends = _merged(pieces)
    fd = os.open(path, os.O_WRONLY)  # each task its own bytes: no two write the same
    try:
        end = at
        for k in range(0, len(starts), _BATCH):
            batch = zip(starts[k : k + _BATCH], ends[k : k + _BATCH], strict=True)
            views = [buffer[a:b] for a, b in batch]
            parts: list[bytes | memoryview] = [_NEXT] * (2 * len(views))
            parts[1::2] = views
            if first and not k:
                parts[0] = _OPEN
            end = write_at(fd, parts, end)
    finally:
        os.close(fd)
    return end - at


def write_at(fd: int, parts: Sequence[bytes | memoryview], at: int) -> int:
    """`parts` one after the other from byte `at` of the file `fd`; where they end."""
    whole = sum(map(len, parts))
    done = os.pwritev(fd, parts, at) if hasattr(os, "pwritev") else 0
    if done < whole:  # cut short (by a signal; a full disk: then the next write says)
        rest = memoryview(b"".join(parts))[done:]
        while rest:
            n = os.pwrite(fd, rest, at + done)
            rest, done = rest[n:], done + n
    return at + whole


def merged_texts(stems: Sequence[Path]) -> Iterator[str]:
    """Every finding's text, in order of their places."""
    for r in plan_ranges(stems):
        buffer, starts, ends = _merged(r.pieces)
        for a, b in zip(starts, ends, strict=True):
            yield str(buffer[a:b], "utf-8")
