"""Tests of :mod:`evtsync.synth`."""
