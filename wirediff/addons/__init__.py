"""mitmproxy addons: `mitmdump -s addons/capture.py` (and `wirediff addon-path`)."""

__all__ = ["READY_ENV"]

READY_ENV = "WIREDIFF_CAPTURE_READY"
"""A file the capture addon creates once it records: how a program that starts mitmdump
knows the capture started (a listening port alone does not say so: mitmdump loads scripts
after it listens, and stops if one fails)."""
