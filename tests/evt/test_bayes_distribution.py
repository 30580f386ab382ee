"""The PyTensor GEV distribution and the fused log-likelihood op against scipy and calculus."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from evtsync.evt import gev
from tests._lazy import lazy_module

# PyMC, PyTensor and the distribution module built on them are imported on first use, not at
# collection (issue 48)
stats = lazy_module("scipy.stats")
pm = lazy_module("pymc")
pytensor = lazy_module("pytensor")
pt = lazy_module("pytensor.tensor")
distribution = lazy_module("evtsync.evt.distribution")

XS = np.array([-6.0, -3.0, -1.0, -0.2, 0.0, 0.5, 2.0, 5.0, 20.0])
MU, SIGMA = 0.1, 1.3
XIS = [-0.5, -0.2, -1e-6, 0.0, 1e-6, 0.15, 0.4]


def scipy_logpdf(x, mu, sigma, xi):
    return stats.genextreme.logpdf(x, -xi, loc=mu, scale=sigma)


def scipy_logcdf(x, mu, sigma, xi):
    return stats.genextreme.logcdf(x, -xi, loc=mu, scale=sigma)


@pytest.mark.parametrize("xi", XIS)
def test_logp_matches_scipy_on_and_off_support(xi):
    lp = pm.logp(distribution.GEV.dist(mu=MU, sigma=SIGMA, xi=xi), XS).eval()
    ref = scipy_logpdf(XS, MU, SIGMA, xi)
    assert np.array_equal(np.isneginf(lp), np.isneginf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(lp[finite], ref[finite], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gev.logpdf(XS, MU, SIGMA, xi), lp, rtol=1e-12)


@pytest.mark.parametrize("xi", XIS)
def test_logcdf_matches_scipy_on_both_sides_of_support(xi):
    lc = pm.logcdf(distribution.GEV.dist(mu=MU, sigma=SIGMA, xi=xi), XS).eval()
    ref = scipy_logcdf(XS, MU, SIGMA, xi)
    assert np.array_equal(np.isneginf(lc), np.isneginf(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(lc[finite], ref[finite], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gev.logcdf(XS, MU, SIGMA, xi), lc, rtol=1e-12)


def test_logcdf_above_upper_end_point_is_zero_and_below_lower_end_is_minus_inf():
    # xi < 0: upper end point mu - sigma/xi = 0.1 + 1.3/0.5 = 2.7; F = 1 above it.
    assert pm.logcdf(distribution.GEV.dist(MU, SIGMA, -0.5), 3.0).eval() == 0.0
    # xi > 0: lower end point mu - sigma/xi = 0.1 - 1.3/0.4 = -3.15; F = 0 below it.
    assert pm.logcdf(distribution.GEV.dist(MU, SIGMA, 0.4), -4.0).eval() == -np.inf


def _grad_fn():
    mu, sigma, xi = pt.dscalar("mu"), pt.dscalar("sigma"), pt.dscalar("xi")
    x = XS[2:7]
    lp = pm.logp(distribution.GEV.dist(mu, sigma, xi), x).sum()
    return pytensor.function([mu, sigma, xi], pytensor.grad(lp, [mu, sigma, xi])), x


def test_gradient_at_xi_zero_is_finite_and_matches_finite_differences():
    grad, x = _grad_fn()
    g = np.array(grad(MU, SIGMA, 0.0))
    assert np.all(np.isfinite(g))
    h = 1e-5  # central differences of scipy's density: error O(h^2) ~ 1e-10 relative

    def f(m, s, k):
        return scipy_logpdf(x, m, s, k).sum()

    fd = [
        (f(MU + h, SIGMA, 0.0) - f(MU - h, SIGMA, 0.0)) / (2 * h),
        (f(MU, SIGMA + h, 0.0) - f(MU, SIGMA - h, 0.0)) / (2 * h),
        (f(MU, SIGMA, h) - f(MU, SIGMA, -h)) / (2 * h),
    ]
    np.testing.assert_allclose(g, fd, rtol=1e-5)
    assert abs(g[2]) > 0.1  # the xi-derivative is not silently zero


def test_gradient_is_continuous_through_xi_zero():
    grad, _ = _grad_fn()
    g0 = np.array(grad(MU, SIGMA, 0.0))
    for xi in (-1e-8, 1e-8, -5e-4, 5e-4):
        # derivative of a smooth function: changes by O(|xi|) * second derivative (~10 here)
        np.testing.assert_allclose(np.array(grad(MU, SIGMA, xi)), g0, atol=50 * abs(xi) + 1e-9)


def test_random_draws_follow_the_distribution():
    rng = np.random.default_rng(12)
    for xi in (-0.2, 0.0, 0.25):
        draws = gev.rvs(MU, SIGMA, xi, rng=rng, size=4000)
        p = stats.kstest(draws, stats.genextreme(-xi, loc=MU, scale=SIGMA).cdf).pvalue
        assert p > 1e-3, (xi, p)
    draws = pm.draw(distribution.GEV.dist(MU, SIGMA, 0.25), draws=4000, random_seed=3)
    assert stats.kstest(draws, stats.genextreme(-0.25, loc=MU, scale=SIGMA).cdf).pvalue > 1e-3


def test_support_point_is_inside_support():
    for xi in (-0.8, 0.0, 0.8):
        with pm.Model() as model:
            distribution.GEV("x", MU, SIGMA, xi)
        x0 = model.initial_point()["x"]
        assert np.isfinite(scipy_logpdf(x0, MU, SIGMA, xi))


@pytest.mark.parametrize("mode", ["NUMBA", "FAST_COMPILE"])
def test_fused_sum_matches_scipy_and_autodiff(mode):
    rng = np.random.default_rng(5)
    z = stats.genextreme.rvs(-0.1, size=3000, random_state=rng)
    mu, sigma, xi = pt.dscalar(), pt.dscalar(), pt.dscalar()
    fused = distribution.gev_logp_sum(z, mu, sigma, xi)
    elem = pm.logp(distribution.GEV.dist(mu, sigma, xi), z).sum()
    f_fused = pytensor.function([mu, sigma, xi], [fused, *pytensor.grad(fused, [mu, sigma, xi])], mode=mode)
    f_elem = pytensor.function([mu, sigma, xi], [elem, *pytensor.grad(elem, [mu, sigma, xi])])
    for point in [(0.05, 1.05, 0.1), (0.0, 1.0, 0.0), (0.02, 1.0, -1e-7), (0.0, 1.0, -0.05)]:
        got = np.array(f_fused(*point), dtype=float)
        want = np.array(f_elem(*point), dtype=float)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-8)
        np.testing.assert_allclose(got[0], scipy_logpdf(z, *point).sum(), rtol=1e-10)
    # a parameter point that leaves a z-score outside the support: -inf, zero gradient
    out = f_fused(5.0, 0.1, 0.5)
    assert out[0] == -np.inf and all(g == 0 for g in out[1:])


_JAX = pytest.param("JAX", marks=pytest.mark.skipif(importlib.util.find_spec("jax") is None,
                                                    reason="jax is not installed (the optional JAX backend)"))


@pytest.mark.parametrize("mode", ["NUMBA", "FAST_COMPILE", _JAX])
def test_fused_cells_sum_matches_scipy_per_cell(mode):
    """Every cell of a model in one node: the value is the sum of scipy's log densities, cell
    by cell at its own parameters; the gradient per cell is scipy's by central differences."""
    rng = np.random.default_rng(8)
    sizes = [40, 1, 700]
    z = np.concatenate([stats.genextreme.rvs(-x, size=n, random_state=rng) for n, x in zip(sizes, (0.2, 0.0, -0.1),
                                                                                           strict=True)])
    starts = np.concatenate([[0], np.cumsum(sizes)])
    mu, sigma, xi = pt.dvector(), pt.dvector(), pt.dvector()
    if mode == "JAX":
        distribution.register_jax_backend()
    lp = distribution.gev_logp_sum_cells(z, starts, mu, sigma, xi)
    f = pytensor.function([mu, sigma, xi], [lp, *pytensor.grad(lp, [mu, sigma, xi])], mode=mode)
    point = [np.array([0.1, -0.2, 0.05]), np.array([1.1, 0.8, 0.95]), np.array([0.2, 0.0, -0.1])]

    def scipy_total(m, s, x):
        return sum(scipy_logpdf(z[starts[i]:starts[i + 1]], m[i], s[i], x[i]).sum() for i in range(3))

    value, *grads = f(*point)
    assert value == pytest.approx(scipy_total(*point), rel=1e-11)
    for k in range(3):
        for i in range(3):
            up = [p.copy() for p in point]
            down = [p.copy() for p in point]
            up[k][i] += 1e-6
            down[k][i] -= 1e-6
            numeric = (scipy_total(*up) - scipy_total(*down)) / 2e-6
            assert grads[k][i] == pytest.approx(numeric, rel=1e-5, abs=1e-5), (k, i)
    # one z-score of the last cell outside its support: -inf and a zero gradient
    out = f(point[0], point[1], np.array([0.2, 0.0, 5.0]))
    assert out[0] == -np.inf and all(np.all(g == 0) for g in out[1:])


