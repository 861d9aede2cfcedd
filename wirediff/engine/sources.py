"""Find the records the commands read, and read a record back from its locator.

Records come from `wirediff/1` JSON Lines files, each session with all its parts, and from
Parquet datasets written by `wirediff export`, on this machine or at any fsspec URL such as
`s3://…` or `file://…`, whatever filesystem is installed. A locator `src`, `a`, `b` is a
file and its byte range, or a dataset file and a row."""

from __future__ import annotations

import contextlib
import glob
import io
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from wirediff._types import Record
from wirediff.errors import CaptureError, UsageError
from wirediff.record.decode import loads
from wirediff.record.parts import HEAD_BYTES, expand_parts, session_parts
from wirediff.record.store import Shared, read_depth, record_problem, share_repeats
from wirediff.record.validate import line_past_bounds, past_bounds

__all__ = [
    "DATASET_MARK",
    "SHOWN",
    "Source",
    "dataset_record",
    "filesystem",
    "is_url",
    "open_binary",
    "parse_texts",
    "read_ranges",
    "read_records",
    "read_texts",
    "reading_parquet",
    "resolve",
]

DATASET_MARK = "wirediff-dataset.json"
"""The file at the root of a dataset `wirediff export` wrote: its format and schema."""
JSONL, PARQUET = "jsonl", "parquet"
SHOWN: dict[str, str] = {}
"""How the command line named a file the command reads through a copy, by the copy's real path.

A pipe, `/dev/stdin`, is copied once to be read in ranges; it is named as given."""


def is_url(text: str) -> bool:
    return "://" in text


@dataclass(frozen=True, slots=True)
class Source:
    """Describe one input: a JSON Lines file, or a Parquet dataset with its files of exchanges."""

    kind: str
    url: str
    """Where it is read: a URL, or an absolute path (a worker may run in another folder)."""
    files: tuple[str, ...] = ()
    """A dataset's files of exchanges, in order."""
    size: int = 0
    """A JSON Lines file's size in bytes."""
    shown: str = ""
    """How the arguments named it, for messages (`url` when empty)."""
    exchanges: int | None = None
    """How many exchanges a dataset's mark says it holds (a file lost or cut is told)."""

    @property
    def name(self) -> str:
        return self.shown or self.url


def filesystem(url: str) -> tuple[Any, str]:
    """Find the fsspec filesystem of a URL and its path there; one line when there is none."""
    import fsspec

    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as e:  # its filesystem not installed, or no such
        raise UsageError(f"{url}: {e}") from None
    return fs, path


def open_binary(url: str) -> IO[bytes]:
    """Open a file or a URL for reading bytes."""
    if not is_url(url):
        return open(url, "rb")
    import fsspec

    try:
        handle: IO[bytes] = fsspec.open(url, "rb").open()
    except (ImportError, ValueError) as e:
        raise UsageError(f"{url}: {e}") from None
    if isinstance(handle, fsspec.spec.AbstractBufferedFile):  # its readline takes no bound
        return io.BufferedReader(handle, buffer_size=1 << 20)  # type: ignore[arg-type]
    return handle


def _dataset(arg: str) -> Source | None:
    """Find the dataset `arg` names, if it is one: as many files of exchanges as its mark says."""
    if is_url(arg):
        fs, path = filesystem(arg)
        base = path.rstrip("/")
        if not fs.isfile(f"{base}/{DATASET_MARK}"):
            return None
        text = fs.cat_file(f"{base}/{DATASET_MARK}")
        protocol = arg.split("://", 1)[0]
        found = fs.glob(f"{glob.escape(base)}/exchanges/**/*.parquet")
        files = [f"{protocol}://{p}" for p in sorted(found)]
        url = arg
    else:
        root = Path(arg)
        if not (root / DATASET_MARK).is_file():
            return None
        text = (root / DATASET_MARK).read_bytes()
        files = sorted(os.path.realpath(p) for p in (root / "exchanges").rglob("*.parquet"))
        url = _named(arg)
    said = _mark(arg, text)
    if said["files"] != len(files):
        raise CaptureError(
            f"{arg}: files of exchanges: {len(files)} where its {DATASET_MARK} says "
            f"{said['files']}: the dataset lost a file, or another was put there"
        )
    return Source(PARQUET, url, tuple(files), shown=arg, exchanges=said["exchanges"])


