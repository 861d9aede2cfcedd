"""Persist `wirediff/1` captures as append-only JSON Lines.

Writing: each record is one line, appended with a single `write()` of the whole line; a
write that fails (a full disk) is cut back to the last whole line and the record waits in
a bounded queue until the disk takes it, so a capture never holds half a line followed by
more records. Reading: a line that is not JSON (a write torn by a crash, anywhere in the
file), or holds more than a capture writes (`wirediff.record.validate.past_bounds`), is
skipped with a warning naming file:line; a line that is JSON but not a readable
`wirediff/1` record, or not UTF-8, is an error naming file:line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import re
import time
from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from wirediff import FORMAT
from wirediff._support import paused_gc
from wirediff._types import Record
from wirediff.errors import CaptureError
from wirediff.record.lines import (
    LineError,
    Parsed,
    Torn,
    after_last_newline,
    line_batches,
    parse_batch,
)
from wirediff.record.parts import Rotation, capture_parts, expand_parts, part_path
from wirediff.record.tags import tag_soft_error
from wirediff.record.validate import MAX_DEPTH, limit_depth, problem

__all__ = [
    "RETRIED_KINDS",
    "RecordWriter",
    "encode_record",
    "iter_records",
    "latest_replays",
    "load_records",
    "newest_attempts",
    "record_problem",
]

log = logging.getLogger(__name__)

MAX_WAITING_BYTES = 64 << 20
"""Encoded records that may wait for a full disk; more are lost (and counted)."""
BATCH_BYTES = 1 << 20
"""Bytes appended by one `write()` when several records wait."""


def _last_part(base: Path) -> int:
    """Return the number of the session's last part (`wirediff.record.parts`)."""
    parts = capture_parts(base)
    return len(parts) - 1 if parts[0] == base else 0


def encode_record(record: Record) -> bytes:
    """Encode one capture line: compact JSON and a newline.

    orjson takes a quarter of the time of the standard library's encoder, on the recorder's and
    the spool's path for every record. orjson would write NaN and Infinity as null: no record
    holds them (`body.parse_json` keeps such bodies as text; timings are finite)."""
    try:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:  # an integer past 64 bits, lone surrogates
        pass
    try:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        return (line + "\n").encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (undecodable header bytes): escape them
        return (json.dumps(record, ensure_ascii=True, separators=(",", ":")) + "\n").encode()


