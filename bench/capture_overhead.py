"""What does recording cost? mitmdump + addons/capture.py against bare mitmdump.

Usage: python bench/capture_overhead.py [--requests N] [--concurrency C] [--streams S]
                                        [--rounds R]

The proxy is what is measured, not the backend: the backend is a bare asyncio server in its
own process answering every request with a canned answer (JSON, or a short SSE stream whose
first event goes out at once), several times faster than bare mitmdump forwards (the
`direct` row shows by how much). The client is a bare asyncio HTTP/1.1 client: C keep-alive
connections, each sending its next request when the last answer is read.

Bare mitmdump runs with the options the addon sets: `connection_strategy=lazy`; for the SSE
measure also `stream_large_bodies=1`, since the addon streams SSE through (for JSON it does
not, so neither does bare mitmdump there). The paths are measured interleaved, R rounds,
best round each, and the throughput ratio of each round (bare and capture measured one
after the other) with its median: on a shared machine it drifts least. The CPU time
mitmdump spends per request, and the recorder process per record, are steadier still.
Targets: capture / bare throughput >= 0.95 at concurrency 8; the first SSE event within
+1 ms of bare mitmdump.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wirediff.cli.netutil import free_port, wait_port  # noqa: E402

MITMDUMP = str(Path(sys.executable).with_name("mitmdump"))
BODY = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello there!"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4},
    }
).encode()
CHUNK = b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
WARM_UP = 100
"""Requests through the capture path before measuring: the recorder process has started."""
STREAM_REST = 0.005
"""Seconds between the first event and the rest of the stream."""


# --- the backend: canned answers, in its own process ----------------------------------------


class Canned(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[: head_end + 2].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15 : head.find(b"\r\n", at)]) if at >= 0 else 0
            end = head_end + 4 + length
            if len(self.buf) < end:
                return
            body, self.buf = self.buf[head_end + 4 : end], self.buf[end:]
            if b'"stream":true' in body or b'"stream": true' in body:
                self.stream()
            else:
                self.t.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
                )

    def stream(self) -> None:
        def chunk(b: bytes) -> bytes:
            return b"%x\r\n%s\r\n" % (len(b), b)

        self.t.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + chunk(CHUNK)
        )
        rest = chunk(CHUNK * 3) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        asyncio.get_running_loop().call_later(STREAM_REST, self.t.write, rest)


def serve(port: int) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Canned, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


# --- the client ------------------------------------------------------------------------------


async def read_answer(r: asyncio.StreamReader, first: list[float] | None = None) -> None:
    """Read one answer (Content-Length or chunked); `first` gets the time of the first
    `data:` line."""
    head = await r.readuntil(b"\r\n\r\n")
    low = head.lower()
    if b"content-length:" in low:
        at = low.find(b"content-length:")
        await r.readexactly(int(low[at + 15 : low.find(b"\r\n", at)]))
        return
    while True:
        size = int((await r.readline()).strip(), 16)
        data = await r.readexactly(size + 2)
        if first is not None and not first and b"data:" in data:
            first.append(time.perf_counter())
        if size == 0:
            return


def request(port: int, stream: bool = False) -> bytes:
    body = BODY[:-1] + ', "stream": true}' if stream else BODY
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
        "content-type: application/json\r\nauthorization: Bearer sk-bench-key\r\n"
        f"content-length: {len(body)}\r\n\r\n{body}"
    ).encode()


async def json_rps(port: int, n: int, concurrency: int) -> float:
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(concurrency)]
    req = request(port)
    for r, w in conns:  # warm-up: connections, caches
        for _ in range(5):
            w.write(req)
            await read_answer(r)
    left = n

    async def run(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            w.write(req)
            await read_answer(r)

    t0 = time.perf_counter()
    await asyncio.gather(*(run(r, w) for r, w in conns))
    rate = n / (time.perf_counter() - t0)
    for _, w in conns:
        w.close()
    return rate


async def first_event_ms(port: int, n: int) -> list[float]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    req = request(port, stream=True)
    out = []
    for i in range(n + 5):
        first: list[float] = []
        t0 = time.perf_counter()
        w.write(req)
        await read_answer(r, first)
        if i >= 5:
            out.append((first[0] - t0) * 1000)
    w.close()
    return out


# --- the proxies -----------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The processes `pid` started (the capture addon's recorder)."""
    return [
        int(c)
        for t in Path(f"/proc/{pid}/task").iterdir()
        for c in (t / "children").read_text().split()
    ]


def start(cmd: list[str], port: int, log: Path | None = None) -> subprocess.Popen[bytes]:
    """Start `cmd`, its output to `log` or nowhere, and wait for it to listen on `port`."""
    out = log.open("wb") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    wait_port(port, 30, proc)
    return proc


