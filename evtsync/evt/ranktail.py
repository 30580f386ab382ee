"""The per-rank tail estimator of tau(n), ``ranktail`` (docs/methodology.md, "Predicting tau(n)", §5, §7).

The mean straggler delay of n ranks is D(n) = E[max_n X] − a = b·E[max_n u], u = (X − a)/b a
rank's standardised time (methodology §7). The centred estimator models only the maximum of each
sample of m ranks and extrapolates its GEV by k = n/m; this one uses **every rank's value**:

- per block identity c, u = (X − a_c)/r_c for all m ranks of every sample, r_c the identity's
  robust scale (the z-score table's columns ``u`` and ``u_scale``, written by ``evtsync blocks``
  and the pipeline's zscores stage, §5), pooled per cell (GPU × precision) and put in units of
  the sd by the cell's one ratio (:func:`rank_values`): N values;
- their distribution F̂ = the empirical distribution below a threshold t (the
  (1 − :data:`~evtsync.core.defaults.RANKTAIL_TAIL_SHARE`) quantile up to
  :data:`~evtsync.core.defaults.RANKTAIL_SHARE_VALUES` values, a higher one beyond
  (:func:`tail_exceedances`), at least :data:`~evtsync.core.defaults.RANKTAIL_MIN_EXCEEDANCES`
  and at most :data:`~evtsync.core.defaults.RANKTAIL_MAX_EXCEEDANCES` values above it; moved up
  while the threshold-stability test, level
  :data:`~evtsync.core.defaults.RANKTAIL_STABILITY_ALPHA`, rejects it) and a generalized Pareto
  tail above it: F̂(x) = W_t + (1 − W_t)(1 − G(x − t)), G the GPD survival function with scale
  sigma and shape xi (xi > 0 heavy, 0 exponential, < 0 bounded);
- E[max_n u] = ∫ x dF̂(x)^n: the body's atoms exactly, the tail by quadrature in w = −log G:
  t(1 − W_t^n) + sigma ∫_0^∞ (1 − (1 − (1 − W_t) e^{−w})^n) e^{xi·w} dw (finite for xi < 1;
  infinite draws otherwise, as everywhere in :mod:`evtsync.predict.tables`).

Uncertainty, without MCMC: the GPD's (log sigma, xi) posterior on a grid (flat prior on
log sigma; xi ∈ [−0.5, 1.2] with a Normal(0, :data:`~evtsync.core.defaults.RANKTAIL_XI_PRIOR_SD`)
prior) from the exceedances, and a Bayesian bootstrap (Dirichlet(1, …, 1) weights) of all N
values for the body and the exceedance rate 1 − W_t; each draw pairs one of each and is measured
from its own mean, E[max_n u] − E[u] (u is measured from the identity's mean, so the bootstrap
must be too: a draw that shifts the whole distribution is not a longer delay). b is held at its
estimate: u was divided by the same identity scales, so b's sampling error cancels to first order
(adding b's own bootstrap widens the n = 8 interval to 1.2–1.4 times the spread of the estimates;
docs/methodology.md).

The point estimate is the posterior **median** of E[max_n u] (``point_estimate``): E[max_n u]
grows convexly with xi, so with ~100 exceedances the posterior mean lies 3–9% above the truth at
n = 4096 while the median is within ±3% (docs/bayesian.md); the median is also carried unchanged
through monotone maps (tau -> B*).

What it cannot do: predict a GPU or precision that was not measured (it has no population; the
hierarchical GEV fits do, labelled population-level), or a cell with fewer than
:data:`~evtsync.core.defaults.RANKTAIL_MIN_VALUES` rank values (refused, named). Beyond n ≈ N the
answer rests on the GPD's extrapolation.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from evtsync.blocks.zscores import RANK_SCALE_COLUMN, RANK_VALUES_COLUMN
from evtsync.core.defaults import (
    INTERVAL_LEVEL,
    RANKTAIL_DRAWS,
    RANKTAIL_EXCEEDANCE_POWER,
    RANKTAIL_MAX_EXCEEDANCES,
    RANKTAIL_MIN_EXCEEDANCES,
    RANKTAIL_MIN_VALUES,
    RANKTAIL_MODEL,
    RANKTAIL_SHARE_VALUES,
    RANKTAIL_STABILITY_ALPHA,
    RANKTAIL_TAIL_SHARE,
    RANKTAIL_XI_PRIOR_SD,
)
from evtsync.core.errors import InputError
from evtsync.core.memo import BoundedMemo

log = logging.getLogger(__name__)

__all__ = ["RANK_COLUMN", "RankTail", "RankTailFit", "expected_max_draws", "fit_rank_tail", "rank_values",
           "tail_exceedances"]

#: The z-score table's column of per-rank standardised values u = (X − a_c)/r_c, comma-joined per sample.
RANK_COLUMN = RANK_VALUES_COLUMN
#: The shape grid of the GPD posterior (prior: Normal(0, RANKTAIL_XI_PRIOR_SD) on it).
_XI_GRID = np.linspace(-0.5, 1.2, 171)
_XI_STEP = float(_XI_GRID[1] - _XI_GRID[0])
#: Points of the tail quadrature in w = −log G (Simpson's rule).
_W_POINTS = 801
#: log(1e-20): a power C^n below it is left out of the body's sum (:func:`expected_max_draws`)
_NEGLIGIBLE_LOG = math.log(1e-20)
#: At most this many atoms of the body in the Bayesian bootstrap (adjacent sorted values binned).
_MAX_ATOMS = 4000
_GROUPS = ("gpu", "precision")


def rank_values(table: pd.DataFrame, source: str = "z-score table") -> NDArray[np.float64]:
    """All per-rank values of a z-score table (or of a selection of its rows, one cell), as one
    array in units of the sd.

    The table's ``u`` = (X − a_c)/r_c is measured in each identity's robust scale r_c; its column
    ``u_scale`` = r_c/s_pooled(c) (:mod:`evtsync.blocks.zscores`). The values returned are
    rho·u with rho = exp(mean over the rows of log u_scale), the rows' geometric mean ratio of the
    robust scale to the pooled sd: one factor for the whole selection, so no rank's own value
    enters the scale that divides it (docs/methodology.md, "The per-rank tail estimator").

    ``InputError`` when the table lacks ``u`` (written before the ranktail estimator existed) or
    ``u_scale`` (written before u was robustly scaled: its u was divided by s_pooled, which
    shrinks the tail), or holds a value that is not a finite number, or a ratio that is not > 0.
    """
    rerun = "rerun `evtsync blocks` (or `evtsync run --force`) to rewrite it, or ask for --estimator centred"
    if RANK_COLUMN not in table.columns:
        raise InputError(f"{source}: no per-rank column {RANK_COLUMN!r}, which the per-rank estimators of tau(n) (rankmodel, ranktail) need "
                         f"(the table was written before it existed): {rerun}")
    if RANK_SCALE_COLUMN not in table.columns:
        raise InputError(f"{source}: no column {RANK_SCALE_COLUMN!r}: the table was written before the per-rank values "
                         "were robustly scaled (its u is divided by the pooled sd, which a far rank inflates: the tail "
                         f"it gives is short, 8-25% at n = 4096); {rerun}")
    text = table[RANK_COLUMN].astype(str)
    if text.empty:
        return np.zeros(0)
    try:
        values = np.array(",".join(text).split(","), dtype=float)
    except ValueError as exc:
        raise InputError(f"{source}: column {RANK_COLUMN!r} holds a value that is not a number ({exc})") from None
    if not np.isfinite(values).all():
        raise InputError(f"{source}: column {RANK_COLUMN!r} holds {int((~np.isfinite(values)).sum())} non-finite value(s)")
    ratio = pd.to_numeric(table[RANK_SCALE_COLUMN], errors="coerce").to_numpy(dtype=float)
    bad = ~(np.isfinite(ratio) & (ratio > 0))
    if bad.any():
        raise InputError(f"{source}: column {RANK_SCALE_COLUMN!r} holds {int(bad.sum())} value(s) that are not "
                         "positive numbers")
    return values * float(np.exp(np.log(ratio).mean()))


@dataclass(frozen=True)
class RankTail:
    """The fitted tail of one cell: sorted values, threshold and GPD posterior draws."""

    values: NDArray[np.float64]  # sorted, all N
    threshold: float
    n_exceedances: int
    log_sigma: NDArray[np.float64]  # (draws,)
    xi: NDArray[np.float64]  # (draws,)
    weights_seed: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def n_values(self) -> int:
        """N, the cell's rank values."""
        return int(self.values.size)