def _mark(arg: str, text: bytes) -> dict[str, int]:
    """Read the counts a dataset's mark gives, `wirediff.engine.parquet.mark`."""
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not (
        isinstance(doc, dict)
        and all(type(doc.get(k)) is int for k in ("exchanges", "files"))
        and str(doc.get("format", "")).startswith("wirediff-dataset/")
    ):
        raise CaptureError(f"{arg}/{DATASET_MARK}: not the mark wirediff export writes")
    return {"exchanges": doc["exchanges"], "files": doc["files"]}


def _named(arg: str) -> str:
    """Find the file or dataset an argument names, as its `Source.url` says it."""
    if is_url(arg):
        fs, path = filesystem(arg)
        return str(fs.unstrip_protocol(path))
    return os.path.realpath(arg)


def _jsonl(url: str) -> list[Source]:
    if not is_url(url):
        out = []
        for part in expand_parts([url]):
            try:
                size = part.stat().st_size
            except OSError as e:
                raise CaptureError(f"{part}: cannot read capture ({e.strerror or e})") from None
            if part.is_dir():
                raise CaptureError(f"{part}: cannot read capture (Is a directory)")
            where = os.path.realpath(part)
            out.append(Source(JSONL, where, size=size, shown=SHOWN.get(where, str(part))))
        return out
    fs, path = filesystem(url)

    def listed(folder: str, pattern: str) -> list[str]:
        try:
            return list(fs.glob(f"{glob.escape(folder)}/{pattern}"))
        except Exception:  # a folder that cannot be listed (an HTTP server's): no parts
            return []

    def head(found: str) -> bytes:
        with fs.open(found, "rb") as fh:
            data: bytes = fh.read(HEAD_BYTES)
        return data

    out = []
    for found in session_parts(path, fs.isfile, listed, head):
        where = str(fs.unstrip_protocol(found))
        shown = url if found == path else where
        try:
            size = int(fs.size(found))
        except OSError as e:
            raise CaptureError(f"{shown}: cannot read capture ({e})") from None
        out.append(Source(JSONL, where, size=size, shown=shown))
    return out


def resolve(args: Sequence[str], *, scoped: bool = True) -> list[list[Source]]:
    """Find the sources of each argument: a dataset, or a capture file with its parts.

    Each file comes once, a session's parts in their order. With `scoped`, each argument is its
    own capture, as `check` reads them: a file an argument names is its own, and the other parts
    of its session go to the first argument that reaches them. Without it, a session goes whole
    to the first argument that reaches it, as loading them together reads them:
    `captures/*.jsonl` names `s.1.jsonl` before `s.jsonl`."""
    owns = [_named(str(a)) for a in args]
    named = set(owns) if scoped else set()
    seen: set[str] = set()
    out = []
    for arg, own in zip(args, owns, strict=True):
        ds = _dataset(str(arg))
        found = [ds] if ds is not None else _jsonl(str(arg))
        mine = [s for s in found if s.url not in seen and (s.url == own or s.url not in named)]
        out.append(mine)
        seen.update(s.url for s in mine)
    return out


def read_ranges(url: str, spans: Sequence[tuple[int, int]]) -> list[bytes]:
    """Read the bytes at `(offset, length)` spans of a file, in offset order."""
    order = sorted(range(len(spans)), key=lambda i: spans[i][0])
    out: list[bytes] = [b""] * len(spans)
    with open_binary(url) as fh:
        if not is_url(url) and hasattr(os, "pread"):  # one `pread` a span: no buffer to drop
            fd = fh.fileno()

            def read(offset: int, length: int) -> bytes:
                return os.pread(fd, length, offset)
        else:

            def read(offset: int, length: int) -> bytes:
                fh.seek(offset)
                return fh.read(length)

        for i in order:
            out[i] = read(*spans[i])
    return out


@contextlib.contextmanager
def reading_parquet(url: str) -> Iterator[None]:
    """Turn a dataset file that is no Parquet, or is damaged, into one line that names it."""
    import pyarrow as pa

    try:
        yield
    except (pa.ArrowException, OSError) as e:
        why = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise CaptureError(f"{url}: not a readable Parquet file ({why.strip()})") from None


