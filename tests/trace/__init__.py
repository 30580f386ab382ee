"""Tests of :mod:`evtsync.trace`."""
