"""How long `wirediff probe` takes against a local stand-in: the whole command in a fresh
process (imports, the models request, every feature sent, graded, the matrix printed) and
where that time goes — starting (imports), sending, grading (cold: the SDK's types and the
OpenAPI document loaded on first use) — by the `seconds` its summary.json reports; and the
process's CPU time, which is what the wall time comes to when the cores are not shared. The
stand-in answers at once (no delay), so what is measured is the probe, not a server's
generation time.

Usage: .venv/bin/python bench/probe_speed.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wirediff.backends.standin import standin

BUDGET_S = 10.0
"""The issue's bound for a whole probe against a local stand-in."""
WIREDIFF = str(Path(sys.executable).with_name("wirediff"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    walls, cpus, sends, grades = [], [], [], []
    with standin("openai", delay=0.0) as url, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "probe.json"
        for _ in range(args.runs):
            t, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(
                [WIREDIFF, "probe", url + "/v1", "--json", str(out)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            walls.append(time.monotonic() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            assert done.returncode in (0, 1), done.stderr
            probe = json.loads(out.read_text(encoding="utf-8"))["probe"]
            sends.append(probe["seconds"]["send"])
            grades.append(probe["seconds"]["grade"])
    wall, send, grade = (statistics.median(x) for x in (walls, sends, grades))
    print(f"features: {len(probe['features'])}, runs: {args.runs}, "
          f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
    print(f"wirediff probe (a fresh process), median: {wall:.2f} s  (min {min(walls):.2f})")
    print(
        f"  its CPU time, median: {statistics.median(cpus):.2f} s (the wall time on an idle core)"
    )
    print(f"  of which: start {wall - send - grade:.2f} s, send {send:.2f} s, grade {grade:.2f} s")
    print(f"budget {BUDGET_S:.0f} s: the probe takes {wall / BUDGET_S:.2f} of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
