"""Split a session's capture into parts: `<session>.jsonl`, `<session>.1.jsonl`….

`capture_rotate` (a size such as `100MB`, or a duration such as `1h`) makes the capture start
a new part when the current one is that big or that old; a record never spans parts. The
first part keeps the plain name, so nothing changes without rotation. Every loader reads a
session as all its parts, in order, given any one of them. A part's suffix is all digits,
and a replay's or a mirror's output (`<session>.<label>.jsonl`, its records replays) is never
one, whatever its label (`llama3` and `llama3.1`): those are never rotated.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from glob import escape
from pathlib import Path

from wirediff._support import printable

__all__ = [
    "BOM",
    "HEAD_BYTES",
    "Rotation",
    "capture_parts",
    "expand_parts",
    "first_part",
    "names_a_part",
    "opens_a_capture",
    "parse_rotation",
    "part_path",
    "session_parts",
    "session_problem",
]

log = logging.getLogger(__name__)
SUFFIX = ".jsonl"
_PART = re.compile(r"^(?P<base>.+)\.(?P<n>\d+)$")
_SPEC = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z]+)\s*$")
SIZES = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
}
DURATIONS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class Rotation:
    """Say when a capture starts its next part: at a size in bytes, or at an age in seconds."""

    max_bytes: int | None = None
    max_seconds: float | None = None

    def due(self, size: int, age: float) -> bool:
        """Tell whether the current part, `size` bytes, opened `age` seconds ago, is full."""
        if self.max_bytes is not None:
            return size >= self.max_bytes
        return self.max_seconds is not None and size > 0 and age >= self.max_seconds


def parse_rotation(text: str) -> Rotation | None:
    """Parse `100MB`, `512KiB`, `1h`, `30m`, `90s` or `1d`; empty means no rotation.

    KB, MB, GB are powers of 1000; KiB, MiB, GiB of 1024. Anything else is a `ValueError`."""
    if not text.strip():
        return None
    m = _SPEC.match(text)
    unit = m["unit"].lower() if m else ""
    if m is None or (unit not in SIZES and unit not in DURATIONS):
        raise ValueError(
            f"capture_rotate must be a size (100MB, 512KiB) or a duration (1h, 30m), not {text!r}"
        )
    amount = float(m["n"])
    if amount <= 0:
        raise ValueError(f"capture_rotate must be more than nothing, not {text!r}")
    if unit in SIZES:
        return Rotation(max_bytes=max(1, int(amount * SIZES[unit])))
    return Rotation(max_seconds=amount * DURATIONS[unit])


def names_a_part(stem: str) -> bool:
    """Tell whether a session named so, `s.2`, would read as a part of another, `s`."""
    return _PART.match(stem) is not None


def first_part(path: Path) -> Path | None:
    """Name the first part of the session a file named as a later part is of, `s.2.jsonl` →
    `s.jsonl`; None for any other name."""
    m = _PART.match(path.name[: -len(SUFFIX)]) if path.name.endswith(SUFFIX) else None
    return path.with_name(m["base"] + SUFFIX) if m else None


def not_a_file_name(name: str) -> str | None:
    """Say why `name` cannot name a file in a folder, or None: it is a path, or unprintable."""
    if name in ("", ".", "..") or "/" in name:
        return "a path"
    if printable(name) != name:
        return "a name with control characters"
    return None


def session_problem(session: str) -> str | None:
    """Say why `session` cannot name a capture file's stem, or None when it can.

    Besides any file name's rules, it names no hidden file and no part of another session."""
    wrong = not_a_file_name(session)
    if wrong == "a path" or session.startswith("."):
        return f"is a file name, not a path: {session!r}"
    if wrong:
        return f"is a file name without control characters: {session!r}"
    if names_a_part(session):
        return (
            f"{session!r} would read as part of the session {session.rsplit('.', 1)[0]!r} "
            "(`.<n>` names a part of a rotated capture)"
        )
    return None


def part_path(base: Path, n: int) -> Path:
    """Name part `n` of the capture whose first part is `base`: `s.jsonl` → `s.3.jsonl`."""
    if n == 0:
        return base
    return base.with_name(f"{base.name[: -len(SUFFIX)]}.{n}{SUFFIX}")


