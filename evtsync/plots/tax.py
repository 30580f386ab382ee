"""Figures of the measured tax: CDFs of tau per PG and collective type (paper's Figure 3), wait
shares per rank, and the attribution of the straggler's delay to causes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from evtsync.core.vocabulary import collective_event_words
from evtsync.plots.base import legend_below, new_figure, readable_log_axis, save_figure
from evtsync.trace.ranks import is_cpu_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def tax_cdfs(collectives: pd.DataFrame, measure: str = "tau_max_us") -> Figure:
    """Empirical CDF of ``measure`` for each (PG, collective type), log-scaled in µs."""
    fig, ax = new_figure()
    if collectives.empty:
        ax.text(0.5, 0.5, "no collectives", ha="center", va="center", transform=ax.transAxes)
    drawn = []
    for (pg, coll), grp in collectives.groupby(["pg", "collective"], sort=True):
        values = np.sort(grp[measure].to_numpy(dtype=float))
        probs = np.arange(1, len(values) + 1) / len(values)
        shown = np.maximum(values, 1e-3)
        drawn.append(shown)
        ax.step(shown, probs, where="post", label=f"{pg} {coll} (n={len(values)})")
    ax.set_xscale("log")
    if drawn:
        every = np.concatenate(drawn)
        readable_log_axis(ax.xaxis, float(every.min()), float(every.max()))
    ax.set_ylim(0, 1.02)
    cpu = "gpu" in collectives and len(collectives) > 0 and all(is_cpu_label(g) for g in collectives["gpu"])
    ax.set_xlabel(f"{'max−min' if measure == 'tau_max_us' else 'median−min'} {collective_event_words(cpu)} duration (µs)")
    ax.set_ylabel("fraction of collectives")
    ax.set_title("Synchronization tax per process group and collective")
    ax.grid(alpha=0.3)
    if len(collectives):
        legend_below(ax, ncol=2)
    return fig


def plot_tax_cdfs(collectives: pd.DataFrame, path: str | os.PathLike[str],
                  measure: str = "tau_max_us") -> Path:
    """:func:`tax_cdfs` saved to ``path`` (format from its extension)."""
    return save_figure(tax_cdfs(collectives, measure), path)


def wait_shares(ranks: pd.DataFrame, title: str) -> Figure:
    """ECDFs of the wait share of the rank that waited longest and of the median rank, per workload."""
    fig, ax = new_figure(6.4, 3.8)
    for i, (workload, sub) in enumerate(ranks.groupby("workload", sort=True)):
        per = sub.groupby(["pg", "index"])["wait_share"].agg(["max", "median"])
        for col, style in (("max", "-"), ("median", "--")):
            v = np.sort(per[col].to_numpy(float))
            if v.size:
                ax.step(v, np.arange(1, v.size + 1) / v.size, style, where="post", color=f"C{i}",
                        label=f"{workload}: {'longest-waiting rank' if col == 'max' else 'median rank'}")
    cpu = "gpu" in ranks and len(ranks) > 0 and all(is_cpu_label(g) for g in ranks["gpu"])
    ax.set(xlabel=f"wait share of the {collective_event_words(cpu)} time (waiting / its duration)",
           ylabel="fraction of collectives", title=title, xlim=(0, 1), ylim=(0, 1.02))
    ax.grid(alpha=0.3)
    legend_below(ax, ncol=2)
    return fig


def attribution_breakdown(summary: pd.DataFrame) -> Figure:
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
    ax.set(xlabel="share of attributed collectives", title="Principal cause of the straggler's delay", xlim=(0, 1))
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig
