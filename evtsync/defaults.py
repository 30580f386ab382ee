"""Package-wide defaults, defined once (the interval level is ArviZ's ``ci_prob`` here)."""

from __future__ import annotations

#: Level of every interval evtsync reports unless the user asks for another (equal-tailed).
INTERVAL_LEVEL = 0.90
