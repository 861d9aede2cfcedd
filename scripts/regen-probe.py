#!/usr/bin/env python3
"""Regenerate the probe's bundled session from real client traffic.

Usage: .venv/bin/python scripts/regen-probe.py      (needs scripts/install-clients.sh first)

Each client of the clients tier runs its workload (tests/clients/probe/) through
`wirediff capture` in front of the `openai` stand-in (tests/clients/probe_workloads.py).
For each feature of wirediff/probe/data/features.yaml, the first captured request that
matches it, from the first client in its `from:` list that sent one (with the exchanges it
continues: a previous response, a function call), goes into probe.jsonl; the feature's
`exchanges` and `client` are rewritten to name them. clients.yaml gets each client's needs:
every feature its captured requests exercise. Only a client's id and name are typed by hand,
in clients.yaml: run this again after changing a workload, a feature or a client's version.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from tests.clients.conftest import CLIENTS_DIR  # noqa: E402
from tests.clients.probe_workloads import (  # noqa: E402
    KEY,
    WORKLOAD_LIST,
    Captured,
    capture_workload,
    chosen,
    reference,
)
from wirediff._types import Record  # noqa: E402
from wirediff.probe.drive import SESSION  # noqa: E402
from wirediff.probe.features import (  # noqa: E402
    CLIENTS_FILE,
    FEATURES_FILE,
    SESSION_FILE,
    Feature,
    load_clients,
    load_features,
    matches,
    needs_of,
)
from wirediff.record.store import encode_record  # noqa: E402

DATA = ROOT / "wirediff" / "probe" / "data"


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"regen-probe: {argv[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def capture_all(work: Path) -> list[Captured]:
    out = []
    with reference() as url:
        for w in WORKLOAD_LIST:
            client = Path() if w.install is None else CLIENTS_DIR / w.install
            if w.install is not None and not (client / ".installed").is_file():
                sys.exit(f"regen-probe: {w.name} is not installed: run scripts/install-clients.sh")
            got = capture_workload(w, client, url, work / w.name, run)
            print(f"regen-probe: {w.name}: {len(got.records)} exchanges captured", file=sys.stderr)
            out.append(got)
    return out


def select(feature: Feature, captured: list[Captured]) -> tuple[str, list[Record]]:
    got = chosen(feature, captured)
    if got is None:
        sys.exit(f"regen-probe: no client of {feature.prefer} sent a request for {feature.id}")
    return got


def captured_line(records: list[Record]) -> str:
    """Say what a client's needs were derived from: `12 calls, as OpenAI/Python 2.54.0`."""
    sdks = [(r.get("tags") or {}).get("sdk") or {} for r in records]
    agents = sorted({str(sdk.get("user_agent") or "?") for sdk in sdks})
    shown = ", ".join(a.split(" (", 1)[0] for a in agents)
    return f"{len(records)} call{'s' if len(records) != 1 else ''}, as {shown}"


def main() -> int:
    features = load_features((DATA / FEATURES_FILE).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="wirediff-regen-probe-") as tmp:
        captured = capture_all(Path(tmp))
    bundle: dict[str, Record] = {}
    picked: dict[str, tuple[str, list[str]]] = {}
    client_of: dict[str, str] = {}
    for f in features:
        if f.take_all:
            continue
        name, records = select(f, captured)
        for r in records:
            client_of[str(r["id"])] = name
            bundle.setdefault(str(r["id"]), {**r, "session": SESSION})
        picked[f.id] = (name, [str(r["id"]) for r in records])
    for f in features:  # `all: true`: every bundled exchange that matches
        if f.take_all:
            hits = [rid for rid, r in bundle.items() if matches(f.match, r)]
            picked[f.id] = (",".join(sorted({client_of[h] for h in hits})), hits)
    ordered = sorted(bundle.values(), key=lambda r: float(r.get("started") or 0.0))
    lines = []
    for seq, rec in enumerate(ordered):
        lines.append(encode_record({**rec, "seq": seq}))
    data = b"".join(lines)
    if KEY.encode() in data:
        sys.exit("regen-probe: the workloads' key reached the bundle: refusing to write it")
    (DATA / SESSION_FILE).write_bytes(data)

    doc = yaml.safe_load((DATA / FEATURES_FILE).read_text(encoding="utf-8"))
    for entry in doc["features"]:
        entry["client"], entry["exchanges"] = picked[entry["id"]]
    head = (DATA / FEATURES_FILE).read_text(encoding="utf-8").split("format:", 1)[0]
    body = yaml.safe_dump(
        doc, sort_keys=False, width=100, allow_unicode=True, default_flow_style=None
    )
    (DATA / FEATURES_FILE).write_text(head + body, encoding="utf-8")

    clients: list[dict[str, Any]] = []
    by_name = {c.name: c for c in captured}
    for client in load_clients():  # the ids and names as clients.yaml holds them, in order
        got = by_name[client.id]
        clients.append(
            {
                "id": client.id,
                "name": client.name,
                "needs": needs_of(got.records, features),
                "captured": captured_line(got.records),
            }
        )
    text = (
        "# Generated by scripts/regen-probe.py from each client's captured traffic\n"
        "# (tests/clients/probe/): what it needs is every feature its requests exercise.\n"
        "# Only a client's id and name are typed here; the script keeps them, in order.\n"
        "# tests/clients/test_probe_needs.py captures the clients again and compares.\n"
    )
    text += yaml.safe_dump({"format": "wirediff-probe-clients/1", "clients": clients},
                           sort_keys=False, width=100)  # fmt: skip
    (DATA / CLIENTS_FILE).write_text(text, encoding="utf-8")
    print(f"regen-probe: {len(ordered)} exchanges, {len(features)} features, "
          f"{len(clients)} clients → {DATA}", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
