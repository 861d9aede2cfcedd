"""Make OpenAI-API compatibility visible on the wire."""

from __future__ import annotations

__all__ = ["FORMAT", "__version__"]

__version__ = "0.1.0"

FORMAT = "wirediff/1"
"""The record format every capture line carries."""
