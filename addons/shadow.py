"""Mirror live requests to candidate backends and record their answers, from a checkout.

Usage:
    mitmdump -s addons/capture.py -s addons/shadow.py --mode reverse:URL \
        --set shadow_to=LABEL=URL,... [--set shadow_key_env=LABEL=VAR,...]

This script is the checkout's entry point; the addon itself is `wirediff.addons.shadow`,
which an installed copy loads with `mitmdump -s "$(wirediff addon-path shadow)"`.
"""

from wirediff.addons.shadow import Shadow

addons = [Shadow()]
