"""Quiet what mitmproxy stopping logs; no addon class here."""

from __future__ import annotations

import asyncio
import logging

__all__ = ["quiet_cancelled_connections"]


class _CancelledConnection(logging.Filter):
    """Drop asyncio's report of a client connection's task cancelled as mitmproxy stops.

    The connection is open, a client's keep-alive: Python 3.11's streams ask the cancelled task
    for its exception, and the default handler prints the `CancelledError` as a traceback.
    Nothing failed: the proxy was told to stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        raised = record.exc_info[1] if record.exc_info else None
        return not (
            isinstance(raised, asyncio.CancelledError) and "StreamReaderProtocol" in str(record.msg)
        )


def quiet_cancelled_connections() -> None:
    """Leave the `_CancelledConnection` reports out of the log: stopping is no failure."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _CancelledConnection) for f in logger.filters):
        logger.addFilter(_CancelledConnection())
