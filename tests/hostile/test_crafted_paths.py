"""A capture's paths are hostile input: the real `wirediff replay` and the real shadow addon
in mitmdump send a key only to the target's origin, under its base path. Every crafted path
(`tests.fixtures.crafted_paths`), on GET and on POST, is skipped with its reason, and a
listener on another loopback port, where each would have gone, gets no connection at all."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, wait_for
from tests.fixtures.crafted_paths import crafted_paths, portless_paths
from tests.fixtures.records import chat_record, error_of, models_record
from wirediff._types import Record
from wirediff.backends.standin import make_standin
from wirediff.record.store import load_records

pytestmark = pytest.mark.hostile

KEY = "sk-canary-crafted-path-0123456789"
SHADOW_ADDON = str(ROOT / "addons" / "shadow.py")


class Listener:
    """A loopback port that counts every connection made to it, accepted or still queued."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.sock.settimeout(0.05)  # how soon `close` stops the accept loop
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = self.sock.accept()
                self.connections += 1
                conn.close()  # a client sent here fails at once instead of waiting

    def close(self) -> int:
        """Stop; every connection made so far, the queued ones too."""
        if self._stop.is_set():
            return self.connections
        self._stop.set()
        self._thread.join()
        self.sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                self.sock.accept()[0].close()
                self.connections += 1
        self.sock.close()
        return self.connections


@pytest.fixture
def other() -> Iterator[Listener]:
    listener = Listener()
    try:
        yield listener
    finally:
        listener.close()


def _crafted_capture(path: Path, paths: list[str]) -> list[Record]:
    """A capture holding each path as a GET and as a POST, and one honest GET."""
    recs: list[Record] = [models_record(id="honest")]
    for i, p in enumerate(paths):
        for r in (models_record(id=f"get{i}"), chat_record(id=f"post{i}")):
            r["request"]["path"] = p
            r["request"]["url"] = "http://127.0.0.1:8000" + p
            recs.append(r)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return recs


def _wirediff(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CANARY_KEY": KEY}
    return subprocess.run(
        [sys.executable, "-m", "wirediff", *argv], env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize("portless", [False, True], ids=["port", "portless"])
def test_replay_sends_no_crafted_path_anywhere(
    other: Listener, tmp_path: Path, portless: bool
) -> None:
    paths = crafted_paths(other.port) + (portless_paths(other.port) if portless else [])
    capture = tmp_path / "s.jsonl"
    recs = _crafted_capture(capture, paths)
    good = make_standin("openai")
    with good:
        to = "http://127.0.0.1/v1" if portless else f"{good.url}/v1"
        common = [str(capture), "--to", to, "--label", "good", "--allow-unsafe"]
        dry = _wirediff("replay", *common, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        skips = [line for line in dry.stdout.splitlines() if line.startswith("      skip: ")]
        assert len(skips) == len(recs) - 1, dry.stdout
        assert all(s.startswith("      skip: the captured path ") for s in skips), skips
        if not portless:  # the honest one, to its exact URL
            assert f"  GET {good.url}/v1/models  [honest]" in dry.stdout
        done = _wirediff("replay", *common, "--api-key-env", "CANARY_KEY", "--timeout", "30")
    assert other.close() == 0
    # port-less: the honest one went to port 80, where nothing listens (exit 2 says so)
    assert done.returncode == (2 if portless else 0), done.stderr
    (out,) = tmp_path.glob("*.good.jsonl")
    replays = {r["replay_of"]: r for r in load_records([out])}
    assert set(replays) == {r["id"] for r in recs}
    for rid, r in replays.items():
        if rid == "honest":
            continue
        err = error_of(r)
        assert err["kind"] == "skipped" and err["message"].startswith("the captured path "), r
    if not portless:
        assert [(s.method, s.path) for s in good.seen] == [("GET", "/v1/models")]
        assert ("authorization", f"Bearer {KEY}") in good.seen[0].headers


def _raw(port: int, method: str, path: str) -> bytes:
    """The status line mitmdump answers a raw HTTP/1.1 request with."""
    body = b'{"model":"gpt-4o-mini","messages":[]}' if method == "POST" else b""
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(head.encode("utf-8") + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data.split(b"\r\n", 1)[0]


def _mirrors(path: Path, n: int) -> list[Record] | None:
    recs = load_records([path]) if path.exists() else []
    return recs if len(recs) >= n else None


def test_the_shadow_mirrors_no_crafted_path_anywhere(
    mitmdump: Any, other: Listener, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CANARY_KEY", KEY)
    primary, good = make_standin("openai"), make_standin("openai")
    with primary, good:
        m = mitmdump(
            [f"reverse:{primary.url}"],
            label="openai",
            extra=["-s", SHADOW_ADDON, "--set", f"shadow_to=good={good.url}/v1",
                   "--set", "shadow_key_env=good=CANARY_KEY",
                   "--set", "shadow_allow_unsafe=true"],
        )  # fmt: skip
        refused: list[str] = []
        for path in crafted_paths(other.port) + portless_paths(other.port):
            for method in ("GET", "POST"):
                status = _raw(m.port, method, path)
                if status == b"HTTP/1.1 400 Bad Request":  # mitmproxy's own parser refused it
                    refused.append(f"{method} {path}")
        originals = m.records(2 * len(crafted_paths(0) + portless_paths(0)) - len(refused), 30)
        mirrors = wait_for(
            lambda: _mirrors(m.capture_dir / "s.good.jsonl", len(originals)),
            30,
            f"{len(originals)} mirrors",
        )
        m.stop()
    assert other.close() == 0
    # what reached the capture is mirrored: skipped with the reason, or (mitmproxy took the
    # absolute-form request as its path) sent to the candidate under /v1
    by_id = {r["id"]: r for r in originals}
    sent = []
    for r in mirrors:
        original = by_id[r["replay_of"]]["request"]
        err = r["error"]
        if err is not None and err["kind"] == "skipped":
            assert err["message"].startswith("the captured path "), (original["path"], err)
        else:
            assert original["path"] == "/v1/models", original["path"]
            sent.append(original["method"])
    assert sorted(sent) == ["GET", "POST"]
    assert sorted((s.method, s.path) for s in good.seen) == [
        ("GET", "/v1/models"), ("POST", "/v1/models")
    ]  # fmt: skip
    assert all(not p.split(" ", 1)[1].startswith("/") or "\r" in p or " " in p.split(" ", 1)[1]
               for p in refused), refused  # fmt: skip
