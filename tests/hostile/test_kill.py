"""mitmdump killed with SIGKILL: its recorder still writes what it was handed, the capture
holds whole records only, each once, and the next mitmdump appends to it."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_for
from tests.hostile.conftest import ProxyFactory, family
from wirediff.record.store import load_records

pytestmark = pytest.mark.hostile


def test_a_killed_mitmdump_leaves_a_readable_appendable_capture(
    proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    cap = proxy()
    with httpx.Client(base_url=cap.url, timeout=30) as c:
        for i in range(200):
            c.post("/fast", json={"model": "m", "input": f"q{i}"})
    wait_for(
        lambda: cap.capture_file.exists() and load_records([cap.capture_file]),
        30,
        "records on disk",
    )
    (recorder,) = family(cap.proc.pid)[1:]
    cap.proc.kill()
    cap.proc.wait()
    wait_for(
        lambda: not Path(f"/proc/{recorder}").exists() or _zombie(recorder),
        30,
        "the recorder to finish writing and exit",
    )
    before = load_records([cap.capture_file])
    assert 0 < len(before) <= 200 and not caplog.records  # no torn line
    again = proxy(capture_dir=cap.capture_dir)
    with httpx.Client(base_url=again.url, timeout=30) as c:
        c.post("/fast", json={"model": "m", "input": "after"})
    again.stop()
    ids = [r["id"] for r in load_records([cap.capture_file])]
    assert len(ids) == len(before) + 1 == len(set(ids))


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True
