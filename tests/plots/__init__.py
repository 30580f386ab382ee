"""Tests of :mod:`evtsync.plots`."""
