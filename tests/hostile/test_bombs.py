"""Compression bombs, as JSON and as SSE, in every content coding: the client gets every
byte as the upstream sent it, mitmdump with the capture addon stays within 300 MB of bare
mitmdump's memory, and the record keeps a bounded, marked part."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import wait_for
from tests.hostile.conftest import Proxy, start_proxy
from tests.hostile.upstream import ENCODINGS
from wirediff._types import Record
from wirediff.record.store import load_records

pytestmark = pytest.mark.hostile

MB = 1 << 20
EXTRA_RSS = 300 * MB
CASES = [("json", e) for e in ENCODINGS] + [("sse", e) for e in ENCODINGS] + [("sse-flat", "gzip")]


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory, upstream: str) -> Iterator[Proxy]:
    proxy = start_proxy(tmp_path_factory.mktemp("bare"), upstream, capture=False, name="bare")
    yield proxy
    proxy.stop()


@pytest.fixture
def capture(tmp_path: Path, upstream: str) -> Iterator[Proxy]:
    """Each case its own: a process keeps memory it once used, and peaks would add up."""
    proxy = start_proxy(tmp_path, upstream, name="capture")
    yield proxy
    proxy.stop()


def fetch(url: str) -> tuple[int, str]:
    """Size and digest of the body exactly as it arrives (nothing decoded)."""
    digest, size = hashlib.sha256(), 0
    with httpx.Client(timeout=120) as c, c.stream("POST", url, json={"model": "m"}) as r:
        assert r.status_code == 200
        for chunk in r.iter_raw():
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def records(path: Path, n: int) -> list[Record]:
    found: list[Record] = wait_for(
        lambda: path.exists() and len(load_records([path])) >= n and load_records([path]),
        60,
        f"{n} records",
    )
    return found


@pytest.mark.parametrize(("kind", "encoding"), CASES)
def test_a_bomb_passes_whole_and_is_recorded_truncated(
    bare: Proxy, capture: Proxy, upstream: str, kind: str, encoding: str
) -> None:
    cap = capture
    path = f"/bomb/{kind}/{encoding}"
    direct = fetch(upstream + path)
    bare.reset_peak_rss()
    via_bare = fetch(bare.url + path)
    bare_rss = bare.peak_rss()
    via_capture = fetch(cap.url + path)
    (rec,) = records(cap.capture_file, 1)
    cap_rss = cap.peak_rss()  # mitmdump and its recorder, once the record is written
    assert via_capture == direct == via_bare, "the client must get exactly what was sent"
    assert cap_rss - bare_rss <= EXTRA_RSS, (
        f"capture peak {cap_rss / MB:.0f} MB, bare {bare_rss / MB:.0f} MB"
    )
    resp = rec["response"]
    assert isinstance(resp, dict) and resp["truncated"] is True and resp["size"] == direct[0]
    assert len(resp["text"] or "") <= 1 << 20
    if kind == "sse":
        events = resp["events"]
        assert isinstance(events, list) and 0 < len(events) <= 100_000
    line = max(len(x) for x in cap.capture_file.read_bytes().splitlines())
    assert line < 64 * MB
