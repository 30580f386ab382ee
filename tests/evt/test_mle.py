"""Maximum-likelihood fits (evtsync.evt.mle): published reference fits, recovery, intervals."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import FitError, InputError
from evtsync.evt import mle
from tests._lazy import lazy_module
from tests.conftest import DATA as SHARED_DATA  # the public data copied into tests/data/public

diagnostics = lazy_module("evtsync.plots.diagnostics")  # matplotlib: imported on first use (issue 48)
optimize = lazy_module("scipy.optimize")
stats = lazy_module("scipy.stats")

DATA = SHARED_DATA / "evt"
CHI2_95 = 3.841458820694124  # chi2(1) 95% quantile = 1.959964^2 (scipy.stats.chi2.ppf(0.95, 1))


@pytest.fixture(scope="module")
def portpirie() -> np.ndarray:
    return pd.read_csv(DATA / "portpirie.csv")["SeaLevel"].to_numpy()


@pytest.fixture(scope="module")
def glass_negated() -> np.ndarray:
    return -pd.read_csv(DATA / "glass.csv")["Strength"].to_numpy()


def _within_rounding(value: float, published: float, decimals: int) -> None:
    """``value`` rounds to ``published`` at the printed precision (half a unit, plus float slack)."""
    assert abs(value - published) <= 0.5 * 10.0 ** (-decimals) + 1e-12, (value, published)


def test_port_pirie_matches_coles(portpirie: np.ndarray) -> None:
    """Coles (2001), *An Introduction to Statistical Modeling of Extreme Values*, §3.4.1:
    GEV MLE (mu, sigma, xi) = (3.87, 0.198, -0.050), standard errors (0.028, 0.020, 0.098),
    maximised log-likelihood 4.34; Gumbel (mu, sigma) = (3.869, 0.195); deviance of the
    Gumbel reduction D = 2 (4.34 - 4.22) = 0.24; return levels with delta-method 95% intervals
    z_0.1 = 4.30 [4.19, 4.41] and z_0.01 = 4.69 [4.38, 5.00]."""
    fit = mle.fit_gev(portpirie)
    assert fit.converged and fit.n == 65
    _within_rounding(fit.mu, 3.87, 2)
    _within_rounding(fit.sigma, 0.198, 3)
    _within_rounding(fit.xi, -0.050, 3)
    _within_rounding(fit.se["mu"], 0.028, 3)
    _within_rounding(fit.se["sigma"], 0.020, 3)
    _within_rounding(fit.se["xi"], 0.098, 3)
    _within_rounding(fit.loglik, 4.34, 2)
    assert fit.aic == pytest.approx(6 - 2 * fit.loglik)
    gumbel = mle.fit_gumbel(portpirie)
    _within_rounding(gumbel.mu, 3.869, 3)
    _within_rounding(gumbel.sigma, 0.195, 3)
    _within_rounding(gumbel.loglik, 4.22, 2)
    lrt = mle.likelihood_ratio_test(portpirie)
    _within_rounding(lrt.deviance, 0.24, 2)
    assert lrt.pvalue == pytest.approx(stats.chi2.sf(lrt.deviance, 1))
    for period, (level, lower, upper) in {10: (4.30, 4.19, 4.41), 100: (4.69, 4.38, 5.00)}.items():
        z, se = mle.return_level_delta(fit, period)
        _within_rounding(z, level, 2)
        # the book adds +-1.96 se to the rounded estimate, so compare the half-width; the
        # half-difference of two numbers rounded to 0.01 is exact to within 0.005
        assert abs(1.96 * se - (upper - lower) / 2) <= 0.005 + 1e-12


def test_glass_fibres_match_coles(glass_negated: np.ndarray) -> None:
    """Coles (2001) §3.4.2 fits the negated glass-fibre strengths (minima as maxima):
    (mu, sigma, xi) = (-1.64, 0.27, -0.084). Only the point estimates are asserted against the
    book; the standard errors are checked against an independent finite-difference Hessian of
    scipy's ``genextreme`` log-likelihood. No published R ``ismev``/``evd`` output of this fit was
    found (searched public code and pages for ``gev.fit`` on the glass data, 2026-12-02), so the
    book's printed values are the reference here, to their printed precision (not 1e-4)."""
    fit = mle.fit_gev(glass_negated)
    assert fit.converged and fit.n == 63
    _within_rounding(fit.mu, -1.64, 2)
    _within_rounding(fit.sigma, 0.27, 2)
    _within_rounding(fit.xi, -0.084, 3)

    def ll(theta: np.ndarray) -> float:
        return float(np.sum(stats.genextreme.logpdf(glass_negated, -theta[2], theta[0], theta[1])))

    theta = np.array([fit.mu, fit.sigma, fit.xi])
    h = np.array([2e-4, 2e-4, 2e-4])
    hess = np.empty((3, 3))
    for i in range(3):
        for j in range(3):
            ei, ej = np.eye(3)[i] * h[i], np.eye(3)[j] * h[j]
            hess[i, j] = (ll(theta + ei + ej) - ll(theta + ei - ej) - ll(theta - ei + ej) + ll(theta - ei - ej)) / (4 * h[i] * h[j])
    se_ref = np.sqrt(np.diag(np.linalg.inv(-hess)))
    np.testing.assert_allclose([fit.se["mu"], fit.se["sigma"], fit.se["xi"]], se_ref, rtol=1e-3)


