"""tau(n) of a GEV of block maxima: b·E_k(mu, sigma, xi) with k = n/m (docs/methodology.md §7).

The GEV estimators' curve (the centred and the paper's), in a module of its own so that the
estimator registry (:mod:`evtsync.predict.registry`) and the prediction tables
(:mod:`evtsync.predict.tables`, which re-exports these names) both use it without importing each
other.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from evtsync.core.defaults import DEFAULT_M
from evtsync.core.errors import InputError
from evtsync.evt import gev

__all__ = ["domain_multiple", "predicted_tax_curve_us", "predicted_tax_us"]


def domain_multiple(n: ArrayLike, m: int = DEFAULT_M) -> NDArray[np.float64]:
    """``k = n / m`` as floats, after checking that every n is a positive multiple of m.

    A domain size that is not a multiple of the fitted sample size has no k = n/m samples of
    m ranks each, so it is refused (``InputError``) rather than rounded.
    """
    if isinstance(m, bool) or int(m) != m or m < 1:
        raise InputError(f"sample size m must be a positive integer; got {m!r}")
    m = int(m)
    n_arr = np.asarray(n)
    n_float = n_arr.astype(float)
    if np.any(~np.isfinite(n_float)) or np.any(n_float != np.round(n_float)) or np.any(n_float < 1):
        raise InputError(f"domain size n must be positive integers; got {n_arr.ravel()[:5].tolist()}")
    bad = np.asarray(n_float % m != 0)
    if np.any(bad):
        raise InputError(
            f"domain size n must be a multiple of m = {m} (n = k·m); "
            f"not multiples: {sorted({int(v) for v in np.asarray(n_float)[bad].ravel()})[:10]}"
        )
    return n_float / m


def predicted_tax_us(
    block_sd_us: ArrayLike,
    mu: ArrayLike,
    sigma: ArrayLike,
    xi: ArrayLike,
    n: ArrayLike,
    m: int = DEFAULT_M,
) -> NDArray[np.float64]:
    """tau(n) = b · E_k(mu, sigma, xi) with k = n/m, in µs (methodology §7).

    ``block_sd_us`` is b, the block's pooled standard deviation in µs (``b = r·a``); ``mu, sigma,
    xi`` are the GEV parameters of the pooled z-scores (Coles' sign convention; scalars or
    posterior draws); ``n`` the domain size(s), each a multiple of ``m``. All arguments
    broadcast together (see the module docstring for posterior shapes). ``inf`` where xi >= 1
    (the mean maximum does not exist).
    """
    k = domain_multiple(n, m)
    b = np.asarray(block_sd_us, dtype=float)
    if np.any(b < 0):
        raise InputError("block standard deviation b must be >= 0 µs")
    value = b * np.asarray(gev.expected_max(mu, sigma, xi, k))
    return value[()] if value.ndim == 0 else value


def predicted_tax_curve_us(
    block_sd_us: ArrayLike,
    mu: ArrayLike,
    sigma: ArrayLike,
    xi: ArrayLike,
    n: ArrayLike,
    m: int = DEFAULT_M,
) -> NDArray[np.float64]:
    """tau for every domain size in the 1-D ``n``, with n as a new last axis.

    ``block_sd_us, mu, sigma, xi`` broadcast to a common draw shape D (e.g. ``(chain, draw)``);
    the result has shape ``D + (len(n),)``.
    """
    n_vec = np.atleast_1d(np.asarray(n))
    if n_vec.ndim != 1:
        raise InputError("n must be a scalar or a 1-D sequence of domain sizes")
    b, mu_a, sigma_a, xi_a = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (block_sd_us, mu, sigma, xi))
    )
    return np.asarray(
        predicted_tax_us(b[..., None], mu_a[..., None], sigma_a[..., None], xi_a[..., None], n_vec, m)
    )
