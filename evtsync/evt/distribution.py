"""The generalised extreme-value distribution for PyMC, written in PyTensor.

Coles' convention (methodology §6): ``xi > 0`` Fréchet, ``xi = 0`` Gumbel, ``xi < 0`` Weibull;
support ``1 + xi (x - mu) / sigma > 0``.

Everything is expressed through one quantity,

    L(t, xi) = log1p(xi t) / xi,   t = (x - mu) / sigma,

whose limit at ``xi = 0`` is ``t``. Then

    log f = -log sigma - (1 + xi) L - exp(-L),     log F = -exp(-L).

Near ``xi t = 0`` L is evaluated by its Taylor series ``t (1 - z/2 + z²/3 - z³/4 + z⁴/5)``
with ``z = xi t`` (truncation error below 2e-16 relative for ``|z| < 1e-3``), so the value and
the gradient are exact and finite at and around ``xi = 0`` — the point where a symmetric
prior's initial point lands. The other branch is fed with safe inputs, so that no NaN or
infinity in the branch not taken can leak into the gradient (``0 * inf = NaN``).

Outside the support the log density is ``-inf``; the log CDF is ``-inf`` below the lower end
point (``xi > 0``) and ``0`` above the upper end point (``xi < 0``).

The NumPy GEV (density, CDF, quantile, draws, the series and its threshold) lives in
:mod:`evtsync.evt.gev`; this module holds only what PyMC and the samplers need: the PyTensor
graph, the random-variable op (drawing through :func:`evtsync.evt.gev.rvs`) and the fused numba
log-likelihood kernel.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import pytensor
import pytensor.tensor as pt
from pymc.distributions.continuous import Continuous
from pymc.distributions.dist_math import check_parameters
from pymc.distributions.shape_utils import rv_size_is_none
from pytensor.gradient import DisconnectedType
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_default_op_cache_key
from pytensor.tensor.random.op import RandomVariable

from evtsync.evt import gev as gev_numpy
from evtsync.evt.simd import add_reassociable, exp_bounded, log_positive, prefer_wide_vectors

__all__ = [
    "GEV",
    "gev_logp_sum",
    "gev_logp_sum_cells",
    "register_jax_backend",
    "gev_L",
]

#: |xi t| below which the series for log1p(xi t)/xi is used: the one threshold, from evtsync.evt.gev.
SERIES_THRESHOLD = gev_numpy.SERIES_THRESHOLD


def gev_L(t, xi):
    """``log1p(xi t) / xi`` in PyTensor with its ``xi -> 0`` limit ``t``; NaN-free gradient.

    Returns ``(L, inside)`` where ``inside`` is the support indicator ``1 + xi t > 0``.
    Outside the support the returned L is a finite placeholder; callers mask it.
    """
    z = xi * t
    inside = pt.gt(1.0 + z, 0.0)
    small = pt.lt(pt.abs(z), SERIES_THRESHOLD)
    z_series = pt.switch(small, z, 0.0)
    series = t * (1.0 + z_series * (-0.5 + z_series * (1.0 / 3.0 + z_series * (-0.25 + z_series * 0.2))))
    use_exact = pt.and_(inside, pt.invert(small))
    z_exact = pt.switch(use_exact, z, 0.0)
    xi_exact = pt.switch(use_exact, xi, 1.0)
    exact = pt.log1p(z_exact) / xi_exact
    return pt.switch(small, series, exact), inside


def gev_logp_pt(value, mu, sigma, xi):
    """Log density of GEV(mu, sigma, xi) at ``value`` (PyTensor graph), ``-inf`` off support."""
    t = (value - mu) / sigma
    L, inside = gev_L(t, xi)
    res = -pt.log(sigma) - (1.0 + xi) * L - pt.exp(-L)
    return pt.switch(inside, res, -np.inf)


def gev_logcdf_pt(value, mu, sigma, xi):
    """Log CDF of GEV(mu, sigma, xi) (PyTensor graph), correct on both sides of the support."""
    t = (value - mu) / sigma
    L, inside = gev_L(t, xi)
    outside = pt.switch(pt.gt(xi, 0.0), -np.inf, 0.0)
    return pt.switch(inside, -pt.exp(-L), outside)


class GEVRV(RandomVariable):
    """Random variable op of the GEV (draws by inversion: :func:`evtsync.evt.gev.rvs`)."""

    name = "gev"
    signature = "(),(),()->()"
    dtype = "floatX"
    _print_name = ("GEV", "\\operatorname{GEV}")

    @classmethod
    def rng_fn(cls, rng, mu, sigma, xi, size) -> np.ndarray:
        return np.asarray(gev_numpy.rvs(mu, sigma, xi, size=size, rng=rng))


gev = GEVRV()


class GEV(Continuous):
    r"""Generalised extreme-value distribution GEV(mu, sigma, xi), Coles' sign convention.

    .. math::

        f(x) = \frac{1}{\sigma} s^{-1/\xi - 1} e^{-s^{-1/\xi}}, \quad s = 1 + \xi (x-\mu)/\sigma > 0

    Parameters
    ----------
    mu : location; sigma : scale (> 0); xi : shape (any real; 0 is Gumbel).
    """

    rv_op = gev

    @classmethod
    def dist(cls, mu=0.0, sigma=1.0, xi=0.0, **kwargs):
        mu = pt.as_tensor_variable(mu)
        sigma = pt.as_tensor_variable(sigma)
        xi = pt.as_tensor_variable(xi)
        return super().dist([mu, sigma, xi], **kwargs)

    def support_point(rv, size, mu, sigma, xi):
        # The median mu + sigma ((ln 2)^-xi - 1)/xi is always inside the support.
        log_log2 = np.log(np.log(2.0))
        small = pt.lt(pt.abs(xi), 1e-8)
        safe = pt.switch(small, 1.0, xi)
        median = mu + sigma * pt.switch(small, -log_log2, pt.expm1(-safe * log_log2) / safe)
        if not rv_size_is_none(size):
            median = pt.full(size, median)
        return median

    def logp(value, mu, sigma, xi):
        return check_parameters(gev_logp_pt(value, mu, sigma, xi), sigma > 0, msg="sigma > 0")

    def logcdf(value, mu, sigma, xi):
        return check_parameters(gev_logcdf_pt(value, mu, sigma, xi), sigma > 0, msg="sigma > 0")


# ---------------------------------------------------------------------------------------------
# Fused log-likelihood sum with its gradient, for sampling large cells fast.
#
# One pass over the z-scores of a cell computes the summed log density and its three partial
# derivatives together (one log, one exp, one division per z-score), instead of PyTensor's
# autodiff graph, which traverses the data several times. The derivatives, with
# t = (z - mu)/sigma, s = 1 + xi t, L = log1p(xi t)/xi, g = exp(-L) - (1 + xi):
#   d/dmu    = -sum(g / s) / sigma
#   d/dsigma = -sum(g t / s) / sigma - n / sigma
#   d/dxi    = sum(g dL/dxi - L),   dL/dxi = (t/s - L)/xi,
# with dL/dxi = t² (-1/2 + 2z/3 - 3z²/4 + 4z³/5) for |z| = |xi t| < 1e-3 (same series as L).
# Outside the support the sum is -inf and the gradient 0.
#
# The loop has no branch and no call (``log1p`` as ``log(s)`` plus its first-order correction
# ``(xi t - (s - 1)) / s``, ``log`` and ``exp`` from :mod:`evtsync.evt.simd`, the series and
# the log branch both computed and one selected, the support checked by a count after the
# loop), so numba's LLVM vectorises it, with 8 doubles per instruction where the CPU has
# AVX-512 (``prefer_wide_vectors``): 4.9-5.1 ns per z-score against 22.5-24.1 ns for the scalar
# glibc calls in the same run (6-7 ns with LLVM's default 4 doubles; docs/performance/bayes.md).
# ---------------------------------------------------------------------------------------------

#: Bumped, with the source hash, into PyTensor's numba cache key of the fused op, so that a
#: kernel change never runs a stale compiled graph from ``~/.pytensor``.
_KERNEL_VERSION = 2


def _gev_sum_kernel(z: np.ndarray, mu: float, sigma: float, xi: float) -> tuple[float, float, float, float]:
    prefer_wide_vectors()  # type: ignore[call-arg]  # numba intrinsic: numba passes typingctx
    inv_s = 1.0 / sigma
    inv_xi = 1.0 / xi if xi != 0.0 else 0.0
    opx = 1.0 + xi
    acc_lp = 0.0
    acc_mu = 0.0
    acc_s = 0.0
    acc_xi = 0.0
    outside = 0
    for i in range(z.shape[0]):
        t = (z[i] - mu) * inv_s
        zz = xi * t
        s = 1.0 + zz
        outside += not s > 0.0
        r = 1.0 / s
        log1p_zz = log_positive(s) + (zz - (s - 1.0)) * r
        small = abs(zz) < SERIES_THRESHOLD
        L = t * (1.0 + zz * (-0.5 + zz * (1.0 / 3.0 + zz * (-0.25 + zz * 0.2)))) if small else log1p_zz * inv_xi
        dL_dxi = t * t * (-0.5 + zz * (2.0 / 3.0 + zz * (-0.75 + zz * 0.8))) if small else (t * r - L) * inv_xi
        e = exp_bounded(-L)
        g = e - opx
        gt = g * r
        acc_lp = add_reassociable(acc_lp, -opx * L - e)
        acc_mu = add_reassociable(acc_mu, gt)
        acc_s = add_reassociable(acc_s, gt * t)
        acc_xi = add_reassociable(acc_xi, g * dL_dxi - L)
    if outside:
        return -np.inf, 0.0, 0.0, 0.0
    n = z.shape[0]
    return acc_lp - n * math.log(sigma), -acc_mu * inv_s, -acc_s * inv_s - n * inv_s, acc_xi


#: numba settings of the kernel: FMA contraction only (no reassociation, which would undo
#: the compensations in :mod:`evtsync.evt.simd`); float division without a zero check.
_KERNEL_JIT: dict[str, Any] = {"fastmath": {"contract"}, "error_model": "numpy"}


_numba_kernel = None
_numba_cells_kernel = None


def _cached_njit(function, name: str):
    """``function`` compiled by numba with the kernel's settings, cached on disk in PyTensor's
    numba cache under a key holding the kernel's source hash (:func:`_kernel_cache_salt`):
    compiling it cost ~2 s in every process that fits (the MLE start of each cell), and
    numba's own cache would not notice a change in :mod:`evtsync.evt.simd`. A renamed copy of
    the function carries the key, so PyTensor's own compilation of the kernel is not affected."""
    import types

    import numba
    import pytensor

    copy = types.FunctionType(function.__code__, function.__globals__, name, function.__defaults__,
                              function.__closure__)
    if not pytensor.config.numba__cache:
        return numba.njit(cache=False, **_KERNEL_JIT)(copy)
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

    CACHED_SRC_FUNCTIONS[copy] = f"evtsync_{name}_{_kernel_cache_salt()}"
    return numba.njit(cache=True, **_KERNEL_JIT)(copy)


