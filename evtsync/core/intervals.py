"""Distribution-free intervals of a sample's median and quantiles, the Student-t interval of a mean,
and the Wilson interval of a proportion: the interval statistics the run's summary and the tax tables report (docs/methodology.md)."""

from __future__ import annotations

import functools
import math
from statistics import NormalDist

import numpy as np

from evtsync.core.defaults import INTERVAL_LEVEL as LEVEL


def _log_pmf(k: int, n: int, p: float) -> float:
    """log P(B = k) for B ~ Binomial(n, p), 0 < p < 1."""
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
            + k * math.log(p) + (n - k) * math.log1p(-p))


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(B <= k) for B ~ Binomial(n, p), 0 < p < 1, in NumPy and the standard library (not
    ``scipy.stats``, whose import costs ~0.6 s of CPU, more than a small job's whole tax:
    issue 48). The shorter tail is summed from ``k`` outwards (each term the last one times the
    pmf ratio) over 50 standard deviations (beyond them the terms are below 1e-500 of the
    first); the first term from ``math.lgamma``, whose rounding (~1e-16 of n log n) bounds the
    relative error: ~1e-13 at n = 10^3, ~1e-10 at 10^6. Checked against
    ``scipy.stats.binom.cdf`` in tests/core/test_intervals.py."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    lower = k < n * p  # sum the lower tail from k down, else the upper one from k + 1 up
    start = k if lower else k + 1
    spread = math.sqrt(n * p * (1 - p))
    width = int(min(start if lower else n - start, 50 * spread + 60))
    steps = np.arange(width, dtype=np.float64)
    if lower:  # P(i - 1) / P(i) = i (1 - p) / ((n - i + 1) p), i = start, start - 1, ...
        i = start - steps
        ratios = i * (1 - p) / ((n - i + 1) * p)
    else:  # P(i + 1) / P(i) = (n - i) p / ((i + 1) (1 - p)), i = start, start + 1, ...
        i = start + steps
        ratios = (n - i) * p / ((i + 1) * (1 - p))
    tail = math.exp(_log_pmf(start, n, p)) * (1.0 + float(np.cumprod(ratios).sum()))
    return min(1.0, tail) if lower else max(0.0, 1.0 - tail)


@functools.lru_cache(maxsize=4096)
def _first_at_least(q: float, n: int, p: float) -> int:
    """The smallest k in [0, n] with P(B <= k) >= q (``scipy.stats.binom.ppf`` for 0 < q < 1);
    remembered per (q, n, p): the tax summary asks it for every PG, and the PGs of a job mostly
    share their counts (512 TP groups of 4,096 NCCL Inspector logs: ~0.2 s; issue 48)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if _binom_cdf(mid, n, p) >= q:
            hi = mid
        else:
            lo = mid + 1
    return lo


def quantile_interval(values: np.ndarray, q: float, level: float = LEVEL) -> tuple[float, float, float]:
    """The ``q`` quantile (NumPy's linear interpolation) with a distribution-free confidence interval.

    With B ~ Binomial(n, q) the number of observations below the true quantile, the interval
    [x_(j), x_(k)] (1-based order statistics) with j the largest index with P(B <= j - 1) <=
    (1 - level)/2 and k the smallest with P(B <= k - 1) >= (1 + level)/2 covers it with
    probability P(j <= B < k) >= level. Where the sample is too small for that coverage the
    missing side is unbounded (-inf or +inf): the data cannot bound it at this level.
    """
    x = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)])
    n = x.size
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    alpha = (1 - level) / 2
    # the last i < n with P(B <= i) <= alpha (j - 1 = i -> x_(i+1)) and the first i < n with
    # P(B <= i) >= 1 - alpha (k - 1 = i -> x_(i+1)); the CDF increases: bisection
    below = _first_at_least(math.nextafter(alpha, 1.0), n, q) - 1
    above = _first_at_least(1 - alpha, n, q)
    lo = float(x[below]) if 0 <= below < n else -np.inf
    hi = float(x[above]) if above < n else np.inf
    return float(np.quantile(x, q)), lo, hi


def median_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """The median with a distribution-free confidence interval from order statistics.

    With B ~ Binomial(n, 1/2) the number of observations below the true median, the interval
    [x_(j), x_(n-j+1)] (1-based order statistics), j the smallest integer with
    P(B <= j) >= (1 - level)/2, covers the median with probability 1 - 2 P(B <= j - 1) >= level.
    For samples too small for that coverage the interval is the whole range.
    """
    x = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)])
    n = x.size
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    j = max(_first_at_least((1 - level) / 2, n, 0.5), 1)
    if 1 - 2 * _binom_cdf(j - 1, n, 0.5) < level:
        j = 1
    return float(np.median(x)), float(x[j - 1]), float(x[n - j])


def median_interval_kind(n: int, level: float = LEVEL) -> str:
    """What :func:`median_interval` returns for ``n`` values, in words: the level (``"90%"``), or
    ``"range of n"`` where ``n`` points are too few for that level and the interval is [min, max]
    (its coverage, 1 − 2·0.5^n, is below the level: 75% for 3 points)."""
    if n <= 0:
        return "no data"
    j = max(_first_at_least((1 - level) / 2, n, 0.5), 1)
    if 1 - 2 * _binom_cdf(j - 1, n, 0.5) < level:
        return f"range of {n}"
    return f"{level:.0%}"


def wilson_interval(k: int, n: int, level: float = LEVEL) -> tuple[float, float, float]:
    """A proportion k/n with its Wilson score interval."""
    if n <= 0:
        return float("nan"), float("nan"), float("nan")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # k = 0 and k = n have the ends 0 and 1 exactly; the formula leaves rounding residue (3.47e-16)
    lo = 0.0 if k <= 0 else float(max(0.0, centre - half))
    hi = 1.0 if k >= n else float(min(1.0, centre + half))
    return p, lo, hi



def mean_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """The mean with its Student-t confidence interval, mean ± t_{n-1}·s/√n (a large-sample interval:
    the collectives' tax is skewed, so with a few dozen values or fewer read it as approximate).
    Fewer than 2 finite values: NaN ends (no interval)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    n = x.size
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(x.mean())
    if n < 2:
        return mean, float("nan"), float("nan")
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * float(x.std(ddof=1)) / np.sqrt(n)
    return mean, mean - half, mean + half
