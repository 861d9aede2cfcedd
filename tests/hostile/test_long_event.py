"""One 20 MB SSE event through the capture addon: the client gets every byte, another client
is served meanwhile, and the record keeps the event's first `capture_body_cap` bytes, marked
truncated. What it costs against bare mitmdump is measured in bench/long_event.py."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.conftest import wait_for
from tests.hostile.conftest import ProxyFactory
from wirediff._types import Record

pytestmark = pytest.mark.hostile

EVENT_MB = 20


def test_one_long_event_is_forwarded_whole_and_recorded_capped(proxy: ProxyFactory) -> None:
    cap = proxy()
    received = bytearray()
    first_chunk = threading.Event()
    served_meanwhile = threading.Event()

    def read_the_long_event() -> None:
        with httpx.Client(timeout=120) as c, c.stream("GET", f"{cap.url}/event/{EVENT_MB}") as r:
            for chunk in r.iter_raw():
                received.extend(chunk)
                if not first_chunk.is_set():
                    first_chunk.set()
                    # hold the stream open mid-event until another client has been served
                    assert served_meanwhile.wait(30), "another client was not served"

    big = threading.Thread(target=read_the_long_event)
    big.start()
    assert first_chunk.wait(30), "the long event never started"
    with httpx.Client(base_url=cap.url, timeout=30) as c:
        for _ in range(5):
            c.get("/fast").raise_for_status()
    served_meanwhile.set()
    big.join(120)
    assert not big.is_alive() and len(received) > EVENT_MB << 20
    assert received.startswith(b"data: ") and received.endswith(b"\n\n")

    def long_ones() -> list[Record]:
        recs = cap.records() if cap.capture_file.exists() else []
        return [r for r in recs if r["request"]["path"] == f"/event/{EVENT_MB}"]

    (rec,) = wait_for(long_ones, 60, "the long event's record")
    (event,) = rec["response"]["events"]
    assert event["truncated"] and len(event["data"]) == 1 << 20
    assert rec["response"]["complete"] is True
