"""Validation (a) of methodology §4: does the critical path explain the tax?

Per workload (and per PG), regress the straggler's path extra time (the sum of its path
segments' extra time over the fastest rank, see :mod:`evtsync.critpath.tasks`)
on the communication-time difference of the collective (tau_max = the fastest rank's NCCL
time minus the straggler's). A slope and R² near 1 mean the path accounts for the tax.

Two fits per scope: ordinary least squares (slope with its standard error and a central
interval from the t quantile, intercept, R²) and the Theil–Sen median of pairwise slopes
with Sen's (1968) interval (as ``scipy.stats.theilslopes`` computes them), both at the level of every interval of
evtsync (:data:`evtsync.core.defaults.INTERVAL_LEVEL`, stated in the ``level`` column), which one outlying collective cannot
move far; above :data:`THEIL_MAX_POINTS` collectives on a seeded random subsample of that
size (its pairwise slopes take O(n²) memory), the size used in ``theil_n``. Each scope is fitted twice: over every attributed collective (``subset = all``:
status ``ok`` or ``unexplained``) and over the explained ones only (``explained``).

Written with NumPy and :mod:`math` (the formulas of ``scipy.stats.linregress``, ``t.ppf`` and
``theilslopes``; ``tests/critpath/test_validate.py`` checks them against SciPy): importing
``scipy.stats`` cost ~1 s of every ``evtsync attribute`` (issue 30).
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL

VALIDATION_COLUMNS = ["scope", "subset", "n", "level", "slope", "slope_se", "slope_lo", "slope_hi", "intercept_us",
                      "r2", "theil_n", "theil_slope", "theil_lo", "theil_hi", "theil_intercept_us", "x_mean_us",
                      "y_mean_us"]
#: Theil–Sen takes the median of all pairwise slopes: O(n²) time and memory. Above this many
#: points it is computed on a random subsample of this size (seeded, reported as ``theil_n``).
THEIL_MAX_POINTS = 2000
#: Statuses of collectives that have a path account (see evtsync.critpath.attribution).
ACCOUNTED = ("ok", "unexplained")


def t_quantile(p: float, df: int) -> float:
    """Quantile ``p`` (0.5 < p < 1) of Student's t with ``df`` >= 1 degrees of freedom.

    Newton's method on the exact finite series of the t distribution function for integer
    ``df`` (Abramowitz & Stegun 26.7.3-4: with theta = atan(t / sqrt(df)), P(|T| <= t) is
    a sum of powers of cos(theta)), started at the normal quantile; equal to
    ``scipy.stats.t.ppf`` to ~1e-12 relative.
    """
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    level = 2 * p - 1  # P(|T| <= t)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def central(t: float) -> float:
        theta = math.atan(t / math.sqrt(df))
        c2 = math.cos(theta) ** 2
        if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 c2 + 2·4/(3·5) c2² + ...)), df - 3 over 2 terms
            k = np.arange(1, (df - 1) // 2)
            series = 1 + float(np.sum(np.cumprod(2 * k / (2 * k + 1) * c2))) if df > 1 else 0.0
            return 2 / math.pi * (theta + (math.sin(theta) * math.cos(theta) * series if df > 1 else 0.0))
        k = np.arange(1, df // 2)  # even: sin (1 + 1/2 c2 + 1·3/(2·4) c2² + ...)
        return math.sin(theta) * (1 + float(np.sum(np.cumprod((2 * k - 1) / (2 * k) * c2))))

    t = NormalDist().inv_cdf(p)
    for _ in range(100):
        density = 2 * math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))  # of |T|
        step = (central(t) - level) / density
        t = max(t - step, t / 2)  # never below zero (the function is concave there)
        if abs(step) <= 1e-15 * t:
            break
    return t


def _linregress(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float, float]:
    """OLS of y on x as ``scipy.stats.linregress`` computes it (the same operations in the same
    order, so the same numbers): slope, intercept, r, stderr."""
    n = len(x)
    xm, ym = np.mean(x), np.mean(y)
    xd, yd = x - xm, y - ym
    ssxm, ssym, ssxym = float(np.dot(xd, xd)) / n, float(np.dot(yd, yd)) / n, float(np.dot(xd, yd)) / n
    if ssxm == 0.0 or ssym == 0.0:
        r = math.nan if ssxym == 0 else 0.0
    else:
        r = min(1.0, max(-1.0, ssxym / math.sqrt(ssxm * ssym)))
    slope = ssxym / ssxm
    intercept = float(ym - slope * xm)
    stderr = math.sqrt((1 - r**2) * ssym / ssxm / (n - 2)) if r == r else math.nan
    return slope, intercept, r, stderr


def _tie_counts(v: np.ndarray) -> np.ndarray:
    return np.unique(v, return_counts=True)[1].astype(np.float64)


def _theilslopes(y: np.ndarray, x: np.ndarray, level: float) -> tuple[float, float, float, float]:
    """Theil–Sen slope (median of the pairwise slopes over pairs with distinct x), intercept
    median(y) - slope median(x), and Sen's (1968, eq. 2.6) interval of the slope at ``level``,
    corrected for ties: the method and numbers of ``scipy.stats.theilslopes(y, x, level)``."""
    i, j = np.triu_indices(len(x), k=1)
    dx = x[i] - x[j]
    keep = dx != 0
    slopes = np.sort((y[i] - y[j])[keep] / dx[keep])
    med = float(np.median(slopes))
    intercept = float(np.median(y) - med * np.median(x))
    alpha = 1 - level if level > 0.5 else level
    z = NormalDist().inv_cdf(alpha / 2)
    nt, ny = len(slopes), float(len(y))
    ties = sum(float(np.sum(k * (k - 1) * (2 * k + 5))) for k in (_tie_counts(x), _tie_counts(y)))
    sigsq = (ny * (ny - 1) * (2 * ny + 5) - ties) / 18
    if sigsq < 0:
        return med, intercept, math.nan, math.nan
    sigma = math.sqrt(sigsq)
    upper = min(int(np.round((nt - z * sigma) / 2)), nt - 1)
    lower = max(int(np.round((nt + z * sigma) / 2)) - 1, 0)
    return med, intercept, float(slopes[lower]), float(slopes[upper])


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
    slope, intercept, r, stderr = _linregress(x, y)
    t = t_quantile((1 + level) / 2, n - 2)
    out.update(slope=float(slope), slope_se=float(stderr), slope_lo=float(slope - t * stderr),
               slope_hi=float(slope + t * stderr), intercept_us=float(intercept), r2=float(r ** 2))
    xs, ys = x, y
    if n > THEIL_MAX_POINTS:
        pick = np.sort(np.random.default_rng(0).choice(n, THEIL_MAX_POINTS, replace=False))
        xs, ys = x[pick], y[pick]
    out["theil_n"] = len(xs)
    if np.ptp(xs) == 0:
        return out
    theil, theil_intercept, lo, hi = _theilslopes(ys, xs, level)
    out.update(theil_slope=theil, theil_lo=lo, theil_hi=hi, theil_intercept_us=theil_intercept)
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
