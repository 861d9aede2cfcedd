"""`wirediff diagnose CAPTURE… [--json] [--fail] [--baseline LABEL] [--engine local|dask
[--scheduler ADDR]]`: failing chains and their diagnoses, for any mix of captures and replays."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from wirediff._support import printable
from wirediff.cli.engine_options import add_engine_options, open_run
from wirediff.cli.inputs import named_captures
from wirediff.cli.runner import EXIT_FOUND, EXIT_OK, exit_codes

__all__ = ["register"]


def cmd_diagnose(args: argparse.Namespace) -> int:
    from wirediff.analysis.diagnosis.explain import format_chains

    out = sys.stdout
    with named_captures(args.captures) as named, open_run(args) as run:
        rows = run.diagnose(named, baseline=args.baseline)
        if args.json:
            sep = "[\n  "
            for item in rows.to_dict(orient="records"):
                text = json.dumps(item, indent=2, default=str).replace("\n", "\n  ")
                out.write(sep + text)
                sep = ",\n  "
            out.write("[]\n" if sep.startswith("[") else "\n]\n")
        elif not len(rows):
            out.write("no failing chains: nothing to diagnose\n")
        else:
            out.write("\n".join(map(printable, format_chains(rows))) + "\n")
            out.write(f"{len(rows)} diagnoses in {rows['chain_id'].nunique()} chains\n")
    return EXIT_FOUND if args.fail and len(rows) else EXIT_OK


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
    d.add_argument(
        "captures",
        nargs="+",
        metavar="CAPTURE",
        help="wirediff/1 .jsonl files (a rotated session: any of its parts), or Parquet "
        "datasets from `wirediff export`",
    )
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
    add_engine_options(d)
    d.set_defaults(func=cmd_diagnose)
