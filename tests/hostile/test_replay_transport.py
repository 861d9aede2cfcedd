"""Replay against a target that cuts every connection: each attempt is recorded, and the
command exits 2 with one line instead of 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.records import error_of, openai_session
from wirediff.cli import main
from wirediff.record.store import load_records

pytestmark = pytest.mark.hostile


def test_every_request_failing_at_the_transport_is_exit_2(
    upstream: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "s.jsonl"
    capture.write_text("".join(json.dumps(r) + "\n" for r in openai_session()))
    code = main(
        [
            "replay",
            str(capture),
            "--to",
            f"{upstream}/reset/v1",
            "--label",
            "cut",
            "--timeout",
            "10",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    (last,) = err.strip().splitlines()[-1:]
    assert (
        last.startswith("wirediff: error: every request to cut")
        and "failed at the transport" in last
    )
    (out,) = tmp_path.glob("*.cut.jsonl")
    recs = load_records([out])
    kinds = {error_of(r)["kind"] for r in recs}
    assert kinds <= {"upstream_disconnect", "skipped"} and "upstream_disconnect" in kinds
