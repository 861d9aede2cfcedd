"""`wirediff diagnose CAPTURE… [--json]`: failing chains and their diagnoses."""

from __future__ import annotations

import argparse
import json
from typing import Any

from wirediff.record.store import load_records

__all__ = ["register"]


def cmd_diagnose(args: argparse.Namespace) -> int:
    from wirediff.analysis.diagnosis.diagnose import diagnose, format_diagnoses

    df = diagnose(load_records(args.captures))
    if args.json:
        print(json.dumps(df.to_dict(orient="records"), indent=2, default=str))
    else:
        print(format_diagnoses(df), end="")
    return 0


def register(sub: Any) -> None:
    d = sub.add_parser("diagnose", help="explain failing chains (401/404/405, soft errors, …)")
    d.add_argument("captures", nargs="+", metavar="CAPTURE", help="wirediff/1 .jsonl files")
    d.add_argument("--json", action="store_true", help="print the diagnoses as JSON")
    d.set_defaults(func=cmd_diagnose)
