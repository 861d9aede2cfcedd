"""Two mitmdumps recording one session into one directory, rotating: every exchange of
both is in the capture once, whole, and no line was taken for a crash fragment."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from tests.hostile.conftest import ProxyFactory
from wirediff.record.parts import capture_parts
from wirediff.record.store import load_records

pytestmark = pytest.mark.hostile

EACH = 1100
ROTATE = 64 << 10


def test_two_rotating_mitmdumps_of_one_session_lose_nothing(
    proxy: ProxyFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    where = tmp_path / "shared"
    proxies = [
        proxy(capture_dir=where, extra=["--set", f"capture_rotate={ROTATE // 1024}KiB"])
        for _ in range(2)
    ]
    sent: list[list[str]] = [[], []]

    def drive(n: int) -> None:
        with httpx.Client(base_url=proxies[n].url, timeout=60) as c:
            for i in range(EACH):
                tag = f"p{n}-{i}"
                c.post("/fast", json={"model": "m", "input": tag + "x" * (i % 700)})
                sent[n].append(tag)

    clients = [threading.Thread(target=drive, args=(n,)) for n in range(2)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    for p in proxies:
        p.stop()
    assert [len(s) for s in sent] == [EACH, EACH]
    parts = capture_parts(where / "h.jsonl")
    recs = load_records([where / "h.jsonl"])
    assert not caplog.records  # no torn line anywhere
    inputs = sorted(str(r["request"]["body"]["input"]).rstrip("x") for r in recs)
    assert inputs == sorted(sent[0] + sent[1])
    assert len({r["id"] for r in recs}) == 2 * EACH
    assert len(parts) > 10 and not list(where.glob("*.fragments"))
    longest = max(len(line) for p in parts for line in p.read_bytes().splitlines(True))
    assert all(p.stat().st_size < ROTATE + longest for p in parts)
