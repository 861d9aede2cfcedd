"""Persistence of `wirediff/1` captures: append-only JSON Lines, flushed per record.

Reading tolerates a truncated last line (a capture cut by a crash or Ctrl-C) and rejects
anything that is not `wirediff/1` with a one-line reason.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from wirediff import FORMAT
from wirediff._support import paused_gc
from wirediff._types import Record
from wirediff.errors import CaptureError


def _after_last_newline(fh: IO[bytes], size: int, block: int = 1 << 16) -> int:
    """Offset just after the last b"\\n" before `size` (0 if there is none)."""
    end = size
    while end > 0:
        start = max(end - block, 0)
        fh.seek(start)
        at = fh.read(end - start).rfind(b"\n")
        if at != -1:
            return start + at + 1
        end = start
    return 0


class RecordWriter:
    """Append records to a `.jsonl` file, one line each, flushed as written."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = None

    def write(self, record: Record) -> None:
        if self._fh is None:
            self._fh = self._open()
        try:
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
            line.encode("utf-8")
        except UnicodeEncodeError:  # lone surrogates (undecodable header bytes): escape them
            line = json.dumps(record, ensure_ascii=True, separators=(",", ":"))
        self._fh.write(line + "\n")
        self._fh.flush()

    def _open(self) -> IO[str]:
        """Open for append; a fragment left by a writer killed mid-line is moved aside to
        `<file>.fragments` so the capture stays readable and appendable."""
        with contextlib.suppress(FileNotFoundError), self.path.open("r+b") as rb:
            size = rb.seek(0, os.SEEK_END)
            rb.seek(max(size - 1, 0))
            if size and rb.read(1) != b"\n":
                cut = _after_last_newline(rb, size)
                rb.seek(cut)
                with self.path.with_name(self.path.name + ".fragments").open("ab") as frag:
                    frag.write(rb.read() + b"\n")
                rb.truncate(cut)
        return self.path.open("a", encoding="utf-8")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


BATCH_LINES = 1000
"""Lines parsed by one `json.loads` call: the decoder shares the key strings of all the
records in a call, which saves a fifth of their memory."""


def _parse_batch(
    p: Path, batch: list[tuple[int, bytes]]
) -> tuple[list[Any], tuple[int, bytes] | None]:
    """The values of `(lineno, line)` lines and, when the last one is not JSON, that line
    (a cut write, if nothing follows it); any other bad line is an error."""
    if not batch:
        return [], None
    try:
        values = json.loads(b"[" + b",".join(line for _, line in batch) + b"]")
        if isinstance(values, list) and len(values) == len(batch):
            return values, None
    except ValueError:
        pass
    values, pending = [], None  # one line at a time, to find the bad one
    for lineno, line in batch:
        if pending is not None:
            raise CaptureError(f"{p}:{pending[0]}: not a JSON record")
        try:
            values.append(json.loads(line))
        except ValueError:
            pending = (lineno, line)
    return values, pending


def _checked(p: Path, batch: list[tuple[int, bytes]], values: list[Any]) -> list[Record]:
    """`values` (those of the first lines of `batch`) once each is a `wirediff/1` record."""
    for (lineno, _), rec in zip(batch, values, strict=False):
        if not isinstance(rec, dict) or rec.get("format") != FORMAT:
            found = rec.get("format") if isinstance(rec, dict) else type(rec).__name__
            raise CaptureError(f"{p}:{lineno}: not a {FORMAT} record (format={found!r})")
        problem = _malformed(rec)
        if problem:
            raise CaptureError(f"{p}:{lineno}: malformed {FORMAT} record ({problem})")
    return values


def _malformed(rec: Record) -> str | None:
    """The first structural fault the analysis could trip over, if any (cheap checks)."""
    if not isinstance(rec.get("id"), str):
        return "id must be a string"
    if not isinstance(rec.get("request"), dict):
        return "request must be an object"
    resp = rec.get("response")
    if resp is not None:
        if not isinstance(resp, dict):
            return "response must be an object or null"
        status = resp.get("status")
        if status is not None and type(status) is not int:
            return "response.status must be an integer"
        if not isinstance(resp.get("events"), list | None):
            return "response.events must be a list or null"
    for key in ("tags", "error"):
        if not isinstance(rec.get(key), dict | None):
            return f"{key} must be an object or null"
    return None


