"""`wirediff diagnose` and `wirediff check`: the terminal and CI faces of the analysis."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pandas as pd

from analysis.store import load_records

ALL_KINDS = (
    "status", "soft_error", "error_shape", "transport", "schema_missing", "schema_extra",
    "schema_type", "enum", "event_missing", "event_extra", "event_order", "event_terminal",
    "event_sequence", "header", "conformance",
)  # fmt: skip
DEFAULT_FAIL_ON = tuple(k for k in ALL_KINDS if k not in ("header", "conformance"))


class GateUsageError(ValueError):
    """Bad `check`/`diagnose` usage: one line, exit 2."""


def parse_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown or not kinds:
        raise GateUsageError(
            f"--fail-on: unknown kind {', '.join(unknown) or '(none)'}; known: {', '.join(ALL_KINDS)}"
        )
    return kinds


def cmd_diagnose(args: argparse.Namespace) -> int:
    from analysis.diagnose import diagnose, format_diagnoses

    df = diagnose(load_records(args.captures))
    if args.json:
        print(json.dumps(df.to_dict(orient="records"), indent=2, default=str))
    else:
        print(format_diagnoses(df), end="")
    return 0


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
    from analysis.analyze import analyze

    fail_on = parse_kinds(args.fail_on) if args.fail_on else DEFAULT_FAIL_ON
    baseline = load_records([args.baseline])
    candidate = load_records([args.candidate])
    base_ids = {r["id"] for r in baseline}
    linked = [r for r in candidate if r.get("replay_of") in base_ids]
    if not linked:
        raise GateUsageError(
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
    d = sub.add_parser("diagnose", help="explain failing chains (401/404/405, soft errors, …)")
    d.add_argument("captures", nargs="+", metavar="CAPTURE", help="wirediff/1 .jsonl files")
    d.add_argument("--json", action="store_true", help="print the diagnoses as JSON")
    d.set_defaults(func=cmd_diagnose)

    c = sub.add_parser("check", help="CI gate: exit 0 when compatible, 1 when divergent")
    c.add_argument("baseline", metavar="BASELINE", help="the original capture")
    c.add_argument(
        "candidate", metavar="CANDIDATE", help="its replay against the candidate backend"
    )
    c.add_argument(
        "--fail-on",
        metavar="KIND,…",
        help=f"divergence kinds that fail the gate (default: all but header and conformance; known: {','.join(ALL_KINDS)})",
    )
    c.set_defaults(func=cmd_check)
