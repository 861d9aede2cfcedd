"""The spool process a replay records through, forked or started: every record in order,
what a dead one never got built here, the same records as an in-process replay, and no
spool left behind by a replay that stops early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.replay_records import Fake, T, rec, session
from tests.unit.test_spool import sent_exchanges
from wirediff._types import Record
from wirediff.cli.replay import EARLY_SPOOL_BYTES, main_replay
from wirediff.record.pipe import can_fork
from wirediff.record.spool import Spool, build_item
from wirediff.record.store import RecordWriter, load_records
from wirediff.replay import sender as engine_module
from wirediff.replay.connections import Connections

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "started"])
def test_the_spool_writes_every_record_in_order_to_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork: bool
) -> None:
    if fork and not can_fork():  # another test left a thread running: a fresh interpreter
        if not hasattr(os, "pidfd_open"):
            pytest.skip("no pidfd_open on this platform: the spool is never forked here")
        test = f"{__file__}::test_the_spool_writes_every_record_in_order_to_its_file[forked]"
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
        return
    monkeypatch.setattr("wirediff.record.pipe.can_fork", lambda: fork)
    handed, built, _ = sent_exchanges(session(), Fake())
    spool = Spool(1 << 20)
    assert (spool.proc.__class__.__name__ == "Forked") == fork
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    expected: dict[Path, list[Record]] = {p: [] for p in paths}
    for i, (ex, meta) in enumerate(handed):
        meta = {**meta, "attempt": 2 if i == 0 else None}
        assert spool.exchange(paths[i % 2], ex, meta)
        expected[paths[i % 2]].append(build_item(ex, meta, 1 << 20, frozenset()))
    assert spool.record(paths[0], built[0])
    expected[paths[0]].append(built[0])
    assert spool.close_unsent() == [] and spool.proc.returncode == 0
    for p in paths:
        assert load_records([p]) == expected[p]
    assert load_records([paths[0]])[0]["attempt"] == 2


def test_what_a_dead_spool_never_got_is_built_here(tmp_path: Path) -> None:
    handed, _, _ = sent_exchanges(session()[:2], Fake())
    spool = Spool(1 << 20)
    spool.proc.kill()
    spool.proc.wait()
    for ex, meta in handed:
        spool.exchange(tmp_path / "a.jsonl", ex, meta)
    spool._flush()  # the pipe is broken: nothing went
    assert spool.broken is not None
    unsent = spool.close_unsent()
    assert [(p, r["replay_of"]) for p, r in unsent] == [
        (tmp_path / "a.jsonl", m["replay_of"]) for _, m in handed
    ]


def test_a_replay_through_the_spool_writes_what_an_in_process_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = tmp_path / "s.jsonl"
    with RecordWriter(cap) as w:
        for r in session():
            w.write(r)

    def replay(spool_at: int, out: Path) -> list[Record]:
        monkeypatch.setattr(engine_module, "SPOOL_AT", spool_at)
        monkeypatch.setattr("wirediff.cli.replay.SPOOL_AT", spool_at)
        to_fake = classmethod(lambda cls, size: cls(size, lambda: httpx.MockTransport(Fake())))
        monkeypatch.setattr(Connections, "to_network", to_fake)
        assert main_replay([str(cap), "--to", T.url, "-o", str(out), "--allow-unsafe"]) == 0
        return load_records([out])

    def shape(r: Record) -> Any:
        resp = r["response"]
        status, body = (resp["status"], resp["body"]) if resp is not None else (None, None)
        return (r["replay_of"], r["request"]["path"], status, body)

    spooled, here = replay(1, tmp_path / "spooled.jsonl"), replay(10**9, tmp_path / "here.jsonl")
    assert sorted(map(shape, spooled)) == sorted(map(shape, here))
    assert len(spooled) == len(session())


@pytest.mark.parametrize("how", ["few to send", "nothing to replay", "an error"])
def test_a_replay_that_stops_early_leaves_no_spool_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A capture this size gets its spool before it is read; every way out closes it."""
    cap = tmp_path / "s.jsonl"
    with RecordWriter(cap) as w:
        for i in range(40):
            w.write(rec(f"q{i}", body={"model": "m", "input": "x" * 2000}, resp={"id": f"r{i}"}))
    assert cap.stat().st_size >= EARLY_SPOOL_BYTES
    to_fake = classmethod(lambda cls, size: cls(size, lambda: httpx.MockTransport(Fake())))
    monkeypatch.setattr(Connections, "to_network", to_fake)
    forked: list[Spool] = []

    def spool(body_cap: int) -> Spool:
        forked.append(Spool(body_cap))
        return forked[-1]

    monkeypatch.setattr("wirediff.cli.replay.Spool", spool)
    args = [str(cap), "--to", T.url, "-o", str(tmp_path / "out.jsonl")]
    if how == "few to send":
        assert main_replay([*args, "--only", "id=q1"]) == 0
        assert len(load_records([tmp_path / "out.jsonl"])) == 1
    elif how == "nothing to replay":
        assert main_replay([*args, "--only", "family=embeddings"]) == 0
    else:

        async def broken(*a: Any) -> None:
            raise RuntimeError("broken")

        monkeypatch.setattr("wirediff.cli.replay.replay_all", broken)
        assert main_replay(args) != 0
    (early,) = forked
    assert early.proc.returncode == 0  # closed, and waited for
