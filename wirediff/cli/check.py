"""`wirediff check BASELINE CANDIDATE…`: the CI gate. A verdict per candidate and endpoint
family (and transport); exit 0 compatible, 1 not, 2 bad usage or input. A candidate is a
replay of the baseline, or a capture of the same app against another backend (paired by
request content and order; what pairs with nothing is counted per candidate).

By default the gate fails on `breaking` findings (and on families a candidate does not
support); `--fail-on-severity deviation` is stricter, `--fail-on KIND,…` also fails on
findings of those kinds at any severity. `--json FILE` writes the verdicts, `--junit FILE`
one testcase per candidate and family whose failure message holds the reasons.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pandas as pd

from wirediff._types import Record
from wirediff.analysis.comparison.kinds import SEVERITIES, kind_names, severity_rank
from wirediff.analysis.comparison.pairing import CONTENT, ONLY_BASELINE, ONLY_CANDIDATE
from wirediff.cli.inputs import read_captures
from wirediff.cli.runner import EXIT_FOUND, EXIT_OK, exit_codes
from wirediff.errors import UsageError

__all__ = ["CHECK_FORMAT", "gate", "parse_kinds", "register", "write_junit"]

ALL_KINDS = kind_names()
CHECK_FORMAT = "wirediff-check/1"
FAILING_VERDICTS = frozenset({"breaking", "unsupported"})


def parse_kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown or not kinds:
        raise UsageError(
            f"--fail-on: unknown kind {', '.join(unknown) or '(none)'}; known: {', '.join(ALL_KINDS)}"
        )
    return kinds


def cell_name(family: str, transport: str) -> str:
    return family if transport == "http" else f"{family} ({transport})"


def gate(
    verdicts: pd.DataFrame,
    findings: pd.DataFrame,
    exchanges: pd.DataFrame,
    severity: str,
    fail_on: tuple[str, ...],
) -> pd.DataFrame:
    """The verdict rows with `fails`: a breaking or unsupported verdict, a finding at or
    above `severity`, or one of the `fail_on` kinds (candidates only; the baseline never
    fails the gate, it is shown)."""
    place = exchanges.assign(
        family=exchanges["family"].fillna("other").astype(str),
        transport=exchanges["transport"].fillna("http").astype(str),
    ).set_index("id")[["family", "transport"]]
    located = (
        findings.drop(columns=["family"]).merge(
            place, left_on="candidate_id", right_index=True, how="inner"
        )
        if len(findings)
        else None
    )
    failing: set[tuple[str, str, str]] = set()
    if located is not None and len(located):
        hit = (located["severity"].map(severity_rank) <= severity_rank(severity)) | located[
            "kind"
        ].isin(fail_on)
        for row in located.loc[hit, ["label", "family", "transport"]].itertuples(index=False):
            failing.add((str(row.label), str(row.family), str(row.transport)))
    fails = [
        role == "candidate"
        and (verdict in FAILING_VERDICTS or (label, family, transport) in failing)
        for label, role, family, transport, verdict in zip(
            *(verdicts[c].tolist() for c in ("label", "role", "family", "transport", "verdict")),
            strict=True,
        )
    ]
    return verdicts.assign(fails=fails)


def write_junit(gated: pd.DataFrame, out: str | os.PathLike[str]) -> Path:
    """One testsuite, one testcase per candidate and family (and transport)."""
    rows = gated[gated["role"] == "candidate"]
    suite = ET.Element(
        "testsuite",
        name="wirediff check",
        tests=str(len(rows)),
        failures=str(int(rows["fails"].sum())),
        errors="0",
    )
    for row in verdict_items(rows):
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"wirediff.{row['label']}",
            name=cell_name(row["family"], row["transport"]),
        )
        if row["fails"]:
            reasons = row["reasons"] or [row["verdict"]]
            failure = ET.SubElement(
                case, "failure", message="; ".join(reasons), type=row["verdict"]
            )
            failure.text = "\n".join(reasons)
        else:
            ET.SubElement(case, "system-out").text = row["verdict"]
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)
    return path


def verdict_items(gated: pd.DataFrame) -> list[dict[str, Any]]:
    """The verdict rows as JSON objects (`summary.schema.json`'s `verdict_row`)."""
    return [
        {
            "label": str(r["label"]),
            "role": str(r["role"]),
            "family": str(r["family"]),
            "transport": str(r["transport"]),
            "verdict": str(r["verdict"]),
            "reasons": [str(x) for x in r["reasons"]],
            "breaking": int(r["breaking"]),
            "deviations": int(r["deviations"]),
            "cosmetic": int(r["cosmetic"]),
            "exchanges": int(r["exchanges"]),
            **({"fails": bool(r["fails"])} if "fails" in r else {}),
        }
        for r in gated.to_dict("records")
    ]


def _label_of(records: list[Record], path: str) -> str:
    """The label of a baseline capture: that of most of its originals."""
    labels = Counter(str(r.get("label") or "") for r in records if not r.get("replay_of"))
    if not labels:
        raise UsageError(f"{path}: no original exchange to compare with (only replays)")
    return labels.most_common(1)[0][0]


def unmatched_counts(unmatched: pd.DataFrame, label: str) -> dict[str, int]:
    """`{"only in the baseline": n, "only in the candidate": m}` for one candidate label."""
    mine = unmatched[unmatched["label"] == label]
    return {side: int((mine["side"] == side).sum()) for side in (ONLY_BASELINE, ONLY_CANDIDATE)}


def cmd_check(args: argparse.Namespace) -> int:
    from wirediff.analysis.comparison.analyze import analyze, findings_of

    fail_on = parse_kinds(args.fail_on) if args.fail_on else ()
    baseline = read_captures([args.baseline])
    # every file read (and its records checked) before any is judged
    candidates = [(path, read_captures([path])) for path in args.candidates]
    base_label = _label_of(baseline, args.baseline)
    if args.baseline_label is not None:
        labels = list(dict.fromkeys(str(r.get("label") or "") for r in baseline))
        if args.baseline_label not in labels:
            raise UsageError(
                f"--baseline {args.baseline_label}: {args.baseline} has no exchange of that "
                f"label (labels: {', '.join(labels)})"
            )
        base_label = args.baseline_label
    records = list(baseline)
    ids_of: dict[str, set[str]] = {}
    for path, candidate in candidates:
        ids_of[path] = {str(r["id"]) for r in candidate}
        records += candidate
    result = analyze(records, baseline=base_label)
    pairs = result.pairs
    for path, ids in ids_of.items():
        if not pairs["candidate_id"].isin(ids).any():
            raise UsageError(
                f"{path}: no exchange pairs with {args.baseline} ({base_label}): none replays "
                "it and none asks what it asks (capture the same app, or `wirediff replay` it)"
            )
    gated = gate(
        result.verdicts,
        findings_of(result.divergences, result.conformance),
        result.exchanges,
        args.fail_on_severity,
        fail_on,
    )
    passed = not gated["fails"].any()
    what = f"{args.fail_on_severity} findings" + (
        f" and kinds {','.join(fail_on)}" if fail_on else ""
    )
    by_content = int((pairs["pairing"] == CONTENT).sum())
    kinds = [
        f"{n} {kind}"
        for n, kind in ((len(pairs) - by_content, "replayed"), (by_content, "paired-by-content"))
        if n
    ]
    print(
        f"{' and '.join(kinds)} exchanges compared with {len(baseline)} baseline exchanges "
        f"({base_label}); the gate fails on {what}"
    )
    content = pairs[pairs["pairing"] == CONTENT]
    unmatched = {}
    for label in sorted(set(content["label"].astype(str)) | set(result.unmatched["label"])):
        unmatched[label] = counts = unmatched_counts(result.unmatched, label)
        paired = int((content["label"] == label).sum())
        sides = ", ".join(f"{side}: {n}" for side, n in counts.items())
        print(f"  pairs  {label:<12} {paired} by content; {sides}")
    items = verdict_items(gated)
    for row in items:
        mark = "FAIL" if row["fails"] else ("base" if row["role"] != "candidate" else "ok")
        reason = row["reasons"][0] if row["reasons"] else ""
        name = cell_name(row["family"], row["transport"])
        print(f"  {mark:<4}  {row['label']:<12} {name:<24} {row['verdict']:<27} {reason}")
    if args.json:
        doc = {
            "format": CHECK_FORMAT,
            "passed": bool(passed),
            "fail_on_severity": args.fail_on_severity,
            "fail_on": list(fail_on),
            "verdicts": items,
            "unmatched": unmatched,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    if args.junit:
        write_junit(gated, args.junit)
    if passed:
        print("compatible: no candidate fails the gate")
        return EXIT_OK
    failing = [
        f"{r['label']} {cell_name(r['family'], r['transport'])} ({r['verdict']})"
        for r in items
        if r["fails"]
    ]
    print("not compatible: " + ", ".join(failing))
    return EXIT_FOUND


def register(sub: Any) -> None:
    c = sub.add_parser(
        "check",
        help="CI gate: exit 0 when compatible, 1 when not",
        epilog=exit_codes(
            {EXIT_OK: "compatible: no candidate fails the gate", EXIT_FOUND: "not compatible"}
        ),
    )
    c.add_argument("baseline", metavar="BASELINE", help="the baseline capture")
    c.add_argument(
        "--baseline",
        dest="baseline_label",
        metavar="LABEL",
        help="the baseline's label, when BASELINE holds several (default: the label of most "
        "of its originals)",
    )
    c.add_argument(
        "candidates",
        metavar="CANDIDATE",
        nargs="+",
        help="its replays (or shadow mirrors) to candidate backends, or captures of the same "
        "app against them (paired by request content and order)",
    )
    c.add_argument(
        "--fail-on-severity",
        choices=SEVERITIES,
        default="breaking",
        help="fail on findings of this severity or worse (default: breaking)",
    )
    c.add_argument(
        "--fail-on",
        metavar="KIND,…",
        help=f"also fail on findings of these kinds, at any severity (known: {','.join(ALL_KINDS)})",
    )
    c.add_argument("--json", metavar="FILE", help="write the verdicts as JSON")
    c.add_argument(
        "--junit",
        metavar="FILE",
        help="write a JUnit XML report (one testcase per candidate and family)",
    )
    c.set_defaults(func=cmd_check)
