"""How long `wirediff probe` takes against a local stand-in: the whole command (a fresh
process: imports, the models request, every feature sent, graded, the matrix printed), and
in-process its two halves, sending and grading. The stand-in answers at once (no delay), so
what is measured is the probe, not a server's generation time.

Usage: .venv/bin/python bench/probe_speed.py [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

from wirediff.backends.standin import standin
from wirediff.probe.run import probe

BUDGET_S = 10.0
"""The issue's bound for a whole probe against a local stand-in."""
WIREDIFF = str(Path(sys.executable).with_name("wirediff"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    walls, sends, grades = [], [], []
    with standin("openai", delay=0.0) as url:
        for _ in range(args.runs):
            t = time.monotonic()
            done = subprocess.run(
                [WIREDIFF, "probe", url + "/v1"], capture_output=True, text=True, check=False
            )
            walls.append(time.monotonic() - t)
            assert done.returncode in (0, 1), done.stderr
            result = probe(url + "/v1")
            sends.append(result.seconds["send"])
            grades.append(result.seconds["grade"])
    n = len(result.rows)
    wall = statistics.median(walls)
    print(f"features: {n}, exchanges: {len(result.records)}, runs: {args.runs}")
    print(f"wirediff probe (a fresh process), median: {wall:.2f} s  (min {min(walls):.2f})")
    print(f"  in-process, median: send {statistics.median(sends):.2f} s, "
          f"grade {statistics.median(grades):.2f} s")  # fmt: skip
    print(f"budget {BUDGET_S:.0f} s: the probe takes {wall / BUDGET_S:.2f} of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
