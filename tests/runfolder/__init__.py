"""Tests of :mod:`evtsync.runfolder`."""
