"""`wirediff diagnose CAPTURE… [--json] [--fail] [--baseline LABEL]`: failing chains and
their diagnoses, for any mix of captures and replays."""

from __future__ import annotations

import argparse
import json
from typing import Any

from wirediff.cli.inputs import read_captures
from wirediff.cli.runner import EXIT_FOUND, EXIT_OK, exit_codes
from wirediff.errors import UsageError

__all__ = ["register"]


def cmd_diagnose(args: argparse.Namespace) -> int:
    from wirediff.analysis.diagnosis.diagnose import diagnose, format_diagnoses

    records = read_captures(args.captures)
    if args.baseline is not None:
        labels = list(dict.fromkeys(str(r.get("label") or "") for r in records))
        if args.baseline not in labels:
            raise UsageError(
                f"--baseline {args.baseline}: no capture has that label (labels: {', '.join(labels)})"
            )
    df = diagnose(records)
    if args.json:
        print(json.dumps(df.to_dict(orient="records"), indent=2, default=str))
    else:
        print(format_diagnoses(df), end="")
    return EXIT_FOUND if args.fail and len(df) else EXIT_OK


def register(sub: Any) -> None:
    d = sub.add_parser(
        "diagnose",
        help="explain failing chains (401/404/405, soft errors, …)",
        epilog=exit_codes(
            {
                EXIT_OK: "diagnosed, whatever failed, unless --fail",
                EXIT_FOUND: "with --fail: a chain failed (a recovered one too: it is diagnosed)",
            }
        ),
    )
    d.add_argument("captures", nargs="+", metavar="CAPTURE", help="wirediff/1 .jsonl files")
    d.add_argument("--json", action="store_true", help="print the diagnoses as JSON")
    d.add_argument(
        "--fail",
        action="store_true",
        help="exit 1 when a chain failed (a recovered one too)",
    )
    d.add_argument(
        "--baseline",
        metavar="LABEL",
        help="accepted as `report` and `check` take it (checked to name a label): a diagnosis "
        "explains one backend's own chain, whichever the baseline",
    )
    d.set_defaults(func=cmd_diagnose)
