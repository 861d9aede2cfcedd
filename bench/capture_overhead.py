"""What does recording cost? Direct vs bare mitmdump vs mitmdump + addons/capture.py.

Usage: python bench/capture_overhead.py [--requests N] [--concurrency C]

All three paths are measured side by side in one run against the same local stand-in,
for JSON (requests/s) and SSE (time to first event); the ratios are what to read.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wirediff.backends.standin import standin  # noqa: E402
from wirediff.cli.netutil import free_port, wait_port  # noqa: E402

MITMDUMP = str(Path(sys.executable).with_name("mitmdump"))
BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def start_proxy(upstream: str, capture: bool, tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [MITMDUMP, "-q", "--listen-host", "127.0.0.1", "--mode", f"reverse:{upstream}@{port}",
           "--set", f"confdir={tmp / 'conf'}"]  # fmt: skip
    if capture:
        cmd += ["-s", str(ROOT / "addons/capture.py"), "--set", f"capture_dir={tmp / 'cap'}"]
    else:  # bare mitmdump buffers whole bodies: stream them, as the addon does for SSE,
        # and connect lazily, as the addon sets it
        cmd += ["--set", "stream_large_bodies=1", "--set", "connection_strategy=lazy"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, 30, proc)
    return proc, f"http://127.0.0.1:{port}"


def json_rps(base: str, n: int, concurrency: int) -> float:
    with httpx.Client(
        base_url=base, timeout=30, limits=httpx.Limits(max_connections=concurrency)
    ) as c:
        for _ in range(20):  # warm-up: connections, caches
            c.post("/v1/chat/completions", json=BODY).raise_for_status()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(
                pool.map(
                    lambda _: c.post("/v1/chat/completions", json=BODY).raise_for_status(), range(n)
                )
            )
        return n / (time.perf_counter() - t0)


def first_event_ms(base: str, n: int) -> float:
    samples = []
    with httpx.Client(base_url=base, timeout=30) as c:
        for i in range(n + 5):
            t0 = time.perf_counter()
            with c.stream("POST", "/v1/chat/completions", json={**BODY, "stream": True}) as r:
                for line in r.iter_lines():
                    if line.startswith("data:"):
                        if i >= 5:
                            samples.append((time.perf_counter() - t0) * 1000)
                        break
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--streams", type=int, default=100)
    args = ap.parse_args()
    with standin("openai", delay=0.0) as upstream, tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        bare, bare_url = start_proxy(upstream, False, tmp)
        cap, cap_url = start_proxy(upstream, True, tmp)
        try:
            paths = {"direct": upstream, "mitmdump": bare_url, "mitmdump+capture": cap_url}
            rps = {k: 0.0 for k in paths}
            ttfe: dict[str, list[float]] = {k: [] for k in paths}
            for _ in range(3):  # interleave rounds so drift hits every path alike
                for name, url in paths.items():
                    rps[name] = max(rps[name], json_rps(url, args.requests // 3, args.concurrency))
                    ttfe[name].append(first_event_ms(url, args.streams // 3))
        finally:
            for p in (bare, cap):
                p.terminate()
                p.wait()
        recorded = sum(len(p.read_bytes().splitlines()) for p in (tmp / "cap").glob("*.jsonl"))
    med = {k: statistics.median(v) for k, v in ttfe.items()}
    print(f"{'path':<18} {'JSON req/s':>11} {'SSE first event ms':>19}")
    for name in paths:
        print(f"{name:<18} {rps[name]:>11.0f} {med[name]:>19.2f}")
    print(f"capture / bare mitmdump throughput: {rps['mitmdump+capture'] / rps['mitmdump']:.3f}")
    print(f"bare mitmdump / direct throughput:  {rps['mitmdump'] / rps['direct']:.3f}")
    print(f"first event added by capture: {med['mitmdump+capture'] - med['mitmdump']:+.2f} ms "
          f"(bare mitmdump adds {med['mitmdump'] - med['direct']:+.2f} ms over direct)")  # fmt: skip
    print(f"records written by the capture path: {recorded}")


if __name__ == "__main__":
    main()
