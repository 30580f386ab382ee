"""Predicted tax tau(n) = b E_{n/m} (evtsync.predict.tables), point parameters and draws."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evtsync.core.errors import InputError
from evtsync.predict import tables as predict
from tests._lazy import lazy_module

stats = lazy_module("scipy.stats")


def test_gumbel_formula() -> None:
    """methodology §7 with xi = 0: tau(n) = b (mu + sigma (gamma_E + ln(n/m)))."""
    b, mu, sigma = 12.5, 0.4, 0.8
    for n, m in ((4, 4), (8, 4), (512, 4), (64, 8)):
        expected = b * (mu + sigma * (0.5772156649015329 + math.log(n / m)))
        assert predict.predicted_tax_us(b, mu, sigma, 0.0, n, m) == pytest.approx(expected, rel=1e-14)


@pytest.mark.parametrize("xi", [-0.2, 0.0, 0.15])
@pytest.mark.parametrize("n", [8, 32])
def test_against_simulated_domains(xi: float, n: int) -> None:
    """Simulate per-rank z-scores whose maximum over m = 4 ranks is exactly GEV(mu, sigma, xi)
    (per-rank CDF G^(1/m), drawn as G^-1(U^m) with scipy's quantile function); the mean
    maximum over n ranks, times b, is tau(n) within 4 Monte Carlo standard errors."""
    m, b, mu, sigma = 4, 30.0, 1.0, 0.6
    reps = 20000
    rng = np.random.default_rng(n + int(100 * (xi + 1)))
    u = rng.uniform(size=(reps, n))
    z = stats.genextreme.ppf(u**m, -xi, loc=mu, scale=sigma)
    delay = b * z.max(axis=1)
    mc_se = delay.std(ddof=1) / math.sqrt(reps)
    assert abs(delay.mean() - predict.predicted_tax_us(b, mu, sigma, xi, n, m)) < 4 * mc_se


def test_posterior_draw_shapes() -> None:
    rng = np.random.default_rng(1)
    mu = rng.normal(1.0, 0.05, size=(4, 300))
    sigma = rng.uniform(0.5, 0.7, size=(4, 300))
    xi = rng.normal(0.1, 0.05, size=(4, 300))
    ns = np.array([8, 64, 512])
    curve = predict.predicted_tax_curve_us(20.0, mu, sigma, xi, ns)
    assert curve.shape == (4, 300, 3)
    manual = predict.predicted_tax_us(20.0, mu[..., None], sigma[..., None], xi[..., None], ns)
    np.testing.assert_array_equal(curve, manual)
    assert curve[2, 7, 1] == predict.predicted_tax_us(20.0, mu[2, 7], sigma[2, 7], xi[2, 7], 64)
    # one block sd per draw is fine too
    b = rng.uniform(10, 20, size=(4, 300))
    assert predict.predicted_tax_curve_us(b, mu, sigma, xi, ns).shape == (4, 300, 3)
    # tau grows with n for every draw (xi > -1 and sigma > 0)
    assert np.all(np.diff(curve, axis=-1) > 0)
    assert predict.predicted_tax_curve_us(20.0, 1.0, 0.5, 0.0, 8).shape == (1,)


def test_domain_size_must_be_multiple_of_m() -> None:
    with pytest.raises(InputError, match="multiple of m = 4"):
        predict.predicted_tax_us(1.0, 0.0, 1.0, 0.0, [8, 12, 10])
    with pytest.raises(InputError, match="multiple"):
        predict.predicted_tax_us(1.0, 0.0, 1.0, 0.0, 2)
    with pytest.raises(InputError, match="positive integer"):
        predict.predicted_tax_us(1.0, 0.0, 1.0, 0.0, 8, m=0)
    with pytest.raises(InputError, match="integers"):
        predict.predicted_tax_us(1.0, 0.0, 1.0, 0.0, 8.5)
    with pytest.raises(InputError, match=">= 0"):
        predict.predicted_tax_us(-1.0, 0.0, 1.0, 0.0, 8)
    np.testing.assert_allclose(predict.domain_multiple([4, 8, 512], 4), [1.0, 2.0, 128.0])


def test_heavy_tail_without_mean() -> None:
    assert predict.predicted_tax_us(1.0, 0.0, 1.0, 1.0, 8) == np.inf


def test_flops_scaling_helpers() -> None:
    """methodology §8: a GPU f times faster divides a, hence b = r a, hence tau, by f."""
    f = predict.flops_factor(2250.0)
    assert f == pytest.approx(2250.0 / 989.0)
    assert predict.block_sd_from_cv(500.0, 0.02) == pytest.approx(10.0)
    b = predict.block_sd_from_cv(500.0, 0.02)
    tau_ref = predict.predicted_tax_us(b, 0.5, 0.7, 0.1, 128)
    tau_fast = predict.predicted_tax_us(predict.scale_block_sd_for_flops(b, f), 0.5, 0.7, 0.1, 128)
    assert tau_fast == pytest.approx(tau_ref / f, rel=1e-14)
    with pytest.raises(InputError):
        predict.flops_factor(0.0)
    with pytest.raises(InputError):
        predict.scale_block_sd_for_flops(1.0, -2.0)
