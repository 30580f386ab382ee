"""Posterior predictive quantities of a fit: tau(n) per cell, B* and its reduction, straggler delay.

Every number is computed draw by draw through the same functions as the point estimates —
:func:`evtsync.evt.predict.predicted_tax_us` (tau(n) = b·E_k, k = n/m, SPEC §7) and
:mod:`evtsync.hockney` (B*, Hockney's B*_H, the reduction, SPEC §8) — and summarised as the
posterior mean and an equal-tailed credible interval (``level``, default 90%). A fit that did
not converge is flagged in every table (column ``converged``) and in the log.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from evtsync.errors import InputError
from evtsync.evt.fit import cell_parameters, convergence_note, is_converged
from evtsync.report.plotting import plt, save_figure

log = logging.getLogger("evtsync.evt.posterior")

STRAGGLER_COLUMNS = ("workload", "gpu", "precision", "block_mean_us", "block_sd_us", "mean_delay_us", "n_ranks")


def _check_level(level: float) -> float:
    if not 0 < level < 1:
        raise InputError(f"credible level must lie in (0, 1); got {level}")
    return float(level)


def _interval(draws: np.ndarray, level: float, axis: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=axis)
    return draws.mean(axis=axis), lo, hi


def _cell_table(tree: xr.DataTree) -> pd.DataFrame:
    cells = tree["cells"].to_dataset()
    out = pd.DataFrame({"cell": cells["cell"].values.astype(str)})
    for name, da in cells.data_vars.items():
        if name != "n_obs":
            out[name] = da.values.astype(str)
    out["n_obs"] = cells["n_obs"].values
    return out


def _flat_params(tree: xr.DataTree) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    params = cell_parameters(tree)
    n_cell = params.sizes["cell"]
    return tuple(params[v].values.reshape(-1, n_cell) for v in ("mu", "sigma", "xi"))  # type: ignore[return-value]


def tau_draws(tree: xr.DataTree, n: Sequence[int], block_sd_us: float, m: int = 4) -> xr.DataArray:
    """Posterior draws of tau(n) in µs, dims (sample, cell, n)."""
    from evtsync.evt.predict import predicted_tax_curve_us

    mu, sigma, xi = _flat_params(tree)
    tau = predicted_tax_curve_us(block_sd_us, mu, sigma, xi, list(n), m)
    return xr.DataArray(tau, dims=("sample", "cell", "n"),
                        coords={"cell": tree["cells"]["cell"].values.astype(str), "n": list(n)})


def tau_summary(tree: xr.DataTree, n: Sequence[int], block_sd_us: float, m: int = 4,
                level: float = 0.9) -> pd.DataFrame:
    """tau(n) per cell and n: posterior mean and equal-tailed ``level`` interval (µs)."""
    level = _check_level(level)
    if not block_sd_us >= 0:
        raise InputError(f"block standard deviation must be >= 0 µs; got {block_sd_us}")
    draws = tau_draws(tree, n, block_sd_us, m).values
    mean, lo, hi = _interval(draws, level)
    cells = _cell_table(tree)
    rows = []
    for i, cell in cells.iterrows():
        for j, nn in enumerate(n):
            row = {**cell.to_dict(), "n": int(nn), "k": int(nn) / m, "block_sd_us": float(block_sd_us),
                   "tau_mean_us": mean[i, j], "tau_lower_us": lo[i, j], "tau_upper_us": hi[i, j], "level": level}
            rows.append(row)
    out = pd.DataFrame(rows)
    out["converged"] = is_converged(tree)
    note = convergence_note(tree)
    if note:
        log.warning("%s", note)
    return out


def bandwidth_summary(
    tree: xr.DataTree,
    topologies: Sequence[str],
    n: Sequence[int],
    alpha_us: float,
    size_bytes: float,
    block_sd_us: float,
    eps: float = -0.5,
    m: int = 4,
    level: float = 0.9,
    flops_factor: float = 1.0,
) -> pd.DataFrame:
    """B* (GB/s) and its reduction vs Hockney per cell, topology and n, with credible intervals.

    ``flops_factor`` f divides the block sd, and with it tau, for a GPU f times faster (§8).
    """
    from evtsync.hockney import (
        bandwidth_reduction,
        get_topology,
        hockney_bandwidth,
        optimal_bandwidth,
    )

    level = _check_level(level)
    if not flops_factor > 0:
        raise InputError(f"FLOPS factor must be > 0; got {flops_factor}")
    tau = tau_draws(tree, n, block_sd_us / flops_factor, m).values  # (sample, cell, n)
    cells = _cell_table(tree)
    rows = []
    for name in topologies:
        topo = get_topology(name)
        p = np.asarray(topo.p(np.asarray(n)), dtype=float)
        q = np.asarray(topo.q(np.asarray(n)), dtype=float)
        bstar = optimal_bandwidth(size_bytes, alpha_us, tau, p, q, eps) / 1e9
        bh = hockney_bandwidth(size_bytes, alpha_us, p, q, eps) / 1e9
        red = bandwidth_reduction(alpha_us, tau, p)
        t_mean, t_lo, t_hi = _interval(tau, level)
        b_mean, b_lo, b_hi = _interval(bstar, level)
        r_mean, r_lo, r_hi = _interval(red, level)
        for i, cell in cells.iterrows():
            for j, nn in enumerate(n):
                rows.append({
                    **cell.to_dict(), "topology": topo.name, "n": int(nn), "p": float(p[j]), "q": float(q[j]),
                    "alpha_us": float(alpha_us), "bytes": float(size_bytes), "eps": float(eps),
                    "flops_factor": float(flops_factor),
                    "tau_mean_us": t_mean[i, j], "tau_lower_us": t_lo[i, j], "tau_upper_us": t_hi[i, j],
                    "bstar_mean": b_mean[i, j], "bstar_lower": b_lo[i, j], "bstar_upper": b_hi[i, j],
                    "bstar_hockney": float(np.asarray(bh)[j]),
                    "reduction_mean": r_mean[i, j], "reduction_lower": r_lo[i, j], "reduction_upper": r_hi[i, j],
                    "level": level, "bandwidth_unit": "GB/s",
                })
    out = pd.DataFrame(rows)
    out["converged"] = is_converged(tree)
    return out


def _match_cell(tree: xr.DataTree, row: pd.Series) -> int | None:
    cells = _cell_table(tree)
    groups = [c for c in cells.columns if c not in ("cell", "n_obs")]
    if not groups:
        return 0
    mask = np.ones(len(cells), dtype=bool)
    for g in groups:
        if g not in row.index:
            return None
        mask &= cells[g].to_numpy() == str(row[g])
    hits = np.flatnonzero(mask)
    return int(hits[0]) if len(hits) == 1 else None


def straggler_comparison(tree: xr.DataTree, table: pd.DataFrame, m: int = 4, level: float = 0.9,
                         source: str = "straggler table") -> pd.DataFrame:
    """Predicted vs measured mean straggler delay per row (workload x GPU x precision).

    ``table`` has columns workload, gpu, precision, block_mean_us, block_sd_us, mean_delay_us,
    n_ranks. Each row gets the posterior mean and ``level`` interval of tau(n_ranks) =
    b·E_{n/m} with its own b and the fit's cell for its GPU and precision, and whether the
    measured delay falls inside. Rows with no matching cell or an n not a multiple of m are
    skipped, counted and logged.
    """
    from evtsync.evt.predict import predicted_tax_us

    level = _check_level(level)
    missing = [c for c in STRAGGLER_COLUMNS if c not in table.columns]
    if missing:
        raise InputError(f"{source}: missing column(s) {missing}; expected {list(STRAGGLER_COLUMNS)}")
    mu, sigma, xi = _flat_params(tree)
    rows, skipped = [], {"no matching cell": 0, "n not a multiple of m": 0, "non-finite value": 0}
    for _, row in table.iterrows():
        vals = [row["block_sd_us"], row["mean_delay_us"], row["n_ranks"]]
        if not all(np.isfinite(float(v)) for v in vals):
            skipped["non-finite value"] += 1
            continue
        n_ranks = int(row["n_ranks"])
        if n_ranks % m != 0 or n_ranks < m:
            skipped["n not a multiple of m"] += 1
            continue
        c = _match_cell(tree, row)
        if c is None:
            skipped["no matching cell"] += 1
            continue
        tau = predicted_tax_us(float(row["block_sd_us"]), mu[:, c], sigma[:, c], xi[:, c], n_ranks, m)
        mean, lo, hi = _interval(np.asarray(tau), level)
        measured = float(row["mean_delay_us"])
        rows.append({
            "workload": row["workload"], "gpu": row["gpu"], "precision": row["precision"], "n_ranks": n_ranks,
            "block_mean_us": float(row["block_mean_us"]), "block_sd_us": float(row["block_sd_us"]),
            "measured_delay_us": measured, "predicted_mean_us": float(mean), "predicted_lower_us": float(lo),
            "predicted_upper_us": float(hi), "inside_interval": bool(lo <= measured <= hi), "level": level,
            "cell": str(tree["cells"]["cell"].values[c]),
        })
    for why, count in skipped.items():
        if count:
            log.warning("%s: skipped %d row(s): %s", source, count, why)
    out = pd.DataFrame(rows)
    out.attrs["skipped"] = skipped
    out["converged"] = is_converged(tree) if len(out) else pd.Series(dtype=bool)
    return out


def plot_tau(summary: pd.DataFrame, path: str | os.PathLike[str], title: str = "") -> None:
    """tau(n) against n per cell: posterior mean with its credible band."""
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, (cell, rows) in enumerate(summary.groupby("cell", sort=False)):
        rows = rows.sort_values("n")
        ax.plot(rows["n"], rows["tau_mean_us"], "o-", color=f"C{i}", label=cell)
        ax.fill_between(rows["n"], rows["tau_lower_us"], rows["tau_upper_us"], color=f"C{i}", alpha=0.25)
    level = summary["level"].iloc[0]
    ax.set_xscale("log", base=2)
    ax.set(xlabel="domain size n (ranks)", ylabel="predicted tax tau(n) (µs)",
           title=title or f"Posterior tau(n): mean and {level:.0%} credible band")
    if not bool(summary["converged"].all()):
        ax.text(0.02, 0.98, "fit NOT CONVERGED", transform=ax.transAxes, color="red", va="top")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def plot_bandwidth(summary: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """B* against n per topology (and cell) with credible bands, beside Hockney's B*_H."""
    fig, ax = plt.subplots(figsize=(7, 5))
    drawn_hockney: set[str] = set()
    for k, ((topo, cell), rows) in enumerate(summary.groupby(["topology", "cell"], sort=False)):
        rows = rows.sort_values("n")
        ax.plot(rows["n"], rows["bstar_mean"], "o-", color=f"C{k}", label=f"{topo} {cell}: with tax")
        ax.fill_between(rows["n"], rows["bstar_lower"], rows["bstar_upper"], color=f"C{k}", alpha=0.25)
        if topo not in drawn_hockney:
            ax.plot(rows["n"], rows["bstar_hockney"], "s--", color="0.3", alpha=0.8, label=f"{topo}: Hockney")
            drawn_hockney.add(topo)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    level = summary["level"].iloc[0]
    ax.set(xlabel="domain size n (GPUs)", ylabel="optimal bandwidth B* (GB/s)",
           title=f"B* at elasticity {summary['eps'].iloc[0]:g}: mean and {level:.0%} band")
    if not bool(summary["converged"].all()):
        ax.text(0.02, 0.98, "fit NOT CONVERGED", transform=ax.transAxes, color="red", va="top")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def plot_straggler(comparison: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Measured against predicted mean straggler delay with interval bars (the paper's Fig. 11)."""
    fig, ax = plt.subplots(figsize=(6, 6))
    for i, (gpu, rows) in enumerate(comparison.groupby("gpu", sort=False)):
        yerr = np.vstack([rows["predicted_mean_us"] - rows["predicted_lower_us"],
                          rows["predicted_upper_us"] - rows["predicted_mean_us"]])
        ax.errorbar(rows["measured_delay_us"], rows["predicted_mean_us"], yerr=yerr, fmt="o", color=f"C{i}",
                    capsize=3, label=gpu)
        for _, r in rows.iterrows():
            ax.annotate(str(r["workload"]), (r["measured_delay_us"], r["predicted_mean_us"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    lim = [0, 1.1 * float(np.nanmax(np.r_[comparison["measured_delay_us"], comparison["predicted_upper_us"]]))]
    ax.plot(lim, lim, "k:", lw=1, label="predicted = measured")
    level = comparison["level"].iloc[0]
    ax.set(xlim=lim, ylim=lim, xlabel="measured mean straggler delay (µs)",
           ylabel=f"predicted tau (µs), mean and {level:.0%} interval", title="Predicted vs measured straggler delay")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
