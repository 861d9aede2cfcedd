"""Gate CI with `wirediff check BASELINE [CANDIDATE…]`: a verdict per candidate and family.

Verdicts are per transport too, where a family has several. It exits 0 when compatible, 1 when
not, 2 on bad usage or input. A candidate is a replay of the baseline, or a capture of the same
app against another backend, paired by request content and order; what pairs with nothing is
counted per candidate. Given the baseline alone, its other labels are the candidates.

By default the gate fails on `breaking` findings and on families a candidate does not support;
`--fail-on-severity deviation` is stricter, and `--fail-on KIND,…` also fails on findings of
those kinds at any severity. `--json FILE` writes the verdicts, `--junit FILE` one testcase per
candidate and family whose failure message holds the reasons.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree as ET

from wirediff._support import naming, plural, printable
from wirediff.analysis.comparison.kinds import SEVERITIES, kind_names, severity_rank
from wirediff.cli.engine_options import add_engine_options, open_run
from wirediff.cli.inputs import among, distinct_outputs, named_captures, on_stdout
from wirediff.cli.report import IGNORE_HELP, load_ignore
from wirediff.cli.runner import EXIT_FOUND, EXIT_OK, exit_codes
from wirediff.errors import UsageError
from wirediff.record.scrub import scrub_output

if TYPE_CHECKING:  # the analysis and the report are imported when a command runs
    import pandas as pd

    from wirediff.analysis.index.analyze import GateCounts

__all__ = ["CHECK_FORMAT", "gate_from", "parse_kinds", "register", "write_junit"]

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


def gate_from(
    verdicts: pd.DataFrame, counts: GateCounts, severity: str, fail_on: tuple[str, ...]
) -> pd.DataFrame:
    """Mark the verdict rows that fail the gate: `fails`, and what they fail on, `fails_on`.

    A row fails with a breaking or unsupported verdict, a finding at or above `severity`, or one
    of the `fail_on` kinds, judged from the worst severity and the kinds of each cell's findings.
    Only candidates fail: the baseline never fails the gate, it is shown; nor does a candidate's
    `unsupported` verdict where it does as the baseline does (`as_the_baseline`)."""
    import pandas as pd

    from wirediff.analysis.comparison.verdicts import as_the_baseline

    columns = (verdicts[c].tolist() for c in ("label", "role", "family", "transport", "verdict"))
    fails_on: list[list[str]] = []
    for label, role, family, transport, verdict, alike in zip(
        *columns, as_the_baseline(verdicts).tolist(), strict=True
    ):
        rank, kinds = counts.get((label, family, transport), (len(SEVERITIES), frozenset()))
        why = [f"its verdict, {verdict}"] if verdict in FAILING_VERDICTS and not alike else []
        if rank <= severity_rank(severity):
            why.append(f"a {SEVERITIES[rank]} finding (--fail-on-severity {severity})")
        why += [f"a {kind} finding (--fail-on)" for kind in sorted(kinds & set(fail_on))]
        fails_on.append(why if role == "candidate" else [])
    gated = verdicts.assign(fails=[bool(why) for why in fails_on])
    gated["fails_on"] = pd.Series(fails_on, index=verdicts.index, dtype=object)
    return gated


def write_junit(
    gated: pd.DataFrame, out: str | os.PathLike[str], suite_name: str = "wirediff check"
) -> Path:
    """Write one testsuite, with one testcase per candidate, family and transport; `-`: stdout."""
    from wirediff.reports.bottom_line import cell_name

    rows = gated[gated["role"] == "candidate"]
    suite = ET.Element(
        "testsuite",
        name=suite_name,
        tests=str(len(rows)),
        failures=str(int(rows["fails"].sum())),
        errors="0",
    )
    for row in verdict_items(rows):
        case = ET.SubElement(
            suite,
            "testcase",
            classname=printable(f"wirediff.{row['label']}"),
            name=printable(cell_name(row["family"], row["transport"])),
        )
        if row["fails"]:
            said = [*row["fails_on"], *row["reasons"]] or [row["verdict"]]
            reasons = [printable(r) for r in said]
            failure = ET.SubElement(
                case, "failure", message="; ".join(reasons), type=row["verdict"]
            )
            failure.text = "\n".join(reasons)
        else:
            ET.SubElement(case, "system-out").text = row["verdict"]
    for element in suite.iter():  # scrubbed as values: XML escapes the quotes around them
        element.text = scrub_output(element.text)
        element.attrib = scrub_output(element.attrib)
    tree = ET.ElementTree(suite)
    path = Path(out)
    if str(out) == "-":
        sys.stdout.flush()
        tree.write(sys.stdout.buffer, encoding="utf-8", xml_declaration=True)
        sys.stdout.buffer.flush()
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with naming(path):
        tree.write(path, encoding="utf-8", xml_declaration=True)
    return path


def verdict_items(gated: pd.DataFrame) -> list[dict[str, Any]]:
    """Turn the gated verdict rows into JSON objects, `summary.schema.json`'s `verdict_row`."""
    from wirediff.reports.model import verdict_rows
    from wirediff.reports.render import verdict_item

    gates = zip(gated["fails"].tolist(), gated["fails_on"].tolist(), strict=True)
    return [
        {**verdict_item(v), "fails": bool(f), "fails_on": list(on)}
        for v, (f, on) in zip(verdict_rows(gated), gates, strict=True)
    ]


