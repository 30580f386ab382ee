"""Distribution-free intervals of a sample's median and quantiles, and the Wilson interval of a
proportion: the interval statistics the run's summary and the tax tables report (docs/methodology.md)."""

from __future__ import annotations

from typing import Any

import numpy as np

from evtsync.core.defaults import INTERVAL_LEVEL as LEVEL


def _binom() -> Any:
    """The binomial CDF / quantile and normal quantile of ``scipy.stats`` (the same Boost and
    Cephes functions it calls) without importing ``scipy.stats``: its import costs ~0.6 s of CPU,
    more than the whole tax of a small job (issue 48). Falls back to ``scipy.stats`` where
    SciPy's private module lacks them."""
    try:
        import scipy.special._ufuncs as scu

        return scu._binom_cdf, scu._binom_ppf, scu.ndtri
    except (ImportError, AttributeError):  # pragma: no cover - another SciPy layout
        from scipy import stats

        return (lambda k, n, p: stats.binom.cdf(k, n, p), lambda q, n, p: stats.binom.ppf(q, n, p),
                stats.norm.ppf)


def _binom_cdf(k: Any, n: int, p: float) -> Any:
    """P(B <= k) for B ~ Binomial(n, p), k integers in [0, n] (``scipy.stats.binom.cdf``)."""
    return _binom()[0](np.asarray(k, dtype=float), n, p)


def _binom_ppf(q: float, n: int, p: float) -> float:
    """The smallest k with P(B <= k) >= q, 0 < q < 1 (``scipy.stats.binom.ppf``)."""
    return float(_binom()[1](q, n, p))


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
    i = np.arange(0, n + 1)
    cdf = _binom_cdf(i, n, q)                           # P(B <= i)
    lower_ok = np.flatnonzero(cdf[:n] <= alpha)           # j - 1 = i  ->  x_(i+1)
    upper_ok = np.flatnonzero(cdf[:n] >= 1 - alpha)       # k - 1 = i  ->  x_(i+1)
    lo = float(x[lower_ok[-1]]) if lower_ok.size else -np.inf
    hi = float(x[upper_ok[0]]) if upper_ok.size else np.inf
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
    j = max(int(_binom_ppf((1 - level) / 2, n, 0.5)), 1)
    if 1 - 2 * _binom_cdf(j - 1, n, 0.5) < level:
        j = 1
    return float(np.median(x)), float(x[j - 1]), float(x[n - j])


def median_interval_kind(n: int, level: float = LEVEL) -> str:
    """What :func:`median_interval` returns for ``n`` values, in words: the level (``"90%"``), or
    ``"range of n"`` where ``n`` points are too few for that level and the interval is [min, max]
    (its coverage, 1 − 2·0.5^n, is below the level: 75% for 3 points)."""
    if n <= 0:
        return "no data"
    j = max(int(_binom_ppf((1 - level) / 2, n, 0.5)), 1)
    if 1 - 2 * _binom_cdf(j - 1, n, 0.5) < level:
        return f"range of {n}"
    return f"{level:.0%}"


def wilson_interval(k: int, n: int, level: float = LEVEL) -> tuple[float, float, float]:
    """A proportion k/n with its Wilson score interval."""
    if n <= 0:
        return float("nan"), float("nan"), float("nan")
    z = float(_binom()[2](0.5 + level / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, float(max(0.0, centre - half)), float(min(1.0, centre + half))