@pytest.mark.parametrize("name", ["portpirie", "glass_negated"])
def test_optimum_at_least_as_good_as_scipy(name: str, request: pytest.FixtureRequest) -> None:
    data = request.getfixturevalue(name)
    fit = mle.fit_gev(data)
    c, loc, scale = stats.genextreme.fit(data)
    ll_scipy = float(np.sum(stats.genextreme.logpdf(data, c, loc, scale)))
    assert fit.loglik >= ll_scipy - 1e-9
    assert fit.loglik == pytest.approx(float(np.sum(stats.genextreme.logpdf(data, -fit.xi, fit.mu, fit.sigma))), abs=1e-10)
    assert abs(fit.xi - (-c)) < 0.05 * fit.se["xi"]
    g_loc, g_scale = stats.gumbel_r.fit(data)
    gumbel = mle.fit_gumbel(data)
    assert gumbel.mu == pytest.approx(g_loc, abs=1e-6 * g_scale) and gumbel.sigma == pytest.approx(g_scale, rel=1e-6)


def _scipy_profile_xi(data: np.ndarray, xi: float) -> float:
    """Independent profile log-likelihood: scipy's density, scipy's optimiser."""
    def nll(t: np.ndarray) -> float:
        value = -np.sum(stats.genextreme.logpdf(data, -xi, t[0], np.exp(t[1])))
        return value if np.isfinite(value) else 1e300

    start = np.array([np.mean(data) - 0.45 * np.std(data), np.log(0.78 * np.std(data))])
    best = None
    for offset in (0.0, 0.3, -0.3):
        res = optimize.minimize(nll, start + [offset * np.std(data), 0], method="Nelder-Mead",
                                options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 5000})
        best = res if best is None or res.fun < best.fun else best
    return -float(best.fun)


def test_profile_interval_xi(portpirie: np.ndarray) -> None:
    fit = mle.fit_gev(portpirie)
    lo, hi = mle.profile_ci_xi(portpirie, fit, level=0.95)
    assert lo < fit.xi < hi
    for end in (lo, hi):
        deviance = 2 * (fit.loglik - _scipy_profile_xi(portpirie, end))
        assert deviance == pytest.approx(CHI2_95, abs=2e-4)
    # the profile is asymmetric but of the width of the Wald interval to first order
    assert (hi - lo) == pytest.approx(2 * 1.96 * fit.se["xi"], rel=0.25)
    grid = np.array([lo, fit.xi, hi])
    np.testing.assert_allclose(mle.profile_loglik_xi(portpirie, grid),
                               [fit.loglik - CHI2_95 / 2, fit.loglik, fit.loglik - CHI2_95 / 2], atol=2e-4)


def test_profile_interval_return_level_gumbel(portpirie: np.ndarray) -> None:
    """Ends of the profile interval of the 100-block Gumbel return level, checked by an
    independent one-dimensional maximisation with scipy's ``gumbel_r``."""
    fit = mle.fit_gumbel(portpirie)
    period = 100.0
    y_p = -math.log1p(-1 / period)
    lo, hi = mle.profile_ci_return_level(portpirie, fit, period, level=0.95)
    z_hat, _ = mle.return_level_delta(fit, period)
    assert lo < z_hat < hi

    def profile(z: float) -> float:
        res = optimize.minimize_scalar(
            lambda s: -np.sum(stats.gumbel_r.logpdf(portpirie, z + s * math.log(y_p), s)),
            bounds=(1e-3, 2.0), method="bounded", options={"xatol": 1e-12})
        return -float(res.fun)

    for end in (lo, hi):
        assert 2 * (fit.loglik - profile(end)) == pytest.approx(CHI2_95, abs=2e-4)


def test_profile_interval_return_level_gev(portpirie: np.ndarray) -> None:
    fit = mle.fit_gev(portpirie)
    z_hat, se = mle.return_level_delta(fit, 100.0)
    lo, hi = mle.profile_ci_return_level(portpirie, fit, 100.0, level=0.95)
    assert lo < z_hat < hi
    # with xi near 0 and n = 65 the profile is skewed to the right (Coles 2001, Fig. 3.8)
    assert hi - z_hat > z_hat - lo


CASES = [(xi, n) for xi in (-0.3, -0.1, 0.0, 0.1, 0.3) for n in (60, 300, 2000)]


@pytest.mark.parametrize(("xi", "n"), CASES)
def test_gev_parameter_recovery(xi: float, n: int) -> None:
    """Data from scipy's generator (independent of ours): every estimate within 3.5 SE."""
    mu, sigma = 2.0, 0.5
    seed = 100 + int(1000 * (xi + 1)) + n
    data = stats.genextreme.rvs(-xi, loc=mu, scale=sigma, size=n, random_state=seed)
    fit = mle.fit_gev(data)
    assert fit.converged
    for name, true in (("mu", mu), ("sigma", sigma), ("xi", xi)):
        assert abs(getattr(fit, name) - true) < 3.5 * fit.se[name], (name, getattr(fit, name), fit.se[name])
    # standard errors shrink like 1/sqrt(n): sigma's SE is close to the xi = 0 expected value
    assert fit.se["sigma"] == pytest.approx(sigma * 0.78 / math.sqrt(n), rel=0.5)


