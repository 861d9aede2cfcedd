"""`wirediff check BASELINE CANDIDATE`: the CI gate. Exit 0 compatible, 1 divergent, 2 bad input."""

from __future__ import annotations

import argparse
from typing import Any

import pandas as pd

from wirediff.analysis.comparison.kinds import KINDS, kind_names
from wirediff.errors import UsageError
from wirediff.record.store import load_records

ALL_KINDS = kind_names()
DEFAULT_FAIL_ON = tuple(k.name for k in KINDS.values() if k.fails_check)
"""What `--fail-on` defaults to: every kind the registry says fails the gate."""


def parse_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown or not kinds:
        raise UsageError(
            f"--fail-on: unknown kind {', '.join(unknown) or '(none)'}; known: {', '.join(ALL_KINDS)}"
        )
    return kinds


def gate_table(divergences: pd.DataFrame, fail_on: tuple[str, ...]) -> pd.DataFrame:
    """Counts of findings per target label and kind, flagged where they fail the gate."""
    if divergences.empty:
        return pd.DataFrame(columns=["label", "kind", "findings", "pairs", "fails"])
    table = (
        divergences.groupby(["label", "kind"])
        .agg(findings=("pair_id", "size"), pairs=("pair_id", "nunique"))
        .reset_index()
    )
    table["fails"] = table["kind"].isin(fail_on)
    return table


def cmd_check(args: argparse.Namespace) -> int:
    from wirediff.analysis.comparison.analyze import analyze

    fail_on = parse_kinds(args.fail_on) if args.fail_on else DEFAULT_FAIL_ON
    baseline = load_records([args.baseline])
    candidate = load_records([args.candidate])
    base_ids = {r["id"] for r in baseline}
    linked = [r for r in candidate if r.get("replay_of") in base_ids]
    if not linked:
        raise UsageError(
            f"{args.candidate}: no exchange replays {args.baseline} (run `wirediff replay` first)"
        )
    result = analyze(baseline + candidate)
    found: list[Any] = [result.divergences]
    if "conformance" in fail_on:
        conf = result.conformance
        found.append(
            conf[conf["candidate_id"].isin({r["id"] for r in linked})] if not conf.empty else conf
        )
    findings = (
        pd.concat([f for f in found if not f.empty])
        if any(not f.empty for f in found)
        else result.divergences
    )
    table = gate_table(findings, fail_on)
    failing = table[table["fails"]]
    print(f"{len(linked)} replayed exchanges compared against {len(baseline)} baseline exchanges")
    for row in table.itertuples():
        mark = "FAIL" if row.fails else "info"
        print(
            f"  {mark}  {row.label:<16} {row.kind:<16} {row.findings:>5} findings in {row.pairs} pairs"
        )
    if failing.empty:
        print("compatible: no divergence of the kinds " + ",".join(fail_on))
        return 0
    print(
        f"divergent: {int(failing['findings'].sum())} findings of kinds {','.join(sorted(set(failing['kind'])))}"
    )
    return 1


def register(sub: Any) -> None:
    c = sub.add_parser("check", help="CI gate: exit 0 when compatible, 1 when divergent")
    c.add_argument("baseline", metavar="BASELINE", help="the original capture")
    c.add_argument(
        "candidate", metavar="CANDIDATE", help="its replay against the candidate backend"
    )
    c.add_argument(
        "--fail-on",
        metavar="KIND,…",
        help=(
            "divergence kinds that fail the gate (default: all but "
            + " and ".join(k for k in ALL_KINDS if k not in DEFAULT_FAIL_ON)
            + f"; known: {','.join(ALL_KINDS)})"
        ),
    )
    c.set_defaults(func=cmd_check)
