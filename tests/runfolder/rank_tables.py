"""Test helper: the rank model's tables of a run folder (the ``rankmodel`` stage's schema, issue 45)
written by calling the library on a fit, so that the summary and the report are exercised on the
real columns without running the stage. Tests only; writes into the given run folder (a tmp_path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL
from evtsync.evt.families import tail_verdict
from evtsync.evt.rankmodel import RankModelFit, loo_table

Q = ((1 - INTERVAL_LEVEL) / 2, (1 + INTERVAL_LEVEL) / 2)
TAU_N = 512


def _cells(fit: RankModelFit) -> pd.DataFrame:
    return fit.cells[["cell", "gpu", "precision"]]


def _xi_row(v: np.ndarray) -> dict:
    lo, hi = np.quantile(v, Q)
    return {"xi_mean": float(v.mean()), "xi_median": float(np.median(v)), "xi_lo": float(lo), "xi_hi": float(hi),
            "level": INTERVAL_LEVEL, "p_xi_positive": float((v > 0).mean()), "verdict": tail_verdict(lo, hi)}


def write_rank_tables(run: Path, fit: RankModelFit, gumbel: RankModelFit | None, b_us: dict[str, float],
                      draws: int = 200) -> None:
    """tables/rank_effects, rank_variance, rank_xi, rank_loo and fits/rankmodel*.nc of ``fit``."""
    tables = run / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    cells = _cells(fit)
    effects = fit.rank_effects().merge(cells, on="cell")
    effects["b_us"] = effects["cell"].map(b_us)
    for c in ("rho_mean", "rho_lo", "rho_hi", "vs_others_mean", "vs_others_lo", "vs_others_hi"):
        effects[f"{c}_us"] = effects[c] * effects["b_us"]
    for c in ("tau_without_n", "tau_without_median_us", "tau_without_lo_us", "tau_without_hi_us",
              "tau_with_median_us"):
        effects[c] = np.nan
    for i, row in effects[effects["slow"]].iterrows():
        b = b_us[row["cell"]]
        with_ = fit.tau_draws([TAU_N], row["cell"], draws=draws)[:, 0] * b
        without = fit.tau_draws([TAU_N], row["cell"], draws=draws, exclude_ranks=[row["rank"]])[:, 0] * b
        lo, hi = np.quantile(without, Q)
        effects.loc[i, ["tau_without_n", "tau_without_median_us", "tau_without_lo_us", "tau_without_hi_us",
                        "tau_with_median_us"]] = [TAU_N, float(np.median(without)), lo, hi, float(np.median(with_))]
    effects.to_parquet(tables / "rank_effects.parquet")
    fit.variance_shares().merge(cells, on="cell").to_parquet(tables / "rank_variance.parquet")
    xi = fit.xi_summary().merge(cells, on="cell").assign(kind="cell")
    post = fit.posterior
    pooled = []
    for kind in ("gpu", "precision"):
        xi0 = post["xi0"].values.ravel()
        for level in sorted(cells[kind].unique()):
            delta = (post[f"delta_{kind}"].sel({kind: level}).values.ravel() if f"delta_{kind}" in post
                     else np.zeros_like(xi0))
            pooled.append({"kind": kind, "cell": "", "gpu": level if kind == "gpu" else "",
                           "precision": level if kind == "precision" else "", **_xi_row(xi0 + delta)})
    pd.concat([xi, pd.DataFrame(pooled)], ignore_index=True).to_parquet(tables / "rank_xi.parquet")
    fits = [("xi free", fit)] + ([("xi = 0 (Gumbel domain)", gumbel)] if gumbel is not None else [])
    loo_table(fits).to_parquet(tables / "rank_loo.parquet")
    fit.save(run / "fits" / "rankmodel.nc")
    if gumbel is not None:
        gumbel.save(run / "fits" / "rankmodel-gumbel.nc")
