"""Tests of :mod:`evtsync.nccltests`."""
