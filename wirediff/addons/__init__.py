"""mitmproxy addons: `mitmdump -s addons/capture.py` (and `wirediff addon-path`)."""
