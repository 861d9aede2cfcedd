"""How does the analysis scale? `wirediff report` (load + pair + divergences + conformance +
the SDK impact harness + severities and verdicts + diagnoses + report.html and summary.json)
on the local engine, from 10k to 1M exchanges, against the time it takes just to parse the
JSONL; and, up to 100k, the whole analysis held in memory as it was before the engine.

Usage: python bench/analysis_scale.py [--sizes 10000,100000,1000000] [--in-memory-up-to N]
       [--keep DIR]

A seed session is recorded the normal way: the real openai SDK through
`mitmdump -s addons/capture.py` against the `openai` stand-in (chat, Responses, tool calls,
each once plain and once streamed), then replayed with `wirediff replay` to the `ollama`
and `lmstudio` stand-ins (whose quirks and soft errors give divergences, conformance rows
and failing chains to diagnose). Its baseline + replay records are replicated with fresh
ids, `replay_of` links and start times to N exchanges, half of them streamed.

For each size, each measurement in its own fresh process:
  parse      — `json.loads` per line, nothing kept: the floor of any reading of the file;
  engine     — `wirediff report FILE -o report.html --json summary.json` (`--engine local`,
               this machine's cores), its wall time and the peak resident memory of its
               whole process tree (the command and its workers, summed, sampled every
               0.1 s), and of its largest process;
  in memory  — (up to `--in-memory-up-to`) `load_records` + `analyze` + `diagnose` in one
               process, as the analysis ran before the engine: time and peak RSS
               (`getrusage`).
Targets: 1M exchanges reported in under 10 minutes and 4 GB on 2 cores; memory flat from 10k
to 1M; time per exchange no worse than the in-memory analysis measured beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wirediff.backends.standin import standin  # noqa: E402
from wirediff.cli.mitm import CaptureProxy  # noqa: E402
from wirediff.cli.replay import main_replay  # noqa: E402
from wirediff.record.store import RecordWriter, load_records  # noqa: E402

MODEL = "gpt-4o-mini"
TARGETS = {"ollama": "llama3.2", "lmstudio": "qwen2.5-7b-instruct"}
ASK: Any = [{"role": "user", "content": "What is the weather in Paris?"}]
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL_CHAT: Any = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
TOOL_RESP: Any = {"type": "function", "name": "get_weather", "parameters": PARAMS}


def drive(client: Any) -> int:
    """Chat, chat with a tool, Responses, Responses with a tool: each once plain and once
    streamed (a stream is read to its end). Returns the number of exchanges."""
    calls = [
        (client.chat.completions.create, {"messages": ASK}),
        (client.chat.completions.create, {"messages": ASK, "tools": [TOOL_CHAT]}),
        (client.responses.create, {"input": "Tell me a story."}),
        (client.responses.create, {"input": "Weather in Paris?", "tools": [TOOL_RESP]}),
    ]
    for stream in (False, True):
        for create, kwargs in calls:
            out = create(model=MODEL, stream=stream, **kwargs)
            if stream:
                list(out)
    return 2 * len(calls)


def record_seed(tmp: Path) -> list[dict[str, Any]]:
    """Baseline records from the SDK through mitmdump, and their replays to TARGETS."""
    capture_dir = tmp / "seed"
    shutil.rmtree(capture_dir, ignore_errors=True)  # captures append: start afresh
    with (
        standin("openai", delay=0.0) as upstream,
        CaptureProxy([upstream], capture_dir, "seed", label="openai", confdir=tmp / "conf") as p,
    ):
        client = openai.OpenAI(base_url=p.urls[0] + "/v1", api_key="sk-bench", max_retries=0)
        n = drive(client)
        deadline = time.monotonic() + 20
        while len(load_records([p.capture_file])) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{p.capture_file}: fewer than {n} records")
            time.sleep(0.02)
    replays = []
    for label, model in TARGETS.items():
        out = capture_dir / f"seed.{label}.jsonl"
        with standin(label, delay=0.0) as url, contextlib.redirect_stdout(io.StringIO()):
            argv = [str(p.capture_file), "--to", url + "/v1", "--label", label, "-o", str(out)]
            code = main_replay([*argv, "--model-map", f"{MODEL}={model}"])
        if code != 0:
            raise RuntimeError(f"replay to {label} failed ({code})")
        replays.append(out)
    return load_records([p.capture_file, *replays])


def replicate(seed: list[dict[str, Any]], n: int, path: Path) -> None:
    """N records: copies of the seed with fresh ids and links, each copy later in time."""
    t0 = min(r["started"] for r in seed)
    span = max(r["started"] + (r["duration_ms"] or 0) / 1000 for r in seed) - t0 + 1.0
    written = 0
    path.unlink(missing_ok=True)
    with RecordWriter(path) as w:
        copy = 0
        while written < n:
            for rec in seed:
                if written == n:
                    break
                r = dict(rec)
                r["id"] = f"{rec['id']}-{copy}"
                if rec.get("replay_of"):
                    r["replay_of"] = f"{rec['replay_of']}-{copy}"
                r["started"] = rec["started"] + copy * span
                r["seq"] = copy * len(seed) + (rec.get("seq") or 0)
                w.write(r)
                written += 1
            copy += 1


def measure_parse(path: Path) -> dict[str, Any]:
    """The floor: `json.loads` per line, nothing kept (the engine keeps nothing either)."""
    t = time.perf_counter()
    n = streamed = 0
    with path.open("rb") as fh:
        for line in fh:
            rec = json.loads(line)
            n += 1
            streamed += bool((rec.get("tags") or {}).get("stream"))
    return {"parse": time.perf_counter() - t, "n": n, "streamed": streamed}


def summary_head(path: Path) -> dict[str, Any]:
    """`totals` and `verdicts` of a summary.json, read from its start (at 1M exchanges the
    whole file is gigabytes of findings)."""
    with path.open("rb") as fh:
        head = fh.read(1 << 24).decode("utf-8", "replace")
    decoder, out = json.JSONDecoder(), {}
    for key in ("totals", "verdicts"):
        at = head.index(f'"{key}": ') + len(key) + 4
        out[key] = decoder.raw_decode(head, at)[0]
    return out


def measure_engine(path: Path) -> dict[str, Any]:
    """`wirediff report` on the local engine, in its own process; its whole process tree's
    resident memory sampled as it runs."""
    import psutil

    html, summary = path.with_suffix(".html"), path.with_suffix(".summary.json")
    cmd = [str(Path(sys.executable).with_name("wirediff")), "report", str(path)]
    cmd += ["-o", str(html), "--json", str(summary), "--engine", "local"]
    t = time.perf_counter()
    log = path.with_suffix(".log")
    with log.open("w") as errors:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors)
    top = psutil.Process(proc.pid)
    tree_peak = single_peak = top_peak = 0
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            rss = [p.memory_info().rss for p in [top, *top.children(recursive=True)]]
            tree_peak, single_peak = max(tree_peak, sum(rss)), max(single_peak, max(rss))
            top_peak = max(top_peak, rss[0])
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.1)
    wall = time.perf_counter() - t
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if proc.returncode != 0:
        raise SystemExit(f"wirediff report failed ({proc.returncode}):\n{log.read_text()[-3000:]}")
    doc = summary_head(summary)
    totals = doc["totals"]
    return {
        "engine": wall,
        "cpu": cpu,
        "tree_mb": tree_peak / 2**20,
        "top_mb": top_peak / 2**20,
        "single_mb": single_peak / 2**20,
        "pairs": totals["pairs"],
        "divergences": totals["divergences"],
        "conformance": totals["conformance"],
        "diagnoses": totals["diagnoses"],
        "report_kb": html.stat().st_size / 1000,
        "verdicts": ", ".join(
            f"{v['label']} {v['family']} {v['verdict']}" for v in doc.get("verdicts", [])
        ),
    }


def measure_in_memory(path: Path) -> dict[str, Any]:
    """load + analyze + diagnose in this process, the whole captures in memory."""
    from wirediff.analysis.comparison.analyze import analyze
    from wirediff.analysis.diagnosis.explain import diagnose

    t = time.perf_counter()
    records = load_records([path])
    result = analyze(records)
    diagnose(records, exchanges=result.exchanges, records_by_id=result.records_by_id)
    return {
        "memory": time.perf_counter() - t,
        "memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


STAGES = {"parse": measure_parse, "engine": measure_engine, "memory": measure_in_memory}


def run_stage(stage: str, path: Path) -> dict[str, Any]:
    """One measurement in a fresh interpreter, so peak memory is that stage's alone."""
    proc = subprocess.run(
        [sys.executable, __file__, "--measure", stage, str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"measuring {stage} on {path} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000", help="exchange counts")
    ap.add_argument(
        "--in-memory-up-to",
        type=int,
        default=100_000,
        metavar="N",
        help="also time the in-memory analysis up to this size (default: 100000)",
    )
    ap.add_argument("--keep", metavar="DIR", help="write the captures here and keep them")
    ap.add_argument("--measure", nargs=2, metavar=("STAGE", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        stage, file = args.measure
        print(json.dumps(STAGES[stage](Path(file))))
        return

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(args.keep) if args.keep else Path(tmpdir)
        tmp.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        seed = record_seed(tmp)
        print(f"seed: {len(seed)} records recorded and replayed in {time.perf_counter() - t:.1f}s")
        rows = []
        for n in (int(s) for s in args.sizes.split(",")):
            path = tmp / f"scale-{n}.jsonl"
            replicate(seed, n, path)
            row = {**run_stage("parse", path), **run_stage("engine", path)}
            if n <= args.in_memory_up_to:
                row.update(run_stage("memory", path))
            row["mb"] = path.stat().st_size / 2**20
            rows.append(row)
            print(f"  {n} exchanges measured: {json.dumps(row)}", file=sys.stderr, flush=True)
            if not args.keep:
                path.unlink()

    print()
    print(
        f"{'exchanges':>9} {'MB':>6} {'parse s':>7} {'report s':>8} {'µs/exch':>7} "
        f"{'CPU µs/exch':>11} {'tree MB':>7} {'command MB':>10} {'max proc MB':>11} "
        f"{'x parse':>7} {'in-memory s':>11} "
        f"{'µs/exch':>7} {'peak MB':>7}"
    )
    for r in rows:
        memory = (
            f"{r['memory']:>11.2f} {r['memory'] / r['n'] * 1e6:>7.0f} {r['memory_mb']:>7.0f}"
            if "memory" in r
            else f"{'—':>11} {'—':>7} {'—':>7}"
        )
        print(
            f"{r['n']:>9} {r['mb']:>6.0f} {r['parse']:>7.2f} {r['engine']:>8.2f} "
            f"{r['engine'] / r['n'] * 1e6:>7.0f} {r['cpu'] / r['n'] * 1e6:>11.0f} "
            f"{r['tree_mb']:>7.0f} {r['top_mb']:>10.0f} {r['single_mb']:>11.0f} "
            f"{r['engine'] / r['parse']:>7.1f} {memory}"
        )
    print(
        "parse: json.loads per line, nothing kept; report: `wirediff report --engine local` "
        "with --json, wall time (CPU: user + system of all its processes); tree: peak RSS of "
        "its processes summed, command: of its own process; in-memory: load + "
        "analyze + diagnose in one process (no render), its peak RSS"
    )
    for r in rows:
        print(
            f"  {r['n']} exchanges ({r['streamed'] / r['n']:.0%} streamed): {r['pairs']} pairs, "
            f"{r['divergences']} divergences, "
            f"{r['conformance']} conformance rows, {r['diagnoses']} diagnoses; "
            f"report.html {r['report_kb']:,.0f} KB"
        )
        print(f"    verdicts: {r['verdicts']}")


if __name__ == "__main__":
    main()