def _jit_kernel():
    """The kernel compiled by numba (once per process, loaded from the disk cache when it can)."""
    global _numba_kernel
    if _numba_kernel is None:
        _numba_kernel = _cached_njit(_gev_sum_kernel, "gev_sum_kernel")
    return _numba_kernel


def _cells_kernel_for(sum_kernel):
    """The kernel over cells ``z[starts[i]:starts[i + 1]]``, each at its own parameters, built
    on ``sum_kernel`` (:func:`_gev_sum_kernel`, or its numba dispatcher for nopython mode):
    the summed log density and its (3, n_cells) gradient; ``-inf`` and 0 when any z-score is
    outside its cell's support."""

    def cells_kernel(z, starts, mu, sigma, xi):
        n_cells = mu.shape[0]
        grad = np.zeros((3, n_cells))
        total = 0.0
        for i in range(n_cells):
            lp, dmu, dsig, dxi = sum_kernel(z[starts[i]:starts[i + 1]], mu[i], sigma[i], xi[i])
            if lp == -np.inf:
                return -np.inf, np.zeros((3, n_cells))
            total += lp
            grad[0, i] = dmu
            grad[1, i] = dsig
            grad[2, i] = dxi
        return total, grad

    return cells_kernel


def _jit_cells_kernel():
    """The per-cell kernel compiled by numba (once per process)."""
    global _numba_cells_kernel
    if _numba_cells_kernel is None:  # not cached on disk: numba keys a closure by its pickle, new in each process
        import numba

        _numba_cells_kernel = numba.njit(cache=False, **_KERNEL_JIT)(_cells_kernel_for(_jit_kernel()))
    return _numba_cells_kernel


