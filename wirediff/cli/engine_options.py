"""Add `--engine local|dask` and `--scheduler ADDRESS`, which say where commands run.

The commands are `report`, `check`, `diagnose` and `export`; the engine is `wirediff.engine`."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_engine_options", "open_run"]

ENGINES = ("local", "dask")


def add_engine_options(p: Any) -> None:
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local: this machine's cores (default); dask: a Dask cluster (pip install "
        "'wirediff[dask]')",
    )
    p.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="the Dask scheduler (tcp://host:8786); without it, a local Dask cluster",
    )


def open_run(args: argparse.Namespace) -> Any:
    """Open the command's `wirediff.engine.run.Run`, imported only when a command runs."""
    from wirediff.engine.run import Run

    return Run(args.engine, args.scheduler)
