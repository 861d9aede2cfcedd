"""Run `wirediff demo`: the whole loop on embedded defaults, in well under a minute.

Local stand-ins play OpenAI (the baseline), LM Studio, Ollama and vLLM; the real openai SDK
is captured through `mitmdump -s addons/capture.py`; the session is replayed to the others.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from wirediff._support import clip
from wirediff.cli.mitm import CaptureProxy
from wirediff.cli.runner import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, exit_codes, folder

__all__ = [
    "CANDIDATES",
    "DEMO_KEY",
    "MODEL",
    "WEATHER_CHAT",
    "WEATHER_RESP",
    "drive_sdk",
    "register",
    "run_demo",
]

DEMO_KEY = "sk-demo-wirediff-0000000000000000"
BASELINE = "openai"
CANDIDATES = ("lmstudio", "ollama", "vllm")
# What a user would pass as --model-map: each backend serves its own model names.
MODEL_MAP = {
    "lmstudio": "qwen2.5-7b-instruct",
    "ollama": "llama3.2",
    "vllm": "Qwen/Qwen2.5-0.5B-Instruct",
}
MODEL = "gpt-4o-mini"
WEATHER_FUNCTION = {
    "name": "get_weather",
    "description": "Current weather",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
WEATHER_CHAT = {"type": "function", "function": WEATHER_FUNCTION}
WEATHER_RESP = {"type": "function", **WEATHER_FUNCTION}
REASON = 110
"""Characters of a verdict's top reason printed in the terminal summary."""
LOG_TAIL = 300
"""Characters of a failed step's output quoted in its error: the end says why."""


def drive_sdk(base_url: str, api_key: str) -> int:
    """Make the calls of an app moving from Chat Completions to Responses; return the count."""
    import openai

    with openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30) as client:
        return _drive(client)


def _drive(client: Any) -> int:
    """Drive `client`, typed as Any: the SDK's overloads are for apps; this sends odd shapes too."""
    ask = [{"role": "user", "content": "What is the weather in Paris?"}]
    client.chat.completions.create(model=MODEL, messages=ask)
    for _ in client.chat.completions.create(
        model=MODEL,
        messages=ask,
        stream=True,
        stream_options={"include_usage": True},
    ):
        pass
    first = client.chat.completions.create(model=MODEL, messages=ask, tools=[WEATHER_CHAT])
    calls_chat = first.choices[0].message.tool_calls or []
    call = calls_chat[0] if calls_chat else None
    if call is not None:
        client.chat.completions.create(
            model=MODEL,
            messages=[
                *ask,
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 18})},
            ],
            tools=[WEATHER_CHAT],
        )
    r1 = client.responses.create(model=MODEL, input="Say hello.")
    with client.responses.stream(model=MODEL, input="Tell me a short story.") as stream:
        stream.get_final_response()
    client.responses.create(model=MODEL, input="And in French?", previous_response_id=r1.id)
    fc = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER_RESP])
    calls = [o for o in fc.output if o.type == "function_call"]
    n = 7
    if calls:
        with client.responses.stream(
            model=MODEL,
            previous_response_id=fc.id,
            input=[
                {
                    "type": "function_call_output",
                    "call_id": calls[0].call_id,
                    "output": '{"temp_c": 18}',
                }
            ],
            tools=[WEATHER_RESP],
        ) as stream:
            stream.get_final_response()
        n += 1
    return n + (1 if call is not None else 0)


class Steps:
    """Show progress one line per step, with elapsed time."""

    def __init__(self, total: int) -> None:
        self.total, self.n, self.t0 = total, 0, time.monotonic()

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        self.n += 1
        print(f"[{self.n}/{self.total}] {what} …", end="", flush=True, file=sys.stderr)
        t = time.monotonic()
        try:
            yield
        except BaseException:
            print(file=sys.stderr)  # what ends the demo says so on a line of its own
            raise
        print(f" done ({time.monotonic() - t:.1f}s)", file=sys.stderr)


