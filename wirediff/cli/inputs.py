"""Check the captures a command is given, as the user named them.

The store reads what a capture holds (torn lines and an unfinished last line skipped with a
warning, bad records an error naming file:line). What only a command can judge is checked here:
a file named on the command line that holds nothing is not a capture to analyse, and a HAR or
flow file wants `wirediff import`.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import logging
import os
import re
import shutil
import stat
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from wirediff import FORMAT
from wirediff._types import Record
from wirediff.errors import CaptureError, UsageError
from wirediff.record.lines import is_json
from wirediff.record.parts import (
    BOM,
    HEAD_BYTES,
    expand_parts,
    first_part,
    opens_a_capture,
)
from wirediff.record.store import iter_records
from wirediff.replay.targets import key_in, key_variable

__all__ = [
    "among",
    "capture_file",
    "distinct_outputs",
    "iter_capture",
    "key_from_env",
    "named_captures",
    "on_stdout",
    "read_once",
]

log = logging.getLogger(__name__)

IMPORTED_SUFFIXES = (".har", ".flow", ".mitm")
"""Suffixes of files that `wirediff import` turns into captures, named in an error about them."""
_BLOCK = 1 << 20
STDIN = "/dev/stdin"
"""What a capture named `-` is read from, as every command's `-` for an output is stdout."""


def capture_file(path: str | os.PathLike[str], *, piped: bool = False) -> Path:
    """Return `path` when it can be a capture: a readable file with a line that is whole or JSON.

    An empty file, or one holding only an unfinished line, has no exchange. `-` is stdin.
    `piped` says that `path` holds what came through a pipe, which advice cannot name."""
    shown = str(path)
    p = Path(STDIN if shown == "-" else path)
    if shown == "-" and os.isatty(0):
        raise CaptureError("-: stdin is a terminal; pipe a capture in (zcat s.jsonl.gz | …)")
    if not str(path).strip():
        raise CaptureError(f"{str(path)!r}: empty; name a capture file")
    if "://" in str(path):  # the engine's commands take URLs before they come here
        raise CaptureError(f"{path}: a URL; this command reads capture files on this machine")
    try:
        with p.open("rb") as fh:
            if not p.is_file():  # a pipe or a device: read once, by the store
                return p
            first = next((line for line in fh if line.strip()), None)
            head = (first or b"") + fh.read(HEAD_BYTES)
    except IsADirectoryError:
        from wirediff.engine.sources import DATASET_MARK

        if (p / DATASET_MARK).is_file():  # the engine's commands take datasets before
            raise CaptureError(
                f"{shown}: a Parquet dataset; this command reads the JSON Lines captures it was "
                "exported from"
            ) from None
        raise CaptureError(
            f"{shown}: a directory, neither a capture file nor a dataset (no {DATASET_MARK}, "
            "which wirediff export writes last)"
        ) from None
    except OSError as e:
        raise CaptureError(f"{shown}: cannot read capture ({e.strerror or e})") from None
    if first is None:
        raise CaptureError(f"{shown}: empty, not a {FORMAT} capture (no exchanges)")
    if _HAR_HEAD.match(head.removeprefix(BOM)):
        raise CaptureError(
            f"{shown}: a HAR archive, not a {FORMAT} capture; `wirediff import` converts it"
        )
    source = "FILE" if piped else shown  # a pipe's source has no name here
    if first.startswith(_GZIP):
        raise CaptureError(
            f"{shown}: gzip-compressed; give it decompressed, through a pipe: "
            f"zcat {source} | wirediff COMMAND -"
        )
    if _utf16(first):
        raise CaptureError(
            f"{shown}: UTF-16 text (what PowerShell's `>` writes), where a {FORMAT} capture is "
            f"UTF-8; convert it: iconv -f UTF-16 -t UTF-8 {source} > capture.jsonl"
        )
    if first.lstrip().startswith(b"<"):
        raise CaptureError(
            f"{shown}: an HTML or XML page, not a {FORMAT} capture (a report? name the captures "
            "it was made from)"
        )
    if not first.endswith(b"\n") and not is_json(first):
        raise CaptureError(f"{shown}: not a {FORMAT} capture (one unfinished line, no record)")
    return p


def _utf16(first: bytes) -> bool:
    """Tell whether a file's first line is UTF-16 text: its byte-order mark, or every other
    byte NUL, as ASCII is in UTF-16."""
    if first.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    sample = first[:64]
    return len(sample) >= 4 and (not any(sample[1::2]) or not any(sample[0::2]))