class RecordWriter:
    """Append records to a `.jsonl` file, each as one whole line or not at all.

    `write` returns False while records wait for the disk (`failure` says why); each
    later `write` (or `retry`, or `close`) tries them again first, in order. Past
    `MAX_WAITING_BYTES` waiting, new records are dropped and counted in `lost`. With a
    `rotation`, the writer goes on in the session's last part and starts the next one
    (`<session>.<n>.jsonl`, `wirediff.record.parts`) when that one is full, between lines.

    Several writers (processes) may append to one file: each append holds the file's
    `flock` while it writes, so lines never interleave, a writer's size (for rotation,
    and for cutting back a failed write) is the file's, and a file found not ending with
    a newline under the lock holds a fragment no live writer is writing.
    """

    def __init__(self, path: str | os.PathLike[str], rotation: Rotation | None = None) -> None:
        self.base = Path(path)
        self.base.parent.mkdir(parents=True, exist_ok=True)
        self.rotation = rotation
        self.part = _last_part(self.base) if rotation is not None else 0
        self.path = part_path(self.base, self.part)
        self._opened = time.monotonic()
        self._fd: int | None = None
        self._end = 0
        self._waiting: deque[bytes] = deque()
        self._waiting_bytes = 0
        self.failure: OSError | None = None
        self.lost = 0
        self.written = 0

    @property
    def waiting(self) -> int:
        """Count the records not yet on disk."""
        return len(self._waiting)

    def write(self, record: Record) -> bool:
        return self.write_lines([encode_record(record)])

    def write_lines(self, lines: Iterable[bytes]) -> bool:
        """Queue encoded lines (`encode_record`) and append all that wait."""
        for line in lines:
            if self._waiting_bytes + len(line) > MAX_WAITING_BYTES and self._waiting:
                self.lost += 1
                continue
            self._waiting.append(line)
            self._waiting_bytes += len(line)
        return self.retry()

    def retry(self) -> bool:
        """Append what waits; True when nothing is left waiting."""
        try:
            while self._waiting:
                fd = self._locked_part()
                try:
                    if not self._append(fd):
                        return False
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            if self._fd is None:  # nothing waited: open (and check) the file all the same
                self._fd = self._open()
        except OSError as e:
            self.failure = e
            return False
        self.failure = None
        return True

    def _locked_part(self) -> int:
        """Open and lock the part to append to, its whole lines measured (`_settle`).

        It is the next part when this one is full, whoever filled it."""
        while True:
            if self._fd is None:
                self._fd = self._open()
                self._opened = time.monotonic()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                self._end = self._settle(self._fd)
            except OSError:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                raise
            if not self._rotation_due():
                return self._fd
            os.close(self._fd)  # the lock goes with it
            self._fd = None
            self.part = max(self.part + 1, _last_part(self.base))
            self.path = part_path(self.base, self.part)

    def _append(self, fd: int) -> bool:
        """Append the first records that wait as one `write()`.

        The write holds up to `BATCH_BYTES`, and never goes past the part's size; after a failed
        or partial write, the file is cut back."""
        batch, n = self._waiting[0], 1
        if len(self._waiting) > 1:
            room = BATCH_BYTES
            if self.rotation is not None and self.rotation.max_bytes is not None:
                room = min(room, self.rotation.max_bytes - self._end)
            parts: list[bytes] = []
            size = 0
            for line in self._waiting:
                if parts and size + len(line) > room:
                    break
                parts.append(line)
                size += len(line)
            batch, n = b"".join(parts), len(parts)
        try:
            done = os.write(fd, batch)
        except OSError as e:
            done, self.failure = -1, e
        if done != len(batch):
            self._cut_back(fd)
            return False
        self._end += done
        for _ in range(n):
            self._waiting_bytes -= len(self._waiting.popleft())
        self.written += n
        return True

    def _rotation_due(self) -> bool:
        """Tell whether the current part is full: the next record starts the next part."""
        return self.rotation is not None and self.rotation.due(
            self._end, time.monotonic() - self._opened
        )

    def _cut_back(self, fd: int) -> None:
        """Cut the file back to its last whole line after a failed or partial write.

        The lock is still held."""
        if self.failure is None:
            self.failure = OSError(28, os.strerror(28))  # a short write: the disk is full
        with contextlib.suppress(OSError):
            os.ftruncate(fd, self._end)

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def _settle(self, fd: int) -> int:
        """Return the size of the file once it ends with a whole line, the lock held.

        A fragment after the last newline was left by a writer killed mid-line (a live one would
        hold the lock), and is moved aside to `<file>.fragments` so the capture stays readable
        and appendable."""
        size = os.fstat(fd).st_size
        if not size or os.pread(fd, 1, size - 1) == b"\n":
            return size
        cut = after_last_newline(fd, size)
        with self.path.with_name(self.path.name + ".fragments").open("ab") as frag:
            for at in range(cut, size, BATCH_BYTES):
                frag.write(os.pread(fd, min(BATCH_BYTES, size - at), at))
            frag.write(b"\n")
        os.ftruncate(fd, cut)
        return cut

    def close(self) -> None:
        """Write what waits, one last try, and close; `waiting` then counts what is lost."""
        if self._waiting:
            with contextlib.suppress(OSError):
                self.retry()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def check(self) -> None:
        """Raise `OSError` when records could not be written, for commands.

        A command's exit code must say so. The error's one line says the file, how many records,
        and why."""
        if self.waiting or self.lost:
            err = self.failure or OSError(28, os.strerror(28))
            why = f"{self.waiting + self.lost} records not written ({err.strerror or err})"
            raise OSError(err.errno, why, str(self.path))

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def checked(
    p: Path, parsed: Parsed, *, as_sent: bool = False
) -> Iterator[tuple[int, bytes, Record, bool]]:
    """Yield each `(lineno, text, value, changed)` once the value is a readable `wirediff/1` record.

    The value is as the analysis reads it (`_limited`); `changed` says whether that did
    anything; `as_sent` keeps lone surrogates, which a replay sends as the bytes they stand
    for."""
    for lineno, line, rec in parsed:
        found = record_problem(rec)
        if found:
            raise LineError(p, lineno, found)
        yield lineno, line, rec, _limited(line, rec, as_sent=as_sent)


