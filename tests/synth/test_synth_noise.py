"""The block-noise construction: exact pooled z-scores, GEV-distributed targets."""

from __future__ import annotations

import numpy as np
import pytest

from evtsync.core.errors import InputError
from evtsync.synth.noise import design_block, pooled_z, split_integer, split_integer_rows
from tests._lazy import lazy_module

stats = lazy_module("scipy.stats")  # imported on first use, not at collection (issue 48)


@pytest.mark.parametrize("m,n_samples", [(4, 19), (4, 2), (8, 10), (3, 40)])
def test_design_rows_have_mean_zero_max_z_and_pooled_sd_one(m, n_samples) -> None:
    rng = np.random.default_rng(1)
    bd = design_block(rng, n_samples, m, (0.8, 0.3, 0.1))
    d = bd.d
    np.testing.assert_allclose(d.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(d.max(axis=1), bd.z, atol=1e-12)
    assert np.array_equal(d.argmax(axis=1), bd.max_pos)
    others = np.sort(d, axis=1)[:, -2]
    assert np.all(others < bd.z)                                 # the max rank is unique
    np.testing.assert_allclose(((d - d.mean(axis=1, keepdims=True)) ** 2).sum() / (n_samples * (m - 1)), 1.0,
                               rtol=1e-12)
    # z is invariant under X = a + b d: the SPEC formula gives the targets back
    np.testing.assert_allclose(pooled_z(5000.0 + 100.0 * d), bd.z, rtol=1e-9)


@pytest.mark.parametrize("gev", [(0.9, 0.3, 0.15), (0.9, 0.28, 0.0), (0.92, 0.27, -0.15)])
def test_targets_follow_the_stated_gev(gev) -> None:
    """Kolmogorov-Smirnov against the GEV truncated to z > 0; fails when the draw is wrong."""
    mu, sigma, xi = gev
    rng = np.random.default_rng(7)
    z = np.concatenate([design_block(rng, 19, 4, gev).z for _ in range(60)])   # 1140 z-scores
    dist = stats.genextreme(-xi, loc=mu, scale=sigma)
    p0 = dist.cdf(0.0)

    def truncated_cdf(x: np.ndarray) -> np.ndarray:
        return (dist.cdf(x) - p0) / (1 - p0)

    assert stats.kstest(z, truncated_cdf).pvalue > 1e-3
    # and a clearly different GEV is rejected by the same test
    other = stats.genextreme(-(xi + 0.4), loc=mu, scale=sigma)
    assert stats.kstest(z, other.cdf).pvalue < 1e-3


def test_infeasible_design_raises() -> None:
    with pytest.raises(InputError, match=r"mean z\^2"):
        design_block(np.random.default_rng(0), 5, 4, (4.0, 0.1, 0.0))


def test_split_integer_keeps_the_total() -> None:
    w = np.array([3.0, 100.0, 0.5, 41.0])
    for total in (4, 17, 1001, 123457):
        parts = split_integer(total, w)
        assert parts.sum() == total and parts.min() >= 1
    with pytest.raises(InputError):
        split_integer(3, w)


def test_split_integer_rows_equals_the_scalar_split() -> None:
    w = np.array([3.0, 100.0, 0.5, 41.0, 41.0])
    totals = np.array([5, 17, 1001, 123457, 999, 64])
    rows = split_integer_rows(totals, w)
    for total, row in zip(totals, rows, strict=True):
        assert np.array_equal(row, split_integer(int(total), w))
