"""evtsync: measure, explain and predict the synchronization tax in GPU scale-up domains.

The public API in one place::

    import evtsync
    traces = evtsync.load_traces("traces/")          # TraceSet of typed tables
    tax = evtsync.tax_table(traces)                   # one row per collective instance
    per_rank = evtsync.tax_table(traces, per_rank=True)
    parts = evtsync.step_breakdown(traces)            # per-rank compute / comm / wait / idle
    causes = evtsync.attribute(traces)                # critical-path attribution tables
    z = evtsync.zscore_table(traces)                  # pooled z-scores of block maxima
    mle = evtsync.fit_mle(z["z"], family="gev")       # MLE baseline
    fit = evtsync.fit_table(z, evtsync.load_spec("models/gev-hier-gpu-precision.toml"))
    table, verdict = evtsync.compare_fits([fit, other])
    tau = evtsync.tau_summary(fit, n=[8, 64, 512], block_sd_us=24.0)

Every name is imported on first use, so ``import evtsync`` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from evtsync.errors import EvtsyncError

if TYPE_CHECKING:
    import pandas as pd

    from evtsync.trace.traceset import TraceSet

__version__ = "0.1.0"

#: Public names -> the module that defines them, imported on first access: ``import
#: evtsync`` (and so every worker process that reads traces) does not pay for scipy,
#: PyMC or the critical-path code it may never use.
_LAZY = {
    "step_breakdown": "evtsync.breakdown", "summarise_breakdown": "evtsync.breakdown",
    "compute_zscores": "evtsync.blocks", "zscore_table": "evtsync.blocks",
    "Alignment": "evtsync.collectives", "PGOverride": "evtsync.collectives",
    "align_collectives": "evtsync.collectives",
    "AttributionResult": "evtsync.critpath", "attribute": "evtsync.critpath",
    "inject_delay": "evtsync.critpath",
    "fit_mle": "evtsync.evt.mle",
    "TaxTables": "evtsync.tax", "compute_tax": "evtsync.tax", "tax_from_traces": "evtsync.tax",
    "tax_summary": "evtsync.tax",
    "TraceSet": "evtsync.trace.traceset", "load_traces": "evtsync.trace.traceset",
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


__all__ = ["EvtsyncError", "tax_table", *sorted(_LAZY)]


def tax_table(traces: TraceSet | str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
              per_rank: bool = False, **align_options: Any) -> pd.DataFrame:
    """The tax of every collective instance (or, with ``per_rank``, of every rank in it).

    ``traces`` is a loaded :class:`TraceSet` or paths to load; ``align_options`` go to
    :func:`evtsync.align_collectives` (``overrides``, ``end_tolerance_us``, ``strict``, ...).
    """
    from evtsync.tax import tax_from_traces
    from evtsync.trace.traceset import TraceSet, load_traces

    if not isinstance(traces, TraceSet):
        traces = load_traces(traces, scope="collectives")  # all the tax reads
    _, tables = tax_from_traces(traces, **align_options)
    return tables.ranks if per_rank else tables.collectives
