"""Figures of the measured tax: CDFs of tau per PG and collective type (paper's Figure 3)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from evtsync.report.plotting import new_figure, save_figure


def plot_tax_cdfs(collectives: pd.DataFrame, path: str | os.PathLike[str],
                  measure: str = "tau_max_us") -> Path:
    """Empirical CDF of ``measure`` for each (PG, collective type), log-scaled in µs."""
    fig, ax = new_figure()
    if collectives.empty:
        ax.text(0.5, 0.5, "no collectives", ha="center", va="center", transform=ax.transAxes)
    for (pg, coll), grp in collectives.groupby(["pg", "collective"], sort=True):
        values = np.sort(grp[measure].to_numpy(dtype=float))
        probs = np.arange(1, len(values) + 1) / len(values)
        ax.step(np.maximum(values, 1e-3), probs, where="post", label=f"{pg} {coll} (n={len(values)})")
    ax.set_xscale("log")
    ax.set_xlabel(f"{'max−min' if measure == 'tau_max_us' else 'median−min'} NCCL kernel duration (µs)")
    ax.set_ylabel("fraction of collectives")
    ax.set_title("Synchronization tax per process group and collective")
    ax.grid(alpha=0.3)
    if len(collectives):
        ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)
