"""`wirediff diagnose CAPTURE… [--json] [--baseline LABEL]`: failing chains and their
diagnoses, for any mix of captures and replays."""

from __future__ import annotations

import argparse
import json
from typing import Any

from wirediff.errors import UsageError
from wirediff.record.store import load_records

__all__ = ["register"]


def cmd_diagnose(args: argparse.Namespace) -> int:
    from wirediff.analysis.diagnosis.diagnose import diagnose, format_diagnoses

    records = load_records(args.captures)
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
    return 0


def register(sub: Any) -> None:
    d = sub.add_parser("diagnose", help="explain failing chains (401/404/405, soft errors, …)")
    d.add_argument("captures", nargs="+", metavar="CAPTURE", help="wirediff/1 .jsonl files")
    d.add_argument("--json", action="store_true", help="print the diagnoses as JSON")
    d.add_argument(
        "--baseline",
        metavar="LABEL",
        help="accepted as `report` and `check` take it (checked to name a label): a diagnosis "
        "explains one backend's own chain, whichever the baseline",
    )
    d.set_defaults(func=cmd_diagnose)
