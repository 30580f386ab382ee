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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize, stats

from evtsync.defaults import INTERVAL_LEVEL
from evtsync.errors import FitError, InputError
from evtsync.evt import gev

log = logging.getLogger("evtsync.evt.mle")

__all__ = [
    "FAMILIES",
    "LikelihoodRatioTest",
    "MleFit",
    "ProfileInterval",
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


#: Range of xi searched by the profile intervals, and allowed to the nuisance xi of the
#: return-level profile: above -1 (where the likelihood is unbounded, Smith 1985) and up to
#: max(XI_PROFILE_MAX, xi_hat + 1). With few maxima the GEV likelihood rises again at very
#: large xi (degenerate heavy-tailed fits that put a spike at the lowest maximum); that region
#: is outside every practical block-maxima model and is not searched.
XI_PROFILE_MAX = 2.0
#: how far (in Wald half-widths) the return-level search goes before calling a side open
_MAX_DOUBLINGS = 40


@dataclass(frozen=True)
class ProfileInterval:
    """A profile-likelihood interval ``{v: profile(v) >= max - chi2_1(level)/2}``, the connected
    part that holds the estimate.

    A side on which the profile never falls below the cut inside the searched range is
    *open*: its bound is ``-inf``/``+inf`` and ``open_below``/``open_above`` is True (small
    samples: the data do not bound the parameter). ``searched`` is the range examined and
    ``note`` says why a side is open or what else was found. Unpacks as ``lower, upper``.
    """

    parameter: str
    estimate: float
    level: float
    lower: float
    upper: float
    open_below: bool
    open_above: bool
    searched: tuple[float, float]
    note: str = ""

    def __iter__(self) -> Iterator[float]:
        """Tuple-like unpacking: ``lo, hi = interval``."""
        yield self.lower
        yield self.upper

    @property
    def closed(self) -> bool:
        """True when both ends were found."""
        return not (self.open_below or self.open_above)

    def describe(self, fmt: str = ".4g") -> str:
        """``[a, b]`` with an open side in words, e.g. ``[-0.628, open above (...)]``."""
        lo = (f"open below (no lower end down to {self.searched[0]:.4g})" if self.open_below
              else format(self.lower, fmt))
        hi = (f"open above (no upper end up to {self.searched[1]:.4g})" if self.open_above
              else format(self.upper, fmt))
        return f"[{lo}, {hi}]"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: open bounds are null, with the flags and the searched range."""
        return {
            "parameter": self.parameter,
            "estimate": self.estimate,
            "level": self.level,
            "lower": None if self.open_below else self.lower,
            "upper": None if self.open_above else self.upper,
            "open_below": self.open_below,
            "open_above": self.open_above,
            "searched": list(self.searched),
            "note": self.note,
        }


def _nll_fast(y: NDArray[np.float64], mu: float, log_sigma: float, xi: float) -> float:
    """Negative GEV log-likelihood of standardised data, for the inner profile optimisations
    (the same density as :func:`evtsync.evt.gev.logpdf`, without its argument checks)."""
    if not (xi > _XI_FLOOR) or not math.isfinite(mu) or not math.isfinite(log_sigma):
        return math.inf
    z = (y - mu) / math.exp(log_sigma)
    if abs(xi) < 1e-10:
        value = y.size * log_sigma + float(np.sum(z + np.exp(-z)))
    else:
        t = 1.0 + xi * z
        if float(np.min(t)) <= 0.0:
            return math.inf
        lt = np.log(t)
        value = y.size * log_sigma + float(np.sum((1.0 + 1.0 / xi) * lt + np.exp(-lt / xi)))
    return value if math.isfinite(value) else math.inf


def _inner_min(fun: Callable[[NDArray[np.float64]], float], start: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
    with np.errstate(invalid="ignore", over="ignore"):
        res = optimize.minimize(fun, start, method="Nelder-Mead",
                                options={"xatol": 1e-10, "fatol": 1e-12, "maxfev": 4000, "adaptive": True})
    return float(res.fun), np.asarray(res.x, dtype=float)


class _Profile:
    """Profile log-likelihood of one parameter: the log-likelihood maximised over the nuisance
    parameters by Nelder–Mead, warm-started from the nearest value already evaluated (made
    feasible by ``feasible``: the GEV support moves with the parameters)."""

    def __init__(self, neg: Callable[[float, NDArray[np.float64]], float], start: NDArray[np.float64],
                 at: float, feasible: Callable[[float, NDArray[np.float64]], NDArray[np.float64]]):
        self.neg = neg
        self.feasible = feasible
        self.points: dict[float, tuple[float, NDArray[np.float64]]] = {}
        self._seed = (at, np.asarray(start, dtype=float))

    def nuisance(self, value: float) -> NDArray[np.float64]:
        """Nuisance parameters at the evaluated value nearest to ``value``."""
        if not self.points:
            return self._seed[1]
        near = min(self.points, key=lambda v: abs(v - value))
        return self.points[near][1]

    def __call__(self, value: float) -> float:
        if value in self.points:
            return self.points[value][0]
        start = self.feasible(value, self.nuisance(value).copy())
        fun, theta = _inner_min(lambda t: self.neg(value, t), start)
        ll = -fun if math.isfinite(fun) else -math.inf
        self.points[value] = (ll, theta)
        return ll


def _profile_interval(profile: _Profile, parameter: str, hat: float, ll_hat: float, half_width: float,
                      level: float, bounds: tuple[float, float], *, max_doublings: int = _MAX_DOUBLINGS,
                      open_at_bound: str = "") -> ProfileInterval:
    """Both ends of the profile interval: bracket each side starting at the Wald end
    ``hat -+ half_width`` (doubling the distance while the profile stays above the cut, up to
    ``bounds``), then solve ``profile(v) = cut`` by Brent's method."""
    target = ll_hat - 0.5 * float(stats.chi2.ppf(level, 1))
    profile.points.setdefault(hat, (ll_hat, profile.nuisance(hat)))
    ends: list[float] = []
    opened: list[bool] = []
    width = half_width if math.isfinite(half_width) and half_width > 0 else 0.1 * max(1.0, abs(hat))
    for direction, bound in ((-1.0, bounds[0]), (1.0, bounds[1])):
        inner, outer = hat, None
        distance = width
        for _ in range(max_doublings + 1):
            candidate = hat + direction * distance
            at_bound = (candidate - bound) * direction >= 0
            if at_bound:
                candidate = bound
            if profile(candidate) < target:
                outer = candidate
                break
            inner = candidate
            if at_bound:
                break
            distance *= 2.0
        if outer is None:
            ends.append(direction * math.inf)
            opened.append(True)
            continue
        root = optimize.brentq(lambda v: profile(v) - target, min(inner, outer), max(inner, outer),
                               xtol=1e-9 * max(1.0, abs(hat)), rtol=1e-12, maxiter=200)
        ends.append(float(root))
        opened.append(False)
    searched = (min(profile.points), max(profile.points))
    notes = []
    higher = [v for v, (ll, _) in profile.points.items() if ll > ll_hat + 1e-6]
    if higher:
        notes.append(f"the profile exceeds the fit's log-likelihood at {parameter} = {higher[0]:.4g}: the fit "
                     "is not the global maximum")
    for side, is_open in (("below", opened[0]), ("above", opened[1])):
        if is_open:
            notes.append(f"open {side}: the {level:.0%} profile stays above its cut down to "
                         f"{searched[0]:.4g}" if side == "below" else
                         f"open {side}: the {level:.0%} profile stays above its cut up to {searched[1]:.4g}")
    if open_at_bound and any(opened):
        notes.append(open_at_bound)
    return ProfileInterval(parameter=parameter, estimate=float(hat), level=float(level), lower=ends[0],
                           upper=ends[1], open_below=opened[0], open_above=opened[1],
                           searched=(float(searched[0]), float(searched[1])), note="; ".join(notes))


def _xi_bounds(xi_hat: float) -> tuple[float, float]:
    return _XI_FLOOR + 1e-6, max(XI_PROFILE_MAX, xi_hat + 1.0)


def _xi_profile(y: NDArray[np.float64], start: NDArray[np.float64], at: float) -> _Profile:
    def feasible(xi: float, t: NDArray[np.float64]) -> NDArray[np.float64]:
        # 1 + xi (y - mu)/sigma > 0 for every y: widen sigma if the warm start violates it
        need = float(np.max(-xi * (y - t[0])))
        if need >= math.exp(t[1]):
            t[1] = math.log(1.5 * need)
        return t

    return _Profile(lambda xi, t: _nll_fast(y, t[0], t[1], xi), start, at, feasible)


def profile_loglik_xi(data: ArrayLike, xi_values: ArrayLike) -> NDArray[np.float64]:
    """Profile log-likelihood of xi: the GEV log-likelihood maximised over (mu, sigma)."""
    x = _clean(data, "gev")
    fit = fit_gev(x)
    y, loc, scale = _standardise(x)
    profile = _xi_profile(y, np.array([(fit.mu - loc) / scale, math.log(fit.sigma / scale)]), fit.xi)
    values = np.asarray(xi_values, dtype=float)
    out = np.empty(values.shape)
    for idx in np.argsort(np.abs(values - fit.xi), axis=None):  # outward from the fit: warm starts
        out.flat[idx] = profile(float(values.flat[idx])) - x.size * math.log(scale)
    return out


def profile_ci_xi(data: ArrayLike, fit: MleFit | None = None, level: float = INTERVAL_LEVEL) -> ProfileInterval:
    """Profile-likelihood interval for xi of a GEV fit (Coles 2001, §2.6.6).

    Bracketed from the Wald interval and solved by Brent's method on the profile; a side the
    profile does not bound within ``(-1, max(XI_PROFILE_MAX, xi_hat + 1)]`` is open (see
    :class:`ProfileInterval`). Unpacks as ``lower, upper``.
    """
    x = _clean(data, "gev")
    fit = fit if fit is not None else fit_gev(x)
    if fit.family != "gev":
        raise InputError("a profile interval for xi needs a GEV fit")
    y, loc, scale = _standardise(x)
    profile = _xi_profile(y, np.array([(fit.mu - loc) / scale, math.log(fit.sigma / scale)]), fit.xi)
    ll_hat = fit.loglik + x.size * math.log(scale)
    z = math.sqrt(float(stats.chi2.ppf(level, 1)))
    se = fit.se["xi"]
    lo_b, hi_b = _xi_bounds(fit.xi)
    return _profile_interval(profile, "xi", fit.xi, ll_hat, z * se, level, (lo_b, hi_b), max_doublings=12,
                             open_at_bound=f"xi is searched in ({_XI_FLOOR:g}, {hi_b:g}]: below -1 the "
                             "likelihood is unbounded; above, only degenerate fits of few maxima")


def profile_ci_return_level(data: ArrayLike, fit: MleFit, period: float,
                            level: float = INTERVAL_LEVEL) -> ProfileInterval:
    """Profile-likelihood interval for the ``period``-block return level (Coles 2001, §3.3.3).

    The location is eliminated through ``mu = z_p - sigma (y_p^(-xi) - 1)/xi``; the profile is
    maximised over ``sigma`` (and ``xi`` in ``(-1, max(XI_PROFILE_MAX, xi_hat + 1)]`` for a
    GEV fit). An end reached only because the nuisance xi sits at that search limit is
    reported as open. Unpacks as ``lower, upper``.
    """
    x = _clean(data, fit.family)
    y, loc, scale = _standardise(x)
    if not period > 1:
        raise InputError(f"return period must be > 1 block; got {period:g}")
    u = -math.log(-math.log1p(-1.0 / period))
    z_hat, z_se = return_level_delta(fit, period)
    _, xi_max = _xi_bounds(fit.xi)

    def c_of(xi: float) -> float:
        return u if xi == 0 else math.expm1(xi * u) / xi

    def neg_gev(z: float, t: NDArray[np.float64]) -> float:
        if not t[1] <= xi_max:
            return math.inf
        return _nll_fast(y, z - math.exp(t[0]) * c_of(t[1]), t[0], t[1])

    def neg_gumbel(z: float, t: NDArray[np.float64]) -> float:
        return _nll_fast(y, z - math.exp(t[0]) * u, t[0], 0.0)

    def feasible(z: float, t: NDArray[np.float64]) -> NDArray[np.float64]:
        # t_i = exp(xi u) + xi (y_i - z)/sigma > 0: widen sigma if the warm start violates it
        xi = float(t[1]) if t.size == 2 else 0.0
        need = float(np.max(-xi * (y - z))) * math.exp(-xi * u)
        if need >= math.exp(t[0]):
            t[0] = math.log(1.5 * need)
        return t

    if fit.family == "gumbel":
        profile = _Profile(neg_gumbel, np.array([math.log(fit.sigma / scale)]), 0.0, feasible)
    else:
        profile = _Profile(neg_gev, np.array([math.log(fit.sigma / scale), fit.xi]), 0.0, feasible)
    ll_hat = fit.loglik + x.size * math.log(scale)
    z_hat_s = (z_hat - loc) / scale
    profile._seed = (z_hat_s, profile._seed[1])
    zq = math.sqrt(float(stats.chi2.ppf(level, 1)))
    half = zq * z_se / scale if math.isfinite(z_se) and z_se > 0 else 0.1
    limit = half * 2.0**_MAX_DOUBLINGS
    res = _profile_interval(profile, f"{period:g}-block return level", z_hat_s, ll_hat, half, level,
                            (z_hat_s - limit, z_hat_s + limit))
    lower, upper = res.lower, res.upper
    open_below, open_above = res.open_below, res.open_above
    notes = [res.note] if res.note else []
    if fit.family == "gev":  # an end set by the xi search limit is not an end the data give
        for side, end in (("below", lower), ("above", upper)):
            if math.isfinite(end) and float(profile.nuisance(end)[1]) >= xi_max - 1e-3:
                notes.append(f"open {side}: the profile reaches its cut only where the nuisance xi hits its "
                             f"search limit {xi_max:g}")
                if side == "below":
                    lower, open_below = -math.inf, True
                else:
                    upper, open_above = math.inf, True
    return ProfileInterval(parameter=res.parameter, estimate=float(z_hat), level=res.level,
                           lower=loc + scale * lower, upper=loc + scale * upper, open_below=open_below,
                           open_above=open_above, searched=(loc + scale * res.searched[0], loc + scale * res.searched[1]),
                           note="; ".join(notes))
