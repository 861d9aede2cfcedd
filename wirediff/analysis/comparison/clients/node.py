"""Drive the npm `openai` package on recorded answers, in one Node process per analysis.

`node_sdk` finds the SDK in `$WIREDIFF_NODE_SDK`, a directory holding `node_modules/openai` or
`off`; else in the clients tier's install `$WIREDIFF_CLIENTS_DIR/node`; else in `.clients/node`
in the current directory or in the checkout wirediff runs from. It needs `node` on PATH too.
Without either, nothing is measured and `status()` says why, for the report.

The process, `openai_node.mjs`, starts on first use in each process that measures, so a forked
worker starts its own, and ends when this one does, at the latest when its stdin closes.
`measure` sends it answers in batches, writing all jobs, then reading all replies. Each reply
lists the calls an app makes, such as `chat.completions.create()`, `.stream()`, `.runTools()`,
`responses.create()` and `.stream()`, and what they returned, raised or failed with. The values
are judged here as openai-python's are, by `python.see_calls` and `asked`, under keys prefixed
`node:`.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO, Any

from wirediff.analysis.comparison.clients.asked import asked, structured_kind
from wirediff.analysis.comparison.clients.observations import (
    Failure,
    Observations,
    Served,
    said,
)
from wirediff.analysis.comparison.clients.python import kind_of, see_calls

__all__ = ["NODE_SDK_ENV", "PREFIX", "Job", "NodeSdk", "measure", "node_sdk", "status"]

NODE_SDK_ENV = "WIREDIFF_NODE_SDK"
"""A directory holding `node_modules/openai`, or `off` (no Node measurement)."""
CLIENTS_ENV = "WIREDIFF_CLIENTS_DIR"
PREFIX = "node:"
"""Observation keys of the Node client start with this."""
SCRIPT = Path(__file__).with_name("openai_node.mjs")
ROUTES = {("POST", "/v1/chat/completions"): "chat", ("POST", "/v1/responses"): "responses"}
_CHECKOUT = Path(__file__).resolve().parents[4]
REPLY_SECONDS = 120.0
"""How long one reply may take before the Node process is given up on.

A call that never returns is a bug of the client's, not the answer's; openai-python alone
then measures."""


@dataclass(frozen=True, slots=True)
class NodeSdk:
    """Locate a Node SDK that can be run: the `node` binary, the directory, the package version."""

    node: str
    directory: Path
    version: str

    @property
    def client(self) -> str:
        return f"openai-node {self.version}"


@dataclass(frozen=True, slots=True)
class Job:
    """Hold one answer for Node: the route, the request body and the answer's bytes."""

    route: tuple[str, str]
    body: dict[str, Any]
    answer: Served


def _candidates() -> list[Path]:
    given = os.environ.get(NODE_SDK_ENV, "")
    if given:
        return [Path(given)]
    out = []
    clients = os.environ.get(CLIENTS_ENV, "")
    if clients:
        out.append(Path(clients) / "node")
    for root in (Path.cwd(), _CHECKOUT):
        if root / ".clients" / "node" not in out:
            out.append(root / ".clients" / "node")
    return out


@lru_cache(maxsize=8)
def _find(given: str, clients: str, cwd: str) -> NodeSdk | str:
    if given.lower() == "off":
        return f"turned off ({NODE_SDK_ENV}=off)"
    node = shutil.which("node")
    if node is None:
        return "no `node` on PATH"
    for directory in _candidates():
        package = directory / "node_modules" / "openai" / "package.json"
        if package.is_file():
            try:
                version = str(json.loads(package.read_text(encoding="utf-8"))["version"])
            except (ValueError, KeyError, OSError):
                continue
            return NodeSdk(node, directory, version)
    if given:  # the user's own path: named back
        return f"no npm `openai` package in {given} ({NODE_SDK_ENV})"
    # this machine's paths stay out of a report that may be shared
    return f"no npm `openai` package found (set {NODE_SDK_ENV} to a folder holding node_modules/openai)"


def node_sdk() -> NodeSdk | str:
    """Find the Node SDK to measure with, or say why there is none."""
    return _find(os.environ.get(NODE_SDK_ENV, ""), os.environ.get(CLIENTS_ENV, ""), os.getcwd())


def status() -> str:
    """Say in one line for the report which Node SDK measured answers, or why none did."""
    sdk = node_sdk()
    if isinstance(sdk, str):
        return f"openai-node: not measured ({sdk})"
    broken = _process.broken
    return f"{sdk.client}: not measured ({broken})" if broken else f"{sdk.client} (Node)"