@contextmanager
def _import_hint(paths: Sequence[Path]) -> Iterator[None]:
    """Add to a capture error about a HAR or flow file how to read it."""
    try:
        yield
    except CaptureError as e:
        if any(str(e).startswith(f"{p}") for p in paths if p.suffix in IMPORTED_SUFFIXES):
            raise CaptureError(f"{e}; `wirediff import` converts HAR and flow files") from None
        raise


def iter_capture(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Yield the records of one capture named on a command line, as sent, to be replayed.

    They come as `iter_records` reads them; a capture without any is an error."""
    p = capture_file(path)
    n = 0
    with _import_hint([p]):
        for rec in iter_records(p, as_sent=True):
            n += 1
            yield rec
    if not n:
        raise CaptureError(f"{path}: no exchanges")


def _is_dataset(arg: str) -> bool:
    """Tell whether `arg` is a URL or a Parquet dataset `wirediff export` wrote.

    The engine reads and checks it. An empty name is none, though `Path` reads it as `.`."""
    from wirediff.engine.sources import DATASET_MARK, is_url

    return is_url(arg) or (bool(arg.strip()) and (Path(arg) / DATASET_MARK).is_file())


@contextmanager
def named_captures(paths: Sequence[str | os.PathLike[str]]) -> Iterator[list[str]]:
    """Prepare the captures for a command that reads them itself, on an engine.

    The command is one that reads the captures named on its command line through
    `wirediff.engine`. This yields the paths to read, each capture file checked before
    (`capture_file`) and a pipe (`<(…)`, `/dev/stdin`) copied once to a file, since an
    engine reads a file in ranges, from several processes; its errors worded alike."""
    from wirediff.engine.sources import SHOWN

    folder: list[str] = []
    copies: list[str] = []
    read_once(paths)
    try:
        named = [_spooled(str(p), i, folder) for i, p in enumerate(paths)]
        for n, p in zip(named, paths, strict=True):
            if n != str(p):  # a pipe's copy: named as given
                copies.append(os.path.realpath(n))
                SHOWN[copies[-1]] = str(p)
        files = [Path(n) for n, p in zip(named, paths, strict=True) if not _is_dataset(str(p))]
        with _import_hint(files):
            yield named
    finally:
        for copy in copies:
            SHOWN.pop(copy, None)
        for made in folder:
            shutil.rmtree(made, ignore_errors=True)


def read_once(paths: Sequence[str | os.PathLike[str]]) -> None:
    """Refuse a pipe named twice before any is read, and warn of a file or dataset named twice.

    A pipe's second reading would be empty; a file's is left out, as a record's id read
    before is. Found by `stat`, which opens nothing: a FIFO's second open would wait for a
    writer."""
    given: dict[tuple[int, int], str] = {}
    for arg in map(str, paths):
        try:
            st = os.stat(STDIN if arg == "-" else arg)
        except OSError:
            continue  # said when it is read
        first = given.get((st.st_dev, st.st_ino))
        if first is None:
            given[st.st_dev, st.st_ino] = arg
            continue
        said = arg if first == arg else f"{first} and {arg}"
        if stat.S_ISFIFO(st.st_mode):
            raise UsageError(f"{said}: the same pipe given twice; a pipe is read once")
        log.warning(f"{said}: the same capture given twice; read once")


def _spooled(arg: str, position: int, folder: list[str]) -> str:
    """Check `arg`, the `position`th, as a capture, or copy the pipe it names.

    The copy goes in a folder made once, into `folder`."""
    if _is_dataset(arg):
        return arg
    p = capture_file(arg)
    if p.is_file():
        return str(p)  # `-` as the file its stdin is
    if not folder:
        folder.append(tempfile.mkdtemp(prefix="wirediff-pipe-"))
    copy = Path(folder[0]) / f"{position}-{p.name}"
    try:
        with p.open("rb") as src, copy.open("wb") as dst:
            shutil.copyfileobj(src, dst, _BLOCK)
    except OSError as e:
        raise CaptureError(f"{arg}: cannot read capture ({e.strerror or e})") from None
    try:
        return str(capture_file(copy, piped=True))
    except CaptureError as e:  # about the copy: said of the pipe
        raise CaptureError(str(e).replace(str(copy), arg)) from None


def key_from_env(var: str | None) -> str | None:
    """Read the key in `$var`, or none when no variable is named.

    `--api-key-env VAR` never puts the key itself on the command line; a variable that is not
    set, or empty, is a usage error."""
    var = key_variable(var)
    return None if var is None else key_in(var, os.environ, "--api-key-env")


def on_stdout(outputs: dict[str, Any]) -> bool:
    """Tell whether an output goes to stdout, `-`; two there are a usage error.

    A command writing one there says everything else on stderr."""
    piped = [f"{option} -" for option, out in outputs.items() if out == "-"]
    if len(piped) > 1:
        raise UsageError(f"{' and '.join(piped)}: only one of them can go to stdout")
    return bool(piped)


def distinct_outputs(
    inputs: Sequence[str | os.PathLike[str]],
    outputs: dict[str, Any],
    *,
    appends: bool = False,
    folders: bool = False,
) -> None:
    """Refuse an output that would lose something: a capture, a dataset's file, another output.

    An output is given as `{"-o": "s.jsonl"}`, and checked before anything is read or written.
    Refused: one of the captures the command reads or a part of their sessions, a file that
    would be read as their next part, a path inside a wirediff dataset, and a file two outputs
    name. Unless the command `appends` records to its output, as `replay` does, any other
    capture is refused too: a report written over a capture the command was not given loses it
    all the same. An output is a file, unless `folders`; a directory then, or an output that
    cannot be written, is refused before any work is done, not after another is written."""
    read: list[Path] = []
    for arg in inputs:
        p = Path(STDIN if str(arg) == "-" else arg)
        if p.is_file():
            read += expand_parts([capture_file(p)])
    named: dict[str, str] = {}
    for option, out in outputs.items():
        if not out or str(out) == "-":
            continue
        where = os.path.realpath(out)
        if where in named:
            raise UsageError(f"{named[where]} and {option} both name {out}; name a file for each")
        if Path(out).is_file() or not Path(out).exists():  # a device takes any number
            named[where] = option
        if not folders and (Path(out).is_dir() or os.path.basename(out) in ("", ".", "..")):
            raise UsageError(f"{option} {out}: a directory; name a file")
        dataset = _in_dataset(Path(where))
        if dataset == Path(where):  # only a folder is let this far: `export --parquet`
            raise UsageError(f"{option} {out}: a wirediff dataset already; name a new directory")
        if dataset is not None:
            raise UsageError(
                f"{option} {out}: inside the wirediff dataset {dataset}; name a path outside it"
            )
        if Path(out).is_file() and among(Path(out), read):
            raise UsageError(f"{option} {out}: a capture this command reads; name another file")
        base = first_part(Path(out))
        if not appends and base is not None and among(base, read):
            raise UsageError(
                f"{option} {out}: named as a part of a session this command reads, so it would "
                "be read as one; name another file"
            )
        if not Path(out).is_file():
            continue
        said = None if appends else _as_capture(Path(out))
        if said:
            raise UsageError(f"{option} {out}: {said}; name another file")
    for option, out in outputs.items():
        if out and str(out) != "-":
            _writable(option, Path(out))


def _writable(option: str, out: Path) -> None:
    """Refuse an output that cannot be written, before any work: not one output of several after.

    Nothing is left of the look. A file is opened for appending, which keeps what it holds; a
    device or a pipe is asked, never opened, which would end a pipe's reader; a path to nothing
    yet, a link to nothing too, is told by a file made and removed in the nearest folder."""
    try:
        if out.is_file():
            os.close(os.open(out, os.O_WRONLY | os.O_APPEND))
        elif out.exists():
            if not os.access(out, os.W_OK):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        else:
            folder = next(p for p in (out.parent, *out.parent.parents) if p.exists())
            tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise UsageError(f"{option} {out}: cannot be written ({e.strerror or e})") from None


def _in_dataset(path: Path) -> Path | None:
    """Find the dataset `wirediff export` wrote that `path` is, or is inside, if any."""
    from wirediff.engine.sources import DATASET_MARK

    for folder in (path, *path.parents):
        if (folder / DATASET_MARK).is_file():
            return folder
    return None


def among(path: Path, files: Sequence[Path]) -> bool:
    """Tell whether `path` is one of `files`, by any of their names."""
    for p in files:
        with contextlib.suppress(OSError):
            if os.path.samefile(path, p):
                return True
    return False


def _as_capture(path: Path) -> str | None:
    """Say how a file may be a capture: it opens as one does, gzipped or not, or cannot be read."""
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
        if head.startswith(_GZIP):
            with gzip.open(path, "rb") as fh:
                head = fh.read(HEAD_BYTES)
    except (OSError, EOFError, zlib.error) as e:
        return f"not readable to tell it is no capture ({getattr(e, 'strerror', None) or e})"
    return f"a {FORMAT} capture" if opens_a_capture(head) else None


_GZIP = b"\x1f\x8b"
_HAR_HEAD = re.compile(rb'\s*\{\s*"log"\s*:')
"""How a HAR archive opens, whatever its name."""
