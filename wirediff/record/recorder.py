"""Build and write records in a process of their own, off the proxy.

Building a record (decoding, parsing, redacting, tagging, encoding JSON) costs several
times what taking a flow's `snapshot` does, and on mitmproxy's event loop it is CPU taken
from forwarding. So the capture addon sends each snapshot down a pipe (`wirediff.record.pipe`:
`marshal` frames, written in batches without blocking the event loop) to
`python -m wirediff.record.recorder`, which builds the records and appends them in
batches. The recorder reads until the pipe closes: what was sent is written even when
mitmdump is killed. A full disk is reported once, and the records wait (`RecordWriter`).

Usage (started by the addon):
    python -m wirediff.record.recorder FILE SESSION BODY_CAP [REDACT] [ROTATE]
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from wirediff._types import Record
from wirediff.record.flow import Snapshot, exchange_from_snapshot
from wirediff.record.parts import Rotation, parse_rotation
from wirediff.record.pipe import FRAME, FramePipe, frame_batches
from wirediff.record.spool import WriteReport, build_item, say
from wirediff.record.store import RecordWriter, encode_record

__all__ = ["FRAME", "Job", "Recorder", "build_job", "serve"]

Job = tuple[Snapshot, str, int, "str | None", "str | None"]
"""`(snapshot, label, seq, listener, replay_of)`: what a record is built from."""
RETRY_SECONDS = 1.0
"""How often records waiting for a full disk are tried again when nothing else arrives."""


def build_job(job: Job, session: str, body_cap: int, redact: frozenset[str]) -> Record:
    """Build the record of one job; when it cannot be built, what is certain about it."""
    snap, label, seq, listener, replay_of = job
    meta = {
        "session": session,
        "label": label,
        "seq": seq,
        "listener": listener,
        "replay_of": replay_of,
    }
    return build_item(exchange_from_snapshot(snap), meta, body_cap, redact, "capture")


def serve(
    path: Path,
    session: str,
    body_cap: int,
    redact: frozenset[str],
    fd: int = 0,
    rotation: Rotation | None = None,
) -> None:
    """Read jobs from `fd` until it closes; build and append their records."""
    writer = RecordWriter(path, rotation)
    report = WriteReport(writer, "capture", say)
    for jobs in frame_batches(fd, lambda: RETRY_SECONDS if writer.waiting else None):
        if jobs is None:
            writer.retry()
        else:
            writer.write_lines(
                [encode_record(build_job(j, session, body_cap, redact)) for j in jobs]
            )
        report()
    report.close()


class Recorder(FramePipe):
    """Run a recorder process with a pipe to it that never blocks the loop: the addon's end.

    The pipe is a `wirediff.record.pipe.FramePipe`. When the recorder is gone or too far behind,
    `send` returns False and the caller records in-process; `close` hands back the jobs that
    never reached the pipe.
    """

    def __init__(
        self,
        path: Path,
        session: str,
        body_cap: int,
        redact: frozenset[str],
        pythonpath: str,
        rotate: str = "",
    ) -> None:
        args = [str(path), session, str(body_cap), ",".join(sorted(redact)), rotate]
        super().__init__("wirediff.record.recorder", args, pythonpath)

    @property
    def name(self) -> str:
        return "recorder"


NICE = 5
"""The recorder yields the CPU to the proxy when both want it: records may lag, traffic not."""


def main(argv: list[str]) -> int:
    with contextlib.suppress(OSError):
        os.nice(NICE)
    path, session, cap, redact, rotate = [*argv, "", ""][:5]
    names = frozenset(n for n in redact.split(",") if n)
    serve(Path(path), session, int(cap), names, rotation=parse_rotation(rotate))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
