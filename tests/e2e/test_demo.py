"""`wirediff demo` end to end, as the README's first command runs it.

`tests/fixtures/demo_summary.json` is the demo's `summary.json` with everything that changes
from run to run masked (see `masked`): what users see must not change unnoticed. It was
first written from the demo of commit 0dc39c2, before the move to one `wirediff` namespace.
When the demo's output changes on purpose, rewrite it from the current tree with

    .venv/bin/python -m tests.e2e.test_demo

then read `git diff tests/fixtures/demo_summary.json` and commit it with the change.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import ROOT
from wirediff.analysis.comparison.clients.node import NODE_SDK_ENV
from wirediff.cli.demo import CANDIDATES, DEMO_KEY
from wirediff.record.store import load_records
from wirediff.reports.render import SCHEMA_PATH

pytestmark = pytest.mark.e2e
WIREDIFF = str(Path(sys.executable).with_name("wirediff"))
GOLDEN = ROOT / "tests" / "fixtures" / "demo_summary.json"

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
RESPONSE_ID = re.compile(r"resp_[0-9a-f]{32}")
EVENT_NUMBER = re.compile(r"event #\d+")
# Lists whose order follows the random record ids, or the order in which the stand-ins
# answered the replays sent side by side: compared as sorted multisets.
UNORDERED = frozenset({"divergences", "findings", "diagnoses", "examples", "exchange_ids", "also"})


def masked(value: Any, key: str = "", in_findings: bool = False) -> Any:
    """`summary.json` without what differs between two runs of the same demo: the time it
    was written, the Python version the client ran on, latency figures (their counts
    stay), record and response ids, the order that follows those ids, and in a finding the
    event number of whichever occurrence happened to come first."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if k == "generated_at":
                out[k] = "<time>"
            elif k == "runtime_version":  # the Python running the demo
                out[k] = "<runtime version>"
            elif k == "latency":
                out[k] = {
                    m: {s: x if s == "n" else "<ms>" for s, x in st.items()} for m, st in v.items()
                }
            else:
                out[k] = masked(v, k, in_findings or k == "findings")
        return out
    if isinstance(value, list):
        items = [masked(v, key, in_findings) for v in value]
        if key in UNORDERED:
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return items
    if isinstance(value, str):
        value = RESPONSE_ID.sub("resp_<id>", UUID.sub("<id>", value))
        return EVENT_NUMBER.sub("event #<n>", value) if in_findings else value
    return value


def run_demo(out: Path) -> subprocess.CompletedProcess[str]:
    """The demo, measured by openai-python alone, whatever clients this machine has: the
    golden file is the same everywhere."""
    return subprocess.run(
        [WIREDIFF, "demo", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, NODE_SDK_ENV: "off"},
    )


def dumps(summary: Any) -> str:
    return json.dumps(summary, indent=1, ensure_ascii=False) + "\n"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("demo") / "demo"
    return out, run_demo(out)


def test_demo_writes_the_report_and_leaks_no_key(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, proc = demo
    assert proc.returncode == 0, proc.stderr
    size = (out / "report.html").stat().st_size
    assert f"report:      {out / 'report.html'} ({size / 1000:,.0f} KB)" in proc.stdout
    assert size < 300_000, f"the demo's report grew to {size:,} bytes"
    readme = (ROOT / "README.md").read_text()
    said = re.search(
        r"The demo's report \((\d+) exchanges, (\d+) distinct findings\) is about (\d+) KB",
        " ".join(readme.split()),
    )
    summary = json.loads((out / "summary.json").read_text())
    assert said, "the README no longer gives the demo's figures"
    totals = summary["totals"]
    assert (int(said[1]), int(said[2])) == (totals["exchanges"], totals["findings"]), said[0]
    assert abs(int(said[3]) - size / 1000) <= 0.03 * size / 1000, f"the README says {said[0]}"
    # the README's bottom-line example is the demo's own
    shown = [line for line in readme.splitlines() if line.startswith(("ollama can", "vllm can"))]
    assert shown and set(shown) <= set(summary["bottom_line"]), shown
    assert "[4/4] analysing and rendering the report" in proc.stderr

    # the captures alone, so `wirediff report DIR/captures/*` reads them
    assert sorted(f.name for f in (out / "captures").iterdir()) == [
        "demo.jsonl",
        *(f"demo.{label}.jsonl" for label in sorted(CANDIDATES)),
    ]
    original = load_records([out / "captures" / "demo.jsonl"])
    assert len(original) >= 9 and all(r["label"] == "openai" for r in original)
    ids = {r["id"] for r in original}
    for label in CANDIDATES:
        replays = load_records([out / "captures" / f"demo.{label}.jsonl"])
        assert {r["replay_of"] for r in replays} == ids
    verdicts = {b["label"]: b["verdicts"] for b in summary["backends"]}
    assert verdicts["openai"] == {"chat.completions": "compatible", "responses": "compatible"}
    assert verdicts["lmstudio"]["responses"] == "unsupported"
    # the bottom line, then the drop-in verdicts, one line per backend and family, as the
    # report opens
    printed = proc.stdout.split("drop-in verdicts (the report opens with them):\n", 1)[1]
    sentences = len(summary["bottom_line"])
    assert [line.strip() for line in printed.splitlines()[:sentences]] == summary["bottom_line"]
    lines = printed.splitlines()[sentences : sentences + len(summary["verdicts"])]
    assert [line.split()[:2] for line in lines] == [
        [v["label"], v["family"]] for v in summary["verdicts"]
    ]
    assert lines[0].split()[2] == "compatible"
    assert "lmstudio  responses          unsupported — POST /v1/responses: not here" in printed
    report = (out / "report.html").read_text()
    assert report.index('id="verdicts"') < report.index('id="summary"')
    assert "OpenAI SDK python" in report  # the client that produced the traffic
    schema = json.loads(SCHEMA_PATH.read_text())
    assert not list(jsonschema.Draft202012Validator(schema).iter_errors(summary))
    found = [json.loads(text) for text in (out / "findings.jsonl").read_text().splitlines()]
    assert {d["code"] for d in found if "code" in d} >= {
        "soft_error_200",
        "endpoint_not_implemented",
    }

    for path in out.rglob("*"):
        if path.is_file():
            assert DEMO_KEY.encode() not in path.read_bytes(), f"demo key leaked into {path}"


def test_demo_summary_matches_the_golden_file(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, proc = demo
    assert proc.returncode == 0, proc.stderr
    got = dumps(masked(json.loads((out / "summary.json").read_text())))
    want = GOLDEN.read_text()
    diff = "".join(
        difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(GOLDEN), "demo")
    )
    assert got == want, (
        f"the demo's summary changed (to accept it, see this module):\n{diff[:6000]}"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        done = run_demo(Path(tmp) / "demo")
        if done.returncode != 0:
            sys.exit(done.stderr)
        GOLDEN.write_text(
            dumps(masked(json.loads((Path(tmp) / "demo" / "summary.json").read_text())))
        )
    print(f"wrote {GOLDEN}")


@pytest.mark.parametrize("step", ["replay", "report"])
def test_ctrl_c_in_a_step_ends_the_demo_as_interrupted(
    step: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C while the demo replays or reports reaches that command, which exits 130: so
    does the demo, as its exit codes say, and never as a failed step to run again."""
    from wirediff.cli import main, replay
    from wirediff.engine.run import Run

    target: object = replay if step == "replay" else Run

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(target, "replay_all" if step == "replay" else "report", interrupted)
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 130
    err = capsys.readouterr().err
    assert err.endswith(" …\nwirediff: interrupted\n"), err
    assert "failed" not in err and "resume" not in err
