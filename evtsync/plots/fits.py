"""Figures of fitted GEV models: the z-scores of a cell against its fits, the posterior of xi per
cell (forest), and a fit's posterior density per cell."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL
from evtsync.evt.families import fixes_xi
from evtsync.plots.base import legend_below, new_figure, not_converged_mark

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: Colours of the precisions, fixed so that every figure agrees.
PRECISION_COLOURS = {"bf16": "C0", "fp16": "C4", "fp32": "C1", "tf32": "C2", "fp8": "C5"}


def _cell_label(gpu: str, precision: str) -> str:
    return f"{gpu} {precision}"


def gev_cell(z: np.ndarray, mle_gev: dict[str, float] | None, mle_gumbel: dict[str, float] | None,
             post: tuple[np.ndarray, np.ndarray, np.ndarray] | None, post_label: str, title: str,
             level: float = INTERVAL_LEVEL) -> Figure:
    """Histogram of the z-scores with fitted densities, and the QQ plot against the GEV MLE."""
    from evtsync.evt import gev

    x = np.sort(z[np.isfinite(z)])
    fig, (ax1, ax2) = new_figure(9.0, 3.8, ncols=2)
    ax1.hist(x, bins="auto", density=True, color="0.85", edgecolor="0.55", label=f"z-scores (n={x.size})")
    pad = 0.15 * (x.max() - x.min()) if x.size > 1 else 1.0
    grid = np.linspace(x.min() - pad, x.max() + pad, 300)
    if post is not None:
        mu, sigma, xi = post
        take = np.linspace(0, mu.size - 1, min(mu.size, 400)).astype(int)
        dens = np.nan_to_num(gev.pdf(grid[None, :], mu[take, None], sigma[take, None], xi[take, None]))
        ax1.fill_between(grid, np.quantile(dens, (1 - level) / 2, axis=0), np.quantile(dens, (1 + level) / 2, axis=0),
                         color="C2", alpha=0.3, lw=0, label=f"{post_label}: {level:.0%} band")
        ax1.plot(grid, dens.mean(axis=0), color="C2", lw=1.5, label=f"{post_label}: posterior mean")
    if mle_gev is not None:
        ax1.plot(grid, gev.pdf(grid, mle_gev["mu"], mle_gev["sigma"], mle_gev["xi"]), color="C0",
                 lw=1.2, label=f"GEV MLE (xi={mle_gev['xi']:.2f})")
    if mle_gumbel is not None:
        ax1.plot(grid, gev.pdf(grid, mle_gumbel["mu"], mle_gumbel["sigma"], 0.0), color="C3", lw=1.0, ls="--",
                 label="Gumbel MLE")
    ax1.set(xlabel="z = (max - mean) / pooled sd", ylabel="density", title="density")
    ax1.set_ylim(bottom=0)
    positions = np.arange(1, x.size + 1) / (x.size + 1.0)
    for fit, colour, label in ((mle_gev, "C0", "GEV MLE"), (mle_gumbel, "C3", "Gumbel MLE")):
        if fit is not None:
            q = gev.ppf(positions, fit["mu"], fit["sigma"], fit.get("xi", 0.0))
            ax2.plot(q, x, "o", ms=2.5, color=colour, alpha=0.7, label=label)
    lims = [x.min(), x.max()]
    ax2.plot(lims, lims, color="0.3", lw=1)
    ax2.set(xlabel="model quantile", ylabel="empirical quantile", title="QQ plot")
    ax2.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    legend_below(ax1, ncol=2)
    legend_below(ax2, ncol=2)
    return fig


def xi_forest(xi: pd.DataFrame, population: dict[str, float] | None, level: float = INTERVAL_LEVEL) -> Figure:
    """Posterior mean and ``level`` interval of xi per GPU × precision cell, one marker per model."""
    cells = xi[["gpu", "precision"]].drop_duplicates().sort_values(["gpu", "precision"])
    labels = [_cell_label(g, p) for g, p in cells.itertuples(index=False)]
    models = sorted(m for m in xi["model"].unique())
    fig, ax = new_figure(6.4, 0.45 * len(labels) * max(1, len(models)) ** 0.5 + 1.6)
    if population is not None:
        ax.axvspan(population["lo"], population["hi"], color="0.85", label=f"population xi0: {level:.0%} interval")
        ax.axvline(population["mean"], color="0.4", lw=1, label="population xi0: mean")
    ax.axvline(0.0, color="k", lw=0.8, ls=":")
    offsets = np.linspace(-0.25, 0.25, len(models)) if len(models) > 1 else [0.0]
    for k, model in enumerate(models):
        sub = xi[xi["model"] == model].set_index(["gpu", "precision"])
        ys, means, los, his, conv = [], [], [], [], []
        for i, (g, p) in enumerate(cells.itertuples(index=False)):
            if (g, p) in sub.index:
                row = sub.loc[(g, p)]
                ys.append(i + offsets[k])
                means.append(row["xi_mean"])
                los.append(row["xi_mean"] - row["xi_lo"])
                his.append(row["xi_hi"] - row["xi_mean"])
                conv.append(bool(row["converged"]))
        marker = "o" if all(conv) else "x"
        ax.errorbar(means, ys, xerr=[los, his], fmt=marker, ms=4, capsize=2, color=f"C{k}",
                    label=model + ("" if all(conv) else " (NOT converged)"))
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="shape parameter xi (Coles: > 0 Fréchet, 0 Gumbel, < 0 Weibull)",
           title="Posterior of xi per GPU × precision")
    ax.grid(alpha=0.3, axis="x")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    return fig


def posterior_by_cell(params: Any, model: str, family: str, converged: bool,
                      level: float = INTERVAL_LEVEL) -> Figure:
    """Posterior density of xi (of mu for a Gumbel model) per cell, its ``level`` interval shaded.

    ``params`` is the Dataset of :meth:`evtsync.evt.bayesfit.BayesFit.cell_parameters` (or of
    :func:`evtsync.evt.bayesfit.cell_parameters`): ``mu``, ``sigma``, ``xi`` on (chain, draw, cell).
    """
    name = "mu" if fixes_xi(family) else "xi"
    labels = params["cell_label"].values if "cell_label" in params.coords else params["cell"].values
    fig, ax = new_figure(7.0, 4.5)
    values = params[name].transpose(..., "cell").values.reshape(-1, params.sizes["cell"])
    for i, label in enumerate(labels):
        v = values[:, i]
        ax.hist(v, bins=50, density=True, histtype="step", color=f"C{i}", label=str(label).replace("|", " "))
        lo, hi = np.quantile(v, [(1 - level) / 2, (1 + level) / 2])
        ax.axvspan(lo, hi, color=f"C{i}", alpha=0.08)
    ax.set(xlabel=name, ylabel="posterior density",
           title=f"{model}: posterior of {name} per cell (shaded: {level:.0%} interval)")
    not_converged_mark(ax, converged)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig
