"""How does the analysis scale? load + pair + divergences + conformance (OpenAPI validation,
SDK types, grammars, the SDK impact harness) + severities and verdicts + diagnoses on 1k, 10k
and 100k exchanges, against the time it takes just to parse the JSONL.

Usage: python bench/analysis_scale.py [--sizes 1000,10000,100000] [--keep DIR]

A seed session is recorded the normal way: the real openai SDK through
`mitmdump -s addons/capture.py` against the `openai` stand-in (chat, Responses, tool calls,
each once plain and once streamed), then replayed with `wirediff replay` to the `ollama`
and `lmstudio` stand-ins (whose quirks and soft errors give divergences, conformance rows
and failing chains to diagnose). Its baseline + replay records are replicated with fresh
ids, `replay_of` links and start times to N exchanges, half of them streamed.

For each size, one fresh subprocess times the floor:
  parse     — `json.loads` per line into a list, nothing else, as is and with the cyclic
              garbage collector off (no-GC: most of the plain parse goes to collections);
and another one the analysis, reporting its peak resident memory (`getrusage` max RSS):
  load      — `wirediff.record.store.load_records`;
  analyze   — `wirediff.analysis.comparison.analyze.analyze`: frames, pairing, divergences,
              conformance against the OpenAPI document, the SDK types and the grammars, the
              SDK impact harness (once per distinct answer structure), severities, verdicts;
  diagnose  — `wirediff.analysis.diagnosis.diagnose.diagnose`: chains and their diagnoses;
  render    — `wirediff.reports.render.render_html`: the HTML report, timed on its own
              (after the peak memory is read) and reported with its size.
Targets: 100k exchanges in under 60 s and 2 GB; load + analyze + diagnose within 5x of
the bare parse; time per exchange flat across sizes (linear growth).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
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
    """The floor: `json.loads` per line into a list, nothing else; once as is, once with
    the cyclic garbage collector off (which most of the plain parse's time goes to)."""
    out: dict[str, Any] = {}
    for name, collect in (("parse", True), ("parse_nogc", False)):
        gc.collect()
        if not collect:
            gc.disable()
        t = time.perf_counter()
        with path.open("rb") as fh:
            parsed = [json.loads(line) for line in fh]
        out[name] = time.perf_counter() - t
        gc.enable()
        out["n"] = len(parsed)
        out["streamed"] = sum(1 for r in parsed if (r.get("tags") or {}).get("stream"))
        del parsed
    return out


def measure_analysis(path: Path) -> dict[str, Any]:
    """load + analyze + diagnose, timed per stage, then the report's render."""
    from wirediff.analysis.comparison.analyze import analyze
    from wirediff.analysis.diagnosis.diagnose import diagnose
    from wirediff.reports.model import build
    from wirediff.reports.render import render_html

    out: dict[str, Any] = {}
    t = time.perf_counter()
    records = load_records([path])
    out["load"] = time.perf_counter() - t
    t = time.perf_counter()
    result = analyze(records)
    out["analyze"] = time.perf_counter() - t
    t = time.perf_counter()
    diagnoses = diagnose(records)
    out["diagnose"] = time.perf_counter() - t
    out["pairs"] = len(result.pairs)
    out["divergences"] = len(result.divergences)
    out["conformance"] = len(result.conformance)
    out["verdicts"] = ", ".join(
        f"{v.label} {v.family} {v.verdict}" for v in result.verdicts.itertuples()
    )
    out["diagnoses"] = len(diagnoses)
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    report = render_html(build(result, diagnoses), path.with_suffix(".html"))
    out["render"] = time.perf_counter() - t
    out["report_kb"] = report.stat().st_size / 1000
    return out


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
    ap.add_argument("--sizes", default="1000,10000,100000", help="exchange counts")
    ap.add_argument("--keep", metavar="DIR", help="write the captures here and keep them")
    ap.add_argument("--measure", nargs=2, metavar=("STAGE", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        stage, file = args.measure
        fn = measure_parse if stage == "parse" else measure_analysis
        print(json.dumps(fn(Path(file))))
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
            size_mb = path.stat().st_size / 2**20
            row = {**run_stage("parse", path), **run_stage("analysis", path), "mb": size_mb}
            rows.append(row)
            print(f"  {n} exchanges measured", file=sys.stderr)

    print()
    print(
        f"{'exchanges':>9} {'MB':>5} {'parse s':>7} {'no-GC':>6} {'load s':>6} "
        f"{'analyze s':>9} {'diagnose s':>10} {'total s':>7} {'exch/s':>6} {'µs/exch':>7} "
        f"{'peak MB':>7} {'x parse':>7} {'x no-GC':>7}"
    )
    for r in rows:
        total = r["load"] + r["analyze"] + r["diagnose"]
        print(
            f"{r['n']:>9} {r['mb']:>5.0f} {r['parse']:>7.2f} {r['parse_nogc']:>6.2f} "
            f"{r['load']:>6.2f} {r['analyze']:>9.2f} {r['diagnose']:>10.2f} {total:>7.2f} "
            f"{r['n'] / total:>6.0f} {total / r['n'] * 1e6:>7.0f} {r['maxrss_mb']:>7.0f} "
            f"{total / r['parse']:>7.1f} {total / r['parse_nogc']:>7.1f}"
        )
    print(
        "parse: json.loads per line (no-GC: with the garbage collector off); total: load + "
        "analyze + diagnose; peak: max RSS of the process doing them; x: total / parse"
    )
    for r in rows:
        print(
            f"  {r['n']} exchanges ({r['streamed'] / r['n']:.0%} streamed): {r['pairs']} pairs, "
            f"{r['divergences']} divergences, "
            f"{r['conformance']} conformance rows, {r['diagnoses']} diagnoses; "
            f"report.html {r['report_kb']:,.0f} KB, rendered in {r['render']:.2f} s"
        )
        print(f"    verdicts: {r['verdicts']}")


if __name__ == "__main__":
    main()
