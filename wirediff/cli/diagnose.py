"""`wirediff diagnose CAPTURE… [--json] [--engine local|dask [--scheduler ADDR]]`: failing
chains and their diagnoses."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from wirediff.cli.engine_options import add_engine_options, open_run

__all__ = ["register"]


def cmd_diagnose(args: argparse.Namespace) -> int:
    from wirediff.analysis.diagnosis.diagnose import format_chains

    out = sys.stdout
    with open_run(args) as run:
        rows = run.diagnose(args.captures)
        if args.json:
            sep = "[\n  "
            for frame in rows.frames():
                for item in frame.to_dict(orient="records"):
                    text = json.dumps(item, indent=2, default=str).replace("\n", "\n  ")
                    out.write(sep + text)
                    sep = ",\n  "
            out.write("[]\n" if sep.startswith("[") else "\n]\n")
            return 0
        if not len(rows):
            out.write("no failing chains: nothing to diagnose\n")
            return 0
        chains = 0
        for frame in rows.frames():
            if len(frame):
                out.write("\n".join(format_chains(frame)) + "\n")
                chains += frame["chain_id"].nunique()
        out.write(f"{len(rows)} diagnoses in {chains} chains\n")
    return 0


def register(sub: Any) -> None:
    d = sub.add_parser("diagnose", help="explain failing chains (401/404/405, soft errors, …)")
    d.add_argument(
        "captures",
        nargs="+",
        metavar="CAPTURE",
        help="wirediff/1 .jsonl files (a rotated session: any of its parts), or Parquet "
        "datasets from `wirediff export`",
    )
    d.add_argument("--json", action="store_true", help="print the diagnoses as JSON")
    add_engine_options(d)
    d.set_defaults(func=cmd_diagnose)
