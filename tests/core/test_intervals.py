"""The interval helpers of evtsync.core.intervals against scipy.stats (the independent reference)
and without importing it (issue 48: ~0.6 s of CPU for a small job's tax)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from evtsync.core import intervals


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 9, 10, 57, 1000, 12345])
def test_median_interval_matches_scipy_order_statistics(n: int) -> None:
    from scipy import stats

    x = np.random.default_rng(n).normal(size=n)
    level = 0.9
    j = max(int(stats.binom.ppf((1 - level) / 2, n, 0.5)), 1)
    too_few = 1 - 2 * stats.binom.cdf(j - 1, n, 0.5) < level
    if too_few:
        j = 1
    xs = np.sort(x)
    assert intervals.median_interval(x, level) == (float(np.median(x)), float(xs[j - 1]), float(xs[n - j]))
    assert intervals.median_interval_kind(n, level) == (f"range of {n}" if too_few else "90%")


def test_small_samples_are_the_range() -> None:
    # 1 - 2 * 0.5**4 = 0.875 < 0.9: four points cannot give a 90% interval; five can (0.9375)
    assert intervals.median_interval_kind(4) == "range of 4"
    assert intervals.median_interval_kind(5) == "90%"
    assert intervals.median_interval(np.array([3.0, 1.0, 2.0, 4.0])) == (2.5, 1.0, 4.0)


@pytest.mark.parametrize(("n", "q"), [(10, 0.1), (200, 0.9), (5000, 0.25)])
def test_quantile_interval_matches_scipy(n: int, q: float) -> None:
    from scipy import stats

    x = np.random.default_rng(7).exponential(size=n)
    cdf = stats.binom.cdf(np.arange(n + 1), n, q)
    low, high = np.flatnonzero(cdf[:n] <= 0.05), np.flatnonzero(cdf[:n] >= 0.95)
    xs = np.sort(x)
    expect = (float(np.quantile(xs, q)), float(xs[low[-1]]) if low.size else -np.inf,
              float(xs[high[0]]) if high.size else np.inf)
    assert intervals.quantile_interval(x, q) == expect


def test_wilson_interval_by_hand() -> None:
    # k = 3 of n = 10 at 95%: z = 1.959964; centre 0.3 + z²/20 over 1 + z²/10 (Wilson 1927)
    z = 1.959963984540054
    centre = (0.3 + z * z / 20) / (1 + z * z / 10)
    half = z * np.sqrt(0.3 * 0.7 / 10 + z * z / 400) / (1 + z * z / 10)
    p, lo, hi = intervals.wilson_interval(3, 10, level=0.95)
    assert p == 0.3 and lo == pytest.approx(centre - half, rel=1e-12) and hi == pytest.approx(centre + half, rel=1e-12)


def test_no_scipy_stats_import() -> None:
    code = ("import sys, numpy as np; from evtsync.core.intervals import median_interval, wilson_interval; "
            "median_interval(np.arange(50.0)); wilson_interval(3, 10); print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("n", [1, 2, 7, 40, 333, 5000, 100_000])
@pytest.mark.parametrize("p", [0.5, 0.1, 0.9])
def test_binomial_cdf_against_scipy(n: int, p: float) -> None:
    from scipy import stats

    ks = np.unique(np.linspace(-1, n + 1, 41).astype(int))
    ours = np.array([intervals._binom_cdf(int(k), n, p) for k in ks])
    np.testing.assert_allclose(ours, stats.binom.cdf(ks, n, p), rtol=1e-9, atol=1e-250)  # denormals aside
    # not q = 0.5: at odd n and p = 1/2, P(B <= (n-1)/2) is exactly 1/2, a tie either rounding may break
    for q in (0.025, 0.05, 0.95, 0.975):
        assert intervals._first_at_least(q, n, p) == stats.binom.ppf(q, n, p)
