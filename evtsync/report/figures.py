"""The report's figures beyond the tax CDFs: wait shares, attribution, GEV fits per cell, the
posterior of xi, tau(n), B* against n, predicted vs measured delay.

Every function draws one figure from the run's tables and saves it as PNG and SVG with
:func:`save_png_svg`; the captions are written by :mod:`evtsync.report.html`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.report.plotting import new_figure, save_figure
from evtsync.tableio import atomic_path

#: Colours of the precisions and models, fixed so that every figure agrees.
PRECISION_COLOURS = {"bf16": "C0", "fp16": "C4", "fp32": "C1", "tf32": "C2", "fp8": "C5"}


def save_png_svg(fig: Any, folder: str | os.PathLike[str], stem: str) -> tuple[Path, Path]:
    """Save ``fig`` as ``folder/stem.svg`` and ``folder/stem.png`` (atomically) and close it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    svg = folder / f"{stem}.svg"
    with atomic_path(svg) as tmp:
        fig.savefig(tmp, format="svg", bbox_inches="tight")
    png = save_figure(fig, folder / f"{stem}.png", dpi=110)
    return png, svg


def _cell_label(gpu: str, precision: str) -> str:
    return f"{gpu} {precision}"


def wait_shares(ranks: pd.DataFrame, folder: Path, stem: str, title: str) -> tuple[Path, Path]:
    """ECDFs of the wait share of the rank that waited longest and of the median rank, per workload."""
    fig, ax = new_figure(6.4, 3.8)
    for i, (workload, sub) in enumerate(ranks.groupby("workload", sort=True)):
        per = sub.groupby(["pg", "index"])["wait_share"].agg(["max", "median"])
        for col, style in (("max", "-"), ("median", "--")):
            v = np.sort(per[col].to_numpy(float))
            if v.size:
                ax.step(v, np.arange(1, v.size + 1) / v.size, style, where="post", color=f"C{i}",
                        label=f"{workload}: {'longest-waiting rank' if col == 'max' else 'median rank'}")
    ax.set(xlabel="wait share of the NCCL kernel time (waiting / kernel duration)",
           ylabel="fraction of collectives", title=title, xlim=(0, 1))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return save_png_svg(fig, folder, stem)


def attribution_breakdown(summary: pd.DataFrame, folder: Path, stem: str) -> tuple[Path, Path]:
    """Share of attributed collectives per principal-cause category, per workload."""
    categories = list(summary.groupby("category")["count"].sum().sort_values(ascending=True).index)
    workloads = sorted(summary["workload"].unique())
    fig, ax = new_figure(6.4, max(2.5, 0.35 * len(categories) * max(1, len(workloads)) ** 0.5 + 1.2))
    height = 0.8 / max(1, len(workloads))
    y = np.arange(len(categories))
    for i, w in enumerate(workloads):
        sub = summary[summary["workload"] == w].set_index("category")
        share = [float(sub["share"].get(c, 0.0)) for c in categories]
        ax.barh(y + i * height, share, height=height, color=f"C{i}", label=w)
    ax.set_yticks(y + height * (len(workloads) - 1) / 2, categories, fontsize=8)
    ax.set(xlabel="share of attributed collectives", title="Principal cause of the straggler's delay")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7)
    return save_png_svg(fig, folder, stem)


def gev_cell(z: np.ndarray, mle_gev: dict[str, float] | None, mle_gumbel: dict[str, float] | None,
             post: tuple[np.ndarray, np.ndarray, np.ndarray] | None, post_label: str,
             folder: Path, stem: str, title: str) -> tuple[Path, Path]:
    """Histogram of the z-scores with fitted densities, and the QQ plot against the GEV MLE."""
    import matplotlib.pyplot as plt

    from evtsync.evt import gev

    x = np.sort(z[np.isfinite(z)])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.6))
    ax1.hist(x, bins="auto", density=True, color="0.85", edgecolor="0.55", label=f"z-scores (n={x.size})")
    pad = 0.15 * (x.max() - x.min()) if x.size > 1 else 1.0
    grid = np.linspace(x.min() - pad, x.max() + pad, 300)
    if post is not None:
        mu, sigma, xi = post
        take = np.linspace(0, mu.size - 1, min(mu.size, 400)).astype(int)
        dens = np.nan_to_num(gev.pdf(grid[None, :], mu[take, None], sigma[take, None], xi[take, None]))
        ax1.fill_between(grid, np.quantile(dens, 0.05, axis=0), np.quantile(dens, 0.95, axis=0),
                         color="C2", alpha=0.3, lw=0, label=f"{post_label}: 90% band")
        ax1.plot(grid, dens.mean(axis=0), color="C2", lw=1.5, label=f"{post_label}: posterior mean")
    if mle_gev is not None:
        ax1.plot(grid, gev.pdf(grid, mle_gev["mu"], mle_gev["sigma"], mle_gev["xi"]), color="C0",
                 lw=1.2, label=f"GEV MLE (xi={mle_gev['xi']:.2f})")
    if mle_gumbel is not None:
        ax1.plot(grid, gev.pdf(grid, mle_gumbel["mu"], mle_gumbel["sigma"], 0.0), color="C3", lw=1.0, ls="--",
                 label="Gumbel MLE")
    ax1.set(xlabel="z = (max - mean) / pooled sd", ylabel="density", title="density")
    ax1.legend(fontsize=7)
    positions = np.arange(1, x.size + 1) / (x.size + 1.0)
    for fit, colour, label in ((mle_gev, "C0", "GEV MLE"), (mle_gumbel, "C3", "Gumbel MLE")):
        if fit is not None:
            q = gev.ppf(positions, fit["mu"], fit["sigma"], fit.get("xi", 0.0))
            ax2.plot(q, x, "o", ms=2.5, color=colour, alpha=0.7, label=label)
    lims = [x.min(), x.max()]
    ax2.plot(lims, lims, color="0.3", lw=1)
    ax2.set(xlabel="model quantile", ylabel="empirical quantile", title="QQ plot")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=7)
    ax2.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_png_svg(fig, folder, stem)