class GEVLogpSumCells(Op):
    """``(z, starts, mu, sigma, xi) -> (sum log f, d/d(mu, sigma, xi) per cell)``: the fused
    log-likelihood of every cell of a model in one node, cell ``i`` being
    ``z[starts[i]:starts[i + 1]]`` at ``mu[i], sigma[i], xi[i]``.

    One node instead of one :class:`GEVLogpSum` per cell keeps the model's graph the same size
    whatever the number of cells, which is what PyTensor's rewriting and numba's compilation
    spend their time on; the arithmetic is the same kernel, cell by cell.
    """

    __props__ = ()

    def make_node(self, z, starts, mu, sigma, xi):  # type: ignore[override]  # PyTensor Ops name their inputs
        z = pt.as_tensor_variable(z, dtype="float64")
        starts = pt.as_tensor_variable(starts, dtype="int64")
        mu, sigma, xi = (pt.as_tensor_variable(v, dtype="float64") for v in (mu, sigma, xi))
        if z.ndim != 1 or starts.ndim != 1 or any(v.ndim != 1 for v in (mu, sigma, xi)):
            raise TypeError("GEVLogpSumCells needs vectors: z-scores, cell starts, and mu, sigma, xi per cell")
        return Apply(self, [z, starts, mu, sigma, xi], [pt.dscalar(), pt.dmatrix()])

    def perform(self, node, inputs, output_storage):
        z, starts, mu, sigma, xi = inputs
        lp, grad = _jit_cells_kernel()(np.ascontiguousarray(z, dtype=np.float64), np.asarray(starts, dtype=np.int64),
                                       *(np.ascontiguousarray(v, dtype=np.float64) for v in (mu, sigma, xi)))
        output_storage[0][0] = np.asarray(lp, dtype=np.float64)
        output_storage[1][0] = grad

    def pullback(self, inputs, outputs, output_grads):
        g_lp, g_grad = output_grads
        if not isinstance(g_grad.type, DisconnectedType):
            raise NotImplementedError("second derivatives of GEVLogpSumCells are not implemented")
        grad = outputs[1]
        return [
            pytensor.gradient.grad_undefined(self, 0, inputs[0], "z-scores are data"),
            DisconnectedType()(),
            g_lp * grad[0],
            g_lp * grad[1],
            g_lp * grad[2],
        ]

    def connection_pattern(self, node):
        return [[True, False], [False, False], [True, True], [True, True], [True, True]]


