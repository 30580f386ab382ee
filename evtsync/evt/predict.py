"""Predicted synchronization tax for a domain of n = k·m ranks (SPEC §7), and FLOPS scaling (§8).

A compute block with pooled standard deviation ``b`` (µs) whose pooled z-scores of the maximum
over ``m`` ranks follow GEV(mu, sigma, xi) has, in a domain of ``n = k·m`` ranks, a predicted
mean straggler delay

    tau(n) = b · E_k(mu, sigma, xi),   k = n / m,

with ``E_k`` the expected maximum of k iid GEV draws (:func:`evtsync.evt.gev.expected_max`).
For the Gumbel fit (xi = 0) this is ``b · (mu + sigma (gamma_E + ln(n/m)))``: the tax grows
at least logarithmically with the domain size.

Shapes: every function broadcasts with NumPy's rules. Posterior draws are passed as arrays of
one common shape, e.g. ``(chain, draw)``; to evaluate a vector of domain sizes against them,
give the draws a trailing axis::

    tau = predicted_tax_us(b, mu[..., None], sigma[..., None], xi[..., None], n=[8, 64, 512])
    # tau.shape == (chain, draw, 3)

or call :func:`predicted_tax_curve_us`, which adds that axis itself. xarray users pass
``.values`` and wrap the result (dimensions ``(*draw_dims, "n")``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from evtsync.errors import InputError
from evtsync.evt import gev

__all__ = [
    "REFERENCE_TFLOPS",
    "block_sd_from_cv",
    "domain_multiple",
    "flops_factor",
    "predicted_tax_curve_us",
    "predicted_tax_us",
    "scale_block_sd_for_flops",
]

#: Peak dense BF16 TFLOPS of the reference GPU of the paper (H200), SPEC §8.
REFERENCE_TFLOPS = 989.0


def domain_multiple(n: ArrayLike, m: int = 4) -> NDArray[np.float64]:
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
    m: int = 4,
) -> NDArray[np.float64]:
    """tau(n) = b · E_k(mu, sigma, xi) with k = n/m, in µs (SPEC §7).

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
    m: int = 4,
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


def block_sd_from_cv(block_mean_us: ArrayLike, cv: ArrayLike) -> NDArray[np.float64]:
    """b = r·a: the block standard deviation from its mean a (µs) and coefficient of variation r."""
    value = np.asarray(block_mean_us, dtype=float) * np.asarray(cv, dtype=float)
    return value[()] if value.ndim == 0 else value


def flops_factor(target_tflops: ArrayLike, reference_tflops: float = REFERENCE_TFLOPS) -> NDArray[np.float64]:
    """f = target peak / reference peak (reference: H200, 989 dense BF16 TFLOPS)."""
    target = np.asarray(target_tflops, dtype=float)
    if np.any(target <= 0) or reference_tflops <= 0:
        raise InputError("peak TFLOPS must be > 0")
    value = target / reference_tflops
    return value[()] if value.ndim == 0 else value


def scale_block_sd_for_flops(block_sd_us: ArrayLike, factor: ArrayLike) -> NDArray[np.float64]:
    """b / f: a GPU f times faster runs the block in a/f, and with r fixed, b = r·a scales alike.

    Since tau(n) is linear in b, the tax on the faster GPU is tau(n) / f as well (SPEC §8).
    """
    f = np.asarray(factor, dtype=float)
    if np.any(f <= 0):
        raise InputError("FLOPS factor f must be > 0")
    value = np.asarray(block_sd_us, dtype=float) / f
    return value[()] if value.ndim == 0 else value
