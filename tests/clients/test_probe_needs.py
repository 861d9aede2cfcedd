"""What each known client needs of a server is derived from its captured traffic: each
client runs its probe workload (tests/clients/probe/) through `wirediff capture` again, and
the features its requests exercise are what `wirediff/probe/data/clients.yaml` says it needs
(scripts/regen-probe.py wrote that file from the same workloads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients.conftest import CLIENTS_DIR, run_workload
from tests.clients.probe_workloads import KEY, WORKLOADS_BY_NAME
from wirediff.probe.features import load_probe, needs_of

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("name", [c.id for c in load_probe().clients])
def test_a_clients_needs_are_what_its_traffic_exercises(name: str, tmp_path: Path) -> None:
    w = WORKLOADS_BY_NAME[name]
    client, got = run_workload(w, tmp_path / name)
    assert w.install is None or client.parent == CLIENTS_DIR
    assert got.records and all(r["response"] for r in got.records)
    data = load_probe()
    [entry] = [c for c in data.clients if c.id == name]
    assert needs_of(got.records, data.features) == list(entry.needs)
    for r in got.records:
        assert KEY not in str(r)
