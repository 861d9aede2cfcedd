"""Canary secrets, sent the ways clients send credentials (a WebSocket session's handshake
and messages too) and echoed back by the upstream in every encoding: none of their forms appears in the capture, the replay's output, the report,
the summary, the CSV, any command's output, or what mitmdump itself printed."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from tests.conftest import ROOT, wait_for
from tests.hostile.conftest import ProxyFactory
from tests.unit.test_secrets import encodings

pytestmark = pytest.mark.hostile

KEY = "sk-HOSTILE-CANARY/a1b2+c3d4"
QUERY_KEY = "AIza-QUERY-CANARY-e5f6"
FIELD = "fld-HOSTILE-CANARY-7a8b"
USER, PASSWORD = "alice", "pw-HOSTILE-CANARY-9c0d"
HEADER_KEY = "xk-HOSTILE-CANARY-1e2f"
REPLAY_KEY = "sk-REPLAY-CANARY-3a4b"
CANARIES = [KEY, QUERY_KEY, FIELD, f"{USER}:{PASSWORD}", PASSWORD, HEADER_KEY, REPLAY_KEY]


def wirediff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REPLAY_KEY": REPLAY_KEY, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "wirediff", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_no_canary_in_any_encoding_anywhere(
    proxy: ProxyFactory, upstream: str, tmp_path: Path
) -> None:
    cap = proxy(quiet=False, extra=["--set", "flow_detail=3"])
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    with httpx.Client(base_url=cap.url, timeout=30) as c:
        c.post(
            f"/echo?key={QUERY_KEY}",
            headers={"authorization": f"Bearer {KEY}"},
            json={"model": "m", "input": "hi", "api_key": FIELD},
        )
        with c.stream(
            "POST",
            "/echo/sse",
            headers={"authorization": f"Basic {basic}"},
            json={"model": "m", "input": "hi", "stream": True},
        ) as r:
            r.read()
        c.get("/echo", headers={"x-api-key": HEADER_KEY})
    ws_url = cap.url.replace("http", "ws", 1) + f"/echo/ws?key={QUERY_KEY}"
    with connect(ws_url, additional_headers={"authorization": f"Bearer {KEY}"}, proxy=None) as ws:
        ws.send(json.dumps({"type": "session.update", "api_key": FIELD}))
        echoed_back = list(ws)  # until the server closes
    assert len(echoed_back) > 10 and ws.close_reason == KEY  # the session did echo them
    wait_for(lambda: cap.capture_file.exists() and len(cap.records()) == 4, 30, "4 records")
    outputs = [cap.stop()]
    capture = cap.capture_file
    runs = [
        wirediff(
            "replay",
            str(capture),
            "--to",
            upstream,
            "--label",
            "r",
            "--api-key-env",
            "REPLAY_KEY",
            cwd=tmp_path,
        ),
        wirediff(
            "report",
            str(capture),
            str(capture.with_name("h.r.jsonl")),
            "-o",
            "r.html",
            "--json",
            "s.json",
            "--csv",
            "d.csv",
            cwd=tmp_path,
        ),
        wirediff("diagnose", str(capture), "--json", cwd=tmp_path),
        wirediff(
            "check",
            str(capture),
            str(capture.with_name("h.r.jsonl")),
            "--json",
            "c.json",
            "--junit",
            "j.xml",
            cwd=tmp_path,
        ),
    ]
    for run in runs:
        assert "Traceback" not in run.stderr, run.stderr
        outputs += [run.stdout, run.stderr]
    assert runs[0].returncode == 0 and runs[1].returncode == 0, runs[1].stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file() and "conf" not in p.parts]
    assert {"h.jsonl", "h.r.jsonl", "r.html", "s.json", "d.csv"} <= {p.name for p in files}
    texts = {str(p): p.read_text(errors="replace") for p in files}
    texts.update({f"output {i}": out for i, out in enumerate(outputs)})
    echoed = capture.read_text()
    assert echoed.count("sha256:") > 10  # the echoes are there, as fingerprints
    for secret in CANARIES:
        for how, form in encodings(secret).items():
            for where, text in texts.items():
                assert form not in text, f"{secret!r} as {how} ({form!r}) in {where}"