def iter_records(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Records of one capture file; a bad line that is the last one is a cut write and skipped."""
    p = Path(path)
    try:
        fh = p.open("rb")
    except OSError as e:
        raise CaptureError(f"{p}: cannot read capture ({e.strerror or e})") from None
    with fh:
        pending: tuple[int, bytes] | None = None
        batch: list[tuple[int, bytes]] = []
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if pending is not None:
                raise CaptureError(f"{p}:{pending[0]}: not a JSON record")
            batch.append((lineno, line))
            if len(batch) == BATCH_LINES:
                values, pending = _parse_batch(p, batch)
                yield from _checked(p, batch, values)
                batch = []
        values, pending = _parse_batch(p, batch)
        yield from _checked(p, batch, values)


Shared = dict[tuple[Any, ...], Any]


def _share_repeats(rec: Record, shared: Shared) -> None:
    """Make equal header pairs, and equal client (`tags.sdk`) and auth (`tags.auth`)
    descriptions, one object each across records.

    Most headers repeat from exchange to exchange (content type, SDK headers, server
    headers), as do the client and its key: sharing them saves a third of the memory the
    records take. The records are read, never modified, by the analysis.
    """
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


def load_records(
    paths: Iterable[str | os.PathLike[str]], *, superseded: bool = False
) -> list[Record]:
    """All records of several captures, in file order, to be analysed (not modified);
    failed replay attempts that a resumed `wirediff replay` tried again are left out
    unless `superseded` (see `drop_retried`).

    The cyclic garbage collector is paused while they are parsed and then told to leave
    them alone (`gc.freeze`): parsed JSON holds no reference cycles, so reference counting
    frees the records when they are dropped, and collections that walk millions of record
    objects again and again would otherwise take most of the time of loading and analysis.
    Repeated headers and client descriptions are shared between records (`_share_repeats`).
    """
    out: list[Record] = []
    shared: Shared = {}
    with paused_gc(freeze=True):
        for path in paths:
            for rec in iter_records(path):
                _share_repeats(rec, shared)
                out.append(rec)
    return out if superseded else drop_retried(out)


def _started(rec: Record) -> float:
    t = rec.get("started")
    return float(t) if isinstance(t, int | float) and not isinstance(t, bool) else 0.0


def latest_replays(records: Iterable[Record]) -> list[Record]:
    """`records` without the replays superseded by a newer attempt at the same original
    for the same label (the greatest `started`; on a tie, the later record), in order.

    A resumed run appends a new attempt where the earlier one got no answer or was
    skipped; only the newest says how the target answers.
    """
    recs = list(records)
    newest: dict[tuple[str, Any], tuple[float, int]] = {}
    for i, rec in enumerate(recs):
        if rec.get("replay_of"):
            key = (str(rec["replay_of"]), rec.get("label"))
            newest[key] = max(newest.get(key, (-math.inf, -1)), (_started(rec), i))
    return [
        rec
        for i, rec in enumerate(recs)
        if not rec.get("replay_of") or newest[(str(rec["replay_of"]), rec.get("label"))][1] == i
    ]


RETRIED_KINDS = frozenset({"skipped", "upstream_unreachable", "timeout", "upstream_disconnect"})
"""Replay outcomes that a resumed run sends again: they say nothing about the target."""


def drop_retried(records: Iterable[Record]) -> list[Record]:
    """`records` without the replay attempts that got no answer (`RETRIED_KINDS`) and were
    tried again later; answered replays all stay (two answers to one original are how
    noise is told from a divergence)."""
    recs = list(records)
    latest = {id(r) for r in latest_replays(recs)}
    return [
        r
        for r in recs
        if not r.get("replay_of")
        or id(r) in latest
        or (r.get("error") or {}).get("kind") not in RETRIED_KINDS
    ]
