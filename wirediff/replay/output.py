"""Find where replay records go, and what is there already for resuming.

Each session and target has one `.jsonl`, appended to."""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from wirediff._types import Record
from wirediff.errors import CaptureError, UsageError
from wirediff.record.exchange import Exchange
from wirediff.record.parts import not_a_file_name
from wirediff.record.spool import RecordMeta, Spool
from wirediff.record.store import RecordWriter, iter_records, latest_replays
from wirediff.replay.config import Options
from wirediff.replay.targets import Target

__all__ = ["Writers", "output_path", "replay_history"]


def output_path(rec: Record, capture_of: Mapping[str, Path], target: Target, opts: Options) -> Path:
    """Return `-o OUT`, else `<capture dir>/<session>.<label>.jsonl` next to the original.

    A session that is no file name, such as `../x` in a capture another tool wrote, is refused:
    the output stays beside the capture."""
    if opts.output is not None:
        return opts.output
    src = capture_of[str(rec["id"])]
    session = str(rec.get("session") or src.stem)
    wrong = not_a_file_name(session)
    if wrong:
        raise UsageError(
            f"{src}: exchange {str(rec['id'])!r}: its session {session!r} is {wrong}, not a "
            "file name beside the capture; name the output with -o OUT"
        )
    return src.parent / f"{session}.{target.label}.jsonl"


History = tuple[dict[str, Record], Counter[str]]
"""A label's newest replay record by original id, and how many records each original has."""


def replay_history(outputs: Mapping[str, Iterable[Path]]) -> dict[str, History]:
    """Find each label's newest replay record in its output files, by original id.

    A resumed run reads it; `wirediff.replay.plan.resumed` says which of them are done. Also
    counts how many records each original has: a new attempt is number n + 1. A file several
    labels share is read once."""
    wanted: dict[Path, set[str]] = {}
    for label, paths in outputs.items():
        for p in paths:
            wanted.setdefault(p, set()).add(label)
    found: dict[str, list[Record]] = {label: [] for label in outputs}
    for p, labels in sorted(wanted.items()):
        if not p.exists():
            continue
        read = 0
        try:
            for rec in iter_records(p, as_sent=True):
                read += 1
                label = rec.get("label")
                if isinstance(label, str) and label in labels and rec.get("replay_of"):
                    found[label].append(rec)
        except CaptureError as e:
            if read:  # a capture: what is wrong with it is said as of any capture
                raise
            raise CaptureError(
                f"{e}; the replay would append its records to it: name another output (-o)"
            ) from None
    return {
        label: (
            {str(rec["replay_of"]): rec for rec in latest_replays(recs)},
            Counter(str(rec["replay_of"]) for rec in recs),
        )
        for label, recs in found.items()
    }


class Writers:
    """Keep one append-only writer per output file, shared by all targets of a run.

    With a `Spool`, records are built and appended by the spool process (`write_exchange`,
    and `write` for records built here); this process writes only what the spool could not
    take, once it is closed or gone.
    """

    def __init__(self, paths: Iterable[Path] = (), spool: Spool | None = None) -> None:
        self._w: dict[Path, RecordWriter] = {}
        self.spool = spool
        for p in paths:
            self._appendable(p)
            if spool is None:
                self._writer(p)

    @staticmethod
    def _appendable(path: Path) -> None:
        """Make the file and its directory, and check it is appendable.

        This happens before anything is sent, so an unwritable output fails at once, not after
        the first answer."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8"):
            pass

    def _writer(self, path: Path) -> RecordWriter:
        w = self._w.get(path)
        if w is None:
            self._appendable(path)
            w = self._w[path] = RecordWriter(path)
        return w

    def write(self, path: Path, rec: Record) -> None:
        if self.spool is not None and self.spool.record(path, rec):
            return
        self._writer(path).write(rec)

    def write_exchange(self, path: Path, ex: Exchange, meta: RecordMeta) -> bool:
        """Hand `ex` to the spool to record.

        False when there is none or it is gone: build the record here."""
        return self.spool is not None and self.spool.exchange(path, ex, meta)

    def close(self) -> None:
        """Close the spool and every writer; what the spool never got is written here.

        Records a full disk kept from being written are an error."""
        failed = False
        if self.spool is not None:
            spool, self.spool = self.spool, None
            for path, rec in spool.close_unsent():
                self._writer(path).write(rec)
            failed = spool.proc.returncode != 0
        writers = list(self._w.values())
        self._w.clear()
        for w in writers:
            w.close()
        for w in writers:
            w.check()
        if failed:
            raise OSError(errno.EIO, "records could not be written (the reason is above)")
