"""Define once the small facts every layer shares."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import gc
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from wirediff._types import Record

__all__ = [
    "NOT_COMPARED",
    "STOPPED_IN_FLIGHT",
    "STOPPED_KINDS",
    "as_bytes",
    "clip",
    "error_kind",
    "give_back_memory",
    "is_2xx",
    "naming",
    "paused_gc",
    "plural",
    "printable",
    "read_yaml",
    "response_status",
    "statuses_2xx",
    "task_gc",
    "terminal_bar",
]


def as_bytes(text: str) -> bytes:
    """Return `text` as the bytes it was decoded from.

    A surrogate from an undecodable byte becomes that byte; any other, a hostile capture's JSON
    escape, becomes its own UTF-8 form."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return b"".join(
            c.encode("utf-8", "surrogateescape" if "\udc80" <= c <= "\udcff" else "surrogatepass")
            for c in text
        )


_BIDI = "\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""Marks and overrides of text direction, which can show a message's words in another order."""
_UNPRINTABLE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff\ufffe\uffff]")
_UNPRINTABLE_LINES = re.compile(
    f"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff\ufffe\uffff]"
)


def printable(text: str, *, lines: bool = False) -> str:
    """Make `text` safe on a terminal and in XML 1.0; with `lines`, keep its line breaks and tabs.

    It escapes control characters (an upstream's ANSI colours, a carriage return, a NUL), marks
    of text direction, lone surrogates and non-characters as `\\x1b`-style escapes, so a
    server's message can neither restyle the terminal nor break a JUnit file, nor hide in a
    report."""
    return (_UNPRINTABLE_LINES if lines else _UNPRINTABLE).sub(_escaped, text)


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def read_yaml(path: str | os.PathLike[str], what: str = "") -> Any:
    """Parse a YAML file the user wrote.

    A `ValueError` says in one line why not: `wirediff.yaml:2: not valid YAML`, `… cannot read
    config: not UTF-8 text`."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"{path}: cannot read{what} ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: cannot read{what} (not UTF-8 text)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f":{where.line + 1}" if where is not None else ""
        raise ValueError(f"{path}{line}: not valid YAML") from None


def field_values(obj: Any) -> tuple[Any, ...]:
    """Take a dataclass's fields as a tuple in their order, plain values `marshal` carries.

    `from_field_values` makes the dataclass again, in another process."""
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


D = TypeVar("D")


def from_field_values(kind: type[D], values: Sequence[Any]) -> D:
    """Make the dataclass `kind` from the tuple `field_values` took of one."""
    names = (f.name for f in dataclasses.fields(kind))  # type: ignore[arg-type]
    return kind(**dict(zip(names, values, strict=True)))


def is_2xx(status: Any) -> bool:
    """Tell whether `status` is a success; anything not an integer, a missing answer, is not."""
    return isinstance(status, int) and not isinstance(status, bool) and 200 <= status < 300


def statuses_2xx(status: Any) -> Any:
    """Apply `is_2xx` over a numeric Series or array; NaN is no answer, not a success."""
    return (status >= 200) & (status < 300)


STOPPED_IN_FLIGHT = "proxy_shutdown"
"""The `error.kind` of an exchange in flight when mitmdump stopped.

The capture records it as it stood: what came of it says nothing about the server, so no
verdict counts it."""
STOPPED_KINDS = (STOPPED_IN_FLIGHT, "interrupted")
"""The `error.kind`s of an exchange our own stop cut: mitmdump's, or a replay's Ctrl-C.

What came of it says nothing about the server: it is compared with nothing and no verdict
counts it."""
NOT_COMPARED = ("skipped", *STOPPED_KINDS)
"""The `error.kind`s of an exchange no comparison reads: a replay step left unsent, or cut."""


def error_kind(record: Record) -> str | None:
    """Return the record's `error.kind`; None when the exchange ended normally."""
    error = record.get("error")
    return error["kind"] if error is not None else None


def response_status(record: Record) -> int | None:
    """Return the answer's status; None when no answer came."""
    response = record.get("response")
    return response["status"] if response is not None else None


