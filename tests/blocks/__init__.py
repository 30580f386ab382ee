"""Tests of :mod:`evtsync.blocks`."""
