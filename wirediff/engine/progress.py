"""Draw a progress bar on long analyses, on a terminal only.

The bar shows tasks done and exchanges per second on stderr; elsewhere nothing is drawn."""

from __future__ import annotations

import sys
from typing import Any

from wirediff._support import terminal_bar

__all__ = ["Progress"]


class _Phase:
    def __init__(self, bar: Any, tasks: int) -> None:
        self.bar, self.tasks, self.finished = bar, tasks, 0

    def done(self, tasks: int, units: int) -> None:
        if self.bar is None:
            return
        self.finished += tasks
        self.bar.set_postfix_str(f"{self.finished}/{self.tasks} parts", refresh=False)
        self.bar.update(units)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Progress:
    """Draw `phase(name, tasks, unit)` bars when `shown`, that is when stderr is a terminal."""

    def __init__(self, shown: bool | None = None) -> None:
        self.shown = sys.stderr.isatty() if shown is None else shown

    def phase(self, name: str, total: int | None, unit: str, tasks: int) -> _Phase:
        """Start a bar of `total` units over `tasks` tasks; a `total` of None counts as they come."""
        if not self.shown or not tasks:
            return _Phase(None, tasks)
        bar = terminal_bar(total=total, desc=f"{name:<8}", unit=unit, unit_scale=True, leave=False)
        return _Phase(bar, tasks)
