"""The paper's Fig. 10: block-maximum z-scores by GPU × precision, with the fitted densities.

One panel per GPU (rows) × precision (columns) of a z-score table (``evtsync blocks``: columns
``z``, ``gpu``, ``precision``): the histogram of the cell's z-scores, its count, and, given
per-cell parameters (:func:`evtsync.predict.tables.cell_parameter_table`: ``mu_median``,
``sigma_median``, ``xi_median`` per gpu and precision), the fitted GEV density. Empty cells of
the grid say so (no z-scores), so a missing combination is never hidden.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from evtsync.core.errors import InputError
from evtsync.plots.base import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def zscores_by_cell(z: pd.DataFrame, params: pd.DataFrame | None = None, column: str = "z") -> Figure:
    """Histogram of the z-scores per GPU × precision cell, the fitted density where ``params`` has the cell."""
    from evtsync.evt import gev

    missing = [c for c in (column, "gpu", "precision") if c not in z.columns]
    if missing:
        raise InputError(f"z-score table: missing column(s) {missing} for the z-scores by GPU x precision figure")
    gpus = sorted(z["gpu"].astype(str).unique())
    precisions = sorted(z["precision"].astype(str).unique())
    values = pd.to_numeric(z[column], errors="coerce")
    finite = np.isfinite(values.to_numpy(float))
    lo, hi = np.quantile(values[finite], [0.001, 0.999]) if finite.any() else (0.0, 1.0)
    grid = np.linspace(lo, hi, 300)
    fig, axes = new_figure(2.8 * len(precisions) + 0.6, 2.3 * len(gpus) + 0.6, nrows=len(gpus),
                           ncols=len(precisions), squeeze=False, sharex=True)
    lookup = {}
    if params is not None and {"gpu", "precision", "mu_median", "sigma_median", "xi_median"} <= set(params.columns):
        for r in params.itertuples():
            lookup[(str(r.gpu), str(r.precision))] = (r.mu_median, r.sigma_median, r.xi_median)
    for i, g in enumerate(gpus):
        for j, p in enumerate(precisions):
            ax = axes[i][j]
            sel = (z["gpu"].astype(str) == g).to_numpy() & (z["precision"].astype(str) == p).to_numpy() & finite
            x = values[sel].to_numpy(float)
            if x.size == 0:
                ax.text(0.5, 0.5, "no z-scores", ha="center", va="center", transform=ax.transAxes, color="0.4")
            else:
                ax.hist(np.clip(x, lo, hi), bins=40, range=(lo, hi), density=True, color="0.8", edgecolor="0.6")
                if (g, p) in lookup:
                    mu, sigma, xi = lookup[(g, p)]
                    ax.plot(grid, gev.pdf(grid, mu, sigma, xi), color="C0", lw=1.3, label=f"GEV xi={xi:.2f}")
                    ax.legend(fontsize=6, loc="upper right")
            ax.set_title(f"{g} {p}" + (f", n={x.size}" if x.size else ""), fontsize=9)  # the count beside, not over, the bars
            if i == len(gpus) - 1:
                ax.set_xlabel("z = (max - mean) / pooled sd")
        axes[i][0].set_ylabel("density")
    fig.suptitle("Block-maximum z-scores by GPU × precision", fontsize=10)
    fig.tight_layout()
    return fig
