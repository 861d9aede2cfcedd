"""Bad setup fails fast: an unwritable capture_dir or a bad value for any capture_* option
stops mitmdump at startup with one line saying why, and no traceback."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CAPTURE_ADDON, MITMDUMP, wait_for
from tests.hostile.test_full_disk import can_mount

pytestmark = pytest.mark.hostile


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody may write to: a read-only tmpfs as root (root ignores modes)."""
    where = tmp_path / "ro"
    where.mkdir()
    if can_mount():
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(where)],
            check=True,
            capture_output=True,
        )
        yield where
        subprocess.run(["umount", "-l", str(where)], check=False)
    else:
        where.chmod(0o555)
        yield where
        where.chmod(0o755)


def start(tmp_path: Path, *sets: str) -> tuple[int, str]:
    cmd = [
        MITMDUMP,
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        "0",
        "-s",
        CAPTURE_ADDON,
        "--set",
        f"confdir={tmp_path / 'conf'}",
    ]
    for s in sets:
        cmd += ["--set", s]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    return p.returncode, p.stdout + p.stderr


def one_line(out: str, *words: str) -> None:
    hits = [line for line in out.splitlines() if "capture:" in line and "recording to" not in line]
    assert len(hits) == 1 and all(w in hits[0] for w in words), out
    assert "Traceback" not in out and "Error logged during startup" in out, out


def test_a_read_only_capture_dir(tmp_path: Path, read_only_dir: Path) -> None:
    code, out = start(tmp_path, f"capture_dir={read_only_dir}")
    assert code != 0
    one_line(out, str(read_only_dir), "not writable")
    assert not list(read_only_dir.iterdir())


def test_a_capture_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    code, out = start(tmp_path, f"capture_dir={tmp_path / 'f'}")
    assert code != 0
    one_line(out, str(tmp_path / "f"), "is a file, not a directory")


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("capture_body_cap=abc", ["capture_body_cap", "whole number", "'abc'"]),
        ("capture_body_cap=-1", ["capture_body_cap", "0 or more"]),
        ("capture_body_cap=1.5", ["capture_body_cap", "'1.5'"]),
        ("capture_lazy_connect=maybe", ["capture_lazy_connect", "true or false"]),
        ("capture_session=../up", ["capture_session", "'../up'"]),
        ("capture_session=.hidden", ["capture_session", "'.hidden'"]),
    ],
)
def test_bad_option_values(tmp_path: Path, setting: str, words: list[str]) -> None:
    code, out = start(tmp_path, setting, f"capture_dir={tmp_path / 'c'}")
    assert code != 0
    one_line(out, *words)


def test_the_startup_log_names_the_capture_file(tmp_path: Path) -> None:
    log = tmp_path / "log"
    cmd = [
        MITMDUMP,
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        "0",
        "-s",
        CAPTURE_ADDON,
        "--set",
        f"confdir={tmp_path / 'conf'}",
        "--set",
        "capture_dir=rel",
        "--set",
        "capture_session=s",
    ]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_for(lambda: "proxy listening" in log.read_text(), 30, "mitmdump to start")
    finally:
        proc.terminate()
        proc.wait(30)
    assert f"capture: recording to {tmp_path.resolve() / 'rel' / 's.jsonl'}" in log.read_text()