@pytest.mark.parametrize("n", [50, 500, 5000])
def test_gumbel_parameter_recovery(n: int) -> None:
    data = stats.gumbel_r.rvs(loc=-1.0, scale=2.0, size=n, random_state=n)
    fit = mle.fit_gumbel(data)
    assert fit.converged and fit.xi == 0.0 and set(fit.se) == {"mu", "sigma"}
    assert abs(fit.mu + 1.0) < 3.5 * fit.se["mu"] and abs(fit.sigma - 2.0) < 3.5 * fit.se["sigma"]
    # Gumbel expected information (Coles 2001 / Kotz & Nadarajah): var(mu) = 1.1087 s^2/n, var(s) = 0.6079 s^2/n
    assert fit.se["mu"] == pytest.approx(math.sqrt(1.1087 / n) * fit.sigma, rel=0.2)
    assert fit.se["sigma"] == pytest.approx(math.sqrt(0.6079 / n) * fit.sigma, rel=0.2)


def test_likelihood_ratio_test_detects_heavy_tail() -> None:
    data = stats.genextreme.rvs(-0.3, size=1000, random_state=3)
    lrt = mle.likelihood_ratio_test(data)
    assert lrt.pvalue < 1e-4 and lrt.gev.aic < lrt.gumbel.aic
    assert lrt.deviance == pytest.approx(2 * (lrt.gev.loglik - lrt.gumbel.loglik))


def test_scale_and_location_equivariance(portpirie: np.ndarray) -> None:
    base = mle.fit_gev(portpirie)
    moved = mle.fit_gev(1000.0 + 250.0 * portpirie)
    assert moved.mu == pytest.approx(1000.0 + 250.0 * base.mu, rel=1e-7)
    assert moved.sigma == pytest.approx(250.0 * base.sigma, rel=1e-6)
    assert moved.xi == pytest.approx(base.xi, abs=1e-6)
    assert moved.se["xi"] == pytest.approx(base.se["xi"], rel=1e-4)
    assert moved.loglik == pytest.approx(base.loglik - 65 * math.log(250.0), abs=1e-7)


def test_fit_result_dict_and_frozen(portpirie: np.ndarray) -> None:
    fit = mle.fit_mle(portpirie, "gev")
    d = fit.to_dict()
    assert list(d)[:8] == ["family", "n", "mu", "sigma", "xi", "se", "loglik", "aic"]
    assert d["converged"] is True and np.asarray(d["cov"]).shape == (3, 3)
    assert np.sqrt(np.diag(fit.cov)) == pytest.approx([fit.se["mu"], fit.se["sigma"], fit.se["xi"]])
    with pytest.raises(AttributeError):
        fit.mu = 0.0  # type: ignore[misc]


def test_unbounded_likelihood_is_flagged() -> None:
    """For a true xi of -1.5 the likelihood is unbounded at xi -> -1: flagged, not hidden."""
    data = stats.genextreme.rvs(1.5, size=100, random_state=0)
    fit = mle.fit_gev(data)
    assert not fit.converged and "-1" in fit.message


def test_bad_input() -> None:
    with pytest.raises(InputError, match="NaN"):
        mle.fit_gev([1.0, 2.0, np.nan, 3.0, 4.0, 5.0])
    with pytest.raises(InputError, match="at least"):
        mle.fit_gev([1.0, 2.0, 3.0])
    with pytest.raises(FitError, match="equal"):
        mle.fit_gumbel([2.0] * 10)
    with pytest.raises(InputError, match="family"):
        mle.fit_mle([1.0, 2.0, 3.0, 4.0, 5.0], "weibull")


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_diagnostic_plot_written_atomically(tmp_path: Path, portpirie: np.ndarray, suffix: str) -> None:
    fit = mle.fit_gev(portpirie)
    out = diagnostics.plot_diagnostics(fit, portpirie, tmp_path / f"diag{suffix}")
    head = out.read_bytes()[:64]
    assert head.startswith(b"\x89PNG") if suffix == ".png" else b"<svg" in out.read_bytes()[:2000] or b"<?xml" in head
    assert [p.name for p in tmp_path.iterdir()] == [f"diag{suffix}"]
    with pytest.raises(InputError, match="format"):
        diagnostics.plot_diagnostics(fit, portpirie, tmp_path / "diag.txt")


@pytest.mark.slow
@pytest.mark.parametrize("xi", [-0.2, 0.0, 0.2])
def test_coverage_of_wald_and_profile_intervals(xi: float) -> None:
    """Coverage study: 300 data sets of n = 200. Wald 95% intervals of mu, sigma, xi and the
    profile interval of xi must cover the truth at 0.95 within 3.5 binomial standard errors
    (0.95 +- 0.044)."""
    reps, n = 300, 200
    rng = np.random.default_rng(12345 + int(10 * (xi + 1)))
    hits = {"mu": 0, "sigma": 0, "xi": 0, "xi_profile": 0}
    truth = {"mu": 0.0, "sigma": 1.0, "xi": xi}
    for _ in range(reps):
        data = stats.genextreme.rvs(-xi, size=n, random_state=rng)
        fit = mle.fit_gev(data)
        for name in ("mu", "sigma", "xi"):
            hits[name] += abs(getattr(fit, name) - truth[name]) <= 1.96 * fit.se[name]
        lo, hi = mle.profile_ci_xi(data, fit, level=0.95)
        hits["xi_profile"] += lo <= xi <= hi
    tol = 3.5 * math.sqrt(0.95 * 0.05 / reps)
    for name, count in hits.items():
        assert abs(count / reps - 0.95) <= tol, (name, count / reps)


