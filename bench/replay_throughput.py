"""What does replaying cost? `wirediff replay` vs a plain httpx loop, same requests.

Usage: python bench/replay_throughput.py [--requests N] [--concurrency 1,8,32] [--rounds R]

A session of N independent exchanges (default 1000: a run of about a second, in which what
each run pays once, the spool's fork and its last batch, the connections' set-up, weighs
little; chat, chat stream, responses, responses stream in turn) is captured through mitmdump + addons/capture.py from the `openai` stand-in. It is then
sent to a second `openai` stand-in running in its own process (so that the server does not
share the client's interpreter) by:
  direct   — an asyncio httpx loop (`httpx.AsyncClient`): one worker per request in
             flight, the same prepared requests, bodies read whole;
  replayer — the replay engine as `wirediff replay` runs it: dependency scheduling, a
             `StreamTap` per answer, every record built by `build_record` and appended by the
             spool process, the time taken until the last record is on disk.
Both run at the same concurrency; each round runs both, in alternating order, and the ratio
of the round's rates is taken: the median over the rounds is what to read (target:
replayer >= 0.90 x direct at concurrency 8), with the range. A third loop, for information,
sends through one httpx transport and its connection pool (no redirects, cookies or auth
flow; the replayer gives each request in flight a connection of its own). The CPU time per
exchange of the client process (and of the spool process) is printed too: on a busy machine
it is steadier than the rates.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
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
from wirediff.record.body import DEFAULT_BODY_CAP  # noqa: E402
from wirediff.record.exchange import Exchange  # noqa: E402
from wirediff.record.spool import RecordMeta, Spool  # noqa: E402
from wirediff.record.store import load_records  # noqa: E402
from wirediff.replay.connections import Connections  # noqa: E402
from wirediff.replay.output import Writers  # noqa: E402
from wirediff.replay.plan import Node, Plan, make_plan  # noqa: E402
from wirediff.replay.request import Outgoing, prepare  # noqa: E402
from wirediff.replay.sender import TargetRun  # noqa: E402
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
        [str(Path(sys.executable).with_name("wirediff")), "stand-in", "openai"],
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
    """The same loop one layer down: one httpx transport and its pool of connections (no
    redirects, cookies or auth flow), for information."""
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
    """The replay engine end to end as `wirediff replay` runs it: records built and written
    by the spool process, the time taken until the last one is on disk."""
    writers = Writers([out], spool=Spool(DEFAULT_BODY_CAP))

    def offload(node: Node, ex: Exchange, meta: RecordMeta) -> bool:
        return writers.write_exchange(out, ex, meta)

    run = TargetRun(
        plan,
        target,
        "sk-bench",
        lambda rec: writers.write(out, rec),
        {},
        concurrency=concurrency,
        offload=offload,
    )
    async with Connections.to_network(concurrency) as connections:
        t0 = time.perf_counter()
        try:
            counts = await run.run(connections)
        finally:
            writers.close()
        rate = len(plan) / (time.perf_counter() - t0)
    if counts.ok != len(plan):
        raise RuntimeError(f"replayer: {counts.line()}")
    return rate


def children_cpu() -> float:
    """CPU seconds of the child processes waited for so far (the spool, once closed)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000, help="exchanges per run (default 1000)")
    ap.add_argument("--concurrency", default="1,8,32", help="comma-separated (default 1,8,32)")
    ap.add_argument("--rounds", type=int, default=15, help="rounds per level (default 15)")
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]

    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        cap = capture_session(args.requests, tmp)
        plan = make_plan(load_records([cap]))
        proc, url = start_target()
        try:
            target = Target("bench", url)
            requests = [prepare(n.rec, target, "sk-bench", {}) for n in plan.nodes]
            n = len(requests)
            print(f"{n} exchanges per run (chat, chat stream, responses, responses stream), "
                  f"{args.rounds} rounds interleaved; target: `openai` stand-in in its own process")  # fmt: skip
            print(f"{'concurrency':>11}  {'direct ex/s':>11}  {'replayer ex/s':>13}  "
                  f"{'ratio (median, rounds)':>24}  {'transport loop ex/s':>19}  "
                  f"{'client CPU µs/ex: direct, replayer (+ spool)':>44}")  # fmt: skip
            asyncio.run(direct(requests[:50], 4))  # warm-up: imports, server threads

            for conc in levels:
                rates: dict[str, list[float]] = {"direct": [], "replayer": [], "transport": []}
                cpu: dict[str, list[float]] = {"direct": [], "replayer": [], "spool": []}
                for i in range(args.rounds):
                    out = tmp / f"replay-{conc}-{i}.jsonl"
                    runs = [
                        ("direct", lambda c=conc: direct(requests, c)),
                        ("replayer", lambda c=conc, o=out: replayer(plan, target, o, c)),
                    ]
                    for name, make in runs if i % 2 == 0 else runs[::-1]:
                        c0, k0 = time.process_time(), children_cpu()
                        rates[name].append(asyncio.run(make()))
                        cpu[name].append((time.process_time() - c0) / n * 1e6)
                        if name == "replayer":
                            cpu["spool"].append((children_cpu() - k0) / n * 1e6)
                    rates["transport"].append(asyncio.run(direct_transport(requests, conc)))
                ratios = [r / d for r, d in zip(rates["replayer"], rates["direct"], strict=True)]
                med = {
                    k: statistics.median(v)
                    for k, v in {**rates, **{f"cpu_{k}": v for k, v in cpu.items()}}.items()
                }
                print(f"{conc:>11}  {med['direct']:>11.0f}  {med['replayer']:>13.0f}  "
                      f"{statistics.median(ratios):>8.2f} ({min(ratios):.2f}-{max(ratios):.2f})     "
                      f"{med['transport']:>19.0f}  "
                      f"{med['cpu_direct']:>27.0f}, {med['cpu_replayer']:.0f} (+ {med['cpu_spool']:.0f})")  # fmt: skip
        finally:
            proc.terminate()
            proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()


if __name__ == "__main__":
    main()
