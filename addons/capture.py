"""Record every exchange through mitmproxy as `wirediff/1` JSON Lines, from a checkout.

Usage:
    mitmdump -s addons/capture.py [--mode reverse:URL ...] --set capture_dir=DIR \
        [--set capture_session=NAME] [--set capture_label=LABEL]

This script is the checkout's entry point; the addon itself is `wirediff.addons.capture`,
which an installed copy loads with `mitmdump -s "$(wirediff addon-path)"`. Run it with the
mitmdump of the environment wirediff is installed in (`make demo` makes `.venv/bin/mitmdump`).
"""

from wirediff.addons.capture import Capture

addons = [Capture()]
