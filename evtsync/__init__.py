"""evtsync: measure, explain and predict the synchronization tax in GPU scale-up domains.

The public API in one place::

    import evtsync
    traces = evtsync.load_traces("traces/")          # TraceSet of typed tables
    tax = evtsync.tax_table(traces)                   # one row per collective instance
    per_rank = evtsync.tax_table(traces, per_rank=True)
    causes = evtsync.attribute(traces)                # critical-path attribution tables
    z = evtsync.zscore_table(traces)                  # pooled z-scores of block maxima
    mle = evtsync.fit_mle(z["z"], family="gev")       # MLE baseline
    fit = evtsync.fit_table(z, evtsync.load_spec("models/gev-hier-gpu-precision.toml"))
    table, verdict = evtsync.compare_fits([fit, other])
    tau = evtsync.tau_summary(fit, n=[8, 64, 512], block_sd_us=24.0)

The Bayesian names (PyMC) are imported on first use, so ``import evtsync`` stays light.
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
from evtsync.evt.mle import fit_mle
from evtsync.tax import TaxTables, compute_tax, tax_from_traces, tax_summary
from evtsync.trace.traceset import TraceSet, load_traces

__version__ = "0.1.0"

#: Bayesian API (imports PyMC): name -> module, resolved on first access.
_LAZY = {
    "load_spec": "evtsync.evt.spec", "fit_table": "evtsync.evt.fit", "load_fit": "evtsync.evt.fit",
    "save_fit": "evtsync.evt.fit", "compare_fits": "evtsync.evt.compare",
    "tau_summary": "evtsync.evt.posterior", "bandwidth_summary": "evtsync.evt.posterior",
    "straggler_comparison": "evtsync.evt.posterior",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'evtsync' has no attribute {name!r}")


__all__ = [
    "Alignment", "AttributionResult", "EvtsyncError", "PGOverride", "TaxTables", "TraceSet",
    "align_collectives", "attribute", "compute_tax", "compute_zscores", "inject_delay",
    "load_traces", "tax_from_traces", "tax_summary", "tax_table", "zscore_table", "fit_mle",
    *sorted(_LAZY),
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
