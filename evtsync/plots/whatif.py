"""What-if figures of the optimal bandwidth: multi-eps B* panels and B* as FLOPS grow (the paper's
Fig. 13), for ``evtsync bandwidth`` with or without a fit (a point estimate is a one-draw table).

Inputs are the tables of :func:`evtsync.predict.tables.bandwidth_table` (a posterior's, or a
one-draw point fit's and :func:`~evtsync.predict.tables.given_tax_bandwidth_table`'s); ``nvlink`` maps a label to a bandwidth in GB/s drawn
as a horizontal reference line (default in the CLI: Table 1's 450 GB/s H100/H200 and 900 GB/s
B200). Population-level rows (``prediction_kind`` "population") are drawn dashed and say so in
their label. Each function returns a matplotlib figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from evtsync.plots.base import new_figure, not_converged_mark
from evtsync.plots.predictions import point_name
from evtsync.predict.tables import point_column

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _reference_lines(ax: Any, nvlink: Mapping[str, float] | None) -> None:
    for k, (label, gbps) in enumerate((nvlink or {}).items()):
        ax.axhline(gbps, color="0.45", lw=0.9, ls=(0, (1, 2 + k)), label=label)


def _cell_label(row: Mapping[str, Any]) -> str:
    label = str(row.get("cell", "")).replace("|", " ")
    return label + (" (population-level)" if row.get("prediction_kind") == "population" else "")


def _converged(table: pd.DataFrame) -> bool:
    return bool(table["converged"].astype(bool).all()) if "converged" in table else True


def bstar_panels(table: pd.DataFrame, nvlink: Mapping[str, float] | None = None) -> Figure:
    """B* against n: one row of panels per eps, one column per topology; point and interval band
    per cell (and FLOPS factor), Hockney's B*_H dashed (with its band when alpha has draws)."""
    eps_values = list(dict.fromkeys(table["eps"]))
    topologies = list(dict.fromkeys(table["topology"]))
    fig, axes = new_figure(3.8 * len(topologies), 3.3 * len(eps_values), nrows=len(eps_values),
                           ncols=len(topologies), squeeze=False, sharex=True)
    level = f"{float(table['level'].iloc[0]):.0%}" if "level" in table and len(table) else ""
    for r, eps in enumerate(eps_values):
        for c, topo in enumerate(topologies):
            ax = axes[r][c]
            sub = table[(table["eps"] == eps) & (table["topology"] == topo)]
            for i, (key, cell) in enumerate(sub.groupby(["cell", "flops_factor"], sort=True)):
                cell = cell.sort_values("n")
                first = cell.iloc[0].to_dict()
                style = "--" if first.get("prediction_kind") == "population" else "-"
                flops = f", FLOPS x{key[1]:g}" if sub["flops_factor"].nunique() > 1 else ""
                ax.fill_between(cell["n"], cell["bstar_lo_gbps"], cell["bstar_hi_gbps"], color=f"C{i}", alpha=0.2, lw=0)
                point = point_column(cell, "bstar", "_gbps")
                ax.errorbar(cell["n"], point, yerr=[point - cell["bstar_lo_gbps"], cell["bstar_hi_gbps"] - point],
                            fmt="o" + style, color=f"C{i}", ms=3, capsize=2, label=_cell_label(first) + flops)
            hock = sub.drop_duplicates("n").sort_values("n")
            if "bstar_hockney_lo_gbps" in hock and (hock["bstar_hockney_hi_gbps"] > hock["bstar_hockney_lo_gbps"]).any():
                ax.fill_between(hock["n"], hock["bstar_hockney_lo_gbps"], hock["bstar_hockney_hi_gbps"], color="k",
                                alpha=0.1, lw=0)
            ax.plot(hock["n"], hock["bstar_hockney_gbps"], color="k", ls="--", marker="s", ms=3, lw=1.2,
                    label="Hockney B*_H (tau = 0)")
            _reference_lines(ax, nvlink)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{topo}, eps = {eps:g} ({point_name(sub)}, {level} band)", fontsize=9)
            ax.grid(alpha=0.3, which="both")
            not_converged_mark(ax, _converged(sub))
            if r == len(eps_values) - 1:
                ax.set_xlabel("domain size n (GPUs)")
        axes[r][0].set_ylabel("optimal bandwidth B* (GB/s)")
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    return fig


def bstar_vs_flops(table: pd.DataFrame, ns: Sequence[int] | None = None,
                   nvlink: Mapping[str, float] | None = None) -> Figure:
    """B* as FLOPS grow (the paper's Fig. 13): one panel per topology and eps, a curve per n
    (default: 256 and 4096 when present, else every n) for the model with the tax (band), Hockney's
    B*_H (flat: it does not depend on FLOPS) and the roofline (B*_H scaled with the FLOPS)."""
    present = sorted(set(table["n"]))
    if ns is None:
        ns = [n for n in (256, 4096) if n in present] or present
    panels = list(dict.fromkeys(zip(table["topology"], table["eps"], strict=True)))
    fig, axes = new_figure(4.2 * len(panels), 3.6, ncols=len(panels), squeeze=False)
    for ax, (topo, eps) in zip(axes[0], panels, strict=True):
        sub = table[(table["topology"] == topo) & (table["eps"] == eps) & table["n"].isin(ns)]
        for i, ((_cell, n), part) in enumerate(sub.groupby(["cell", "n"], sort=True)):
            part = part.sort_values("flops_factor")
            first = part.iloc[0].to_dict()
            f = part["flops_factor"]
            ax.fill_between(f, part["bstar_lo_gbps"], part["bstar_hi_gbps"], color=f"C{i}", alpha=0.2, lw=0)
            ax.plot(f, point_column(part, "bstar", "_gbps"), "o-", color=f"C{i}", ms=3, label=f"n={n} {_cell_label(first)}")
            base = float(part["bstar_hockney_gbps"].iloc[0])
            ax.plot(f, [base] * len(f), "--", color=f"C{i}", lw=1, label=f"n={n} Hockney B*_H")
            ax.plot(f, base * f / f.iloc[0], ":", color=f"C{i}", lw=1, label=f"n={n} roofline (B*_H x FLOPS)")
        _reference_lines(ax, nvlink)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set(xlabel="peak FLOPS relative to H200 (989 TFLOPS)", title=f"{topo}, eps = {eps:g}")
        ax.grid(alpha=0.3, which="both")
        not_converged_mark(ax, _converged(sub))
    axes[0][0].set_ylabel("optimal bandwidth B* (GB/s)")
    fig.tight_layout()
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:  # one legend below the panels: never over the curves
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(labels)),
                   fontsize=8, frameon=False)
    return fig
