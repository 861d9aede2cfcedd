"""The CLI's exit codes in one place: 0 ok, 1 a finding (`check`, `diagnose --fail`), 2 bad
usage or unreadable input (one line, never a traceback), 130 interrupted."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from wirediff.errors import WirediffError

__all__ = ["Command", "run_command", "standalone"]

Command = Callable[[argparse.Namespace], int]


def run_command(func: Command, args: argparse.Namespace) -> int:
    """Run one subcommand with the CLI's exit codes."""
    try:
        return func(args)
    except WirediffError as e:
        print(f"wirediff: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"wirediff: error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wirediff: interrupted", file=sys.stderr)
        return 130


def standalone(register: Callable[[Any], None], name: str, argv: Sequence[str] | None) -> int:
    """One subcommand on its own (`python -m wirediff.cli.report …`, tests), with the CLI's
    parser for it and its exit codes."""
    parser = argparse.ArgumentParser(prog="wirediff")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    return run_command(args.func, args)
