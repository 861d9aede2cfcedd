"""Type aliases shared across wirediff, so signatures say what a thing is."""

from __future__ import annotations

from typing import Any

JSON = Any
"""A parsed JSON value."""

Record = dict[str, Any]
"""One `wirediff/1` exchange, as written to and read from a capture line."""

HeaderList = list[list[str]]
"""Headers as `[[name, value], ...]` in wire order, names lower-cased, secrets fingerprinted."""

Event = dict[str, Any]
"""One SSE event: `{"t_ms": float, "event": str | None, "data": JSON | str}`."""
