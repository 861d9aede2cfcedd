"""The evidence records the diagnoses are drawn from are made when asked for, and are what
copying each failing exchange's kept evidence with its own id gives."""

from __future__ import annotations

import pickle

from tests.fixtures.chain_records import record, redirected_post
from wirediff._types import Record
from wirediff.analysis.diagnosis.chains import chain_rows
from wirediff.analysis.diagnosis.evidence import EvidenceById, evidence_key, evidence_record, packed
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
            kept: Record = pickle.loads(index.evidence[key])
            out[rid] = {**kept, "id": rid}
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
    shared = {7: packed(record(id="x", status=500))}
    evidence = EvidenceById({"a": 7}, shared)
    again = record(id="a", status=200)
    evidence.add(again)
    seen = evidence_record(again, ok=True)
    assert (evidence.key("a"), evidence["a"]) == (evidence_key(seen), seen)
    assert list(evidence) == ["a"] and len(evidence) == 1


def test_a_packed_record_unpacks_to_every_value_it_held() -> None:
    held = record(
        id="z", status=502, resp_body={"big": 1 << 70, "nan": float("nan"), "s": "\ud800"}
    )
    evidence = EvidenceById({"a": 1, "b": 1}, {1: packed(held)})
    a, b = evidence["a"], evidence["b"]
    assert a["id"] == "a" and b["id"] == "b" and a is not b
    body = a["response"]["body"] if a["response"] else None
    assert body is not None and body["big"] == 1 << 70 and body["s"] == "\ud800"
    assert body["nan"] != body["nan"]
    assert {k: v for k, v in a.items() if k != "id" and k != "response"} == {
        k: v for k, v in held.items() if k != "id" and k != "response"
    }
