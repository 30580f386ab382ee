"""``log`` and ``exp`` that LLVM can vectorise, for the numba kernels of the GEV likelihood.

numba calls glibc's scalar ``log``/``exp`` for ``math.log``/``math.exp``: a loop that uses them
runs one z-score at a time (issue 16: 20-27 ns per z-score in the fused likelihood, most of it
those two calls), and PyPI's llvmlite has no SVML to vectorise them. The functions here are
written in plain arithmetic on the float's bits instead, so that the loop vectoriser turns a
loop over z-scores into SIMD code (4 or 8 doubles per instruction):

* :func:`log_positive` — ``log(x)`` for ``x > 0``: exponent and mantissa from the bits, the
  mantissa folded into ``[sqrt(1/2), sqrt(2))``, then ``2 atanh(f)``, ``f = (m - 1)/(m + 1)``,
  by its series to ``f^19`` (truncation < 3e-17 relative), evaluated by Estrin's scheme (a
  short dependency chain). Subnormal ``x`` is scaled first; ``log(inf) = inf``.
* :func:`exp_bounded` — ``exp(x)``: ``x = k ln 2 + r`` with ``|r| <= ln 2 / 2`` (Cody-Waite,
  ``ln 2`` in two parts), ``exp(r)`` by its Taylor series to ``r^13`` (truncation < 5e-18),
  ``2^k`` built in the exponent bits. ``exp(x) = 0`` below -708 (where the true value is
  below 3.3e-308, a subnormal that no log density here can tell from 0) and ``inf`` above
  709.78.
* :func:`prefer_wide_vectors` — marks the calling function for 512-bit vectors where the CPU
  has them (LLVM's default on AVX-512 CPUs is 256).
* :func:`add_reassociable` — ``a + b`` flagged ``reassoc``: the only licence the vectoriser
  needs to split a running sum into SIMD lanes. Only the accumulation carries it; the rest of
  a kernel keeps IEEE order, which the two functions above depend on (their compensations
  and rounding tricks would be simplified away under fast-math).

Both are within 2 ulp of glibc over their whole range (``tests/evt/test_bayes_simd.py``). They
run inside numba only (``@intrinsic`` bit casts); the kernels that use them are numba-compiled.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["add_reassociable", "exp_bounded", "log_positive", "prefer_wide_vectors"]


@intrinsic
def _bits_of(typingctx, x):
    """The int64 whose bits are those of the float64 ``x``."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def _float_of(typingctx, bits):
    """The float64 whose bits are those of the int64 ``bits``."""

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def prefer_wide_vectors(typingctx):
    """Let LLVM vectorise the calling function with the CPU's widest registers.

    On CPUs with AVX-512 LLVM prefers 256-bit vectors (the ``prefer-256-bit`` tuning, against
    the clock slowdown of 512-bit units in mixed code); for the likelihood's loop, which does
    nothing but arithmetic on z-scores, 8 doubles per instruction are 1.5-2x faster than 4
    (docs/performance/bayes.md). This sets the function attribute
    ``"prefer-vector-width"="512"`` on the function being compiled; on CPUs without AVX-512
    the vectoriser still uses what the CPU has.
    """

    def codegen(context, builder, signature, args):
        # llvmlite's attribute set knows only LLVM's keyword attributes; a string attribute
        # is written into the function's definition as it is
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def add_reassociable(typingctx, a, b):
    """``a + b``, which LLVM may reassociate (so that a loop summing it vectorises)."""

    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1], flags=("reassoc", "nsz"))

    return types.float64(types.float64, types.float64), codegen


_MANTISSA = 0x000FFFFFFFFFFFFF
_ONE_BITS = 0x3FF0000000000000          # the bits of 1.0
_TWO52_BITS = 0x4330000000000000        # the bits of 2^52: OR-ing an integer < 2^52 in gives 2^52 + it
_TWO52 = 4503599627370496.0
_ROUND_MAGIC = 6755399441055744.0       # 1.5 * 2^52: y + it rounds y to an integer in the low bits
_LN2_HI = 6.93147180369123816490e-01   # ln 2 in two parts (fdlibm): k * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_LOG2E = 1.4426950408889634
_SQRT2 = 1.4142135623730951
_MIN_NORMAL = 2.2250738585072014e-308
_TWO54 = 18014398509481984.0
_EXP_LOW = -708.0
_EXP_OVERFLOW = 709.782712893384


@njit(error_model="numpy", inline="always")
def log_positive(x):
    """Natural log of ``x > 0`` (vectorisable; no check: a non-positive ``x`` gives garbage)."""
    tiny = x < _MIN_NORMAL
    x_normal = x * _TWO54 if tiny else x
    bits: int = _bits_of(x_normal)  # type: ignore[call-arg]  # numba intrinsic: numba passes typingctx
    m = _float_of((bits & _MANTISSA) | _ONE_BITS)
    e = _float_of(_TWO52_BITS | (bits >> 52)) - (_TWO52 + 1023.0)
    e = e - 54.0 if tiny else e
    big = m > _SQRT2
    m = m * 0.5 if big else m
    e = e + 1.0 if big else e
    f = (m - 1.0) / (m + 1.0)
    w = f * f
    w2 = w * w
    w4 = w2 * w2
    w8 = w4 * w4
    a0 = 1.0 / 3.0 + w * (1.0 / 5.0)
    a1 = 1.0 / 7.0 + w * (1.0 / 9.0)
    a2 = 1.0 / 11.0 + w * (1.0 / 13.0)
    a3 = 1.0 / 15.0 + w * (1.0 / 17.0)
    tail = ((a0 + w2 * a1) + w4 * (a2 + w2 * a3)) + w8 * (1.0 / 19.0)
    value = e * _LN2_HI + (2.0 * f + (2.0 * f * w * tail + e * _LN2_LO))
    return np.inf if x == np.inf else value


@njit(error_model="numpy", inline="always")
def exp_bounded(x):
    """``exp(x)`` (vectorisable): 0 below -708, ``inf`` above 709.78."""
    xc = min(max(x, _EXP_LOW), _EXP_OVERFLOW)
    kd = xc * _LOG2E + _ROUND_MAGIC
    k = kd - _ROUND_MAGIC
    r = (xc - k * _LN2_HI) - k * _LN2_LO
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    a0 = 1.0 + r
    a1 = 0.5 + r * (1.0 / 6.0)
    a2 = 1.0 / 24.0 + r * (1.0 / 120.0)
    a3 = 1.0 / 720.0 + r * (1.0 / 5040.0)
    a4 = 1.0 / 40320.0 + r * (1.0 / 362880.0)
    a5 = 1.0 / 3628800.0 + r * (1.0 / 39916800.0)
    a6 = 1.0 / 479001600.0 + r * (1.0 / 6227020800.0)
    poly = ((a0 + r2 * a1) + r4 * (a2 + r2 * a3)) + r8 * ((a4 + r2 * a5) + r4 * a6)
    # 2^k as 2^(k-1) * 2, so that k = 1024 (x up to the overflow threshold) stays finite
    value = poly * _float_of((_bits_of(kd) + 1022) << 52) * 2.0  # type: ignore[call-arg]  # numba intrinsics
    value = np.inf if x > _EXP_OVERFLOW else value
    return 0.0 if x < _EXP_LOW else value
