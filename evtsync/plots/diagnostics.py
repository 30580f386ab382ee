"""The four-panel diagnostic plot of a GEV/Gumbel fit, as R's ``ismev::gev.diag`` draws it.

Panels (Coles 2001, §3.3.4):

1. probability plot: model CDF of the ordered data against the plotting positions i/(n+1);
2. quantile plot: ordered data against the model quantiles at i/(n+1);
3. return-level plot: return level against return period ``-1/log(F)`` on a log axis, with
   95% delta-method confidence bands and the data at their empirical periods;
4. density plot: the fitted density over a histogram of the data.

Points near the diagonals of panels 1 and 2 mean a good fit. The figure is written atomically;
the format follows the file's extension (``.png``, ``.svg``, ``.pdf``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from evtsync.evt import gev
from evtsync.evt.families import family_label
from evtsync.evt.mle import MleFit, return_level_delta
from evtsync.plots.base import figure_format, save_figure

log = logging.getLogger("evtsync.plots.diagnostics")

__all__ = ["plot_diagnostics"]

#: Non-exceedance probabilities of the return-level curve (those of ismev::gev.rl).
_RL_PROBS = np.concatenate((np.arange(1, 100) / 100.0, [0.995, 0.999]))


def plot_diagnostics(fit: MleFit, data: ArrayLike, path: str | os.PathLike[str],
                     title: str | None = None) -> Path:
    """Draw the ``gev.diag`` panel for ``fit`` on ``data`` and save it atomically to ``path``."""
    figure_format(path)
    from evtsync.plots.base import plt

    x = np.sort(np.asarray(data, dtype=float).ravel())
    if x.size != fit.n:
        log.warning("diagnostic plot: %d data points but the fit used %d", x.size, fit.n)
    n = x.size
    positions = np.arange(1, n + 1) / (n + 1.0)
    mu, sigma, xi = fit.mu, fit.sigma, fit.xi

    fig, axes = plt.subplots(2, 2, figsize=(9, 8))
    ax = axes[0, 0]
    ax.plot(positions, gev.cdf(x, mu, sigma, xi), "o", ms=3)
    ax.plot([0, 1], [0, 1], color="0.4", lw=1)
    ax.set(title="Probability plot", xlabel="Empirical", ylabel="Model")

    ax = axes[0, 1]
    model_q = gev.ppf(positions, mu, sigma, xi)
    ax.plot(model_q, x, "o", ms=3)
    lims = [min(model_q.min(), x.min()), max(model_q.max(), x.max())]
    ax.plot(lims, lims, color="0.4", lw=1)
    ax.set(title="Quantile plot", xlabel="Model", ylabel="Empirical")

    ax = axes[1, 0]
    periods = 1.0 / (1.0 - _RL_PROBS)
    levels_se = np.array([return_level_delta(fit, float(t)) for t in periods])
    levels, ses = levels_se[:, 0], levels_se[:, 1]
    rp_axis = -1.0 / np.log(_RL_PROBS)
    ax.plot(rp_axis, levels, color="C0", lw=1.5, label="fit")
    if np.all(np.isfinite(ses)):
        ax.plot(rp_axis, levels + 1.96 * ses, color="C0", lw=1, ls="--", label="95% CI (delta)")
        ax.plot(rp_axis, levels - 1.96 * ses, color="C0", lw=1, ls="--")
    ax.plot(-1.0 / np.log(positions), x, "o", ms=3, color="C1", label="data")
    ax.set_xscale("log")
    ax.set(title="Return level plot", xlabel="Return period (blocks)", ylabel="Return level")
    ax.legend(fontsize=8)

    ax = axes[1, 1]
    ax.hist(x, bins="auto", density=True, color="0.85", edgecolor="0.5")
    pad = 0.1 * (x.max() - x.min())
    grid = np.linspace(x.min() - pad, x.max() + pad, 400)
    ax.plot(grid, gev.pdf(grid, mu, sigma, xi), color="C0")
    ax.set(title="Density plot", xlabel="z", ylabel="f(z)")

    label = family_label(fit.family)
    fig.suptitle(title or f"{label} fit: mu={mu:.4g}, sigma={sigma:.4g}, xi={xi:.4g} (n={n})")
    fig.tight_layout()
    return save_figure(fig, path, dpi=120)
