"""`wirediff addon-path [capture|shadow]`: where an installed addon is, for `mitmdump -s`."""

from __future__ import annotations

import argparse
from typing import Any

from wirediff.cli.mitm import CAPTURE_ADDON

__all__ = ["ADDONS", "register"]

ADDONS = ("capture", "shadow")


def cmd_addon_path(args: argparse.Namespace) -> int:
    print(CAPTURE_ADDON.with_name(f"{args.addon}.py"))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "addon-path",
        help='print an addon\'s path: mitmdump -s "$(wirediff addon-path)" '
        '[-s "$(wirediff addon-path shadow)"]',
    )
    p.add_argument(
        "addon", nargs="?", choices=ADDONS, default="capture", help="which (default: capture)"
    )
    p.set_defaults(func=cmd_addon_path)
