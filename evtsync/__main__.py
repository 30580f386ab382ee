"""``python -m evtsync``: same as the ``evtsync`` console script."""

import sys

from evtsync.cli import main

sys.exit(main())
