"""Tests of :mod:`evtsync.evt`."""
