"""Tests of :mod:`evtsync.predict`."""
