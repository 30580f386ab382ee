"""The pointwise GEV log-likelihood of every z-score at every posterior draw, compiled (methodology §6).

A fit stores it (the ``log_likelihood`` group, up to :data:`evtsync.core.defaults.LOGLIK_STORE_LIMIT`
values): 4 chains x 1000 draws x 3,498 z-scores in the demo, 14 million values per fit. NumPy's
:func:`evtsync.evt.gev.logpdf` over them, chunk by chunk, cost 0.45-0.75 s of CPU per fit; this
loop computes the same formula value by value (the same operations in the same order: ``t =
(z - mu)/sigma``, ``L = log1p(xi t)/xi`` with the same 8-term series below
:data:`evtsync.evt.gev.SERIES_THRESHOLD`, ``-log(sigma) - (1 + xi) L - exp(-L)``, ``-inf``
outside the support), with ``log`` and ``exp`` from :mod:`evtsync.evt.simd` in a loop that
LLVM vectorises (``log1p`` as ``log(1 + z)`` plus its rounding correction). The values agree
with :func:`evtsync.evt.gev.logpdf` to ~1e-15 relative (``tests/evt/test_bayes_loglik.py``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from evtsync.evt.gev import _SERIES_TERMS, SERIES_THRESHOLD
from evtsync.evt.simd import exp_bounded, log_positive, prefer_wide_vectors

#: Coefficients of ``L/t`` in powers of ``z = xi t``: (-1)^j/(j+1), the 8 terms of
#: :func:`evtsync.evt.gev.log1p_ratio`, evaluated by Horner's rule as NumPy's ``polyval`` does.
_C = tuple((-1.0) ** j / (j + 1) for j in range(8))
assert len(_C) == _SERIES_TERMS


# The row kernel: FMA contraction only (no reassociation, which would undo the compensations in
# :mod:`evtsync.evt.simd`); float division without a zero check.
@numba.njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy")
def _row(z, lo, hi, mu, sigma, xi, out):  # pragma: no cover - compiled
    """``out[lo:hi]`` for one draw's parameters of one cell: a loop with no call and no branch
    (the series and the log branch both computed and one selected), which LLVM vectorises."""
    prefer_wide_vectors()  # type: ignore[call-arg]  # numba intrinsic: numba passes typingctx
    safe_xi = xi if xi != 0.0 else 1.0
    log_sigma = math.log(sigma)
    opx = 1.0 + xi
    c0, c1, c2, c3, c4, c5, c6, c7 = (_C[0], _C[1], _C[2], _C[3], _C[4], _C[5], _C[6], _C[7])
    for j in range(lo, hi):
        t = (z[j] - mu) / sigma
        zz = xi * t
        u = 1.0 + zz
        inside = u > 0.0
        uu = u if inside else 1.0
        # log1p(zz) = log(u) + (zz - (u - 1))/u: the rounding of u = 1 + zz corrected
        log1p_zz = log_positive(uu) + (zz - (uu - 1.0)) / uu
        series = (c0 + zz * (c1 + zz * (c2 + zz * (c3 + zz * (c4 + zz * (c5 + zz * (c6 + zz * c7))))))) * t
        big_l = series if abs(zz) < SERIES_THRESHOLD else log1p_zz / safe_xi
        value = -log_sigma - opx * big_l - exp_bounded(-big_l)
        value = value if inside and abs(t) < np.inf else -np.inf
        out[j] = value if t == t else np.nan


@numba.njit(cache=True, nogil=True)
def _loglik_kernel(z, run_lo, run_hi, run_cell, mu, sigma, xi, out):  # pragma: no cover - compiled
    for s in range(mu.shape[0]):
        for r in range(run_lo.shape[0]):
            c = run_cell[r]
            _row(z, run_lo[r], run_hi[r], mu[s, c], sigma[s, c], xi[s, c], out[s])


def gev_loglik(z: np.ndarray, cell: np.ndarray, mu: np.ndarray, sigma: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """Log density of each z-score under each draw's parameters of its cell.

    Parameters
    ----------
    z : numpy.ndarray
        The z-scores, shape (n,).
    cell : numpy.ndarray
        Each z-score's cell index, shape (n,).
    mu, sigma, xi : numpy.ndarray
        Each draw's location, scale (> 0) and shape per cell, shape (draws, cells).

    Returns
    -------
    numpy.ndarray
        Shape (draws, n): ``log f(z_j | mu[s, cell_j], sigma[s, cell_j], xi[s, cell_j])``, ``-inf``
        outside the support, NaN where ``z`` is NaN (as :func:`evtsync.evt.gev.logpdf`).
    """
    z = np.ascontiguousarray(z, dtype=np.float64)
    cell = np.ascontiguousarray(cell, dtype=np.int64)
    mu, sigma, xi = (np.ascontiguousarray(v, dtype=np.float64) for v in (mu, sigma, xi))
    out = np.empty((mu.shape[0], z.shape[0]))
    if z.shape[0] == 0:
        return out
    # runs of consecutive z-scores of one cell (a fit sorts them by cell: one run per cell)
    cut = np.flatnonzero(np.diff(cell)) + 1
    run_lo = np.concatenate(([0], cut)).astype(np.int64)
    run_hi = np.concatenate((cut, [z.shape[0]])).astype(np.int64)
    _loglik_kernel(z, run_lo, run_hi, cell[run_lo], mu, sigma, xi, out)
    return out