def _gpd_loglik(exc: NDArray[np.float64], sigma: NDArray[np.float64], xi: float) -> NDArray[np.float64]:
    """GPD log-likelihood of exceedances ``exc`` (> 0) at shape ``xi`` for each scale in ``sigma``
    (−inf where a bounded shape's support ends below the largest exceedance)."""
    sigma = np.atleast_1d(np.asarray(sigma, dtype=float))
    if abs(xi) < 1e-9:
        return -exc.size * np.log(sigma) - exc.sum() / sigma
    out = np.full(sigma.size, -np.inf)
    inside = 1.0 + xi * float(exc.max()) / sigma > 0 if xi < 0 else np.ones(sigma.size, dtype=bool)
    if inside.any():  # one shape at a time: memory (scales × k), not (scales × shapes × k)
        z = 1.0 + xi * exc[None, :] / sigma[inside, None]
        out[inside] = -exc.size * np.log(sigma[inside]) - (1.0 + 1.0 / xi) * np.log(z).sum(axis=1)
    return out


def _gpd_loglik_grid(exc: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The GPD log-likelihood of exceedances ``exc`` (> 0) on the grid: (log sigma (251,), ll (251, len(_XI_GRID)))."""
    log_sigma = np.linspace(math.log(float(exc.mean())) - 3.0, math.log(float(exc.mean())) + 2.0, 251)
    sigma = np.exp(log_sigma)
    return log_sigma, np.stack([_gpd_loglik(exc, sigma, float(xi)) for xi in _XI_GRID], axis=1)


def _gpd_grid_posterior(exc: NDArray[np.float64], draws: int, rng: np.random.Generator,
                        grid: tuple[NDArray[np.float64], NDArray[np.float64]] | None = None
                        ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(log sigma, xi) draws from the grid posterior of a GPD fitted to exceedances ``exc`` (> 0);
    ``grid``: their :func:`_gpd_loglik_grid` when already computed."""
    log_sigma, ll = _gpd_loglik_grid(exc) if grid is None else grid
    # the shape's prior, Normal(0, RANKTAIL_XI_PRIOR_SD) (docs/methodology.md, "The per-rank tail
    # estimator"): weakly informative, centred on the exponential tail; it keeps a small tail sample's
    # posterior from wandering into shapes whose mean maximum explodes
    ll = ll + (-0.5 * (_XI_GRID / RANKTAIL_XI_PRIOR_SD) ** 2)[None, :]
    post = np.exp(ll - ll.max())
    post /= post.sum()
    pick = rng.choice(post.size, size=draws, p=post.ravel())
    row, col = np.unravel_index(pick, post.shape)
    ds, dx = log_sigma[1] - log_sigma[0], _XI_GRID[1] - _XI_GRID[0]
    return (log_sigma[row] + (rng.random(draws) - 0.5) * ds, _XI_GRID[col] + (rng.random(draws) - 0.5) * dx)


def tail_exceedances(n_values: int, tail_share: float = RANKTAIL_TAIL_SHARE, *,
                     min_exceedances: int = RANKTAIL_MIN_EXCEEDANCES, max_exceedances: int = RANKTAIL_MAX_EXCEEDANCES,
                     share_values: int = RANKTAIL_SHARE_VALUES, power: float = RANKTAIL_EXCEEDANCE_POWER) -> int:
    """k, the number of a cell's ``n_values`` rank values above the GPD threshold before the
    threshold-stability test (docs/methodology.md, "Choosing the threshold and the prior").

    ``tail_share`` of the values up to ``share_values`` values; beyond, k grows as
    n_values^``power`` from there, k = tail_share · share_values · (n_values / share_values)^power,
    so the threshold's quantile rises with N: a fixed share keeps the GPD's approximation bias
    however many values there are (Student-t₅ above the 96.5% quantile: −3% at n = 4096, −8% at
    32768 with unlimited data; benchmarks/ranktail_approximation.py). Clipped to
    [``min_exceedances``, ``max_exceedances``].
    """
    scaled = tail_share * min(n_values, share_values) * (max(n_values, share_values) / share_values) ** power
    return min(max(min_exceedances, int(math.ceil(scaled - 1e-9))), max_exceedances)


#: Results of :func:`_stable_exceedances` by the content of its arguments (a pure function): a run fits
#: the rank model twice to the same cells (xi free and xi = 0), each fit testing every cell's
#: threshold stability, ~0.14 s a cell on the demo (issue 48, branch demo60). The most recent
#: 64 are kept, the grids handed out as copies
#: (:class:`~evtsync.core.memo.BoundedMemo`).
_STABLE_CACHE: BoundedMemo[tuple[int, tuple[NDArray[np.float64], NDArray[np.float64]] | None]] = BoundedMemo(
    64, lambda hit: (hit[0], None if hit[1] is None else (hit[1][0].copy(), hit[1][1].copy())))


def _stable_exceedances(u: NDArray[np.float64], k: int, min_exceedances: int,
                        alpha: float = RANKTAIL_STABILITY_ALPHA
                        ) -> tuple[int, tuple[NDArray[np.float64], NDArray[np.float64]] | None]:
    """:func:`_stable_exceedances_of`, the result computed once per content of its arguments (the
    values' bytes, dtype and shape, ``k``, ``min_exceedances``, ``alpha``)."""
    import hashlib

    u = np.ascontiguousarray(u)
    key = (hashlib.sha256(u.tobytes()).hexdigest(), u.dtype.str, u.shape, int(k), int(min_exceedances), float(alpha))
    return _STABLE_CACHE.get(key, lambda: _stable_exceedances_of(u, k, min_exceedances, alpha))


def _stable_exceedances_of(u: NDArray[np.float64], k: int, min_exceedances: int,
                           alpha: float = RANKTAIL_STABILITY_ALPHA
                           ) -> tuple[int, tuple[NDArray[np.float64], NDArray[np.float64]] | None]:
    """The number of exceedances the threshold-stability test keeps (docs/methodology.md), and the
    log-likelihood grid of its exceedances (None when the test did not run).

    Candidates k, k/2, k/4, ... down to ``min_exceedances``. A threshold t is kept when the GPD
    fitted above it (maximum likelihood on the grid) also describes the exceedances of every higher
    candidate t': the likelihood ratio of their own fit against the implied one (same xi, sigma +
    xi·(t' − t): the GPD's threshold stability), chi-square with 2 degrees of freedom, at level
    ``alpha`` Bonferroni-divided over the higher candidates. A rejected threshold moves up to the
    next candidate; the last is kept.
    """
    from scipy.stats import chi2

    ks = [k]
    while ks[-1] // 2 >= min_exceedances:
        ks.append(ks[-1] // 2)
    if alpha <= 0 or len(ks) == 1:
        return k, None
    fits, grids = [], []
    for kk in ks:
        t = float(u[u.size - kk - 1])
        exc = u[u > t] - t
        log_sigma, ll = _gpd_loglik_grid(exc)
        grids.append((log_sigma, ll))
        i, j = np.unravel_index(int(np.argmax(ll)), ll.shape)
        fits.append((t, exc, math.exp(float(log_sigma[i])), float(_XI_GRID[j]), float(ll[i, j])))
    for pos, (t, _, sigma, xi, _) in enumerate(fits[:-1]):
        higher = fits[pos + 1:]
        implied = [_gpd_loglik(exc_h, np.array([sigma + xi * (t_h - t)]), xi)[0] for t_h, exc_h, *_ in higher]
        p_min = min(float(chi2.sf(max(0.0, 2.0 * (fit[4] - ll_h)), 2)) for fit, ll_h in zip(higher, implied, strict=True))
        if p_min >= alpha / len(higher):
            return ks[pos], grids[pos]
    return ks[-1], grids[-1]


def fit_rank_tail(values: NDArray[np.float64], *, draws: int = RANKTAIL_DRAWS, seed: int = 0,
                  tail_share: float = RANKTAIL_TAIL_SHARE, min_exceedances: int = RANKTAIL_MIN_EXCEEDANCES,
                  min_values: int = RANKTAIL_MIN_VALUES, max_exceedances: int = RANKTAIL_MAX_EXCEEDANCES,
                  exceedance_power: float = RANKTAIL_EXCEEDANCE_POWER, label: str = "cell") -> RankTail:
    """The semi-parametric fit of one cell's rank values ``values`` (standardised u).

    Parameters
    ----------
    values : numpy.ndarray
        The cell's per-rank standardised values u (any order).
    draws : int, default RANKTAIL_DRAWS
        Posterior draws of the GPD parameters (and Bayesian-bootstrap weights at prediction).
    seed : int, default 0
        Seed of the draws.
    tail_share : float, default RANKTAIL_TAIL_SHARE
        Share of the values above the threshold up to RANKTAIL_SHARE_VALUES values; a larger cell
        has fewer in proportion (:func:`tail_exceedances`).
    min_exceedances : int, default RANKTAIL_MIN_EXCEEDANCES
        The fewest values above the threshold (the threshold is lowered to reach it).
    min_values : int, default RANKTAIL_MIN_VALUES
        The fewest values a cell needs; fewer is an ``InputError`` naming ``label``.
    max_exceedances : int, default RANKTAIL_MAX_EXCEEDANCES
        The most values above the threshold (a large cell gets a higher threshold: less
        bias from the GPD approximation, and bounded cost).
    exceedance_power : float, default RANKTAIL_EXCEEDANCE_POWER
        Beyond RANKTAIL_SHARE_VALUES values the exceedances grow as N to this power
        (:func:`tail_exceedances`; 1: the same share at every N).
    label : str, default "cell"
        The cell's name in messages.

    Returns
    -------
    RankTail
        Sorted values, the threshold, the number of exceedances and the GPD draws.

    Raises
    ------
    InputError
        Too few values, or values that are not finite.
    """
    u = np.sort(np.asarray(values, dtype=float).ravel())
    if not np.isfinite(u).all():
        raise InputError(f"ranktail: {label}: rank values must be finite")
    if u.size < min_values:
        raise InputError(f"ranktail: {label} has {u.size} rank value(s); the per-rank tail estimator needs at least "
                         f"{min_values} ({min_values // 4} samples of 4 ranks); use --estimator centred for this cell")
    k_share = tail_exceedances(u.size, tail_share, min_exceedances=min_exceedances, max_exceedances=max_exceedances,
                               power=exceedance_power)
    k, grid = _stable_exceedances(u, k_share, min_exceedances)
    threshold = float(u[u.size - k - 1])
    exc = u[u > threshold] - threshold
    if exc.size < min_exceedances // 2 or float(exc.max()) <= 0:
        raise InputError(f"ranktail: {label}: only {exc.size} distinct value(s) above the threshold {threshold:.4g}; "
                         "the tail cannot be fitted")
    rng = np.random.default_rng(seed)
    log_sigma, xi = _gpd_grid_posterior(exc, draws, rng, grid)  # the test's grid: the same exceedances
    notes = []
    if k < k_share:
        notes.append(f"threshold moved up by the stability test: {exc.size} values above it instead of {k_share} (a second "
                     "mode in the tail, such as rare slow ranks; beyond n ~ N the estimate is less certain)")
    if u.size < 10 * min_values:
        notes.append(f"small cell: {u.size} rank values, {exc.size} above the threshold; the interval is wide")
    return RankTail(values=u, threshold=threshold, n_exceedances=int(exc.size), log_sigma=log_sigma, xi=xi,
                    weights_seed=seed + 1, notes=tuple(notes))


def expected_max_draws(tail: RankTail, n: Sequence[int], *, chunk: int = 200) -> NDArray[np.float64]:
    """Draws of D(n)/b = E[max_n u] − E[u] (draws, len(n)) for a fitted cell (module docstring:
    ∫ x dF̂^n − ∫ x dF̂).

    Draw d pairs GPD parameters d with one Bayesian-bootstrap weighting of the N values, and is
    measured from that draw's own mean E[u] (body atoms under its weights plus the tail's share
    times t + sigma/(1 − xi)): the estimator measures u from the identity's mean, so each draw
    does too, and D(1) = 0 in every draw (docs/methodology.md, "Uncertainty"). Draws with
    xi >= 1 are ``inf`` (the mean maximum does not exist).
    """
    ns = np.asarray([int(v) for v in n], dtype=float)
    if ns.size == 0 or np.any(ns < 1):
        raise InputError("ranktail: domain sizes n must be positive integers")
    u, t = tail.values, tail.threshold
    body = u[u <= t]
    n_tail = u.size - body.size
    # Dirichlet(1, ..., 1) weights of the N values, aggregated exactly: a bin of s values has total
    # weight Gamma(s) before normalising; a large body is cut into _MAX_ATOMS bins of adjacent
    # sorted values, each at its mean (memory and time bounded for any N)
    if body.size > _MAX_ATOMS:
        edges = np.linspace(0, body.size, _MAX_ATOMS + 1).astype(int)
        counts = np.diff(edges).astype(float)
        atoms = np.add.reduceat(body, edges[:-1]) / counts
    else:
        counts, atoms = np.ones(body.size), body
    draws = tail.xi.size
    rng = np.random.default_rng(tail.weights_seed)
    # the tail's quadrature grid in w = −log G, shared by every n: [0, log(max(n, 2^16)) + 30], Simpson's
    # weights; fixed for n <= 2^16, so one n's draws do not depend on which other n are asked
    top = math.log(max(float(ns.max()), 2.0 ** 16)) + 30.0
    ww = np.linspace(0.0, top, _W_POINTS)
    simpson_w = np.ones(_W_POINTS)
    simpson_w[1:-1:2], simpson_w[2:-1:2] = 4.0, 2.0
    simpson_w *= (ww[1] - ww[0]) / 3.0
    e_minus = np.exp(-ww)
    out = np.empty((draws, ns.size))
    body = atoms
    step = np.diff(body)
    for start in range(0, draws, chunk):
        stop = min(draws, start + chunk)
        d = stop - start
        g = rng.standard_gamma(counts, size=(d, counts.size))
        total = g.sum(axis=1) + rng.standard_gamma(float(n_tail), size=d)
        cum = np.cumsum(g, axis=1) / total[:, None]  # (d, K) body CDF at each atom
        wt = cum[:, -1]  # W_t
        sigma = np.exp(tail.log_sigma[start:stop])
        xi = tail.xi[start:stop]
        c = 1.0 - wt
        # the draw's own mean E[u] under F̂: the body's weighted atoms and the tail's t + E[excess]
        with np.errstate(divide="ignore", over="ignore"):
            own_mean = (g @ body) / total + c * (t + sigma / np.maximum(1.0 - xi, 1e-12))
        with np.errstate(divide="ignore"):
            log_cum = np.log(cum)
        log_survive = np.log1p(-c[:, None] * e_minus)  # log(1 - c e^-w), (d, W)
        with np.errstate(over="ignore"):
            growth = np.exp(xi[:, None] * ww[None, :]) * simpson_w[None, :]
            rest_base = np.where(xi < 1, c * np.exp(-(1 - xi) * top) / np.maximum(1 - xi, 1e-12), np.inf)
        top_cum = log_cum.max(axis=0)  # nondecreasing along the atoms, as each row of log_cum is
        for j, nn in enumerate(ns):
            # sum_i v_i (C_i^n - C_(i-1)^n) by parts: v_K C_K^n - sum_(i<K) C_i^n (v_(i+1) - v_i), one power per
            # atom from the first whose C^n can reach 1e-20 in some draw (the atoms below add < 1e-20 of the
            # body's range)
            first = min(int(np.searchsorted(top_cum, _NEGLIGIBLE_LOG / nn)), body.size - 1)
            powers = np.exp(nn * log_cum[:, first:])
            body_part = body[-1] * powers[:, -1] - powers[:, :-1] @ step[first:]
            # tail: sigma ∫_0^W (1 - (1 - c e^-w)^n) e^{xi w} dw + the analytic rest beyond W, where
            # 1 - (1 - c e^-w)^n ≈ n c e^-w
            with np.errstate(invalid="ignore"):
                integral = np.einsum("dw,dw->d", -np.expm1(nn * log_survive), growth)
            tail_part = t * (1.0 - powers[:, -1]) + sigma * (integral + nn * rest_base)
            out[start:stop, j] = np.where(xi < 1, body_part + tail_part - own_mean, np.inf)
    return out


class RankTailFit:
    """The ranktail estimator as a fit-like object per cell (GPU × precision) for the prediction tables.

    It offers the :class:`~evtsync.evt.bayesfit.CellFit` attributes (``name``, ``family``,
    ``kind``, ``converged``, ``convergence_note``, ``cells``) and, instead of GEV parameter
    draws, :meth:`expected_max` (draws of E[max_n u] per cell), which
    :mod:`evtsync.predict.tables` multiplies by b.
    """

    name = RANKTAIL_MODEL
    family = "gpd-tail"
    kind = "semi-parametric"
    column = RANK_COLUMN
    #: The point summary of its draws (evtsync.predict.tables: the ``*_point*`` columns): the posterior
    #: median, as E[max_n u] is convex in the GPD shape and its posterior mean overshoots (issue 29).
    point_estimate = "median"
    converged = True
    convergence_note = ""

    def __init__(self, tails: dict[str, RankTail], cells: pd.DataFrame) -> None:
        self.tails = tails
        self._cells = cells

    @property
    def cells(self) -> pd.DataFrame:
        """One row per cell: ``cell`` label, ``gpu``, ``precision``, ``n_obs`` (rank values)."""
        return self._cells

    def cell_draws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Not available: the ranktail estimator has no GEV parameters (``InputError``)."""
        raise InputError("the ranktail estimator has no GEV parameters (mu, sigma, xi): it models every rank's value "
                         "with a generalized Pareto tail; ask a GEV fit (--estimator centred) for them")

    def expected_max(self, n: Sequence[int], index: Sequence[int] | None = None) -> NDArray[np.float64]:
        """Draws of E[max_n u] − E[u] per cell (tau(n) = b times these; :func:`expected_max_draws`).

        Parameters
        ----------
        n : sequence of int
            Domain sizes (ranks), each >= 1.
        index : sequence of int or None, default None
            Positions in :attr:`cells` of the cells wanted (None: all).

        Returns
        -------
        numpy.ndarray
            Shape (draws, cells, len(n)); ``inf`` where a draw's shape xi >= 1.
        """
        labels = list(self._cells["cell"].astype(str))
        idx = range(len(labels)) if index is None else index
        return np.stack([expected_max_draws(self.tails[labels[i]], n) for i in idx], axis=1)

    @classmethod
    def from_table(cls, table: pd.DataFrame, *, draws: int = RANKTAIL_DRAWS, seed: int = 0,
                   source: str = "z-score table", refused: dict[str, str] | None = None) -> RankTailFit:
        """Fit every GPU × precision cell of a z-score table (rows with ``has_gemm`` when present).

        Parameters
        ----------
        table : pandas.DataFrame
            A z-score table with the column :data:`RANK_COLUMN` and ``gpu``, ``precision``.
        draws : int, default RANKTAIL_DRAWS
            Draws per cell.
        seed : int, default 0
            Seed of the draws (cell i uses ``seed + 2 i``).
        source : str, default "z-score table"
            The table's name in messages.
        refused : dict or None, default None
            None: a cell that cannot be fitted (too few values) raises. A dict: that cell is left
            out and its reason recorded here under the cell's label (the other cells keep the
            seeds they would have had).

        Returns
        -------
        RankTailFit
            One fitted tail per cell.

        Raises
        ------
        InputError
            The table lacks ``u`` (an older table: rerun ``evtsync blocks``), a group column, or a
            cell has too few values.
        """
        missing = [g for g in _GROUPS if g not in table.columns]
        if missing:
            raise InputError(f"{source}: missing column(s) {missing}")
        rank_values(table.head(1), source)  # the old-table message before any grouping
        if "has_gemm" in table.columns:
            table = table[table["has_gemm"].astype(bool)]
        tails: dict[str, RankTail] = {}
        rows = []
        for i, ((gpu, precision), part) in enumerate(table.groupby(list(_GROUPS), sort=True, observed=True)):
            label = f"{gpu}|{precision}"
            try:
                tail = fit_rank_tail(rank_values(part, source), draws=draws, seed=seed + 2 * i, label=label)
            except InputError as exc:
                if refused is None:
                    raise
                refused[label] = str(exc)
                continue
            for note in tail.notes:
                log.warning("ranktail %s: %s", label, note)
            tails[label] = tail
            rows.append({"cell": label, "gpu": str(gpu), "precision": str(precision), "n_obs": tail.n_values})
        if not rows:
            raise InputError(f"{source}: no rows to fit the ranktail estimator to"
                             + (f" (every cell refused: {'; '.join(refused.values())})" if refused else ""))
        return cls(tails, pd.DataFrame(rows))

    def cell_info(self, level: float = INTERVAL_LEVEL) -> pd.DataFrame:
        """Per cell: rank values, exceedances, threshold, GPD posterior means, the GPD shape's central
        ``level`` interval (``gpd_xi_lo``/``gpd_xi_hi``: the rank times' tail, which the tail verdict
        reads, evtsync.runfolder.summary.tail_verdict) and notes (a small cell)."""
        tail = (1 - level) / 2
        rows = []
        for label, t in self.tails.items():
            # the interval's ends on the grid the shape's posterior lives on (step 0.01; the draws are
            # jittered within a step only to smooth E[max_n u]): an end within half a step of 0 is 0,
            # the posterior cannot tell it from 0 (docs/methodology.md, "The tail verdict")
            on_grid = _XI_GRID[0] + np.round((t.xi - _XI_GRID[0]) / _XI_STEP) * _XI_STEP
            rows.append({"cell": label, "n_values": t.n_values, "n_exceedances": t.n_exceedances,
                         "threshold": t.threshold, "gpd_sigma_mean": float(np.exp(t.log_sigma).mean()),
                         "gpd_xi_mean": float(t.xi.mean()),
                         "gpd_xi_lo": float(np.round(np.quantile(on_grid, tail, method="lower"), 10)),
                         "gpd_xi_hi": float(np.round(np.quantile(on_grid, 1 - tail, method="higher"), 10)),
                         "note": "; ".join(t.notes)})
        return pd.DataFrame(rows)