def record_problem(rec: Any) -> str | None:
    """Say why `rec` is no readable record, worded for `file:line: …`, or None.

    The words are `not a wirediff/1 record …` or `malformed wirediff/1 record (…)`."""
    found = problem(rec)
    if not found or found.startswith("not a"):
        return found
    return f"malformed {FORMAT} record ({found})"


def _limited(line: bytes, rec: Record, *, as_sent: bool = False) -> bool:
    """Tell whether `rec` was changed as the analysis reads it.

    Bodies nested too deeply are kept as text, lone surrogates as their escapes; then an error
    body in a 2xx, as those leave it, is tagged a soft error. The record is one the format
    check passed."""
    deep = line.count(b"[") + line.count(b"{") > MAX_DEPTH and limit_depth(rec)
    odd = not as_sent and _lone_surrogates(line) and _escape_surrogates(rec)
    soft = tag_soft_error(rec)
    return deep or odd or soft


_SURROGATE_ESCAPES = re.compile(
    rb"\\u[dD](?:[89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|[89a-fA-F][0-9a-fA-F]{2})"
)
"""A JSON escape of a surrogate: a pair of 12 bytes, or a lone one of 6."""


def _lone_surrogates(line: bytes) -> bool:
    """Tell whether `line` may hold a lone surrogate.

    It may be a JSON escape not in a pair, or the bytes UTF-8 refuses; a Hangul syllable, or an
    escaped pair, is none."""
    if any(len(m[0]) == 6 for m in _SURROGATE_ESCAPES.finditer(line)):
        return True
    if b"\xed" not in line:
        return False
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _escape_surrogates(value: Any) -> bool:
    """Make each lone surrogate in `value`'s strings and keys its escape, `\\udc80`.

    The recorder keeps a header's undecodable bytes so, and JSON readers take them; but no UTF-8
    text, nor a frame's strings, holds one. Return whether there was any."""
    found = False
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, v in items:
        if isinstance(v, str):
            if not is_utf8(v):
                value[key] = _escaped(v)
                found = True
        elif isinstance(v, dict | list):
            found = _escape_surrogates(v) or found
    if isinstance(value, dict) and not all(is_utf8(k) for k in value):
        renamed = {(k if is_utf8(k) else _escaped(k)): v for k, v in value.items()}
        value.clear()
        value.update(renamed)  # in their order
        found = True
    return found


