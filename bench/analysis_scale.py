"""How does the analysis scale? `wirediff report` (load + pair + divergences + conformance +
the SDK impact harness + severities and verdicts + diagnoses + report.html and summary.json)
on the local engine, from 10k to 1M exchanges, against the time it takes just to parse the
JSONL; and, up to 100k, the whole analysis held in memory as it was before the engine.

Usage: python bench/analysis_scale.py [--sizes 10000,100000,1000000] [--in-memory-up-to N]
       [--keep DIR]

A seed session is recorded the normal way: the real openai SDK through
`mitmdump -s addons/capture.py` against the `openai` stand-in (chat and Responses with six
prompts of 1 to 14 words and two models, each of two tools called, each once plain and once
streamed, and two calls answered with a fault: a cut stream, an empty body), then replayed
with `wirediff replay` to the `ollama` and `lmstudio` stand-ins (whose quirks and soft errors
give divergences, conformance rows and failing chains to diagnose). Its baseline + replay
records are replicated to N exchanges, each copy a conversation of its own: fresh ids,
`replay_of` links and start times, the prompts' and answers' words drawn anew, and the
cities in tool-call arguments; half of them streamed. How many distinct answers the first
100k hold (what the SDK impact harness tells apart) is printed with the table.

For each size, each measurement in its own fresh process:
  parse      — `json.loads` per line, nothing kept: the floor of any reading of the file;
  engine     — `wirediff report FILE -o report.html --json summary.json` (`--engine local`,
               this machine's cores), its wall time and the peak resident memory of its
               whole process tree (the command and its workers, summed, sampled every
               0.1 s), and of its largest process;
  outputs    — the same command writing every finding and diagnosis too (`--findings
               FILE.jsonl --csv FILE.csv`), its wall time;
  in memory  — (up to `--in-memory-up-to`) `load_records` + `analyze` + `diagnose` in one
               process, as the analysis ran before the engine: time and peak RSS
               (`getrusage`).
Targets (issue 30): 1M exchanges reported in at most 1.5 times the parse and 1.5 GB for the
whole process tree; 100k in at most 1.2 times the parse.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import re
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

MODELS = ("gpt-4o-mini", "gpt-4.1-mini")
TARGETS = {"ollama": "llama3.2", "lmstudio": "qwen2.5-7b-instruct"}
PROMPTS = (
    "Hi",
    "What is the weather in Paris?",
    "Tell me a story about a lighthouse keeper and a storm.",
    "Summarise the plot of a film you like in two sentences, please.",
    "List three prime numbers",
    "Why is the sky blue during the day and red at sunset over the sea?",
)
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TIME = {
    "type": "object",
    "properties": {"timezone": {"type": "string"}, "format": {"type": "string"}},
    "required": ["timezone", "format"],
}
TOOLS = {"get_weather": WEATHER, "get_time": TIME}
FAULTS = ("fault-truncate", "fault-empty")
"""Models the stand-ins answer with a fault (a stream cut before its end, an empty body)."""


def drive(client: Any) -> int:
    """Chat and Responses, plain and streamed (a stream is read to its end): each prompt
    with one of two models, each tool with a question that calls it, and two calls whose
    answers fail. Returns the number of exchanges."""
    calls: list[tuple[Any, dict[str, Any]]] = []
    for n, prompt in enumerate(PROMPTS):
        model = MODELS[n % len(MODELS)]
        calls.append((client.chat.completions.create, {"model": model, "messages": _ask(prompt)}))
        calls.append((client.responses.create, {"model": model, "input": prompt}))
    for name, params in TOOLS.items():
        ask = f"Use {name} for Paris, now"
        chat_tool = {"type": "function", "function": {"name": name, "parameters": params}}
        calls.append(
            (
                client.chat.completions.create,
                {"model": MODELS[0], "messages": _ask(ask), "tools": [chat_tool]},
            )
        )
        resp_tool = {"type": "function", "name": name, "parameters": params}
        calls.append(
            (client.responses.create, {"model": MODELS[1], "input": ask, "tools": [resp_tool]})
        )
    n = 0
    for stream in (False, True):
        for create, kwargs in calls:
            out = create(stream=stream, **kwargs)
            if stream:
                list(out)
            n += 1
    for model in FAULTS:  # the SDK raises on these: the answer is recorded all the same
        with contextlib.suppress(openai.APIError):
            list(client.chat.completions.create(model=model, messages=_ask("Hi"), stream=True))
        n += 1
    return n


def _ask(text: str) -> Any:
    return [{"role": "user", "content": text}]


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
            for name in MODELS:
                argv += ["--model-map", f"{name}={model}"]
            code = main_replay(argv)
        if code != 0:
            raise RuntimeError(f"replay to {label} failed ({code})")
        replays.append(out)
    return load_records([p.capture_file, *replays])


WORDS = [
    "amber",
    "river",
    "quiet",
    "stone",
    "window",
    "garden",
    "rapid",
    "silver",
    "orbit",
    "cedar",
    "lantern",
    "meadow",
    "harbor",
    "violet",
    "thunder",
    "pebble",
    "canyon",
    "falcon",
    "ember",
    "willow",
    "tide",
    "maple",
    "comet",
    "glacier",
]
CITIES = ("Paris", "Lyon", "Oslo", "Quito", "Lagos", "Perth", "Hanoi", "Lima", "Bern", "Cairo")
TEXT_KEYS = frozenset({"content", "text", "delta", "input", "instructions"})
ID_KEYS = frozenset({"id", "item_id", "call_id", "response_id"})


def vary(rec: dict[str, Any], rng: random.Random, copy: int) -> None:
    """Another conversation of the same kind: the prompt's and the answer's words drawn
    anew (as many words: the same events), ids minted for this copy (equal ids stay equal),
    the cities in tool-call arguments drawn anew."""
    minted: dict[str, str] = {}
    words: dict[str, str] = {}

    def text(value: str) -> str:
        return re.sub(r"[A-Za-z]+", lambda m: words.setdefault(m[0], rng.choice(WORDS)), value)

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            for k, v in value.items():
                if isinstance(v, str) and k in ID_KEYS:
                    value[k] = minted.setdefault(v, f"{v}-{copy}")
                elif isinstance(v, str) and k in TEXT_KEYS and v != "[DONE]":
                    value[k] = text(v)
                elif isinstance(v, str) and k == "arguments":
                    value[k] = re.sub("|".join(CITIES), lambda _: rng.choice(CITIES), v)
                else:
                    walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        return value

    walk(rec["request"]["body"])
    if rec["response"] is not None:
        for part in ("body", "events"):
            walk(rec["response"][part])


def replicate(seed: list[dict[str, Any]], n: int, path: Path) -> None:
    """N records: copies of the seed with fresh ids and links, each copy later in time and
    a conversation of its own (`vary`)."""
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
                r = json.loads(json.dumps(rec))
                r["id"] = f"{rec['id']}-{copy}"
                if rec.get("replay_of"):
                    r["replay_of"] = f"{rec['replay_of']}-{copy}"
                r["started"] = rec["started"] + copy * span
                r["seq"] = copy * len(seed) + (rec.get("seq") or 0)
                # an original and its replays were asked the same: the same draws
                vary(r, random.Random(f"{copy}:{rec.get('replay_of') or rec['id']}"), copy)
                w.write(r)
                written += 1
            copy += 1


def distinct_answers(path: Path, limit: int = 100_000) -> dict[str, int]:
    """Count distinct answers among the first `limit` exchanges, as two steps tell them apart.

    `answers`: the skeletons the SDK impact harness tells apart (`impact.skeleton`: the
    request's options and the answer's structure), so at most this many SDK runs. `keys`: the
    answer keys the scan reads one record of (`reading.answer_key`), so at most this many
    readings, each process reading each once."""
    from wirediff.analysis.comparison.impact import skeleton
    from wirediff.analysis.comparison.reading import answer_key

    seen: set[str | None] = set()
    keys: set[Any] = set()
    with path.open("rb") as fh:
        for k, line in enumerate(fh):
            if k == limit:
                break
            rec = json.loads(line)
            seen.add(skeleton(rec))
            keys.add(answer_key(rec))
    return {"answers": len(seen), "keys": len(keys)}


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
    doc = json.loads(summary.read_text())
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
    from wirediff.analysis.index.analyze import analyze, diagnose_index

    t = time.perf_counter()
    records = load_records([path])
    diagnose_index(analyze(records).index)
    return {
        "memory": time.perf_counter() - t,
        "memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def measure_outputs(path: Path) -> dict[str, Any]:
    """`wirediff report` as `engine` runs it, writing every finding too: `--findings`, `--csv`."""
    out = path.with_suffix("")
    cmd = [str(Path(sys.executable).with_name("wirediff")), "report", str(path)]
    cmd += ["-o", f"{out}.html", "--json", f"{out}.summary.json", "--engine", "local"]
    cmd += ["--findings", f"{out}.findings.jsonl", "--csv", f"{out}.csv"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"wirediff report failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    findings = Path(f"{out}.findings.jsonl")
    size = findings.stat().st_size + Path(f"{out}.csv").stat().st_size
    findings.unlink()
    Path(f"{out}.csv").unlink()
    return {"outputs": wall, "outputs_mb": size / 2**20}


def measure_shapes(path: Path) -> dict[str, Any]:
    return distinct_answers(path)


STAGES = {
    "parse": measure_parse,
    "engine": measure_engine,
    "memory": measure_in_memory,
    "shapes": measure_shapes,
    "outputs": measure_outputs,
}


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
            row.update(run_stage("outputs", path))
            row.update(run_stage("shapes", path))
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
        f"{'x parse':>7} {'all outputs s':>13} {'MB':>5} {'in-memory s':>11} "
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
            f"{r['engine'] / r['parse']:>7.1f} {r['outputs']:>13.2f} {r['outputs_mb']:>5.0f} "
            f"{memory}"
        )
    print(
        "parse: json.loads per line, nothing kept; report: `wirediff report --engine local` "
        "with --json, wall time (CPU: user + system of all its processes); tree: peak RSS of "
        "its processes summed, command: of its own process; all outputs: the same report "
        "writing every finding and diagnosis too (--findings, --csv), its wall time and the "
        "MB those two files take; in-memory: load + "
        "analyze + diagnose in one process (no render), its peak RSS"
    )
    for r in rows:
        print(
            f"  {r['n']} exchanges ({r['streamed'] / r['n']:.0%} streamed): {r['pairs']} pairs, "
            f"{r['divergences']} divergences, "
            f"{r['conformance']} conformance rows, {r['diagnoses']} diagnoses; "
            f"report.html {r['report_kb']:,.0f} KB; "
            f"{r['answers']} distinct answers to the clients and {r['keys']:,} answer keys "
            f"in the first {min(r['n'], 100_000):,}"
        )
        print(f"    verdicts: {r['verdicts']}")


if __name__ == "__main__":
    main()
