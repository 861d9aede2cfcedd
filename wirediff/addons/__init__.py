"""Provide the mitmproxy addons for `mitmdump -s addons/capture.py` and `wirediff addon-path`."""

__all__ = ["READY_ENV"]

READY_ENV = "WIREDIFF_CAPTURE_READY"
"""The environment variable naming a file the capture addon creates once it records.

The file tells a program that starts mitmdump that the capture started. A listening port
alone does not: mitmdump loads scripts after it listens, and stops if one fails."""
