"""The errors wirediff raises for the user: each is one line on stderr and exit code 2."""

from __future__ import annotations

__all__ = ["CaptureError", "PlanError", "ServerAbsent", "UsageError", "WirediffError"]


class WirediffError(Exception):
    """Bad usage or unreadable input; the message is one line for the user."""


class UsageError(WirediffError):
    """A command line or a configuration that cannot be acted on."""


class CaptureError(WirediffError, ValueError):
    """A capture that cannot be read."""


class PlanError(WirediffError, ValueError):
    """A replay that cannot be planned (a bad filter, a record that cannot be sent)."""


class ServerAbsent(WirediffError):
    """A server to probe that is not there: unreachable, not TLS where asked, not HTTP, not an
    OpenAI-style API, or refusing the key."""
