"""Tables that list every row — every finding and every diagnosis (`--findings`, the
CSV) — handed out in frames, in order, so that writing them
never needs them all in memory: an analysis held in memory hands out its own frame, the
partitioned engine (`wirediff.engine`) frames read back from disk."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pandas as pd

__all__ = ["Rows"]


class Rows:
    """`count` rows, as frames of the same columns, in order."""

    def __init__(
        self,
        count: int,
        frames: Callable[[], Iterator[pd.DataFrame]],
        lines: Callable[[], Iterator[str]] | None = None,
    ) -> None:
        self.count = count
        self._frames = frames
        self.lines = lines
        """Each row's line of `--findings` (`wirediff.reports.items`), in order, when it
        was made beforehand (by the engine's workers)."""

    @classmethod
    def of(cls, frame: pd.DataFrame) -> Rows:
        return cls(len(frame), lambda: iter([frame]))

    def __len__(self) -> int:
        return self.count

    def frames(self) -> Iterator[pd.DataFrame]:
        return self._frames()

    def frame(self) -> pd.DataFrame:
        """All of them in one frame (for callers that hold them anyway)."""
        parts = [f for f in self.frames() if len(f)]
        if not parts:
            return next(iter(self.frames()), pd.DataFrame())
        return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
