"""Print where an installed addon is, for `mitmdump -s`: `wirediff addon-path [capture|shadow]`."""

from __future__ import annotations

import argparse
from typing import Any

from wirediff.cli.mitm import CAPTURE_ADDON
from wirediff.cli.runner import EXIT_OK, exit_codes

__all__ = ["ADDONS", "register"]

ADDONS = ("capture", "shadow")


def cmd_addon_path(args: argparse.Namespace) -> int:
    print(CAPTURE_ADDON.with_name(f"{args.addon}.py"))
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser(
        "addon-path",
        help='print an addon\'s path: mitmdump -s "$(wirediff addon-path)" '
        '[-s "$(wirediff addon-path shadow)"]',
        epilog=exit_codes({EXIT_OK: "the path printed"}),
    )
    p.add_argument(
        "addon", nargs="?", choices=ADDONS, default="capture", help="which (default: capture)"
    )
    p.set_defaults(func=cmd_addon_path)
