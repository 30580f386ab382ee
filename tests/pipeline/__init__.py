"""Tests of :mod:`evtsync.pipeline`."""
