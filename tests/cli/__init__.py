"""Tests of :mod:`evtsync.cli`."""
