"""Tests of :mod:`evtsync.sync`."""
