"""Write the single-file HTML report: `wirediff report`.

`wirediff report CAPTURE… [-o report.html] [--json summary.json] [--findings FILE]
[--csv divergences.csv] [--ignore-config wirediff.yaml] [--baseline LABEL] [--max-examples N]
[--engine local|dask [--scheduler ADDR]]`"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wirediff._support import plural, read_yaml
from wirediff.cli.engine_options import add_engine_options, open_run
from wirediff.cli.inputs import distinct_outputs, named_captures, on_stdout
from wirediff.cli.runner import exit_codes, standalone
from wirediff.errors import UsageError
from wirediff.reports import DEFAULT_MAX_EXAMPLES

__all__ = ["BASELINE_HELP", "IGNORE_HELP", "load_ignore", "main_report", "register"]

CONFIG_NAME = "wirediff.yaml"
IGNORE_HELP = (
    "a wirediff.yaml, or a folder holding one, with `ignore:` path patterns, left out of the "
    "findings"
)
BASELINE_HELP = (
    "the label the others are compared with, when the files do not imply one (replays imply "
    "the label they were replayed from); default: the first capture's label"
)


def load_ignore(path: str | Path) -> tuple[str, ...]:
    """Read the `ignore:` patterns of a `wirediff.yaml` given on the command line.

    It must exist, as a file or a directory holding one."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{p}: no such ignore config")
    if p.is_dir():
        p = p / CONFIG_NAME
        if not p.is_file():  # nothing would be left out, silently
            raise UsageError(f"{path}: a folder without a {CONFIG_NAME}; name the file")
    try:
        config = read_yaml(p)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if config is None:
        return ()
    if not isinstance(config, dict):
        raise UsageError(f"{p}: expected a mapping with an `ignore:` list")
    from wirediff.replay.config import config_keys

    unknown = sorted(map(str, set(config) - config_keys()))
    if unknown:  # a misspelt `ignore:` would leave out nothing, silently
        raise UsageError(f"{p}: unknown key {unknown[0]!r} (ignore: the paths to leave out)")
    patterns = config.get("ignore") or []
    if not isinstance(patterns, list) or not all(isinstance(x, str) for x in patterns):
        raise UsageError(f"{p}: `ignore` must be a list of path patterns")
    return tuple(patterns)


def cmd_report(args: argparse.Namespace) -> int:
    from wirediff.reports.render import render_html, write_csv, write_findings, write_summary

    if args.max_examples < 1:
        raise UsageError("--max-examples must be at least 1")
    ignore = load_ignore(args.ignore_config) if args.ignore_config else ()
    t0 = time.monotonic()
    outputs = {
        "-o": args.output,
        "--json": args.json,
        "--findings": args.findings,
        "--csv": args.csv,
    }
    distinct_outputs(args.captures, outputs)
    piped = on_stdout(outputs)
    with named_captures(args.captures) as named, open_run(args) as run:
        model = run.report(
            named, ignore=ignore, max_examples=args.max_examples, baseline=args.baseline
        )
        html = render_html(model, args.output)
        written = [html] if args.output != "-" else []
        if args.json:
            summary = write_summary(model, args.json)
            if args.json != "-":  # `-`: on stdout, for a pipeline
                written.append(summary)
        if args.findings:
            findings = write_findings(model, args.findings)
            if args.findings != "-":
                written.append(findings)
        if args.csv:
            table = write_csv(model, args.csv)
            if args.csv != "-":
                written.append(table)
    t = model.totals
    print(
        f"{plural(t['exchanges'], 'exchange')}, {plural(t['pairs'], 'pair')}: "
        f"{plural(t['divergences'], 'divergence')}, "
        f"{plural(t['conformance'], 'conformance finding')}, "
        f"{plural(t['diagnoses'], 'diagnosis', 'diagnoses')} "
        f"({time.monotonic() - t0:.1f}s)",
        file=sys.stderr,
    )
    paths_to = sys.stderr if piped else sys.stdout  # stdout may be the summary's
    for path in written:
        print(path, file=paths_to)
    return 0


def register(subparsers: Any) -> None:
    """Add `report` to the `wirediff` command line."""
    p = subparsers.add_parser(
        "report",
        help="render report.html (and summary.json, divergences.csv) from captures",
        epilog=exit_codes({0: "the report (and --json, --csv) written"}),
    )
    p.add_argument(
        "captures",
        nargs="+",
        metavar="CAPTURE",
        help="wirediff/1 .jsonl captures (a rotated session: any of its parts), or Parquet "
        "datasets from `wirediff export` (a directory or an fsspec URL)",
    )
    p.add_argument(
        "-o",
        "--output",
        default="report.html",
        help="HTML report (default: report.html; -: to stdout)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the summary as JSON (-: to stdout)")
    p.add_argument(
        "--findings",
        metavar="FILE",
        help="also write every finding and diagnosis as JSON Lines (-: to stdout)",
    )
    p.add_argument(
        "--csv", metavar="FILE", help="also write the divergence table as CSV (-: to stdout)"
    )
    p.add_argument("--ignore-config", metavar="FILE", help=IGNORE_HELP)
    p.add_argument("--baseline", metavar="LABEL", help=BASELINE_HELP)
    p.add_argument(
        "--max-examples",
        type=int,
        default=DEFAULT_MAX_EXAMPLES,
        metavar="N",
        help=f"examples named per folded finding, the first laid out (default: {DEFAULT_MAX_EXAMPLES})",
    )
    add_engine_options(p)
    p.set_defaults(func=cmd_report)


def main_report(argv: Sequence[str] | None = None) -> int:
    """Run `wirediff report …` on its own, for tests and `python -m wirediff.cli.report`."""
    return standalone(register, "report", argv)


if __name__ == "__main__":
    sys.exit(main_report())
