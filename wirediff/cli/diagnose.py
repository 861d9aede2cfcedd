"""Print failing chains and their diagnoses: `wirediff diagnose`.

It reads any mix of captures and replays:

`wirediff diagnose CAPTURE… [--json] [--fail] [--engine local|dask [--scheduler ADDR]]`

Chains diagnosed alike, their words the same but for ids and a cut answer's byte counts
(`told_alike`), are printed once, with how many they are."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from wirediff._support import printable
from wirediff.cli.engine_options import add_engine_options, open_run
from wirediff.cli.inputs import named_captures
from wirediff.cli.runner import EXIT_FOUND, EXIT_OK, exit_codes

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["fold_chains", "register"]

NAMED = 3
"""Chains named for a group of chains diagnosed alike."""


def fold_chains(frames: Iterable[pd.DataFrame]) -> list[tuple[list[str], list[str]]]:
    """Fold the lines of each distinct failing chain, from `format_chains`, once.

    Each comes with the ids of the chains diagnosed alike: the first `NAMED` of them, then `+N`.
    They come in the order of their first chain."""
    from wirediff.analysis.comparison.sameness import told_alike
    from wirediff.analysis.diagnosis.explain import format_chains

    groups: dict[tuple[str, ...], tuple[list[str], list[str]]] = {}
    for frame in frames:
        for chain_id, chain in frame.groupby("chain_id", sort=False) if len(frame) else ():
            lines = format_chains(chain)
            key = (lines[0].removeprefix(str(chain_id)), *map(told_alike, lines[1:]))
            lines_ids = groups.setdefault(key, (lines, []))
            lines_ids[1].append(str(chain_id))
    out = []
    for lines, ids in groups.values():
        if len(ids) > 1:
            named = ", ".join(ids[:NAMED]) + (f", +{len(ids) - NAMED}" if len(ids) > NAMED else "")
            lines = [f"{len(ids)} chains diagnosed alike ({named}); the first:", *lines]
        out.append((lines, ids))
    return out


def cmd_diagnose(args: argparse.Namespace) -> int:
    from wirediff.analysis.diagnosis.explain import count_line

    out = sys.stdout
    with named_captures(args.captures) as named, open_run(args) as run:
        rows = run.diagnose(named)
        if args.json:
            # a row a write: each is scrubbed whole, and the text of all is never held
            sep = "[\n  "
            for item in rows.to_dict(orient="records"):
                text = json.dumps(item, indent=2, default=str).replace("\n", "\n  ")
                out.write(sep + text)
                sep = ",\n  "
            out.write("[]\n" if sep.startswith("[") else "\n]\n")
        elif not len(rows):
            out.write("no failing chains: nothing to diagnose\n")
        else:
            groups = fold_chains([rows])
            for lines, _ in groups:
                out.write("\n".join(map(printable, lines)) + "\n")
            chains = sum(len(ids) for _, ids in groups)
            out.write(count_line(len(rows), chains, len(groups)) + "\n")
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
    add_engine_options(d)
    d.set_defaults(func=cmd_diagnose)
