"""What does replaying cost? `wirediff replay` vs a plain httpx loop, same requests.

Usage: python bench/replay_throughput.py [--requests N] [--concurrency 1,8,32] [--rounds R]

A session of N independent exchanges (chat, chat stream, responses, responses stream in
turn) is captured through mitmdump + addons/capture.py from the `openai` stand-in. It is then
sent to a second `openai` stand-in running in its own process (so that the server does not
share the client's interpreter) by:
  direct   — an asyncio httpx loop: N workers, the same prepared requests, bodies read whole;
  replayer — `TargetRun`, the replay engine: dependency scheduling, a `StreamTap` per
             stream, `build_record` per exchange and an append+flush to a .jsonl file.
Both run at the same concurrency, interleaved, best of R rounds each; the ratio is what to
read (target: replayer >= 0.80 x direct). For information, a third loop sends through the
httpx transport directly, as the replayer does (no redirects, cookies or auth flow to run):
the ratio against it is the cost of recording alone. The client process's CPU time per
exchange is printed too: on a busy machine it is steadier than the rates.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wirediff.backends.standin import standin  # noqa: E402
from wirediff.cli.mitm import CaptureProxy  # noqa: E402
from wirediff.record.store import RecordWriter, load_records  # noqa: E402
from wirediff.replay.engine import TargetRun  # noqa: E402
from wirediff.replay.plan import Plan, make_plan  # noqa: E402
from wirediff.replay.request import Outgoing, prepare  # noqa: E402
from wirediff.replay.targets import Target  # noqa: E402

MSG = [{"role": "user", "content": "What is the weather in Paris today?"}]
KINDS = [
    ("/v1/chat/completions", {"model": "gpt-4o-mini", "messages": MSG}),
    ("/v1/chat/completions", {"model": "gpt-4o-mini", "messages": MSG, "stream": True}),
    ("/v1/responses", {"model": "gpt-4o-mini", "input": "Say hello in five words."}),
    ("/v1/responses", {"model": "gpt-4o-mini", "input": "Say hello.", "stream": True}),
]
HEADERS = {"authorization": "Bearer sk-bench", "user-agent": "OpenAI/Python 2.0.0"}


def capture_session(n: int, tmp: Path) -> Path:
    """N exchanges recorded the normal way: a client through mitmdump -s addons/capture.py."""
    with (
        standin("openai") as upstream,
        CaptureProxy([upstream], tmp / "cap", "bench", label="openai", confdir=tmp / "conf") as p,
        httpx.Client(base_url=p.urls[0], headers=HEADERS, timeout=30) as c,
    ):
        for i in range(n):
            path, body = KINDS[i % len(KINDS)]
            with c.stream("POST", path, json=body) as r:
                r.read()
                r.raise_for_status()
        cap = p.capture_file
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(load_records([cap])) < n:
            time.sleep(0.02)
    return cap


def start_target() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "wirediff.backends", "openai"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        raise RuntimeError("the target stand-in did not start")
    return proc, url


def client(concurrency: int) -> httpx.AsyncClient:
    c = httpx.AsyncClient(
        timeout=30,
        limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        trust_env=False,
    )
    for h in ("accept", "accept-encoding", "user-agent"):
        del c.headers[h]
    return c


async def direct(requests: list[Outgoing], concurrency: int) -> float:
    """The baseline: send each request and read its body, nothing else."""
    queue: asyncio.Queue[Outgoing] = asyncio.Queue()
    for r in requests:
        queue.put_nowait(r)
    async with client(concurrency) as c:

        async def worker() -> None:
            while not queue.empty():
                o = queue.get_nowait()
                req = c.build_request(o.method, o.url, headers=o.headers, content=o.content)
                resp = await c.send(req, stream=True)
                try:
                    async for _ in resp.aiter_raw():
                        pass
                finally:
                    await resp.aclose()
                if resp.status_code != 200:
                    raise RuntimeError(f"direct: HTTP {resp.status_code}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return len(requests) / (time.perf_counter() - t0)


async def direct_transport(requests: list[Outgoing], concurrency: int) -> float:
    """The same loop one layer down (the httpx transport, as the replayer sends): what is
    left between this and the replayer is the recording itself."""
    queue: asyncio.Queue[Outgoing] = asyncio.Queue()
    for r in requests:
        queue.put_nowait(r)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncHTTPTransport(limits=limits, trust_env=False) as t:

        async def worker() -> None:
            while not queue.empty():
                o = queue.get_nowait()
                req = httpx.Request(o.method, o.url, headers=o.headers, content=o.content)
                resp = await t.handle_async_request(req)
                try:
                    async for _ in resp.aiter_raw():
                        pass
                finally:
                    await resp.aclose()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return len(requests) / (time.perf_counter() - t0)


async def replayer(plan: Plan, target: Target, out: Path, concurrency: int) -> float:
    """The replay engine end to end, records written to `out`."""
    with RecordWriter(out) as w:
        run = TargetRun(plan, target, "sk-bench", w.write, {}, concurrency=concurrency)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncHTTPTransport(limits=limits, trust_env=False) as transport:
            t0 = time.perf_counter()
            counts = await run.run(transport)
            rate = len(plan) / (time.perf_counter() - t0)
    if counts.ok != len(plan):
        raise RuntimeError(f"replayer: {counts.line()}")
    return rate


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=400, help="exchanges per run (default 400)")
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated (default 1,8,32)")
    ap.add_argument("--rounds", type=int, default=3, help="best of R rounds (default 3)")
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]

    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        cap = capture_session(args.requests, tmp)
        plan = make_plan(load_records([cap]))
        proc, url = start_target()
        try:
            target = Target("bench", url + "/v1")
            requests = [prepare(n.rec, target, "sk-bench", {}) for n in plan.nodes]
            print(f"{len(plan)} exchanges per run (chat, chat stream, responses, responses "
                  f"stream), best of {args.rounds}; target: `openai` stand-in in its own process")  # fmt: skip
            print(f"{'concurrency':>11}  {'direct ex/s':>11}  {'replayer ex/s':>13}  {'ratio':>5}"
                  f"    {'(transport loop ex/s':>20}  {'ratio)':>6}")  # fmt: skip
            asyncio.run(direct(requests[:50], 4))  # warm-up: imports, server threads
            cpu: dict[str, float] = {}

            def timed(name: str, rate: float, c0: float) -> float:
                us = (time.process_time() - c0) / len(requests) * 1e6
                cpu[name] = min(cpu.get(name, us), us)
                return rate

            for conc in levels:
                d = r = t = 0.0
                for i in range(args.rounds):
                    c0 = time.process_time()
                    d = max(d, timed("direct", asyncio.run(direct(requests, conc)), c0))
                    out = tmp / f"replay-{conc}-{i}.jsonl"
                    c0 = time.process_time()
                    r = max(
                        r, timed("replayer", asyncio.run(replayer(plan, target, out, conc)), c0)
                    )
                    c0 = time.process_time()
                    t = max(
                        t, timed("transport", asyncio.run(direct_transport(requests, conc)), c0)
                    )
                print(f"{conc:>11}  {d:>11.0f}  {r:>13.0f}  {r / d:>5.2f}"
                      f"    {t:>20.0f}  {r / t:>6.2f}")  # fmt: skip
            print("client CPU per exchange (least over all runs): "
                  f"direct {cpu['direct']:.0f} µs, replayer {cpu['replayer']:.0f} µs, "
                  f"transport loop {cpu['transport']:.0f} µs")  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


if __name__ == "__main__":
    main()
