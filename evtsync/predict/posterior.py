"""Former home of the posterior prediction tables; they live in :mod:`evtsync.predict.tables` now.

Thin aliases kept for callers of the old names (``evtsync.tau_summary`` and the like). The
tables use the one column scheme of :mod:`evtsync.predict.tables` (``tau_lo_us``/``tau_hi_us``,
``bstar_mean_gbps``, ``measured_mean_us`` ...). Figures are in :mod:`evtsync.plots.predictions`.
"""

from __future__ import annotations

from evtsync.predict.tables import MEASURED_COLUMNS as STRAGGLER_COLUMNS
from evtsync.predict.tables import bandwidth_table as bandwidth_summary
from evtsync.predict.tables import predicted_vs_measured as straggler_comparison
from evtsync.predict.tables import tau_table as tau_summary

__all__ = ["STRAGGLER_COLUMNS", "bandwidth_summary", "straggler_comparison", "tau_summary"]
