"""The vectorisable log/exp of the fused GEV likelihood (evtsync.evt.simd) against numpy's
(glibc's) log and exp, ulp by ulp, at the edges of the float range; and the kernel's loop
is really vectorised (a branch or a call in it would silently cost 3x)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from tests._lazy import lazy_module

# numba, PyMC (evtsync.evt.distribution) and the compiled helpers are imported and built on first
# use, not at collection (issue 48)
distribution = lazy_module("evtsync.evt.distribution")


@pytest.fixture(scope="module")
def simd() -> SimpleNamespace:
    """The kernels of these tests, compiled by numba once per module."""
    from numba import njit

    from evtsync.evt.simd import add_reassociable, exp_bounded, log_positive

    @njit
    def log_all(x, out):
        for i in range(x.shape[0]):
            out[i] = log_positive(x[i])

    @njit
    def exp_all(x, out):
        for i in range(x.shape[0]):
            out[i] = exp_bounded(x[i])

    @njit
    def sum_(x):
        acc = 0.0
        for i in range(x.shape[0]):
            acc = add_reassociable(acc, x[i])
        return acc

    return SimpleNamespace(log_all=log_all, exp_all=exp_all, sum=sum_)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.spacing(np.abs(want))


def test_log_is_within_two_ulp_of_glibc_from_subnormals_to_the_largest_double(simd):
    rng = np.random.default_rng(3)
    x = np.concatenate([
        np.exp(rng.uniform(-744.0, 709.0, 200_000)),       # every binade, subnormals included
        rng.uniform(0.5, 2.0, 200_000),                     # around 1, where log is small
        1.0 + rng.uniform(-1e-6, 1e-6, 50_000),
        [5e-324, 1e-310, 2.2250738585072014e-308, 0.5, 1.0, 2.0, np.sqrt(2.0), np.nextafter(1.0, 0.0),
         np.nextafter(1.0, 2.0), 1.7976931348623157e308],
    ])
    got = np.empty_like(x)
    simd.log_all(x, got)
    want = np.log(x)
    nonzero = want != 0
    assert _ulps(got[nonzero], want[nonzero]).max() <= 2.0
    assert np.all(got[~nonzero] == 0.0)  # log(1) is exactly 0


def test_log_of_infinity_is_infinity(simd):
    got = np.empty(1)
    simd.log_all(np.array([np.inf]), got)
    assert got[0] == np.inf


def test_exp_is_within_two_ulp_of_glibc_and_saturates_outside_its_range(simd):
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.uniform(-708.0, 709.78, 300_000), rng.uniform(-1.0, 1.0, 100_000),
                        [-708.0, -1e-300, 0.0, 1e-300, 1.0, 709.0, 709.782712893384]])
    got = np.empty_like(x)
    simd.exp_all(x, got)
    assert _ulps(got, np.exp(x)).max() <= 2.0
    assert np.all(np.isfinite(got))
    edge = np.array([-708.5, -745.0, -1e4, -np.inf, 709.79, 1e4, np.inf])
    out = np.empty_like(edge)
    simd.exp_all(edge, out)
    # below -708 the true value is a subnormal under 3.3e-308: 0; above the overflow point inf
    assert list(out) == [0.0, 0.0, 0.0, 0.0, np.inf, np.inf, np.inf]


def test_reassociable_sum_is_the_sum(simd):
    x = np.random.default_rng(5).normal(size=100_003)
    assert simd.sum(x) == pytest.approx(float(np.sum(x, dtype=np.longdouble)), rel=1e-12, abs=1e-10)


def test_the_fused_kernel_loop_is_vectorised():
    import numba

    # compiled afresh with the kernel's settings: a dispatcher loaded from the disk cache
    # (_jit_kernel) holds machine code, not the IR
    kernel = numba.njit(cache=False, **distribution._KERNEL_JIT)(distribution._gev_sum_kernel)
    kernel(np.linspace(0.0, 1.0, 64), 0.0, 1.0, 0.1)
    (llvm_ir,) = kernel.inspect_llvm().values()
    # the per-z-score division 1/s, as a SIMD instruction (<2 x double> at SSE2, 4 at AVX2...)
    assert re.search(r"fdiv (?:\w+ )*<\d+ x double>", llvm_ir), "the kernel's loop was not vectorised"
    # and with the CPU's widest vectors (8 doubles with AVX-512), not LLVM's 256-bit default there
    assert '"prefer-vector-width"="512"' in llvm_ir


def test_the_disk_cached_kernel_is_the_kernel():
    """``_jit_kernel`` (loaded from PyTensor's numba cache when it can) returns exactly what a
    fresh compilation of the kernel's source returns, inside and outside the support."""
    import numba

    fresh = numba.njit(cache=False, **distribution._KERNEL_JIT)(distribution._gev_sum_kernel)
    cached = distribution._jit_kernel()
    z = np.random.default_rng(11).gumbel(size=10_001)
    for mu, sigma, xi in [(0.1, 1.3, 0.15), (-0.2, 0.8, -0.2), (0.0, 1.0, 0.0), (0.0, 1.0, 2.0)]:
        assert cached(z, mu, sigma, xi) == fresh(z, mu, sigma, xi)
    assert cached.py_func.__code__ is distribution._gev_sum_kernel.__code__