# --------------------------------------------------------------------------- profile intervals vs brute force


def _ref_loglik(x: np.ndarray, mu: float, sigma: float, xi: float) -> float:
    """GEV log-likelihood written here from Coles (2001) eq. 3.7, independent of the package."""
    if sigma <= 0:
        return -math.inf
    z = (x - mu) / sigma
    if abs(xi) < 1e-12:
        return float(np.sum(-math.log(sigma) - z - np.exp(-z)))
    t = 1 + xi * z
    if np.any(t <= 0):
        return -math.inf
    return float(np.sum(-math.log(sigma) - (1 + 1 / xi) * np.log(t) - t ** (-1 / xi)))


def _brute_max(fun, starts: list[np.ndarray]) -> tuple[float, np.ndarray]:
    """Maximum of ``fun`` from several Nelder-Mead starts (scipy.optimize.minimize)."""
    best = None
    for s in starts:
        res = optimize.minimize(lambda t: -fun(t), s, method="Nelder-Mead",
                                options={"xatol": 1e-10, "fatol": 1e-12, "maxfev": 8000})
        if best is None or res.fun < best.fun:
            best = res
    return -float(best.fun), best.x


def _brute_march(points: np.ndarray, ll_at, starts_at, cut: float) -> list[tuple[float, float]]:
    """Brute-force profile along ``points`` in order, each value the best of fixed starts and of
    the previous point's optimum, stopping at the first value below ``cut``."""
    out: list[tuple[float, float]] = []
    prev = None
    for v in points:
        starts = starts_at(v) + ([prev] if prev is not None else [])
        value, prev = _brute_max(lambda t, v=v: ll_at(v, t), starts)
        out.append((float(v), value))
        if value < cut:
            break
    return out


def _brute_ends(grid: np.ndarray, centre: float, ll_at, starts_at, cut: float) -> list[float | None]:
    """Ends of the connected set around ``centre`` where the brute-force profile is >= ``cut``:
    a coarse march outward on ``grid``, then a grid 20x finer across the coarse cell of each
    crossing, linear interpolation; None where ``grid`` ends above the cut (an open side)."""
    k = int(np.argmin(np.abs(grid - centre)))
    ends: list[float | None] = []
    for side in (grid[k::-1], grid[k:]):
        coarse = _brute_march(side, ll_at, starts_at, cut)
        if coarse[-1][1] >= cut:
            ends.append(None)
            continue
        fine = _brute_march(np.linspace(coarse[-2][0], coarse[-1][0], 21), ll_at, starts_at, cut)
        (x0, y0), (x1, y1) = fine[-2], fine[-1]
        ends.append(x0 + (cut - y0) * (x1 - x0) / (y1 - y0))
    return ends


def _feasible_sigma(x: np.ndarray, mu: float, xi: float, sigma: float) -> float:
    return max(sigma, 1.5 * float(np.max(-xi * (x - mu))) + 1e-12)


def _brute_xi_ends(x: np.ndarray, xi_hat: float, ll_hat: float, lo: float, hi: float, step: float = 0.02):
    """Brute-force ends of the 95% profile interval of xi searched in [lo, hi]; None where open."""
    m, s = float(np.mean(x)), float(np.std(x))

    def ll_at(xi, t):
        return _ref_loglik(x, t[0], math.exp(t[1]), xi)

    def starts_at(xi):
        out = []
        for mu0, s0 in ((m - 0.45 * s, 0.78 * s), (m, s), (m - s, 2 * s)):
            out.append(np.array([mu0, math.log(_feasible_sigma(x, mu0, xi, s0))]))
        return out

    grid = np.unique(np.concatenate([np.arange(xi_hat, lo, -step)[::-1], np.arange(xi_hat, hi, step), [lo, hi]]))
    return _brute_ends(grid, xi_hat, ll_at, starts_at, ll_hat - CHI2_95 / 2)


#: the samples of _xi_sets, named at collection without drawing them (SciPy's stats is imported on first use)
XI_SETS = ["portpirie", "glass_negated", "sim_n20_xi0.1", "sim_n200_xi-0.2", "sim_n6_xi0.1", "bench_n6", "bench_n20"]


def _xi_sets() -> dict[str, np.ndarray]:
    return {
        "portpirie": pd.read_csv(DATA / "portpirie.csv")["SeaLevel"].to_numpy(),
        "glass_negated": -pd.read_csv(DATA / "glass.csv")["Strength"].to_numpy(),
        "sim_n20_xi0.1": stats.genextreme.rvs(-0.1, loc=1.0, scale=0.5, size=20, random_state=2024),
        "sim_n200_xi-0.2": stats.genextreme.rvs(0.2, loc=0.0, scale=1.0, size=200, random_state=7),
        "sim_n6_xi0.1": stats.genextreme.rvs(-0.1, size=6, random_state=3),
        # the samples of benchmarks/bench_mle.py where the previous code gave false ends (an
        # infeasible warm start read as a drop of the profile): xi lower end -0.672 at n = 6 (open
        # below in truth) and a 100-block upper end of 11.9 at n = 20 (52.7 in truth)
        "bench_n6": stats.genextreme.rvs(-0.1, size=6, random_state=1006),
        "bench_n20": stats.genextreme.rvs(-0.1, size=20, random_state=1020),
    }


