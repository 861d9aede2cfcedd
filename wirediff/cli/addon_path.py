"""`wirediff addon-path`: where the installed capture addon is, for `mitmdump -s`."""

from __future__ import annotations

import argparse
from typing import Any

from wirediff.cli.mitm import CAPTURE_ADDON

__all__ = ["register"]


def cmd_addon_path(args: argparse.Namespace) -> int:
    print(CAPTURE_ADDON)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "addon-path", help='print the capture addon\'s path: mitmdump -s "$(wirediff addon-path)"'
    )
    p.set_defaults(func=cmd_addon_path)
