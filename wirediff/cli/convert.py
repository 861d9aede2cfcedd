"""`wirediff import FILE(.flow|.har) [-o OUT.jsonl]`: other capture formats into `wirediff/1`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from wirediff.errors import UsageError
from wirediff.record.store import RecordWriter

__all__ = ["register"]


def cmd_import(args: argparse.Namespace) -> int:
    from wirediff.record.importer import import_flows

    src = Path(args.file)
    out = Path(args.output) if args.output else src.with_suffix(".jsonl")
    if out.exists() and out.stat().st_size:
        raise UsageError(f"{out} exists: choose another -o (captures are never overwritten)")
    records = import_flows(src)
    with RecordWriter(out) as w:
        for rec in records:
            w.write(rec)
    w.check()
    print(f"{len(records)} exchanges → {out}")
    return 0


def register(sub: Any) -> None:
    imp = sub.add_parser("import", help="convert a mitmproxy .flow or a .har file to wirediff/1")
    imp.add_argument("file", help="a mitmdump -w flow file or a HAR file")
    imp.add_argument("-o", "--output", help="output .jsonl (default: FILE with .jsonl suffix)")
    imp.set_defaults(func=cmd_import)