gev_logp_sum_cells_op = GEVLogpSumCells()


def gev_logp_sum_cells(z, starts, mu, sigma, xi):
    """Summed GEV log density of every cell ``z[starts[i]:starts[i + 1]]`` (fused, one node)."""
    outputs: list = gev_logp_sum_cells_op(z, starts, mu, sigma, xi)  # type: ignore[assignment]  # several outputs: a list
    return outputs[0]


def gev_logp_sum(z, mu, sigma, xi):
    """Summed GEV log density of the data vector ``z`` at scalar parameters (fused, fast): the
    one-cell case of :func:`gev_logp_sum_cells`."""
    z = pt.as_tensor_variable(z, dtype="float64")
    starts = pt.stack([pt.constant(0, dtype="int64"), pt.cast(z.shape[0], "int64")])
    return gev_logp_sum_cells(z, starts, *(pt.atleast_1d(pt.as_tensor_variable(v, dtype="float64"))
                                           for v in (mu, sigma, xi)))


@register_funcify_default_op_cache_key(GEVLogpSumCells)
def _numba_funcify_gev_logp_sum_cells(op, node=None, **kwargs):
    kernel = numba_njit(**_KERNEL_JIT)(_cells_kernel_for(numba_njit(**_KERNEL_JIT)(_gev_sum_kernel)))

    @numba_njit
    def gev_logp_sum_cells_numba(z, starts, mu, sigma, xi):
        lp, grad = kernel(z, starts, mu, sigma, xi)
        out_lp = np.empty(())
        out_lp[()] = lp
        return out_lp, grad

    return gev_logp_sum_cells_numba, _kernel_cache_salt()


