"""`python -m wirediff`: the command line."""

import sys

from wirediff.cli import main

sys.exit(main())
