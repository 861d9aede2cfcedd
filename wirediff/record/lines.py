"""Read a capture's lines as values within bounds, parsed in batches, torn ones told apart.

Every reader of captures (`wirediff.record.store.iter_records`, the engine's scan) reads
lines with `next_line`, which never holds one longer than a record a capture writes, and
parses them with `parse_batch`: a line that is not JSON (a write torn by a crash) or holds
more than a capture writes (`wirediff.record.validate`) is left out and noted, to be warned
about by file:line.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from wirediff.errors import CaptureError
from wirediff.record.decode import parse
from wirediff.record.validate import (
    MAX_CONTAINERS,
    MAX_DEPTH,
    MAX_LINE_BYTES,
    line_past_bounds,
    past_bounds,
)

__all__ = [
    "BATCH_LINES",
    "LineError",
    "Parsed",
    "Torn",
    "after_last_newline",
    "is_json",
    "line_batches",
    "newlines_before",
    "next_line",
    "parse_batch",
    "readable_lines",
    "skip_line",
    "within_bounds",
]

READ_PIECE = 1 << 20
"""Bytes of a line read at a time.

A line is held whole only when it is known to end in time."""
BATCH_LINES = 1000
"""Lines read, parsed and checked together."""
BATCH_LINE_BYTES = 16 << 20
"""Bytes of lines in a batch at most, however few lines they are."""
_RECORD_START = b'{"format":'


class LineError(CaptureError):
    """Note a line that is no readable record: where it is (`lineno`) and why (`text`)."""

    def __init__(self, path: object, lineno: int, text: str) -> None:
        super().__init__(f"{path}:{lineno}: {text}")
        self.lineno, self.text = lineno, text


Torn = list[tuple[int, str]]
"""Lines skipped as `(lineno, why)`, in their order: torn writes, lines past the bounds, an
unfinished last line."""
UNFINISHED = "an unfinished last line (a write in progress, or cut by a crash): skipped"


def _parse_line(p: Path, lineno: int, line: bytes, torn: Torn) -> tuple[bytes, Any]:
    """Parse one line's value.

    A torn line, not JSON, is skipped: None, noted in `torn`. When a whole record was appended
    after the fragment, that record and its text come instead."""
    try:
        return line, json.loads(line)
    except RecursionError:
        raise LineError(
            p,
            lineno,
            f"record nested too deeply to read (over {MAX_DEPTH} levels "
            "is kept as text by the capture)",
        ) from None
    except UnicodeDecodeError as e:
        if is_json(line.decode("utf-8", "replace").encode("utf-8")):  # whole, but for bytes
            raise LineError(
                p,
                lineno,
                f"not UTF-8 text (byte 0x{line[e.start]:02x} at column {e.start + 1}); the "
                "recorder writes UTF-8 only",
            ) from None
    except ValueError:
        pass
    at = line.find(_RECORD_START, 1)
    while at > 0:  # the record's start, not an object inside it with a "format" key
        with contextlib.suppress(ValueError, RecursionError):
            value = json.loads(line[at:])
            bisect.insort(torn, (lineno, "a torn line before a whole record: the fragment skipped"))
            return line[at:], value
        at = line.find(_RECORD_START, at + 1)
    bisect.insort(torn, (lineno, "not a JSON record (a torn write): skipped"))
    return line, None


Parsed = list[tuple[int, bytes, Any]]


def readable_lines(batch: list[tuple[int, bytes]], torn: Torn) -> list[tuple[int, bytes]]:
    """Keep the lines of `batch` that can be records a capture wrote.

    Each other one is left out, never parsed, and noted in `torn`: too long, or too many objects
    (`wirediff.record.validate.line_past_bounds`)."""
    if all(len(line) < 2 * MAX_CONTAINERS for _, line in batch):
        return batch
    out = []
    for lineno, line in batch:
        why = line_past_bounds(line)
        if why is None:
            out.append((lineno, line))
        else:
            bisect.insort(torn, (lineno, f"{why}: skipped"))
    return out


def within_bounds(parsed: Parsed, torn: Torn) -> Parsed:
    """Keep the records of `parsed` that hold no more than a capture writes.

    Each other one (`wirediff.record.validate.past_bounds`) is left out and noted in `torn`."""
    out = []
    for lineno, line, value in parsed:
        why = past_bounds(line, value)
        if why is None:
            out.append((lineno, line, value))
        else:
            bisect.insort(torn, (lineno, f"{why}: skipped"))
    return out


def parse_batch(p: Path, batch: list[tuple[int, bytes]], torn: Torn) -> tuple[Parsed, list[bool]]:
    """Parse each line of `batch` into `(lineno, text, value)`, and say which orjson read.

    Each value is the one `json.loads` gives (`wirediff.record.decode.parse`); a line orjson
    read is read to the same value by orjson alone. Torn lines are left out, and `text` is the
    whole record after a torn fragment. So are lines or records past what a capture writes:
    `readable_lines`, `within_bounds`."""
    batch = readable_lines(batch, torn)
    try:
        read = [parse(line) for _, line in batch]
    except (ValueError, RecursionError):  # one line at a time, to find the bad ones
        out = []
        for lineno, line in batch:
            text, value = _parse_line(p, lineno, line, torn)
            if value is not None:
                out.append((lineno, text, value))
        parsed = within_bounds(out, torn)
        return parsed, [False] * len(parsed)
    exact = {lineno: by_orjson for (lineno, _), (_, by_orjson) in zip(batch, read, strict=True)}
    parsed = [(lineno, line, value) for (lineno, line), (value, _) in zip(batch, read, strict=True)]
    parsed = within_bounds(parsed, torn)
    return parsed, [exact[lineno] for lineno, _, _ in parsed]


def after_last_newline(fd: int, size: int) -> int:
    """Find the offset just after the last b"\n" before `size` in the file `fd`, 0 if none."""
    end = size
    while end > 0:
        start = max(end - READ_PIECE, 0)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at != -1:
            return start + at + 1
        end = start
    return 0


def newlines_before(fh: IO[bytes], offset: int) -> int:
    """Count the newlines of the binary file `fh` from where it stands to `offset` bytes in."""
    n = 0
    while offset > 0:
        block = fh.read(min(offset, READ_PIECE))
        if not block:
            break
        n += block.count(b"\n")
        offset -= len(block)
    return n


def is_json(line: bytes) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def next_line(fh: IO[bytes], where: int, torn: Torn) -> tuple[bytes, int]:
    """Read the next line of `fh` and its length, 0 at the end.

    A line longer than any record a capture writes (`MAX_LINE_BYTES`) is read past a piece at a
    time, never held: it is given as b"" and noted in `torn` at `where`, its line number or its
    offset. A long line is measured first and read in one piece, held once, when the file can
    seek."""
    line = fh.readline(READ_PIECE)
    if not line or line.endswith(b"\n"):
        return line, len(line)
    if fh.seekable():
        rest = fh.tell()
        size = len(line) + skip_line(fh)
        if size <= MAX_LINE_BYTES:
            fh.seek(rest - len(line))
            return fh.read(size), size
    else:
        pieces, size, ended = [line], len(line), False
        while size <= MAX_LINE_BYTES and not ended and (piece := fh.readline(READ_PIECE)):
            pieces.append(piece)
            size += len(piece)
            ended = piece.endswith(b"\n")
        if size <= MAX_LINE_BYTES:
            return b"".join(pieces), size
        pieces.clear()
        size += 0 if ended else skip_line(fh)
    bisect.insort(torn, (where, f"{line_past_bounds(b'', size)}: skipped"))
    return b"", size


def skip_line(fh: IO[bytes]) -> int:
    """Read past the rest of the line `fh` is in, a piece at a time; return its length."""
    size = 0
    while piece := fh.readline(READ_PIECE):
        size += len(piece)
        if piece.endswith(b"\n"):
            break
    return size


def line_batches(
    fh: IO[bytes], torn: Torn, at: int = 1, end: float = float("inf"), *, by_offset: bool = False
) -> Iterator[list[tuple[int, bytes]]]:
    """Yield the lines of `fh` that start before `end`, a batch at a time.

    Each comes with where it starts: its line number from `at`, or its byte offset from `at`
    when `by_offset`. Blank lines are left out; an unfinished last line that is no JSON, a
    write in progress or one cut by a crash, ends the reading, noted in `torn`. The last batch
    may be empty."""
    batch: list[tuple[int, bytes]] = []
    size = 0
    while at < end:
        line, length = next_line(fh, at, torn)
        if not length:
            break
        where, at = at, at + (length if by_offset else 1)
        if not line.strip():
            continue
        if not line.endswith(b"\n") and not is_json(line):
            torn.append((where, UNFINISHED))
            break
        batch.append((where, line))
        size += len(line)
        if len(batch) == BATCH_LINES or size >= BATCH_LINE_BYTES:
            yield batch
            batch, size = [], 0
    yield batch
