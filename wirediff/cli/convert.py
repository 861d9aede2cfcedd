"""Turn other capture formats into `wirediff/1`: `wirediff import FILE(.flow|.har) [-o OUT]`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from wirediff.cli.runner import EXIT_OK, exit_codes
from wirediff.errors import UsageError
from wirediff.record.store import RecordWriter

__all__ = ["register"]


def cmd_import(args: argparse.Namespace) -> int:
    from wirediff.record.importer import import_flows, source_kind

    src = Path(args.file)
    source_kind(src)  # the input first: its error says more than the output's
    out = Path(args.output) if args.output else src.with_suffix(".jsonl")
    if out.exists() and (out.is_dir() or out.stat().st_size):
        raise UsageError(f"{out} exists: choose another -o (captures are never overwritten)")
    records = import_flows(src)
    with RecordWriter(out) as w:
        for rec in records:
            w.write(rec)
    w.check()
    print(f"{len(records)} exchange{'' if len(records) == 1 else 's'} → {out}")
    return EXIT_OK


def register(sub: Any) -> None:
    imp = sub.add_parser(
        "import",
        help="convert a mitmproxy .flow or a .har file to wirediff/1",
        epilog=exit_codes(
            {EXIT_OK: "converted: the output holds every HTTP exchange of FILE (at least one)"}
        ),
    )
    imp.add_argument("file", metavar="FILE", help="a mitmdump -w flow file or a HAR file")
    imp.add_argument("-o", "--output", help="output .jsonl (default: FILE with .jsonl suffix)")
    imp.set_defaults(func=cmd_import)