def proxy(upstream: str, tmp: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    cmd = [
        MITMDUMP,
        "-q",
        "--listen-host",
        "127.0.0.1",
        "--mode",
        f"reverse:{upstream}@{port}",
        "--set",
        f"confdir={tmp / 'conf'}",
        *extra,
    ]
    return start(cmd, port), port


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000, help="JSON requests per round")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--streams", type=int, default=100, help="SSE streams per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backend", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.backend:
        serve(args.backend)
        return
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        backend_port = free_port()
        backend = start([sys.executable, __file__, "--backend", str(backend_port)], backend_port)
        upstream = f"http://127.0.0.1:{backend_port}"
        lazy = ("--set", "connection_strategy=lazy")
        procs = {
            "mitmdump": proxy(upstream, tmp, *lazy),
            "mitmdump (streaming)": proxy(upstream, tmp, *lazy, "--set", "stream_large_bodies=1"),
            "mitmdump + capture": proxy(
                upstream,
                tmp,
                "-s",
                str(ROOT / "addons/capture.py"),
                "--set",
                f"capture_dir={tmp / 'cap'}",
            ),
        }
        ports = {"direct": backend_port, **{k: p for k, (_, p) in procs.items()}}
        pids = {"direct": backend.pid, **{k: p.pid for k, (p, _) in procs.items()}}
        rps: dict[str, float] = {k: 0.0 for k in ports}
        cpu: dict[str, list[float]] = {k: [] for k in ports}
        rounds: dict[str, list[float]] = {k: [] for k in ports}
        ttfe: dict[str, list[float]] = {k: [] for k in ports}
        asyncio.run(json_rps(ports["mitmdump + capture"], WARM_UP, 1))
        time.sleep(1)  # the recorder has started and written them
        recorder = children(pids["mitmdump + capture"])
        recorder_cpu = sum(cpu_seconds(p) for p in recorder)
        try:
            for _ in range(args.rounds):  # interleaved, so drift hits every path alike
                for name, port in ports.items():
                    if name != "mitmdump (streaming)":
                        used = cpu_seconds(pids[name])
                        rate = asyncio.run(json_rps(port, args.requests, args.concurrency))
                        cpu[name].append((cpu_seconds(pids[name]) - used) / args.requests * 1e6)
                        rps[name] = max(rps[name], rate)
                        rounds[name].append(rate)
                    if name != "mitmdump":
                        ttfe[name] += asyncio.run(first_event_ms(port, args.streams))
            recorder_cpu = sum(cpu_seconds(p) for p in recorder) - recorder_cpu
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait()
            backend.terminate()
            backend.wait()
        recorded = sum(len(p.read_bytes().splitlines()) for p in (tmp / "cap").glob("*.jsonl"))
    med = {k: statistics.median(v) for k, v in ttfe.items() if v}
    print(
        f"concurrency {args.concurrency}, {args.requests} JSON requests and {args.streams} "
        f"SSE streams per round, best of {args.rounds} rounds"
    )
    print(f"{'path':<22} {'JSON req/s':>11} {'CPU µs/req':>11} {'SSE first event (median ms)':>28}")
    for name in ports:
        rate = f"{rps[name]:.0f}" if rps[name] else "-"
        used = f"{min(cpu[name]):.0f}" if cpu[name] else "-"
        first = f"{med[name]:.2f}" if name in med else "-"
        print(f"{name:<22} {rate:>11} {used:>11} {first:>28}")
    cap, bare = rps["mitmdump + capture"], rps["mitmdump"]
    paired = [c / b for c, b in zip(rounds["mitmdump + capture"], rounds["mitmdump"], strict=True)]
    print(
        f"capture / bare mitmdump throughput: {statistics.median(paired):.3f} median of rounds "
        f"({min(paired):.2f}-{max(paired):.2f}), {cap / bare:.3f} best against best "
        "(target >= 0.95)"
    )
    print(
        f"direct / bare mitmdump throughput:  {rps['direct'] / bare:.2f} (the backend's headroom)"
    )
    added = med["mitmdump + capture"] - med["mitmdump (streaming)"]
    print(f"first SSE event added by capture: {added:+.2f} ms (target <= +1 ms)")
    warm = WARM_UP + 5  # and json_rps's own warm-up
    per_record = recorder_cpu / (recorded - warm) * 1e6
    print(f"the recorder process, off the proxy: {per_record:.0f} µs CPU per record")
    expected = warm + args.rounds * (args.requests + args.concurrency * 5 + args.streams + 5)
    print(f"records written by the capture path: {recorded} of {expected}")


if __name__ == "__main__":
    main()
