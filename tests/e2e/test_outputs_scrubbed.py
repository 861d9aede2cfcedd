"""Every output goes through the one scrub (`scrub_output`): captures another tool wrote,
holding keys in plain view where a server quoted them (a 401's message lower-cased, a
bearer token in an error text, a key-like query parameter, a credential-named field, a key
offered as a subprotocol), give none of them in the report, `summary.json` (its verdicts'
and matrix's reasons too), the CSV, the JUnit file, check's JSON, diagnose's text and
JSON, the terminal, or the Parquet dataset."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.fixtures.records import openai_error, openai_session, replay
from wirediff._types import Record
from wirediff.cli import main
from wirediff.record.scrub import REDACTED

pytestmark = pytest.mark.e2e

PLANTED = {
    "key": "SK-PLANTED-CANARY-0123456789",
    "query": "planted-query-7788",
    "subprotocol": "planted-proto-5566",
    "bearer": "planted-bearer-token-42",
    "field": "planted-field-9900",
}


def _unauthorized(rec: Record) -> None:
    resp = rec["response"]
    assert resp is not None
    resp["status"], resp["events"] = 401, None
    message = (
        f"Incorrect API key provided: {PLANTED['key'].lower()}. You can find your API key "
        f"at https://platform.test/keys?key={PLANTED['query']}"
    )
    resp["body"] = openai_error(message, "invalid_request_error", None, "invalid_api_key")
    resp["headers"].append(["x-echo", f"openai-insecure-api-key.{PLANTED['subprotocol']}"])


def _server_error(rec: Record) -> None:
    resp = rec["response"]
    assert resp is not None
    resp["status"], resp["body"], resp["events"] = 500, None, None
    resp["text"] = (
        f'{{"error": "upstream said Bearer {PLANTED["bearer"]}", "api_key": "{PLANTED["field"]}"'
    )


@pytest.fixture
def captures(tmp_path: Path) -> tuple[Path, Path]:
    base = openai_session()
    changes = {0: _unauthorized, 1: _server_error}
    cands = [replay(r, id=f"c{i}", change=changes.get(i)) for i, r in enumerate(base)]
    paths = tmp_path / "base.jsonl", tmp_path / "cand.jsonl"
    for path, recs in zip(paths, (base, cands), strict=True):
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return paths


def test_no_planted_key_in_any_output(
    captures: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, cand = map(str, captures)
    out = tmp_path / "out"
    said = []
    for argv in (
        ["report", base, cand, "-o", f"{out}/r.html", "--json", f"{out}/s.json",
         "--csv", f"{out}/d.csv"],
        ["check", base, cand, "--json", f"{out}/c.json", "--junit", f"{out}/j.xml"],
        ["check", base, cand, "--json", "-"],
        ["diagnose", base, cand],
        ["diagnose", base, cand, "--json"],
        ["export", base, cand, "--parquet", f"{out}/ds"],
        ["report", f"{out}/ds", "-o", f"{out}/from-parquet.html", "--json", "-"],
    ):  # fmt: skip
        assert main(argv) in (0, 1), argv
        said.append(capsys.readouterr())
    texts = {p.name: p.read_text() for p in out.iterdir() if p.is_file()}
    tables = [pq.read_table(p).to_pylist() for p in sorted((out / "ds").rglob("*.parquet"))]
    texts["the Parquet dataset"] = json.dumps(tables, default=str)
    texts.update({f"output {i}": s.out + s.err for i, s in enumerate(said)})
    assert {"r.html", "s.json", "d.csv", "c.json", "j.xml", "from-parquet.html"} <= set(texts)
    summary = json.loads(texts["s.json"])
    reasons = json.dumps([v["reasons"] for v in summary["verdicts"]])
    assert reasons == json.dumps([m["reasons"] for m in summary["matrix"]])
    assert reasons.count(REDACTED) >= 3  # the server's words reached the reasons, scrubbed
    for what, secret in PLANTED.items():
        for form in (secret, secret.lower(), secret.upper()):
            for where, text in texts.items():
                assert form not in text, f"the planted {what} ({form}) is in {where}"
