"""Figures of predictions: tau(n) against n, B* against n beside Hockney's B*_H, and predicted
against measured straggler delay.

They take the tables of :mod:`evtsync.predict.tables` (one column scheme: ``tau_point_us``,
``tau_lo_us``, ``tau_hi_us``, ``point_estimate``, ``level``, ``converged`` ...; the point read by
:func:`~evtsync.predict.tables.point_column`), so the CLI (``predict --plot``,
``bandwidth --fit --plot``) and the report draw the same figures. Each returns a matplotlib
figure; save it with :func:`evtsync.plots.save_figure` or :func:`evtsync.plots.save_png_svg`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from evtsync.plots.base import legend_below, new_figure, not_converged_mark, readable_log_axis
from evtsync.predict.tables import point_column, point_words

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _series(table: pd.DataFrame) -> list[str]:
    """The columns that name one curve: GPU and precision when present, else the fit's cell."""
    return ["gpu", "precision"] if {"gpu", "precision"} <= set(table.columns) else ["cell"]


def _label(key: object) -> str:
    parts = key if isinstance(key, tuple) else (key,)
    return " ".join(str(p).replace("|", " ") for p in parts)


def _level(table: pd.DataFrame) -> str:
    return f"{float(table['level'].iloc[0]):.0%}" if "level" in table and len(table) else "central"


def point_name(table: pd.DataFrame) -> str:
    """What the table's points are ("posterior median", ...; several joined by " / "; "point" when empty)."""
    return point_words(table) or "point"


def _converged(table: pd.DataFrame) -> bool:
    return bool(table["converged"].astype(bool).all()) if "converged" in table else True


def _bands(ax: Axes, table: pd.DataFrame, column: str, unit: str) -> None:
    """One line (the point estimate) and band (lo..hi) per cell of ``table`` against n."""
    for i, (key, cell) in enumerate(table.groupby(_series(table), sort=True)):
        cell = cell.sort_values("n")
        ax.fill_between(cell["n"], cell[f"{column}_lo{unit}"], cell[f"{column}_hi{unit}"], color=f"C{i}",
                        alpha=0.25, lw=0)
        ax.plot(cell["n"], point_column(cell, column, unit), color=f"C{i}", marker="o", ms=3, label=_label(key))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")


def tau_curves(tau: pd.DataFrame, models: list[str] | None = None) -> Figure:
    """Predicted tax tau(n) against the domain size: point and ``level`` band per cell, a panel per model."""
    panels: list[str | None] = [*(models or dict.fromkeys(tau["model"]))] if "model" in tau else [None]
    fig, axes = new_figure(max(6.4, 3.6 * len(panels)), 3.8, ncols=max(1, len(panels)), sharey=True,
                           squeeze=False)
    for ax, model in zip(axes[0], panels, strict=False):
        sub = tau if model is None else tau[tau["model"] == model]
        _bands(ax, sub, "tau", "_us")
        _n_ticks(ax, sub["n"])
        ax.set_xlabel("domain size n (ranks)")
        ax.set_title(f"{model or ''}\n{point_name(sub)} and {_level(sub)} band".lstrip("\n"), fontsize=9)
        not_converged_mark(ax, _converged(sub))
    values = np.column_stack([tau[["tau_lo_us", "tau_hi_us"]].to_numpy(float),
                              point_column(tau, "tau", "_us").to_numpy(float)])
    values = values[np.isfinite(values) & (values > 0)]
    if values.size:
        readable_log_axis(axes[0][0].yaxis, float(values.min()), float(values.max()))
    axes[0][0].set_ylabel("predicted mean straggler delay tau(n) (µs)")
    fig.tight_layout()
    _legend_under(fig, axes[0][0])
    return fig


def _n_ticks(ax: Axes, n: pd.Series) -> None:
    """Domain sizes as plain labels on a base-2 axis, at most seven of them."""
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    ns = sorted({int(v) for v in n})
    step = max(1, int(np.ceil(len(ns) / 7)))
    ax.xaxis.set_major_locator(FixedLocator(ns[::step]))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _legend_under(fig: Figure, ax: Axes) -> None:
    """One legend for the figure, under its panels (the curves are the same cells in each)."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0),
                   ncol=min(len(labels), 4), frameon=False)


def bstar_curves(bstar: pd.DataFrame) -> Figure:
    """B* against n per topology (point and ``level`` band per cell) beside Hockney's B*_H."""
    topologies = list(dict.fromkeys(bstar["topology"]))
    fig, axes = new_figure(max(6.4, 3.7 * len(topologies)), 3.8, ncols=len(topologies), squeeze=False)
    for ax, topo in zip(axes[0], topologies, strict=True):
        sub = bstar[bstar["topology"] == topo]
        hock = sub.drop_duplicates("n").sort_values("n")
        ax.plot(hock["n"], hock["bstar_hockney_gbps"], color="k", ls="--", lw=1.2, label="Hockney B*_H (tau = 0)")
        _bands(ax, sub, "bstar", "_gbps")
        _n_ticks(ax, sub["n"])
        values = sub[["bstar_lo_gbps", "bstar_hi_gbps", "bstar_hockney_gbps"]].to_numpy(float)
        values = values[np.isfinite(values) & (values > 0)]
        if values.size:
            readable_log_axis(ax.yaxis, float(values.min()), float(values.max()), most=5)
        ax.set(xlabel="domain size n (ranks)",
               title=f"{topo} (eps {float(sub['eps'].iloc[0]):g}, {point_name(sub)}, {_level(sub)} band)")
        not_converged_mark(ax, _converged(sub))
    axes[0][0].set_ylabel("optimal bandwidth B* (GB/s)")
    fig.tight_layout()
    _legend_under(fig, axes[0][0])
    return fig


def predicted_vs_measured(pvm: pd.DataFrame) -> Figure:
    """Measured against predicted mean straggler delay per workload, with both intervals (Fig. 11)."""
    fig, ax = new_figure(5.2, 4.6)
    points = point_column(pvm, "predicted", "_us").to_numpy(float)
    for i, (row, point) in enumerate(zip(pvm.itertuples(), points, strict=True)):
        xerr = [[point - row.predicted_lo_us], [row.predicted_hi_us - point]]
        yerr = np.nan_to_num([[row.measured_mean_us - row.measured_lo_us], [row.measured_hi_us - row.measured_mean_us]])
        ax.errorbar(point, row.measured_mean_us, xerr=xerr, yerr=yerr, fmt="o", color=f"C{i % 10}",
                    capsize=2, label=f"{row.workload} {row.gpu} {row.precision} (n={row.n})")
    values = pvm[["predicted_lo_us", "predicted_hi_us", "measured_lo_us", "measured_hi_us",
                  "measured_mean_us"]].to_numpy(float)
    values = values[np.isfinite(values) & (values > 0)]
    if values.size:
        lims = [values.min() * 0.8, values.max() * 1.25]
        ax.plot(lims, lims, color="0.3", lw=1, label="measured = predicted")
        ax.set_xscale("log")
        ax.set_yscale("log")
        readable_log_axis(ax.xaxis, lims[0], lims[1], most=5)
        readable_log_axis(ax.yaxis, lims[0], lims[1], most=5)
    ax.set(xlabel=f"predicted mean straggler delay (µs): {point_name(pvm)}, {_level(pvm)} interval",
           ylabel="measured mean straggler delay (µs)", title="Predicted vs measured straggler delay")
    ax.grid(alpha=0.3, which="both")
    not_converged_mark(ax, _converged(pvm))
    fig.tight_layout()
    legend_below(ax, ncol=2)
    return fig
