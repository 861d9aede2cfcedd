"""`wirediff addon-path`: where the installed capture addon is, for `mitmdump -s`."""

from __future__ import annotations

import argparse
from typing import Any

from wirediff.cli.mitm import CAPTURE_ADDON
from wirediff.cli.runner import EXIT_OK, exit_codes

__all__ = ["register"]


def cmd_addon_path(args: argparse.Namespace) -> int:
    print(CAPTURE_ADDON)
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser(
        "addon-path",
        help='print the capture addon\'s path: mitmdump -s "$(wirediff addon-path)"',
        epilog=exit_codes({EXIT_OK: "the path printed"}),
    )
    p.set_defaults(func=cmd_addon_path)