def test_fused_op_has_a_single_node_for_value_and_gradient():
    z = np.linspace(-1, 3, 50)
    mu, sigma, xi = pt.dscalar(), pt.dscalar(), pt.dscalar()
    lp = distribution.gev_logp_sum(z, mu, sigma, xi)
    f = pytensor.function([mu, sigma, xi], [lp, *pytensor.grad(lp, [mu, sigma, xi])], mode="NUMBA")
    names = [type(node.op).__name__ for node in f.maker.fgraph.apply_nodes]
    assert names.count("GEVLogpSumCells") == 1


def test_pymc_samplers_start_at_xi_zero_and_run():
    """A symmetric prior's initial point is xi = 0 exactly: NUTS must get a finite gradient
    there and move; the gradient-free samplers must run too."""
    z = gev.rvs(0.5, 1.0, 0.1, rng=np.random.default_rng(4), size=200)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        xi = pm.Normal("xi", 0.0, 0.3)
        distribution.GEV("z", mu, sigma, xi, observed=z)
    start = model.initial_point()
    assert start["xi"] == 0.0
    dlogp = model.compile_dlogp()(start)
    assert np.all(np.isfinite(dlogp)) and np.all(dlogp != 0)
    with model:
        nuts = pm.sample(draws=150, tune=150, chains=1, init="adapt_diag", random_seed=1, progressbar=False,
                         compute_convergence_checks=False)
        slice_ = pm.sample(draws=100, tune=50, chains=1, step=pm.Slice(), random_seed=1, progressbar=False,
                           compute_convergence_checks=False)
    assert int(nuts["sample_stats"]["divergences"].sum()) == 0
    for tree in (nuts, slice_):
        draws = tree["posterior"]["xi"].values.ravel()
        assert np.all(np.isfinite(draws)) and np.std(draws) > 0
