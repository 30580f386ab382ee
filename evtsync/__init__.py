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
    cells = evtsync.mle_cell_table(z)                 # Gumbel/GEV MLE per GPU x precision, with the LRT
    spec = evtsync.load_spec(evtsync.resolve_model("gev-hier-gpu-precision"))   # shipped models
    fit = evtsync.BayesFit(evtsync.fit_table(z, spec))  # or evtsync.BayesFit.load("fits/NAME")
    fit.posterior["xi"].sel(gpu="H200", precision="bf16")
    tau = evtsync.tau_table(fit, n=[8, 64, 512], block_sd_us=24.0)   # also MleCellFit(cells)
    table, verdict = evtsync.compare_fits([fit.tree, other.tree])
    evtsync.run_pipeline(evtsync.RunOptions(traces=["traces/"], out="fits/job"))

Every name is imported on first use, so ``import evtsync`` stays light.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from evtsync.core.errors import EvtsyncError

if TYPE_CHECKING:
    import pandas as pd

    from evtsync.trace.traceset import TraceSet

from evtsync._version import __version__  # noqa: F401 - the public version attribute

#: Public names -> the module that defines them, imported on first access: ``import
#: evtsync`` (and so every worker process that reads traces) does not pay for scipy,
#: PyMC or the critical-path code it may never use.
_LAZY = {
    "step_breakdown": "evtsync.critpath.breakdown", "summarise_breakdown": "evtsync.critpath.breakdown",
    "compute_zscores": "evtsync.blocks.cut", "zscore_table": "evtsync.blocks.cut",
    "Alignment": "evtsync.sync.collectives", "PGOverride": "evtsync.sync.collectives",
    "align_collectives": "evtsync.sync.collectives",
    "AttributionResult": "evtsync.critpath", "attribute": "evtsync.critpath",
    "inject_delay": "evtsync.critpath",
    "fit_mle": "evtsync.evt.mle",
    "TaxTables": "evtsync.sync.tax", "compute_tax": "evtsync.sync.tax", "tax_from_traces": "evtsync.sync.tax",
    "tax_summary": "evtsync.sync.tax",
    "TraceSet": "evtsync.trace.traceset", "load_traces": "evtsync.trace.traceset",
    "load_spec": "evtsync.evt.spec", "fit_table": "evtsync.evt.fit", "load_fit": "evtsync.evt.bayesfit",
    "save_fit": "evtsync.evt.bayesfit", "BayesFit": "evtsync.evt.bayesfit", "compare_fits": "evtsync.evt.compare",
    "MleCellFit": "evtsync.evt.mlefit", "RankTailFit": "evtsync.evt.ranktail", "mle_cell_table": "evtsync.evt.mlefit",
    "list_models": "evtsync.evt.catalog", "resolve_model": "evtsync.evt.catalog",
    "tau_table": "evtsync.predict.tables", "bandwidth_table": "evtsync.predict.tables",
    "predicted_vs_measured": "evtsync.predict.tables", "cell_parameter_table": "evtsync.predict.tables",
    # former names of the prediction tables (same functions)
    "tau_summary": "evtsync.predict.posterior", "bandwidth_summary": "evtsync.predict.posterior",
    "straggler_comparison": "evtsync.predict.posterior",
    "RunOptions": "evtsync.pipeline", "run_pipeline": "evtsync.pipeline",
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

    Parameters
    ----------
    traces : TraceSet, path or iterable of paths
        A loaded :class:`~evtsync.trace.traceset.TraceSet`, or trace files and/or folders,
        read by :func:`evtsync.load_traces`; paths are read with ``scope="collectives"``
        (all the tax reads). Paths that are all NCCL Inspector logs are streamed instead
        (:func:`evtsync.sync.logtax.stream_tax`: memory bounded by the collectives not yet reported
        by every member, same table).
    per_rank : bool, default False
        Return the per-rank table (one row per rank of each instance) instead of one row per
        collective instance.
    **align_options
        Passed to :func:`evtsync.align_collectives` (``overrides``, ``end_tolerance_us``,
        ``strict``, ``allow_partial``, ...).

    Returns
    -------
    pandas.DataFrame
        ``TaxTables.collectives`` (or ``TaxTables.ranks`` with ``per_rank``) of
        :func:`evtsync.compute_tax`; mismatched instances are kept with ``valid=False``.

    Raises
    ------
    TraceError
        The files cannot be read, or the rank set is not one complete job.
    AlignmentError
        The collectives of a process group do not match across its ranks (with ``strict``).
    InputError
        Bad options (e.g. a malformed PG override).
    """
    from evtsync.sync.tax import tax_from_traces
    from evtsync.trace.traceset import TraceSet, load_traces

    if not isinstance(traces, TraceSet):
        from evtsync.sync.logtax import inspector_files, stream_tax

        logs = inspector_files(traces)
        if logs is not None:  # NCCL Inspector logs: streamed, memory bounded by the open collectives
            tables = stream_tax(logs, keep_ranks=per_rank, **align_options).tables
            return tables.ranks if per_rank else tables.collectives
        traces = load_traces(traces, scope="collectives")  # all the tax reads
    _, tables = tax_from_traces(traces, **align_options)
    return tables.ranks if per_rank else tables.collectives
