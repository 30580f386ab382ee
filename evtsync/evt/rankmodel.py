"""One hierarchical model of per-rank block times (issue 45; docs/methodology.md, "The rank model").

Per cell c (GPU × precision), rank r and collective i (one instance of a block identity in one
process group: the ranks that meet at its collective), in units of the block's pooled sd (§5):

    u_{r,i} = s_i + rho_r + e_{r,i}

- ``s_i`` a shift shared by the ranks of collective i (a shock, a drift). It is **eliminated**,
  not sampled: max_n − mean_n does not depend on it, and with a flat prior on each s_i its
  marginal likelihood is the likelihood of the within-collective contrasts d_{r,i} = u_{r,i} −
  ū_i. The model works with those contrasts (:func:`decompose`), at O(N) cost and no latent
  variable per collective.
- ``rho_r`` a persistent rank effect (a slow node), relative to its process group's mean:
  estimated by rank r's mean contrast (se from the idiosyncratic variance), drawn from a
  Normal(0, sigma_rho_c) population whose spread is fitted per cell; rho_r is marginalised in
  the sampler and drawn from its conditional (normal–normal) afterwards.
- ``e`` idiosyncratic: its distribution is the empirical distribution of the residual contrasts
  below a threshold and a generalized Pareto tail above (as ``ranktail``), with
  xi_c = xi0 + delta_gpu + delta_precision (zero-sum deltas with fitted spreads) and, with several
  cells, log sigma_ref,c = log sigma0 + spread·z_c (non-centred), sigma_ref,c = sigma_c + xi_c (u_ref −
  u_c) the scale moved to one reference threshold (GPD threshold stability); priors and sampler
  settings from ``models/rankmodel.toml`` (:func:`evtsync.evt.spec.load_rank_spec`); sampled with nutpie (4
  chains from dispersed starts). The body's uncertainty is a Bayesian bootstrap, as ranktail's.
- Centring mixes the other ranks' mean into each residual: w = d·K/(K−1) = e_r − ē_{−r}, e_r
  plus an independent term of variance sigma_e²/(K−1). tau(n) is corrected for it by SIMEX
  (Cook & Stefanski 1994): the same point estimate with that noise added once and twice more,
  extrapolated to no noise along the least-squares line through P(lam)², the factor's own
  sampling error carried into the draws by a Bayesian bootstrap (docs/methodology.md states the check).

Predictions (:meth:`RankModelFit.tau_draws`): D(n) = E[max_n V − mean_n V] over n ranks, in units
of the sd (tau(n) = b · D(n)), V = rho + e; fleet ``"new"``: "a job of n ranks from the same
fleet" (each new rank's rho is one of the cell's fitted ranks' effects, at random, with
Bayesian-bootstrap weights; ``population="normal"``: a draw from the fitted Normal population);
fleet ``"these-plus-typical"``: the cell's observed ranks plus n − R new ones. An unseen GPU or
precision takes its shape deviation from the fitted population (labelled population-level).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from numpy.typing import NDArray

from evtsync.core.defaults import (
    DEFAULT_SEED,
    INTERVAL_LEVEL,
    RANK_FLEET_WORDING,
    RANKTAIL_MIN_EXCEEDANCES,
    RANKTAIL_MIN_VALUES,
)
from evtsync.core.errors import FitError, InputError
from evtsync.core.memo import BoundedMemo
from evtsync.evt.families import tail_verdict
from evtsync.evt.spec import RankModelSpec, load_rank_spec

log = logging.getLogger(__name__)

__all__ = ["CENTRINGS", "FLEETS", "RankModelFit", "decompose", "fit_rank_model", "load_rank_model",
           "rank_table_from_zscores"]

#: The long table's columns (:func:`rank_table_from_zscores` writes it; :func:`fit_rank_model` reads it).
RANK_TABLE_COLUMNS = ("value", "collective", "rank", "gpu", "precision", "order")  # and optional "series"
#: How the shared per-collective shift s_i is treated: eliminated by within-collective centring
#: (the default), or assumed absent (``"none"``: the values are used as they are, as ranktail does).
CENTRINGS = ("centre", "none")
#: The fleets a prediction can assume (module docstring).
FLEETS = tuple(RANK_FLEET_WORDING)
POPULATIONS = ("fleet", "normal")
FLEET_WORDING = RANK_FLEET_WORDING
MODEL_NAME = "rankmodel"
#: The rank model's sampler defaults, read from its specification (``models/rankmodel.toml``, the one
#: home of its priors and settings; :func:`evtsync.evt.spec.load_rank_spec`) when first asked for:
#: ``RANKMODEL_DRAWS`` draws per chain (the GPD's shape and scale stay correlated after the
#: reparametrisation, bulk ESS ~0.15 per draw for xi, so 2000 keep the ESS >= 400 rule met) and
#: ``RANKMODEL_TARGET_ACCEPT``, NUTS's target acceptance (at 0.95 the free-shape fit of the demo's
#: earlier half diverged once to four times in 3 of 5 seeds: the GPD's support wall; at 0.99 none of 5,
#: for ~40% more CPU: docs/methodology.md).
_SPEC_CONSTANTS = {"RANKMODEL_DRAWS": "draws", "RANKMODEL_TARGET_ACCEPT": "target_accept"}


def __getattr__(name: str) -> Any:
    """The module's constants read from the shipped specification (:data:`_SPEC_CONSTANTS`)."""
    if name in _SPEC_CONSTANTS:
        return getattr(load_rank_spec(), _SPEC_CONSTANTS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: SIMEX: noise replicates concatenated per extra noise level, enough for ~SIMEX_VALUES values, 4 to 16.
SIMEX_VALUES = 40960


def simex_replicates(n_values: int) -> int:
    """Noise replicates of a SIMEX set of a cell of ``n_values`` values (more replicates, less Monte
    Carlo error from the added noise; the data's own sampling error stays: on 2,560 normal values
    with K = 8 the factor at n = 4096 is 0.91-0.95 over data sets against the exact 0.935)."""
    return int(min(16, max(4, math.ceil(SIMEX_VALUES / max(n_values, 1)))))

#: SIMEX: the top values of a set kept unbinned (per replicate), and the factor is held constant
#: beyond n = (the cell's values) / SIMEX_REACH, where the empirical mean maximum still rests on data.
SIMEX_TOP = 1000
SIMEX_REACH = 4
#: SIMEX: Bayesian-bootstrap replicates of the residuals whose factors carry the factor's own sampling
#: error into tau's draws (docs/methodology.md, "Centring's noise, removed by SIMEX").
SIMEX_BOOT = 40
#: The fewest posterior probability of rho_r > 0, after dividing 0.05 by the cell's ranks, and the
#: least posterior median effect (sd), for a rank to be named persistently slow.
SLOW_LEVEL = 0.05
SLOW_MIN_SD = 0.1
_MAX_ATOMS = 4000
#: The quadrature of the tau draws (:func:`_delay_draws`; docs/methodology.md, "The rank model", the
#: quadrature and its error): points of the uniform body grid per draw, of the SIMEX factor's calls
#: (the point and its 40 bootstrap replicates: few draws, so a finer grid costs little, and the sparse top
#: of a SIMEX set is where the body's error is largest), and of the tail's Simpson rule in w (odd).
_BODY_POINTS = 1000
_POINT_BODY_POINTS = 10000
_W_POINTS = 401
_MAX_MIX = 24
#: Interval level of every table here: the project's (docs/methodology.md).
_INTERVAL = INTERVAL_LEVEL
#: The interval's quantiles.
_QUANTILES = ((1 - _INTERVAL) / 2, (1 + _INTERVAL) / 2)
_BOUND_WIDTH = 0.02
#: A chain of the free-shape fit starts only where every cell's largest excess y_max lies at most
#: this far along to the GPD's upper support end -sigma/xi (xi < 0): 1 + xi y_max / sigma >= 1 -
#: START_WALL_FRACTION. A uniform jitter of xi0 alone (the scale kept at the mean excess) put the
#: scale of every cell with xi < 0 on the smooth support wall (1 + xi y_max / sigma ~ 0): on the
#: demo's earlier half, 2 of 20 free-shape fits had a chain stuck there (step size 1e-12, R-hat 1.59)
#: (docs/methodology.md, "The rank model"; issue starts45).
START_WALL_FRACTION = 0.5
#: The free-shape fit's start placement (starts54; :func:`_wall_placement`). The redraw of starts45
#: kept only starts whose independently jittered scale happened to be large enough, so of 400 starts
#: on the demo none had xi0 more than 0.17 below its initial point (15% below it at all, 85% above):
#: R-hat saw chains coming from above the posterior, almost never from below. Placing the scale
#: instead, with xi0's jitter of +-1 kept, started cells down to xi = -1.2, and a chain started with
#: a cell near xi = -1 (where the GPD likelihood is unbounded) sank there and stayed (step size 0,
#: R-hat 1.53-1.60) in 4 of 20 fits of the demo's earlier half and 1 of 10 of the whole demo:
#: xi0's jitter is START_XI_JITTER (+-1.7 prior sd of its Normal(0, 0.3)) and every cell starts at
#: xi_c >= START_XI_FLOOR, the GPD's regular region (Smith 1985: xi > -1/2).
START_XI_JITTER = 0.5
START_XI_FLOOR = -0.5
START_WALL_POLICY = (f"free shape: xi0 jittered by Uniform(-{START_XI_JITTER:g}, {START_XI_JITTER:g}) x width / "
                     "START_JITTER (the shared jitter's current width over its first one: halved after each refused try), a start "
                     f"with a cell's xi below {START_XI_FLOOR:g} redrawn; where a cell's largest excess lies more than "
                     f"{START_WALL_FRACTION:g} of the way to its GPD's support end, the pooled log scale raised to "
                     "the least value that meets it plus Uniform(0, width)")
#: Bracketing steps (1, 2, 4, ... in the log scale) and bisection steps of the placement.
_PLACE_BRACKET = 12
_PLACE_BISECT = 40
#: How several cells' GPD scales are pooled (the fit's attrs ``scale_pooling``; a fit saved before it
#: pooled each cell's scale at its own threshold): at the mean of their thresholds (:func:`reference_threshold`).
SCALE_POOLING = "log scale at the reference threshold (the mean of the cells' thresholds)"
_GROUPS = ("gpu", "precision")
_FORMAT = "evtsync-rankmodel-1"


# --------------------------------------------------------------------------------------------- data


def rank_table_from_zscores(table: pd.DataFrame, source: str = "z-score table") -> pd.DataFrame:
    """The long table of per-rank values from a z-score table (rows with ``has_gemm`` when present).

    One row per rank and sample: ``value`` = rho·u in units of the pooled sd (rho the cell's
    geometric-mean ``u_scale``, as :func:`evtsync.evt.ranktail.rank_values`), ``collective`` =
    workload|block|instance|pg (the samples of one instance of one PG are one collective),
    ``rank`` = workload|pg|rank, ``gpu``, ``precision``, ``order`` = instance, and the optional
    ``series`` = workload|block|pg (the collectives whose means the drift follows over ``order``).
    """
    from evtsync.evt.ranktail import rank_values

    rank_values(table.head(1), source)  # an old table without u: ranktail's message (rerun `evtsync blocks`)
    need = ["u", "u_scale", "ranks", "block", "instance", "pg", *_GROUPS]
    missing = [c for c in need if c not in table.columns]
    if missing:
        raise InputError(f"{source}: missing column(s) {missing} that the rank model needs "
                         "(rerun `evtsync blocks` for a table written before them)")
    if "has_gemm" in table.columns:
        table = table[table["has_gemm"].astype(bool)]
    parts = []
    for (gpu, precision), part in table.groupby(list(_GROUPS), sort=True, observed=True):
        values = rank_values(part, source)
        ranks = ",".join(part["ranks"].astype(str)).split(",")
        counts = part["u"].astype(str).str.count(",").to_numpy() + 1
        if len(ranks) != values.size or int(counts.sum()) != values.size:
            raise InputError(f"{source}: cell {gpu}|{precision}: columns 'u' and 'ranks' hold different numbers "
                             f"of values ({values.size} and {len(ranks)})")
        workload = part["workload"].astype(str) if "workload" in part.columns else pd.Series("", index=part.index)
        pg = part["pg"].astype(str)
        coll = (workload + "|" + part["block"].astype(str) + "|" + part["instance"].astype(str) + "|" + pg).to_numpy()
        rank_prefix = (workload + "|" + pg + "|").to_numpy()
        parts.append(pd.DataFrame({
            "value": values, "collective": np.repeat(coll, counts),
            "rank": np.char.add(np.repeat(rank_prefix, counts).astype(str), np.asarray(ranks, dtype=str)),
            "gpu": str(gpu), "precision": str(precision),
            "order": np.repeat(part["instance"].to_numpy(dtype=float), counts),
            "series": np.repeat((workload + "|" + part["block"].astype(str) + "|" + pg).to_numpy(), counts)}))
    if not parts:
        raise InputError(f"{source}: no rows with per-rank values")
    return pd.concat(parts, ignore_index=True)


@dataclass
class CellData:
    """One cell after the closed-form stage (:func:`decompose`)."""

    label: str
    gpu: str
    precision: str
    w: NDArray[np.float64]  # residual contrasts scaled to e + eta (centre) or the values (none)
    noise_sd: NDArray[np.float64]  # sd of eta per value (0 without centring)
    rank_labels: list[str]
    rho_hat: NDArray[np.float64]
    rho_se: NDArray[np.float64]
    rank_k: NDArray[np.float64]  # ranks per collective of each rank (mean)
    rank_n: NDArray[np.int64]
    sigma_e: float
    var_shared: float
    drift_range: float
    drift_var: float
    shock_var: float
    n_values: int
    n_collectives: int
    dropped: dict[str, int]


def _moving_average(x: NDArray[np.float64], window: int) -> NDArray[np.float64]:
    """Centred moving average with the window shrunk at the ends."""
    if x.size == 0:
        return x
    c = np.concatenate([[0.0], np.cumsum(x)])
    half = window // 2
    i = np.arange(x.size)
    lo, hi = np.maximum(0, i - half), np.minimum(x.size, i + half + 1)
    return (c[hi] - c[lo]) / (hi - lo)


def decompose(long: pd.DataFrame, centring: str = "centre", source: str = "rank table",
              rank_effects: bool = True) -> list[CellData]:
    """The closed-form stage per cell: within-collective contrasts (s_i eliminated), rank effects
    with their standard errors, the idiosyncratic variance, the residuals the tail is fitted to,
    and the variance shares (shared, its drift and shocks, per rank, idiosyncratic).

    Every value left out is counted by reason in ``dropped`` (collectives of one rank: no contrast).
    """
    if centring not in CENTRINGS:
        raise InputError(f"centring must be one of {CENTRINGS}, got {centring!r}")
    missing = [c for c in RANK_TABLE_COLUMNS if c not in long.columns]
    if missing:
        raise InputError(f"{source}: missing column(s) {missing}; expected {list(RANK_TABLE_COLUMNS)}")
    x_all = pd.to_numeric(long["value"], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(x_all)
    if bad.any():
        raise InputError(f"{source}: column 'value' holds {int(bad.sum())} value(s) that are not finite numbers "
                         f"(first at row {int(np.flatnonzero(bad)[0])})")
    cells = []
    for (gpu, precision), part in long.groupby(list(_GROUPS), sort=True, observed=True):
        label = f"{gpu}|{precision}"
        x = part["value"].to_numpy(dtype=float)
        coll, coll_idx = np.unique(part["collective"].astype(str).to_numpy(), return_inverse=True)
        del coll
        k = np.bincount(coll_idx).astype(float)
        dropped = {}
        keep = k[coll_idx] >= 2 if centring == "centre" else np.ones(x.size, dtype=bool)
        if (~keep).any():
            dropped["collective of one rank: no within-collective contrast"] = int((~keep).sum())
            part, x = part[keep], x[keep]
            _, coll_idx = np.unique(part["collective"].astype(str).to_numpy(), return_inverse=True)
            k = np.bincount(coll_idx).astype(float)
        rank_labels, rank_idx = np.unique(part["rank"].astype(str).to_numpy(), return_inverse=True)
        n_coll = k.size
        mean_c = np.bincount(coll_idx, weights=x) / k if centring == "centre" else np.zeros(n_coll)
        d = x - mean_c[coll_idx]
        n_r = np.bincount(rank_idx)
        rho_hat = np.bincount(rank_idx, weights=d) / n_r
        if not rank_effects:  # assumed absent: no rank is estimated, the residual is the contrast itself
            rho_hat = np.zeros(rank_labels.size)
        if centring == "centre":  # the effects are relative to their collective's ranks: re-centre per collective
            rho_c = np.bincount(coll_idx, weights=rho_hat[rank_idx]) / k
            res = d - rho_hat[rank_idx] + rho_c[coll_idx]
            dof = float((k - 1).sum()) - (rank_labels.size - 1 if rank_effects else 0)
            factor = k[coll_idx] / (k[coll_idx] - 1)
        else:
            res = d - rho_hat[rank_idx]
            dof = float(x.size - (rank_labels.size if rank_effects else 0))
            factor = np.ones(x.size)
        sigma_e2 = float((res ** 2).sum() / max(dof, 1.0))
        k_rank = np.bincount(rank_idx, weights=k[coll_idx]) / n_r
        shrink = (1 - 1 / k_rank) if centring == "centre" else np.ones(rank_labels.size)
        rho_se = np.sqrt(sigma_e2 * shrink / n_r)
        w = res * factor
        noise_sd = np.sqrt(sigma_e2 / (k[coll_idx] - 1)) if centring == "centre" else np.zeros(x.size)
        # shared part: the collective means, less the idiosyncratic mean's variance; drift: their moving
        # average over the instances of each series (block identity and PG), shocks: the rest
        # the drift's series: the optional column ``series`` (a block identity in one PG), else one per cell
        series = part["series"].astype(str) if "series" in part.columns else pd.Series("", index=part.index)
        cm = pd.DataFrame({"mean": np.bincount(coll_idx, weights=x) / k,
                           "k": k}).assign(
            series=pd.Series(series.to_numpy()).groupby(coll_idx).first().to_numpy(),
            order=pd.Series(part["order"].to_numpy(dtype=float)).groupby(coll_idx).first().to_numpy())
        noise = sigma_e2 / float(np.mean(k))
        var_shared = max(0.0, float(cm["mean"].var(ddof=1)) - noise) if n_coll > 1 else 0.0
        smooth_parts, ranges = [], []
        smooth_noise = 0.0  # the variance the moving average keeps of what is not drift (its residuals / window)
        for _, s in cm.sort_values("order").groupby("series", sort=False):
            v = s["mean"].to_numpy()
            window = max(5, v.size // 10)
            sm = _moving_average(v, window)
            smooth_parts.append(pd.Series(sm, index=s.index))
            ranges.append(float(sm.max() - sm.min()) if sm.size >= 10 else 0.0)
            smooth_noise += float(np.sum((v - sm) ** 2)) / min(window, v.size) / n_coll
        smooth = pd.concat(smooth_parts).reindex(cm.index).to_numpy()
        # shared = drift + shocks (docs/methodology.md): the drift is the moving average's variance less
        # the noise it keeps, at most the shared part; the shocks the rest of the shared part
        drift_var = min(var_shared, max(0.0, float(np.var(smooth)) - smooth_noise)) if n_coll > 1 else 0.0
        shock_var = var_shared - drift_var
        # the range of the smoothed means is noise where there is no drift: scaled by the share of the
        # smoothed variance that is drift (0 without drift, the range itself where noise is negligible)
        smooth_total = float(np.var(smooth)) if n_coll > 1 else 0.0
        range_scale = math.sqrt(drift_var / smooth_total) if smooth_total > 0 else 0.0
        ranges = [r * range_scale for r in ranges]
        n_kept = rank_labels.size if rank_effects else 0  # without rank effects no rank is listed
        cells.append(CellData(
            label=label, gpu=str(gpu), precision=str(precision), w=w, noise_sd=noise_sd,
            rank_labels=[str(r) for r in rank_labels[:n_kept]], rho_hat=rho_hat[:n_kept], rho_se=rho_se[:n_kept],
            rank_k=k_rank[:n_kept], rank_n=n_r.astype(np.int64)[:n_kept], sigma_e=math.sqrt(sigma_e2),
            var_shared=var_shared, drift_range=float(np.mean(ranges)) if ranges else 0.0, drift_var=drift_var,
            shock_var=shock_var, n_values=int(x.size), n_collectives=int(n_coll), dropped=dropped))
    if not cells:
        raise InputError(f"{source}: no rows")
    return cells


# --------------------------------------------------------------------------------------------- tail


def _threshold(w_sorted: NDArray[np.float64], label: str, stability: bool = True) -> tuple[float, int]:
    """The GPD threshold of a cell's sorted residuals: ranktail's rule (docs/methodology.md,
    "Choosing the threshold and the prior"), with its stability test."""
    from evtsync.evt.ranktail import _stable_exceedances, tail_exceedances

    if w_sorted.size < RANKTAIL_MIN_VALUES:
        raise InputError(f"rank model: cell {label} has {w_sorted.size} rank value(s); the tail needs at least "
                         f"{RANKTAIL_MIN_VALUES}")
    k = tail_exceedances(w_sorted.size)
    if stability:
        k, _ = _stable_exceedances(w_sorted, k, RANKTAIL_MIN_EXCEEDANCES)
    return float(w_sorted[w_sorted.size - k - 1]), k


def _bin(values_sorted: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
    """At most _MAX_ATOMS atoms of sorted values: adjacent values binned, each bin at its mean with its
    count (ranktail's aggregation of the body: a bin's Dirichlet weight is Gamma(count))."""
    if values_sorted.size > _MAX_ATOMS:
        edges = np.linspace(0, values_sorted.size, _MAX_ATOMS + 1).astype(int)
        counts = np.diff(edges).astype(float)
        return np.add.reduceat(values_sorted, edges[:-1]) / counts, counts
    return values_sorted.copy(), np.ones(values_sorted.size)


def _atoms(values_sorted: NDArray[np.float64], threshold: float) -> tuple[NDArray, NDArray, int]:
    """The body below ``threshold`` as atoms (:func:`_bin`), and the number of values above."""
    body = values_sorted[values_sorted <= threshold]
    return (*_bin(body), int(values_sorted.size - body.size))


def _simex_atoms(values_sorted: NDArray[np.float64], replicates: int) -> tuple[NDArray, NDArray]:
    """Atoms of a SIMEX set: the top SIMEX_TOP·replicates values as they are, the rest binned (:func:`_bin`)."""
    top = min(values_sorted.size, SIMEX_TOP * replicates)
    rest, counts = _bin(values_sorted[:values_sorted.size - top])
    return np.concatenate([rest, values_sorted[values_sorted.size - top:]]), np.concatenate([counts, np.ones(top)])


def _atom_starts(counts: NDArray[np.float64]) -> NDArray[np.int64]:
    """The first sorted position of each atom of :func:`_simex_atoms` (its members are contiguous)."""
    return np.concatenate([[0], np.cumsum(counts.astype(np.int64))[:-1]])


def simex_extrapolate(p1: NDArray[np.float64], p2: NDArray[np.float64], p3: NDArray[np.float64]) -> NDArray[np.float64]:
    """SIMEX's extrapolant to no noise from the predictions at noise levels lam = 1, 2, 3 (the noise's
    variance is lam times the centring noise's): the least-squares line in lam through P(lam)², at
    lam = 0: P(0) = sqrt((4 P(1)² + P(2)² − 2 P(3)²)/3). D(n) of the noisy values is a scale for a
    normal parent (D² linear in the added variance: exact there), and nearly linear in lam in the
    tail (docs/methodology.md, "Centring's noise, removed by SIMEX")."""
    return np.sqrt(np.maximum((4 * p1 ** 2 + p2 ** 2 - 2 * p3 ** 2) / 3, 0.0))


def simex_grid(n_values: int) -> NDArray[np.float64]:
    """The domain sizes at which a cell's SIMEX factor replicates are kept: 2, 4, 8, … below the
    reach (n_values / SIMEX_REACH) and the reach itself (the factor is held beyond it)."""
    reach = max(2.0, n_values / SIMEX_REACH)
    grid = 2.0 ** np.arange(1, max(2, int(math.floor(math.log2(reach))) + 1))
    return np.unique(np.append(grid[grid < reach], reach))


def simex_sets(w: NDArray[np.float64], noise_sd: NDArray[np.float64],
               rng: np.random.Generator) -> list[tuple[NDArray, NDArray, NDArray]]:
    """A cell's SIMEX sets: the residuals as observed (lam = 1), and with the centring noise added once
    and twice more (lam = 2, 3; :func:`simex_replicates` noisy copies of each value), each as
    (atoms, counts, the observed value each sorted member came from) (:func:`_simex_atoms`)."""
    reps = simex_replicates(w.size)
    out = []
    for lam in (1, 2, 3):
        raw = w if lam == 1 else (w[None, :] + math.sqrt(lam - 1) * noise_sd[None, :]
                                  * rng.standard_normal((reps, w.size))).ravel()
        order = np.argsort(raw, kind="stable")
        out.append((*_simex_atoms(raw[order], 1 if lam == 1 else reps), order % w.size))
    return out


def simex_boot(sets: list[tuple[NDArray, NDArray, NDArray]], n_values: int, rng: np.random.Generator,
               boot: int = SIMEX_BOOT) -> tuple[NDArray, NDArray]:
    """The SIMEX factor's sampling error: ``boot`` Bayesian-bootstrap replicates of the residuals
    (one Gamma(1) weight per observed value, shared by its noisy copies in every set, so the
    replicate's three sets are one resampled data set), each extrapolated as the point
    (:func:`simex_extrapolate`; rank effects left out). ``sets``: :func:`simex_sets`. Returns the
    grid (:func:`simex_grid`) and the replicates' log factor less its mean over replicates (boot, grid)."""
    grid = simex_grid(n_values)
    comp = {"pop_shift": np.zeros((boot, 1)), "pop_w": np.ones((boot, 1)), "own": np.zeros((boot, 0))}
    g = rng.standard_gamma(1.0, size=(boot, n_values))
    vals = []
    for atoms, counts, source in sets:
        starts = _atom_starts(counts)
        weights = np.stack([np.add.reduceat(g[b, source], starts) for b in range(boot)])
        vals.append(_delay_draws(atoms, weights, 0, float(atoms[-1]), np.ones(boot), np.zeros(boot), comp, grid, None,
                                 body_points=_POINT_BODY_POINTS))
    p1, p2, p3 = vals
    with np.errstate(divide="ignore", invalid="ignore"):
        log_f = np.log(simex_extrapolate(p1, p2, p3) / p1)
    log_f = np.where(np.isfinite(log_f), log_f, 0.0)
    return grid, log_f - log_f.mean(axis=0, keepdims=True)


def gpd_logpdf(y: NDArray[np.float64], sigma: NDArray[np.float64], xi: NDArray[np.float64]) -> NDArray[np.float64]:
    """GPD log density of excesses ``y`` (broadcast against ``sigma``, ``xi``); −inf outside the support."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z = xi * y / sigma
        small = np.abs(xi) < 1e-8
        logs = np.where(small, y / sigma, np.log1p(np.maximum(z, -1 + 1e-300)) / np.where(small, 1.0, xi))
        out = -np.log(sigma) - logs - np.log1p(np.maximum(z, -1 + 1e-300))
    return np.where(z > -1, out, -np.inf)


# --------------------------------------------------------------------------------------------- model


def _build_model(cells: list[CellData], exc: list[NDArray], free_shape: bool, centred: bool,
                 spec: RankModelSpec, thresholds: Sequence[float] = ()) -> Any:
    """The PyMC model: GPD excesses per cell with the pooled shape and scale, and the rank effects'
    estimates marginalised over their Normal(0, sigma_rho) population; priors from ``spec``
    (``models/rankmodel.toml``). Several cells pool the scale at the common reference threshold
    :func:`reference_threshold` of their ``thresholds`` (GPD threshold stability).

    Every value taken from the data enters as a ``pm.Data`` (:func:`_model_data`): the graph
    depends only on the model's structure (:func:`_structure_key`), so its compiled form serves
    another data set of the same structure (the out-of-sample check's earlier half)."""
    import pymc as pm
    import pytensor.tensor as pt

    from evtsync.evt.model import _prior_rv

    n_cells = len(cells)
    labels = [c.label for c in cells]
    coords: dict[str, Any] = {"cell": labels}
    values = _model_data(cells, exc, centred, thresholds)
    with pm.Model(coords=coords) as model:
        data = {name: pm.Data(name, value) for name, value in values.items()}
        if free_shape:
            xi0 = _prior_rv("xi0", spec.xi_prior)
            xi_cell = xi0 + pt.zeros(n_cells)
            for factor in _GROUPS:
                levels = sorted({getattr(c, factor) for c in cells})
                if len(levels) < 2:
                    continue
                model.add_coord(factor, levels)
                sd = _prior_rv(f"xi_sd_{factor}", spec.xi_spread_prior)
                z = pm.ZeroSumNormal(f"xi_z_{factor}", sigma=1.0, dims=factor)
                delta = pm.Deterministic(f"delta_{factor}", sd * z, dims=factor)
                xi_cell = xi_cell + delta[data[f"level_{factor}"]]
            xi = pm.Deterministic("xi", xi_cell, dims="cell")
        else:
            xi = pt.zeros(n_cells)
        y_max = data["y_max"]
        bound = y_max * _BOUND_WIDTH * pt.softplus(-xi / _BOUND_WIDTH)
        one_plus_xi = pt.maximum(1.0 + xi, 1e-3)  # the shape's prior keeps xi far above -1
        if n_cells > 1:
            # the cells' thresholds lie at different quantiles (ranktail's rule: k grows slower than N), so
            # their scales are pooled where they are comparable: at one reference threshold u_ref, by the
            # GPD's threshold stability sigma_c = sigma_ref,c - xi_c (u_ref - u_c) (Coles 2001, §4.3.4).
            # log sigma_ref,c = log_sigma0 + log_sigma_sd z_c, z_c ~ Normal(0, 1): non-centred, so a spread
            # prior with mass at 0 (complete pooling) makes no funnel; the support wall enters as a smooth
            # maximum of the same width as bound's, sigma_c = bound + w softplus((sigma_ref,c - xi_c (u_ref -
            # u_c) - bound)/w), exact (to 1e-4 w) more than 9 w inside the support (docs/methodology.md)
            log_sigma0 = pm.Flat("log_sigma0", initval=float(np.log(np.mean([e.mean() for e in exc]))))
            ls_sd = _prior_rv("log_sigma_sd", spec.sigma_spread_prior)
            z_sigma = pm.Normal("log_sigma_z", 0.0, 1.0, dims="cell")
            width = y_max * _BOUND_WIDTH
            gap = pt.exp(log_sigma0 + ls_sd * z_sigma) - xi * data["shift"] - bound
            sigma = pm.Deterministic("sigma", bound + width * pt.softplus(gap / width), dims="cell")
        else:
            # one cell: flat on log sigma (ranktail's prior); the support {sigma > max(0, -xi y_max)} as a
            # change of variables sigma = bound(xi) + exp(v)/(1 + xi), bound a smooth maximum (within
            # y_max * 0.02 * ln 2 of the exact one at xi = 0), with the Jacobian, so the prior stays the one
            # stated on log sigma and no trajectory crosses the wall; v = log((sigma - bound)(1 + xi)): for
            # xi >= 0 the log of nu = sigma (1 + xi), the scale orthogonal to xi in the GPD's Fisher
            # information (Chavez-Demoulin & Davison 2005), which removes most of the xi-sigma correlation
            # that slowed the chains (ESS ~500 of 4000)
            v = pm.Flat("log_sigma_free", dims="cell", initval=np.log([float(e.mean()) for e in exc]))
            sigma = pm.Deterministic("sigma", bound + pt.exp(v) / one_plus_xi, dims="cell")
            pm.Potential("sigma_jacobian", pt.sum(v - pt.log(one_plus_xi) - pt.log(sigma)))  # d log sigma / d v
        # GPD log density of the excesses, each cell's a row of data["excess"] padded with zeros (an excess
        # of 0 adds exactly 0 to log1p(xi y / sigma) and its derivatives, so only n_c log sigma_c counts the
        # cell's excesses): sum_c [-n_c log sigma_c - sum_j (1/xi_c + 1) log1p(xi_c y_cj / sigma_c)]
        y = data["excess"]
        s_i, x_i = sigma[:, None], xi[:, None]
        z = x_i * y / s_i
        zc = pt.maximum(z, -1 + 1e-12)
        small = pt.abs(x_i) < 1e-8
        logs = pt.switch(small, y / s_i, pt.log1p(zc) / pt.switch(small, 1.0, x_i))
        pm.Potential("gpd", -pt.sum(data["n_excess"] * pt.log(sigma))
                     - pt.sum(pt.switch(z > -1, logs + pt.log1p(zc), np.inf)))
        if values["rho_hat"].size:
            model.add_coord("rank_cell", [labels[i] for i in _rank_cells(cells)])
            sigma_rho = _prior_rv("sigma_rho", spec.rho_spread_prior, dims="rank_cell")
            sd = pt.sqrt(sigma_rho[data["rho_cell"]] ** 2 * data["rho_spread"] + data["rho_se"] ** 2)
            pm.Potential("rho_population", pm.logp(pm.Normal.dist(0.0, sd), data["rho_hat"]).sum())
    return model


def _rank_cells(cells: list[CellData]) -> list[int]:
    """The cells whose ranks carry rank effects (two ranks or more)."""
    return [i for i, c in enumerate(cells) if len(c.rank_labels) >= 2]


def _model_data(cells: list[CellData], exc: list[NDArray], centred: bool,
                thresholds: Sequence[float]) -> dict[str, NDArray]:
    """Every value :func:`_build_model` takes from the data, by its ``pm.Data`` name: the excesses, one
    row per cell padded with zeros (``excess``, ``n_excess``), their maxima, the cells' shift to the
    reference threshold, each cell's GPU and precision level, and the rank effects' estimates with
    their cell among the rank cells, se and centring factor."""
    width = max(e.size for e in exc)
    excess = np.zeros((len(exc), width))
    for i, e in enumerate(exc):
        excess[i, :e.size] = e
    with_ranks = _rank_cells(cells)
    ranked = [cells[i] for i in with_ranks]
    out = {"excess": excess, "n_excess": np.array([e.size for e in exc], dtype=float),
           "y_max": np.array([float(e.max()) for e in exc]),
           "shift": reference_threshold(thresholds) - np.asarray(thresholds, dtype=float)
           if len(cells) > 1 else np.zeros(len(cells))}
    for factor in _GROUPS:
        levels = sorted({getattr(c, factor) for c in cells})
        out[f"level_{factor}"] = np.array([levels.index(getattr(c, factor)) for c in cells], dtype=np.int64)
    out["rho_hat"] = np.concatenate([c.rho_hat for c in ranked]) if ranked else np.zeros(0)
    out["rho_se"] = np.concatenate([c.rho_se for c in ranked]) if ranked else np.zeros(0)
    out["rho_spread"] = (np.concatenate([(1 - 1 / c.rank_k) if centred else np.ones(c.rank_k.size) for c in ranked])
                         if ranked else np.zeros(0))
    out["rho_cell"] = (np.concatenate([np.full(c.rank_k.size, j) for j, c in enumerate(ranked)]).astype(np.int64)
                       if ranked else np.zeros(0, dtype=np.int64))
    return out


def reference_threshold(thresholds: Sequence[float]) -> float:
    """The threshold at which several cells' GPD scales are pooled: the mean of the cells' own
    thresholds (sd units of the residuals), so it lies among them (docs/methodology.md)."""
    return float(np.mean(np.asarray(thresholds, dtype=float))) if len(thresholds) else 0.0


def _initval(model: Any, cells: list[CellData], exc: list[NDArray], free_shape: bool) -> None:
    """Start at the per-cell mean excesses (an exponential tail's scale) and a shape of 0.05."""
    ls = np.log([e.mean() for e in exc])
    if "log_sigma0" in model.named_vars:
        model.set_initval(model["log_sigma0"], float(ls.mean()))
        model.set_initval(model["log_sigma_sd"], 0.2)
    if "log_sigma_z" in model.named_vars:
        model.set_initval(model["log_sigma_z"], (ls - ls.mean()) / 0.2)
    if free_shape:
        model.set_initval(model["xi0"], 0.05)


def _sample(model: Any, draws: int, tune: int, chains: int, seed: int, target_accept: float,
            adaptation: str = "diag", structure: str | None = None) -> xr.DataTree:
    """nutpie, 4 chains from dispersed starts (evtsync.evt.fit's policy), numba backend. With
    ``structure`` (:func:`_structure_key`), the compiled model is kept in (and read from) the
    compiled-model cache under it, and reads this model's data (:func:`_with_model_data`)."""
    import types

    import nutpie
    import pytensor

    from evtsync.evt.fit import _with_deterministics
    from evtsync.evt.nutpie_numba import compile_numba_model

    free = [rv.name for rv in model.free_RVs]
    with pytensor.config.change_flags(numba__fastmath=False):
        compiled = _with_model_data(compile_numba_model(model, free, cache_key=structure), model)
        if compiled is None:  # a value outside the model's data: compiled for these data alone
            compiled = compile_numba_model(model, free)
    built: Any = types.SimpleNamespace(model=model)  # what _with_deterministics reads
    compiled = _chain_starts(compiled, model)
    raw = nutpie.sample(compiled, draws=draws, tune=tune, chains=chains, cores=min(chains, os.cpu_count() or 1),
                        seed=seed, progress_bar=False, save_warmup=False, target_accept=target_accept,
                        adaptation=adaptation)
    return _with_deterministics(raw, built)


def _chain_starts(compiled: Any, model: Any) -> Any:
    """``compiled`` whose chains start apart by evtsync.evt.fit's policy (:data:`~evtsync.evt.fit.START_POLICY`)
    and, with xi free, with every cell's largest excess well inside its support, the scale moved
    there (:func:`_wall_placement`)."""
    import types

    from evtsync.evt.fit import _dispersed_starts

    built: Any = types.SimpleNamespace(model=model)  # what _dispersed_starts reads
    return _dispersed_starts(compiled, built, _wall_placement(model) if "xi" in model.named_vars else None)


def _wall_placement(model: Any) -> Callable[[np.ndarray, np.random.Generator, float], np.ndarray | None]:
    """The free-shape rank model's start placement (:data:`START_WALL_POLICY`; docs/methodology.md,
    "The rank model", start policy): a function of a jittered flat vector, the start's generator and
    the jitter width ``width`` (the shared policy's, halved after each refused try).

    xi0's jitter is scaled to half-width ``START_XI_JITTER * width / START_JITTER`` around its initial
    point, the same on both sides. A start with a cell's xi_c below ``START_XI_FLOOR`` is refused
    (None: redrawn). Where a cell's largest excess lies more than ``START_WALL_FRACTION`` of the way
    to its GPD's support end (1 + xi_c y_max,c / sigma_c < 1 - START_WALL_FRACTION; never for
    xi_c >= 0), the pooled scale coordinate (log sigma0; one cell: its log-scale coordinate), which
    raises every cell's sigma_c and nothing else, is set to the smallest value meeting the condition
    (bisection on the model's own xi and sigma: min_c of the left side is non-decreasing in it) plus
    Uniform(0, width): the scale jittered on the allowed side. Called from the sampler's threads: one
    evaluation at a time (a lock)."""
    import threading

    import pytensor
    import pytensor.tensor as pt

    from evtsync.evt.fit import START_JITTER, _point_splitter

    flat, to_point = _point_splitter(model)
    outs = model.replace_rvs_by_values([pt.min(model["xi"]),
                                        pt.min(1.0 + model["xi"] * model["y_max"] / model["sigma"])])
    names = [v.name for v in model.value_vars]
    fn = pytensor.function(model.value_vars, outs, mode="FAST_COMPILE", on_unused_input="ignore")
    lock = threading.Lock()
    shape, scale = _flat_index(model, ("xi0",)), _flat_index(model, ("log_sigma0", "log_sigma_free"))
    floor = 1.0 - START_WALL_FRACTION

    def evaluate(x: np.ndarray) -> tuple[float, float]:
        """The cells' smallest xi and smallest 1 + xi y_max / sigma (-inf where not finite)."""
        point = to_point(x)
        with lock, np.errstate(all="ignore"):
            xi_min, gap = (float(v) for v in fn(*(point[n] for n in names)))
        return xi_min, gap if np.isfinite(gap) else -np.inf

    def gap_at(x: np.ndarray) -> float:
        return evaluate(x)[1]

    def place(x: np.ndarray, rng: np.random.Generator, width: float) -> np.ndarray | None:
        x = x.copy()
        x[shape] = flat[shape] + (x[shape] - flat[shape]) * (START_XI_JITTER / START_JITTER)
        xi_min, gap = evaluate(x)
        if not xi_min >= START_XI_FLOOR:
            return None
        if gap >= floor:
            return x
        lo, hi = x.copy(), x.copy()
        step = 1.0
        for _ in range(_PLACE_BRACKET):  # hi: a scale coordinate that meets the condition
            hi[scale] = lo[scale] + step
            if gap_at(hi) >= floor:
                break
            lo[scale], step = hi[scale], 2 * step
        else:
            return None
        for _ in range(_PLACE_BISECT):
            mid = x.copy()
            mid[scale] = 0.5 * (lo[scale] + hi[scale])
            if gap_at(mid) >= floor:
                hi = mid
            else:
                lo = mid
        hi[scale] += rng.uniform(0.0, width)
        return hi if gap_at(hi) >= floor else None

    return place


def _flat_index(model: Any, names: Sequence[str]) -> int:
    """The index in nutpie's flat vector of the first element of the free variable named one of
    ``names`` (free variables in ``model.free_RVs`` order, as :func:`evtsync.evt.fit._point_splitter`)."""
    point, i = model.initial_point(), 0
    for rv in model.free_RVs:
        if rv.name in names:
            return i
        i += int(np.size(point[model.rvs_to_values[rv].name]))
    raise ValueError(f"rank model without a free variable named {' or '.join(names)}")


def _with_model_data(compiled: Any, model: Any) -> Any:
    """``compiled`` reading ``model``'s data: each shared variable of its functions set to the model's
    ``pm.Data`` of that name (a compiled model loaded from the cache holds the data it was compiled
    with); None when one of them is not a data variable of the model (its value could be another
    data set's: such a model is compiled anew)."""
    data = {str(v.name): v.get_value() for v in model.data_vars}
    held = [str(v.name) for v in compiled.shared_var_keys]
    if len(set(held)) != len(held) or not set(held) <= set(data):
        log.debug("rank model: shared values %s not all the model's data: compiled for these data", sorted(held))
        return None
    return compiled.with_data(**{name: data[name] for name in held})


def _structure_key(model: Any, free_shape: bool, spec: RankModelSpec) -> str:
    """The compiled-model cache key of a rank model (:func:`evtsync.evt.nutpie_numba.compile_numba_model`):
    SHA-256 of everything its graph holds besides its ``pm.Data`` (:func:`_model_data`): the
    specification, xi free or 0, the sizes of its coordinates (cells, GPU and precision levels, cells
    with rank effects), its free variables, each data variable's name, rank and dtype, and the sources
    that build it. Two data sets of one structure (the run's and its earlier half's) share a key."""
    import hashlib
    import json

    from evtsync.evt.fit import _model_code_digest

    data = {str(v.name): [v.ndim, str(v.dtype)] for v in model.data_vars}
    text = json.dumps({"format": _FORMAT, "spec": spec.text, "free_shape": bool(free_shape),
                       "coords": {str(k): len(v) for k, v in model.coords.items()},
                       "free": [rv.name for rv in model.free_RVs], "data": data,
                       "code": _model_code_digest()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------------------------- fit


def _prepare_model(long: pd.DataFrame, *, centring: str = "centre", free_shape: bool = True,
                   rank_effects: bool = True, source: str = "rank table", spec: RankModelSpec | None = None,
                   ) -> tuple[Any, list[CellData], list[NDArray], list[float], list[int]]:
    """The PyMC model :func:`fit_rank_model` samples, with its initial point set: the model, the
    cells, each cell's excesses over its threshold, the thresholds and the exceedance counts."""
    spec = load_rank_spec() if spec is None else spec
    cells = decompose(long, centring, source, rank_effects)
    exc, thresholds, ks = [], [], []
    for c in cells:
        ws = np.sort(c.w)
        t, k = _threshold(ws, c.label)
        exc.append(ws[ws > t] - t)
        thresholds.append(t)
        ks.append(k)
    model = _build_model(cells, exc, free_shape, centring == "centre", spec, thresholds)
    _initval(model, cells, exc, free_shape)
    return model, cells, exc, thresholds, ks


def fit_rank_model(long: pd.DataFrame, *, centring: str = "centre", draws: int | None = None,
                   tune: int | None = None, chains: int | None = None, seed: int = DEFAULT_SEED,
                   target_accept: float | None = None, adaptation: str | None = None, free_shape: bool = True,
                   rank_effects: bool = True, source: str = "rank table",
                   spec: RankModelSpec | str | os.PathLike[str] | None = None) -> RankModelFit:
    """Fit the rank model to a long table of per-rank values (:data:`RANK_TABLE_COLUMNS`;
    :func:`rank_table_from_zscores` makes one from a z-score table).

    ``centring``: ``"centre"`` eliminates the shared per-collective shift (default), ``"none"``
    assumes there is none (then, for one cell without rank effects, the model is ranktail's with
    its grid posterior replaced by NUTS). ``free_shape = False`` fits xi ≡ 0 (the Gumbel-domain
    model of :func:`compare_shape`). ``spec``: the priors and sampler settings, a
    :class:`~evtsync.evt.spec.RankModelSpec` or its file; None: the shipped
    ``models/rankmodel.toml``. ``draws``, ``tune``, ``chains``, ``target_accept`` and
    ``adaptation`` override the spec's (None: the spec's). Returns a :class:`RankModelFit`.
    """
    from evtsync.evt.fit import check_convergence

    start = time.process_time()
    spec = spec if isinstance(spec, RankModelSpec) else load_rank_spec(spec)
    draws = spec.draws if draws is None else draws
    tune = spec.tune if tune is None else tune
    chains = spec.chains if chains is None else chains
    target_accept = spec.target_accept if target_accept is None else target_accept
    adaptation = spec.adaptation if adaptation is None else adaptation
    model, cells, exc, thresholds, ks = _prepare_model(long, centring=centring, free_shape=free_shape,
                                                       rank_effects=rank_effects, source=source, spec=spec)
    tree = _sample(model, draws, tune, chains, seed, target_accept, adaptation,
                   structure=_structure_key(model, free_shape, spec))
    convergence = check_convergence(tree)
    post = tree["posterior"].to_dataset()
    keep = [v for v in post.data_vars if not str(v).startswith(("xi_z_", "log_sigma_free", "log_sigma_z"))]
    post = post[keep]
    if not free_shape:
        post["xi"] = xr.zeros_like(post["sigma"])
    fit = RankModelFit._assemble(cells, exc, thresholds, ks, post, tree["sample_stats"].to_dataset(), convergence,
                                 centring=centring, free_shape=free_shape, seed=seed)
    fit.attrs["fit_cpu_seconds"] = time.process_time() - start
    fit.attrs.update({"model_spec": spec.path, "model_spec_text": spec.text, "target_accept": float(target_accept),
                      "tune": int(tune), "adaptation": adaptation})
    return fit


def _cells_frame(cells: list[CellData], thresholds: list[float], ks: list[int]) -> pd.DataFrame:
    return pd.DataFrame({
        "cell": [c.label for c in cells], "gpu": [c.gpu for c in cells], "precision": [c.precision for c in cells],
        "n_values": [c.n_values for c in cells], "n_collectives": [c.n_collectives for c in cells],
        "n_ranks": [len(c.rank_labels) for c in cells], "threshold": thresholds, "n_exceedances": ks,
        "sigma_e": [c.sigma_e for c in cells], "var_shared": [c.var_shared for c in cells],
        "drift_var": [c.drift_var for c in cells], "shock_var": [c.shock_var for c in cells],
        "drift_range": [c.drift_range for c in cells],
        "n_dropped": [sum(c.dropped.values()) for c in cells],
        "dropped": ["; ".join(f"{n} values: {why}" for why, n in c.dropped.items()) for c in cells]})


class RankModelFit:
    """A fitted rank model: posterior draws, the closed-form stage and the SIMEX sets, with
    predictions (:meth:`tau_draws`), rank effects, variance shares, shapes and save/load."""

    name = MODEL_NAME
    family = "gpd-tail"
    kind = "hierarchical rank model"
    #: The point summary of tau draws (as ranktail's, for the same reason: E[max_n] is convex in xi).
    point_estimate = "median"

    def __init__(self, tree: xr.DataTree) -> None:
        self.tree = tree
        self.attrs = tree.attrs
        self.posterior: xr.Dataset = tree["posterior"].to_dataset()

    # ------------------------------------------------------------------ assembly and storage
    @classmethod
    def _assemble(cls, cells: list[CellData], exc: list[NDArray], thresholds: list[float], ks: list[int],
                  post: xr.Dataset, stats: xr.Dataset, convergence: Any, *, centring: str, free_shape: bool,
                  seed: int) -> RankModelFit:
        table = _cells_frame(cells, thresholds, ks)
        atoms, boot_rows = _body_frames(cells, thresholds, centring, seed)
        ranks = pd.DataFrame({
            "cell": np.concatenate([np.full(len(c.rank_labels), i) for i, c in enumerate(cells)]),
            "rank": np.concatenate([c.rank_labels for c in cells]),
            "rho_hat": np.concatenate([c.rho_hat for c in cells]),
            "rho_se": np.concatenate([c.rho_se for c in cells]),
            "rank_k": np.concatenate([c.rank_k for c in cells]),
            "n_values": np.concatenate([c.rank_n for c in cells])})
        excess = pd.DataFrame({"cell": np.concatenate([np.full(e.size, i) for i, e in enumerate(exc)]),
                               "excess": np.concatenate(exc)})
        tree = xr.DataTree.from_dict({
            "posterior": post, "sample_stats": stats,
            "cells": xr.Dataset.from_dataframe(table.rename_axis("cell_index")),
            "ranks": xr.Dataset.from_dataframe(ranks.rename_axis("rank_index")),
            "atoms": xr.Dataset.from_dataframe(atoms.rename_axis("atom_index")),
            "excess": xr.Dataset.from_dataframe(excess.rename_axis("excess_index")),
            **({"simex_boot": xr.Dataset.from_dataframe(pd.concat(boot_rows, ignore_index=True)
                                                         .rename_axis("boot_index"))} if boot_rows else {})})
        tree.attrs.update({
            "format": _FORMAT, "model": MODEL_NAME, "centring": centring, "free_shape": int(free_shape), "seed": seed,
            "converged": int(convergence.converged), "convergence": convergence.describe(),
            "max_rhat": convergence.max_rhat, "min_ess_bulk": convergence.min_ess_bulk,
            "divergences": convergence.divergences, "chains": int(post.sizes["chain"]),
            "draws": int(post.sizes["draw"]), "sampler": "nutpie", "scale_pooling": SCALE_POOLING,
            "chain_starts": "dispersed (evtsync.evt.fit.START_POLICY); "
                            + (START_WALL_POLICY if free_shape else "xi = 0: no support wall, nothing added")})
        return cls(tree)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the fit atomically to one netCDF file (h5netcdf), and its signature file beside it."""
        from evtsync.core.tableio import atomic_path
        from evtsync.core.trust import sign_file

        dest = Path(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(dest) as tmp:
            self.tree.to_netcdf(tmp, engine="h5netcdf")
            sign_file(dest, content=tmp)  # read back in process, not first in a separate one (fitfile.read_netcdf_tree)
        return dest

    # ------------------------------------------------------------------ tables
    @property
    def converged(self) -> bool:
        """R-hat ≤ 1.01, bulk and tail ESS ≥ 400, no divergence (evtsync.evt.fit.Convergence)."""
        return bool(int(self.attrs.get("converged", 0)))

    @property
    def convergence_note(self) -> str:
        """The convergence line."""
        return str(self.attrs.get("convergence", ""))

    @property
    def cells(self) -> pd.DataFrame:
        """One row per cell: labels, counts, threshold, sigma_e and the variance components."""
        return self.tree["cells"].to_dataset().to_dataframe().reset_index(drop=True)

    @property
    def rank_frame(self) -> pd.DataFrame:
        """One row per rank: its cell (index), label, rho_hat, se, ranks per collective, values."""
        return self.tree["ranks"].to_dataset().to_dataframe().reset_index(drop=True)

    def _post(self, name: str) -> NDArray[np.float64]:
        v = np.asarray(self.posterior[name].values)
        return v.reshape(v.shape[0] * v.shape[1], *v.shape[2:])

    def _cell_index(self, cell: str) -> int:
        labels = list(self.cells["cell"])
        if cell not in labels:
            raise InputError(f"rank model: no cell {cell!r}; cells: {labels}")
        return labels.index(cell)

    def xi_summary(self) -> pd.DataFrame:
        """Per cell: xi's posterior mean, median, 90% interval, P(xi > 0) and the tail verdict
        (read from the interval: a cell whose interval holds 0 is "light tail (Gumbel domain)")."""
        xi = self._post("xi")
        rows = []
        for i, cell in enumerate(self.cells["cell"]):
            lo, hi = np.quantile(xi[:, i], _QUANTILES)
            rows.append({"cell": cell, "xi_mean": float(xi[:, i].mean()), "xi_median": float(np.median(xi[:, i])),
                         "xi_lo": float(lo), "xi_hi": float(hi), "level": _INTERVAL,
                         "p_xi_positive": float((xi[:, i] > 0).mean()), "verdict": tail_verdict(lo, hi)})
        return pd.DataFrame(rows)

    def xi_pooled(self) -> pd.DataFrame:
        """The pooled shape per GPU and per precision: xi0 + delta_gpu (``kind`` "gpu") and xi0 +
        delta_precision (``kind`` "precision") per level, with mean, median, interval, P(xi > 0) and
        the verdict; a factor with one level has no delta: its level's row is xi0 alone. Empty for
        the xi ≡ 0 fit."""
        if "xi0" not in self.posterior:
            return pd.DataFrame(columns=["kind", "level_name", "xi_mean", "xi_median", "xi_lo", "xi_hi", "level",
                                         "p_xi_positive", "verdict"])
        xi0 = self._post("xi0")
        cells = self.cells
        rows = []
        for factor in _GROUPS:
            levels = sorted(set(cells[factor].astype(str)))
            for j, name in enumerate(levels):
                v = xi0 + (self._post(f"delta_{factor}")[:, j] if f"delta_{factor}" in self.posterior else 0.0)
                lo, hi = np.quantile(v, _QUANTILES)
                rows.append({"kind": factor, "level_name": name, "xi_mean": float(v.mean()),
                             "xi_median": float(np.median(v)), "xi_lo": float(lo), "xi_hi": float(hi),
                             "level": _INTERVAL, "p_xi_positive": float((v > 0).mean()), "verdict": tail_verdict(lo, hi)})
        return pd.DataFrame(rows)

    def rho_draws(self, cell: str, draws: int | None = None, seed: int = 0) -> tuple[list[str], NDArray[np.float64]]:
        """The cell's rank labels and draws of their effects (draws, ranks), sd units: each
        posterior draw of sigma_rho, then rho_r from its normal–normal conditional given rho_hat."""
        i = self._cell_index(cell)
        r = self.rank_frame
        r = r[r["cell"] == i]
        rho_hat, se, k = (r[c].to_numpy(dtype=float) for c in ("rho_hat", "rho_se", "rank_k"))
        rng = np.random.default_rng(seed + 101 * i)
        n = self._post("xi").shape[0] if draws is None else draws
        if len(r) < 2 or "sigma_rho" not in self.posterior:
            return list(r["rank"]), np.zeros((n, len(r)))
        coords = list(self.posterior["rank_cell"].values)
        sr = self._post("sigma_rho")[:, coords.index(cell)]
        sr = sr[np.linspace(0, sr.size - 1, n).astype(int)]
        centre = self.attrs["centring"] == "centre"
        tau2 = sr[:, None] ** 2 * ((1 - 1 / k)[None, :] if centre else 1.0)
        shrink = tau2 / (tau2 + se[None, :] ** 2)
        return list(r["rank"]), shrink * rho_hat[None, :] + np.sqrt(shrink) * se[None, :] * rng.standard_normal(
            (n, len(r)))

    def rank_effects(self, cell: str | None = None) -> pd.DataFrame:
        """Per rank: posterior mean of rho_r (sd units, relative to its collectives' mean), 90% interval,
        the same against the mean of the cell's other ranks (``vs_others_*``), P(rho_r > 0) and ``slow``:
        P(rho_r > 0) ≥ 1 − SLOW_LEVEL/R (R the cell's ranks) and the median ≥ SLOW_MIN_SD."""
        rows = []
        for c in ([cell] if cell else list(self.cells["cell"])):
            labels, rho = self.rho_draws(c)
            level = 1 - SLOW_LEVEL / max(len(labels), 1)
            total = rho.sum(axis=1)
            for j, label in enumerate(labels):
                v = rho[:, j]
                others = v - (total - v) / max(len(labels) - 1, 1)  # against the mean of the cell's other ranks
                p = float((v > 0).mean())
                rows.append({"cell": c, "rank": label, "rho_mean": float(v.mean()),
                             "rho_lo": float(np.quantile(v, _QUANTILES[0])), "rho_hi": float(np.quantile(v, _QUANTILES[1])),
                             "vs_others_mean": float(others.mean()), "vs_others_lo": float(np.quantile(others, _QUANTILES[0])),
                             "vs_others_hi": float(np.quantile(others, _QUANTILES[1])), "level": _INTERVAL, "p_positive": p,
                             "slow": bool(p >= level and np.median(v) >= SLOW_MIN_SD)})
        return pd.DataFrame(rows)

    def variance_shares(self) -> pd.DataFrame:
        """Per cell the block variance (pooled-sd units²) split into shared (drift + shocks), per rank
        and idiosyncratic, as shares; the per-rank part with the 90% interval of its posterior
        (sigma_rho²·(1 − 1/K)); the drift's range over the job (sd of a moving average of the
        collective means)."""
        out = []
        cells = self.cells
        for i, row in cells.iterrows():
            labels, _ = self.rho_draws(row["cell"], draws=10)
            if "sigma_rho" in self.posterior and len(labels) >= 2:
                coords = list(self.posterior["rank_cell"].values)
                sr2 = self._post("sigma_rho")[:, coords.index(row["cell"])] ** 2
            else:
                sr2 = np.zeros(1)
            frame = self.rank_frame
            k = float(frame.loc[frame["cell"] == i, "rank_k"].mean()) if labels else 1.0
            if self.attrs["centring"] == "centre":
                sr2 = sr2 * (1 - 1 / k)
            shared, idio = float(row["var_shared"]), float(row["sigma_e"]) ** 2
            total = shared + float(np.median(sr2)) + idio
            lo, hi = np.quantile(sr2, _QUANTILES)
            out.append({"cell": row["cell"], "share_shared": shared / total, "share_rank": float(np.median(sr2)) / total,
                        "share_rank_lo": float(lo) / total, "share_rank_hi": float(hi) / total,
                        "share_idiosyncratic": idio / total, "share_drift": float(row["drift_var"]) / total,
                        "share_shocks": float(row["shock_var"]) / total, "drift_range_sd": float(row["drift_range"]),
                        "sd_unit": "the block's pooled within-sample sd (methodology §5)"})
        return pd.DataFrame(out)

    # ------------------------------------------------------------------ prediction
    def tau_draws(self, n: Sequence[int] | NDArray[Any], cell: str | None = None, *, gpu: str | None = None,
                  precision: str | None = None, fleet: str = "new", population: str = "fleet",
                  exclude_ranks: Sequence[str] = (), draws: int = 1000, seed: int = 0,
                  simex: bool = True) -> NDArray[np.float64]:
        """Draws of D(n) = E[max_n V − mean_n V] (draws, len(n)), in units of the block's pooled sd
        (tau(n) = b·D(n)): a measured cell by label, or an unseen GPU/precision (``gpu``, ``precision``)
        from the population (labelled population-level by the caller).

        ``fleet``: "new" — "a job of n ranks from the same fleet"; "these-plus-typical" — the
        cell's observed ranks plus n − R new ones (n < R: the observed ranks' geometric-mean CDF to
        the power n, an approximation). ``population``: "fleet" — a new rank is one of the cell's
        ranks at random (Bayesian-bootstrap weights); "normal" — rho ~ Normal(0, sigma_rho).
        ``exclude_ranks``: ranks left out of the fleet (what tau would be without a slow rank).
        """
        if fleet not in FLEETS:
            raise InputError(f"fleet must be one of {FLEETS}, got {fleet!r}")
        if population not in POPULATIONS:
            raise InputError(f"population must be one of {POPULATIONS}, got {population!r}")
        ns = np.asarray([int(v) for v in n], dtype=float)
        if ns.size == 0 or np.any(ns < 1):
            raise InputError("rank model: domain sizes n must be positive integers")
        rng = np.random.default_rng(seed)
        if cell is None:
            return self._unseen_draws(ns, gpu, precision, fleet, population, draws, rng, simex)
        i = self._cell_index(cell)
        xi, sigma = self._thin(self._post("xi")[:, i], draws), self._thin(self._post("sigma")[:, i], draws)
        comp = self._components(cell, xi.size, fleet, population, exclude_ranks, rng)
        atoms = self.tree["atoms"].to_dataset().to_dataframe()
        body = atoms[(atoms["cell"] == i) & (atoms["lam"] == 1)]
        out = _delay_draws(body["atom"].to_numpy(), body["count"].to_numpy(), int(body["n_tail"].iloc[0]),
                           float(body["threshold"].iloc[0]), sigma, xi, comp, ns, rng)
        if simex and self.attrs["centring"] == "centre":
            # the factor, and its sampling error: each draw takes one bootstrap replicate's deviation
            rep = np.asarray(rng.integers(SIMEX_BOOT, size=out.shape[0]), dtype=np.int64)
            out = out * self._simex_factor(i, ns, fleet, population, exclude_ranks, cell)[None, :] \
                * np.exp(self._simex_spread(i, ns, rep))
        return out

    @staticmethod
    def _thin(v: NDArray[np.float64], draws: int) -> NDArray[np.float64]:
        return v[np.linspace(0, v.size - 1, min(draws, v.size)).astype(int)]

    def _components(self, cell: str, n_draws: int, fleet: str, population: str, exclude: Sequence[str],
                    rng: np.random.Generator, point: bool = False) -> dict[str, NDArray]:
        """The rank-effect mixture per draw: population shifts and weights, and the observed ranks' shifts."""
        labels, rho = self.rho_draws(cell, draws=n_draws, seed=int(rng.integers(1 << 30)))
        if point:
            rho = np.broadcast_to(rho.mean(axis=0), rho.shape)
        keep = np.array([lab not in set(exclude) for lab in labels], dtype=bool)
        if len(labels) == 0 or not keep.any():
            pop_shift, pop_w = np.zeros((n_draws, 1)), np.ones((n_draws, 1))
        elif population == "fleet":
            pop_shift = rho[:, keep]
            pop_w = np.ones_like(pop_shift) if point else rng.standard_gamma(1.0, size=pop_shift.shape)
            pop_w = pop_w / pop_w.sum(axis=1, keepdims=True)
        else:
            coords = list(self.posterior["rank_cell"].values)
            sr = self._thin(self._post("sigma_rho")[:, coords.index(cell)], n_draws)
            q = (np.arange(16) + 0.5) / 16
            from scipy.stats import norm

            pop_shift = sr[:, None] * norm.ppf(q)[None, :]
            pop_w = np.full_like(pop_shift, 1 / 16)
        own = rho[:, keep] if fleet == "these-plus-typical" else np.zeros((n_draws, 0))
        return {"pop_shift": pop_shift, "pop_w": pop_w, "own": own}

    def _simex_factor(self, i: int, ns: NDArray, fleet: str, population: str, exclude: Sequence[str],
                      cell: str) -> NDArray[np.float64]:
        """SIMEX (Cook & Stefanski 1994) for the centring noise: the point prediction from the
        empirical distribution of the residuals with that noise as observed (lam = 1) and added once
        and twice more (lam = 2, 3), extrapolated to none by the least-squares line in lam:
        P(0) = (4 P(1) + P(2) − 2 P(3))/3; the factor P(0)/P(1) per n (1 at n = 1), held at its value
        at n = N/SIMEX_REACH beyond it (the empirical maximum needs data; for heavier tails the true
        factor rises towards 1 with n, so holding it errs low by about 1% at 4096 for Student-t5)."""
        atoms = self.tree["atoms"].to_dataset().to_dataframe()
        n_values = int(self.cells["n_values"].iloc[i])
        reach = max(2.0, n_values / SIMEX_REACH)
        n_eval = np.minimum(ns, reach)
        comp = self._components(cell, 1, fleet, population, exclude, np.random.default_rng(12345), point=True)
        vals = []
        for lam in (0, 2, 3):
            a = atoms[(atoms["cell"] == i) & (atoms["lam"] == lam)]
            vals.append(_delay_draws(a["atom"].to_numpy(), a["count"].to_numpy(), 0, float(a["atom"].max()),
                                     np.ones(1), np.zeros(1), comp, n_eval, None, body_points=_POINT_BODY_POINTS)[0])
        p1, p2, p3 = vals
        p0 = simex_extrapolate(p1, p2, p3)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where((ns > 1) & (p1 > 0), p0 / p1, 1.0)

    def _simex_spread(self, i: int, ns: NDArray, replicate: NDArray[np.int64]) -> NDArray[np.float64]:
        """Per draw, the log SIMEX factor of its Bayesian-bootstrap replicate (``replicate``) less
        their mean (:func:`simex_boot`), at ``ns`` (linear in log n between the kept sizes, held
        beyond the reach, 0 at n = 1); zeros for a fit saved without them."""
        if "simex_boot" not in self.tree.children:
            return np.zeros((replicate.size, ns.size))
        boot = self.tree["simex_boot"].to_dataset().to_dataframe()
        boot = boot[boot["cell"] == i]
        grid = np.unique(boot["n"].to_numpy())
        dev = boot.sort_values(["replicate", "n"])["log_dev"].to_numpy().reshape(-1, grid.size)
        x = np.log(np.clip(ns, 1.0, grid[-1]))
        xg = np.log(np.concatenate([[1.0], grid]))
        out = np.stack([np.interp(x, xg, np.concatenate([[0.0], row])) for row in dev])
        return out[replicate % dev.shape[0]]

    def _unseen_draws(self, ns: NDArray, gpu: str | None, precision: str | None, fleet: str, population: str,
                      draws: int, rng: np.random.Generator, simex: bool) -> NDArray[np.float64]:
        """An unseen GPU and/or precision: its shape deviation from the fitted population, the pooled
        scale's population, the body and the rank effects of all cells pooled (population-level)."""
        if gpu is None or precision is None:
            raise InputError("rank model: name a cell, or both gpu and precision for a population-level prediction")
        cells = self.cells
        if ((cells["gpu"] == gpu) & (cells["precision"] == precision)).any():
            return self.tau_draws(ns, f"{gpu}|{precision}", fleet=fleet, population=population, draws=draws,
                                  simex=simex)
        post = self.posterior
        n_draws = min(draws, self._post("sigma").shape[0])
        xi = self._thin(self._post("xi0"), n_draws).copy() if "xi0" in post else np.zeros(n_draws)
        for factor, level in (("gpu", gpu), ("precision", precision)):
            if f"delta_{factor}" not in post:
                if "xi0" in post and not (cells[factor] == level).all():
                    raise InputError(f"rank model: {factor} {level!r} was not measured and the fit has one {factor} "
                                     f"level only: no population of {factor} shapes to predict it from")
                continue
            levels = list(post[factor].values)
            if level in levels:
                xi += self._thin(self._post(f"delta_{factor}")[:, levels.index(level)], n_draws)
            else:
                xi += self._thin(self._post(f"xi_sd_{factor}"), n_draws) * rng.standard_normal(n_draws)
        ls0 = self._thin(self._post("log_sigma0") if "log_sigma0" in post else np.log(self._post("sigma")[:, 0]), n_draws)
        ls_sd = self._thin(self._post("log_sigma_sd"), n_draws) if "log_sigma_sd" in post else np.zeros(n_draws)
        sigma = np.exp(ls0 + ls_sd * rng.standard_normal(n_draws))
        atoms = self.tree["atoms"].to_dataset().to_dataframe()
        body = atoms[atoms["lam"] == 1]
        pooled = np.sort(np.repeat(body["atom"].to_numpy(), 1))
        order = np.argsort(body["atom"].to_numpy())
        counts = body["count"].to_numpy()[order]
        n_tail = int(body.groupby("cell")["n_tail"].first().sum())
        t = float(np.average(body.groupby("cell")["threshold"].first(), weights=cells["n_values"]))
        if self.attrs.get("scale_pooling") == SCALE_POOLING and len(cells) > 1:
            # the population's scale is at the reference threshold: moved to the pooled body's t
            sigma = np.maximum(sigma + xi * (t - reference_threshold(cells["threshold"].to_numpy())), 1e-6 * sigma)
        keep = pooled <= t
        comps = [self._components(c, n_draws, fleet, population, (), rng) for c in cells["cell"]]
        comp = {"pop_shift": np.concatenate([c["pop_shift"] for c in comps], axis=1),
                "pop_w": np.concatenate([c["pop_w"] for c in comps], axis=1) / len(comps),
                "own": np.zeros((n_draws, 0))}
        out = _delay_draws(pooled[keep], counts[keep], n_tail + int(counts[~keep].sum()), t, sigma, xi, comp, ns, rng)
        if simex and self.attrs["centring"] == "centre":
            factors = np.mean([self._simex_factor(i, ns, "new", population, (), c)
                               for i, c in enumerate(cells["cell"])], axis=0)
            rep = np.asarray(rng.integers(SIMEX_BOOT, size=out.shape[0]), dtype=np.int64)
            spread = np.stack([self._simex_spread(i, ns, rep) for i in range(len(cells))]).mean(axis=0)
            out = out * factors[None, :] * np.exp(spread)
        return out


#: The last few :func:`_body_frames` results by the digest of their inputs: the fits of xi free and xi = 0
#: of one data set and seed (the rankmodel stage's two fits) share them instead of bootstrapping twice.
_BODY_MEMO: BoundedMemo[tuple[pd.DataFrame, list[pd.DataFrame]]] = BoundedMemo(
    2, lambda frames: (frames[0].copy(), [b.copy() for b in frames[1]]))


def _body_frames(cells: list[CellData], thresholds: list[float], centring: str,
                 seed: int) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """A fit's body, which depends on the data and the seed alone (not on the posterior): the atoms
    of each cell's values (``lam`` 1) and, with centring, its SIMEX sets (``lam`` 0, 2, 3) and their
    Bayesian-bootstrap deviations (one frame per cell). The same inputs give the same frames (the
    random stream is ``seed + 7919``'s), so they are computed once for the fits of one data set."""
    import hashlib

    digest = hashlib.sha256(f"{centring}|{seed}|{list(map(float, thresholds))}".encode())
    for c in cells:
        for arr in (c.w, c.noise_sd):
            digest.update(f"|{np.size(arr)}|".encode())
            digest.update(np.ascontiguousarray(arr, dtype=np.float64).tobytes())
    return _BODY_MEMO.get(digest.hexdigest(), lambda: _body_frames_of(cells, thresholds, centring, seed))


def _body_frames_of(cells: list[CellData], thresholds: list[float], centring: str,
                    seed: int) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """:func:`_body_frames`, computed."""
    atoms_rows, boot_rows = [], []
    rng = np.random.default_rng(seed + 7919)
    for i, c in enumerate(cells):
        v = np.sort(c.w)
        a, n, n_tail = _atoms(v, thresholds[i])
        atoms_rows.append(pd.DataFrame({"cell": i, "lam": 1, "atom": a, "count": n, "threshold": thresholds[i],
                                        "n_tail": n_tail}))
        if centring != "centre":
            continue
        # SIMEX sets (lam = 0 marks the values as observed, lam = 2, 3 with the centring noise added
        # once and twice more), empirical only: the factor is read where the data reach (_simex_factor)
        sets = simex_sets(c.w, c.noise_sd, rng)
        for lam, (a, n, _) in zip((0, 2, 3), sets, strict=True):
            atoms_rows.append(pd.DataFrame({"cell": i, "lam": lam, "atom": a, "count": n, "threshold": a[-1],
                                            "n_tail": 0}))
        grid, dev = simex_boot(sets, c.w.size, rng)
        boot_rows.append(pd.DataFrame({"cell": i, "replicate": np.repeat(np.arange(dev.shape[0]), grid.size),
                                       "n": np.tile(grid, dev.shape[0]), "log_dev": dev.ravel()}))
    return pd.concat(atoms_rows, ignore_index=True), boot_rows


def load_rank_model(path: str | os.PathLike[str]) -> RankModelFit:
    """Read a fit written by :meth:`RankModelFit.save`."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such rank-model fit file")
    from evtsync.evt.fitfile import read_netcdf_tree

    try:
        tree = read_netcdf_tree(p)[0]  # never hangs on damaged HDF5 metadata
    except FitError as exc:
        raise InputError(str(exc)) from None
    if tree.attrs.get("format") != _FORMAT:
        raise InputError(f"{p}: format {tree.attrs.get('format')!r}, expected {_FORMAT!r} (a rank-model fit)")
    return RankModelFit(tree)


# --------------------------------------------------------------------------------------------- integration


def _compress(shift: NDArray, weight: NDArray, limit: int = _MAX_MIX) -> tuple[NDArray, NDArray]:
    """At most ``limit`` mixture components per draw: sorted, grouped by equal cumulative weight,
    each group at its weighted mean shift."""
    if shift.shape[1] <= limit:
        return shift, weight
    order = np.argsort(shift, axis=1)
    s, w = np.take_along_axis(shift, order, 1), np.take_along_axis(weight, order, 1)
    group = np.minimum((np.cumsum(w, axis=1) - w / 2) * limit // 1, limit - 1).astype(int)
    out_w = np.zeros((s.shape[0], limit))
    out_s = np.zeros((s.shape[0], limit))
    rows = np.repeat(np.arange(s.shape[0]), s.shape[1])
    np.add.at(out_w, (rows, group.ravel()), w.ravel())
    np.add.at(out_s, (rows, group.ravel()), (w * s).ravel())
    with np.errstate(invalid="ignore", divide="ignore"):
        out_s = np.where(out_w > 0, out_s / out_w, 0.0)
    return out_s, out_w


def _delay_draws(atoms: NDArray, counts: NDArray, n_tail: int, t: float, sigma: NDArray, xi: NDArray,
                 comp: dict[str, NDArray], ns: NDArray, rng: np.random.Generator | None,
                 chunk: int = 100, body_points: int | None = None) -> NDArray[np.float64]:
    """D(n) = E[max_n V] − E[mean_n V] per draw for V = rho + e, e's distribution the body atoms
    (Bayesian-bootstrap weights; ``rng`` None: their counts, a point, or weights per draw when
    ``counts`` is (draws, atoms)) and the GPD tail above ``t``.

    E[max] = x0 + ∫ (1 − F_max) dx on a grid: uniform over the body (with every shift; ``body_points``
    points, default _BODY_POINTS), the tail in w = −log S (ranktail's quadrature variable, _W_POINTS
    points), and the analytic rest beyond it; E[mean] from the same grid (one rank from the population,
    e alone), so grid errors cancel and D(1) = 0 (docs/methodology.md, "The rank model": the quadrature
    and its error)."""
    n_draws = sigma.size
    out = np.empty((n_draws, ns.size))
    top = math.log(max(float(ns.max()), 2.0 ** 16)) + 30.0
    ww = np.linspace(0.0, top, _W_POINTS)
    for start in range(0, n_draws, chunk):
        sl = slice(start, min(n_draws, start + chunk))
        d = sl.stop - sl.start
        if rng is None:  # a point: the counts, or per-draw weights (d, A) as given
            g = (counts[sl] if counts.ndim == 2 else np.broadcast_to(counts, (d, counts.size))).astype(float)
            g_tail = np.full(d, float(n_tail))
        else:
            g = rng.standard_gamma(counts, size=(d, counts.size))
            g_tail = rng.standard_gamma(float(n_tail), size=d)
        total = g.sum(axis=1) + g_tail
        cum = np.cumsum(g, axis=1) / total[:, None]
        c = 1.0 - cum[:, -1]
        out[sl] = _delay_chunk(atoms, cum, t, c, sigma[sl], xi[sl], comp["pop_shift"][sl], comp["pop_w"][sl],
                               comp["own"][sl], ns, ww, body_points or _BODY_POINTS)
    return out


def _gpd_survival(y: NDArray, sigma: NDArray, xi: NDArray) -> NDArray:
    """The GPD's survival S(y) = (1 + xi·y/sigma)^(−1/xi) (exp(−y/sigma) at |xi| < 1e-8, 0 beyond a
    bounded tail's end) for excesses ``y`` >= 0, elementwise with ``sigma``, ``xi`` broadcast to it."""
    small = np.abs(xi) < 1e-8
    safe = np.where(small, 1.0, xi)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # beyond a bounded tail's end (xi < 0) log1p(−1) = −inf, times −1/xi > 0: S = 0
        out = np.exp(np.log1p(np.maximum(y * (safe / sigma), -1.0)) * (-1.0 / safe))
        if np.any(small):
            out = np.where(small, np.exp(-y / sigma), out)
    return out


def _simpson(w: NDArray) -> NDArray:
    """Simpson's weights on the uniform grid ``w`` (an odd number of points)."""
    out = np.ones(w.size)
    out[1:-1:2], out[2:-1:2] = 4.0, 2.0
    return out * (w[1] - w[0]) / 3.0


def _lattice_cdf(atoms: NDArray, cum: NDArray, t: float, c: NDArray, sigma: NDArray, xi: NDArray,
                 y: NDArray) -> NDArray:
    """F_e at the points ``y`` (L,) shared by every draw, (d, L): the body's cumulative weight of the
    atoms at or below y (``cum`` (d, A)) up to t, 1 − c·S_GPD(y − t) above."""
    out = np.concatenate([np.zeros((cum.shape[0], 1)), cum], axis=1)[:, np.searchsorted(atoms, y, side="right")]
    above = y > t
    out[:, above] = 1.0 - c[:, None] * _gpd_survival(y[above][None, :] - t, sigma[:, None], xi[:, None])
    return out


def _shifted(lattice: NDArray, u: NDArray, nb: int) -> NDArray:
    """F_e(xb_k − s) per draw (d, nb) from F_e on the lattice (:func:`_delay_chunk`): the lattice point
    k + u is xb_k − s; linear between the two lattice points around it."""
    m = np.floor(u).astype(np.int64)
    phi = (u - m)[:, None]
    idx = m[:, None] + np.arange(nb)[None, :]
    return (1 - phi) * np.take_along_axis(lattice, idx, axis=1) + phi * np.take_along_axis(lattice, idx + 1, axis=1)


def _mixed(lattice: NDArray, u: NDArray, weight: NDArray, nb: int) -> NDArray:
    """Sum_j weight_j F_e(xb_k − s_j) per draw (d, nb), :func:`_shifted` for every component at once:
    the lattice correlated with each draw's kernel of the components' interpolation weights (an FFT,
    so the cost does not grow with the number of components)."""
    from scipy import fft

    d = lattice.shape[0]
    m = np.floor(u).astype(np.int64)
    phi = u - m
    q0 = int(m.min())
    width = int(m.max()) - q0 + 2
    rows = np.broadcast_to(np.arange(d)[:, None] * width, m.shape)
    kernel = np.bincount(np.concatenate([(rows + m - q0).ravel(), (rows + m - q0 + 1).ravel()]),
                         np.concatenate([(weight * (1 - phi)).ravel(), (weight * phi).ravel()]),
                         minlength=d * width).reshape(d, width)
    part = lattice[:, q0:q0 + nb + width - 1]
    size = fft.next_fast_len(part.shape[1] + width - 1, real=True)
    conv = fft.irfft(fft.rfft(part, size, axis=1) * fft.rfft(kernel[:, ::-1], size, axis=1), size, axis=1)
    return np.clip(conv[:, width - 1:width - 1 + nb], 0.0, 1.0)


def _delay_chunk(atoms: NDArray, cum: NDArray, t: float, c: NDArray, sg: NDArray, x: NDArray, pop_shift: NDArray,
                 pop_weight: NDArray, own: NDArray, ns: NDArray, ww: NDArray, nb: int) -> NDArray[np.float64]:
    """:func:`_delay_draws` for one chunk of draws whose body weights are drawn (``cum``, ``c``).

    F_e is evaluated once per draw on a uniform lattice of the body grid's step h that reaches
    every shifted point xb_k − s (the shift 0 on lattice points), and F_e(xb_k − s) is read off it
    linearly between lattice points (docs/methodology.md, "The rank model", the quadrature and its
    error); beyond the body grid each component's tail is exact."""
    d = sg.size
    pop_s, pop_w = _compress(pop_shift, pop_weight)
    if own.shape[1] > _MAX_MIX:
        own_s, own_w = _compress(own, np.full_like(own, 1.0 / own.shape[1]))  # multiplicities: weights times R
        own_m = own_w * own.shape[1]
    else:
        own_s, own_m = own, np.ones_like(own)
    r_own = own.shape[1]
    all_s = np.concatenate([pop_s, own_s, np.zeros((d, 1))], axis=1)
    s_min, s_max = float(all_s.min()), float(all_s.max())
    # the body grid: the lowest shifted atom to the highest shifted threshold, two steps more each side, so
    # that every step of F_e read between lattice points (a ramp one step wide) lies whole on the grid
    h = max(t + s_max - atoms[0] - s_min, 1e-9) / (nb - 5)
    lo = atoms[0] + s_min - 2 * h
    xb = lo + h * np.arange(nb)
    hi_body = float(xb[-1])
    # the lattice y_i = lo + (i − p)·h: from below lo − s_max to above hi_body − s_min, the shift 0 on its points
    p = int(math.ceil(s_max / h)) + 1
    n_lat = nb + p + int(math.ceil(-s_min / h)) + 2
    lattice = _lattice_cdf(atoms, cum, t, c, sg, x, lo + (np.arange(n_lat) - p) * h)

    def u_of(shift: NDArray) -> NDArray:  # the lattice position of xb_0 − shift
        return np.clip(p - shift / h, 0.0, n_lat - nb - 1)

    with np.errstate(over="ignore"):
        exc = np.where(np.abs(x[:, None]) < 1e-8, sg[:, None] * ww[None, :],
                       sg[:, None] * np.expm1(x[:, None] * ww[None, :]) / np.where(x == 0, 1, x)[:, None])
    exc = np.where(np.isfinite(exc), exc, np.nan)
    xt = hi_body + exc[:, 1:]  # (d, W-1): beyond the body grid
    grid = np.concatenate([np.broadcast_to(xb, (d, xb.size)), xt], axis=1)
    grid = np.where(np.isnan(grid), np.nanmax(np.where(np.isnan(grid), -np.inf, grid), axis=1, keepdims=True), grid)
    xt = grid[:, nb:]

    def tail_surv(shift: NDArray) -> NDArray:  # S_GPD beyond the body grid, every component (d, J, W-1)
        return _gpd_survival(xt[:, None, :] - shift[:, :, None] - t, sg[:, None, None], x[:, None, None])

    with np.errstate(divide="ignore"):
        log_pop = np.concatenate([np.log(_mixed(lattice, u_of(pop_s), pop_w, nb)),
                                  np.log1p(-c[:, None] * np.einsum("dj,djw->dw", pop_w, tail_surv(pop_s)))], axis=1)
        log_e = np.concatenate([np.log(_shifted(lattice, u_of(np.zeros(d)), nb)),
                                np.log1p(-c[:, None] * tail_surv(np.zeros((d, 1)))[:, 0])], axis=1)
        log_own = np.zeros_like(log_pop)
        if r_own:
            own_tail = np.log1p(-c[:, None, None] * tail_surv(own_s))
            for j in range(own_s.shape[1]):
                log_own += own_m[:, j:j + 1] * np.concatenate(
                    [np.log(np.maximum(_shifted(lattice, u_of(own_s[:, j]), nb), 0.0)), own_tail[:, j]], axis=1)
    # the quadrature's weights: the trapezoid rule on the body grid, Simpson's rule in w beyond it
    # (x = hi_body + sigma (e^(xi w) − 1)/xi, dx/dw = sigma e^(xi w)); and 1 − F_max beyond the grid:
    # n_eff (1 − F) with the GPD's integral of the survival, ∫_y^∞ S = (sigma + xi·y) S(y)/(1 − xi)
    weight = np.empty(grid.shape)
    weight[:, :nb] = h
    weight[:, [0, nb - 1]] = h / 2
    with np.errstate(over="ignore", invalid="ignore"):
        tail_weight = _simpson(ww)[None, :] * sg[:, None] * np.exp(x[:, None] * ww[None, :])
    weight[:, nb - 1] += tail_weight[:, 0]
    weight[:, nb:] = tail_weight[:, 1:]
    x0 = grid[:, 0]
    y_end = grid[:, -1:] - pop_s - t
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        beyond = (pop_w * c[:, None] * (sg[:, None] + x[:, None] * y_end)
                  * _gpd_survival(y_end, sg[:, None], x[:, None])).sum(axis=1)
        beyond = np.nan_to_num(np.where(x < 1, beyond / np.maximum(1 - x, 1e-12), np.inf), nan=0.0)

    def integral(log_f: NDArray, n_pop: float) -> NDArray:
        """E[max] = x0 + ∫ (1 − F_max): the grid's quadrature plus the rest beyond it."""
        return x0 - np.einsum("dg,dg->d", np.expm1(log_f), weight) + n_pop * beyond

    out = np.empty((d, ns.size))
    e_pop = integral(log_pop, 1.0)
    e_e = integral(log_e, 0.0)
    own_mean_shift = own.mean(axis=1) if r_own else np.zeros(d)
    for j, nn in enumerate(ns):
        if r_own == 0:
            e_max = integral(nn * log_pop, nn)
            e_mean = e_pop
        elif nn >= r_own:
            extra = (nn - r_own) * log_pop if nn > r_own else 0.0  # no 0 * (-inf) below the support
            e_max = integral(log_own + extra, nn)
            e_mean = ((nn - r_own) * e_pop + r_own * (e_e + own_mean_shift)) / nn
        else:
            e_max = integral(log_own * (nn / r_own), nn)
            e_mean = e_e + own_mean_shift
        out[:, j] = np.where(x < 1, e_max - e_mean, np.inf)
    return out


# --------------------------------------------------------------------------------------------- comparison


def compare_shape(long: pd.DataFrame, **options: Any) -> tuple[pd.DataFrame, RankModelFit, RankModelFit]:
    """Gumbel vs Fréchet from the same model: xi ≡ 0 against xi free, same hierarchy, same data
    (the excesses over the same thresholds), by PSIS-LOO (evtsync.evt.compare.psis_loo_pointwise).

    Returns (table with elpd_loo ± se, Δelpd to the best ± se, p_loo, Pareto-k > 0.7 count;
    the free fit; the xi ≡ 0 fit)."""
    free = fit_rank_model(long, free_shape=True, **options)
    fixed = fit_rank_model(long, free_shape=False, **options)
    return loo_table([("xi free (GPD)", free), ("xi = 0 (exponential tail, Gumbel domain)", fixed)]), free, fixed


def pointwise_loglik(fit: RankModelFit) -> NDArray[np.float64]:
    """GPD log-likelihood of every excess at every draw (draws, excesses)."""
    ex = fit.tree["excess"].to_dataset()
    cell = ex["cell"].values.astype(int)
    y = ex["excess"].values
    sigma, xi = fit._post("sigma"), fit._post("xi")
    return gpd_logpdf(y[None, :], sigma[:, cell], xi[:, cell])


def loo_table(fits: list[tuple[str, RankModelFit]]) -> pd.DataFrame:
    """PSIS-LOO of each fit's excesses, best first, with the difference to the best and its se."""
    from evtsync.evt.compare import psis_loo_pointwise

    rows, pointwise = [], {}
    for label, fit in fits:
        elpd_i, p_i, k = psis_loo_pointwise(pointwise_loglik(fit))
        pointwise[label] = elpd_i
        rows.append({"model": label, "elpd_loo": float(elpd_i.sum()),
                     "se": float(np.sqrt(elpd_i.size * np.var(elpd_i))), "p_loo": float(p_i.sum()),
                     "pareto_k_gt_0.7": int((np.asarray(k) > 0.7).sum()), "n_obs": int(elpd_i.size)})
    table = pd.DataFrame(rows).sort_values("elpd_loo", ascending=False).reset_index(drop=True)
    best = pointwise[table["model"].iloc[0]]
    table["d_elpd"] = [float(pointwise[m].sum() - best.sum()) for m in table["model"]]
    table["d_se"] = [float(np.sqrt(best.size * np.var(pointwise[m] - best))) for m in table["model"]]
    return table


# --------------------------------------------------------------------------------------------- prediction tables


#: What a population-level row of the rank model is (an unseen GPU or precision): the tables' attrs
#: ``population_note`` (:attr:`RankModelPrediction.population_note`); each such row's ``note`` is
#: :data:`POPULATION_CELL_NOTE`.
POPULATION_NOTE = ("population-level prediction by the rank model: a GPU or precision without traces; its shape "
                   "deviation is drawn, per posterior draw, from the fitted population of shapes (a measured level "
                   "keeps its own), its scale from the scale population, and the body and rank effects are those of "
                   "all measured cells pooled (docs/methodology.md, \"The rank model\")")
POPULATION_CELL_NOTE = "population-level (rank model)"


def fit_table(table: pd.DataFrame, *, seed: int = DEFAULT_SEED, source: str = "z-score table",
              refused: dict[str, str] | None = None, **options: Any) -> RankModelFit:
    """The rank model (xi free) of a z-score table's cells, for the prediction tables.

    A cell with fewer than RANKTAIL_MIN_VALUES rank values cannot carry its tail: with ``refused``
    a dict it is left out and its reason recorded there under the cell's label (its values
    counted in the reason); None: ``InputError``. The fit records the refused cells in its attrs
    (``refused``, JSON). ``options`` go to :func:`fit_rank_model` (sampler settings)."""
    import json

    long = rank_table_from_zscores(table, source)
    counts = long.groupby(list(_GROUPS), sort=True, observed=True).size()
    small = {f"{g}|{p}": int(c) for (g, p), c in counts.items() if c < RANKTAIL_MIN_VALUES}
    if small and refused is None:
        cell, count = next(iter(small.items()))
        raise InputError(f"{source}: cell {cell} has {count} rank value(s); the rank model's tail needs at least "
                         f"{RANKTAIL_MIN_VALUES}")
    reasons = {c: f"{n} rank value(s), fewer than the {RANKTAIL_MIN_VALUES} the rank model's tail needs"
               for c, n in small.items()}
    if refused is not None:
        refused.update(reasons)
    label = long["gpu"].astype(str) + "|" + long["precision"].astype(str)
    kept = long[~label.isin(list(small))]
    if kept.empty:
        raise InputError(f"{source}: no cell has enough rank values for the rank model ("
                         + "; ".join(f"{c}: {r}" for c, r in reasons.items()) + ")")
    fit = fit_rank_model(kept, seed=seed, source=source, **options)
    fit.attrs["refused"] = json.dumps(reasons)
    return fit


class RankModelPrediction:
    """The rank model as a per-rank estimator of the prediction tables (evtsync.predict.tables; the
    seam of RankTailFit): ``expected_max(n, index)`` gives draws of D(n) = E[max_n V − mean_n V]
    (draws, cells, n) in units of the block sd, for "a job of n ranks from the same fleet"
    (:data:`RANK_FLEET_WORDING`); ``cells`` (cell, gpu, precision, n_obs) and :meth:`cell_info`
    (n_values, n_exceedances, note, the rank model's xi) label its rows. A GPU or precision that
    was not measured gets a population-level index from :meth:`population_index`."""

    name = MODEL_NAME
    family = "gpd-tail"
    kind = "hierarchical rank model"
    column = "u"
    point_estimate = "median"
    population_note = POPULATION_NOTE

    def __init__(self, fit: RankModelFit, *, draws: int = 1000, seed: int = 0, fleet: str = "new",
                 label: str = "rank model") -> None:
        import json

        self.fit = fit
        self.label = label  # which fit this is, in its convergence warning (the run's, or a check's)
        self.draws = int(draws)
        self.seed = int(seed)
        self.fleet = fleet
        self.refused: dict[str, str] = json.loads(str(fit.attrs.get("refused", "{}")) or "{}")
        cells = fit.cells
        self._cells = pd.DataFrame({"cell": cells["cell"].astype(str), "gpu": cells["gpu"].astype(str),
                                    "precision": cells["precision"].astype(str),
                                    "n_obs": cells["n_values"].astype(int)})
        self._population: list[tuple[str, str]] = []

    @property
    def cells(self) -> pd.DataFrame:
        """One row per measured cell: ``cell``, ``gpu``, ``precision``, ``n_obs`` (rank values)."""
        return self._cells

    @property
    def converged(self) -> bool:
        """The rank model's convergence (:attr:`RankModelFit.converged`)."""
        return self.fit.converged

    @property
    def convergence_note(self) -> str:
        """"" when converged, else a warning naming the rank model and its convergence line."""
        return "" if self.converged else f"WARNING: {self.label} {self.fit.convergence_note}"

    def cell_draws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Not available: the rank model has no GEV parameters (``InputError``)."""
        raise InputError("the rank model has no GEV parameters (mu, sigma, xi): it models every rank's value; ask a "
                         "GEV fit (--estimator centred) for them")

    def population_index(self, gpu: str, precision: str) -> int:
        """The index :meth:`expected_max` takes for an unseen GPU and/or precision (population-level);
        ``InputError`` when the fit has no population to draw it from (one level of the factor)."""
        key = (str(gpu), str(precision))
        if key not in self._population:
            self.fit.tau_draws([2], gpu=key[0], precision=key[1], draws=2, simex=False)  # raises when it cannot
            self._population.append(key)
        return len(self._cells) + self._population.index(key)

    def expected_max(self, n: Sequence[int], index: Sequence[int] | None = None) -> NDArray[np.float64]:
        """Draws of D(n) per cell (draws, cells, len(n)), sd units; an index past the measured cells is a
        population-level cell of :meth:`population_index`."""
        idx = range(len(self._cells)) if index is None else [int(i) for i in index]
        out = []
        for i in idx:
            if i < len(self._cells):
                out.append(self.fit.tau_draws(list(n), str(self._cells["cell"].iloc[i]), fleet=self.fleet,
                                              draws=self.draws, seed=self.seed + i))
            else:
                gpu, precision = self._population[i - len(self._cells)]
                out.append(self.fit.tau_draws(list(n), gpu=gpu, precision=precision, fleet=self.fleet,
                                              draws=self.draws, seed=self.seed + i))
        return np.stack(out, axis=1)

    def cell_info(self, level: float = INTERVAL_LEVEL) -> pd.DataFrame:
        """Per cell (measured, then population-level): rank values, exceedances, threshold, the rank
        model's xi (``gpd_xi_mean``, ``gpd_xi_lo``/``gpd_xi_hi`` at ``level``) and notes."""
        xi = self.fit._post("xi")
        q = ((1 - level) / 2, (1 + level) / 2)
        cells = self.fit.cells
        rows = []
        for i, row in cells.iterrows():
            lo, hi = np.quantile(xi[:, i], q)
            note = f"{int(row['n_dropped'])} values left out: {row['dropped']}" if int(row["n_dropped"]) else ""
            rows.append({"cell": str(row["cell"]), "n_values": int(row["n_values"]),
                         "n_exceedances": int(row["n_exceedances"]), "threshold": float(row["threshold"]),
                         "gpd_xi_mean": float(xi[:, i].mean()), "gpd_xi_lo": float(lo), "gpd_xi_hi": float(hi),
                         "note": note})
        for gpu, precision in self._population:
            rows.append({"cell": f"{gpu}|{precision}", "n_values": np.nan, "n_exceedances": np.nan,
                         "threshold": np.nan, "gpd_xi_mean": np.nan, "gpd_xi_lo": np.nan, "gpd_xi_hi": np.nan,
                         "note": POPULATION_CELL_NOTE})
        return pd.DataFrame(rows)
