"""The probe's bundle is what real clients send: each client runs its probe workload
(tests/clients/probe/) through `wirediff capture` again, and

- the features its requests exercise are what `wirediff/probe/data/clients.yaml` says it
  needs (scripts/regen-probe.py wrote that file from the same workloads);
- each feature the bundle takes from it is, request by request, what it sends now: the same
  route, the same headers, a body of the same shape with the same constants (no request in
  `probe.jsonl` was typed or edited by hand)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.clients.conftest import CLIENTS_DIR
from tests.clients.probe_workloads import KEY, WORKLOADS_BY_NAME, capture_client_workload, chosen
from wirediff._types import Record
from wirediff.analysis.comparison.shapes import flatten
from wirediff.probe.features import load_probe, needs_of

pytestmark = pytest.mark.clients


def sent(rec: Record) -> dict[str, Any]:
    """A request as a client's code decides it: route, header names, body shape, constants."""
    req, resp = rec["request"], rec["response"]
    body: Any = req.get("body")
    if resp is not None and rec["tags"].get("transport") == "websocket":  # its messages
        body = [e["data"] for e in resp["events"] or () if e.get("direction") == "client"]
    shape, constants = flatten(body) if body is not None else (set(), set())
    return {
        "method": req["method"],
        "path": req["path"],
        "headers": sorted({str(k).lower() for k, _ in req["headers"]}),
        "shape": sorted(shape),
        "constants": sorted(constants),
    }


@pytest.mark.parametrize("name", [c.id for c in load_probe().clients])
def test_a_clients_needs_and_requests_are_what_it_sends(name: str, tmp_path: Path) -> None:
    w = WORKLOADS_BY_NAME[name]
    client, got = capture_client_workload(w, tmp_path / name)
    assert w.install is None or client.parent == CLIENTS_DIR
    assert got.records and all(r["response"] for r in got.records)
    data = load_probe()
    [entry] = [c for c in data.clients if c.id == name]
    assert needs_of(got.records, data.features) == list(entry.needs)
    for r in got.records:
        assert KEY not in str(r)
    taken = [f for f in data.features if f.client == name and not f.take_all]
    for f in taken:
        fresh = chosen(f, [got])
        assert fresh is not None, f"{name} no longer sends a request for {f.id}"
        bundled = [sent(data.by_id[i]) for i in f.exchanges]
        assert [sent(r) for r in fresh[1]] == bundled, f.id
