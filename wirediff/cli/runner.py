"""The CLI's exit codes in one place: 0 ok, 1 a finding (`check`, `diagnose --fail`), 2 bad
usage, unreadable input or any other error (one line, never a traceback), 130 interrupted.
Warnings (a torn line skipped in a capture) are one line each on stderr."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from wirediff.errors import WirediffError

__all__ = ["DEBUG_ENV", "Command", "run_command", "standalone"]

Command = Callable[[argparse.Namespace], int]
DEBUG_ENV = "WIREDIFF_DEBUG"
"""Set to 1: an unexpected error prints its traceback too (still exit 2)."""


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"wirediff: {record.levelname.lower()}: {record.getMessage()}"


def _warnings_to_stderr() -> None:
    log = logging.getLogger("wirediff")
    if not any(getattr(h, "wirediff_cli", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_OneLine())
        handler.wirediff_cli = True  # type: ignore[attr-defined]
        log.addHandler(handler)
        log.setLevel(logging.WARNING)


def run_command(func: Command, args: argparse.Namespace) -> int:
    """Run one subcommand with the CLI's exit codes."""
    _warnings_to_stderr()
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
    except Exception as e:  # a bug, or input nothing above foresaw: never exit 1 ("found")
        if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            traceback.print_exc()
        message = " ".join(str(e).split())[:300]
        print(
            f"wirediff: error: unexpected {type(e).__name__}: {message} "
            f"(set {DEBUG_ENV}=1 for the traceback)",
            file=sys.stderr,
        )
        return 2


def standalone(register: Callable[[Any], None], name: str, argv: Sequence[str] | None) -> int:
    """One subcommand on its own (`python -m wirediff.cli.report …`, tests), with the CLI's
    parser for it and its exit codes."""
    parser = argparse.ArgumentParser(prog="wirediff")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args([name, *(sys.argv[1:] if argv is None else argv)])
    return run_command(args.func, args)
