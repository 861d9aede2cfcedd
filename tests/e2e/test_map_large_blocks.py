"""With glibc's threshold for mapping blocks held fixed, a large block freed goes back to the
system; by default glibc keeps it in the heap once a first one was freed.

What malloc holds is read from glibc itself (`mallinfo2`), not from the kernel's resident set,
which a sandbox may count its own way; and each run gets glibc's defaults, without the
environment's tunables or a preloaded allocator, which would decide the threshold instead.
"""

from __future__ import annotations

import os
import subprocess
import sys

HELD = """
import ctypes, sys
from wirediff._support import map_large_blocks

if sys.argv[1] == "fixed":
    assert map_large_blocks()


class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


mallinfo2 = ctypes.CDLL(None).mallinfo2
mallinfo2.restype = Info


def held() -> int:
    info = mallinfo2()
    return info.arena + info.hblkhd


base = held()
for _ in range(3):
    block = b"x" * (24 << 20)
    del block
print(held() - base)
"""

OWN_CHOICE = ("GLIBC_TUNABLES", "LD_PRELOAD", "PYTHONMALLOC")


def held(mode: str) -> int:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in OWN_CHOICE and not key.startswith("MALLOC_")
    }
    out = subprocess.run(
        [sys.executable, "-c", HELD, mode], capture_output=True, text=True, check=True, env=env
    )
    return int(out.stdout)


def test_a_large_block_freed_goes_back_to_the_system() -> None:
    fixed, default = held("fixed"), held("default")
    assert fixed < 4 << 20, fixed
    assert default > 16 << 20, default  # what the fixed threshold saves: glibc's own default
