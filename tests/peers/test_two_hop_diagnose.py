"""Diagnosis of the real two-hop capture whose key LiteLLM did not pass on.

    client ─K1─► A ─► LiteLLM ─"fake-api-key"─► B ─► stand-in (401 invalid_api_key)

The two records differ in model name (`hop-nokey` → `gpt-4o-mini`) and body (the gateway
adds `"stream": false`) and the gateway writes its own 401, so only the prompt and the
nesting in time tie them together: they must be ONE chain with `auth_dropped_by_hop`, not
two chains each saying `auth_rejected`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.analysed import diagnose
from tests.peers.conftest import (
    CLIENT_KEY,
    LITELLM_PLACEHOLDER_KEY,
    LiteLLM,
    by_listener,
)
from wirediff.analysis.diagnosis.chains import CHAIN_COLUMNS, chain_rows
from wirediff.analysis.index.analyze import Index
from wirediff.cli import main
from wirediff.record.redact import fingerprint
from wirediff.record.store import load_records

pytestmark = pytest.mark.peers


def test_one_chain_spans_both_hops(auth_dropped_capture: Path, litellm: LiteLLM) -> None:
    records = load_records([auth_dropped_capture])
    (outer,) = by_listener(records, litellm.dropped, 0)
    (inner,) = by_listener(records, litellm.dropped, 1)
    assert outer["tags"]["model"] != inner["tags"]["model"]
    assert outer["request"]["body"] != inner["request"]["body"]

    (row,) = chain_rows(Index.of(records).rows)
    chain = dict(zip(CHAIN_COLUMNS, row, strict=True))
    assert chain["exchange_ids"] == [outer["id"], inner["id"]]
    assert chain["links"] == [("hop", outer["id"], inner["id"])]
    assert chain["final_id"] == outer["id"] and not chain["ok"]


def test_diagnosis_is_auth_dropped_by_hop(auth_dropped_capture: Path, litellm: LiteLLM) -> None:
    records = load_records([auth_dropped_capture])
    (outer,) = by_listener(records, litellm.dropped, 0)
    (inner,) = by_listener(records, litellm.dropped, 1)

    df = diagnose(records)
    assert list(df["code"]) == ["auth_dropped_by_hop"]  # not auth_rejected, twice
    row = df.iloc[0]
    assert row["chain_id"] == f"ch-{outer['id']}"
    assert row["exchange_ids"] == [outer["id"], inner["id"]]
    assert not row["recovered"]
    evidence = "\n".join(row["evidence"])
    assert fingerprint(CLIENT_KEY) in evidence  # what the client sent on listener A
    assert fingerprint(LITELLM_PLACEHOLDER_KEY) in evidence  # what arrived on listener B
    assert str(outer["listener"]) in evidence and str(inner["listener"]) in evidence
    assert "forward" in row["remedy"]


def test_wirediff_diagnose_cli(
    auth_dropped_capture: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["diagnose", str(auth_dropped_capture)]) == 0
    text = capsys.readouterr().out
    assert "auth_dropped_by_hop" in text and "auth_rejected" not in text
    assert text.endswith("1 diagnosis in 1 chain\n")

    assert main(["diagnose", "--json", str(auth_dropped_capture)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["code"] == "auth_dropped_by_hop" and len(row["exchange_ids"]) == 2
    assert CLIENT_KEY not in json.dumps(row)
