"""Maximum-likelihood fits of the Gumbel and GEV distributions, the paper's baseline (SPEC §6).

What is computed, in Coles' (2001) notation, chapter 3:

- the MLE of ``(mu, sigma, xi)`` (GEV) or ``(mu, sigma)`` (Gumbel, xi = 0);
- standard errors and the covariance from the observed information, the inverse of minus the
  Hessian of the log-likelihood at the optimum (central differences with one Richardson
  extrapolation step, on data standardised to unit scale, so the step sizes are the same for
  every data set);
- profile-likelihood intervals for xi and for return levels (Coles §2.6.6, §3.3.3): the
  values of the parameter whose profile log-likelihood lies within ``chi2_1(level)/2`` of the
  maximum;
- AIC = 2 k - 2 loglik and the likelihood-ratio test of Gumbel (xi = 0) against GEV, with
  deviance ``2 (l_GEV - l_Gumbel)`` referred to chi2 with 1 degree of freedom.

Robustness: the data are standardised (mean 0, sd 1) before fitting; the Gumbel MLE is the
root of its one-dimensional score equation (always found); the GEV fit runs Nelder–Mead
from the Gumbel fit and from several shapes, keeps the best, and restarts once from it. The
likelihood is unbounded for xi <= -1 (Smith 1985), so the search is restricted to xi > -1 and a
fit that ends at that boundary is flagged as not converged. Standard errors are only
asymptotically valid for xi > -0.5; a fit below that is flagged in its message.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize, stats

from evtsync.errors import FitError, InputError
from evtsync.evt import gev

log = logging.getLogger("evtsync.evt.mle")

__all__ = [
    "FAMILIES",
    "LikelihoodRatioTest",
    "MleFit",
    "fit_gev",
    "fit_gumbel",
    "fit_mle",
    "likelihood_ratio_test",
    "loglik",
    "profile_ci_return_level",
    "profile_ci_xi",
    "profile_loglik_xi",
    "return_level_delta",
]

FAMILIES = ("gev", "gumbel")
_XI_FLOOR = -1.0
_MIN_N = {"gumbel": 3, "gev": 5}


@dataclass(frozen=True, eq=False)
class MleFit:
    """A maximum-likelihood fit of a GEV-family distribution to block maxima.

    ``se`` holds the standard errors by parameter name (``mu``, ``sigma`` and, for the GEV,
    ``xi``); ``cov`` is their covariance matrix in that order. ``xi`` is 0 for a Gumbel fit.
    ``converged`` is False when the optimiser did not converge, the fit ended on the
    ``xi = -1`` boundary or the observed information is not positive definite.
    """

    family: str
    n: int
    mu: float
    sigma: float
    xi: float
    se: dict[str, float]
    cov: NDArray[np.float64] = field(repr=False)
    loglik: float
    aic: float
    converged: bool
    message: str = ""

    @property
    def n_params(self) -> int:
        """Number of free parameters (2 for Gumbel, 3 for GEV)."""
        return 2 if self.family == "gumbel" else 3

    @property
    def param_names(self) -> tuple[str, ...]:
        """Names of the free parameters, in the order of ``cov``."""
        return ("mu", "sigma") if self.family == "gumbel" else ("mu", "sigma", "xi")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary: family, n, mu, sigma, xi, se, loglik, aic, then the rest."""
        return {
            "family": self.family,
            "n": self.n,
            "mu": self.mu,
            "sigma": self.sigma,
            "xi": self.xi,
            "se": dict(self.se),
            "loglik": self.loglik,
            "aic": self.aic,
            "converged": self.converged,
            "cov": np.asarray(self.cov).tolist(),
            "message": self.message,
        }


