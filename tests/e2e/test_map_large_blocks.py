"""With glibc's threshold for mapping blocks held fixed, a large block freed goes back to the
system; by default glibc keeps it in the heap once a first one was freed."""

from __future__ import annotations

import subprocess
import sys

HELD = """
import sys
from wirediff._support import map_large_blocks

if sys.argv[1] == "fixed":
    assert map_large_blocks()

def rss() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * 4096

base = rss()
for _ in range(3):
    block = b"x" * (24 << 20)
    del block
print(rss() - base)
"""


def held(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", HELD, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def test_a_large_block_freed_goes_back_to_the_system() -> None:
    fixed, default = held("fixed"), held("default")
    assert fixed < 4 << 20, fixed
    assert default > 16 << 20, default  # what the fixed threshold saves: glibc's own default
