"""`wirediff demo` end to end, as the README's first command runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from wirediff.cli.demo import CANDIDATES, DEMO_KEY
from wirediff.record.store import load_records

pytestmark = pytest.mark.e2e
WIREDIFF = str(Path(sys.executable).with_name("wirediff"))


def test_demo_writes_the_report_and_leaks_no_key(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run(
        [WIREDIFF, "demo", "--out", str(out)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert f"report:      {out / 'report.html'}" in proc.stdout
    assert "[4/4] analysing and rendering the report" in proc.stderr

    original = load_records([out / "captures" / "demo.jsonl"])
    assert len(original) >= 9 and all(r["label"] == "openai" for r in original)
    ids = {r["id"] for r in original}
    for label in CANDIDATES:
        replays = load_records([out / "captures" / f"demo.{label}.jsonl"])
        assert {r["replay_of"] for r in replays} == ids
    summary = json.loads((out / "summary.json").read_text())
    verdicts = {b["label"]: b["verdicts"] for b in summary["backends"]}
    assert verdicts["openai"] == {"chat.completions": "pass", "responses": "pass"}
    assert verdicts["lmstudio"]["responses"] == "unsupported"
    assert {d["code"] for d in summary["diagnoses"]} >= {
        "soft_error_200",
        "endpoint_not_implemented",
    }

    for path in out.rglob("*"):
        if path.is_file():
            assert DEMO_KEY.encode() not in path.read_bytes(), f"demo key leaked into {path}"
