"""Validation (a) of SPEC §4: does the critical path explain the tax?

Per workload (and per PG), regress the compute-time difference found on the straggler's
critical path (sum of its events' extra time over the fastest rank's same events) on the
communication-time difference of the collective (tau_max = the fastest rank's NCCL time
minus the straggler's). A slope and R² near 1 mean the path accounts for the tax.
Ordinary least squares with the slope's standard error and a 95% interval (t quantile).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

VALIDATION_COLUMNS = ["scope", "n", "slope", "slope_se", "slope_lo95", "slope_hi95", "intercept_us",
                      "r2", "x_mean_us", "y_mean_us"]


def fit_line(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """OLS of y on x: slope, its standard error and 95% interval, intercept, R², n."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = len(x)
    out = {"n": n, "slope": np.nan, "slope_se": np.nan, "slope_lo95": np.nan, "slope_hi95": np.nan,
           "intercept_us": np.nan, "r2": np.nan, "x_mean_us": float(x.mean()) if n else np.nan,
           "y_mean_us": float(y.mean()) if n else np.nan}
    if n < 3 or np.ptp(x) == 0:
        return out
    fit = stats.linregress(x, y)
    t = stats.t.ppf(0.975, n - 2)
    out.update(slope=float(fit.slope), slope_se=float(fit.stderr), slope_lo95=float(fit.slope - t * fit.stderr),
               slope_hi95=float(fit.slope + t * fit.stderr), intercept_us=float(fit.intercept),
               r2=float(fit.rvalue ** 2))
    return out


def regress_path_on_tax(collectives: pd.DataFrame) -> pd.DataFrame:
    """Path compute difference (µs) regressed on tau_max (µs): per PG, over all PGs, and over
    the collectives with GPU-only straggler paths (``gpu_only``: there the path difference is
    a plain sum of kernel-duration differences, with no cap, so it is the independent check;
    through the CPU the effect is bounded by the exit kernel's lateness, see
    :class:`evtsync.critpath.walk.PathComparison`)."""
    ok = collectives[collectives["status"] == "ok"] if len(collectives) else collectives
    rows = []
    if len(ok):
        for pg, grp in ok.groupby("pg", sort=True):
            rows.append({"scope": str(pg), **fit_line(grp["tau_max_us"].to_numpy(),
                                                      grp["path_extra_us"].to_numpy())})
        if ok["pg"].nunique() > 1:
            rows.append({"scope": "all", **fit_line(ok["tau_max_us"].to_numpy(), ok["path_extra_us"].to_numpy())})
        gpu = ok[ok["path_kind"] == "gpu_only"]
        rows.append({"scope": "gpu_only", **fit_line(gpu["tau_max_us"].to_numpy(), gpu["path_extra_us"].to_numpy())})
    return pd.DataFrame(rows, columns=VALIDATION_COLUMNS)
