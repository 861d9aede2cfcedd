"""`wirediff demo`: the whole loop on embedded defaults, in well under a minute.

Local stand-ins play OpenAI (the baseline), LM Studio, Ollama and vLLM; the real openai SDK
is captured through `mitmdump -s addons/capture.py`; the session is replayed to the others.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai

from analysis.mitm import CaptureProxy

DEMO_KEY = "sk-demo-wirediff-0000000000000000"
BASELINE = "openai"
CANDIDATES = ("lmstudio", "ollama", "vllm")
MODEL = "gpt-4o-mini"
WEATHER_CHAT = {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}  # fmt: skip
WEATHER_RESP = {"type": "function", "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip


def drive_sdk(base_url: str, api_key: str) -> int:
    """Typical calls of an app moving from Chat Completions to Responses; returns the count."""
    # Typed as Any: the SDK's overloads are for apps; this script also sends odd shapes.
    client: Any = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=30)
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
            messages=[*ask, first.choices[0].message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 18})}],
            tools=[WEATHER_CHAT],
        )  # fmt: skip
    r1 = client.responses.create(model=MODEL, input="Say hello.")
    with client.responses.stream(model=MODEL, input="Tell me a short story.") as stream:
        stream.get_final_response()
    client.responses.create(model=MODEL, input="And in French?", previous_response_id=r1.id)
    fc = client.responses.create(model=MODEL, input="Weather in Paris?", tools=[WEATHER_RESP])
    calls = [o for o in fc.output if o.type == "function_call"]
    n = 8
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
    """A one-line-per-step progress display with elapsed time."""

    def __init__(self, total: int) -> None:
        self.total, self.n, self.t0 = total, 0, time.monotonic()

    @contextlib.contextmanager
    def step(self, what: str) -> Iterator[None]:
        self.n += 1
        print(f"[{self.n}/{self.total}] {what} …", end="", flush=True, file=sys.stderr)
        t = time.monotonic()
        yield
        print(f" done ({time.monotonic() - t:.1f}s)", file=sys.stderr)


def run_demo(out: Path) -> dict[str, Any]:
    from backends.standin import standin

    out.mkdir(parents=True, exist_ok=True)
    capture_dir = out / "captures"
    steps = Steps(2)
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
    return {"capture": str(capture), "exchanges": n}


def cmd_demo(args: argparse.Namespace) -> int:
    result = run_demo(Path(args.out))
    print(f"captured {result['exchanges']} exchanges → {result['capture']}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="the whole loop on local stand-in backends")
    p.add_argument(
        "--out", default="wirediff-demo", help="output directory (default: wirediff-demo)"
    )
    p.set_defaults(func=cmd_demo)