def run_demo(out: Path) -> dict[str, Any]:
    """Start, capture, replay, report, stop; return the paths written."""
    from wirediff.backends.standin import standin
    from wirediff.cli.replay import main_replay
    from wirediff.cli.report import main_report

    out.mkdir(parents=True, exist_ok=True)
    capture_dir = out / "captures"
    for old in capture_dir.glob("demo*.jsonl"):  # a demo is a fresh run, not a resume
        old.unlink()
    steps = Steps(4)
    with contextlib.ExitStack() as stack:
        with steps.step("starting stand-ins: openai (baseline), " + ", ".join(CANDIDATES)):
            urls = {
                name: stack.enter_context(standin(name, delay=0.005))
                for name in (BASELINE, *CANDIDATES)
            }
        with steps.step("capturing the openai SDK through mitmdump -s addons/capture.py"):
            with CaptureProxy([urls[BASELINE]], capture_dir, "demo", label=BASELINE) as proxy:
                n = drive_sdk(proxy.urls[0] + "/v1", DEMO_KEY)
            capture = proxy.capture_file
        with steps.step(f"replaying {n} exchanges to " + ", ".join(CANDIDATES)):
            config = out / "wirediff-demo.yaml"
            config.write_text(
                yaml.safe_dump(
                    {
                        "targets": [
                            {"label": c, "url": urls[c] + "/v1", "model_map": {MODEL: MODEL_MAP[c]}}
                            for c in CANDIDATES
                        ]
                    },
                    sort_keys=False,
                )
            )
            quiet = io.StringIO()  # the demo prints its own summary
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                code = main_replay([str(capture), "--config", str(config), "--concurrency", "4"])
            _finished("replay", code, quiet)
    replays = [capture_dir / f"demo.{c}.jsonl" for c in CANDIDATES]
    paths = {
        "report": out / "report.html",
        "summary": out / "summary.json",
        "findings": out / "findings.jsonl",
        "divergences": out / "divergences.csv",
    }
    quiet = io.StringIO()
    with (
        steps.step("analysing and rendering the report"),
        contextlib.redirect_stdout(quiet),
        contextlib.redirect_stderr(quiet),
    ):
        args = [str(capture), *map(str, replays), "-o", str(paths["report"])]
        args += ["--json", str(paths["summary"]), "--findings", str(paths["findings"])]
        args += ["--csv", str(paths["divergences"])]
        _finished("report", code=main_report(args), said=quiet)
    return {"capture": capture, "replays": replays, "exchanges": n, **paths}


def _finished(step: str, code: int, said: io.StringIO) -> None:
    """Raise for a step that did not finish: Ctrl-C as Ctrl-C, any other end with its words.

    A step interrupted ends the demo as interrupted, not as failed: running it again starts
    afresh."""
    if code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    if code != EXIT_OK:
        raise RuntimeError(f"{step} failed ({code}): {said.getvalue().strip()[-LOG_TAIL:]}")


def terminal_summary(summary: dict[str, Any], lines_of: Path) -> str:
    """Compose the terminal summary: the bottom line, the verdicts, then the diagnosis codes.

    The drop-in verdicts take one line per backend and endpoint family, with the top reason;
    the codes are those of the diagnoses among the lines of `--findings`, `lines_of`. The
    baseline is listed too: it is validated like the others."""
    from wirediff.reports.bottom_line import cell_name

    lines = [f"  {sentence}" for sentence in summary.get("bottom_line", [])]
    for v in summary.get("verdicts", []):
        name = cell_name(v["family"], v["transport"])
        reason = clip(v["reasons"][0], REASON) if v.get("reasons") else ""
        head = f"  {v['label']:<9} {name:<18} {v['verdict']}"
        lines.append(f"{head} — {reason}" if reason else head)
    codes: dict[str, int] = {}
    with lines_of.open(encoding="utf-8") as fh:
        for text in fh:
            code = json.loads(text).get("code")
            if code is not None:
                codes[code] = codes.get(code, 0) + 1
    if codes:
        lines.append("  diagnoses: " + ", ".join(f"{c} x{n}" for c, n in sorted(codes.items())))
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    import openai

    t0 = time.monotonic()
    try:
        result = run_demo(Path(args.out))
    except (RuntimeError, TimeoutError, openai.APIError) as e:
        print(f"wirediff: error: demo failed: {e}", file=sys.stderr)
        return EXIT_ERROR
    summary = json.loads(Path(result["summary"]).read_text(encoding="utf-8"))
    print(
        f"captured {result['exchanges']} exchanges against the openai stand-in, "
        f"replayed to {', '.join(CANDIDATES)} in {time.monotonic() - t0:.1f}s"
    )
    print("the bottom line and the drop-in verdicts (the report opens with them):")
    print(terminal_summary(summary, Path(result["findings"])))
    print(f"capture:     {result['capture']}")
    print(f"summary:     {result['summary']}")
    print(f"findings:    {result['findings']}")
    print(f"divergences: {result['divergences']}")
    size = Path(result["report"]).stat().st_size
    print(f"report:      {result['report']} ({size / 1000:,.0f} KB)")
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole loop on local stand-in backends",
        epilog=exit_codes(
            {
                EXIT_OK: "the demo ran: report, summary, findings and divergences written",
                EXIT_ERROR: "a step failed (one line says which and why)",
            }
        ),
    )
    p.add_argument(
        "--out",
        type=folder,
        default="wirediff-demo",
        help="output directory (default: wirediff-demo)",
    )
    p.set_defaults(func=cmd_demo)