class _Process:
    """Run the one Node process, started on first use; `broken` says why it stopped working."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.sdk: NodeSdk | None = None
        self.lock = threading.Lock()
        self.broken = ""
        self.next_id = 0
        self.owner = os.getpid()

    def start(self, sdk: NodeSdk) -> subprocess.Popen[bytes]:
        if os.getpid() != self.owner:  # a forked worker: the parent's pipes are not its own
            self.proc, self.owner, self.broken = None, os.getpid(), ""
        if self.proc is not None and self.sdk == sdk and self.proc.poll() is None:
            return self.proc
        self.stop()
        self.proc = subprocess.Popen(
            [sdk.node, str(SCRIPT), str(sdk.directory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.sdk = sdk
        return self.proc

    def stop(self, kill: bool = False) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if kill:
            proc.kill()
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


_process = _Process()
atexit.register(_process.stop)


def _line(job: Job, number: int) -> bytes:
    answer = job.answer
    doc = {
        "id": number,
        "route": ROUTES[job.route],
        "body": job.body,
        "status": answer.status,
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in answer.headers],
        "content": base64.b64encode(answer.content).decode("ascii"),
        "cut": answer.cut,
    }
    return json.dumps(doc, default=str).encode() + b"\n"


def _write(stream: IO[bytes], lines: list[bytes]) -> None:
    try:
        for line in lines:
            stream.write(line)
        stream.flush()
    except OSError:
        pass  # the process died: the reader sees it end


def measure(jobs: Sequence[Job]) -> list[Observations | None]:
    """Observe what the Node SDK's calls make of each job's answer.

    An entry is None where the SDK could not run: no SDK, a route it has no probe for, or the
    process gone."""
    out: list[Observations | None] = [None] * len(jobs)
    sdk = node_sdk()
    todo = [
        i for i, job in enumerate(jobs) if job.route in ROUTES and 200 <= job.answer.status < 600
    ]
    if isinstance(sdk, str) or not todo:
        return out
    with _process.lock:
        if _process.broken:
            return out
        proc = _process.start(sdk)
        assert proc.stdin is not None and proc.stdout is not None
        numbers = {}
        lines = []
        for i in todo:
            _process.next_id += 1
            numbers[_process.next_id] = i
            lines.append(_line(jobs[i], _process.next_id))
        writer = threading.Thread(target=_write, args=(proc.stdin, lines), daemon=True)
        writer.start()  # replies are read meanwhile: neither pipe fills while the other waits
        replies: queue.Queue[bytes] = queue.Queue()
        reader = threading.Thread(target=_read, args=(proc.stdout, len(todo), replies), daemon=True)
        reader.start()
        for _ in todo:
            try:
                raw = replies.get(timeout=REPLY_SECONDS)
            except queue.Empty:
                _process.broken = f"no answer from the Node process in {REPLY_SECONDS:.0f} s"
                _process.stop(kill=True)
                break
            if not raw:
                _process.broken = f"the Node process ended (exit {proc.poll()})"
                break
            reply = json.loads(raw)
            index = numbers.get(reply.get("id"))
            if index is not None:
                out[index] = _observe(reply.get("calls") or [], jobs[index], sdk.client)
        writer.join()
    return out


def _read(stream: IO[bytes], count: int, into: queue.Queue[bytes]) -> None:
    for _ in range(count):
        line = stream.readline()
        into.put(line)
        if not line:
            return


def _observe(calls: list[dict[str, Any]], job: Job, client: str) -> Observations | None:
    ask = asked(job.body)
    words = said(job.answer)
    p = Observations()
    for c in calls:
        probe = str(c.get("probe", ""))
        p.current = probe
        if "raised" in c:
            raised = c["raised"]
            p.see_first(f"{PREFIX}raises", str(raised.get("class")))
            carries = words and words in str(raised.get("message", ""))
            p.see_first(
                f"{PREFIX}error.message", "the server's words" if carries else "no server words"
            )
        elif "failure" in c:
            failure = c["failure"]
            error = str(failure.get("error", ""))
            if error.startswith("harness:"):
                return None
            p.failures.append(Failure(probe, error, str(failure.get("where", "")), client))
        else:
            _returned(p, probe, c.get("returned") or {}, ask)
    if not 200 <= job.answer.status < 300:
        p.see_first(f"{PREFIX}raises", "nothing")
    return p


def _returned(p: Observations, probe: str, r: dict[str, Any], ask: Any) -> None:
    prefix = f"{PREFIX}final." if probe.endswith(".stream()") else PREFIX
    if probe.endswith("runTools()"):
        refused = [str(x) for x in r.get("refused") or []]
        p.see(f"{PREFIX}runTools", "tools called" if r.get("called") else "no tool called")
        if refused:
            p.see(f"{PREFIX}runTools.refused", refused[0])
        return
    if "choices" in r:
        p.see(f"{prefix}choices", str(r["choices"]))
        return
    if "output" in r:
        p.see(f"{prefix}output_text", kind_of(r.get("output_text")))
        p.see(f"{prefix}status", str(r.get("status")))
        text = r.get("output_text")
    else:
        p.see(f"{prefix}content", kind_of(r.get("content")))
        p.see(f"{prefix}finish_reason", str(r.get("finish_reason")))
        p.see(f"{prefix}reasoning_content", kind_of(r.get("reasoning_content")))
        text = r.get("content")
    calls = [tuple(c) for c in r.get("tool_calls") or [] if isinstance(c, list) and len(c) == 3]
    see_calls(p, prefix, calls, ask)  # type: ignore[arg-type]
    verdict = structured_kind(text, ask)
    if verdict is not None:
        p.see(f"{prefix}structured", verdict)
    p.see(f"{prefix}usage", str(r.get("usage")))
