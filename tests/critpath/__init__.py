"""Tests of :mod:`evtsync.critpath`."""
