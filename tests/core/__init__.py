"""Tests of :mod:`evtsync.core`."""
