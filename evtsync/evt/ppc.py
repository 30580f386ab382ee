"""Posterior predictive checks per cell: does each cell's fitted GEV reproduce its own data?

For every cell and statistic T — the sample quantiles 0.5, 0.9, 0.99 and the maximum — the
observed T is compared with its posterior predictive distribution: per posterior draw
(mu, sigma, xi), T of a replicated cell of the same size. The replicated statistics are
drawn exactly without simulating whole data sets: T is the k-th order statistic
(``k = ceil(q n)``; the maximum is ``k = n``) and the k-th order statistic of n uniforms is
Beta(k, n + 1 - k), so ``T_rep = F^-1(U_k; mu, sigma, xi)`` — O(draws) per cell at any n.

The tail-area probability of each statistic is ``p = 2 min(P(T_rep <= T), P(T_rep >= T))``
(two-sided, at most 1). A cell whose data lie in a tail of their own posterior predictive
distribution (``p < PPC_ALPHA`` for any statistic) does not fit: typically a small cell
pulled onto a surface its data disagree with. Posterior predictive p-values are
conservative (closer to 0.5 than uniform when the model is right), so with 4 statistics and
a few cells the threshold below rarely flags a correct model (simulation study in
``docs/bayesian.md``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL
from evtsync.evt import gev

if TYPE_CHECKING:
    import xarray as xr  # imported by the functions that use it (issue 48: import cost)

log = logging.getLogger("evtsync.evt.ppc")

__all__ = ["PPC_ALPHA", "PPC_QUANTILES", "posterior_predictive_check", "ppc_verdict"]

#: Sample quantiles checked (plus the maximum).
PPC_QUANTILES = (0.5, 0.9, 0.99)
#: Two-sided tail-area probability below which a statistic flags its cell.
PPC_ALPHA = 0.01
#: Posterior draws used (thinned evenly when the posterior has more).
PPC_MAX_DRAWS = 2000
#: Central level of the posterior predictive interval stored beside each statistic.
PPC_LEVEL = INTERVAL_LEVEL


def _order_statistic_index(q: float | None, n: int) -> int:
    """1-based index of the order statistic used as the sample ``q`` quantile (None = max)."""
    if q is None:
        return n
    return int(min(max(np.ceil(q * n), 1), n))


def posterior_predictive_check(tree: xr.DataTree, seed: int = 0, max_draws: int = PPC_MAX_DRAWS,
                               alpha: float = PPC_ALPHA) -> pd.DataFrame:
    """One row per (cell, statistic): observed value, posterior predictive median and
    ``PPC_LEVEL`` interval, the tail areas, the two-sided ``p_value`` and ``flagged``."""
    from evtsync.evt.fitfile import cell_parameters

    params = cell_parameters(tree)
    obs = tree["observed_data"].to_dataset()
    z = obs["z"].values
    cell_idx = obs["cell"].values
    rng = np.random.default_rng(seed)
    n_samples = params.sizes["chain"] * params.sizes["draw"]
    take = np.unique(np.linspace(0, n_samples - 1, min(max_draws, n_samples)).round().astype(int))
    stats = [(f"q{q:g}", q) for q in PPC_QUANTILES] + [("max", None)]
    lo_q, hi_q = (1 - PPC_LEVEL) / 2, (1 + PPC_LEVEL) / 2
    rows = []
    for c, cell in enumerate(params["cell"].values):
        z_cell = np.sort(z[cell_idx == c])
        n = len(z_cell)
        if n == 0:
            continue
        draws = {name: params[name].sel(cell=cell).values.reshape(-1)[take] for name in ("mu", "sigma", "xi")}
        for label, q in stats:
            k = _order_statistic_index(q, n)
            observed = float(z_cell[k - 1])
            v = rng.beta(n + 1 - k, k, size=len(take))  # 1 - U_(k)
            rep = gev.isf(v, draws["mu"], draws["sigma"], draws["xi"])  # accurate for tiny v (the max of 50k)
            p_low = float(np.mean(rep <= observed))
            p_high = float(np.mean(rep >= observed))
            p_value = min(1.0, 2.0 * min(p_low, p_high))
            lo, med, hi = np.quantile(rep, [lo_q, 0.5, hi_q])
            rows.append({"cell": str(cell), "statistic": label, "n_obs": n, "order_statistic": k,
                         "observed": observed, "pp_median": float(med), "pp_lower": float(lo),
                         "pp_upper": float(hi), "p_below": p_low, "p_above": p_high, "p_value": p_value,
                         "flagged": bool(p_value < alpha)})
    return pd.DataFrame(rows)


def ppc_verdict(check: pd.DataFrame) -> tuple[bool, str]:
    """``(fits, text)``: ``"fits"`` or ``"does not fit cell X (q0.99 p = 0.003, ...)"``."""
    flagged = check[check["flagged"]]
    if flagged.empty:
        worst = check.loc[check["p_value"].idxmin()] if len(check) else None
        tail = f" (smallest p = {worst.p_value:.3f}: {worst.cell} {worst.statistic})" if worst is not None else ""
        return True, f"fits: every cell's q0.5, q0.9, q0.99 and maximum inside its posterior predictive{tail}"
    parts = []
    for cell, group in flagged.groupby("cell", sort=False):
        stats = ", ".join(f"{r.statistic} {r.observed:.4g} vs {r.pp_lower:.4g}..{r.pp_upper:.4g} p = {r.p_value:.3g}"
                          for r in group.itertuples())
        parts.append(f"cell {cell} ({stats})")
    return False, "does not fit " + "; ".join(parts)


def check_dataset(check: pd.DataFrame) -> xr.Dataset:
    """The check as a Dataset indexed by (cell, statistic), for the fit tree."""
    import xarray as xr
    return xr.Dataset.from_dataframe(check.set_index(["cell", "statistic"]))
