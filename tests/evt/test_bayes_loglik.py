"""The compiled pointwise log-likelihood a fit stores (issue 30, item 6) against NumPy's GEV
log density (:func:`evtsync.evt.gev.logpdf`) and, at xi = 0, against the Gumbel density written
out by hand here; the support's edges give -inf, a NaN z-score NaN."""

from __future__ import annotations

import numpy as np
import pytest

from evtsync.evt import gev
from tests._lazy import lazy_module

evt_loglik = lazy_module("evtsync.evt.loglik")


def test_matches_numpy_logpdf_over_draws_cells_and_the_series_switch() -> None:
    rng = np.random.default_rng(3)
    n_draws, n_cells, n = 50, 3, 400
    z = np.concatenate([rng.gumbel(0.3, 1.0, n - 4), [np.nan, -50.0, 80.0, np.inf]])
    cell = rng.integers(0, n_cells, n)
    mu = rng.normal(0.2, 0.1, (n_draws, n_cells))
    sigma = np.exp(rng.normal(0.0, 0.1, (n_draws, n_cells)))
    xi = rng.normal(0.0, 0.2, (n_draws, n_cells))
    xi[0] = 0.0  # the Gumbel limit
    xi[1] = 2e-6  # |xi t| below the series threshold for most z
    ours = evt_loglik.gev_loglik(z, cell, mu, sigma, xi)
    ref = gev.logpdf(z[None, :], mu[:, cell], sigma[:, cell], xi[:, cell])
    assert ours.shape == (n_draws, n)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    np.testing.assert_array_equal(np.isneginf(ours), np.isneginf(ref))
    assert np.isneginf(ours).sum() > 0  # some z outside some draws' support
    finite = np.isfinite(ref)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-13, atol=1e-13)


def test_gumbel_by_hand() -> None:
    z = np.array([-1.0, 0.0, 0.5, 3.0])
    mu, sigma = 0.25, 1.5
    t = (z - mu) / sigma
    by_hand = -np.log(sigma) - t - np.exp(-t)  # the Gumbel log density
    ours = evt_loglik.gev_loglik(z, np.zeros(4, dtype=int), np.full((1, 1), mu), np.full((1, 1), sigma), np.zeros((1, 1)))
    np.testing.assert_allclose(ours[0], by_hand, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize("xi", [0.5, -0.5])
def test_outside_the_support(xi: float) -> None:
    end = 0.0 - 1.0 / xi  # mu - sigma/xi
    z = np.array([end - 0.1, end + 0.1]) if xi > 0 else np.array([end + 0.1, end - 0.1])
    out = evt_loglik.gev_loglik(z, np.zeros(2, dtype=int), np.zeros((1, 1)), np.ones((1, 1)), np.full((1, 1), xi))
    assert np.isneginf(out[0, 0]) and np.isfinite(out[0, 1])
