"""Run the command line as `python -m wirediff`."""

import sys

from wirediff.cli import main

sys.exit(main())
