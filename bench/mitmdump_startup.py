"""How long does the capture addon add to mitmdump's start? Bare vs `-s addons/capture.py`.

Usage: python bench/mitmdump_startup.py [--runs N]

Each run starts mitmdump in reverse mode and times it from spawn to its listener accepting a
connection; bare and capture runs alternate so that both see the same machine. The addon's
import closure holds no pandas or numpy (an import-linter contract), so the ratio stays near 1.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wirediff.cli.mitm import CAPTURE_ADDON, mitmdump_binary  # noqa: E402
from wirediff.cli.netutil import free_port, wait_port  # noqa: E402


def time_to_listen(capture: bool, tmp: Path) -> float:
    port = free_port()
    cmd = [
        mitmdump_binary(),
        "-q",
        "--listen-host",
        "127.0.0.1",
        "--mode",
        f"reverse:http://127.0.0.1:9@{port}",
        "--set",
        f"confdir={tmp / 'conf'}",
    ]
    if capture:
        cmd += ["-s", str(CAPTURE_ADDON), "--set", f"capture_dir={tmp / 'cap'}"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, 60, proc)
        return time.perf_counter() - t0
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        time_to_listen(False, tmp)  # warm the page cache and make the CA once
        bare, capture = [], []
        for _ in range(args.runs):
            bare.append(time_to_listen(False, tmp))
            capture.append(time_to_listen(True, tmp))
    b, c = statistics.median(bare), statistics.median(capture)
    print(f"mitmdump start to listening, median of {args.runs} alternating runs")
    print(f"  bare mitmdump            {b * 1000:7.0f} ms")
    print(f"  mitmdump + capture addon {c * 1000:7.0f} ms")
    print(f"  capture / bare           {c / b:7.2f}   (target <= 1.10)")


if __name__ == "__main__":
    main()
