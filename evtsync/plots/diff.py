"""Figures of ``evtsync diff``'s fit level: the shift of B* between two runs.

Input: the table of :func:`evtsync.runfolder.diff.diff_bstar` (one row per cell, topology, n and eps with
``d_rel_lo``, ``d_rel_median``, ``d_rel_hi``: the posterior of B*_B / B*_A − 1). One panel per
topology (the ratio is the same for every eps): the relative change against n with its interval, one series per GPU ×
precision cell; rows without a verdict because a fit did not converge are drawn with x markers
(and the panel says so), rows without numbers (a cell in one fit only) are left out and listed in
the title's footnote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from evtsync.core.errors import InputError
from evtsync.plots.base import new_figure, not_converged_mark

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def bstar_shift(table: pd.DataFrame) -> Figure:
    """Relative ΔB* = B*_B / B*_A − 1 (%) against n, per topology, with its interval (the ratio does
    not depend on eps: B* is proportional to (1 + eps)/−eps on both sides)."""
    need = ["cell", "topology", "n", "eps", "d_rel_lo", "d_rel_median", "d_rel_hi", "verdict", "reason"]
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise InputError(f"ΔB* table: missing column(s) {missing} (expected evtsync.runfolder.diff.diff_bstar's table)")
    numbers = table[table["d_rel_median"].notna()]
    if numbers.empty:
        raise InputError("ΔB* table: no row has a posterior (every cell is in one fit only or lacks b)")
    # B*_B / B*_A = (p·alpha + tau_A) / (p·alpha + tau_B): the same for every eps, so one eps is drawn
    eps0 = numbers["eps"].iloc[0]
    numbers = numbers[numbers["eps"] == eps0]
    panels = [(t, eps0) for t in dict.fromkeys(numbers["topology"])]
    fig, axes = new_figure(4.2 * len(panels), 3.6, ncols=len(panels), squeeze=False, sharey=True)
    level = f"{float(table['level'].iloc[0]):.0%}" if "level" in table and len(table) else ""
    for ax, (topo, eps) in zip(axes[0], panels, strict=True):
        sub = numbers[(numbers["topology"] == topo) & (numbers["eps"] == eps)]
        cells = list(dict.fromkeys(sub["cell"]))
        for i, cell in enumerate(cells):
            part = sub[sub["cell"] == cell].sort_values("n")
            # a small horizontal offset per cell so that the intervals do not hide each other
            x = part["n"].to_numpy(float) * 2 ** ((i - (len(cells) - 1) / 2) * 0.06)
            mid = 100 * part["d_rel_median"].to_numpy(float)
            lo, hi = 100 * part["d_rel_lo"].to_numpy(float), 100 * part["d_rel_hi"].to_numpy(float)
            refused = part["reason"].astype(str).str.contains("not converged").to_numpy()
            ax.errorbar(x, mid, yerr=[mid - lo, hi - mid], fmt="-", color=f"C{i}", capsize=2, lw=1,
                        label=str(cell).replace("|", " "))
            ax.scatter(x[~refused], mid[~refused], color=f"C{i}", s=14, zorder=3)
            ax.scatter(x[refused], mid[refused], color=f"C{i}", marker="x", s=24, zorder=3)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set(xlabel="domain size n (GPUs)", title=f"{topo} (any eps)")
        ax.grid(alpha=0.3, which="both")
        not_converged_mark(ax, not sub["reason"].astype(str).str.contains("not converged").any())
    axes[0][0].set_ylabel(f"B*: B / A − 1 (%), {level} interval")
    handles, labels = axes[0][0].get_legend_handles_labels()
    left_out = sorted(set(table.loc[table["d_rel_median"].isna(), "cell"].astype(str)))
    ncol = max(1, min(len(labels), 3 * len(panels)))  # about three entries per 4-inch panel
    bottom = 0.06 + 0.055 * ((len(labels) - 1) // ncol + 1) + (0.05 if left_out else 0.0)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    # below the panels: never over the data or the NOT CONVERGED mark
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, 0.05 if left_out else 0.0))
    if left_out:
        fig.text(0.01, 0.005, f"not drawn (no posterior on both sides): {', '.join(left_out)}", fontsize=7)
    return fig

