"""The generalised extreme-value (GEV) distribution in NumPy, Coles' sign convention (methodology §6).

``GEV(mu, sigma, xi)`` has CDF ``F(x) = exp(-(1 + xi t)^(-1/xi))`` with ``t = (x - mu)/sigma``
on the support ``1 + xi t > 0``; ``xi > 0`` is Fréchet (heavy tail, lower end point
``mu - sigma/xi``), ``xi = 0`` Gumbel (``F = exp(-exp(-t))``), ``xi < 0`` Weibull (upper end point
``mu - sigma/xi``). ``scipy.stats.genextreme`` uses the opposite sign: ``c = -xi``.

Every function broadcasts its arguments with NumPy's rules, so posterior draws of shape
``(chain, draw)`` or ``(draws,)`` can be passed as ``mu, sigma, xi`` together with, e.g., a
vector of ``k`` given a trailing axis (``mu[..., None]`` against ``k`` of shape ``(K,)``).
Scalars in give NumPy scalars out.

Numerical stability at and near ``xi = 0``: every ``xi``-dependent expression is written through
two helpers that have exact limits and no cancellation,

- ``log1p(xi t)/xi``  (limit ``t``) for the density and CDF (:func:`log1p_ratio`),
- ``expm1(xi u)/xi``  (limit ``u``) for quantiles, the max-of-k location, the mean and E_k
  (:func:`expm1_ratio`),

each taken from its Taylor series in ``xi t`` (``xi u``) where ``|xi t| < SERIES_THRESHOLD`` —
the one threshold of the package: the PyTensor density and the numba kernels of
:mod:`evtsync.evt.distribution` and :mod:`evtsync.evt.compare` import it from here. The two
helpers also return their first and second derivatives in ``xi``, which the maximum-likelihood
engine (:mod:`evtsync.evt.mle`) needs and which cancel catastrophically near 0 in closed form.

and ``lgamma(1 - xi)/xi`` (limit Euler's gamma) is evaluated by its Taylor series
``gamma_E + sum_{j>=2} zeta(j) xi^(j-1)/j`` for ``|xi| < 0.05``: computing ``1 - xi`` in floating
point would otherwise lose the digits of a tiny ``xi`` before ``lgamma`` sees them.

Outside the support the log density is ``-inf`` and the CDF is 0 below the lower end point
(``xi > 0``) and 1 above the upper end point (``xi < 0``). The support is taken as open.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from evtsync.core.errors import InputError

__all__ = [
    "EULER_GAMMA",
    "SERIES_THRESHOLD",
    "cdf",
    "expected_max",
    "expm1_ratio",
    "isf",
    "log1p_ratio",
    "logcdf",
    "logpdf",
    "logsf",
    "max_of_k",
    "mean",
    "pdf",
    "ppf",
    "return_level",
    "rvs",
    "sf",
    "support",
]

EULER_GAMMA = float(np.euler_gamma)

#: |xi t| (or |xi u|) below which ``log1p(xi t)/xi`` and ``expm1(xi u)/xi`` and their
#: derivatives in xi are taken from their Taylor series: the one threshold of the package.
#: At 1e-3 the series below (8 terms) are exact to double precision, and the closed forms
#: above it lose at most ~1e-10 relative in the second derivative (cancellation ~ eps/|xi t|).
SERIES_THRESHOLD = 1e-3
_SERIES_TERMS = 8

#: |xi| below which lgamma(1 - xi)/xi is taken from its Taylor series.
_LGAMMA_SERIES_BELOW = 0.05


@functools.cache
def _lgamma_series_coef() -> np.ndarray:
    """zeta(j)/j for j = 2..17: coefficients of xi^(j-1) in lgamma(1 - xi)/xi - gamma_E.
    16 terms: the first omitted term is below 0.05^16 < 2e-21 relative. Computed on first use,
    so that importing this module does not import SciPy (issue 48: test collection, CLI start)."""
    from scipy import special

    return np.array([special.zeta(j, 1) / j for j in range(2, 18)])

Array = NDArray[np.float64]


def _out(value: Array) -> Array:
    """Return a 0-d array as a NumPy scalar, anything else unchanged."""
    return value[()] if value.ndim == 0 else value


def _params(mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> tuple[Array, Array, Array]:
    mu_a = np.asarray(mu, dtype=float)
    sigma_a = np.asarray(sigma, dtype=float)
    xi_a = np.asarray(xi, dtype=float)
    if np.any(sigma_a <= 0):
        raise InputError(f"GEV scale sigma must be > 0; got minimum {np.nanmin(sigma_a):g}")
    return mu_a, sigma_a, xi_a


def log1p_ratio(t: ArrayLike, xi: ArrayLike, order: int = 0) -> tuple[Array, ...]:
    """``L = log1p(xi t)/xi`` (limit ``t`` at ``xi = 0``) and, for ``order`` 1 or 2, its first
    and second derivatives in ``xi``; NaN outside ``1 + xi t > 0``.

    With ``z = xi t``: ``L = t sum_k (-z)^k/(k+1)``, ``dL/dxi = (t/(1+z) - L)/xi`` and
    ``d2L/dxi2 = (-t^2/(1+z)^2 - 2 dL/dxi)/xi``, each from its series where
    ``|z| < SERIES_THRESHOLD``. Returns a tuple of ``order + 1`` arrays.
    """
    t_a, xi_a = np.broadcast_arrays(np.asarray(t, dtype=float), np.asarray(xi, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z = np.where(xi_a == 0, 0.0, xi_a * t_a)
        small = np.abs(z) < SERIES_THRESHOLD
        safe_xi = np.where(small, 1.0, xi_a)
        out = [np.log1p(z) / safe_xi]
        if order >= 1:
            d1 = (t_a / (1.0 + z) - out[0]) / safe_xi
            out.append(d1)
        if order >= 2:
            out.append((-(t_a / (1.0 + z)) ** 2 - 2.0 * d1) / safe_xi)
    if np.any(small):
        zs, ts = z[small], t_a[small]
        # coefficients of z^j: L/t: (-1)^j/(j+1); dL/dxi / t^2: (-1)^(j+1) (j+1)/(j+2);
        # d2L/dxi2 / t^3: (-1)^j (j+2)(j+1)/(j+3)
        j = np.arange(_SERIES_TERMS)
        coefs = [(-1.0) ** j / (j + 1), (-1.0) ** (j + 1) * (j + 1) / (j + 2), (-1.0) ** j * (j + 2) * (j + 1) / (j + 3)]
        for k in range(order + 1):
            value = np.polynomial.polynomial.polyval(zs, coefs[k]) * ts ** (k + 1)
            out[k] = np.where(small, 0.0, out[k])
            out[k][small] = value
    return tuple(out)


def expm1_ratio(u: ArrayLike, xi: ArrayLike, order: int = 0) -> tuple[Array, ...]:
    """``c = expm1(xi u)/xi`` (limit ``u`` at ``xi = 0``; infinite ``u`` handled) and, for
    ``order`` 1 or 2, its derivatives ``dc/dxi = (u e^(xi u) - c)/xi`` and
    ``d2c/dxi2 = (u^2 e^(xi u) - 2 dc/dxi)/xi``, from the series ``sum_k u^(k+1) xi^k/(k+1)!``
    where ``|xi u| < SERIES_THRESHOLD``. Returns a tuple of ``order + 1`` arrays.
    """
    u_a, xi_a = np.broadcast_arrays(np.asarray(u, dtype=float), np.asarray(xi, dtype=float))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = xi_a * u_a
        small = (np.abs(w) < SERIES_THRESHOLD) | (xi_a == 0)
        safe_xi = np.where(small, 1.0, xi_a)
        out = [np.expm1(w) / safe_xi]
        if order >= 1:
            e = np.exp(w)
            d1 = (u_a * e - out[0]) / safe_xi
            out.append(d1)
        if order >= 2:
            out.append((u_a * u_a * e - 2.0 * d1) / safe_xi)
    if np.any(small):
        ws, us = np.where(xi_a == 0, 0.0, w)[small], u_a[small]
        j = np.arange(_SERIES_TERMS)
        fact = _factorials(j + 3)
        coefs = [1.0 / _factorials(j + 1), (j + 1) / _factorials(j + 2), (j + 2) * (j + 1) / fact]
        for k in range(order + 1):
            with np.errstate(invalid="ignore"):
                value = np.polynomial.polynomial.polyval(ws, coefs[k]) * us ** (k + 1)
            out[k] = np.array(out[k], dtype=float)
            out[k][small] = value
    return tuple(out)


def _factorials(k: np.ndarray) -> np.ndarray:
    """``k!`` of small non-negative integers, as floats (SciPy's ``factorial`` without SciPy)."""
    return np.array([float(math.factorial(int(v))) for v in k])


def _log1p_div(t: Array, xi: Array) -> Array:
    """``log1p(xi t)/xi`` with its limit ``t`` at ``xi = 0``; NaN outside ``1 + xi t > 0``."""
    return log1p_ratio(t, xi)[0]


def _expm1_div(u: Array, xi: Array) -> Array:
    """``expm1(xi u)/xi`` with its limit ``u`` at ``xi = 0``; infinite ``u`` handled."""
    return expm1_ratio(u, xi)[0]


def _lgamma1m_div(xi: Array) -> Array:
    """``lgamma(1 - xi)/xi`` for ``xi < 1``, limit ``gamma_E`` at 0; ``inf`` for ``xi >= 1``."""
    xi = np.asarray(xi, dtype=float)
    small = np.abs(xi) < _LGAMMA_SERIES_BELOW
    xs = np.where(small, xi, 0.0)
    series = np.polynomial.polynomial.polyval(xs, np.concatenate(([0.0], _lgamma_series_coef())))
    from scipy import special

    with np.errstate(divide="ignore", invalid="ignore"):
        safe = np.where(small | (xi >= 1), 0.5, xi)
        direct = special.gammaln(1.0 - safe) / safe
    value = np.where(small, EULER_GAMMA + series, direct)
    return np.where(xi >= 1, np.inf, value)


def support(mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> tuple[Array, Array]:
    """Lower and upper end points of the support (``-inf``/``inf`` where unbounded)."""
    mu_a, sigma_a, xi_a = _params(mu, sigma, xi)
    with np.errstate(divide="ignore", invalid="ignore"):
        end = mu_a - sigma_a / np.where(xi_a == 0, 1.0, xi_a)
    lower = np.where(xi_a > 0, end, -np.inf)
    upper = np.where(xi_a < 0, end, np.inf)
    return _out(np.asarray(lower)), _out(np.asarray(upper))


def _standard(x: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike):
    mu_a, sigma_a, xi_a = _params(mu, sigma, xi)
    x_a = np.asarray(x, dtype=float)
    t = (x_a - mu_a) / sigma_a
    t, xi_b = np.broadcast_arrays(t, xi_a)
    with np.errstate(invalid="ignore", over="ignore"):
        z = np.where(xi_b == 0, 0.0, xi_b * t)
        inside = 1.0 + z > 0
    return t, xi_b, sigma_a, inside


def logpdf(x: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """Log density; ``-inf`` outside the (open) support and at ``x = ±inf``."""
    t, xi_b, sigma_a, inside = _standard(x, mu, sigma, xi)
    big_l = _log1p_div(t, xi_b)
    with np.errstate(over="ignore", invalid="ignore"):
        value = -np.log(sigma_a) - (1.0 + xi_b) * big_l - np.exp(-big_l)
    value = np.where(inside & np.isfinite(t), value, -np.inf)
    return _out(np.where(np.isnan(t), np.nan, value))


def pdf(x: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """Density; 0 outside the support."""
    return _out(np.exp(np.asarray(logpdf(x, mu, sigma, xi))))


def logcdf(x: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """Log CDF ``-(1 + xi t)^(-1/xi)``: ``-inf`` below a lower end point, 0 above an upper one."""
    t, xi_b, _, inside = _standard(x, mu, sigma, xi)
    big_l = _log1p_div(t, xi_b)
    with np.errstate(over="ignore", invalid="ignore"):
        value = -np.exp(-big_l)
    outside = np.where(xi_b > 0, -np.inf, 0.0)
    value = np.where(inside, value, outside)
    return _out(np.where(np.isnan(t), np.nan, value))


def cdf(x: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """CDF; 0 below a lower end point (``xi > 0``), 1 above an upper end point (``xi < 0``)."""
    return _out(np.exp(np.asarray(logcdf(x, mu, sigma, xi))))


def sf(x: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """Survival function ``1 - F``, computed as ``-expm1(log F)`` to keep the upper tail accurate."""
    return _out(-np.expm1(np.asarray(logcdf(x, mu, sigma, xi))))


def logsf(x: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """Log survival function ``log(1 - F)``."""
    with np.errstate(divide="ignore"):
        return _out(np.log(np.asarray(sf(x, mu, sigma, xi))))


def ppf(q: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """Quantile function: ``mu + sigma ((-log q)^(-xi) - 1)/xi``; NaN for q outside [0, 1].

    ``q = 0`` and ``q = 1`` give the end points of the support (possibly infinite).
    """
    mu_a, sigma_a, xi_a = _params(mu, sigma, xi)
    q_a = np.asarray(q, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = -np.log(-np.log(q_a))
    return _out(np.asarray(mu_a + sigma_a * _expm1_div(u, xi_a)))


def isf(v: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """Inverse survival function: the quantile at probability ``1 - v``, accurate for tiny ``v``
    (``-log F = -log1p(-v)``), e.g. for draws of an upper order statistic of a large sample."""
    mu_a, sigma_a, xi_a = _params(mu, sigma, xi)
    e = -np.log1p(-np.asarray(v, dtype=float))
    with np.errstate(divide="ignore"):
        return _out(np.asarray(mu_a + sigma_a * _expm1_div(-np.log(e), xi_a)))


def return_level(period: ArrayLike, mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """Return level z_p exceeded once every ``period`` blocks on average (Coles 2001, eq. 3.10).

    ``z_p = mu + sigma (y_p^(-xi) - 1)/xi`` with ``p = 1/period`` and ``y_p = -log(1 - p)``,
    computed with ``log1p`` so that long periods keep their precision. ``period`` must be > 1.
    """
    mu_a, sigma_a, xi_a = _params(mu, sigma, xi)
    period_a = np.asarray(period, dtype=float)
    if np.any(period_a <= 1):
        raise InputError(f"return period must be > 1 block; got {np.nanmin(period_a):g}")
    y_p = -np.log1p(-1.0 / period_a)
    return _out(np.asarray(mu_a + sigma_a * _expm1_div(-np.log(y_p), xi_a)))


def rvs(
    mu: ArrayLike,
    sigma: ArrayLike,
    xi: ArrayLike,
    size: int | tuple[int, ...] | None = None,
    rng: np.random.Generator | int | None = None,
) -> Array:
    """Random draws: ``mu + sigma (E^(-xi) - 1)/xi`` with ``E = -log U ~ Exp(1)`` (inverse CDF): the
    one GEV sampler of the package (PyMC's GEV op and the simulated z-score tables draw through it).

    ``size`` is the output shape (the parameters broadcast to it); by default the broadcast
    shape of the parameters. ``rng`` is a ``numpy.random.Generator`` or a seed.
    """
    mu_a, sigma_a, xi_a = _params(mu, sigma, xi)
    generator = np.random.default_rng(rng)
    shape = np.broadcast_shapes(mu_a.shape, sigma_a.shape, xi_a.shape)
    if size is not None:
        shape = (size,) if isinstance(size, int | np.integer) else tuple(size)
    e = -np.log(generator.uniform(size=shape))  # E = -log U: the stream PyMC's GEV op has always drawn
    return _out(np.asarray(mu_a + sigma_a * _expm1_div(-np.log(e), xi_a)))


def mean(mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike) -> Array:
    """Mean ``mu + sigma (Gamma(1 - xi) - 1)/xi`` (``mu + sigma gamma_E`` at 0); ``inf`` for xi >= 1."""
    mu_a, sigma_a, xi_a = _params(mu, sigma, xi)
    h = _lgamma1m_div(xi_a)
    value = mu_a + sigma_a * _expm1_div(h, xi_a)
    return _out(np.asarray(np.where(xi_a >= 1, np.inf, value)))


def _check_k(k: ArrayLike) -> Array:
    k_a = np.asarray(k, dtype=float)
    if np.any(~(k_a > 0)):
        raise InputError(f"number of maxima k must be > 0; got {k_a.min() if k_a.size else k_a}")
    if np.any(~np.isfinite(k_a)):
        raise InputError("number of maxima k must be finite")
    return k_a


def max_of_k(
    mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike, k: ArrayLike
) -> tuple[Array, Array, Array]:
    """Law of the maximum of k iid GEV(mu, sigma, xi) draws, by max-stability.

    Returns ``(mu_k, sigma_k, xi)`` with ``mu_k = mu + sigma (k^xi - 1)/xi`` (``mu + sigma ln k``
    at xi = 0) and ``sigma_k = sigma k^xi``, all broadcast to a common shape. Non-integer
    ``k > 0`` is allowed: it is the law with CDF ``F^k``.
    """
    mu_a, sigma_a, xi_a = _params(mu, sigma, xi)
    log_k = np.log(_check_k(k))
    mu_k = mu_a + sigma_a * _expm1_div(log_k, xi_a)
    sigma_k = sigma_a * np.exp(xi_a * log_k)
    mu_k, sigma_k, xi_k = np.broadcast_arrays(mu_k, sigma_k, xi_a)
    return _out(np.array(mu_k)), _out(np.array(sigma_k)), _out(np.array(xi_k))


def expected_max(mu: ArrayLike, sigma: ArrayLike, xi: ArrayLike, k: ArrayLike) -> Array:
    """E_k, the expected maximum of k iid GEV draws (methodology §6); ``inf`` for xi >= 1.

    ``E_k = mu + sigma (k^xi Gamma(1 - xi) - 1)/xi``, computed as
    ``mu + sigma expm1(xi ln k + lgamma(1 - xi))/xi`` with the exponent written as
    ``xi (ln k + lgamma(1 - xi)/xi)`` so that the limit ``mu + sigma (ln k + gamma_E)`` at
    xi = 0 is exact and tiny xi keep all their digits. ``k = 1`` gives :func:`mean`.
    """
    mu_a, sigma_a, xi_a = _params(mu, sigma, xi)
    g = np.log(_check_k(k)) + _lgamma1m_div(xi_a)
    value = mu_a + sigma_a * _expm1_div(g, xi_a)
    return _out(np.asarray(np.where(xi_a >= 1, np.inf, value)))
