"""evtsync: measure, explain and predict the synchronization tax in GPU scale-up domains."""

from __future__ import annotations

__version__ = "0.1.0"