def clip(text: str, limit: int) -> str:
    """Cut `text` to at most `limit` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


@contextlib.contextmanager
def paused_gc(*, freeze: bool = False) -> Iterator[None]:
    """Pause the cyclic garbage collector.

    Records and frames make no reference cycles, only millions of long-lived objects that full
    collections would walk again and again. `freeze` moves what exists at the end out of later
    collections (loaded records)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        if freeze:
            gc.freeze()
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def task_gc() -> Iterator[None]:
    """Pause the collector for one task of many in a process, as `paused_gc` does.

    What it made is frozen at its end, so the collector's count of new objects starts again from
    nothing — else the first allocation after it walks every object the task made and still
    holds (its records, its frames), a few percent of the task. They are freed by reference
    counting all the same; what earlier tasks left frozen goes back to the collector first.

    The collector's own count, objects made less objects freed, says what each task left,
    for free; `gc.get_freeze_count` walks every frozen object, so it is asked only every
    `FROZEN_CHECK_TASKS` tasks, for cycles a task's frees hid from that count."""
    global _left_by_tasks, _tasks
    _tasks += 1
    if _left_by_tasks <= LEFT_BY_TASKS and _tasks % FROZEN_CHECK_TASKS == 0:
        _left_by_tasks = gc.get_freeze_count()
    gc.unfreeze()
    if _left_by_tasks > LEFT_BY_TASKS:  # reference cycles the tasks made, now garbage: collected
        gc.collect()
        _left_by_tasks = 0
    with paused_gc(freeze=True):
        yield
        _left_by_tasks += gc.get_count()[0]  # before the freeze that starts it again


_left_by_tasks = 0
_tasks = 0
LEFT_BY_TASKS = 1_000_000
"""Objects left since the last collection past which a task starts with a full collection.

Tasks leave objects frozen; cycles, which reference counting cannot free, would otherwise
stay for good."""
FROZEN_CHECK_TASKS = 32
"""Tasks between two exact counts of the frozen objects."""


def give_back_memory() -> bool:
    """Hand the pages the C heap holds free back to the system; tell whether it could.

    A phase that frees millions of objects leaves their pages in the heap, scattered among
    those that stay, and the next phase's arrays come on top of them. glibc's `malloc_trim`
    returns such pages, as Dask trims its workers' memory; without glibc it does nothing."""
    trim = _libc("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


MAP_FROM = 4 << 20
"""Bytes from which glibc's malloc maps each block apart and unmaps it when freed.

By default glibc raises that threshold to the largest block freed, up to 32 MiB, so once the
first array of a million rows is freed the next come from the heap, where a freed array's
pages stay with the process until a trim. Held fixed, a phase's large arrays go back to the
system as each is freed: at 1M exchanges the command's peak drops by about 60 MB."""


def map_large_blocks() -> bool:
    """Have glibc map blocks from `MAP_FROM` bytes apart, always; tell whether it could."""
    mallopt = _libc("mallopt")
    return mallopt is not None and mallopt(_M_MMAP_THRESHOLD, MAP_FROM) == 1


_M_MMAP_THRESHOLD = -3


@functools.cache
def _libc(name: str) -> Callable[..., int] | None:
    try:
        return getattr(ctypes.CDLL(None), name)  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def terminal_bar(**options: Any) -> Any:
    """Start a tqdm bar on stderr, as wide and tall as the terminal, with no monitor thread.

    No thread is left running at Ctrl-C or exit, nor forked; a pty may report 0x0, where tqdm
    would draw nothing, so the size falls back to 100x20."""
    from tqdm import tqdm  # type: ignore[import-untyped]

    tqdm.monitor_interval = 0
    size = shutil.get_terminal_size((100, 20))
    return tqdm(file=sys.stderr, ncols=size.columns, nrows=size.lines, **options)


def plural(n: int, word: str, many: str | None = None) -> str:
    """Count a word: `1 exchange`, `3 exchanges`, `1,000 diagnoses` with `many`."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


@contextlib.contextmanager
def naming(path: str | os.PathLike[str]) -> Iterator[None]:
    """Name `path` in an `OSError` raised while writing it that names no file.

    A write or close that fails for want of room says only `No space left on device`."""
    try:
        yield
    except OSError as e:
        e.filename = e.filename or str(path)
        raise
