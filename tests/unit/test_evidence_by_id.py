"""The evidence records the diagnoses are drawn from are made when asked for, and are what
copying each failing exchange's kept evidence with its own id gives."""

from __future__ import annotations

from tests.fixtures.chain_records import record, redirected_post
from wirediff._types import Record
from wirediff.analysis.diagnosis.chains import chain_rows
from wirediff.analysis.diagnosis.evidence import EvidenceById, evidence_key, evidence_record
from wirediff.analysis.index.analyze import Index, diagnose_index


def copied(index: Index) -> dict[str, Record]:
    """Each chain member's evidence as a copy of its own, read again when none was kept."""
    rows = index.rows
    ids = list(dict.fromkeys(i for chain in chain_rows(rows, failing_only=True) for i in chain[1]))
    out: dict[str, Record] = {}
    for rid in ids:
        (at,) = rows.index[rows["id"] == rid]
        key = int(rows["evidence"].to_numpy()[at])
        if key:
            out[rid] = {**index.evidence[key], "id": rid}
    for rid in ids:
        if rid not in out:
            (at,) = rows.index[rows["id"] == rid]
            out[rid] = evidence_record(index.read([int(at)])[0], ok=True)
    return out


def test_each_member_gets_its_kept_evidence_with_its_own_id() -> None:
    records = [
        *redirected_post(),
        record(id="a", status=404, resp_body={"error": {"message": "no"}}),
        record(id="b", status=404, resp_body={"error": {"message": "no"}}),
    ]
    index = Index.of(records)
    evidence = diagnose_index(index).evidence
    expected = copied(index)
    assert dict(evidence) == expected
    assert sorted(evidence) == sorted(expected) and len(evidence) == len(expected)
    assert evidence["a"] is not evidence["b"] and evidence["a"]["id"] == "a"


def test_a_record_read_again_is_kept_with_its_own_key() -> None:
    shared: dict[int, Record] = {7: record(id="x", status=500)}
    evidence = EvidenceById({"a": 7}, shared)
    again = record(id="a", status=200)
    evidence.add(again)
    seen = evidence_record(again, ok=True)
    assert evidence.keyed("a") == (evidence_key(seen), seen)
    assert list(evidence) == ["a"] and len(evidence) == 1
