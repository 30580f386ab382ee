"""Validation fits: OLS and Theil–Sen against hand-made lines."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.critpath.validate import THEIL_MAX_POINTS, fit_line, regress_path_on_tax, t_quantile


def test_one_outlier_moves_ols_not_theil_sen():
    x = np.arange(1.0, 41.0) * 100.0
    y = x.copy()
    y[0] = 50_000.0  # one collective whose path is far off (as the old injected row was)
    fit = fit_line(x, y)
    assert abs(fit["slope"] - 1.0) > 0.5          # OLS is levered by it
    assert fit["theil_slope"] == 1.0              # the median pairwise slope is not
    assert fit["theil_lo"] <= 1.0 <= fit["theil_hi"]
    assert fit["theil_n"] == 40


def test_theil_sen_subsamples_large_inputs():
    x = np.arange(3 * THEIL_MAX_POINTS, dtype=float)
    fit = fit_line(x, 2.0 * x + 5.0)
    assert fit["theil_n"] == THEIL_MAX_POINTS and fit["n"] == 3 * THEIL_MAX_POINTS
    assert abs(fit["theil_slope"] - 2.0) < 1e-12 and abs(fit["slope"] - 2.0) < 1e-12


def test_subsets_all_and_explained():
    rows = [{"pg": "a", "status": "ok", "tau_max_us": t, "path_extra_us": t, "path_kind": "gpu_only"}
            for t in (100.0, 200.0, 300.0, 400.0)]
    rows.append({"pg": "a", "status": "unexplained", "tau_max_us": 500.0, "path_extra_us": 0.0, "path_kind": "gpu_only"})
    rows.append({"pg": "a", "status": "no_tax", "tau_max_us": 0.0, "path_extra_us": np.nan, "path_kind": None})
    v = regress_path_on_tax(pd.DataFrame(rows)).set_index(["scope", "subset"])
    assert v.loc[("a", "all"), "n"] == 5 and v.loc[("a", "explained"), "n"] == 4
    assert v.loc[("a", "explained"), "slope"] == 1.0 and v.loc[("a", "explained"), "r2"] == 1.0
    assert v.loc[("a", "all"), "slope"] < 0.5


def test_intervals_at_the_one_level_of_evtsync():
    """90% by default (issue 34: attribute printed 95% where everything else says 90%); the OLS
    half-width scales as the t quantile, read from scipy by hand here."""
    from scipy import stats

    rng = np.random.default_rng(3)
    x = np.arange(1.0, 31.0)
    y = 2.0 * x + rng.normal(0.0, 1.0, x.size)
    at90, at95 = fit_line(x, y), fit_line(x, y, level=0.95)
    assert at90["level"] == 0.9 and at95["level"] == 0.95
    half90 = at90["slope_hi"] - at90["slope"]
    half95 = at95["slope_hi"] - at95["slope"]
    assert half90 / half95 == pytest.approx(stats.t.ppf(0.95, 28) / stats.t.ppf(0.975, 28))
    assert at95["theil_lo"] <= at90["theil_lo"] <= at90["theil_hi"] <= at95["theil_hi"]


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 10, 28, 29, 100, 1001, 20_000])
@pytest.mark.parametrize("p", [0.55, 0.9, 0.95, 0.975, 0.995, 0.9999])
def test_t_quantile_equals_scipy(df: int, p: float) -> None:
    """The t quantile written without SciPy (its import was ~1 s of every `attribute`)."""
    from scipy import stats

    assert t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-11)


@pytest.mark.parametrize("seed, n, ties", [(0, 3, False), (1, 12, False), (2, 40, True), (3, 300, True),
                                           (4, 2 * THEIL_MAX_POINTS, True)])
@pytest.mark.parametrize("level", [0.9, 0.95])
def test_fit_line_equals_scipy(seed: int, n: int, ties: bool, level: float) -> None:
    """OLS and Theil–Sen (with Sen's tie-corrected interval) equal to scipy.stats' linregress,
    t.ppf and theilslopes, ties in x and y and the subsample above THEIL_MAX_POINTS included."""
    from scipy import stats

    rng = np.random.default_rng(seed)
    x = rng.gamma(2.0, 50.0, n)
    y = 0.8 * x + rng.standard_t(3, n) * 20.0
    if ties:
        x, y = np.round(x / 10) * 10, np.round(y / 10) * 10
    fit = fit_line(x, y, level)
    ols = stats.linregress(x, y)
    t = stats.t.ppf((1 + level) / 2, n - 2)
    assert fit["slope"] == ols.slope and fit["r2"] == ols.rvalue**2  # the same operations: the same numbers
    assert fit["intercept_us"] == pytest.approx(ols.intercept, rel=1e-10, abs=1e-9)
    assert fit["slope_se"] == pytest.approx(ols.stderr, rel=1e-10)
    assert fit["r2"] == pytest.approx(ols.rvalue**2, rel=1e-10)
    assert fit["slope_lo"] == pytest.approx(ols.slope - t * ols.stderr, rel=1e-10)
    assert fit["slope_hi"] == pytest.approx(ols.slope + t * ols.stderr, rel=1e-10)
    if n > THEIL_MAX_POINTS:
        pick = np.sort(np.random.default_rng(0).choice(n, THEIL_MAX_POINTS, replace=False))
        x, y = x[pick], y[pick]
    theil = stats.theilslopes(y, x, alpha=level)
    assert fit["theil_slope"] == pytest.approx(theil.slope, rel=1e-12)
    assert fit["theil_intercept_us"] == pytest.approx(theil.intercept, rel=1e-12, abs=1e-9)
    assert fit["theil_lo"] == pytest.approx(theil.low_slope, rel=1e-12)
    assert fit["theil_hi"] == pytest.approx(theil.high_slope, rel=1e-12)


def test_validation_imports_no_scipy() -> None:
    import subprocess
    import sys

    code = ("import sys, numpy as np; from evtsync.critpath.validate import fit_line; "
            "fit_line(np.arange(10.0), np.arange(10.0) ** 1.5); "
            "print(sorted(m for m in sys.modules if m.startswith('scipy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
