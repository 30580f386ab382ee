"""GEV mathematics (evtsync.evt.gev) against scipy, closed forms, series and Monte Carlo."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from evtsync.core.errors import InputError
from evtsync.evt import gev
from tests._lazy import lazy_module

special = lazy_module("scipy.special")
stats = lazy_module("scipy.stats")

MU, SIGMA = 0.7, 1.3
# xi values including tiny ones on both sides of 0, where 0/0 and cancellation threaten.
XIS = [0.0, 1e-12, -1e-12, 1e-8, -1e-8, 1e-5, -1e-5, 0.1, -0.1, 0.5, -0.5, 1.5, -1.5]
X = np.linspace(-8.0, 25.0, 331)


def scipy_gev(xi: float):
    """scipy's genextreme uses c = -xi (methodology §6)."""
    return stats.genextreme(c=-xi, loc=MU, scale=SIGMA)


def _agree_where_defined(ours: np.ndarray, theirs: np.ndarray) -> None:
    both = np.isfinite(ours) & np.isfinite(theirs)
    assert both.sum() > 20
    np.testing.assert_allclose(ours[both], theirs[both], rtol=1e-10, atol=1e-10)
    # where scipy says -inf (outside the support) we must say so too, and vice versa
    np.testing.assert_array_equal(np.isneginf(ours), np.isneginf(theirs))