def _read_rows(url: str, rows: Sequence[int]) -> list[tuple[bytes, Record]]:
    """Read the `record` text of rows of one dataset file, each row group once.

    Each text comes with the record it was checked as."""
    import pyarrow.parquet as pq

    with open_binary(url) as fh, reading_parquet(url):
        pf = pq.ParquetFile(fh)
        starts = np.cumsum(
            [0] + [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)]
        )
        wanted = np.asarray(rows, dtype=np.int64)
        groups = np.searchsorted(starts, wanted, side="right") - 1
        out: dict[int, tuple[bytes, Record]] = {}
        for g in np.unique(groups).tolist():
            column = pf.read_row_group(g, columns=["record"]).column(0)
            at = np.flatnonzero(groups == g)
            texts = column.take(wanted[at] - starts[g]).to_pylist()
            for i, text in zip(at.tolist(), texts, strict=True):
                out[i] = dataset_record(url, rows[i], text)
    return [out[i] for i in range(len(rows))]


def dataset_record(url: str, row: int, text: Any) -> tuple[bytes, Record]:
    """Check a dataset row's record as a capture's line is checked, or name file and row.

    A dataset is input like any other: another tool may have written it."""
    if not isinstance(text, str):
        raise CaptureError(f"{url}: row {row}: no record")
    data = text.encode("utf-8", "surrogatepass")
    found = line_past_bounds(data)
    if found:
        raise CaptureError(f"{url}: row {row}: {found}")
    try:
        rec = loads(data)
    except (ValueError, RecursionError):
        raise CaptureError(f"{url}: row {row}: not a JSON record") from None
    found = past_bounds(data, rec) or record_problem(rec)
    if found:
        raise CaptureError(f"{url}: row {row}: {found}")
    return data, read_depth(data, rec)


def read_records(
    sources: Sequence[Source],
    src: Iterable[int],
    a: Iterable[int],
    b: Iterable[int],
    *,
    careful: Sequence[bool] | None = None,
) -> list[Record]:
    """Read the records at these locators in their order, as loading them whole gives them.

    Bodies nested too deeply come as text and repeated headers are shared. `careful`, per
    record, is what the scan found: a record it is false for is read by orjson alone and not
    looked into for bodies nested too deeply. By default all are careful."""
    parsed: dict[int, Record] = {}
    texts = read_texts(sources, src, a, b, parsed)
    return parse_texts(texts, careful=careful, parsed=parsed)


def read_texts(
    sources: Sequence[Source],
    src: Iterable[int],
    a: Iterable[int],
    b: Iterable[int],
    parsed: dict[int, Record] | None = None,
) -> list[bytes]:
    """Read the JSON text of the records at these locators, in their order.

    With `parsed`, a dataset's records, already parsed to be checked, go there by position in
    place of their text, so they are not parsed again."""
    wanted = list(zip(src, a, b, strict=True))
    texts: list[bytes] = [b""] * len(wanted)
    by_file: dict[tuple[int, int], list[int]] = {}
    for i, (s, x, _) in enumerate(wanted):
        source = sources[s]
        by_file.setdefault((s, x if source.kind == PARQUET else -1), []).append(i)
    for (s, file), positions in by_file.items():
        source = sources[s]
        if source.kind == PARQUET:
            rows = _read_rows(source.files[file], [wanted[i][2] for i in positions])
            for i, (text, rec) in zip(positions, rows, strict=True):
                if parsed is None:
                    texts[i] = text
                else:
                    parsed[i] = rec
            continue
        got = read_ranges(source.url, [(wanted[i][1], wanted[i][2]) for i in positions])
        for i, text in zip(positions, got, strict=True):
            texts[i] = text
    return texts


def parse_texts(
    texts: list[bytes],
    *,
    careful: Sequence[bool] | None = None,
    parsed: dict[int, Record] | None = None,
) -> list[Record]:
    """Parse records from JSON text already read once and found readable.

    `careful` is as for `read_records`. Each text is let go once read, so a partition's records
    are held without their text beside them."""
    shared: Shared = {}
    out: list[Record] = []
    for i, text in enumerate(texts):
        texts[i] = b""
        rec = parsed.pop(i, None) if parsed else None
        if rec is None:
            plain = careful is not None and not careful[i]
            rec = orjson.loads(text) if plain else read_depth(text, loads(text))
        share_repeats(rec, shared)
        out.append(rec)
    return out
