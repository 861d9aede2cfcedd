"""A plain `pip install .` (not editable) installs one import name, `wirediff`, and its addon
records through a real mitmdump; the sdist is a whole checkout, so the README's commands
(`mitmdump -s addons/capture.py`, `make demo`, `make test`) find every file they use in an
unpacked one. The layout is what users get, not only what a checkout has."""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import tarfile
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


def _tracked() -> list[str]:
    return [n for n in _run("git", "ls-files", "-z", cwd=ROOT).split("\0") if n]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel and an sdist built from a copy of the tracked files (building writes into its
    source tree)."""
    tmp = tmp_path_factory.mktemp("dist")
    source = tmp / "source"
    for name in _tracked():
        dst = source / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dst)
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", source,
         cwd=tmp)  # fmt: skip
    code = f"from setuptools import build_meta as b; print(b.build_sdist({str(tmp / 'dist')!r}))"
    _run(sys.executable, "-c", code, cwd=source)
    return tmp / "dist"


@pytest.fixture(scope="module")
def unpacked(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist unpacked: the top folder a user enters."""
    tmp = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(next(dist.glob("wirediff-*.tar.gz"))) as t:
        t.extractall(tmp, filter="data")
    return next(tmp.iterdir())


def _checkout_paths(text: str) -> set[str]:
    """Words of `text` that name a file or folder of this checkout (`addons/capture.py`)."""
    words = re.findall(r"[\w.-]+(?:/[\w.-]+)+/?", text)
    return {w.rstrip("/") for w in words if (ROOT / w).exists() and not w.startswith(".")}


def _readme_commands() -> str:
    """The README's code: its fenced blocks and inline spans, where its commands are."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    fenced = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
    spans = re.findall(r"`([^`]+)`", fenced.sub("", text))
    return "\n".join([*fenced.findall(text), *spans])


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel installed with `--no-deps` into a fresh venv that borrows this environment's
    dependencies (a .pth file; the editable install's own .pth files are not read from there,
    so only the wheel provides `wirediff`)."""
    tmp = tmp_path_factory.mktemp("install")
    wheel = next(dist.glob("wirediff-*.whl"))
    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    py = venv / "bin" / "python"
    purelib = _run(py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=tmp)
    deps = [p for p in site.getsitepackages() if p.endswith("site-packages")]
    Path(purelib.strip(), "deps.pth").write_text("\n".join(deps) + "\n")
    _run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", purelib.strip(),
         wheel, cwd=tmp)  # fmt: skip
    return wheel, py


def test_no_file_of_the_checkout_is_a_link() -> None:
    modes = _run("git", "ls-files", "-s", cwd=ROOT).splitlines()
    assert [m for m in modes if m.startswith("120000")] == []


def test_the_sdist_is_the_whole_checkout(dist: Path) -> None:
    sdist = next(dist.glob("wirediff-*.tar.gz"))
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    wanted = {n for n in _tracked() if not n.startswith((".ci/", ".gitignore"))}
    assert wanted - names == set()
    assert {"addons/capture.py", "addons/shadow.py", "Makefile"} <= names


def test_the_sdist_holds_every_file_the_readmes_commands_use(unpacked: Path) -> None:
    """Every checkout path in the README's commands, and every one that `make demo` and
    `make test` run (as `make -n` prints them in the unpacked sdist), is in the sdist."""
    plan = subprocess.run(
        ["make", "-n", "demo", "test"], cwd=unpacked, capture_output=True, text=True, timeout=60
    )
    assert plan.returncode == 0, plan.stderr
    used = _checkout_paths(_readme_commands()) | _checkout_paths(plan.stdout)
    assert {"addons/capture.py", "addons/shadow.py", "scripts/install-peers.sh"} <= used
    assert {"scripts/install-clients.sh", "tests/e2e/test_report_browser.py"} <= used
    assert sorted(p for p in used if not (unpacked / p).exists()) == []


def test_each_module_is_in_the_wheel_once_at_its_one_path(
    installed: tuple[Path, Path],
) -> None:
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as z:
        modules = [n for n in z.namelist() if n.endswith(".py")]
    tracked = [n for n in _tracked() if n.startswith("wirediff/") and n.endswith(".py")]
    assert sorted(modules) == sorted(tracked)


def test_the_wheel_holds_one_top_level_package_and_every_data_file(
    installed: tuple[Path, Path],
) -> None:
    wheel, _ = installed
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert {n.split("/", 1)[0] for n in names if ".dist-info/" not in n} == {"wirediff"}
    package = ROOT / "wirediff"
    data = {
        f"wirediff/{Path(d).relative_to(package) / f}".replace("/./", "/")
        for d, dirs, files in os.walk(package)
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


def test_addon_path_names_the_installed_addons(
    installed: tuple[Path, Path], tmp_path: Path
) -> None:
    _, py = installed
    addon = _run(py, "-m", "wirediff", "addon-path", cwd=tmp_path).strip()
    assert addon.endswith("wirediff/addons/capture.py") and str(ROOT) not in addon
    shadow = Path(_run(py, "-m", "wirediff", "addon-path", "shadow", cwd=tmp_path).strip())
    assert shadow.name == "shadow.py" and shadow.parent == Path(addon).parent and shadow.is_file()


@pytest.mark.parametrize("where", ["addon-path", "sdist"])
def test_mitmdump_records_with_the_installed_addon(
    installed: tuple[Path, Path], unpacked: Path, tmp_path: Path, where: str
) -> None:
    """Through `mitmdump -s "$(wirediff addon-path)"`, and through the README's
    `mitmdump -s addons/capture.py` run in an unpacked sdist."""
    _, py = installed
    if where == "sdist":
        addon = str(unpacked / "addons" / "capture.py")
    else:
        addon = _run(py, "-m", "wirediff", "addon-path", cwd=tmp_path).strip()
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