def unmatched_counts(unmatched: pd.DataFrame, label: str) -> dict[str, int]:
    """Count one candidate label's unmatched calls per side.

    The counts read `{"only in the baseline": n, "only in the candidate": m}`."""
    from wirediff.analysis.comparison.pairing import ONLY_BASELINE, ONLY_CANDIDATE

    mine = unmatched[unmatched["label"] == label]
    return {side: int((mine["side"] == side).sum()) for side in (ONLY_BASELINE, ONLY_CANDIDATE)}


def cmd_check(args: argparse.Namespace) -> int:
    from wirediff.cli.judge import judge
    from wirediff.reports.bottom_line import bottom_line, cell_name

    fail_on = parse_kinds(args.fail_on) if args.fail_on is not None else ()
    inputs = [args.baseline, *args.candidates]
    distinct_outputs(inputs, {"--json": args.json, "--junit": args.junit})
    for n, candidate in enumerate(args.candidates):
        if among(Path(candidate), [Path(args.baseline)]):
            raise UsageError(f"{candidate}: the baseline itself; a candidate is another capture")
        if among(Path(candidate), [Path(c) for c in args.candidates[:n]]):
            raise UsageError(f"{candidate}: given twice")
    piped = on_stdout({"--json": args.json, "--junit": args.junit})
    ignore = load_ignore(args.ignore_config) if args.ignore_config else ()
    with named_captures(inputs) as named, open_run(args) as run:
        result = judge(run, named[0], named[1:], args.baseline_label, ignore=ignore)
    gated = gate_from(result.verdicts, result.gate, args.fail_on_severity, fail_on)
    passed = not gated["fails"].any()
    lines = sys.stderr if piped else sys.stdout  # `--json -`, `--junit -`: stdout is theirs

    def say(text: str) -> None:
        print(printable(text), file=lines)

    verdict_line = bottom_line(result.verdicts)
    items = verdict_items(gated)
    unmatched = {
        label: unmatched_counts(result.unmatched, label)
        for label in sorted(set(result.by_content) | set(result.unmatched["label"]))
    }
    if args.json:  # the files first: one that cannot be written ends the command, said alone
        doc = {
            "format": CHECK_FORMAT,
            "passed": bool(passed),
            "fail_on_severity": args.fail_on_severity,
            "fail_on": list(fail_on),
            "bottom_line": verdict_line,
            "verdicts": items,
            "unmatched": unmatched,
        }
        text = scrub_output(json.dumps(doc, indent=1, ensure_ascii=False)) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            with naming(args.json):
                Path(args.json).write_text(text, encoding="utf-8")
    if args.junit:
        write_junit(gated, args.junit)
    for sentence in verdict_line:
        say(sentence)
    what = f"{args.fail_on_severity} findings" + (
        f" and kinds {','.join(fail_on)}" if fail_on else ""
    )
    replayed, by_content = sum(result.replayed.values()), sum(result.by_content.values())
    kinds = [
        f"{n:,} {kind}"
        for n, kind in ((replayed, "replayed"), (by_content, "paired-by-content"))
        if n
    ]
    compared = "exchange" if replayed + by_content == 1 else "exchanges"
    baseline = plural(result.baseline, "baseline exchange")
    say(
        f"{' and '.join(kinds)} {compared} compared with {baseline} ({result.label}); "
        f"the gate fails on {what}"
    )
    for label, counts in unmatched.items():
        replays, by_content = result.replayed.get(label, 0), result.by_content.get(label, 0)
        paired = [f"{replays:,} replayed"] if replays else []
        if by_content or not replays:  # a replay's calls are the baseline's: none are its own
            paired.append(f"{by_content:,} by content")
        sides = ", ".join(f"{side}: {n:,}" for side, n in counts.items() if n or not replays)
        say(f"  pairs  {label:<12} {', '.join(paired)}; {sides}")
    for row in items:
        mark = (
            "FAIL"
            if row["fails"]
            else {"baseline": "base", "candidate": "ok"}.get(row["role"], "-")
        )
        reason = row["reasons"][0] if row["reasons"] else ""
        if row["fails"] and row["verdict"] not in FAILING_VERDICTS:  # what fails it, first
            reason = " — ".join(["; ".join(row["fails_on"]), *([reason] if reason else [])])
        name = cell_name(row["family"], row["transport"])
        say(f"  {mark:<4}  {row['label']:<12} {name:<24} {row['verdict']:<27} {reason}".rstrip())
    if passed:
        say("compatible: no candidate fails the gate")
        return EXIT_OK
    failing = [
        f"{r['label']} {cell_name(r['family'], r['transport'])} ({r['verdict']})"
        for r in items
        if r["fails"]
    ]
    say("not compatible: " + ", ".join(failing))
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
        nargs="*",
        help="its replays (or shadow mirrors) to candidate backends, or captures of the same "
        "app against them (paired by request content and order); none: the labels in "
        "BASELINE other than the baseline's are the candidates",
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
        help=f"also fail on findings of these kinds, at any severity (known: {', '.join(ALL_KINDS)})",
    )
    c.add_argument("--ignore-config", metavar="FILE", help=IGNORE_HELP)
    c.add_argument(
        "--json",
        metavar="FILE",
        help="write the verdicts as JSON (`-`: on stdout, the lines then on stderr)",
    )
    c.add_argument(
        "--junit",
        metavar="FILE",
        help="write a JUnit XML report (one testcase per candidate and family; `-`: on stdout, "
        "the lines then on stderr)",
    )
    add_engine_options(c)
    c.set_defaults(func=cmd_check)
