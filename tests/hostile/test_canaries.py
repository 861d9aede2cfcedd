"""Canary secrets, sent every way clients send credentials (headers, the query, a key a
browser offers as a WebSocket subprotocol, credential-named fields of JSON and form bodies
and of WebSocket messages under any of their names, past the body cap too) and echoed back
by the upstream in every encoding, upper- and lower-cased and without their prefix: none of
their forms appears in the capture, the replay's output, an imported HAR, the Parquet
export, the report, the summary, the CSV, the JUnit file, any command's output, or what
mitmdump itself printed."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from websockets.sync.client import connect

from tests.conftest import ROOT, wait_for
from tests.fixtures.har import refused_realtime_har
from tests.hostile.conftest import ProxyFactory
from tests.hostile.upstream import forms
from tests.unit.test_secrets import encodings

pytestmark = pytest.mark.hostile

KEY = "sk-HOSTILE-CANARY/a1b2+c3d4"
QUERY_KEY = "AIza-QUERY-CANARY-e5f6"
FIELD = "fld-HOSTILE-CANARY-7a8b"
USER, PASSWORD = "alice", "pw-HOSTILE-CANARY-9c0d"
HEADER_KEY = "xk-HOSTILE-CANARY-1e2f"
REPLAY_KEY = "sk-REPLAY-CANARY-3a4b"
SUBPROTOCOL_KEY = "sk-proj-SUBPROTOCOL-CANARY-5a6b7c8d"
OVER_CAP = "oc-OVERCAP-CANARY-0f1e2d"
NAMED = {
    "openai_api_key": "nk-NAMED-CANARY-aa11bb",
    "authorization": "az-AUTHZ-CANARY-cc22dd",
    "key": "kk-BAREKEY-CANARY-ee33",
    "token": "tk-TOKEN-CANARY-ff44aa",
    "secret": "sc-SECRET-CANARY-bb55cc",
}
FORM_KEY = "fk-FORM-CANARY-dd66ee"
MESSAGE_KEY = "mk-MESSAGE-CANARY-77ff88"
HAR_KEY = "sk-HAR-SUBPROTOCOL-CANARY-99aabb"
CANARIES = [
    *(KEY, QUERY_KEY, FIELD, f"{USER}:{PASSWORD}", PASSWORD, HEADER_KEY, REPLAY_KEY),
    *(SUBPROTOCOL_KEY, OVER_CAP, *NAMED.values(), FORM_KEY, MESSAGE_KEY, HAR_KEY),
]
CAP = 4096
"""The capture's body cap here: a body or message past it is cut."""


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


def _parquet_text(dataset: Path) -> str:
    """Every value of every Parquet file of a dataset, as text."""
    tables = [pq.read_table(p).to_pylist() for p in sorted(dataset.rglob("*.parquet"))]
    assert tables, f"no Parquet file in {dataset}"
    return json.dumps(tables, default=str, ensure_ascii=False)


def _traffic(url: str) -> None:
    """Every way of sending a credential, each request answered with its echoes."""
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    with httpx.Client(base_url=url, timeout=30) as c:
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
        c.post("/echo", json={"model": "m", "input": "hi", **NAMED})
        c.post("/echo", data={"model": "m", "openai_key": FORM_KEY})
        c.post("/echo", json={"model": "m", "input": "x" * 2 * CAP, "api_key": OVER_CAP})
    ws_url = url.replace("http", "ws", 1) + f"/echo/ws?key={QUERY_KEY}"
    offered = ["realtime", f"openai-insecure-api-key.{SUBPROTOCOL_KEY}"]
    with connect(
        ws_url,
        additional_headers={"authorization": f"Bearer {KEY}"},
        subprotocols=offered,  # type: ignore[arg-type]
        proxy=None,
    ) as ws:
        big = {"type": "session.update", "pad": "x" * 2 * CAP, "openai_api_key": MESSAGE_KEY}
        ws.send(json.dumps(big))
        echoed_back = list(ws)  # until the server closes
    assert len(echoed_back) > 10 and ws.close_reason == SUBPROTOCOL_KEY  # it did echo them