def xi_forest(xi: pd.DataFrame, population: dict[str, float] | None, folder: Path, stem: str) -> tuple[Path, Path]:
    """Posterior mean and 90% interval of xi per GPU × precision cell, one marker per model."""
    cells = xi[["gpu", "precision"]].drop_duplicates().sort_values(["gpu", "precision"])
    labels = [_cell_label(g, p) for g, p in cells.itertuples(index=False)]
    models = sorted(m for m in xi["model"].unique())
    fig, ax = new_figure(6.4, 0.45 * len(labels) * max(1, len(models)) ** 0.5 + 1.6)
    if population is not None:
        ax.axvspan(population["q_lo"], population["q_hi"], color="0.85", label="population xi0: 90% interval")
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
                los.append(row["xi_mean"] - row["xi_q_lo"])
                his.append(row["xi_q_hi"] - row["xi_mean"])
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
    return save_png_svg(fig, folder, stem)


def tau_curves(tau: pd.DataFrame, models: list[str], folder: Path, stem: str) -> tuple[Path, Path]:
    """Predicted tax tau(n) against the domain size, posterior mean and 90% band per cell."""
    fig, axes = new_figure(10.0, 3.8, ncols=max(1, len(models)), sharey=True, squeeze=False)
    for ax, model in zip(axes[0], models, strict=False):
        sub = tau[tau["model"] == model]
        for i, ((g, p), cell) in enumerate(sub.groupby(["gpu", "precision"], sort=True)):
            cell = cell.sort_values("n")
            ax.fill_between(cell["n"], cell["tau_q_lo_us"], cell["tau_q_hi_us"], color=f"C{i}", alpha=0.25, lw=0)
            ax.plot(cell["n"], cell["tau_mean_us"], color=f"C{i}", marker="o", ms=3, label=_cell_label(g, p))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(xlabel="domain size n (ranks)", title=model)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("predicted mean straggler delay tau(n) (µs)")
    axes[0][0].legend(fontsize=7)
    return save_png_svg(fig, folder, stem)


def bstar_curves(bstar: pd.DataFrame, folder: Path, stem: str) -> tuple[Path, Path]:
    """B* against n per topology (posterior mean, 90% band per cell) beside Hockney's B*_H."""
    topologies = list(dict.fromkeys(bstar["topology"]))
    fig, axes = new_figure(11.0, 3.8, ncols=len(topologies), squeeze=False)
    for ax, topo in zip(axes[0], topologies, strict=True):
        sub = bstar[bstar["topology"] == topo]
        hock = sub.drop_duplicates("n").sort_values("n")
        ax.plot(hock["n"], hock["bstar_hockney_gbps"], color="k", ls="--", lw=1.2, label="Hockney B*_H (tau = 0)")
        for i, ((g, p), cell) in enumerate(sub.groupby(["gpu", "precision"], sort=True)):
            cell = cell.sort_values("n")
            ax.fill_between(cell["n"], cell["bstar_q_lo_gbps"], cell["bstar_q_hi_gbps"], color=f"C{i}",
                            alpha=0.25, lw=0)
            ax.plot(cell["n"], cell["bstar_mean_gbps"], color=f"C{i}", marker="o", ms=3, label=_cell_label(g, p))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(xlabel="domain size n (ranks)", title=topo)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("optimal bandwidth B* (GB/s)")
    axes[0][0].legend(fontsize=7)
    return save_png_svg(fig, folder, stem)


def predicted_vs_measured(pvm: pd.DataFrame, folder: Path, stem: str) -> tuple[Path, Path]:
    """Measured against predicted mean straggler delay per workload, with both intervals."""
    fig, ax = new_figure(5.2, 4.6)
    for i, row in enumerate(pvm.itertuples()):
        ax.errorbar(row.predicted_mean_us, row.measured_mean_us,
                    xerr=[[row.predicted_mean_us - row.predicted_lo_us], [row.predicted_hi_us - row.predicted_mean_us]],
                    yerr=[[row.measured_mean_us - row.measured_lo_us], [row.measured_hi_us - row.measured_mean_us]],
                    fmt="o", color=f"C{i % 10}", capsize=2, label=f"{row.workload} (n={row.n})")
    values = pvm[["predicted_lo_us", "predicted_hi_us", "measured_lo_us", "measured_hi_us"]].to_numpy(float)
    values = values[np.isfinite(values) & (values > 0)]
    if values.size:
        lims = [values.min() * 0.8, values.max() * 1.25]
        ax.plot(lims, lims, color="0.3", lw=1, label="measured = predicted")
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set(xlabel="predicted mean straggler delay (µs)", ylabel="measured mean straggler delay (µs)",
           title="Predicted vs measured straggler delay")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return save_png_svg(fig, folder, stem)
