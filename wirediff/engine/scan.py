"""The first pass: every record read once, checked as loading checks it, and reduced to a row
of the index — where it is (its locator), what pairs it (ids, `replay_of`, the request's
digest), and what chains are made of (`wirediff.analysis.diagnosis.chains`) — in chunks of
a file, side by side on the engine's workers.

Problems are placed by byte offset; the caller turns offsets into line numbers (counting
newlines only when there is something to say), so the messages are those of loading the
file whole (`wirediff.record.store.iter_records`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from wirediff._types import Record
from wirediff.analysis.comparison.frames import EXCHANGE_COLUMNS, exchange_row
from wirediff.analysis.diagnosis.chains import redirect_location
from wirediff.analysis.diagnosis.explain import models_listed
from wirediff.analysis.diagnosis.outcome import exchange_ok
from wirediff.engine.decode import parse
from wirediff.engine.sources import JSONL, Source, open_binary
from wirediff.record.keys import ask_digest, digest, digests, request_fingerprint
from wirediff.record.lines import (
    BATCH_LINES,
    LineError,
    Parsed,
    Torn,
    is_json,
    next_line,
    parse_batch,
    readable_lines,
    skip_line,
    within_bounds,
)
from wirediff.record.store import checked

__all__ = [
    "CATEGORIES",
    "CHUNK_BYTES",
    "DIGESTS",
    "FROM_EXCHANGES",
    "INDEX_COLUMNS",
    "Scanned",
    "chunks",
    "compact",
    "fingerprint_digest",
    "index_row",
    "plain",
    "scan_chunk",
]

CHUNK_BYTES = 32 << 20
"""Bytes of a capture file scanned by one task."""
FROM_EXCHANGES = [
    "id",
    "session",
    "label",
    "replay_of",
    "listener",
    "started",
    "duration_ms",
    "method",
    "path",
    "url",
    "status",
    "family",
    "endpoint",
    "prefix",
    "model",
    "sdk_lang",
    "sdk_version",
    "retry",
    "auth_fingerprint",
    "soft_error",
    "error_kind",
    "seq",
]
"""The columns of `exchanges_frame` that pairing (by replay and by content), chains and
backends need."""
_PICK = [EXCHANGE_COLUMNS.index(c) for c in FROM_EXCHANGES]
DIGESTS = (
    "id_digest",
    "replay_digest",
    "request_digest",
    "body_digest",
    "hop_digest",
    "fingerprint",
    "ask_digest",
)
"""The index's 64-bit digest columns."""
INDEX_COLUMNS = [
    *FROM_EXCHANGES,
    *DIGESTS,
    "location",
    "ok",
    "models",
]
"""A row of the index, after the locator (`src`, `a`, `b`), its size and its place in its
source (`nbytes`, `ordinal`): `hop_digest` only for an original on a named listener (a hop
candidate, else 0), `fingerprint` and `ask_digest` only for an original
(`fingerprint_digest`, `ask_digest`, else 0), `models` only for a `/v1/models` answer."""
_INTERNED = ("session", "label", "listener", "method", "path", "url", "family", "endpoint")
_INTERN = [FROM_EXCHANGES.index(c) for c in _INTERNED]
CATEGORIES = [
    *_INTERNED,
    "prefix",
    "model",
    "sdk_lang",
    "sdk_version",
    "auth_fingerprint",
    "error_kind",
]
"""Index columns of few distinct values, kept as categories (a small code a row, each
value once): most of what the index of a million exchanges would hold is these strings."""


def fingerprint_digest(rec: Record) -> int:
    """`request_fingerprint` as a 64-bit number (its first 8 bytes): what pairing by content
    compares, in 8 bytes a row."""
    return int(request_fingerprint(rec)[:16], 16)


def index_row(rec: Record) -> tuple[Any, ...]:
    """One record's row of the index (`INDEX_COLUMNS`)."""
    row = exchange_row(rec)
    picked = [row[i] for i in _PICK]
    for i in _INTERN:
        if type(picked[i]) is str:
            picked[i] = sys.intern(picked[i])
    replay_of = rec.get("replay_of")
    candidate = isinstance(rec.get("listener"), str) and replay_of is None
    request, body, hop = digests(rec, candidate)
    models = None
    if picked[12] == "/v1/models" and picked[7] == "GET" and picked[10] == 200:
        listed = models_listed(rec)
        models = sorted(listed) if listed is not None else None
    return (
        *picked,
        digest(rec["id"]),
        digest(replay_of) if replay_of is not None else 0,  # "" too: pairing pairs it
        request,
        body,
        hop,
        0 if replay_of is not None else fingerprint_digest(rec),
        0 if replay_of is not None else ask_digest(rec["request"]),
        redirect_location(rec),
        exchange_ok(rec),
        models,
    )


@dataclass
class Scanned:
    """What a chunk of a file held: its index rows with their locators, and what loading
    it would have said (torn lines skipped, or the first line that is no record)."""

    src: int
    start: int
    frame: pd.DataFrame
    lines: int = 0
    records: int = 0
    torn: Torn = field(default_factory=list)
    """`(offset, why)`"""
    error: tuple[int, str] | None = None
    """`(offset, why)`: the chunk's first unreadable line (the rest is not read)."""


def frame_of(
    src: int,
    locators: list[tuple[int, int]],
    rows: list[tuple[Any, ...]],
    careful: list[bool] | bool = True,
) -> pd.DataFrame:
    """The index rows of one chunk: locator (`src`, `a`, `b`), size, `INDEX_COLUMNS`, and
    `careful`: whether reading the record again must check it as the scan did — a body or
    event nested too deeply was kept as text, or orjson would not read it as `json` does
    (when unknown, True)."""
    frame = pd.DataFrame.from_records(rows, columns=INDEX_COLUMNS)
    frame.insert(0, "src", src)
    frame.insert(1, "a", [a for a, _ in locators])
    frame.insert(2, "b", [b for _, b in locators])
    frame.insert(3, "nbytes", [b for _, b in locators])
    frame.insert(4, "ordinal", frame["a"])
    frame["careful"] = careful
    return compact(frame)


def compact(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with the `CATEGORIES` columns as categories (`plain` gives them back)."""
    for name in CATEGORIES:
        frame[name] = frame[name].astype("category")
    return frame


def plain(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """A copy of these columns of an index frame, categories as the values they stand for
    (strings as pandas reads them, missing ones NaN)."""
    out = frame[list(columns)]
    for name in columns:
        column = out[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            strings = all(isinstance(c, str) for c in column.cat.categories.tolist())
            out[name] = column.astype("str" if strings else object)
    return out


def _parse(p: Path, batch: list[tuple[int, bytes]], torn: Torn) -> tuple[Parsed, list[bool]]:
    """`parse_batch`, each line read by `parse`, and whether orjson read each; a batch with
    a line that is no JSON is left to `parse_batch` (which says which, and how)."""
    batch = readable_lines(batch, torn)
    try:
        read = [parse(line) for _, line in batch]
    except (ValueError, RecursionError):
        parsed = parse_batch(p, batch, torn)
        return parsed, [False] * len(parsed)
    exact = {offset: by_orjson for (offset, _), (_, by_orjson) in zip(batch, read, strict=True)}
    parsed = [(offset, line, value) for (offset, line), (value, _) in zip(batch, read, strict=True)]
    parsed = within_bounds(parsed, torn)
    return parsed, [exact[offset] for offset, _, _ in parsed]


def scan_chunk(source: Source, src: int, start: int, end: int) -> Scanned:
    """Index the lines of a JSON Lines file that start in `[start, end)`."""
    p = Path(source.name)  # in messages
    out = Scanned(src, start, pd.DataFrame())
    locators: list[tuple[int, int]] = []
    rows: list[tuple[Any, ...]] = []
    careful: list[bool] = []
    batch: list[tuple[int, bytes]] = []

    def flush() -> None:
        lengths = {offset: len(line) for offset, line in batch}
        parsed, exact = _parse(p, batch, out.torn)
        for (offset, text, rec, limited), by_orjson in zip(checked(p, parsed), exact, strict=True):
            skipped = lengths[offset] - len(text)  # a torn fragment before a whole record
            locators.append((offset + skipped, len(text)))
            rows.append(index_row(rec))
            careful.append(limited or not by_orjson)
        batch.clear()

    with open_binary(source.url) as fh:
        at = start
        if start > 0:
            fh.seek(start - 1)
            if fh.read(1) != b"\n":
                at = start + skip_line(fh)  # that line belongs to the chunk before
        try:
            while at < end:
                line, size = next_line(fh, at, out.torn)
                if not size:
                    break
                offset, at = at, at + size
                if not line.strip():
                    continue
                if not line.endswith(b"\n") and not is_json(line):
                    break  # the last line, unfinished: a write in progress or cut by a crash
                out.lines += 1
                batch.append((offset, line))
                if len(batch) == BATCH_LINES:
                    flush()
            flush()
        except LineError as e:
            out.error = (e.lineno, e.text)
    out.records = len(rows)
    out.frame = frame_of(src, locators, rows, careful)
    return out


def chunks(sources: Sequence[Source]) -> list[tuple[int, int, int]]:
    """`(src, start, end)` byte ranges of the JSON Lines sources, `CHUNK_BYTES` each."""
    out = []
    for src, source in enumerate(sources):
        if source.kind != JSONL:
            continue
        size = max(source.size, 1)
        for start in range(0, size, CHUNK_BYTES):
            out.append((src, start, min(start + CHUNK_BYTES, size)))
    return out