@pytest.mark.parametrize("name", XI_SETS)
def test_profile_interval_xi_matches_brute_force(name: str) -> None:
    """Port Pirie and the negated glass fibres (Coles 2001 §3.4.1-3.4.2: xi_hat = -0.050 (se 0.098),
    so the Wald interval is [-0.242, 0.142], and -0.084) and simulated GEV data: both ends of the
    95% profile interval agree with a brute-force grid profile (nuisance parameters maximised by
    scipy.optimize.minimize from several starts) to 1e-3, open sides included."""
    sets = _xi_sets()
    assert list(sets) == XI_SETS
    x = sets[name]
    fit = mle.fit_gev(x)
    iv = mle.profile_ci_xi(x, fit, level=0.95)
    assert (iv.lower, iv.upper) == tuple(iv)
    ends = _brute_xi_ends(x, fit.xi, fit.loglik, -1 + 1e-6, iv.searched[1])
    for ours, ref, is_open in ((iv.lower, ends[0], iv.open_below), (iv.upper, ends[1], iv.open_above)):
        if ref is None:
            assert is_open and math.isinf(ours)
        else:
            assert not is_open and abs(ours - ref) <= 1e-3, (name, ours, ref)
    if name == "portpirie":
        _within_rounding(fit.xi, -0.050, 3)
        # the profile interval is skewed to the right of the Wald interval [-0.242, 0.142]
        assert -0.242 < iv.lower < fit.xi < 0.142 < iv.upper


def _brute_rl_ends(x: np.ndarray, fit: mle.MleFit, period: float, z_hat: float, half: float, xi_max: float):
    y_p = -math.log1p(-1.0 / period)
    cut = fit.loglik - CHI2_95 / 2

    def ll_at(z, t):
        sigma, xi = math.exp(t[0]), t[1]
        if not -1 < xi <= xi_max:
            return -math.inf
        mu = z - sigma * (y_p ** (-xi) - 1) / xi if abs(xi) > 1e-12 else z + sigma * math.log(y_p)
        return _ref_loglik(x, mu, sigma, xi)

    def starts_at(z):
        out = []
        for xi0 in (-0.3, 0.0, 0.3):
            out.append(np.array([math.log(2 * fit.sigma), xi0]))
        return out

    grid = z_hat + half * np.arange(-3.0, 8.01, 0.1)
    ends = _brute_ends(grid, z_hat, ll_at, starts_at, cut)
    assert None not in ends, "reference grid too short"
    return ends


@pytest.mark.parametrize("name", ["portpirie", "sim_n20_xi0.1", pytest.param("bench_n20", marks=pytest.mark.slow)])
def test_profile_interval_return_level_matches_brute_force(name: str) -> None:
    """100-block return level: both profile ends against a brute-force grid profile with (sigma,
    xi) maximised by scipy from several starts, to 1e-3."""
    x = _xi_sets()[name]
    fit = mle.fit_gev(x)
    z_hat, se = mle.return_level_delta(fit, 100.0)
    iv = mle.profile_ci_return_level(x, fit, 100.0, level=0.95)
    assert iv.closed and iv.lower < z_hat < iv.upper
    ref = _brute_rl_ends(x, fit, 100.0, z_hat, 1.96 * se, max(mle.XI_PROFILE_MAX, fit.xi + 1))
    assert abs(iv.lower - ref[0]) <= 1e-3 and abs(iv.upper - ref[1]) <= 1e-3, (iv, ref)


