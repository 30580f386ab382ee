"""Validation fits: OLS and Theil–Sen against hand-made lines."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.critpath.validate import THEIL_MAX_POINTS, fit_line, regress_path_on_tax


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