def capture_parts(path: str | os.PathLike[str]) -> list[Path]:
    """List every part of the session `path` is a part of, in order.

    `path` alone when it has none, or is no `.jsonl`."""

    def head(p: str) -> bytes:
        with open(p, "rb") as fh:
            return fh.read(HEAD_BYTES)

    return [
        Path(p)
        for p in session_parts(
            os.fspath(path),
            lambda p: Path(p).is_file(),
            lambda d, pattern: map(str, Path(d).glob(pattern)),
            head,
        )
    ]


HEAD_BYTES = 4096
"""Bytes of a file read to tell a replay's output from a capture's part, or a capture at all."""
BOM = b"\xef\xbb\xbf"
_CAPTURE_HEAD = re.compile(rb'\{\s*"format"\s*:\s*"wirediff/')


def opens_a_capture(head: bytes) -> bool:
    """Tell whether a file's first bytes open a wirediff record, as a capture's first line does.

    A byte-order mark and blank lines before it are passed over, as reading a capture does."""
    return _CAPTURE_HEAD.match(head.removeprefix(BOM).lstrip()) is not None


_REPLAY_OF = re.compile(rb'"replay_of"\s*:\s*"')


def _replays(head: bytes) -> bool:
    """Tell whether the first record is a replay: a replay's or a mirror's output.

    Such output is never rotated, so it is no part, however it is named: labels `llama3` and
    `llama3.1`."""
    return _REPLAY_OF.search(head.split(b"\n", 1)[0]) is not None


def session_parts(
    path: str,
    is_file: Callable[[str], bool],
    glob: Callable[[str, str], Iterable[str]],
    head: Callable[[str], bytes],
) -> list[str]:
    """Find a capture's parts as `capture_parts` does, on any filesystem.

    That is this machine's, or an fsspec one at a URL, with its paths as text, `is_file(path)`,
    `glob(folder, pattern)` (the matching paths) and `head(path)` (a file's first bytes) its
    own."""
    folder, name = os.path.split(path)
    if not name.endswith(SUFFIX):
        return [path]
    stem = name[: -len(SUFFIX)]
    m = _PART.match(stem)
    if m is not None and is_file(os.path.join(folder, m["base"] + SUFFIX)):
        if is_file(path) and _replays(head(path)):
            return [path]
        stem = m["base"]  # `s.2.jsonl` → `s.jsonl`, when there is one
    first = os.path.join(folder, stem + SUFFIX)
    numbered: list[tuple[int, str]] = []
    for p in glob(folder or ".", f"{escape(stem)}.*{SUFFIX}"):
        m = _PART.match(os.path.basename(p)[: -len(SUFFIX)])
        if m is not None and m["base"] == stem and is_file(p) and not _replays(head(p)):
            numbered.append((int(m["n"]), os.path.join(folder, os.path.basename(p))))
    if numbered and is_file(first) and _replays(head(first)):
        return [first]
    numbers = {n for n, _ in numbered}
    gaps = sorted(set(range(1, max(numbers, default=0))) - numbers)
    if gaps:
        _say_missing(first, tuple(gaps))
    return [first, *(p for _, p in sorted(numbered))]


@functools.cache
def _say_missing(first: str, gaps: tuple[int, ...]) -> None:
    """Warn that parts of a rotated session are gone, and their exchanges: once a process.

    A command resolves its inputs several times; each session and gap is said once."""
    base, _ = os.path.splitext(first)
    named = ", ".join(f"{base}.{n}{SUFFIX}" for n in gaps[:3]) + (" …" if len(gaps) > 3 else "")
    log.warning(
        f"{first}: parts of its session are missing ({named}): their exchanges are not read"
    )


def expand_parts(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand several captures into files, each session as all its parts, each file once.

    A glob such as `captures/*.jsonl` names the parts too."""
    out: dict[Path, None] = {}
    for p in paths:
        for part in capture_parts(p):
            out.setdefault(part, None)
    return list(out)
