"""``python -m evtsync``: same as the ``evtsync`` console script."""

from evtsync.cli import console_main

console_main()
