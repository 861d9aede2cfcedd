"""The `wirediff` command line. Exit codes: 0 ok, 1 divergent (`check`), 2 bad usage/input."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from analysis.gate import GateUsageError
from analysis.store import CaptureError, RecordWriter

Command = Callable[[argparse.Namespace], int]


class UsageError(Exception):
    """Bad usage or unreadable input: one line on stderr, exit 2."""


def cmd_import(args: argparse.Namespace) -> int:
    from analysis.importer import import_flows

    src = Path(args.file)
    out = Path(args.output) if args.output else src.with_suffix(".jsonl")
    if out.exists() and out.stat().st_size:
        raise UsageError(f"{out} exists: choose another -o (captures are never overwritten)")
    records = import_flows(src)
    with RecordWriter(out) as w:
        for rec in records:
            w.write(rec)
    print(f"{len(records)} exchanges → {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="wirediff", description="OpenAI-API compatibility, visible on the wire."
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    imp = sub.add_parser("import", help="convert a mitmproxy .flow or a .har file to wirediff/1")
    imp.add_argument("file", help="a mitmdump -w flow file or a HAR file")
    imp.add_argument("-o", "--output", help="output .jsonl (default: FILE with .jsonl suffix)")
    imp.set_defaults(func=cmd_import)

    from analysis import demo, gate, replay
    from reports import cli as report_cli

    replay.register(sub)
    report_cli.register(sub)
    gate.register(sub)
    demo.register(sub)
    return p


def run_command(func: Command, args: argparse.Namespace) -> int:
    """Run one subcommand with the CLI's exit codes: bad usage or input is one line, 2."""
    try:
        return func(args)
    except (CaptureError, UsageError, GateUsageError) as e:
        print(f"wirediff: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"wirediff: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wirediff: interrupted", file=sys.stderr)
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args.func, args)


if __name__ == "__main__":
    sys.exit(main())
