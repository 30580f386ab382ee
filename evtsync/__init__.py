"""evtsync: measure, explain and predict the synchronization tax in GPU scale-up domains.

The public API in one place::

    import evtsync
    traces = evtsync.load_traces("traces/")          # TraceSet of typed tables
    tax = evtsync.tax_table(traces)                   # one row per collective instance
    per_rank = evtsync.tax_table(traces, per_rank=True)
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pandas as pd

from evtsync.blocks import compute_zscores, zscore_table
from evtsync.collectives import Alignment, PGOverride, align_collectives
from evtsync.critpath import AttributionResult, attribute, inject_delay
from evtsync.errors import EvtsyncError
from evtsync.tax import TaxTables, compute_tax, tax_from_traces, tax_summary
from evtsync.trace.traceset import TraceSet, load_traces

__version__ = "0.1.0"

__all__ = [
    "Alignment", "AttributionResult", "EvtsyncError", "PGOverride", "TaxTables", "TraceSet",
    "align_collectives", "attribute", "compute_tax", "compute_zscores", "inject_delay",
    "load_traces", "tax_from_traces", "tax_summary", "tax_table", "zscore_table",
]


def tax_table(traces: TraceSet | str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
              per_rank: bool = False, **align_options: Any) -> pd.DataFrame:
    """The tax of every collective instance (or, with ``per_rank``, of every rank in it).

    ``traces`` is a loaded :class:`TraceSet` or paths to load; ``align_options`` go to
    :func:`evtsync.align_collectives` (``overrides``, ``end_tolerance_us``, ``strict``, ...).
    """
    if not isinstance(traces, TraceSet):
        traces = load_traces(traces)
    _, tables = tax_from_traces(traces, **align_options)
    return tables.ranks if per_rank else tables.collectives