@pytest.mark.parametrize("xi", XIS)
def test_logpdf_cdf_logcdf_match_scipy(xi: float) -> None:
    ref = scipy_gev(xi)
    _agree_where_defined(gev.logpdf(X, MU, SIGMA, xi), ref.logpdf(X))
    np.testing.assert_allclose(gev.cdf(X, MU, SIGMA, xi), ref.cdf(X), rtol=1e-10, atol=1e-12)
    _agree_where_defined(gev.logcdf(X, MU, SIGMA, xi), ref.logcdf(X))
    np.testing.assert_allclose(gev.pdf(X, MU, SIGMA, xi), ref.pdf(X), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("xi", XIS)
def test_ppf_matches_scipy_and_inverts_cdf(xi: float) -> None:
    q = np.concatenate(([1e-12, 1e-6], np.linspace(0.001, 0.999, 99), [1 - 1e-9]))
    ours = gev.ppf(q, MU, SIGMA, xi)
    np.testing.assert_allclose(ours, scipy_gev(xi).ppf(q), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gev.cdf(ours, MU, SIGMA, xi), q, rtol=1e-9, atol=1e-14)


def test_gumbel_case_matches_scipy_gumbel() -> None:
    ref = stats.gumbel_r(loc=MU, scale=SIGMA)
    np.testing.assert_allclose(gev.logpdf(X, MU, SIGMA, 0.0), ref.logpdf(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gev.cdf(X, MU, SIGMA, 0.0), ref.cdf(X), rtol=1e-12, atol=1e-300)


def test_continuous_across_zero_without_warnings() -> None:
    """Tiny |xi| give the Gumbel values to within O(xi) -- no 0/0, no NaN, no warning."""
    x = np.linspace(-3, 12, 61)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        base = gev.logpdf(x, 0.0, 1.0, 0.0)
        for xi in (1e-15, -1e-15, 1e-12, -1e-12):
            # d logpdf / d xi is O(x^2); the change is bounded by |xi| * 10 * (1 + x^2)
            assert np.all(np.abs(gev.logpdf(x, 0.0, 1.0, xi) - base) <= abs(xi) * 10 * (1 + x**2))
            assert np.all(np.isfinite(gev.expected_max(0.0, 1.0, xi, [1, 2, 1024])))


def test_outside_support() -> None:
    # xi > 0: lower end point mu - sigma/xi = 0.7 - 1.3/0.5 = -1.9
    lo = MU - SIGMA / 0.5
    below = np.array([-10.0, lo - 1e-9, lo - 1e-15])
    assert np.all(gev.logpdf(below, MU, SIGMA, 0.5) == -np.inf)
    assert np.all(gev.cdf(below, MU, SIGMA, 0.5) == 0.0)
    assert np.all(gev.logcdf(below, MU, SIGMA, 0.5) == -np.inf)
    assert np.all(gev.sf(below, MU, SIGMA, 0.5) == 1.0)
    # xi < 0: upper end point 0.7 + 1.3/0.5 = 3.3
    hi = MU + SIGMA / 0.5
    above = np.array([hi + 1e-15, hi + 1e-9, 50.0])
    assert np.all(gev.logpdf(above, MU, SIGMA, -0.5) == -np.inf)
    assert np.all(gev.cdf(above, MU, SIGMA, -0.5) == 1.0)
    assert np.all(gev.logcdf(above, MU, SIGMA, -0.5) == 0.0)
    assert np.all(gev.sf(above, MU, SIGMA, -0.5) == 0.0)
    lower, upper = gev.support(MU, SIGMA, [0.5, 0.0, -0.5])
    # at the end points themselves the density and the CDF vanish (or the CDF reaches 1)
    assert gev.cdf(lo, MU, SIGMA, 0.5) < 1e-300 and gev.pdf(lo, MU, SIGMA, 0.5) < 1e-300
    assert gev.cdf(hi, MU, SIGMA, -0.5) == 1.0 and gev.pdf(hi, MU, SIGMA, -0.5) < 1e-12
    np.testing.assert_allclose(lower, [lo, -np.inf, -np.inf])
    np.testing.assert_allclose(upper, [np.inf, np.inf, hi])
    # quantile function ends at the end points
    assert gev.ppf(0.0, MU, SIGMA, 0.5) == pytest.approx(lo, abs=1e-12)
    assert gev.ppf(1.0, MU, SIGMA, -0.5) == pytest.approx(hi, abs=1e-12)
    assert gev.ppf(1.0, MU, SIGMA, 0.0) == np.inf and gev.ppf(0.0, MU, SIGMA, 0.0) == -np.inf
    assert np.isnan(gev.ppf(1.5, MU, SIGMA, 0.1))
    assert gev.logpdf(np.inf, MU, SIGMA, 0.0) == -np.inf
    assert np.isnan(gev.logpdf(np.nan, MU, SIGMA, 0.0))


def test_invalid_parameters_raise() -> None:
    with pytest.raises(InputError):
        gev.logpdf(1.0, 0.0, 0.0, 0.1)
    with pytest.raises(InputError):
        gev.expected_max(0.0, 1.0, 0.1, 0)
    with pytest.raises(InputError):
        gev.return_level(1.0, 0.0, 1.0, 0.1)


def _ek_closed_form(mu, sigma, xi, k):
    """methodology §6 formula, fine away from xi = 0."""
    return mu + sigma * (k**xi * special.gamma(1 - xi) - 1) / xi


@pytest.mark.parametrize("xi", [0.06, -0.06, 0.2, -0.3, 0.7, -2.0])
def test_expected_max_and_mean_closed_form(xi: float) -> None:
    k = np.array([1.0, 2.0, 8.0, 128.0, 1024.0])
    np.testing.assert_allclose(gev.expected_max(MU, SIGMA, xi, k), _ek_closed_form(MU, SIGMA, xi, k), rtol=1e-12)
    np.testing.assert_allclose(gev.mean(MU, SIGMA, xi), scipy_gev(xi).mean(), rtol=1e-12)
    np.testing.assert_allclose(gev.mean(MU, SIGMA, xi), gev.expected_max(MU, SIGMA, xi, 1), rtol=1e-14)


def test_expected_max_across_series_threshold() -> None:
    """The Taylor series (|xi| < 0.05) and the direct branch agree where they meet."""
    for xi in (0.05, -0.05):
        inner = gev.expected_max(0.0, 1.0, xi * (1 - 1e-12), 64.0)
        outer = gev.expected_max(0.0, 1.0, xi * (1 + 1e-12), 64.0)
        assert inner == pytest.approx(outer, rel=1e-11)
        assert outer == pytest.approx(_ek_closed_form(0.0, 1.0, xi, 64.0), rel=1e-12)


@pytest.mark.parametrize("xi", [0.0, 1e-12, -1e-12, 1e-8, -1e-8, 1e-5, -1e-5, 1e-3, -1e-3])
def test_expected_max_near_zero_matches_taylor_expansion(xi: float) -> None:
    """E_k = mu + sigma [g + xi (g^2 + z2)/2 + xi^2 (g^3/6 + g z2/2 + z3/3)] + O(xi^3).

    g = ln k + gamma_E, z2 = zeta(2), z3 = zeta(3); derived by hand from
    k^xi Gamma(1 - xi) = exp(xi g + z2 xi^2/2 + z3 xi^3/3 + ...). The naive formula loses
    ~1e-4 relative accuracy at xi = 1e-12 (1 - xi rounds); ours must not.
    """
    z2, z3 = np.pi**2 / 6, special.zeta(3)
    for k in (1.0, 2.0, 32.0, 1024.0):
        g = np.log(k) + np.euler_gamma
        series = g + xi * (g**2 + z2) / 2 + xi**2 * (g**3 / 6 + g * z2 / 2 + z3 / 3)
        bound = 1e-14 * g + 50 * abs(xi) ** 3 * (1 + g**4)
        assert abs(gev.expected_max(0.0, 1.0, xi, k) - series) <= bound
        assert abs(gev.expected_max(MU, SIGMA, xi, k) - (MU + SIGMA * series)) <= SIGMA * bound + 1e-15


def test_gumbel_limits() -> None:
    k = np.array([1, 2, 4, 100])
    np.testing.assert_allclose(gev.expected_max(MU, SIGMA, 0.0, k), MU + SIGMA * (np.log(k) + np.euler_gamma), rtol=1e-15)
    mu_k, sigma_k, xi_k = gev.max_of_k(MU, SIGMA, 0.0, k)
    np.testing.assert_allclose(mu_k, MU + SIGMA * np.log(k), rtol=1e-15)
    np.testing.assert_allclose(sigma_k, SIGMA)
    assert np.all(xi_k == 0.0)
    assert gev.expected_max(0.0, 1.0, 1.0, 4) == np.inf and gev.mean(0.0, 1.0, 1.2) == np.inf


def test_max_of_k_closed_form() -> None:
    mu_k, sigma_k, _ = gev.max_of_k(MU, SIGMA, 0.2, 8.0)
    assert mu_k == pytest.approx(MU + SIGMA * (8**0.2 - 1) / 0.2, rel=1e-14)
    assert sigma_k == pytest.approx(SIGMA * 8**0.2, rel=1e-14)
    # max-stability: F(x)^k equals the CDF of the max-of-k law
    for xi in (0.3, 0.0, -0.4):
        mk, sk, _ = gev.max_of_k(MU, SIGMA, xi, 8.0)
        x = np.linspace(-1, 6, 50)
        np.testing.assert_allclose(gev.cdf(x, MU, SIGMA, xi) ** 8, gev.cdf(x, mk, sk, xi), rtol=1e-11, atol=1e-300)


def test_broadcasts_posterior_draws_against_k() -> None:
    rng = np.random.default_rng(7)
    mu = rng.normal(1.0, 0.1, size=(4, 250))
    sigma = rng.uniform(0.5, 1.0, size=(4, 250))
    xi = rng.normal(0.0, 0.2, size=(4, 250))
    xi[0, :5] = 0.0
    k = np.array([1.0, 2.0, 32.0, 1024.0])
    ek = gev.expected_max(mu[..., None], sigma[..., None], xi[..., None], k)
    assert ek.shape == (4, 250, 4)
    for c, d, j in [(0, 0, 1), (0, 3, 3), (2, 17, 0), (3, 249, 2)]:
        assert ek[c, d, j] == gev.expected_max(mu[c, d], sigma[c, d], xi[c, d], k[j])
    mk, sk, xk = gev.max_of_k(mu[..., None], sigma[..., None], xi[..., None], k)
    assert mk.shape == sk.shape == xk.shape == (4, 250, 4)
    assert gev.logpdf(np.zeros((3, 1, 1)), mu, sigma, xi).shape == (3, 4, 250)
    assert gev.rvs(mu, sigma, xi, rng=1).shape == (4, 250)
    assert gev.rvs(0.0, 1.0, 0.1, size=(2, 3), rng=1).shape == (2, 3)


@pytest.mark.parametrize("xi", [-0.3, 0.0, 0.2])
@pytest.mark.parametrize("k", [2, 8])
def test_max_of_k_and_ek_against_monte_carlo(xi: float, k: int) -> None:
    """Maxima of k iid draws (scipy's generator, independent of ours) follow max_of_k's law
    and have mean E_k: |MC mean - E_k| < 4 MC standard errors; KS test of the law."""
    reps = 20000
    draws = stats.genextreme.rvs(-xi, loc=MU, scale=SIGMA, size=(reps, k), random_state=1000 + k)
    maxima = draws.max(axis=1)
    mc_se = maxima.std(ddof=1) / np.sqrt(reps)
    assert abs(maxima.mean() - gev.expected_max(MU, SIGMA, xi, k)) < 4 * mc_se
    mk, sk, xk = gev.max_of_k(MU, SIGMA, xi, k)
    assert stats.kstest(maxima, lambda v: gev.cdf(v, mk, sk, xk)).pvalue > 1e-3


@pytest.mark.parametrize("xi", [-0.3, 0.0, 0.25])
def test_rvs_follow_the_law(xi: float) -> None:
    x = gev.rvs(MU, SIGMA, xi, size=20000, rng=42)
    assert stats.kstest(x, scipy_gev(xi).cdf).pvalue > 1e-3
    assert abs(x.mean() - gev.mean(MU, SIGMA, xi)) < 4 * x.std(ddof=1) / np.sqrt(x.size)


def test_return_level() -> None:
    """Coles (2001) eq. 3.10 and agreement with the quantile at 1 - 1/T."""
    for xi in (0.2, 0.0, -0.2, 1e-9):
        for period in (2.0, 10.0, 100.0, 1e6):
            p = 1 / period
            y_p = -np.log1p(-p)
            u = -np.log(y_p)
            if abs(xi) < 1e-6:  # (y^-xi - 1)/xi = u + xi u^2/2 + O(xi^2 u^3); the naive form cancels
                expected = MU + SIGMA * (u + xi * u**2 / 2)
            else:
                expected = MU - SIGMA / xi * (1 - y_p ** (-xi))
            assert gev.return_level(period, MU, SIGMA, xi) == pytest.approx(expected, rel=1e-12)
            assert gev.return_level(period, MU, SIGMA, xi) == pytest.approx(gev.ppf(1 - p, MU, SIGMA, xi), rel=1e-9)


# --- the series helpers and their derivatives (issue 30/31) -----------------------------------

@pytest.mark.parametrize("t", [-2.5, 0.3, 4.0])
@pytest.mark.parametrize("xi", [0.0, 1e-9, -3e-4, 2e-4, 0.05, -0.2, 0.7])
def test_log1p_ratio_and_its_xi_derivatives(t: float, xi: float) -> None:
    """L = log1p(xi t)/xi and dL/dxi, d2L/dxi2 against high-precision values from the power
    series written out in mpmath-free form: sum_k (-1)^k xi^k t^(k+1)/(k+1) with 60 terms (exact
    to double precision for |xi t| <= 0.5), and closed forms elsewhere checked by central differences."""
    value, d1, d2 = (float(v) for v in gev.log1p_ratio(t, xi, 2))
    z = xi * t
    if not 1 + z > 0:  # outside the support
        assert np.isnan(value)
    elif abs(z) <= 0.5:
        k = np.arange(60)
        ref = [np.sum((-1.0) ** k * xi**k * t ** (k + 1) / (k + 1)),
               np.sum((-1.0) ** k[1:] * k[1:] * xi ** (k[1:] - 1) * t ** (k[1:] + 1) / (k[1:] + 1)),
               np.sum((-1.0) ** k[2:] * k[2:] * (k[2:] - 1) * xi ** (k[2:] - 2) * t ** (k[2:] + 1) / (k[2:] + 1))]
        np.testing.assert_allclose([value, d1, d2], ref, rtol=2e-9)
    else:
        h = 1e-5
        f = [float(gev.log1p_ratio(t, xi + s * h)[0]) for s in (-1, 1)]
        assert d1 == pytest.approx((f[1] - f[0]) / (2 * h), rel=1e-7)
        g = [float(gev.log1p_ratio(t, xi + s * h, 1)[1]) for s in (-1, 1)]
        assert d2 == pytest.approx((g[1] - g[0]) / (2 * h), rel=1e-6)


def test_series_and_closed_forms_meet_at_the_threshold() -> None:
    """Just below and just above ``SERIES_THRESHOLD`` the two branches give the same values."""
    t, u = 2.0, 4.6
    for fn, arg in ((gev.log1p_ratio, t), (gev.expm1_ratio, u)):
        edge = gev.SERIES_THRESHOLD / arg
        below = np.array([float(v) for v in fn(arg, edge * (1 - 1e-12), 2)])
        above = np.array([float(v) for v in fn(arg, edge * (1 + 1e-12), 2)])
        for k, rtol in enumerate((1e-12, 1e-10, 1e-8)):  # the closed forms cancel more in each derivative
            assert below[k] == pytest.approx(above[k], rel=rtol), (fn.__name__, k)


@pytest.mark.parametrize("xi", [0.0, 1e-7, 0.3, -0.4])
def test_expm1_ratio_derivatives(xi: float) -> None:
    u = np.array([-1.2, 0.5, 4.6])
    c, d1, d2 = gev.expm1_ratio(u, xi, 2)
    h = 1e-5
    cp, cm = gev.expm1_ratio(u, xi + h)[0], gev.expm1_ratio(u, xi - h)[0]
    np.testing.assert_allclose(d1, (cp - cm) / (2 * h), rtol=1e-7)
    np.testing.assert_allclose(d2, (cp - 2 * c + cm) / h**2, rtol=1e-4)


@pytest.mark.parametrize("xi", [0.0, 0.2, -0.3])
def test_isf_matches_scipy_in_the_far_tail(xi: float) -> None:
    v = np.array([1e-15, 1e-9, 1e-3, 0.4])
    np.testing.assert_allclose(gev.isf(v, MU, SIGMA, xi), scipy_gev(xi).isf(v), rtol=1e-10)
