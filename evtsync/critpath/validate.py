"""Validation (a) of methodology §4: does the critical path explain the tax?

Per workload (and per PG), regress the straggler's path extra time (the sum of its path
segments' extra time over the fastest rank, see :mod:`evtsync.critpath.tasks`)
on the communication-time difference of the collective (tau_max = the fastest rank's NCCL
time minus the straggler's). A slope and R² near 1 mean the path accounts for the tax.

Two fits per scope: ordinary least squares (slope with its standard error and a central
interval from the t quantile, intercept, R²) and the Theil–Sen median of pairwise slopes
(``scipy.stats.theilslopes``, with its interval), both at the level of every interval of
evtsync (:data:`evtsync.core.defaults.INTERVAL_LEVEL`, stated in the ``level`` column), which one outlying collective cannot
move far; above :data:`THEIL_MAX_POINTS` collectives on a seeded random subsample of that
size (its pairwise slopes take O(n²) memory), the size used in ``theil_n``. Each scope is fitted twice: over every attributed collective (``subset = all``:
status ``ok`` or ``unexplained``) and over the explained ones only (``explained``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

from evtsync.core.defaults import INTERVAL_LEVEL

VALIDATION_COLUMNS = ["scope", "subset", "n", "level", "slope", "slope_se", "slope_lo", "slope_hi", "intercept_us",
                      "r2", "theil_n", "theil_slope", "theil_lo", "theil_hi", "theil_intercept_us", "x_mean_us",
                      "y_mean_us"]
#: Theil–Sen takes the median of all pairwise slopes: O(n²) time and memory. Above this many
#: points it is computed on a random subsample of this size (seeded, reported as ``theil_n``).
THEIL_MAX_POINTS = 2000
#: Statuses of collectives that have a path account (see evtsync.critpath.attribution).
ACCOUNTED = ("ok", "unexplained")


def fit_line(x: np.ndarray, y: np.ndarray, level: float = INTERVAL_LEVEL) -> dict[str, float]:
    """OLS and Theil–Sen fits of y on x: slopes, OLS standard error and central ``level``
    intervals (``slope_lo``/``slope_hi``, ``theil_lo``/``theil_hi``), intercepts, R², n."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = len(x)
    out = {"n": n, "level": float(level), "slope": np.nan, "slope_se": np.nan, "slope_lo": np.nan,
           "slope_hi": np.nan, "intercept_us": np.nan, "r2": np.nan, "theil_n": 0, "theil_slope": np.nan,
           "theil_lo": np.nan, "theil_hi": np.nan, "theil_intercept_us": np.nan,
           "x_mean_us": float(x.mean()) if n else np.nan, "y_mean_us": float(y.mean()) if n else np.nan}
    if n < 3 or np.ptp(x) == 0:
        return out
    fit = stats.linregress(x, y)
    t = stats.t.ppf((1 + level) / 2, n - 2)
    out.update(slope=float(fit.slope), slope_se=float(fit.stderr), slope_lo=float(fit.slope - t * fit.stderr),
               slope_hi=float(fit.slope + t * fit.stderr), intercept_us=float(fit.intercept),
               r2=float(fit.rvalue ** 2))
    xs, ys = x, y
    if n > THEIL_MAX_POINTS:
        pick = np.sort(np.random.default_rng(0).choice(n, THEIL_MAX_POINTS, replace=False))
        xs, ys = x[pick], y[pick]
    out["theil_n"] = len(xs)
    if np.ptp(xs) == 0:
        return out
    robust = stats.theilslopes(ys, xs, alpha=level)  # scipy's alpha is the confidence level
    out.update(theil_slope=float(robust.slope), theil_lo=float(robust.low_slope),
               theil_hi=float(robust.high_slope), theil_intercept_us=float(robust.intercept))
    return out


def regress_path_on_tax(collectives: pd.DataFrame, level: float = INTERVAL_LEVEL) -> pd.DataFrame:
    """Path extra time (µs) regressed on tau_max (µs): per PG, over all PGs, and over the
    collectives with GPU-only straggler paths (there the path extra is a plain sum of kernel
    and stream-queue differences, the independent check), each over all accounted
    collectives and over the explained ones."""
    rows = []
    if len(collectives):
        accounted = collectives[collectives["status"].isin(ACCOUNTED)]
        for subset, table in (("all", accounted), ("explained", accounted[accounted["status"] == "ok"])):
            if table.empty:
                continue
            scopes = [(str(pg), grp) for pg, grp in table.groupby("pg", sort=True)]
            if table["pg"].nunique() > 1:
                scopes.append(("all", table))
            scopes.append(("gpu_only", table[table["path_kind"] == "gpu_only"]))
            for scope, grp in scopes:
                rows.append({"scope": scope, "subset": subset,
                             **fit_line(grp["tau_max_us"].to_numpy(), grp["path_extra_us"].to_numpy(), level)})
    return pd.DataFrame(rows, columns=VALIDATION_COLUMNS)
