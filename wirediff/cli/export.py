"""Write captures as a Parquet dataset: `wirediff export CAPTURE… --parquet DIR`.

The dataset is a directory or an fsspec URL that `report`, `check` and `diagnose` read like the
captures."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from wirediff._support import plural
from wirediff.cli.engine_options import add_engine_options, open_run
from wirediff.cli.inputs import distinct_outputs, named_captures
from wirediff.cli.runner import EXIT_ERROR, EXIT_OK, exit_codes
from wirediff.errors import UsageError

__all__ = ["register"]


def _empty_target(out: str) -> None:
    """Refuse a target that exists and is not empty: datasets are never written over."""
    if "://" in out:
        from wirediff.engine.sources import filesystem

        fs, path = filesystem(out)
        if fs.exists(path) and fs.ls(path):
            raise UsageError(f"{out} exists and is not empty: choose another --parquet")
        return
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{out} is a file: --parquet names a directory to create")
    if p.exists() and any(p.iterdir()):
        raise UsageError(f"{out} exists and is not empty: choose another --parquet")


def cmd_export(args: argparse.Namespace) -> int:
    given = str(args.parquet).rstrip("/") or str(args.parquet)
    if not given:
        raise UsageError("--parquet needs a directory or a URL")
    if "://" not in given:
        distinct_outputs(args.captures, {"--parquet": given}, folders=True)
    _empty_target(given)
    # the tasks write the files, on a cluster's workers too: a path from here, absolute
    out = given if "://" in given else str(Path(given).absolute())
    with named_captures(args.captures) as named, open_run(args) as run:
        exchanges, events = run.export(named, out)
    print(f"{plural(exchanges, 'exchange')}, {plural(events, 'event')} → {given}")
    return EXIT_OK


def register(sub: Any) -> None:
    e = sub.add_parser(
        "export",
        help="write captures as a Parquet dataset",
        epilog=exit_codes(
            {
                EXIT_OK: "the dataset written",
                EXIT_ERROR: "bad usage or unreadable input, or a --parquet target that exists "
                "and is not empty (one line on stderr says why)",
            }
        ),
    )
    e.add_argument(
        "captures",
        nargs="+",
        metavar="CAPTURE",
        help="wirediff/1 .jsonl captures (a rotated session: any of its parts)",
    )
    e.add_argument(
        "--parquet",
        required=True,
        metavar="DIR",
        help="the dataset to write: a new directory, or an fsspec URL (s3://bucket/path)",
    )
    add_engine_options(e)
    e.set_defaults(func=cmd_export)
