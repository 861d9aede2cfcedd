"""What the addons share about mitmproxy stopping (no addon class here)."""

from __future__ import annotations

import asyncio
import logging

__all__ = ["quiet_cancelled_connections"]


class _CancelledConnection(logging.Filter):
    """asyncio's report of a client connection's task cancelled as mitmproxy stops with the
    connection open (a client's keep-alive): Python 3.11's streams ask the cancelled task
    for its exception, and the default handler prints the `CancelledError` as a traceback.
    Nothing failed: the proxy was told to stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        raised = record.exc_info[1] if record.exc_info else None
        return not (
            isinstance(raised, asyncio.CancelledError) and "StreamReaderProtocol" in str(record.msg)
        )


def quiet_cancelled_connections() -> None:
    """Leave out of the log what stopping with open connections is not (`_CancelledConnection`)."""
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, _CancelledConnection) for f in logger.filters):
        logger.addFilter(_CancelledConnection())
