"""The probe's client traffic: each client of the clients tier runs its workload
(`tests/clients/probe/`) through `wirediff capture` in front of the `openai` stand-in.

`scripts/regen-probe.py` bundles these captures as the probe session
(`wirediff/probe/data/`); `tests/clients/test_probe_needs.py` captures them again and checks
that each client still needs what `clients.yaml` says.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.clients.conftest import client_dir, client_env, run_client
from tests.conftest import WirediffCapture
from wirediff._types import Record
from wirediff.backends.standin import standin
from wirediff.probe.features import Feature, matches
from wirediff.replay.plan import make_plan

HERE = Path(__file__).resolve().parent
WORKLOADS = HERE / "probe"
MODEL = "gpt-4o-mini"
"""The model every workload asks for (the `openai` stand-in serves it)."""
KEY = "sk-wirediff-probe-REGEN-CANARY-5b1e"
"""The only key the stand-in accepts while the workloads run (the bad-key call sends another)."""


@dataclass(frozen=True)
class Workload:
    """One client: its name in `clients.yaml`, its directory under `.clients/` (None: this
    project's own venv) and how to run its workload there."""

    name: str
    install: str | None
    argv: Callable[[Path, Path], list[str]]
    """`(client dir, work dir) -> argv`."""
    setup: Callable[[Path, Path, str], dict[str, str]] | None = None
    """`(client dir, work dir, proxy base URL) -> extra environment` (files it needs)."""


def _python(script: str) -> Callable[[Path, Path], list[str]]:
    def argv(client: Path, work: Path) -> list[str]:
        exe = Path(sys.executable) if client == Path() else client / "bin" / "python"
        return [str(exe), str(WORKLOADS / script)]

    return argv


def _node(script: str) -> Callable[[Path, Path], list[str]]:
    def argv(client: Path, work: Path) -> list[str]:
        app = work / script
        app.write_text((WORKLOADS / script).read_text(encoding="utf-8"), encoding="utf-8")
        link = work / "node_modules"
        if not link.exists():
            link.symlink_to(client / "node_modules")
        return ["node", str(app)]

    return argv


CODEX_CONFIG = """model = "{model}"
model_provider = "wirediff"
check_for_update_on_startup = false

[model_providers.wirediff]
name = "wirediff probe"
base_url = "{base}"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false

[features]
plugins = false
unbounded_connection_retries = false
"""


def _codex_setup(client: Path, work: Path, base: str) -> dict[str, str]:
    home = work / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(CODEX_CONFIG.format(model=MODEL, base=base))
    return {"CODEX_HOME": str(home), "TERM": "dumb"}


def _codex(client: Path, work: Path) -> list[str]:
    exe = client / "node_modules" / ".bin" / "codex"
    return [str(exe), "exec", "--skip-git-repo-check", "What is in this directory?"]


WORKLOAD_LIST = (
    Workload("openai-python", None, _python("openai_python.py")),
    Workload("openai-python-websocket", None, _python("openai_python_websocket.py")),
    Workload("openai-node", "node", _node("openai_node.mjs")),
    Workload("codex", "codex", _codex, _codex_setup),
    Workload("langchain", "langchain", _python("langchain_app.py")),
    Workload("langchain-responses", "langchain", _python("langchain_responses_app.py")),
    Workload("llamaindex", "llamaindex", _python("llamaindex_app.py")),
    Workload("llamaindex-responses", "llamaindex", _python("llamaindex_responses_app.py")),
    Workload("openai-agents", "agents", _python("agents_app.py")),
    Workload("vercel-ai", "vercel", _node("vercel_app.mjs")),
    Workload(
        "vercel-ai-chat", "vercel", _node("vercel_app.mjs"), lambda *_: {"VERCEL_API": "chat"}
    ),
)
"""One per way of using a client: as it comes, and each mode an app opts into (its own
readiness row, so that a server without the Responses API is not said to stop LangChain)."""
WORKLOADS_BY_NAME = {w.name: w for w in WORKLOAD_LIST}


@dataclass
class Captured:
    name: str
    records: list[Record]
    printed: dict[str, Any]


@contextmanager
def reference() -> Iterator[str]:
    """The `openai` stand-in the workloads run against (it checks the key)."""
    with standin("openai", api_key=KEY) as url:
        yield url


def capture_workload(
    w: Workload,
    client: Path,
    upstream: str,
    work: Path,
    run: Callable[[list[str], Path, dict[str, str]], str],
) -> Captured:
    """Run one workload through a fresh `wirediff capture` (session = the client's name);
    `run(argv, cwd, env)` runs the client to its end and returns its stdout."""
    if (work / "captures").exists():
        shutil.rmtree(work / "captures")  # a fresh session, not appended to an old one
    work.mkdir(parents=True, exist_ok=True)
    argv = ["--to", upstream + "/v1", "--port", "0", "--session", w.name]
    argv += ["--label", "openai", "--dir", str(work / "captures")]
    cap = WirediffCapture.start(argv, work / "capture.out", client_env())
    try:
        extra = w.setup(client, work, cap.base_url) if w.setup else {}
        cmd = w.argv(client, work)
        printed = run(
            cmd,
            work,
            client_env(OPENAI_API_KEY=KEY, BASE=cap.base_url, MODEL=MODEL, **extra),
        )
        records = cap.stop()
    finally:
        cap.kill()
    last = (printed.strip().splitlines() or [""])[-1]
    try:
        said = json.loads(last)
    except ValueError:  # Codex prints its answer, not JSON
        said = {"stdout": printed.strip()}
    return Captured(w.name, records, said if isinstance(said, dict) else {"stdout": said})


WORKLOAD_NEEDS = {
    "openai-node": "node_modules/openai/package.json",
    "codex": "node_modules/.bin/codex",
}
"""The file that shows a workload's client installed (else its directory)."""


def capture_client_workload(w: Workload, work: Path) -> tuple[Path, Captured]:
    """A client's workload through `wirediff capture` in front of the `openai` stand-in:
    its directory under `.clients/` (this project's venv: `Path()`) and what it sent."""
    client = Path() if w.install is None else client_dir(w.install, WORKLOAD_NEEDS.get(w.name, "."))

    def run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
        return run_client(argv, cwd=cwd, env=env)

    with reference() as url:
        return client, capture_workload(w, client, url, work, run)


def with_deps(rec: Record, records: list[Record]) -> list[Record]:
    """`rec` and the earlier exchanges of its capture it continues, in capture order."""
    plan = make_plan(records)
    want, stack = set(), [str(rec["id"])]
    while stack:
        rid = stack.pop()
        if rid not in want:
            want.add(rid)
            stack.extend(plan.by_id[rid].deps)
    return [r for r in records if str(r["id"]) in want]


def chosen(feature: Feature, captured: list[Captured]) -> tuple[str, list[Record]] | None:
    """What the bundle takes for `feature` (one not `all: true`): the first matching request
    of the first client in its `from:` list that sent one, with the requests it continues."""
    by_name = {c.name: c for c in captured}
    for name in feature.prefer:
        if name not in by_name:
            continue
        records = by_name[name].records
        hits = [r for r in records if matches(feature.match, r)]
        if hits:
            return name, with_deps(hits[0], records)
    return None