def test_no_canary_in_any_encoding_anywhere(
    proxy: ProxyFactory, upstream: str, tmp_path: Path
) -> None:
    cap = proxy(quiet=False, extra=["--set", "flow_detail=3", "--set", f"capture_body_cap={CAP}"])
    _traffic(cap.url)
    wait_for(lambda: cap.capture_file.exists() and len(cap.records()) == 7, 30, "7 records")
    outputs = [cap.stop()]
    capture, replayed = cap.capture_file, cap.capture_file.with_name("h.r.jsonl")
    har = refused_realtime_har(tmp_path / "inputs" / "realtime.har", HAR_KEY, forms(HAR_KEY))
    runs = [
        wirediff("replay", str(capture), "--to", upstream, "--label", "r",
                 "--api-key-env", "REPLAY_KEY", cwd=tmp_path),
        wirediff("replay", str(capture), "--to", upstream, "--label", "r", "--dry-run",
                 cwd=tmp_path),
        wirediff("report", str(capture), str(replayed), "-o", "r.html", "--json", "s.json",
                 "--csv", "d.csv", cwd=tmp_path),
        wirediff("diagnose", str(capture), "--json", cwd=tmp_path),
        wirediff("diagnose", str(capture), str(replayed), cwd=tmp_path),
        wirediff("check", str(capture), str(replayed), "--json", "c.json", "--junit", "j.xml",
                 cwd=tmp_path),
        wirediff("import", str(har), "-o", "imported.jsonl", cwd=tmp_path),
        wirediff("export", str(capture), str(replayed), "imported.jsonl", "--parquet", "ds",
                 cwd=tmp_path),
    ]  # fmt: skip
    for run in runs:
        assert "Traceback" not in run.stderr, run.stderr
        outputs += [run.stdout, run.stderr]
    assert [r.returncode for r in runs] == [0, 0, 0, 0, 0, 0, 0, 0], [r.stderr for r in runs]
    files = [
        p for p in tmp_path.rglob("*")
        if p.is_file() and not {"conf", "inputs"} & set(p.parts) and p.suffix != ".parquet"
    ]  # fmt: skip
    names = {p.name for p in files}
    assert {"h.jsonl", "h.r.jsonl", "r.html", "s.json", "d.csv", "j.xml", "c.json"} <= names
    assert "imported.jsonl" in names
    texts = {str(p): p.read_text(errors="replace") for p in files}
    texts["the Parquet dataset"] = _parquet_text(tmp_path / "ds")
    texts.update({f"output {i}": out for i, out in enumerate(outputs)})
    echoed = capture.read_text()
    assert echoed.count("sha256:") > 10  # the echoes are there, as fingerprints
    (over,) = [r for r in cap.records() if r["request"].get("truncated")]
    assert over["response"] is not None and over["response"]["status"] == 200
    for secret in CANARIES:
        for how, form in encodings(secret).items():
            for where, text in texts.items():
                assert form not in text, f"{secret!r} as {how} ({form!r}) in {where}"


DROPPED = "sk-proj-DROPPED-CANARY-5e6f7a8b9c0d"
"""A key sent only in the part of an upload the capture does not keep."""


def test_a_key_only_in_the_dropped_part_of_an_upload_is_scrubbed_everywhere(
    proxy: ProxyFactory, tmp_path: Path
) -> None:
    """The openai SDK sends a chat request far over the cap with the key between its long
    messages and a long field after it (so neither the kept start nor the kept end holds
    it); the upstream answers 401 quoting it in every encoding, in its body and headers."""
    from openai import AuthenticationError, OpenAI

    cap = proxy(quiet=False, extra=["--set", "flow_detail=3", "--set", f"capture_body_cap={CAP}"])
    client = OpenAI(
        base_url=f"{cap.url}/echo/unauthorized", api_key="not-the-canary", max_retries=0
    )
    long = "x" * (200 * CAP)
    with pytest.raises(AuthenticationError) as raised:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": long}],
            extra_body={"openai_api_key": DROPPED, "pad": long},
        )
    assert DROPPED in str(raised.value.body)  # the upstream did quote it
    wait_for(lambda: cap.capture_file.exists() and len(cap.records()) == 1, 30, "the record")
    log = cap.stop()
    (rec,) = cap.records()
    request = rec["request"]
    assert request["truncated"] and request["size"] > 2 * len(long)
    assert rec["response"] is not None and rec["response"]["status"] == 401
    run = wirediff(
        "report", str(cap.capture_file), "-o", "r.html", "--json", "s.json",
        "--findings", "f.jsonl", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    texts = {
        "capture": cap.capture_file.read_text(),
        "mitmdump's log": log,
        "report output": run.stdout + run.stderr,
        **{name: (tmp_path / name).read_text() for name in ("r.html", "s.json", "f.jsonl")},
    }
    assert texts["capture"].count("sha256:") > 10  # the echoes are there, as fingerprints
    for how, form in encodings(DROPPED).items():
        for where, text in texts.items():
            assert form not in text, f"{DROPPED!r} as {how} ({form!r}) in {where}"
