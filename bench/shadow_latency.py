"""What does the shadow cost the client? mitmdump + capture against mitmdump + capture +
shadow mirroring every request to two candidates, side by side; and with one candidate slow.

Usage: python bench/shadow_latency.py [--requests N] [--block B] [--slow-ms MS]

The backends are bare asyncio servers in their own processes with canned answers (JSON, and
a short SSE stream whose first event goes out at once: `capture_overhead.py`'s): the primary,
two candidates, and a slow candidate that answers after `--slow-ms`. Three proxies run at
once, each a mitmdump with the capture addon in reverse mode to the primary:
  capture        — the capture alone;
  shadow         — and the shadow addon, mirroring to the two candidates;
  shadow, slow   — and the shadow addon, mirroring to a candidate and the slow one, with
                   `shadow_queue=16`, `shadow_concurrency=2`: most mirrors to it are dropped.
A client sends one request at a time (what a person's app does) and times the answer's
head (TTFB, JSON) and the first SSE event (a stream), N of each per proxy, the proxies
taking turns in blocks of B (the order rotated each turn). Medians and 90th percentiles are
printed, and what the shadow adds to the capture alone, as a ratio too (target: at most 5 %
or 1 ms), then what the shadow mirrored and dropped (its own count, logged when mitmdump
stops).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from capture_overhead import Canned, read_answer, request, start  # noqa: E402

from wirediff.cli.netutil import free_port  # noqa: E402

MITMDUMP = str(Path(sys.executable).with_name("mitmdump"))
CAPTURE = str(ROOT / "addons" / "capture.py")
SHADOW = str(ROOT / "addons" / "shadow.py")
WARM_UP = 20


def serve(port: int, delay: float) -> None:
    """A canned backend; with `delay`, each answer is written that many seconds late."""

    class Slow(Canned):
        def data_received(self, data: bytes) -> None:
            loop = asyncio.get_running_loop()
            loop.call_later(delay, Canned.data_received, self, data)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(
            Slow if delay else Canned, "127.0.0.1", port
        )
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def backend(delay: float = 0.0) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, __file__, "--backend", str(port), "--delay", str(delay)]
    return start(cmd, port), f"http://127.0.0.1:{port}"


def proxy(
    upstream: str, tmp: Path, name: str, *extra: str
) -> tuple[subprocess.Popen[bytes], int, Path]:
    port = free_port()
    log = tmp / f"{name}.log"
    cmd = [
        MITMDUMP, "--set", "flow_detail=0", "--listen-host", "127.0.0.1",
        "--mode", f"reverse:{upstream}@{port}", "--set", f"confdir={tmp / 'conf'}",
        "-s", CAPTURE, "--set", f"capture_dir={tmp / name}", "--set", "capture_session=bench",
        *extra,
    ]  # fmt: skip
    return start(cmd, port, log), port, log


class Client:
    """One keep-alive connection to a proxy, timing one request at a time."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def open(self) -> None:
        self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
        self.json, self.sse = request(self.port), request(self.port, stream=True)

    async def ttfb(self) -> float:
        """Milliseconds to the head of a JSON answer."""
        t0 = time.perf_counter()
        self.w.write(self.json)
        head = await self.r.readuntil(b"\r\n\r\n")
        took = (time.perf_counter() - t0) * 1000
        low = head.lower()
        at = low.find(b"content-length:")
        await self.r.readexactly(int(low[at + 15 : low.find(b"\r\n", at)]))
        return took

    async def first_event(self) -> float:
        """Milliseconds to the first SSE event of a stream."""
        first: list[float] = []
        t0 = time.perf_counter()
        self.w.write(self.sse)
        await read_answer(self.r, first)
        return (first[0] - t0) * 1000


