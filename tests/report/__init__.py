"""Tests of :mod:`evtsync.report`."""