@dataclass(frozen=True, eq=False)
class LikelihoodRatioTest:
    """Gumbel (null, xi = 0) against GEV: deviance, p-value and both fits with their AIC."""

    gumbel: MleFit
    gev: MleFit
    deviance: float
    df: int
    pvalue: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary of the test."""
        return {
            "deviance": self.deviance,
            "df": self.df,
            "pvalue": self.pvalue,
            "aic_gumbel": self.gumbel.aic,
            "aic_gev": self.gev.aic,
        }


def loglik(data: ArrayLike, mu: float, sigma: float, xi: float) -> float:
    """Log-likelihood of iid GEV(mu, sigma, xi) block maxima (``-inf`` outside the support)."""
    return float(np.sum(gev.logpdf(np.asarray(data, dtype=float), mu, sigma, xi)))


def _clean(data: ArrayLike, family: str) -> NDArray[np.float64]:
    x = np.asarray(data, dtype=float).ravel()
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise InputError(f"{bad} of {x.size} block maxima are NaN or infinite; remove them first")
    if x.size < _MIN_N[family]:
        raise InputError(f"a {family} fit needs at least {_MIN_N[family]} block maxima; got {x.size}")
    if np.ptp(x) == 0:
        raise FitError(f"all {x.size} block maxima are equal ({x[0]:g}); no scale to fit")
    return x


def _standardise(x: NDArray[np.float64]) -> tuple[NDArray[np.float64], float, float]:
    loc = float(np.mean(x))
    scale = float(np.std(x))
    return (x - loc) / scale, loc, scale


def _nll(y: NDArray[np.float64], mu: float, sigma: float, xi: float) -> float:
    if not (sigma > 0) or not (xi > _XI_FLOOR) or not math.isfinite(mu):
        return math.inf
    value = -float(np.sum(gev.logpdf(y, mu, sigma, xi)))
    return value if math.isfinite(value) else math.inf


def _gumbel_mle_standardised(y: NDArray[np.float64]) -> tuple[float, float]:
    """Gumbel MLE as the root of the profile score in sigma (Coles 2001, §3.3.1)."""
    y_min = float(np.min(y))
    y_bar = float(np.mean(y))

    def score(sigma: float) -> float:
        w = np.exp(-(y - y_min) / sigma)
        return sigma - y_bar + float(np.sum(y * w) / np.sum(w))

    lower, upper = 1e-6, 1.0
    while score(upper) <= 0:
        upper *= 2.0
        if upper > 1e6:
            raise FitError("Gumbel score equation has no root: data too skewed to fit")
    while score(lower) >= 0:
        lower /= 10.0
        if lower < 1e-300:
            raise FitError("Gumbel score equation has no root near sigma = 0")
    sigma = optimize.brentq(score, lower, upper, xtol=1e-14, rtol=1e-14, maxiter=500)
    mu = y_min - sigma * math.log(float(np.mean(np.exp(-(y - y_min) / sigma))))
    return mu, sigma


def _hessian(f: Callable[[NDArray[np.float64]], float], theta: NDArray[np.float64],
             steps: NDArray[np.float64]) -> NDArray[np.float64]:
    """Hessian by central differences with one Richardson step (error O(h^4)).

    The steps are halved until every evaluation is finite (the support of the GEV moves with
    the parameters, so a step can leave it when xi < 0 and the upper end point nears the data).
    """

    def central(h: NDArray[np.float64]) -> NDArray[np.float64]:
        k = theta.size
        f0 = f(theta)
        out = np.empty((k, k))
        for i in range(k):
            ei = np.zeros(k)
            ei[i] = h[i]
            out[i, i] = (f(theta + ei) - 2 * f0 + f(theta - ei)) / h[i] ** 2
            for j in range(i):
                ej = np.zeros(k)
                ej[j] = h[j]
                out[i, j] = out[j, i] = (
                    f(theta + ei + ej) - f(theta + ei - ej) - f(theta - ei + ej) + f(theta - ei - ej)
                ) / (4 * h[i] * h[j])
        return out

    h = np.asarray(steps, dtype=float)
    for _ in range(30):
        coarse = central(h)
        fine = central(h / 2)
        if np.all(np.isfinite(coarse)) and np.all(np.isfinite(fine)):
            return (4 * fine - coarse) / 3
        h = h / 4
    raise FitError("numerical Hessian: log-likelihood not finite near the optimum")


def _finish(family: str, x: NDArray[np.float64], y: NDArray[np.float64], loc: float, scale: float,
            mu_s: float, sigma_s: float, xi: float, converged: bool, messages: list[str]) -> MleFit:
    """Back-transform a fit on standardised data, add the observed information and AIC."""
    n = x.size
    if family == "gumbel":
        theta = np.array([mu_s, sigma_s])

        def ll(t: NDArray[np.float64]) -> float:
            return -_nll(y, t[0], t[1], 0.0)

        steps = np.array([1e-3 * sigma_s, 1e-3 * sigma_s])
        jac = np.array([scale, scale])
    else:
        theta = np.array([mu_s, sigma_s, xi])

        def ll(t: NDArray[np.float64]) -> float:
            return -_nll(y, t[0], t[1], t[2])

        steps = np.array([1e-3 * sigma_s, 1e-3 * sigma_s, 1e-3])
        jac = np.array([scale, scale, 1.0])
    names = ("mu", "sigma") if family == "gumbel" else ("mu", "sigma", "xi")
    try:
        hess = _hessian(ll, theta, steps)
        chol = np.linalg.cholesky(-hess)
        cov_s = np.linalg.inv(chol).T @ np.linalg.inv(chol)
        cov = cov_s * np.outer(jac, jac)
        se = {name: float(math.sqrt(cov[i, i])) for i, name in enumerate(names)}
    except (np.linalg.LinAlgError, FitError) as exc:
        converged = False
        reason = str(exc) if isinstance(exc, FitError) else "observed information not positive definite"
        messages.append(f"{reason}: no standard errors")
        cov = np.full((len(names), len(names)), np.nan)
        se = {name: math.nan for name in names}
    loglik_value = -_nll(y, mu_s, sigma_s, xi) - n * math.log(scale)
    k = len(names)
    if family == "gev" and xi < -0.5:
        messages.append(f"xi = {xi:.3g} < -0.5: the MLE is not regular; standard errors unreliable")
    fit = MleFit(
        family=family,
        n=int(n),
        mu=float(loc + scale * mu_s),
        sigma=float(scale * sigma_s),
        xi=float(xi),
        se=se,
        cov=cov,
        loglik=float(loglik_value),
        aic=float(2 * k - 2 * loglik_value),
        converged=bool(converged),
        message="; ".join(messages),
    )
    if not fit.converged:
        log.warning("%s fit to %d maxima did not converge: %s", family, n, fit.message)
    return fit


def fit_gumbel(data: ArrayLike) -> MleFit:
    """Gumbel (xi = 0) MLE with standard errors; ``data`` are block maxima (1-D)."""
    x = _clean(data, "gumbel")
    y, loc, scale = _standardise(x)
    mu_s, sigma_s = _gumbel_mle_standardised(y)
    return _finish("gumbel", x, y, loc, scale, mu_s, sigma_s, 0.0, True, [])


def _nelder_mead(fun: Callable[[NDArray[np.float64]], float], start: NDArray[np.float64]):
    # vertices outside the support have f = inf; scipy's stopping test then computes inf - inf
    with np.errstate(invalid="ignore"):
        return optimize.minimize(
            fun, start, method="Nelder-Mead",
            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000, "maxfev": 40000, "adaptive": True},
        )


def _fit_gev_standardised(y: NDArray[np.float64]) -> tuple[float, float, float, bool, list[str]]:
    mu_g, sigma_g = _gumbel_mle_standardised(y)

    def objective(theta: NDArray[np.float64]) -> float:
        return _nll(y, theta[0], math.exp(theta[1]), theta[2])

    best = None
    for xi0 in (0.0, 0.1, -0.1, 0.3, -0.3):
        start = np.array([mu_g, math.log(sigma_g), xi0])
        if not math.isfinite(objective(start)):
            continue
        res = _nelder_mead(objective, start)
        if best is None or res.fun < best.fun:
            best = res
    if best is None or not math.isfinite(best.fun):
        raise FitError("GEV fit: no starting value gave a finite likelihood")
    polished = _nelder_mead(objective, best.x)
    final = polished if polished.fun <= best.fun else best
    messages: list[str] = []
    converged = bool(polished.success)
    if not polished.success:
        messages.append(f"optimiser: {polished.message}")
    mu_s, sigma_s, xi = float(final.x[0]), math.exp(final.x[1]), float(final.x[2])
    if xi < _XI_FLOOR + 1e-3:
        converged = False
        messages.append("xi reached -1, where the likelihood is unbounded")
    return mu_s, sigma_s, xi, converged, messages


def fit_gev(data: ArrayLike) -> MleFit:
    """GEV MLE with standard errors from the observed information; ``data`` are block maxima."""
    x = _clean(data, "gev")
    y, loc, scale = _standardise(x)
    mu_s, sigma_s, xi, converged, messages = _fit_gev_standardised(y)
    return _finish("gev", x, y, loc, scale, mu_s, sigma_s, xi, converged, messages)


def fit_mle(data: ArrayLike, family: str = "gev") -> MleFit:
    """Fit ``family`` ("gev" or "gumbel") by maximum likelihood."""
    if family == "gev":
        return fit_gev(data)
    if family == "gumbel":
        return fit_gumbel(data)
    raise InputError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")


def likelihood_ratio_test(data: ArrayLike) -> LikelihoodRatioTest:
    """Likelihood-ratio test of Gumbel (xi = 0) within the GEV (Coles 2001, §2.6.6)."""
    gumbel = fit_gumbel(data)
    full = fit_gev(data)
    deviance = 2.0 * (full.loglik - gumbel.loglik)
    if deviance < 0:
        if deviance < -1e-6:
            log.warning("GEV log-likelihood below Gumbel's by %.3g: GEV optimum not reached", -deviance)
        deviance = 0.0
    return LikelihoodRatioTest(gumbel, full, float(deviance), 1, float(stats.chi2.sf(deviance, 1)))


def return_level_delta(fit: MleFit, period: float) -> tuple[float, float]:
    """Return level for ``period`` blocks and its delta-method standard error (Coles §3.3.3)."""
    theta = np.array([fit.mu, fit.sigma, fit.xi][: fit.n_params])

    def level(t: NDArray[np.float64]) -> float:
        xi = t[2] if t.size == 3 else 0.0
        return float(gev.return_level(period, t[0], t[1], xi))

    steps = np.array([1e-6 * fit.sigma, 1e-6 * fit.sigma, 1e-6][: fit.n_params])
    grad = np.array([
        (level(theta + np.eye(theta.size)[i] * steps[i]) - level(theta - np.eye(theta.size)[i] * steps[i]))
        / (2 * steps[i])
        for i in range(theta.size)
    ])
    var = float(grad @ np.asarray(fit.cov) @ grad)
    return level(theta), math.sqrt(var) if var >= 0 else math.nan


class _Profile:
    """Profile log-likelihood of one parameter, maximised over the others with warm starts."""

    def __init__(self, fun: Callable[[float, NDArray[np.float64]], float], start: NDArray[np.float64]):
        self.fun = fun
        self.last = np.asarray(start, dtype=float)

    def __call__(self, value: float) -> float:
        res = _nelder_mead(lambda t: self.fun(value, t), self.last)
        if not math.isfinite(res.fun):
            return -math.inf
        self.last = res.x
        return -float(res.fun)


def _profile_interval(profile: _Profile, hat: float, ll_hat: float, step: float, level: float,
                      lower_bound: float = -math.inf) -> tuple[float, float]:
    """Both ends of ``{v: profile(v) >= ll_hat - chi2_1(level)/2}``; NaN where not bracketed."""
    target = ll_hat - 0.5 * float(stats.chi2.ppf(level, 1))
    start_state = profile.last.copy()
    ends = []
    for direction in (-1.0, 1.0):
        profile.last = start_state.copy()
        inner, outer = hat, None
        for j in range(1, 60):
            candidate = hat + direction * step * 0.5 * j
            if candidate <= lower_bound:
                break
            if profile(candidate) < target:
                outer = candidate
                break
            inner = candidate
        if outer is None:
            ends.append(math.nan)
            continue
        ends.append(optimize.brentq(lambda v: profile(v) - target, min(inner, outer),
                                    max(inner, outer), xtol=1e-7 * max(1.0, abs(hat))))
    return ends[0], ends[1]


def profile_loglik_xi(data: ArrayLike, xi_values: ArrayLike) -> NDArray[np.float64]:
    """Profile log-likelihood of xi: the GEV log-likelihood maximised over (mu, sigma)."""
    x = _clean(data, "gev")
    y, _loc, scale = _standardise(x)
    mu_g, sigma_g = _gumbel_mle_standardised(y)
    profile = _Profile(lambda xi, t: _nll(y, t[0], math.exp(t[1]), xi), np.array([mu_g, math.log(sigma_g)]))
    values = np.asarray(xi_values, dtype=float)
    order = np.argsort(np.abs(values))
    out = np.empty(values.shape)
    for idx in order:
        out.flat[idx] = profile(float(values.flat[idx])) - x.size * math.log(scale)
    return out


def profile_ci_xi(data: ArrayLike, fit: MleFit | None = None, level: float = 0.95) -> tuple[float, float]:
    """Profile-likelihood interval for xi of a GEV fit (Coles 2001, §2.6.6)."""
    x = _clean(data, "gev")
    fit = fit if fit is not None else fit_gev(x)
    if fit.family != "gev":
        raise InputError("a profile interval for xi needs a GEV fit")
    y, loc, scale = _standardise(x)
    start = np.array([(fit.mu - loc) / scale, math.log(fit.sigma / scale)])
    profile = _Profile(lambda xi, t: _nll(y, t[0], math.exp(t[1]), xi), start)
    ll_hat = fit.loglik + x.size * math.log(scale)
    step = fit.se["xi"] if math.isfinite(fit.se["xi"]) and fit.se["xi"] > 0 else 0.1
    return _profile_interval(profile, fit.xi, ll_hat, step, level, lower_bound=_XI_FLOOR)


def profile_ci_return_level(data: ArrayLike, fit: MleFit, period: float,
                            level: float = 0.95) -> tuple[float, float]:
    """Profile-likelihood interval for the ``period``-block return level (Coles 2001, §3.3.3).

    The location is eliminated through ``mu = z_p - sigma (y_p^(-xi) - 1)/xi``; the profile is
    maximised over ``sigma`` (and ``xi`` for a GEV fit).
    """
    x = _clean(data, fit.family)
    y, loc, scale = _standardise(x)
    if not period > 1:
        raise InputError(f"return period must be > 1 block; got {period:g}")
    u = -math.log(-math.log1p(-1.0 / period))
    z_hat, z_se = return_level_delta(fit, period)

    def mu_from(z: float, sigma: float, xi: float) -> float:
        return z - sigma * float(gev._expm1_div(np.asarray(u), np.asarray(xi)))

    if fit.family == "gumbel":
        def neg(z: float, t: NDArray[np.float64]) -> float:
            sigma = math.exp(t[0])
            return _nll(y, mu_from(z, sigma, 0.0), sigma, 0.0)

        start = np.array([math.log(fit.sigma / scale)])
    else:
        def neg(z: float, t: NDArray[np.float64]) -> float:
            sigma = math.exp(t[0])
            return _nll(y, mu_from(z, sigma, t[1]), sigma, t[1])

        start = np.array([math.log(fit.sigma / scale), fit.xi])
    profile = _Profile(neg, start)
    ll_hat = fit.loglik + x.size * math.log(scale)
    z_hat_s = (z_hat - loc) / scale
    step = z_se / scale if math.isfinite(z_se) and z_se > 0 else 0.1
    lo, hi = _profile_interval(profile, z_hat_s, ll_hat, step, level)
    return loc + scale * lo, loc + scale * hi
