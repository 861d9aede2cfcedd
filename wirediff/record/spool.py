"""Build and append records of exchanges in a process of their own: the spool.

The replayer sends what it sent and got back as an `Exchange`. Building its record
(decoding, parsing, redacting, tagging, encoding JSON) costs about as much client CPU as
sending it did; on the sender's event loop it is time taken from sending. So each answered exchange goes down a pipe (`wirediff.record.pipe`)
as plain values (`exchange_state`) with where its record goes and what it is, and
`python -m wirediff.record.spool` builds the records with the same `build_record` and
appends them, one writer per file, in the order sent. A record the sender built itself (one
it reads ids from) goes as its encoded line. What cannot be written (a full disk that stays
full) is said on stderr and the process exits 1.

Usage (started by `Spool`): python -m wirediff.record.spool BODY_CAP
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from wirediff._types import Record
from wirediff.record.build import build_record, fallback_record
from wirediff.record.exchange import Exchange, exchange_from_state, exchange_state
from wirediff.record.pipe import FramePipe, frame_batches
from wirediff.record.store import RecordWriter, encode_record

__all__ = ["RecordMeta", "Spool", "WriteReport", "build_item", "say", "serve"]

RecordMeta = dict[str, Any]
"""What a record says about its exchange besides the exchange.

`session`, `label`, `seq`, `listener`, `replay_of`, and `attempt` when it is not the first."""
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent.parent)
"""Where `wirediff` is imported from here: the spool process imports it from there too."""
RETRY_SECONDS = 1.0
"""How often records waiting for a full disk are tried again when nothing else arrives."""


class WriteReport:
    """Say one line when a writer starts failing, one when it writes again, one for what is lost.

    `who` starts each line, `say` says it."""

    def __init__(self, writer: RecordWriter, who: str, say: Callable[[str], None]) -> None:
        self.writer, self.who, self.say = writer, who, say
        self.failing = False

    def __call__(self) -> None:
        w = self.writer
        if w.failure is not None and not self.failing:
            self.failing = True
            self.say(
                f"{self.who}: cannot write {w.path}: {w.failure.strerror or w.failure}; "
                f"records wait in memory until it can (up to {w.waiting} now)"
            )
        elif w.failure is None and self.failing:
            self.failing = False
            self.say(f"{self.who}: writing {w.path} again; the waiting records are written")

    def close(self) -> int:
        """Close the writer; say how many records were not written, if any, and return how many."""
        w = self.writer
        w.close()
        self()
        lost = w.waiting + w.lost
        if lost:
            why = w.failure.strerror if w.failure is not None else "unknown"
            self.say(f"{self.who}: {lost} records could not be written to {w.path} ({why})")
        return lost


def say(line: str) -> None:
    """Say a line on stderr at once."""
    print(line, file=sys.stderr, flush=True)


def build_item(
    ex: Exchange,
    meta: Mapping[str, Any],
    body_cap: int,
    redact: frozenset[str],
    who: str = "wirediff",
) -> Record:
    """Build the record of `ex` as `meta` describes it; when it cannot be built, what is certain.

    `who` starts the line that says it could not be built."""
    try:
        rec = build_record(
            ex,
            session=str(meta.get("session") or ""),
            label=str(meta.get("label") or ""),
            seq=int(meta.get("seq") or 0),
            listener=meta.get("listener"),
            replay_of=meta.get("replay_of"),
            body_cap=body_cap,
            redact=redact,
        )
    except Exception as e:  # never lose the exchange: keep what is certain
        say(f"{who}: could not build the record of {ex.request.method} {ex.id}: {e!r}")
        rec = fallback_record(
            ex,
            str(meta.get("session") or ""),
            e,
            label=str(meta.get("label") or ""),
            seq=int(meta.get("seq") or 0),
            replay_of=meta.get("replay_of"),
        )
    if meta.get("attempt"):
        rec["attempt"] = meta["attempt"]
    return rec


class Spool(FramePipe):
    """Run the spool process from the sender's end: forked where that is safe, else started.

    `exchange` and `record` return False when the spool process is gone or too far behind:
    the caller then builds and writes the record itself; `close_unsent` builds what never
    reached the process."""

    def __init__(self, body_cap: int) -> None:
        args = [str(body_cap)]
        super().__init__(
            "wirediff.record.spool", args, PACKAGE_ROOT, fork=lambda fd: main(args, fd)
        )
        self.body_cap = body_cap

    @property
    def name(self) -> str:
        return "spool"

    def exchange(self, path: Path, ex: Exchange, meta: RecordMeta) -> bool:
        return self.send((str(path), exchange_state(ex), meta))

    def record(self, path: Path, rec: Record) -> bool:
        return self.send((str(path), encode_record(rec), None))

    def close_unsent(self) -> list[tuple[Path, Record]]:
        """Close, and build what never reached the process (`close`)."""
        out = []
        for path, what, meta in self.close():
            if meta is None:
                out.append((Path(path), _decoded(what)))
            else:
                ex = exchange_from_state(what)
                out.append((Path(path), build_item(ex, meta, self.body_cap, frozenset())))
        return out


def _decoded(line: bytes) -> Record:
    rec: Record = json.loads(line)
    return rec


def serve(body_cap: int, fd: int = 0) -> int:
    """Read items from `fd` until it closes; build and append their records.

    Return 0 when every record was written, else 1, said on stderr."""
    reports: dict[str, WriteReport] = {}

    def writer(path: str) -> RecordWriter:
        if path not in reports:
            reports[path] = WriteReport(RecordWriter(path), "wirediff", say)
        return reports[path].writer

    def report() -> None:
        for said in reports.values():
            said()

    def retry_after() -> float | None:
        return RETRY_SECONDS if any(r.writer.waiting for r in reports.values()) else None

    for items in frame_batches(fd, retry_after):
        if items is None:
            for said in reports.values():
                said.writer.retry()
            report()
            continue
        lines: dict[str, list[bytes]] = {}
        for path, what, meta in items:
            if meta is not None:
                ex = exchange_from_state(what)
                what = encode_record(build_item(ex, meta, body_cap, frozenset()))
            lines.setdefault(path, []).append(what)
        for path, batch in lines.items():
            writer(path).write_lines(batch)
        report()
    return 1 if sum(said.close() for said in reports.values()) else 0


def main(argv: list[str], fd: int = 0) -> int:
    return serve(int(argv[0]), fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