def is_utf8(text: str) -> bool:
    """Tell whether `text` has a UTF-8 form: it holds no lone surrogate."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def read_depth(line: bytes, rec: Record) -> Record:
    """Return `rec`, parsed from `line`, as the analysis reads it (`_limited`)."""
    _limited(line, rec)
    return rec


def iter_records(path: str | os.PathLike[str], *, as_sent: bool = False) -> Iterator[Record]:
    """Yield the records of one capture file, as the analysis reads them unless `as_sent`.

    `checked` reads them. Torn lines and an unfinished last line are skipped with a warning,
    file:line; but a file without a single JSON record is not a capture."""
    p = Path(path)
    try:
        fh = p.open("rb")
    except OSError as e:
        raise CaptureError(f"{p}: cannot read capture ({e.strerror or e})") from None
    torn: Torn = []
    records = lines = 0

    def batch_records(batch: list[tuple[int, bytes]]) -> Iterator[Record]:
        nonlocal records
        parsed, _ = parse_batch(p, batch, torn)
        if parsed or records:  # warnings only for a file that is a capture
            for lineno, why in torn:
                log.warning(f"{p}:{lineno}: {why}")
            torn.clear()
        for _, _, rec, _ in checked(p, parsed, as_sent=as_sent):
            records += 1
            yield rec

    with fh:
        for batch in line_batches(fh, torn):
            lines += len(batch)
            yield from batch_records(batch)
    if lines and not records:
        raise CaptureError(f"{p}: not a {FORMAT} capture (no line is a JSON record)")


Shared = dict[tuple[Any, ...], Any]


def share_repeats(rec: Record, shared: Shared) -> None:
    """Make equal header pairs and equal client and auth descriptions one object across records.

    The descriptions are `tags.sdk` and `tags.auth`. Most headers repeat from exchange to
    exchange, as do the client and its key: content type, SDK headers, server headers.
    Sharing them saves a third of the memory the records take. The records are read, never
    modified, by the analysis."""
    for part in (rec.get("request"), rec.get("response")):
        if not isinstance(part, dict):
            continue
        headers = part.get("headers")
        if isinstance(headers, list):
            part["headers"] = [
                shared.setdefault((h[0], h[1]), h)
                if type(h) is list and len(h) == 2 and type(h[1]) is str
                else h
                for h in headers
            ]
    tags = rec.get("tags")
    if isinstance(tags, dict):
        for name in ("sdk", "auth"):
            value = tags.get(name)
            if type(value) is dict:
                with contextlib.suppress(TypeError):  # a nested value: not worth sharing
                    tags[name] = shared.setdefault((name, *value.items()), value)


def load_records(paths: Iterable[str | os.PathLike[str]]) -> list[Record]:
    """Load all records of several captures in file order, to be analysed, not modified.

    Each session comes with all its parts (`wirediff.record.parts`). Every record read is
    here: which of them an analysis keeps (the first of each id, the newest of retried replay
    attempts) is `wirediff.analysis.index.kept`'s to say.

    The cyclic garbage collector is paused while they are parsed and then told to leave
    them alone (`gc.freeze`): parsed JSON holds no reference cycles, so reference counting
    frees the records when they are dropped, and collections that walk millions of record
    objects again and again would otherwise take most of the time of loading and analysis.
    Repeated headers and client descriptions are shared between records (`share_repeats`).
    """
    out: list[Record] = []
    shared: Shared = {}
    with paused_gc(freeze=True):
        for path in expand_parts(paths):
            for rec in iter_records(path):
                share_repeats(rec, shared)
                out.append(rec)
    return out


def _started(rec: Record) -> float:
    """Return a record's start time, 0 when it has none or NaN, which orders against nothing."""
    t = rec.get("started")
    ok = isinstance(t, int | float) and not isinstance(t, bool) and t == t
    return float(t) if ok else 0.0


def newest_attempts(keys: Sequence[Hashable], started: Sequence[float]) -> list[bool]:
    """Tell which attempts are the newest of their key: the greatest `started`, the later on a tie.

    The replayer resumes from the newest attempt at each original and label; the analysis
    drops the attempts a newer one superseded. Both ask this."""
    newest: dict[Hashable, tuple[float, int]] = {}
    for i, (key, t) in enumerate(zip(keys, started, strict=True)):
        newest[key] = max(newest.get(key, (-math.inf, -1)), (t, i))
    is_newest = [False] * len(keys)
    for _, i in newest.values():
        is_newest[i] = True
    return is_newest


def latest_replays(records: Iterable[Record]) -> list[Record]:
    """Drop from `records` the replays a newer attempt at the same original superseded, in order.

    A resumed run appends a new attempt where the earlier one got no answer or was
    skipped; only the newest says how the target answers (`newest_attempts`).
    """
    recs = list(records)
    at = [i for i, rec in enumerate(recs) if rec.get("replay_of")]
    keys = [(str(recs[i]["replay_of"]), recs[i].get("label")) for i in at]
    newest = newest_attempts(keys, [_started(recs[i]) for i in at])
    superseded = {i for i, keep in zip(at, newest, strict=True) if not keep}
    return [rec for i, rec in enumerate(recs) if i not in superseded]


RETRIED_KINDS = frozenset(
    {"skipped", "upstream_unreachable", "tls", "timeout", "upstream_disconnect", "interrupted"}
)
"""The `error.kind`s of a replay attempt that a resumed run sends again.

They say nothing about the target's API: a `tls` attempt sent nothing, its handshake failed."""
