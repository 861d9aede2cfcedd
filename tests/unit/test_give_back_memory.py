"""Pages a phase freed go back to the system, not only to the C heap, where glibc runs."""

from __future__ import annotations

import platform

from wirediff._support import give_back_memory


def resident_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def test_freed_heap_pages_go_back_to_the_system() -> None:
    assert platform.libc_ver()[0] == "glibc"  # the machines the tests run on
    keep: list[bytearray] = []
    drop: list[bytearray] = []
    for n in range(100_000):  # a kilobyte each: past Python's own allocator, in the C heap
        (keep if n % 16 == 0 else drop).append(bytearray(1000))
    del drop  # freed, but the pages stay in the heap, held by the ones kept between them
    before = resident_kb()
    assert give_back_memory()
    assert before - resident_kb() > 30_000, (before, resident_kb())
    assert len(keep) == 6_250
