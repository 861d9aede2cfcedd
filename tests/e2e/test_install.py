"""A plain `pip install .` (not editable) installs one import name, `wirediff`, and its addon
records through a real mitmdump: the layout is what users get, not only what a checkout has."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, wait_for, wait_port
from wirediff.backends.standin import standin
from wirediff.cli.netutil import free_port

pytestmark = pytest.mark.e2e


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{cmd}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A wheel built from a copy of the tracked files (building writes into its source tree),
    installed with `--no-deps` into a fresh venv that borrows this environment's dependencies
    (a .pth file; the editable install's own .pth files are not read from there, so only the
    wheel provides `wirediff`)."""
    tmp = tmp_path_factory.mktemp("install")
    source = tmp / "source"
    tracked = _run("git", "ls-files", "-z", cwd=ROOT).split("\0")
    for name in filter(None, tracked):
        src, dst = ROOT / name, source / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, dst)
    _run(
        sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", source, cwd=tmp
    )
    wheel = next((tmp / "dist").glob("wirediff-*.whl"))
    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    py = venv / "bin" / "python"
    purelib = _run(py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp)
    deps = [p for p in site.getsitepackages() if p.endswith("site-packages")]
    Path(purelib.strip(), "deps.pth").write_text("\n".join(deps) + "\n")
    target = purelib.strip()
    _run(
        sys.executable,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--target",
        target,
        wheel,
        cwd=tmp,
    )
    return wheel, py


def test_the_wheel_holds_one_top_level_package_and_every_data_file(
    installed: tuple[Path, Path],
) -> None:
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {n.split("/", 1)[0] for n in names if ".dist-info/" not in n} == {"wirediff"}
    package = ROOT / "wirediff"
    data = {  # through the links to analysis/, reports/, backends/, addons/
        f"wirediff/{Path(d).relative_to(package) / f}".replace("/./", "/")
        for d, dirs, files in os.walk(package, followlinks=True)
        if "__pycache__" not in Path(d).parts
        for f in files
        if not f.endswith((".py", ".pyc"))
    }
    assert "wirediff/analysis/comparison/openapi/overrides.yaml" in data
    assert data and data <= names, sorted(data - names)


def test_only_wirediff_imports_and_the_version_prints(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _, py = installed
    code = (
        "import importlib.metadata as m, importlib.util as u, json, wirediff\n"
        "files = m.files('wirediff')\n"
        "print(json.dumps({'tops': sorted({f.parts[0] for f in files}),\n"
        "  'analysis': u.find_spec('analysis') is not None,\n"
        "  'reports': u.find_spec('reports') is not None,\n"
        "  'file': wirediff.__file__}))\n"
    )
    got = json.loads(_run(py, "-c", code, cwd=tmp_path))
    # `..` holds the console script (bin/wirediff), outside site-packages
    assert [t for t in got["tops"] if not t.endswith(".dist-info") and t != ".."] == ["wirediff"]
    assert not got["analysis"] and not got["reports"]
    assert str(ROOT) not in got["file"]
    out = _run(py, "-m", "wirediff", "--version", cwd=tmp_path)
    assert out.strip() == "wirediff 0.1.0"


def test_mitmdump_records_with_the_installed_addon(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _, py = installed
    addon = _run(py, "-m", "wirediff", "addon-path", cwd=tmp_path).strip()
    assert addon.endswith("wirediff/addons/capture.py") and str(ROOT) not in addon
    shadow = Path(_run(py, "-m", "wirediff", "addon-path", "shadow", cwd=tmp_path).strip())
    assert shadow.name == "shadow.py" and shadow.parent == Path(addon).parent and shadow.is_file()
    port = free_port()
    with standin("openai") as upstream:
        mitmdump = "from mitmproxy.tools.main import mitmdump; mitmdump()"
        options = {"confdir": tmp_path / "conf", "capture_dir": tmp_path / "cap"}
        proc = subprocess.Popen(
            [
                py,
                "-c",
                mitmdump,
                "-q",
                "--listen-host",
                "127.0.0.1",
                "-s",
                addon,
                "--mode",
                f"reverse:{upstream}@{port}",
                "--set",
                "capture_session=s",
                *(a for k, v in options.items() for a in ("--set", f"{k}={v}")),
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": ""},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_port(port, 30, proc)
            r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10)
            assert r.status_code == 200
            capture = tmp_path / "cap" / "s.jsonl"
            line = wait_for(
                lambda: capture.exists() and capture.read_text().strip(), 10, "a record"
            )
        finally:
            proc.terminate()
            proc.wait(10)
    rec = json.loads(line.splitlines()[0])
    assert rec["format"] == "wirediff/1" and rec["request"]["path"] == "/v1/models"
    assert rec["response"]["status"] == 200
    # the installed analysis: the OpenAPI document and its overrides, the SDK harness, the
    # report's templates and schema all come from the wheel
    out = _run(py, "-m", "wirediff", "report", capture, "-o", tmp_path / "r.html",
               "--json", tmp_path / "s.json", cwd=tmp_path)  # fmt: skip
    assert out.split() == [str(tmp_path / "r.html"), str(tmp_path / "s.json")]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["totals"]["exchanges"] == 1
