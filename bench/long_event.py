"""One 20 MB SSE event: what recording it costs, side by side with bare mitmdump.

Usage: python bench/long_event.py [--mb 20] [--tries 3]

The hostile tier's upstream (tests/hostile/upstream.py) sends one event of `--mb` megabytes;
bare mitmdump (streaming, lazy connect, as the addon sets them) and mitmdump with the capture
addon forward it while another client sends small requests through the same proxy. Printed:
transfer time (best of tries) and that client's p99, for both, and their ratios
(targets: capture/bare time <= 1.5; the other client's p99 under 50 ms).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wirediff.cli.mitm import CAPTURE_ADDON, mitmdump_binary  # noqa: E402
from wirediff.cli.netutil import free_port, wait_port  # noqa: E402

BARE_AS_THE_ADDON_SETS = ["--set", "stream_large_bodies=1", "--set", "connection_strategy=lazy"]
"""Bare mitmdump streams and connects lazily, as the capture addon makes it."""


def start(args: list[str]) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [*args[:1], *(a.replace("{port}", str(port)) for a in args[1:])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    wait_port(port, 30, proc)
    return proc, port


def transfer_seconds(url: str, mb: int) -> float:
    t0 = time.perf_counter()
    size = 0
    with httpx.Client(timeout=120) as c, c.stream("GET", f"{url}/event/{mb}") as r:
        for chunk in r.iter_raw():
            size += len(chunk)
    assert size > mb << 20
    return time.perf_counter() - t0


def run(url: str, mb: int) -> tuple[float, float]:
    """(transfer seconds, p99 ms of small requests another client sends meanwhile)."""
    took: list[float] = []
    big = threading.Thread(target=lambda: took.append(transfer_seconds(url, mb)))
    latencies = []
    with httpx.Client(base_url=url, timeout=30) as c:
        c.get("/fast").raise_for_status()
        big.start()
        while big.is_alive():
            t0 = time.perf_counter()
            c.get("/fast").raise_for_status()
            latencies.append((time.perf_counter() - t0) * 1000)
    big.join()
    latencies.sort()
    return took[0], latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=20)
    ap.add_argument("--tries", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        upstream, up_port = start([sys.executable, "-m", "tests.hostile.upstream", "{port}"])
        base = [
            mitmdump_binary(),
            "-q",
            "--listen-host",
            "127.0.0.1",
            "--mode",
            f"reverse:http://127.0.0.1:{up_port}@{{port}}",
            "--set",
            f"confdir={d}/conf",
        ]
        proxies = {
            "bare": start([*base, *BARE_AS_THE_ADDON_SETS]),
            "capture": start([*base, "-s", str(CAPTURE_ADDON), "--set", f"capture_dir={d}/cap"]),
        }
        try:
            results = {}
            for name, (_, port) in proxies.items():
                url = f"http://127.0.0.1:{port}"
                transfer_seconds(url, args.mb)  # warm-up
                runs = [run(url, args.mb) for _ in range(args.tries)]
                results[name] = (min(s for s, _ in runs), min(ms for _, ms in runs))
        finally:
            for proc, _ in [*proxies.values(), (upstream, 0)]:
                proc.terminate()
                proc.wait(10)
    (bs, bp), (cs, cp) = results["bare"], results["capture"]
    print(f"one {args.mb} MB SSE event, best of {args.tries}")
    print(f"  bare mitmdump      {bs:6.2f} s   other client's p99 {bp:6.1f} ms")
    print(f"  mitmdump + capture {cs:6.2f} s   other client's p99 {cp:6.1f} ms")
    print(f"  capture / bare time {cs / bs:5.2f}   (target <= 1.5); p99 target < 50 ms")


if __name__ == "__main__":
    main()