async def measure(
    ports: dict[str, int], blocks: int, block: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """`blocks` rounds; in each, every proxy in turn (the order rotated) gets `block` JSON
    requests and `block` streams: what drifts on a shared machine drifts for all alike."""
    clients = {name: Client(port) for name, port in ports.items()}
    for c in clients.values():
        await c.open()
        for _ in range(WARM_UP):
            await c.ttfb()
            await c.first_event()
    ttfb: dict[str, list[float]] = {name: [] for name in ports}
    ttfe: dict[str, list[float]] = {name: [] for name in ports}
    names = list(ports)
    for i in range(blocks):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            c = clients[name]
            for _ in range(block):
                ttfb[name].append(await c.ttfb())
                ttfe[name].append(await c.first_event())
    for c in clients.values():
        c.w.close()
    return ttfb, ttfe


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--requests", type=int, default=1000, help="JSON requests and streams per proxy"
    )
    ap.add_argument("--block", type=int, default=25, help="requests per proxy in turn")
    ap.add_argument("--slow-ms", type=float, default=200.0, help="the slow candidate's delay")
    ap.add_argument("--backend", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--delay", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.backend:
        serve(args.backend, args.delay)
        return
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        servers = {name: backend() for name in ("primary", "a", "b")}
        servers["slow"] = backend(args.slow_ms / 1000)
        url = {name: u for name, (_, u) in servers.items()}
        proxies = {
            "capture": proxy(url["primary"], tmp, "capture"),
            "shadow": proxy(
                url["primary"], tmp, "shadow", "-s", SHADOW,
                "--set", f"shadow_to=a={url['a']}/v1,b={url['b']}/v1",
            ),
            "shadow, slow": proxy(
                url["primary"], tmp, "slow", "-s", SHADOW,
                "--set", f"shadow_to=a={url['a']}/v1,slow={url['slow']}/v1",
                "--set", "shadow_queue=16", "--set", "shadow_concurrency=2",
            ),
        }  # fmt: skip
        blocks = max(1, args.requests // args.block)
        try:
            ports = {name: port for name, (_, port, _) in proxies.items()}
            ttfb, ttfe = asyncio.run(measure(ports, blocks, args.block))
        finally:
            for proc, _, _ in proxies.values():
                proc.terminate()
                proc.wait(60)
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait()
        sent = 2 * (WARM_UP + blocks * args.block)
        logs = {name: log.read_text(errors="replace") for name, (_, _, log) in proxies.items()}
    print(f"{blocks * args.block} JSON requests and as many SSE streams per proxy, one at a "
          f"time, in blocks of {args.block} taking turns; the slow candidate answers after "
          f"{args.slow_ms:.0f} ms")  # fmt: skip
    print(f"{'proxy':<14} {'TTFB median':>11} {'p90':>7} {'first event median':>18} {'p90':>7}")
    for name in proxies:
        print(f"{name:<14} {statistics.median(ttfb[name]):>9.2f}ms {p90(ttfb[name]):>5.2f}ms "
              f"{statistics.median(ttfe[name]):>16.2f}ms {p90(ttfe[name]):>5.2f}ms")  # fmt: skip
    base_b, base_e = statistics.median(ttfb["capture"]), statistics.median(ttfe["capture"])
    for name in ("shadow", "shadow, slow"):
        db = statistics.median(ttfb[name]) - base_b
        de = statistics.median(ttfe[name]) - base_e
        ok = all(d <= 1.0 or d <= 0.05 * base for d, base in ((db, base_b), (de, base_e)))
        print(f"{name} adds: TTFB {db:+.2f} ms (x{(base_b + db) / base_b:.3f}), first event "
              f"{de:+.2f} ms (x{(base_e + de) / base_e:.3f}): "
              f"{'within' if ok else 'OVER'} the target (<= 5 % or <= 1 ms)")  # fmt: skip
    print(f"requests sent through each proxy: {sent}")
    for name in ("shadow", "shadow, slow"):
        for line in re.findall(r"shadow: \S+: \d+ mirrored[^\n]*", logs[name]):
            print(f"  {name}: {line}")


if __name__ == "__main__":
    main()
