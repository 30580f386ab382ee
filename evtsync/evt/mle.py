"""Maximum-likelihood fits of the Gumbel and GEV distributions, the paper's baseline (methodology §6).

What is computed, in Coles' (2001) notation, chapter 3:

- the MLE of ``(mu, sigma, xi)`` (GEV) or ``(mu, sigma)`` (Gumbel, xi = 0);
- standard errors and the covariance from the observed information, the inverse of the
  analytic Hessian of the negative log-likelihood at the optimum;
- profile-likelihood intervals for xi and for return levels (Coles §2.6.6, §3.3.3): the
  values of the parameter whose profile log-likelihood lies within ``chi2_1(level)/2`` of the
  maximum;
- AIC = 2 k - 2 loglik and the likelihood-ratio test of Gumbel (xi = 0) against GEV, with
  deviance ``2 (l_GEV - l_Gumbel)`` referred to chi2 with 1 degree of freedom.

One engine does all of it (issue 30): Newton's method with the analytic gradient and Hessian
of the GEV log-likelihood (:func:`_nll_derivs`; the terms in ``log1p(xi t)/xi`` and its
derivatives in xi come from :func:`evtsync.evt.gev.log1p_ratio`, series near xi = 0), on data
standardised to mean 0 and sd 1, started from the L-moment estimates (Hosking, Wallis & Wood
1985). Convergence is judged at the end point, never by a count of evaluations: the Hessian is
positive definite and the Newton decrement ``sqrt(g' H^-1 g)`` -- the distance to the optimum in
standard-error units -- is at most :data:`CONVERGED_DECREMENT` (with the shape's bounds as an
active set: the KKT conditions). The Gumbel fit is the same likelihood with xi held at 0,
warm-started from the GEV optimum for the likelihood-ratio test. A profile interval maximises
over the nuisance parameters with the same Newton method, warm-started from the nearest point
already on the profile, and finds each end by Newton steps on the profile (its slope is the
partial derivative at the inner optimum) inside a bracket. Return levels reparametrise the
location (``mu = z_p - sigma c(xi)``) with the analytic chain rule.

The likelihood is unbounded for xi < -1 (Smith 1985): the search keeps xi > -1 and a fit that
reaches that edge is flagged (``boundary``, not converged), as are its intervals. Standard errors
are only asymptotically valid for xi > -0.5; a fit below that is flagged in its message. The
models of :mod:`evtsync.evt.model` start their samplers from this engine's per-cell fits.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from evtsync.core.defaults import INTERVAL_LEVEL
from evtsync.core.errors import FitError, InputError
from evtsync.evt import gev

log = logging.getLogger("evtsync.evt.mle")


def chi2_1_quantile(level: float) -> float:
    """The ``level`` quantile of chi2 with 1 degree of freedom, the square of the normal's
    ``(1 + level)/2`` quantile (standard library: ``fit --mle`` needs no ``scipy.stats``)."""
    return NormalDist().inv_cdf(0.5 + 0.5 * level) ** 2


def chi2_1_sf(deviance: float) -> float:
    """Upper tail of chi2 with 1 degree of freedom: ``erfc(sqrt(d/2))``."""
    return math.erfc(math.sqrt(max(deviance, 0.0) / 2.0))

__all__ = [
    "FAMILIES",
    "LikelihoodRatioTest",
    "MleFit",
    "ProfileInterval",
    "fit_gev",
    "fit_gumbel",
    "fit_mle",
    "likelihood_ratio_test",
    "CONVERGED_DECREMENT",
    "lmoment_start",
    "location_scale_at_xi",
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
    ``converged`` is False when the end point of the optimiser is not an optimum (its Newton
    decrement, ``decrement``, above :data:`CONVERGED_DECREMENT` standard errors, or the observed
    information not positive definite) or the fit ended on the ``xi = -1`` boundary
    (``boundary``); ``message`` says which. ``newton_steps`` is the number of steps taken.
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
    boundary: bool = False
    decrement: float = math.nan
    newton_steps: int = 0

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
            "boundary": self.boundary,
            "newton_decrement": self.decrement,
            "newton_steps": self.newton_steps,
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


# ---------------------------------------------------------------------------------------------
# The negative log-likelihood with its analytic gradient and Hessian.
#
# Per observation, with t = (y - mu)/sigma, s = 1 + xi t, L = log1p(xi t)/xi, E = exp(-L),
# A = dL/dxi, B = d2L/dxi2 (series near xi t = 0: evtsync.evt.gev.log1p_ratio), the log density
# is l = -log sigma + g(t, xi) with g = -(1 + xi) L - E, and
#   g_t   = (E - 1 - xi)/s                      g_xi  = -L + A (E - 1 - xi)
#   g_tt  = (1 + xi)(xi - E)/s^2                g_txi = -(E A + 1)/s - (E - 1 - xi) t/s^2
#   g_xixi = -2 A + B (E - 1 - xi) - E A^2
# and, by dt/dmu = -1/sigma, dt/dsigma = -t/sigma:
#   l_mu = -g_t/sigma, l_sigma = -(1 + g_t t)/sigma, l_xi = g_xi,
#   l_mumu = g_tt/sigma^2, l_musigma = (g_t + g_tt t)/sigma^2, l_sigmasigma = (1 + g_tt t^2 + 2 g_t t)/sigma^2,
#   l_muxi = -g_txi/sigma, l_sigmaxi = -g_txi t/sigma, l_xixi = g_xixi.
# ---------------------------------------------------------------------------------------------

Derivs = tuple[float, NDArray[np.float64] | None, NDArray[np.float64] | None]


def _nll_derivs(y: NDArray[np.float64], mu: float, sigma: float, xi: float, order: int = 2) -> Derivs:
    """Negative log-likelihood of ``y`` under GEV(mu, sigma, xi) and, for ``order`` >= 1 / 2, its
    gradient and Hessian in (mu, sigma, xi); ``inf`` (and None) outside the support."""
    if not (sigma > 0) or not math.isfinite(mu) or not math.isfinite(sigma) or not math.isfinite(xi):
        return math.inf, None, None
    t = (y - mu) / sigma
    s = 1.0 + xi * t
    if not float(np.min(s)) > 0.0:
        return math.inf, None, None
    with np.errstate(over="ignore", invalid="ignore"):
        parts = gev.log1p_ratio(t, xi, order)
        big_l = parts[0]
        e = np.exp(-big_l)
        n = y.size
        value = n * math.log(sigma) + float(np.sum((1.0 + xi) * big_l + e))
    if not math.isfinite(value):
        return math.inf, None, None
    if order == 0:
        return value, None, None
    a = parts[1]
    r = 1.0 / s
    q = e - 1.0 - xi
    g_t = q * r
    g_x = a * q - big_l
    s_gt, s_gtt_t = float(np.sum(g_t)), float(np.sum(g_t * t))
    grad_ll = np.array([-s_gt / sigma, -(n + s_gtt_t) / sigma, float(np.sum(g_x))])
    if order == 1:
        return value, -grad_ll, None
    b = parts[2]
    g_tt = (1.0 + xi) * (xi - e) * r * r
    g_tx = -(e * a + 1.0) * r - q * t * r * r
    g_xx = -2.0 * a + b * q - e * a * a
    g_tt_t = g_tt * t
    h = np.empty((3, 3))
    h[0, 0] = float(np.sum(g_tt)) / sigma**2
    h[0, 1] = h[1, 0] = (s_gt + float(np.sum(g_tt_t))) / sigma**2
    h[1, 1] = (n + float(np.sum(g_tt_t * t)) + 2.0 * s_gtt_t) / sigma**2
    h[0, 2] = h[2, 0] = -float(np.sum(g_tx)) / sigma
    h[1, 2] = h[2, 1] = -float(np.sum(g_tx * t)) / sigma
    h[2, 2] = float(np.sum(g_xx))
    return value, -grad_ll, -h


#: Newton decrement sqrt(g' H^-1 g) -- the distance of a point to the optimum in standard-error
#: units -- at or below which a point is an optimum (with a positive definite Hessian).
CONVERGED_DECREMENT = 1e-6
#: the iteration stops once the decrement is below this, or below CONVERGED_DECREMENT and no
#: longer halving from one step to the next (rounding of the sums over the data sets its floor).
_STOP_DECREMENT = 1e-9
#: a safety net against a cycle: the verdict never depends on it (it is judged at the end point)
_MAX_NEWTON_STEPS = 500


@dataclass
class _Optimum:
    """End point of :func:`_newton` with the evidence that it is (or is not) the optimum."""

    x: NDArray[np.float64]
    f: float
    grad: NDArray[np.float64]
    hess: NDArray[np.float64]
    extra: float
    decrement: float
    positive_definite: bool
    steps: int
    converged: bool
    at_boundary: bool
    message: str


Objective = Callable[[NDArray[np.float64], int], tuple[float, Any, Any, float]]


def _newton(fun: Objective, x0: ArrayLike, lower: ArrayLike, upper: ArrayLike,
            boundary: tuple[int, float] | None = None) -> _Optimum:
    """Minimise ``fun`` (value, gradient, Hessian, extra) from ``x0`` within the box bounds by a
    projected Newton method: bound variables whose gradient pushes outward are held (active set),
    the Hessian of the free ones is made positive definite by taking its eigenvalues' absolute
    values, and a backtracking line search keeps every point inside the support (``fun`` is
    ``inf`` outside) with an Armijo decrease. The verdict is judged at the end point: converged
    when the Hessian of the free variables is positive definite and the Newton decrement is at
    most :data:`CONVERGED_DECREMENT` (the KKT conditions of the box). ``boundary = (i, v)``
    stops the search once ``x[i] <= v`` with the gradient pushing it lower (the xi = -1 edge of
    the GEV likelihood)."""
    x = np.asarray(x0, dtype=float).copy()
    lo, hi = np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)
    x = np.clip(x, lo, hi)
    f, g, h, extra = fun(x, 2)
    if not math.isfinite(f) or g is None:
        raise FitError("the starting point is outside the support of the likelihood")
    steps, stalled, at_boundary = 0, False, False
    previous = math.inf
    while True:
        active = ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0))
        free = ~active
        gf = g[free]
        hf = h[np.ix_(free, free)]
        if not (np.all(np.isfinite(hf)) and np.all(np.isfinite(gf))):
            stalled = True
            break
        w, v = np.linalg.eigh(hf) if gf.size else (np.zeros(0), np.zeros((0, 0)))
        pd = bool(np.all(w > 0))
        w_mod = np.maximum(np.abs(w), 1e-12 * max(float(np.max(np.abs(w))) if w.size else 1.0, 1e-300))
        proj = v.T @ gf
        decrement = float(math.sqrt(max(float(np.sum(proj * proj / w_mod)), 0.0)))
        if pd and (decrement <= _STOP_DECREMENT or (decrement <= CONVERGED_DECREMENT and decrement > 0.5 * previous)):
            break
        previous = decrement
        if boundary is not None and x[boundary[0]] <= boundary[1] and g[boundary[0]] > 0:
            at_boundary = True
            break
        if steps >= _MAX_NEWTON_STEPS:
            break
        d = np.zeros_like(x)
        d[free] = -(v @ (proj / w_mod))
        quadratic = pd and decrement < 1e-3
        alpha, accepted = 1.0, False
        while alpha > 1e-14:
            xn = np.clip(x + alpha * d, lo, hi)
            if alpha == 1.0:
                fn, gn, hn, en = fun(xn, 2)
            else:
                fn, gn, hn, en = fun(xn, 0)
            if math.isfinite(fn) and (fn <= f + 1e-4 * float(g @ (xn - x))
                                      or (quadratic and alpha == 1.0 and fn <= f + 1e-12 * max(1.0, abs(f)))):
                accepted = True
                break
            alpha *= 0.5
        if not accepted:
            stalled = True
            break
        if gn is None:
            fn, gn, hn, en = fun(xn, 2)
        x, f, g, h, extra = xn, fn, gn, hn, en
        steps += 1
    active = ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0))
    free = ~active
    hf, gf = h[np.ix_(free, free)], g[free]
    try:
        w = np.linalg.eigvalsh(hf) if gf.size else np.ones(1)
        pd = bool(np.all(np.isfinite(hf))) and bool(np.all(w > 0))
        decrement = float(math.sqrt(max(float(gf @ np.linalg.solve(hf, gf)), 0.0))) if pd and gf.size else (
            0.0 if not gf.size else math.inf)
    except np.linalg.LinAlgError:
        pd, decrement = False, math.inf
    converged = pd and decrement <= CONVERGED_DECREMENT and not at_boundary
    if converged:
        message = ""
    elif at_boundary:
        message = "xi reached -1, where the likelihood is unbounded (Smith 1985): no regular maximum"
    elif not pd:
        message = f"the observed information is not positive definite at the end point (after {steps} Newton steps)"
    else:
        why = "no step decreased the likelihood further" if stalled else f"stopped after {steps} Newton steps"
        message = f"{why}; the gradient is still {decrement:.2g} standard errors from zero"
    return _Optimum(x=x, f=float(f), grad=g, hess=h, extra=float(extra), decrement=decrement, positive_definite=pd,
                    steps=steps, converged=converged, at_boundary=at_boundary, message=message)


def _objective_full(y: NDArray[np.float64]) -> Objective:
    """(mu, sigma, xi) -> negative log-likelihood and its derivatives."""
    def fun(x: NDArray[np.float64], order: int) -> tuple[float, Any, Any, float]:
        f, g, h = _nll_derivs(y, x[0], x[1], x[2], order)
        return f, g, h, 0.0
    return fun


def _objective_at_xi(y: NDArray[np.float64], xi: float) -> Objective:
    """(mu, sigma) at fixed xi; the extra value is d nll / d xi (the profile's slope)."""
    def fun(x: NDArray[np.float64], order: int) -> tuple[float, Any, Any, float]:
        f, g, h = _nll_derivs(y, x[0], x[1], xi, order)
        if g is None:
            return f, None, None, math.nan
        return f, g[:2], (h[:2, :2] if h is not None else None), float(g[2])
    return fun


def _objective_at_level(y: NDArray[np.float64], z: float, u: float, gumbel: bool) -> Objective:
    """(sigma, xi) -- (sigma) for a Gumbel fit -- at fixed return level ``z`` (standardised),
    the location eliminated by ``mu = z - sigma c(xi)``, ``c = expm1(xi u)/xi``; the extra value
    is d nll / d z."""
    def fun(x: NDArray[np.float64], order: int) -> tuple[float, Any, Any, float]:
        sigma = float(x[0])
        xi = 0.0 if gumbel else float(x[1])
        c = [float(v) for v in gev.expm1_ratio(u, xi, order)]
        f, g, h = _nll_derivs(y, z - sigma * c[0], sigma, xi, order)
        if g is None:
            return f, None, None, math.nan
        jac = np.array([[1.0, -c[0], -sigma * c[1] if order else 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
        g_phi = jac.T @ g
        h_phi = None
        if h is not None:
            h_phi = jac.T @ h @ jac
            h_phi[1, 2] -= g[0] * c[1]
            h_phi[2, 1] -= g[0] * c[1]
            h_phi[2, 2] -= g[0] * sigma * c[2]
        k = 2 if gumbel else 3
        return f, g_phi[1:k], (h_phi[1:k, 1:k] if h_phi is not None else None), float(g_phi[0])
    return fun


def _make_feasible(y: NDArray[np.float64], mu: float, sigma: float, xi: float) -> float:
    """sigma, widened if needed so that every y is inside the support (1 + xi (y - mu)/sigma > 0)."""
    need = float(np.max(-xi * (y - mu)))
    return max(sigma, 1.5 * need) if need > 0 and need >= sigma else sigma


def lmoment_start(y: ArrayLike) -> tuple[float, float, float]:
    """GEV (mu, sigma, xi) from the sample L-moments (Hosking, Wallis & Wood 1985), the starting
    point of the MLE; xi is clipped to [-0.9, 0.9] (where the formulas hold)."""
    x = np.sort(np.asarray(y, dtype=float))
    n = x.size
    j = np.arange(n, dtype=float)
    b0 = float(np.mean(x))
    b1 = float(np.sum(j * x)) / (n * (n - 1))
    b2 = float(np.sum(j * (j - 1) * x)) / (n * (n - 1) * (n - 2)) if n > 2 else b1
    l1, l2, l3 = b0, 2 * b1 - b0, 6 * b2 - 6 * b1 + b0
    if not l2 > 0:
        return b0, max(float(np.std(x)), 1e-12), 0.0
    c = 2.0 / (3.0 + l3 / l2) - math.log(2.0) / math.log(3.0)
    k = float(np.clip(7.8590 * c + 2.9554 * c * c, -0.9, 0.9))
    if abs(k) < 1e-6:
        sigma = l2 / math.log(2.0)
        return l1 - gev.EULER_GAMMA * sigma, sigma, 0.0
    g = math.gamma(1.0 + k)
    sigma = l2 * k / ((1.0 - 2.0 ** (-k)) * g)
    return l1 - sigma * (1.0 - g) / k, sigma, -k


def _gumbel_start(y: NDArray[np.float64]) -> tuple[float, float]:
    sigma = float(np.std(y)) * math.sqrt(6.0) / math.pi
    return float(np.mean(y)) - gev.EULER_GAMMA * sigma, sigma


_XI_SEARCH_FLOOR = _XI_FLOOR + 1e-6
_XI_BOUNDARY = _XI_FLOOR + 1e-3
_FULL_LOWER = (-math.inf, -math.inf, _XI_SEARCH_FLOOR)
_FULL_UPPER = (math.inf, math.inf, math.inf)


def _fit_gev_standardised(y: NDArray[np.float64], start: tuple[float, float, float] | None) -> _Optimum:
    """The GEV optimum of standardised data: from ``start`` if given, else from the L-moment
    start; when that end point is not an optimum, from the Gumbel fit at several shapes, keeping
    the best optimum (the message says when the given start failed and why)."""
    fun = _objective_full(y)
    tried: list[tuple[str, _Optimum]] = []
    first = start if start is not None else lmoment_start(y)
    candidates = [("the given start" if start is not None else "the L-moment start", first)]
    mu_g, sigma_g = _gumbel_start(y)
    candidates += [(f"the Gumbel start with xi = {xi0:g}", (mu_g, sigma_g, xi0)) for xi0 in (0.0, 0.2, -0.2, 0.5)]
    for label, (mu0, sigma0, xi0) in candidates:
        xi0 = max(float(xi0), _XI_BOUNDARY + 0.05)
        sigma0 = _make_feasible(y, mu0, sigma0, xi0)
        try:
            opt = _newton(fun, (mu0, sigma0, xi0), _FULL_LOWER, _FULL_UPPER, boundary=(2, _XI_BOUNDARY))
        except FitError:
            continue
        tried.append((label, opt))
        if opt.converged:
            break
    if not tried:
        raise FitError("GEV fit: no starting value gave a finite likelihood")
    # an optimum, or the xi = -1 edge where the likelihood is higher still; else the best end point
    good = [o for _, o in tried if o.converged or o.at_boundary]
    best = min(good or [o for _, o in tried], key=lambda o: o.f)
    first_label, first_opt = tried[0]
    if best is not first_opt and start is not None:
        log.info("GEV fit from %s did not converge (%s); converged from another start", first_label,
                 first_opt.message)
        best.message = "; ".join(m for m in (best.message, f"{first_label} did not converge ({first_opt.message}); "
                                             "the optimum was reached from another start") if m)
    return best


def _finish(family: str, x: NDArray[np.float64], loc: float, scale: float, opt: _Optimum,
            messages: list[str]) -> MleFit:
    """Back-transform a fit of standardised data; covariance = inverse observed information."""
    n = x.size
    names = ("mu", "sigma") if family == "gumbel" else ("mu", "sigma", "xi")
    k = len(names)
    theta = opt.x
    xi = 0.0 if family == "gumbel" else float(theta[2])
    converged = opt.converged
    if opt.message:
        messages.insert(0, opt.message)
    try:
        chol = np.linalg.cholesky(opt.hess[:k, :k])
        inv = np.linalg.inv(chol)
        jac = np.array([scale, scale, 1.0])[:k]
        cov = (inv.T @ inv) * np.outer(jac, jac)
        se = {name: float(math.sqrt(cov[i, i])) for i, name in enumerate(names)}
    except np.linalg.LinAlgError:
        converged = False
        if not opt.message:
            messages.append("observed information not positive definite: no standard errors")
        cov = np.full((k, k), np.nan)
        se = {name: math.nan for name in names}
    loglik_value = -opt.f - n * math.log(scale)
    if family == "gev" and -1 < xi < -0.5 and not opt.at_boundary:
        messages.append(f"xi = {xi:.3g} < -0.5: the MLE is not regular; standard errors unreliable")
    fit = MleFit(family=family, n=int(n), mu=float(loc + scale * theta[0]), sigma=float(scale * theta[1]), xi=xi,
                 se=se, cov=cov, loglik=float(loglik_value), aic=float(2 * k - 2 * loglik_value),
                 converged=bool(converged), message="; ".join(messages), boundary=bool(opt.at_boundary),
                 decrement=float(opt.decrement), newton_steps=int(opt.steps))
    if not fit.converged:
        log.warning("%s fit to %d maxima did not converge: %s", family, n, fit.message)
    return fit


def _check_start(start: Sequence[float] | MleFit | None, loc: float, scale: float,
                 family: str) -> tuple[float, float, float] | None:
    """A user's start (mu, sigma[, xi]) or a fit, on the standardised scale; InputError if unusable."""
    if start is None:
        return None
    values = (start.mu, start.sigma, start.xi) if isinstance(start, MleFit) else tuple(float(v) for v in start)
    if len(values) == 2:
        values = (*values, 0.0)
    if len(values) != 3 or not all(math.isfinite(v) for v in values):
        raise InputError(f"start must be finite (mu, sigma, xi); got {start!r}")
    mu0, sigma0, xi0 = values
    if not sigma0 > 0:
        raise InputError(f"start: sigma must be > 0; got {sigma0:g}")
    if family == "gev" and not xi0 > _XI_FLOOR:
        raise InputError(f"start: xi must be > -1 (the likelihood is unbounded below); got {xi0:g}")
    return (mu0 - loc) / scale, sigma0 / scale, xi0


def fit_gumbel(data: ArrayLike, start: Sequence[float] | MleFit | None = None) -> MleFit:
    """Gumbel (xi = 0) MLE with standard errors; ``data`` are block maxima (1-D).

    The constrained fit of the GEV engine (xi held at 0), Newton from ``start`` (mu, sigma) --
    e.g. a GEV fit, as the likelihood-ratio test does -- or from the moment estimates.
    """
    x = _clean(data, "gumbel")
    y, loc, scale = _standardise(x)
    begin = _check_start(start, loc, scale, "gumbel")
    mu0, sigma0 = (begin[0], begin[1]) if begin is not None else _gumbel_start(y)
    opt = _newton(_objective_at_xi(y, 0.0), (mu0, sigma0), (-math.inf, -math.inf), (math.inf, math.inf))
    if not opt.converged and begin is not None:
        retry = _newton(_objective_at_xi(y, 0.0), _gumbel_start(y), (-math.inf, -math.inf), (math.inf, math.inf))
        if retry.converged:
            opt = retry
    return _finish("gumbel", x, loc, scale, opt, [])


def fit_gev(data: ArrayLike, start: Sequence[float] | MleFit | None = None) -> MleFit:
    """GEV MLE with standard errors from the observed information; ``data`` are block maxima.

    Newton's method on the analytic gradient and Hessian from the L-moment estimates (or from
    ``start`` = (mu, sigma, xi)); converged when the end point satisfies the optimality
    conditions (see :func:`_newton`), whatever the number of steps it took. A fit that reaches
    xi = -1 is flagged (``boundary``, not converged).
    """
    x = _clean(data, "gev")
    y, loc, scale = _standardise(x)
    opt = _fit_gev_standardised(y, _check_start(start, loc, scale, "gev"))
    return _finish("gev", x, loc, scale, opt, [])


def location_scale_at_xi(data: ArrayLike, xi: float) -> tuple[float, float, bool]:
    """MLE of (mu, sigma) with the shape held at ``xi`` (a point of the profile likelihood of xi):
    ``(mu, sigma, converged)``."""
    x = _clean(data, "gumbel")
    y, loc, scale = _standardise(x)
    mu0, sigma0 = _gumbel_start(y)
    opt = _newton(_objective_at_xi(y, float(xi)), (mu0, _make_feasible(y, mu0, sigma0, float(xi))),
                  (-math.inf, -math.inf), (math.inf, math.inf))
    return float(loc + scale * opt.x[0]), float(scale * opt.x[1]), bool(opt.converged)


def fit_mle(data: ArrayLike, family: str = "gev") -> MleFit:
    """Fit ``family`` ("gev" or "gumbel") by maximum likelihood.

    Parameters
    ----------
    data : array-like
        The block maxima (z-scores).
    family : {"gev", "gumbel"}, default "gev"
        The distribution family.

    Returns
    -------
    MleFit
        Estimates, standard errors and covariance, log-likelihood, AIC and ``converged`` (with
        ``message`` saying why not).

    Raises
    ------
    InputError
        An unknown ``family``, NaN or infinite values, or too few block maxima.
    """
    if family == "gev":
        return fit_gev(data)
    if family == "gumbel":
        return fit_gumbel(data)
    raise InputError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")


def likelihood_ratio_test(data: ArrayLike, gev_fit: MleFit | None = None) -> LikelihoodRatioTest:
    """Likelihood-ratio test of Gumbel (xi = 0) within the GEV (Coles 2001, §2.6.6).

    The Gumbel fit is the GEV likelihood constrained to xi = 0, warm-started from the GEV fit
    (``gev_fit``, fitted here when not given).
    """
    full = gev_fit if gev_fit is not None else fit_gev(data)
    gumbel = fit_gumbel(data, start=full if full.converged else None)
    deviance = 2.0 * (full.loglik - gumbel.loglik)
    if deviance < 0:
        if deviance < -1e-6:
            log.warning("GEV log-likelihood below Gumbel's by %.3g: GEV optimum not reached", -deviance)
        deviance = 0.0
    return LikelihoodRatioTest(gumbel, full, float(deviance), 1, chi2_1_sf(deviance))


def return_level_delta(fit: MleFit, period: float) -> tuple[float, float]:
    """Return level for ``period`` blocks and its delta-method standard error (Coles §3.3.3),
    with the analytic gradient ``(1, c(xi), sigma c'(xi))``, ``c = expm1(xi u)/xi``."""
    if not period > 1:
        raise InputError(f"return period must be > 1 block; got {period:g}")
    u = -math.log(-math.log1p(-1.0 / period))
    c, dc = (float(v) for v in gev.expm1_ratio(u, fit.xi, 1))
    grad = np.array([1.0, c, fit.sigma * dc][: fit.n_params])
    var = float(grad @ np.asarray(fit.cov) @ grad)
    return float(fit.mu + fit.sigma * c), math.sqrt(var) if var >= 0 else math.nan


#: Range of xi searched by the profile intervals, and allowed to the nuisance xi of the
#: return-level profile: above -1 (where the likelihood is unbounded, Smith 1985) and up to
#: max(XI_PROFILE_MAX, xi_hat + 1). With few maxima the GEV likelihood rises again at very
#: large xi (degenerate heavy-tailed fits that put a spike at the lowest maximum); that region
#: is outside every practical block-maxima model and is not searched.
XI_PROFILE_MAX = 2.0
#: how far (in Wald half-widths, as powers of 2) the return-level search goes before calling a side open
_MAX_DOUBLINGS = 40


@dataclass(frozen=True)
class ProfileInterval:
    """A profile-likelihood interval ``{v: profile(v) >= max - chi2_1(level)/2}``, the connected
    part that holds the estimate.

    A side on which the profile never falls below the cut inside the searched range is
    *open*: its bound is ``-inf``/``+inf`` and ``open_below``/``open_above`` is True (small
    samples: the data do not bound the parameter). ``searched`` is the range examined and
    ``note`` says why a side is open or what else was found. ``flag`` is non-empty when the
    interval must not be read as a plain interval (the fit sits on the xi = -1 boundary, a
    return level's interval lies below a value the data already hold, or an end was found where
    the nuisance parameters did not converge): the text output and the JSON print it beside the
    interval. Unpacks as ``lower, upper``.
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
    flag: str = ""

    def __iter__(self) -> Iterator[float]:
        """Tuple-like unpacking: ``lo, hi = interval``."""
        yield self.lower
        yield self.upper

    @property
    def closed(self) -> bool:
        """True when both ends were found."""
        return not (self.open_below or self.open_above)

    def describe(self, fmt: str = ".4g") -> str:
        """``[a, b]`` with an open side in words, e.g. ``[-0.628, open above (...)]``, and the flag."""
        lo = (f"open below (no lower end down to {self.searched[0]:.4g})" if self.open_below
              else format(self.lower, fmt))
        hi = (f"open above (no upper end up to {self.searched[1]:.4g})" if self.open_above
              else format(self.upper, fmt))
        return f"[{lo}, {hi}]" + (f" FLAGGED: {self.flag}" if self.flag else "")

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
            "flag": self.flag,
        }


class _Profile:
    """Profile negative log-likelihood of one parameter: minimised over the nuisance parameters by
    :func:`_newton`, warm-started from the nearest value already evaluated (made feasible by
    ``feasible``: the GEV support moves with the parameters). A call returns the profile
    log-likelihood and its slope, the partial derivative at the inner optimum (envelope theorem)."""

    def __init__(self, objective: Callable[[float], Objective], start: NDArray[np.float64], at: float,
                 feasible: Callable[[float, NDArray[np.float64]], NDArray[np.float64]],
                 lower: tuple[float, ...], upper: tuple[float, ...]):
        self.objective = objective
        self.feasible = feasible
        self.lower, self.upper = lower, upper
        self.points: dict[float, tuple[float, NDArray[np.float64], float]] = {}
        self.failed: list[float] = []
        self._seed = (at, np.asarray(start, dtype=float))

    def nuisance(self, value: float) -> NDArray[np.float64]:
        """Nuisance parameters at the evaluated value nearest to ``value``."""
        if not self.points:
            return self._seed[1]
        near = min(self.points, key=lambda v: abs(v - value))
        return self.points[near][1]

    def __call__(self, value: float) -> tuple[float, float]:
        if value in self.points:
            ll, _, slope = self.points[value]
            return ll, slope
        start = self.feasible(value, self.nuisance(value).copy())
        try:
            opt = _newton(self.objective(value), start, self.lower, self.upper)
        except FitError:
            self.points[value] = (-math.inf, start, math.nan)
            return -math.inf, math.nan
        if not opt.converged:
            self.failed.append(value)
        ll, slope = -opt.f, -opt.extra
        self.points[value] = (ll, opt.x, slope)
        return ll, slope


def _solve_end(profile: _Profile, inner: float, outer: float, target: float) -> float:
    """The value between ``inner`` (profile >= target) and ``outer`` (below) where the profile
    equals ``target``: Newton steps on the profile's slope, kept inside the bracket, with
    the Illinois variant of regula falsi (then bisection) where a Newton step leaves it."""
    ll_in, _ = profile(inner)
    ll_out, slope = profile(outer)
    x, ll_x = outer, ll_out
    side = 0
    tol = 1e-12 * max(1.0, abs(inner), abs(outer))
    for _ in range(100):
        if abs(ll_x - target) <= 1e-10 or abs(outer - inner) <= tol:
            break
        cand = x + (target - ll_x) / slope if math.isfinite(slope) and slope != 0 else math.nan
        lo, hi = min(inner, outer), max(inner, outer)
        if not (lo < cand < hi):
            f_in, f_out = ll_in - target, ll_out - target
            cand = (inner * f_out - outer * f_in) / (f_out - f_in) if f_out != f_in else 0.5 * (inner + outer)
            if not (lo < cand < hi):
                cand = 0.5 * (inner + outer)
        x = cand
        ll_x, slope = profile(x)
        if ll_x >= target:
            inner, ll_in = x, ll_x
            if side == 1:
                ll_out = target + 0.5 * (ll_out - target)  # Illinois: halve the stale end's weight
            side = 1
        else:
            outer, ll_out = x, ll_x
            if side == -1:
                ll_in = target + 0.5 * (ll_in - target)
            side = -1
    return float(x)


def _profile_interval(profile: _Profile, parameter: str, hat: float, ll_hat: float, half_width: float,
                      level: float, bounds: tuple[float, float], *, max_doublings: int = _MAX_DOUBLINGS,
                      open_at_bound: str = "", to_data: Callable[[float], float] = float) -> ProfileInterval:
    """Both ends of the profile interval: from the Wald end ``hat -+ half_width`` outward, each
    next point where the profile's tangent reaches the cut (at most 4 times as far, up to
    ``bounds``) until the profile falls below the cut; then the end by :func:`_solve_end`.
    ``to_data`` maps a value to the data's units for the notes."""
    target = ll_hat - 0.5 * chi2_1_quantile(level)
    profile.points.setdefault(hat, (ll_hat, profile.nuisance(hat), 0.0))
    ends: list[float] = []
    opened: list[bool] = []
    width = half_width if math.isfinite(half_width) and half_width > 0 else 0.1 * max(1.0, abs(hat))
    for direction, bound in ((-1.0, bounds[0]), (1.0, bounds[1])):
        inner, outer = hat, None
        distance = width
        for _ in range(2 * max_doublings + 1):
            candidate = hat + direction * distance
            at_bound = (candidate - bound) * direction >= 0
            if at_bound:
                candidate = bound
            ll, slope = profile(candidate)
            if ll < target:
                outer = candidate
                break
            inner = candidate
            if at_bound or distance > width * 2.0**max_doublings:
                break
            reach = math.nan
            if math.isfinite(slope) and slope * direction < 0:
                reach = abs(candidate + (target - ll) / slope - hat)
            distance = min(4.0 * distance, max(reach, 1.1 * distance)) if math.isfinite(reach) else 2.0 * distance
        if outer is None:
            ends.append(direction * math.inf)
            opened.append(True)
            continue
        ends.append(_solve_end(profile, inner, outer, target))
        opened.append(False)
    approximate = [side for side, end, is_open in (("lower", ends[0], opened[0]), ("upper", ends[1], opened[1]))
                   if not is_open and end in profile.failed]
    searched = (min(profile.points), max(profile.points))
    notes = []
    higher = [v for v, (ll, _, _) in profile.points.items() if ll > ll_hat + 1e-6]
    if higher:
        notes.append(f"the profile exceeds the fit's log-likelihood at {parameter} = {to_data(higher[0]):.4g}: the fit "
                     "is not the global maximum")
    if profile.failed:
        notes.append(f"the nuisance parameters did not converge at {len(profile.failed)} profile point(s), e.g. "
                     f"{parameter} = {to_data(profile.failed[0]):.4g}")
    for side, is_open in (("below", opened[0]), ("above", opened[1])):
        if is_open:
            notes.append(f"open {side}: the {level:.0%} profile stays above its cut down to "
                         f"{to_data(searched[0]):.4g}" if side == "below" else
                         f"open {side}: the {level:.0%} profile stays above its cut up to {to_data(searched[1]):.4g}")
    if open_at_bound and any(opened):
        notes.append(open_at_bound)
    flag = (f"the {' and '.join(approximate)} end{'s are' if len(approximate) > 1 else ' is'} approximate: the "
            "nuisance parameters did not converge there (far in the tail the likelihood is nearly flat)"
            if approximate else "")
    return ProfileInterval(parameter=parameter, estimate=float(hat), level=float(level), lower=ends[0],
                           upper=ends[1], open_below=opened[0], open_above=opened[1],
                           searched=(float(searched[0]), float(searched[1])), note="; ".join(notes), flag=flag)


def _xi_bounds(xi_hat: float) -> tuple[float, float]:
    return _XI_SEARCH_FLOOR, max(XI_PROFILE_MAX, xi_hat + 1.0)


def _xi_profile(y: NDArray[np.float64], start: NDArray[np.float64], at: float) -> _Profile:
    def feasible(xi: float, t: NDArray[np.float64]) -> NDArray[np.float64]:
        t[1] = _make_feasible(y, float(t[0]), float(t[1]), xi)
        return t

    return _Profile(lambda xi: _objective_at_xi(y, xi), start, at, feasible, (-math.inf, -math.inf),
                    (math.inf, math.inf))


def _boundary_flag(fit: MleFit) -> str:
    return ("xi_hat is at the boundary -1, where the likelihood is unbounded: the fit is no regular maximum "
            "and its intervals do not have their stated level" if fit.boundary else "")


def profile_loglik_xi(data: ArrayLike, xi_values: ArrayLike) -> NDArray[np.float64]:
    """Profile log-likelihood of xi: the GEV log-likelihood maximised over (mu, sigma)."""
    x = _clean(data, "gev")
    fit = fit_gev(x)
    y, loc, scale = _standardise(x)
    profile = _xi_profile(y, np.array([(fit.mu - loc) / scale, fit.sigma / scale]), fit.xi)
    values = np.asarray(xi_values, dtype=float)
    out = np.empty(values.shape)
    for idx in np.argsort(np.abs(values - fit.xi), axis=None):  # outward from the fit: warm starts
        out.flat[idx] = profile(float(values.flat[idx]))[0] - x.size * math.log(scale)
    return out


def profile_ci_xi(data: ArrayLike, fit: MleFit | None = None, level: float = INTERVAL_LEVEL) -> ProfileInterval:
    """Profile-likelihood interval for xi of a GEV fit (Coles 2001, §2.6.6).

    Searched outward from the Wald interval and solved by Newton steps on the profile; a side the
    profile does not bound within ``(-1, max(XI_PROFILE_MAX, xi_hat + 1)]`` is open (see
    :class:`ProfileInterval`). Unpacks as ``lower, upper``.
    """
    x = _clean(data, "gev")
    fit = fit if fit is not None else fit_gev(x)
    if fit.family != "gev":
        raise InputError("a profile interval for xi needs a GEV fit")
    y, loc, scale = _standardise(x)
    profile = _xi_profile(y, np.array([(fit.mu - loc) / scale, fit.sigma / scale]), fit.xi)
    ll_hat = fit.loglik + x.size * math.log(scale)
    z = math.sqrt(chi2_1_quantile(level))
    se = fit.se["xi"]
    lo_b, hi_b = _xi_bounds(fit.xi)
    res = _profile_interval(profile, "xi", fit.xi, ll_hat, z * se, level, (lo_b, hi_b), max_doublings=12,
                            open_at_bound=f"xi is searched in ({_XI_FLOOR:g}, {hi_b:g}]: below -1 the "
                            "likelihood is unbounded; above, only degenerate fits of few maxima")
    flags = [f for f in (_boundary_flag(fit), res.flag) if f]
    return replace(res, flag="; ".join(flags))


def profile_ci_return_level(data: ArrayLike, fit: MleFit, period: float,
                            level: float = INTERVAL_LEVEL) -> ProfileInterval:
    """Profile-likelihood interval for the ``period``-block return level (Coles 2001, §3.3.3).

    The location is eliminated through ``mu = z_p - sigma (y_p^(-xi) - 1)/xi``; the profile is
    maximised over ``sigma`` (and ``xi`` in ``(-1, max(XI_PROFILE_MAX, xi_hat + 1)]`` for a
    GEV fit). An end reached only because the nuisance xi sits at that search limit is
    reported as open. The interval is flagged when the fit is on the xi = -1 boundary, or when
    the period is at least the number of maxima and the lower end lies below the sample
    maximum (a level the data already exceed). Unpacks as ``lower, upper``.
    """
    x = _clean(data, fit.family)
    y, loc, scale = _standardise(x)
    if not period > 1:
        raise InputError(f"return period must be > 1 block; got {period:g}")
    u = -math.log(-math.log1p(-1.0 / period))
    z_hat, z_se = return_level_delta(fit, period)
    _, xi_max = _xi_bounds(fit.xi)
    gumbel = fit.family == "gumbel"

    def feasible(z: float, t: NDArray[np.float64]) -> NDArray[np.float64]:
        # t_i = 1 + xi (y_i - mu)/sigma with mu = z - sigma c: widen sigma if the warm start violates it
        xi = 0.0 if gumbel else float(t[1])
        c = float(gev.expm1_ratio(u, xi)[0])
        need = float(np.max(-xi * (y - z))) / (1.0 + xi * c)  # 1 + xi c = exp(xi u) > 0
        if need >= t[0]:
            t[0] = 1.5 * need
        return t

    z_hat_s = (z_hat - loc) / scale
    if gumbel:
        profile = _Profile(lambda z: _objective_at_level(y, z, u, True), np.array([fit.sigma / scale]), z_hat_s,
                           feasible, (-math.inf,), (math.inf,))
    else:
        profile = _Profile(lambda z: _objective_at_level(y, z, u, False), np.array([fit.sigma / scale, fit.xi]),
                           z_hat_s, feasible, (-math.inf, _XI_SEARCH_FLOOR), (math.inf, xi_max))
    ll_hat = fit.loglik + x.size * math.log(scale)
    zq = math.sqrt(chi2_1_quantile(level))
    half = zq * z_se / scale if math.isfinite(z_se) and z_se > 0 else 0.1
    limit = half * 2.0**_MAX_DOUBLINGS
    res = _profile_interval(profile, f"{period:g}-block return level", z_hat_s, ll_hat, half, level,
                            (z_hat_s - limit, z_hat_s + limit), to_data=lambda v: loc + scale * v)
    lower, upper = res.lower, res.upper
    open_below, open_above = res.open_below, res.open_above
    notes = [res.note] if res.note else []
    if not gumbel:  # an end set by the xi search limit is not an end the data give
        for side, end in (("below", lower), ("above", upper)):
            if math.isfinite(end) and float(profile.nuisance(end)[1]) >= xi_max - 1e-3:
                notes.append(f"open {side}: the profile reaches its cut only where the nuisance xi hits its "
                             f"search limit {xi_max:g}")
                if side == "below":
                    lower, open_below = -math.inf, True
                else:
                    upper, open_above = math.inf, True
    lower_data = loc + scale * lower
    flags = [f for f in (_boundary_flag(fit), res.flag) if f]
    top = float(np.max(x))
    p_seen = -math.expm1(x.size * math.log1p(-1.0 / period))  # P(n blocks exceed the period-block level)
    if math.isfinite(lower_data) and lower_data < top and p_seen <= 1.0 - level:
        flags.append(f"contradicts the data: its lower end {lower_data:.6g} is below the sample maximum "
                     f"{top:.6g}, although {x.size} blocks exceed a {period:g}-block level with probability "
                     f"{p_seen:.2g} only")
    return ProfileInterval(parameter=res.parameter, estimate=float(z_hat), level=res.level,
                           lower=lower_data, upper=loc + scale * upper, open_below=open_below,
                           open_above=open_above, searched=(loc + scale * res.searched[0], loc + scale * res.searched[1]),
                           note="; ".join(notes), flag="; ".join(flags))
