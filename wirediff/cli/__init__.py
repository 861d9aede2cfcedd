"""The `wirediff` command line: one module per command, each with `register(subparsers)`.

Exit codes (see `wirediff.cli.runner`; each command's `--help` lists its own): 0 ok, 1 a
finding (`check`, `diagnose --fail`), 2 bad usage or unreadable input, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from wirediff import __version__
from wirediff.cli import (
    addon_path,
    capture_command,
    check,
    convert,
    demo,
    diagnose,
    export,
    probe,
    replay,
    report,
    stand_in,
)
from wirediff.cli.runner import Parser, run

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="wirediff", description="OpenAI-API compatibility, visible on the wire.")
    p.add_argument("--version", action="version", version=f"wirediff {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (
        demo,
        capture_command,
        replay,
        report,
        diagnose,
        check,
        probe,
        convert,
        export,
        stand_in,
        addon_path,
    ):
        command.register(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