def test_six_values_say_which_side_is_open(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """n = 6: a side the profile does not bound is open (an infinite bound with its flag and a note,
    in words in the CLI and null in JSON), never NaN."""
    from evtsync.cli import main

    x = _xi_sets()["sim_n6_xi0.1"]
    fit = mle.fit_gev(x)
    iv = mle.profile_ci_xi(x, fit, level=0.95)
    assert not iv.closed and not math.isnan(iv.lower) and not math.isnan(iv.upper)
    assert iv.open_below and iv.lower == -math.inf and "open below" in iv.note
    assert "open below (no lower end down to" in iv.describe()
    path = tmp_path / "six.csv"
    path.write_text("z\n" + "\n".join(repr(float(v)) for v in x) + "\n")
    main(["fit", str(path), "--mle", "--ci-level", "0.95"])
    out = capsys.readouterr().out
    assert "xi 95% profile-likelihood interval: [open below (no lower end down to -1)" in out
    assert "100-block return level" in out and "nan" not in out.split("interval")[1].split("\n")[0]
    main(["fit", str(path), "--mle", "--json", "--ci-level", "0.95"])
    import json

    doc = json.loads(capsys.readouterr().out)
    ci = doc["xi_profile_ci"]
    assert ci["lower"] is None and ci["open_below"] is True and ci["upper"] == pytest.approx(iv.upper)
    assert [r["period_blocks"] for r in doc["return_levels"]] == [10.0, 100.0]


def test_return_levels_in_the_cli_match_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    from evtsync.cli import main

    x = _xi_sets()["portpirie"]
    fit = mle.fit_gev(x)
    main(["fit", str(DATA / "portpirie.csv"), "--mle", "--column", "SeaLevel", "--json", "--ci-level", "0.95"])
    import json

    doc = json.loads(capsys.readouterr().out)
    rl100 = doc["return_levels"][1]
    z, se = mle.return_level_delta(fit, 100.0)
    assert rl100["level"] == pytest.approx(z) and rl100["se_delta"] == pytest.approx(se)
    # Coles (2001) §3.4.1: z_0.01 = 4.69 (delta-method)
    _within_rounding(rl100["level"], 4.69, 2)
    iv = mle.profile_ci_return_level(x, fit, 100.0, level=0.95)
    assert (rl100["profile_ci"]["lower"], rl100["profile_ci"]["upper"]) == pytest.approx((iv.lower, iv.upper))


# --- issue 30: the Newton engine --------------------------------------------------------------

@pytest.mark.parametrize("theta", [(-0.3, 0.8, 0.0), (-0.3, 0.8, 1e-5), (0.1, 1.2, -1e-4), (-0.3, 0.8, 0.25),
                                   (0.2, 1.5, -0.2)])
def test_analytic_gradient_and_hessian_match_finite_differences(theta: tuple[float, float, float]) -> None:
    """The engine's derivatives against central differences of the summed log density of
    :func:`evtsync.evt.gev.logpdf` (itself checked against scipy in test_gev.py), including xi
    at and next to 0, where the closed forms cancel and the series is used."""
    from evtsync.evt import gev

    y = stats.genextreme.rvs(-0.1, size=400, random_state=11)
    y = (y - y.mean()) / y.std()

    def nll(t: np.ndarray) -> float:
        return -float(np.sum(gev.logpdf(y, t[0], t[1], t[2])))

    t0 = np.array(theta)
    f, g, h = mle._nll_derivs(y, *theta, order=2)
    assert f == pytest.approx(nll(t0), rel=1e-13)
    eps = 1e-5
    g_fd = np.array([(nll(t0 + eps * e) - nll(t0 - eps * e)) / (2 * eps) for e in np.eye(3)])
    h_fd = np.array([[(nll(t0 + eps * (ei + ej)) - nll(t0 + eps * (ei - ej)) - nll(t0 - eps * (ei - ej))
                       + nll(t0 - eps * (ei + ej))) / (4 * eps**2) for ej in np.eye(3)] for ei in np.eye(3)])
    np.testing.assert_allclose(g, g_fd, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(h, h_fd, rtol=1e-4, atol=1e-2)


def test_port_pirie_matches_r_ismev(portpirie: np.ndarray) -> None:
    """R ``ismev::gev.fit`` on Port Pirie, as recorded in a published test suite:
    paulnorthrop/evmissing, ``tests/testthat/test-vs_portpirie.R`` (the same 65 sea levels, listed
    there), which records ``ifit$mle = c(3.87474692, 0.19804120, -0.05008773)`` and
    ``-ifit$nllh = 4.339058`` and checks them to 1e-4; the covariance matrix it takes from Coles
    (2001) p. 59 (0.000780, 0.000197, -0.00107; 0.000410, -0.000778; 0.00965, printed to three
    significant figures) and the 10-year return level's variance 0.00303 from p. 60.
    Asserted: the MLE and the log-likelihood to 1e-4; the covariance as evmissing checks it
    (testthat's ``expect_equal(tolerance = 1e-3)``: the mean relative difference over the entries)
    and each entry to one unit of its last printed digit (the book's matrix is ismev's, at
    ismev's Nelder-Mead optimum, whose xi differs from ours by 2e-5: -0.0007775 here against the
    printed -0.000778); the 10-year level's variance to half a unit of its last printed digit."""
    fit = mle.fit_gev(portpirie)
    assert fit.n == 65 and fit.converged and fit.decrement <= mle.CONVERGED_DECREMENT
    np.testing.assert_allclose([fit.mu, fit.sigma, fit.xi], [3.87474692, 0.19804120, -0.05008773], atol=1e-4)
    assert fit.loglik == pytest.approx(4.339058, abs=1e-4)
    coles_p59 = {(0, 0): (0.000780, 6), (0, 1): (0.000197, 6), (0, 2): (-0.00107, 5),
                 (1, 1): (0.000410, 6), (1, 2): (-0.000778, 6), (2, 2): (0.00965, 5)}
    cov = np.asarray(fit.cov)
    book = np.empty((3, 3))
    for (i, j), (value, decimals) in coles_p59.items():
        book[i, j] = book[j, i] = value
        assert abs(cov[i, j] - value) <= 10.0 ** (-decimals) + 1e-12, ((i, j), cov[i, j], value)
        assert cov[j, i] == pytest.approx(cov[i, j], rel=1e-12)
    assert np.abs(cov - book).sum() / np.abs(book).sum() <= 1e-3
    _, se10 = mle.return_level_delta(fit, 10)
    _within_rounding(se10**2, 0.00303, 5)


#: R ``ismev::gev.fit`` (ismev 1.43, commit 25223b17285d45bf3911efd79ac75f363e7ae495 of the CRAN
#: mirror, R 4.2.2 Patched r83330), run on the shared csv files (checked equal to ismev's own
#: data/*.rda) by ``Rscript tools/ismev_reference.R ISMEV_GIT_DIR SHARED_EVT_DIR`` on 2026-12-02:
#: (mle (mu, sigma, xi), se, nllh) with ismev's defaults (Nelder-Mead, optim's reltol ~1.5e-8)
#: and with reltol 1e-14 restarted from that optimum until it stops moving ("tight").
ISMEV_REFERENCE = {
    "portpirie": {
        "default": ((3.8747469218, 0.1980412043, -0.0500877274), (0.0279321076, 0.0202461007, 0.0982563299),
                    -4.3390584476),
        "tight": ((3.8747498579, 0.1980439562, -0.0501095425), (0.0279322939, 0.0202467284, 0.0982527676),
                  -4.3390584737),
    },
    "glass_negated": {
        "default": ((-1.6416229201, 0.2728611475, -0.0843667025), (0.0375253038, 0.0255243722, 0.0699436883),
                    14.2852886325),
        "tight": ((-1.6416264384, 0.2728636166, -0.0843466752), (0.0375254753, 0.0255247684, 0.0699479823),
                  14.2852885760),
    },
}


@pytest.mark.parametrize("name", ["portpirie", "glass_negated"])
def test_matches_r_ismev_gev_fit(name: str, request: pytest.FixtureRequest) -> None:
    """Our MLE against R ``ismev::gev.fit`` run here (:data:`ISMEV_REFERENCE`; issue 30: equal to
    1e-4 on Port Pirie and glass).

    With ismev's defaults, optim's Nelder-Mead stops on its relative tolerance ~2e-5 short of the
    optimum in xi (its nllh is 2.6e-8 above ours on Port Pirie, 5.6e-8 on glass): the estimates
    agree to 1e-4, as the issue asks, not closer. Run to reltol 1e-14, ismev reaches our optimum:
    estimates to 1e-7 and nllh to 1e-9. ismev's standard errors come from optim's
    finite-difference Hessian (step 1e-3), ours from the analytic one: equal to 1e-5 (at most
    1.3e-4 relative, Port Pirie's sigma)."""
    x = request.getfixturevalue(name)
    fit = mle.fit_gev(x)
    default, tight = ISMEV_REFERENCE[name]["default"], ISMEV_REFERENCE[name]["tight"]
    ours = [fit.mu, fit.sigma, fit.xi]
    np.testing.assert_allclose(ours, default[0], rtol=0, atol=1e-4)
    assert -fit.loglik <= default[2] + 1e-12  # ours is at least as good as ismev's default optimum
    assert -fit.loglik == pytest.approx(default[2], abs=1e-4)
    np.testing.assert_allclose(ours, tight[0], rtol=0, atol=1e-7)
    assert -fit.loglik == pytest.approx(tight[2], abs=1e-9)
    se = [fit.se["mu"], fit.se["sigma"], fit.se["xi"]]
    np.testing.assert_allclose(se, tight[1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(se, default[1], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name, old", [
    # the previous engine (Nelder-Mead from five shapes, finite-difference Hessian, commit fc35d59),
    # where it converged: (mu, sigma, xi, loglik), se (mu, sigma, xi), 95% profile ends of xi
    ("portpirie", ((3.874749854525226, 0.1980439586621817, -0.05010953526148186, 4.339058473679444),
                   (0.027932180701933665, 0.020249239294658574, 0.09825553281778619),
                   (-0.2181571174423215, 0.17040555552604975))),
    ("glass_negated", ((-1.6416264357688803, 0.27286361172694856, -0.08434667879615082, -14.285288575958248),
                       (0.03752542637390851, 0.02552656861665932, 0.06994983474808474),
                       (-0.21593658659433523, 0.06328239837933237))),
])
def test_matches_the_previous_engine_on_the_shared_data(name: str, old: tuple, request: pytest.FixtureRequest) -> None:
    x = request.getfixturevalue(name)
    fit = mle.fit_gev(x)
    np.testing.assert_allclose([fit.mu, fit.sigma, fit.xi, fit.loglik], old[0], atol=1e-7)
    np.testing.assert_allclose([fit.se["mu"], fit.se["sigma"], fit.se["xi"]], old[1], rtol=1e-6)
    np.testing.assert_allclose(tuple(mle.profile_ci_xi(x, fit, level=0.95)), old[2], atol=1e-7)


@pytest.mark.parametrize("start", [(10.0, 5.0, 0.8), (3.0, 1e-4, -0.9), (-50.0, 0.01, 1.9), (4.0, 0.2, 0.0)])
def test_a_bad_start_converges_to_the_same_optimum(portpirie: np.ndarray, start: tuple[float, float, float]) -> None:
    """Starts far from the optimum, outside the support or at a tiny scale: the same optimum."""
    ref = mle.fit_gev(portpirie)
    fit = mle.fit_gev(portpirie, start=start)
    assert fit.converged, fit.message
    np.testing.assert_allclose([fit.mu, fit.sigma, fit.xi], [ref.mu, ref.sigma, ref.xi], atol=1e-8)


def test_an_unusable_start_says_why(portpirie: np.ndarray) -> None:
    with pytest.raises(InputError, match="sigma must be > 0"):
        mle.fit_gev(portpirie, start=(3.9, -0.2, 0.0))
    with pytest.raises(InputError, match="xi must be > -1"):
        mle.fit_gev(portpirie, start=(3.9, 0.2, -1.5))
    with pytest.raises(InputError, match="finite"):
        mle.fit_gev(portpirie, start=(3.9, math.nan, 0.0))


def test_convergence_is_judged_at_the_optimum_not_by_a_count(capsys: pytest.CaptureFixture[str],
                                                              tmp_path: Path) -> None:
    """12,000 z-scores (where the previous engine once printed NOT CONVERGED at the optimum):
    exit 0, the optimum at least as good as scipy's, and the verdict's evidence printed."""
    from evtsync.cli import main

    x = stats.genextreme.rvs(-0.1, loc=1.0, scale=0.5, size=12_000, random_state=12)
    path = tmp_path / "z.csv"
    path.write_text("z\n" + "\n".join(repr(float(v)) for v in x) + "\n")
    assert main(["fit", str(path), "--mle"]) == 0
    out = capsys.readouterr().out
    assert "converged: at the optimum (Newton decrement" in out and "NOT CONVERGED" not in out
    fit = mle.fit_gev(x)
    c, loc, scale = stats.genextreme.fit(x)
    assert fit.loglik >= float(np.sum(stats.genextreme.logpdf(x, c, loc, scale))) - 1e-9
    lrt = mle.likelihood_ratio_test(x, fit)
    assert lrt.gumbel.loglik == pytest.approx(float(np.sum(stats.gumbel_r.logpdf(x, *stats.gumbel_r.fit(x)))),
                                              abs=1e-6)


# --- issue 29 item 7: small samples -----------------------------------------------------------

def _write(tmp_path: Path, x: np.ndarray) -> Path:
    path = tmp_path / "six.csv"
    path.write_text("z\n" + "\n".join(repr(float(v)) for v in x) + "\n")
    return path


def test_n6_boundary_xi_is_flagged_in_the_output_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Six values from a bounded parent (xi = -0.3) whose likelihood rises to xi = -1: the fit is
    flagged (not converged, exit 1), and every interval carries the flag rather than printing as a
    plain closed interval."""
    import json

    from evtsync.cli import main

    x = stats.genextreme.rvs(0.3, size=6, random_state=2)
    fit = mle.fit_gev(x)
    assert fit.boundary and not fit.converged and fit.xi < -0.99
    path = _write(tmp_path, x)
    assert main(["fit", str(path), "--mle"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.strip().startswith("FLAGGED: xi_hat") for line in lines)
    interval_lines = [line for line in lines if "profile-likelihood interval" in line]
    assert len(interval_lines) == 3 and all("FLAGGED:" in line for line in interval_lines)
    main(["fit", str(path), "--mle", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["boundary"] is True and doc["converged"] is False
    assert doc["xi_profile_ci"]["flag"] and all(r["profile_ci"]["flag"] for r in doc["return_levels"])


def test_n6_return_level_interval_below_the_sample_maximum_is_flagged() -> None:
    """A regular fit of six values (seed 0: xi_hat = -0.47) whose 90% 100-block interval starts
    below the largest value: 6 blocks exceed a 100-block level with probability
    1 - 0.99^6 = 0.059 < 0.1, so the interval contradicts the data and says so; the 10-block
    level (probability 0.47) is not flagged."""
    x = stats.genextreme.rvs(0.3, size=6, random_state=0)
    fit = mle.fit_gev(x)
    assert fit.converged and not fit.boundary
    iv100 = mle.profile_ci_return_level(x, fit, 100.0, level=0.9)
    assert iv100.lower < x.max() and "contradicts the data" in iv100.flag and "0.059" in iv100.flag
    assert "FLAGGED: contradicts the data" in iv100.describe()
    iv10 = mle.profile_ci_return_level(x, fit, 10.0, level=0.9)
    assert iv10.flag == ""


def test_an_end_found_where_the_nuisance_fit_failed_is_flagged() -> None:
    """15 values from a heavy tail (xi = 0.6; xi_hat = 0.95): far out in the 100-block level's
    tail (z ~ 1e4 data units) the location is a difference of two huge numbers and the nuisance
    optimisation stalls; the upper end it gives is flagged as approximate, never printed plain.
    The lower end is exact: there a brute-force profile (scipy density, Nelder-Mead from 36
    starts) is at the cut to 1e-6."""
    x = stats.genextreme.rvs(-0.6, loc=-0.21879166393254573, scale=3.6753116875067264, size=15, random_state=4)
    fit = mle.fit_gev(x)
    iv = mle.profile_ci_return_level(x, fit, 100.0, level=0.95)
    assert iv.closed and "upper end is approximate" in iv.flag and "FLAGGED" in iv.describe()
    xi_max, u = max(2.0, fit.xi + 1), -math.log(-math.log1p(-0.01))

    def nll(t: np.ndarray, z: float) -> float:
        s, k = math.exp(t[0]), t[1]
        if not -1 < k <= xi_max:
            return 1e300
        v = -np.sum(stats.genextreme.logpdf(x, -k, z - s * math.expm1(k * u) / k, s))
        return float(v) if np.isfinite(v) else 1e300

    best = max(-optimize.minimize(nll, [math.log(s0 * np.std(x)), k0], args=(iv.lower,), method="Nelder-Mead",
                                  options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000}).fun
               for s0 in (0.3, 1, 3, 10, 30, 100) for k0 in (-0.5, 0.01, 0.3, 0.8, 1.5, 1.9))
    assert best == pytest.approx(fit.loglik - CHI2_95 / 2, abs=1e-6)