def _kernel_cache_salt() -> int:
    """An integer that changes whenever the kernel's source does (PyTensor's cache key salt)."""
    import hashlib
    import inspect

    from evtsync.evt import simd

    source = inspect.getsource(_gev_sum_kernel) + inspect.getsource(_cells_kernel_for) + inspect.getsource(simd)
    return _KERNEL_VERSION * 10**12 + int(hashlib.sha256(source.encode()).hexdigest()[:10], 16)


_jax_registered = False


def register_jax_backend() -> None:
    """Teach PyTensor's JAX backend (nutpie ``backend = "jax"``) the fused op: the same
    formulas in ``jax.numpy``, one cell index per z-score; the gradient output is the
    formulas' (XLA drops it when nutpie differentiates the value with jax).

    Called by the fit before it compiles for JAX, and at import when PyTensor's JAX link is
    already loaded; not at every import, because loading it imports jax (2 s). Raises
    ImportError where jax is not installed.
    """
    global _jax_registered
    if _jax_registered:
        return
    from pytensor.link.jax.dispatch import jax_funcify

    @jax_funcify.register(GEVLogpSumCells)
    def _jax_funcify_gev_logp_sum_cells(op, **kwargs):
        import jax.numpy as jnp
        from jax.ops import segment_sum

        def gev_logp_sum_cells_jax(z, starts, mu, sigma, xi):
            n_cells = mu.shape[0]
            cell = jnp.searchsorted(starts[1:], jnp.arange(z.shape[0]), side="right")
            sig, x = sigma[cell], xi[cell]
            t = (z - mu[cell]) / sig
            zz = x * t
            inside = 1.0 + zz > 0.0
            s = jnp.where(inside, 1.0 + zz, 1.0)
            small = jnp.abs(zz) < SERIES_THRESHOLD
            x_safe = jnp.where(small, 1.0, x)
            L = jnp.where(small, t * (1.0 + zz * (-0.5 + zz * (1.0 / 3.0 + zz * (-0.25 + zz * 0.2)))),
                          jnp.log1p(jnp.where(inside, zz, 0.0)) / x_safe)
            dL_dxi = jnp.where(small, t * t * (-0.5 + zz * (2.0 / 3.0 + zz * (-0.75 + zz * 0.8))), (t / s - L) / x_safe)
            e = jnp.exp(-L)
            g = e - (1.0 + x)
            gt = g / s
            counts = jnp.diff(starts).astype(z.dtype)
            lp = segment_sum(-(1.0 + x) * L - e, cell, n_cells).sum() - (counts * jnp.log(sigma)).sum()
            grad = jnp.stack([-segment_sum(gt, cell, n_cells) / sigma,
                              -segment_sum(gt * t, cell, n_cells) / sigma - counts / sigma,
                              segment_sum(g * dL_dxi - L, cell, n_cells)])
            outside = ~jnp.all(inside)
            return jnp.where(outside, -jnp.inf, lp), jnp.where(outside, 0.0, grad)

        return gev_logp_sum_cells_jax

    _jax_registered = True


if "pytensor.link.jax.dispatch" in sys.modules:
    register_jax_backend()
