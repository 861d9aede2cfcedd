"""Define the errors wirediff raises for the user.

Each is one line on stderr and exit code 2."""

from __future__ import annotations

__all__ = ["CaptureError", "PlanError", "ServerAbsent", "UsageError", "WirediffError"]


class WirediffError(Exception):
    """Signal bad usage or unreadable input; the message is one line for the user."""


class UsageError(WirediffError):
    """Refuse a command line or a configuration that cannot be acted on."""


class CaptureError(WirediffError, ValueError):
    """Refuse a capture that cannot be read."""


class PlanError(WirediffError, ValueError):
    """Refuse a replay that cannot be planned: a bad filter, a record that cannot be sent."""


class ServerAbsent(WirediffError):
    """Report a server to probe that is not there.

    It is unreachable, not TLS where asked, not HTTP, not an OpenAI-style API, or refusing the
    key."""
