"""Records no capture writes, at full size: one with 2,000,000 events, a line of 500 MB, an
answer of 1,000,000 keys. Every command that analyses captures skips each with one warning
naming file:line, analyses the rest, and its processes stay under 1 GB together."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path
from typing import IO

import orjson
import pytest

from tests.fixtures.records import answer, chat_record, openai_session, replay
from wirediff._types import Record

pytestmark = pytest.mark.hostile

GB = 1 << 30
BIG_TEXT = 500_000_000
EVENTS = 2_000_000
KEYS = 1_000_000


def _write_around(fh: IO[bytes], rec: Record, key: str, pieces: Iterable[bytes]) -> int:
    """Write `rec` with its response's `key` as the JSON text `pieces` make, a piece at a
    time (hundreds of megabytes are never held whole); the bytes of its line."""
    response = rec["response"]
    assert response is not None
    response[key] = "@@HERE@@"  # type: ignore[literal-required]
    head, tail = orjson.dumps(rec).split(b'"@@HERE@@"')
    size = fh.write(head)
    for piece in pieces:
        size += fh.write(piece)
    return size + fh.write(tail + b"\n")


def _containers(value: object) -> int:
    found, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict | list):
            found += 1
            stack += node.values() if isinstance(node, dict) else node
    return found


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The baseline capture (its lines 4 to 6 past the bounds, the rest an ordinary
    session), a candidate beside it, and what loading the baseline says of each."""
    where = tmp_path_factory.mktemp("big")
    session = openai_session()
    lines = [orjson.dumps(replay(r, id=f"c{i}")) + b"\n" for i, r in enumerate(session)]
    (where / "cand.jsonl").write_bytes(b"".join(lines))
    events, line, keys = (chat_record(id=i, stream=True) for i in ("events", "line", "keys"))
    answer(events)["events"] = []
    objects = _containers(events) + 2 * EVENTS  # each event, and its data
    answer(keys).update({f"k{i}": i for i in range(KEYS)})  # type: ignore[typeddict-item]
    wide = len(answer(keys))
    event = b'{"t_ms":1.5,"event":null,"data":{"n":1}}'
    text = chain([b'"'], (b"x" * (BIG_TEXT // 100) for _ in range(100)), [b'"'])
    with (where / "base.jsonl").open("wb") as fh:
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in session[:3]))
        _write_around(fh, events, "events", _list_text(event, EVENTS))
        size = _write_around(fh, line, "text", text)
        fh.write(orjson.dumps(keys) + b"\n")
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in session[3:]))
    return where, [
        f"base.jsonl:4: a record of {objects:,} objects and lists, past the 1,500,000",
        f"base.jsonl:5: a line of {size:,} bytes, past the 256 MiB",
        f"base.jsonl:6: an object of {wide:,} keys, past the 262,144",
    ]


def _list_text(item: bytes, n: int, per: int = 10_000) -> Iterator[bytes]:
    """The JSON text of a list of `n` times `item`, `per` items a piece."""
    yield b"["
    for i in range(n // per):
        yield (b"," if i else b"") + b",".join([item] * per)
    yield b"]"


def _tree(pid: int) -> list[int]:
    pids, at = [pid], 0
    while at < len(pids):
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pids[at]}/task").iterdir():
                pids += [int(c) for c in (task / "children").read_text().split()]
        at += 1
    return pids


def _held(pid: int) -> int:
    """The memory `pid` holds as its share of pages: forked workers share their parent's
    pages, which the resident size of each would count again."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def run_measured(argv: list[str], cwd: Path) -> tuple[int, str, int]:
    """Exit code, stderr, and the most memory the command's processes held at once,
    sampled until it exits."""
    err = cwd / "stderr.txt"
    with err.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "wirediff", *argv], cwd=cwd, stderr=out)
        peak = 0
        while True:
            peak = max(peak, sum(_held(pid) for pid in _tree(proc.pid)))
            try:
                proc.wait(0.02)
                break
            except subprocess.TimeoutExpired:
                continue
    return proc.returncode, err.read_text(), peak


@pytest.mark.parametrize(
    "command",
    [
        ["report", "base.jsonl", "cand.jsonl", "-o", "r.html", "--json", "s.json"],
        ["check", "base.jsonl", "cand.jsonl"],
        ["diagnose", "base.jsonl", "cand.jsonl", "--json"],
        ["export", "base.jsonl", "--parquet", "dataset"],
    ],
    ids=lambda argv: argv[0],
)
def test_records_past_the_bounds_are_skipped_in_bounded_memory(
    captures: tuple[Path, list[str]], command: list[str]
) -> None:
    where, said = captures
    code, err, peak = run_measured(command, where)
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.endswith("a capture writes: skipped")]
    assert [w.removeprefix("wirediff: warning: ") for w in warnings] == [
        f"{s} a capture writes: skipped" for s in said
    ], err
    assert peak < GB, f"{command[0]}: {peak / (1 << 20):.0f} MB at peak"
