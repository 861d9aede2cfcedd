"""The README's probe example, run as it stands: its command against the stand-in its first
line starts (on a free port in place of 8000), printing what the README says it prints."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.readme_blocks import readme_block, readme_output
from wirediff.backends.standin import standin
from wirediff.probe.features import load_probe

pytestmark = pytest.mark.e2e

README_URL = "http://127.0.0.1:8000/v1"
WIREDIFF = str(Path(sys.executable).with_name("wirediff"))


def test_the_readme_probe_example(tmp_path: Path) -> None:
    lines = [ln for ln in readme_block("probe").splitlines() if ln and not ln.startswith("#")]
    [serve, run] = lines
    serve_argv = [a for a in shlex.split(serve, comments=True) if a != "&"]
    assert serve_argv[:2] == ["wirediff", "stand-in"], serve
    assert serve_argv[3:] == ["--port", "8000"], serve
    argv = shlex.split(run, comments=True)
    assert argv[:3] == ["wirediff", "probe", README_URL], run
    with standin(serve_argv[2]) as url:
        done = subprocess.run(
            [WIREDIFF, "probe", url + "/v1", *argv[3:]],
            capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr  # the example's server lacks two features
    assert done.stdout.replace(url + "/v1", README_URL) == readme_output("probe")
    progress = [ln for ln in done.stderr.splitlines() if ln.startswith("probe: [")]
    assert len(progress) == len(load_probe().features)
