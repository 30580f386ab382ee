"""Build the PyMC model of a :class:`~evtsync.evt.spec.ModelSpec` on a z-score table.

Design choices that make the fit fast and robust at 250k z-scores (issue 9):

* Cells. The rows are grouped into cells, one per combination of the spec's ``data.groups``
  columns (e.g. GPU x precision), and each cell gets its own observed variable with scalar
  parameters. The log density is then one fused elementwise loop per cell and its gradient a
  plain sum: no gather of per-row parameters and no scatter-add of per-row gradients.
* Shape. ``xi = xi0 + delta_f[level]`` summed over the spec's factors, plus (with
  ``xi.cell_sd_prior``) a cell effect in the space orthogonal to that additive surface, so a
  cell can leave the surface when its data say so. Every ``delta_f`` sums to zero
  (``ZeroSumNormal``) so that xi0 and the deltas are identified. A factor with fewer than
  ``many_levels`` levels gets the zero-avoiding ``few_levels_sd_prior`` for its spread (the
  spread of 2-3 levels is not identified by the data, and a prior with mass at zero made a
  funnel: hundreds of divergences per fit with no effect); from ``many_levels`` on,
  ``group_sd_prior``. Each term is centred when the data pin it down, non-centred otherwise
  (:func:`choose_parametrization`).
* Location and scale. ``pooling = "partial"``: ``mu = mu_mean + zero-sum deviations`` and
  ``log sigma = log sigma_gmean + zero-sum deviations`` with fitted spreads (``mu_sd``,
  ``log_sigma_sd``); the cells' average instead of a population mean, which would make a
  funnel with the spread.
* Start. The support ``1 + xi (z - mu)/sigma > 0`` makes random starting points useless
  (most fall outside). The initial point is the per-cell maximum-likelihood fit, projected on
  the additive structure and re-fitted for mu and sigma at that xi so that every z-score lies
  inside the support; xi is never started at exactly 0.
* Support wall. With small cells (and large cells whose extreme z-score sits near the end
  point of the support) the posterior reaches the region where some z-score leaves the
  support and the likelihood drops to zero; NUTS then diverges at that wall. For those cells
  sigma is sampled as ``bound(mu, xi) + exp(u)`` (with the Jacobian), where the bound is a
  smooth maximum of ``xi (mu - z_min)``, ``xi (mu - z_max)`` and 0 at a width of 0.2 of the
  cell's robust scale (:func:`support_bound`), so every point is inside the support. It lies
  above the exact bound by at most width·ln 3 at xi = 0 and exponentially less elsewhere; with
  the width from the pooled sd of all cells (the first version) it cut off sigma the
  likelihood allows in small cells (SBC in docs/bayesian.md). Other cells keep the plain
  log-sigma (closer to Gaussian there); ``[sigma] support_transform`` overrides the automatic,
  per-cell choice.
* Scale. ``data.scale = "z"`` models refuse data far outside the z-score scale of their
  priors (:func:`check_scale`); ``"raw"`` models standardise each cell by its median and IQR
  and map the posterior back (:func:`to_data_scale`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
import xarray as xr

from evtsync.core.errors import EvtsyncError, InputError
from evtsync.evt.distribution import GEV, gev_logp_sum_cells
from evtsync.evt.families import XI_MAGNITUDE
from evtsync.evt.families import family as family_of
from evtsync.evt.spec import ModelSpec, Prior

log = logging.getLogger("evtsync.evt.model")

CELL_SEP = "|"
#: Rows used at most per cell for the initial-point MLE (it is only a starting point).
INIT_MLE_MAX_ROWS = 5_000


@dataclass
class ModelData:
    """Z-scores sorted by cell, with the cell table and the original row order."""

    z: np.ndarray
    order: np.ndarray
    cell_of_obs: np.ndarray
    cells: pd.DataFrame
    factor_levels: dict[str, list[str]] = field(default_factory=dict)
    n_skipped: int = 0
    #: Per cell, the centre and scale the model's z-scores were standardised with
    #: (``data.scale = "raw"``: median and IQR / 1.5725 of the cell; else 0 and 1).
    cell_centre: np.ndarray | None = None
    cell_scale: np.ndarray | None = None
    #: The values the model sees; ``None`` only until ``__post_init__`` sets it to ``z``.
    z_model: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        n_cells = len(self.cells)
        if self.cell_centre is None:
            self.cell_centre = np.zeros(n_cells)
        if self.cell_scale is None:
            self.cell_scale = np.ones(n_cells)
        if self.z_model is None:
            self.z_model = self.z

    @property
    def standardised(self) -> bool:
        """Whether the model sees standardised values (``data.scale = "raw"``)."""
        return self.z_model is not self.z

    @property
    def cell_labels(self) -> list[str]:
        """One label per cell, group values joined by ``|`` (``all`` when pooled)."""
        return list(self.cells["cell"])

    def cell_slice(self, i: int) -> slice:
        """Rows of cell ``i`` in the sorted arrays."""
        row = self.cells.iloc[i]
        return slice(int(row["start"]), int(row["stop"]))


def prepare_data(table: pd.DataFrame, spec: ModelSpec, source: str = "z-score table") -> ModelData:
    """Check the columns the spec needs, drop non-finite z-scores (counted), sort by cell."""
    needed = [spec.column, *spec.groups]
    missing = [c for c in needed if c not in table.columns]
    if missing == ["y"] and "z" in table.columns:
        raise InputError(
            f"{source}: no column 'y' (the centred block maximum (M - block mean)/pooled sd) needed by model "
            f"{spec.name!r} ({spec.path}): the table was written before the calibrated estimator of tau(n) existed. "
            "Rerun `evtsync blocks` on the traces to write it, or fit the paper's estimator with --column z "
            "(biased low at n > m, docs/methodology.md)")
    if missing:
        raise InputError(
            f"{source}: missing column(s) {missing} needed by model {spec.name!r} ({spec.path}); "
            f"columns present: {list(table.columns)}"
        )
    try:
        z_all = pd.to_numeric(table[spec.column], errors="coerce").to_numpy(dtype=float)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{source}: column {spec.column!r} is not numeric: {exc}") from exc
    keep = np.isfinite(z_all)
    for g in spec.groups:
        keep &= table[g].notna().to_numpy()
    n_skipped = int((~keep).sum())
    if n_skipped:
        log.warning("%s: skipped %d of %d rows with a missing or non-finite %s or group label",
                    source, n_skipped, len(z_all), spec.column)
    if keep.sum() < 3:
        raise InputError(f"{source}: fewer than 3 usable z-scores in column {spec.column!r}")
    rows = np.flatnonzero(keep)
    factor_levels: dict[str, list[str]] = {}
    if spec.groups:
        # combined cell code from each column's sorted level code (vectorised: 250k rows)
        codes = []
        for g in spec.groups:
            code, levels = pd.factorize(table[g].to_numpy()[keep].astype(str), sort=True)
            codes.append(code)
            factor_levels[g] = [str(v) for v in levels]
        combined = np.ravel_multi_index(codes, [len(factor_levels[g]) for g in spec.groups])
        present, inverse = np.unique(combined, return_inverse=True)
        level_idx = np.unravel_index(present, [len(factor_levels[g]) for g in spec.groups])
        cell_values = {g: np.array(factor_levels[g], dtype=object)[level_idx[k]] for k, g in enumerate(spec.groups)}
        labels = [CELL_SEP.join(str(cell_values[g][i]) for g in spec.groups) for i in range(len(present))]
    else:
        inverse = np.zeros(len(rows), dtype=np.int64)
        cell_values = {}
        labels = ["all"]
    order_in_kept = np.argsort(inverse, kind="stable")
    cell_of_obs = inverse[order_in_kept]
    counts = np.bincount(inverse, minlength=len(labels))
    stops = np.cumsum(counts)
    cells = pd.DataFrame({"cell": labels, "n_obs": counts, "start": stops - counts, "stop": stops})
    for g in spec.groups:
        cells[g] = cell_values[g]
        factor_levels[g] = sorted(cells[g].unique().tolist())
    for i, row in cells.iterrows():
        if row["n_obs"] < 3:
            raise InputError(f"{source}: cell {row['cell']!r} has only {row['n_obs']} z-score(s); need >= 3")
        del i
    data = ModelData(
        z=z_all[rows][order_in_kept],
        order=rows[order_in_kept],
        cell_of_obs=cell_of_obs,
        cells=cells,
        factor_levels=factor_levels,
        n_skipped=n_skipped,
    )
    if spec.scale == "raw":
        _standardise_cells(data, source)
    return data


def _standardise_cells(data: ModelData, source: str) -> None:
    """``data.scale = "raw"``: the model sees (z - centre) / scale per cell, centre and scale
    the location and scale of a Gumbel with the cell's median and IQR (so that the z-score
    priors apply to any unit); the posterior is mapped back by :func:`to_data_scale`."""
    centre = np.zeros(len(data.cells))
    scale = np.ones(len(data.cells))
    z_model = np.empty_like(data.z)
    for i, cell in enumerate(data.cell_labels):
        sl = data.cell_slice(i)
        loc, sc = robust_gumbel(data.z[sl])
        if not sc > 0:
            sd = float(np.std(data.z[sl]))
            if not sd > 0:
                raise InputError(f"{source}: cell {cell!r}: all values are equal; a GEV scale cannot be fitted")
            sc = sd * np.sqrt(6.0) / np.pi
        centre[i], scale[i] = loc, sc
        z_model[sl] = (data.z[sl] - loc) / sc
    data.cell_centre, data.cell_scale, data.z_model = centre, scale, z_model


def to_data_scale(built: BuiltModel, posterior: xr.Dataset) -> xr.Dataset:
    """Posterior ``mu`` and ``sigma`` per cell back in the data's units (``scale = "raw"``).

    ``mu = centre + scale * mu_model`` and ``sigma = scale * sigma_model`` per cell; xi is
    scale-free. Other variables (``sigma_log_excess``, spreads) stay on the model's scale.
    """
    data = built.data
    if not data.standardised:
        return posterior
    centre = xr.DataArray(data.cell_centre, dims="cell", coords={"cell": posterior["cell"].values})
    scale = xr.DataArray(data.cell_scale, dims="cell", coords={"cell": posterior["cell"].values})
    out = posterior.copy()
    out["mu"] = (centre + scale * posterior["mu"]).transpose(*posterior["mu"].dims)
    out["sigma"] = (scale * posterior["sigma"]).transpose(*posterior["sigma"].dims)
    return out


def _subsample(z: np.ndarray, limit: int) -> np.ndarray:
    if len(z) <= limit:
        return z
    return z[:: int(np.ceil(len(z) / limit))]


def _support_ok(z: np.ndarray, mu: float, sigma: float, xi: float) -> bool:
    return bool(np.all(1.0 + xi * (z - mu) / sigma > 0))


def _feasible_sigma(z: np.ndarray, mu: float, sigma: float, xi: float) -> float:
    """Smallest inflation of sigma that puts every z inside the support (with 5% margin)."""
    if xi > 0:
        need = xi * (mu - z.min())
    elif xi < 0:
        need = -xi * (z.max() - mu)
    else:
        return sigma
    return max(sigma, 1.05 * need, 1e-6)


def fit_cell_mle(z: np.ndarray, family: str, xi_fixed: float | None = None) -> tuple[float, float, float]:
    """Maximum-likelihood (mu, sigma, xi) of one cell, for the initial point, by the MLE engine
    of :mod:`evtsync.evt.mle` (the one GEV MLE of the package).

    ``family`` (a name of :mod:`evtsync.evt.families`) constrains xi: gumbel fixes it at 0,
    frechet keeps it > 0, weibull < 0; ``xi_fixed`` re-fits mu and sigma only. A cell the engine cannot fit (too few or identical values, no optimum) starts from
    the moment estimates of the Gumbel. The result always has every z inside the support.
    """
    from evtsync.evt import mle

    fam = family_of(family)
    z = np.asarray(z, dtype=float)
    sd = float(np.std(z)) or 1.0
    sigma0 = sd * np.sqrt(6.0) / np.pi
    mu0 = float(np.mean(z)) - 0.5772156649 * sigma0
    try:
        if not fam.has_xi or xi_fixed is not None:
            xi_val = 0.0 if not fam.has_xi or xi_fixed is None else float(xi_fixed)
            mu, sigma, _ = mle.location_scale_at_xi(z, xi_val)
            return mu, _feasible_sigma(z, mu, sigma, xi_val), xi_val
        fit = mle.fit_gev(z)
        if not (fit.converged or fit.boundary):
            log.info("initial point: the cell's GEV MLE did not converge (%s); using its end point", fit.message)
        mu, sigma, xi = fit.mu, fit.sigma, fit.xi
    except EvtsyncError as exc:
        log.info("initial point: no MLE for a cell of %d z-scores (%s); moment estimates", z.size, exc)
        mu, sigma, xi = mu0, sigma0, 0.0 if not fam.has_xi or xi_fixed is None else float(xi_fixed)
    xi = fam.start_xi(xi)
    return mu, _feasible_sigma(z, mu, sigma, xi), xi


def _nonzero(x: float, eps: float = 1e-3) -> float:
    """Move ``x`` off exactly zero (the xi = 0 point is excluded from starting points)."""
    return float(x) if abs(x) >= eps else float(np.copysign(eps, x if x != 0 else 1.0))


_PRIOR_CLASSES = {
    "normal": pm.Normal, "halfnormal": pm.HalfNormal, "lognormal": pm.LogNormal,
    "exponential": pm.Exponential, "gamma": pm.Gamma, "uniform": pm.Uniform,
}


def _required(prior: Prior | None, what: str) -> Prior:
    """The prior that the spec's validation guarantees for ``what`` in this model structure."""
    if prior is None:
        raise ValueError(f"model specification has no prior for {what} (the spec parser should have refused it)")
    return prior


def _prior_rv(name: str, prior: Prior | None, **kwargs):
    """A model variable with the prior of the spec."""
    prior = _required(prior, name)
    return _PRIOR_CLASSES[prior.dist](name, **prior.params, **kwargs)


def _prior_dist(prior: Prior):
    """The prior as an unnamed distribution (for its log density)."""
    return _PRIOR_CLASSES[prior.dist].dist(**prior.params)


#: Width of the smooth maximum in the support bound of sigma, relative to each cell's robust
#: scale of z (IQR / 1.349). The exact bound max(0, xi (mu - z_min), xi (mu - z_max)) has a
#: kink at xi = 0; sampling sigma above it exactly makes a bend that NUTS crosses with small
#: steps (at Port Pirie a width of 1e-3 gave a bulk ESS of xi of ~180 per 2000 draws, 0.2 gave
#: ~350-750). :func:`support_bound` lies above the exact bound (so the sampler never meets the
#: wall) by at most width·ln 3 at xi = 0, and sigma in that sliver gets no prior mass: the
#: width must be small against every sigma the data allow. An sd is not a safe measure of
#: that: heavy tails (xi > 0) inflate it, and so did the pooled sd of all cells (between-cell
#: differences of mu) used at first, with which the SBC (docs/bayesian.md) found the true
#: sigma below the bound in 107 of 702 cells; with the per-cell robust scale, in none of the
#: same 702 (median excess 3.9% of the true sigma, where the bound is far below it).
SUPPORT_SMOOTHING = 0.2


def support_bound(values: list, width):
    """``width * log(1 + sum(exp(v / width)))`` >= max(0, *values), smooth (PyTensor or NumPy).

    For one cell the values are ``xi (mu - z_min)`` and ``xi (mu - z_max)``; the excess over
    the exact bound is ``width·ln 3`` at xi = 0 and vanishes exponentially in ``|xi|·distance /
    width`` away from it.
    """
    lib = pt if any(isinstance(v, pt.TensorVariable) for v in values) or isinstance(width, pt.TensorVariable) else np
    scaled = [v / width for v in values]
    top = scaled[0]
    for v in scaled[1:]:
        top = lib.maximum(top, v)
    top = lib.maximum(top, 0.0)
    total = lib.exp(-top)
    for v in scaled:
        total = total + lib.exp(v - top)
    return width * (top + lib.log(total))


def support_widths(data: ModelData) -> np.ndarray:
    """Per cell: the smoothing width of its support bound (``SUPPORT_SMOOTHING`` × its IQR /
    1.349; the pooled one for a cell whose IQR is 0)."""
    def robust_scale(z: np.ndarray) -> float:
        q1, q3 = np.quantile(z, [0.25, 0.75])
        return float(q3 - q1) / 1.349

    pooled = max(robust_scale(data.z_model), 1e-12)
    widths = []
    for i in range(len(data.cells)):
        scale = robust_scale(data.z_model[data.cell_slice(i)])
        widths.append(SUPPORT_SMOOTHING * (scale if scale > 0 else pooled))
    return np.array(widths)


def _support_bound_terms(mu_i, xi_i, z_min: float, z_max: float) -> list:
    """sigma must exceed both: xi (mu - z_min) (binding for xi > 0), xi (mu - z_max) (xi < 0)."""
    return [xi_i * (mu_i - z_min), xi_i * (mu_i - z_max)]


def _shared_sigma_bound(spec: ModelSpec, mu, xi_cells: list, z_min, z_max, width):
    """The smooth support bound of a sigma shared by every cell. With mu and xi shared too the
    binding terms are those of the smallest and the largest z-score (one cell's form);
    otherwise the smooth maximum of every cell's terms together."""
    n_cells = len(xi_cells)
    if n_cells == 1 or (spec.mu.pooling == "complete" and spec.xi.structure != "additive"):
        return support_bound(_support_bound_terms(mu if spec.mu.pooling == "complete" else mu[0], xi_cells[0],
                                                  z_min.min(), z_max.max()), width)
    mus = [mu if spec.mu.pooling == "complete" else mu[i] for i in range(n_cells)]
    terms = [v for i in range(n_cells) for v in _support_bound_terms(mus[i], xi_cells[i], z_min[i], z_max[i])]
    return support_bound(terms, width)


@dataclass
class BuiltModel:
    """A PyMC model with the data it was built on, its initial point and its choices.

    ``parametrization`` maps each factor of xi (and ``cell`` for the cell term) to
    ``centred``/``noncentred``; ``support_transform_cells`` has one flag per cell
    (``support_transform``: any of them); ``spread_priors`` names the prior chosen for each
    spread (by level count); ``cell_basis`` is the basis of the cell term (None: no term).
    """

    model: pm.Model
    data: ModelData
    spec: ModelSpec
    initial_point: dict[str, np.ndarray]
    parametrization: dict[str, str]
    obs_names: list[str]
    support_transform_cells: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    spread_priors: dict[str, str] = field(default_factory=dict)
    cell_basis: np.ndarray | None = None

    @property
    def support_transform(self) -> bool:
        """Whether at least one cell samples sigma above its support bound."""
        return bool(np.any(self.support_transform_cells))


def cell_interaction_note(built: BuiltModel) -> str:
    """One line on the cell term of xi (for the fit's attributes)."""
    if built.cell_basis is None:
        if built.spec.xi.cell_sd_prior is not None:
            return "none: the additive surface already has one free xi per cell"
        return "none (not in the spec)"
    return (f"xi_cell_effect: {built.cell_basis.shape[1]} coefficient(s) orthogonal to the additive surface, "
            f"spread xi_sd_cell ~ {_required(built.spec.xi.cell_sd_prior, "xi_sd_cell").describe()}, {built.parametrization['cell']}")


def level_index(data: ModelData, factor: str) -> np.ndarray:
    """Index of each cell's level of ``factor`` in ``data.factor_levels[factor]``."""
    levels = data.factor_levels[factor]
    return data.cells[factor].map({lv: k for k, lv in enumerate(levels)}).to_numpy().astype(int)


def interaction_basis(spec: ModelSpec, data: ModelData) -> np.ndarray:
    """Orthonormal basis (cells x r) of the cell effects that the additive surface cannot make.

    The additive part xi0 + sum of the factors' deltas spans the columns of the design
    ``[1, one-hot(level) per factor]`` over the present cells; the cell term lives in the
    orthogonal complement, so it never trades off against xi0 or the deltas (identified, no
    flat directions). ``r = 0`` (e.g. one factor, or one level) means no cell term.
    """
    n_cells = len(data.cells)
    cols = [np.ones((n_cells, 1))]
    for f in spec.xi.factors:
        idx = level_index(data, f)
        cols.append(np.eye(len(data.factor_levels[f]))[idx])
    design = np.hstack(cols)
    proj = np.eye(n_cells) - design @ np.linalg.pinv(design)
    vals, vecs = np.linalg.eigh((proj + proj.T) / 2)
    return vecs[:, vals > 0.5]


#: "auto" centres the mu deviations when every cell has at least this many z-scores: the
#: standard error of a cell's mu (~1.1 sigma / sqrt(n), 0.055 at n = 100, sigma = 0.5) is then
#: below the 2.5% quantile of the spread's prior (0.08), so the data, not the spread, set
#: each deviation's width (no funnel).
MU_CENTRED_MIN_OBS = 100


def choose_parametrization(spec: ModelSpec, data: ModelData, basis: np.ndarray | None = None) -> dict[str, str]:
    """Centred or non-centred per term: the factors of xi, the cell term, the mu deviations.

    Centred when the data pin the term down: every level of a factor has at least
    ``centred_min_obs`` z-scores; for the cell term, every coefficient's effective count
    ``sum_i B_ik^2 n_i`` (its information in z-scores: a coefficient spread over five cells of
    5,000 and one of 200 is pinned by the large ones) reaches it; the mu deviations from
    :data:`MU_CENTRED_MIN_OBS` per cell. Non-centred otherwise. With the spreads'
    zero-avoiding priors neither form has a funnel; the choice trims leapfrog steps.
    """
    out: dict[str, str] = {}
    forced = spec.xi.parametrization if spec.xi.parametrization != "auto" else None
    if spec.mu.pooling == "partial":
        out["mu"] = forced or ("centred" if int(data.cells["n_obs"].min()) >= MU_CENTRED_MIN_OBS else "noncentred")
    if not family_of(spec.family).allows_additive_xi or spec.xi.structure != "additive":
        return out
    for f in spec.xi.factors:
        per_level = data.cells.groupby(f)["n_obs"].sum()
        out[f] = forced or ("centred" if int(per_level.min()) >= spec.xi.centred_min_obs else "noncentred")
    if spec.xi.cell_sd_prior is not None:
        if basis is None:
            basis = interaction_basis(spec, data)
        if basis.shape[1]:
            n_eff = (basis**2 * data.cells["n_obs"].to_numpy()[:, None]).sum(axis=0)
            out["cell"] = forced or ("centred" if float(n_eff.min()) >= spec.xi.centred_min_obs else "noncentred")
    return out


def cell_mles(spec: ModelSpec, data: ModelData) -> np.ndarray:
    """Per-cell maximum-likelihood (mu, sigma, xi) on the model scale, shape (cells, 3)."""
    return np.array([fit_cell_mle(_subsample(data.z_model[data.cell_slice(i)], INIT_MLE_MAX_ROWS), spec.family)
                     for i in range(len(data.cells))])


#: Lower bound of the starting value of every spread (inside any positive prior's support).
_MIN_START_SD = 0.02


def initial_values(spec: ModelSpec, data: ModelData, parametrization: dict[str, str],
                   mles: np.ndarray | None = None, basis: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Initial point from per-cell MLE, inside the support, xi never exactly 0.

    The per-cell shapes are decomposed into xi0, the factors' deltas (level means of the
    residuals) and, with a cell term, its coordinates in ``basis``; mu and sigma are re-fitted
    at the resulting xi when it differs from the cell's MLE.
    """
    n_cells = len(data.cells)
    if mles is None:
        mles = cell_mles(spec, data)
    mus, sigmas, xis = mles[:, 0].copy(), mles[:, 1].copy(), mles[:, 2].copy()
    init: dict[str, np.ndarray] = {}
    fam = family_of(spec.family)
    if not fam.has_xi:
        xi_cells = np.zeros(n_cells)
    elif spec.xi.structure == "pooled":
        xi_pool = float(np.average(xis, weights=data.cells["n_obs"]))
        xi_pool = fam.start_xi(xi_pool) if fam.xi_sign else _nonzero(xi_pool)
        init["xi"] = np.array(xi_pool)
        if fam.xi_sign < 0:
            init[XI_MAGNITUDE] = np.array(-xi_pool)
        xi_cells = np.full(n_cells, xi_pool)
    else:
        xi0 = _nonzero(float(np.mean(xis)))
        init["xi0"] = np.array(xi0)
        xi_cells = np.full(n_cells, xi0)
        resid = xis - xi0
        for f in spec.xi.factors:
            level_of_cell = level_index(data, f)
            n_levels = len(data.factor_levels[f])
            delta = np.array([resid[level_of_cell == k].mean() for k in range(n_levels)])
            delta -= delta.mean()
            sd = max(float(np.std(delta)) * np.sqrt(n_levels / max(n_levels - 1, 1)), _MIN_START_SD)
            init[f"xi_sd_{f}"] = np.array(sd)
            if parametrization[f] == "centred":
                init[f"xi_delta_{f}"] = delta
            else:
                init[f"xi_delta_{f}_raw"] = delta / sd
            xi_cells = xi_cells + delta[level_of_cell]
        if "cell" in parametrization and basis is not None and basis.shape[1] > 0:
            coef = basis.T @ (xis - xi_cells)
            scale = np.sqrt(n_cells / basis.shape[1])
            sd = max(float(np.sqrt(np.mean(coef**2))) / scale, _MIN_START_SD)
            init["xi_sd_cell"] = np.array(sd)
            if parametrization["cell"] == "centred":
                init["xi_cell_coef"] = coef
            else:
                init["xi_cell_coef_raw"] = coef / (sd * scale)
            xi_cells = xi_cells + basis @ coef
    # Re-fit mu and sigma at the starting xi so that every z-score is inside the support.
    if fam.has_xi:
        for i in range(n_cells):
            z_cell = data.z_model[data.cell_slice(i)]
            if abs(xi_cells[i] - xis[i]) > 1e-9 or not _support_ok(z_cell, mus[i], sigmas[i], xi_cells[i]):
                mus[i], sigmas[i], _ = fit_cell_mle(_subsample(z_cell, INIT_MLE_MAX_ROWS), spec.family,
                                                    xi_fixed=float(xi_cells[i]))
            sigmas[i] = _feasible_sigma(z_cell, mus[i], sigmas[i], xi_cells[i])
    weights = data.cells["n_obs"].to_numpy()
    init["mu"] = mus if spec.mu.pooling != "complete" else np.array(np.average(mus, weights=weights))
    if spec.mu.pooling == "partial":
        sd = max(float(np.std(mus)), _MIN_START_SD)
        init["mu_mean"] = np.array(np.mean(mus))
        init["mu_sd"] = np.array(sd)
        if parametrization.get("mu") == "noncentred":
            init["mu_dev_raw"] = (mus - mus.mean()) / sd
        else:
            init["mu_dev"] = mus - mus.mean()
    sig = sigmas if spec.sigma.pooling != "complete" else np.array(np.average(sigmas, weights=weights))
    if spec.mu.pooling == "complete" or spec.sigma.pooling == "complete":
        # A pooled mu/sigma must keep every cell's z-scores inside the support.
        mu_c = np.broadcast_to(init["mu"], (n_cells,))
        sig_c = np.broadcast_to(sig, (n_cells,)).copy()
        for i in range(n_cells):
            sig_c[i] = _feasible_sigma(data.z_model[data.cell_slice(i)], mu_c[i], sig_c[i], xi_cells[i])
        sig = sig_c if spec.sigma.pooling != "complete" else np.array(sig_c.max())
    init["sigma"] = sig
    if spec.sigma.pooling == "partial":
        init["log_sigma_sd"] = np.array(max(float(np.std(np.log(sig))), _MIN_START_SD))
    init["_xi_cells"] = xi_cells
    return init


LOGP_IMPLS = ("fused", "elementwise")


#: "auto" samples a cell's sigma above its support bound when the cell has fewer z-scores ...
SUPPORT_TRANSFORM_MAX_OBS = 2000
#: ... or when its maximum-likelihood fit puts a data point this close to the end point of the
#: support (``1 + xi (z - mu)/sigma`` at the extreme z-score on the bounded side). With
#: xi < 0 the sample maximum of a large cell sits near the upper end point (xi = -0.2, 42k
#: z-scores: 0.13); the lone divergence of the 250k fit was traced to it (issue 16).
SUPPORT_EDGE_GAP = 0.3


def support_edge_gap(z: np.ndarray, mu: float, sigma: float, xi: float) -> float:
    """``1 + xi (z - mu)/sigma`` at the z-score nearest the end point (inf when xi = 0)."""
    if xi < 0:
        return float(1.0 + xi * (np.max(z) - mu) / sigma)
    if xi > 0:
        return float(1.0 + xi * (np.min(z) - mu) / sigma)
    return float("inf")


def use_support_transform(spec: ModelSpec, data: ModelData, mles: np.ndarray | None = None) -> np.ndarray:
    """Per cell: whether its sigma is sampled as bound(mu, xi) + exp(u) (see :func:`build_model`).

    Small cells leave the posterior wide enough to reach the support wall, where plain NUTS
    diverges (e.g. Port Pirie, n = 65), and so do large cells whose extreme z-score lies near
    the end point of the support (xi clearly negative); elsewhere the posterior is far from
    the wall and the plain log-sigma is closer to Gaussian (fewer leapfrog steps). A pooled
    sigma is one value: transformed when any cell needs it.
    """
    n_cells = len(data.cells)
    if not family_of(spec.family).has_xi or spec.sigma.support_transform == "off":
        flags = np.zeros(n_cells, dtype=bool)
    elif spec.sigma.support_transform == "on":
        flags = np.ones(n_cells, dtype=bool)
    else:
        if mles is None:
            mles = cell_mles(spec, data)
        flags = np.zeros(n_cells, dtype=bool)
        for i in range(n_cells):
            z_cell = data.z_model[data.cell_slice(i)]
            gap = support_edge_gap(z_cell, *mles[i])
            flags[i] = len(z_cell) < SUPPORT_TRANSFORM_MAX_OBS or gap < SUPPORT_EDGE_GAP
    if spec.sigma.pooling == "complete" and flags.any():
        flags[:] = True
    return flags


def _scipy_prior(prior: Prior):
    """A spec prior as a frozen scipy distribution (same parametrisation as PyMC's)."""
    from scipy import stats

    p = prior.params
    return {
        "normal": lambda: stats.norm(p.get("mu", 0.0), p.get("sigma", 1.0)),
        "halfnormal": lambda: stats.halfnorm(scale=p.get("sigma", 1.0)),
        "lognormal": lambda: stats.lognorm(p.get("sigma", 1.0), scale=np.exp(p.get("mu", 0.0))),
        "exponential": lambda: stats.expon(scale=1.0 / p.get("lam", 1.0)),
        "gamma": lambda: stats.gamma(p.get("alpha", 1.0), scale=1.0 / p.get("beta", 1.0)),
        "uniform": lambda: stats.uniform(p.get("lower", 0.0), p.get("upper", 1.0) - p.get("lower", 0.0)),
    }[prior.dist]()


def _prior_quantile(prior: Prior, q: float) -> float:
    """Quantile ``q`` of a spec prior."""
    return float(_scipy_prior(prior).ppf(q))


#: Gumbel: IQR = sigma (ln ln 4 - ln ln 4/3) and median = mu - sigma ln ln 2.
_GUMBEL_IQR = float(np.log(np.log(4.0)) - np.log(np.log(4.0 / 3.0)))
_GUMBEL_MEDIAN = float(-np.log(np.log(2.0)))
#: Central prior mass within which the data's location and scale must lie for a z-score model.
SCALE_GUARD_MASS = 0.999


def robust_gumbel(z: np.ndarray) -> tuple[float, float]:
    """Location and scale of a Gumbel with the sample's median and interquartile range."""
    q25, q50, q75 = np.quantile(z, [0.25, 0.5, 0.75])
    scale = float(q75 - q25) / _GUMBEL_IQR
    return float(q50) - _GUMBEL_MEDIAN * scale, scale


def check_scale(spec: ModelSpec, data: ModelData, source: str = "z-score table") -> None:
    """Refuse data far outside the scale a z-score model's priors assume (issue 19).

    Per cell, the location and scale of a Gumbel matched to the median and the IQR must lie
    within the central 99.9% of the priors of mu and sigma; otherwise the posterior is the
    prior's, not the data's (annual maxima in their own units: xi 1.8 against an MLE of 0.17).
    """
    if spec.scale != "z":
        return
    lo_q, hi_q = (1 - SCALE_GUARD_MASS) / 2, (1 + SCALE_GUARD_MASS) / 2
    mu_lo, mu_hi = _prior_quantile(spec.mu.prior, lo_q), _prior_quantile(spec.mu.prior, hi_q)
    sig_hi = _prior_quantile(spec.sigma.prior, hi_q)
    bad = []
    for i, cell in enumerate(data.cell_labels):
        loc, scale = robust_gumbel(data.z[data.cell_slice(i)])
        if not (mu_lo <= loc <= mu_hi) or scale > sig_hi:
            bad.append(f"{cell} (location {loc:.4g}, scale {scale:.4g})")
    if bad:
        raise InputError(
            f"{source}: column {spec.column!r} is far outside the z-score scale that model {spec.name!r} "
            f"({spec.path}) assumes: its priors put mu in [{mu_lo:.3g}, {mu_hi:.3g}] and sigma below {sig_hi:.3g} "
            f"({SCALE_GUARD_MASS:.1%} prior mass), the data give {', '.join(bad)}. Standardise first: "
            f"z = (block max - block mean) / pooled sd as `evtsync blocks` writes it (methodology §5), or fit raw "
            f"maxima with models/gev-hier-raw-us.toml (priors scaled from each cell's median and IQR)")


def _excess_initval(init: dict[str, np.ndarray], spec: ModelSpec, z_min: np.ndarray, z_max: np.ndarray,
                    widths: np.ndarray, shared_width: float, flags: np.ndarray) -> dict[str, np.ndarray]:
    """Initial ``sigma_log_excess`` from the initial sigma (which is inside the support)."""
    n_cells = len(z_min)
    mu = np.broadcast_to(init["mu"], (n_cells,))
    xi = init["_xi_cells"]
    sigma = np.asarray(init["sigma"], dtype=float)
    if spec.sigma.pooling != "complete":
        terms = [_support_bound_terms(mu[i], xi[i], z_min[i], z_max[i]) for i in range(n_cells)]
        bound: np.ndarray | float = np.array([support_bound(t, widths[i]) if flags[i] else 0.0
                                              for i, t in enumerate(terms)])
    else:
        bound = _shared_sigma_bound(spec, init["mu"], list(xi), z_min, z_max, shared_width) if flags.any() else 0.0
    out = {k: v for k, v in init.items() if k != "sigma" and not k.startswith("_")}
    out["sigma_log_excess"] = np.log(np.maximum(sigma - bound, 0.05 * sigma))
    return out


def build_model(spec: ModelSpec, data: ModelData, logp_impl: str = "fused", source: str = "z-score table") -> BuiltModel:
    """The PyMC model of ``spec`` on ``data``, with its initial point set as initvals.

    ``logp_impl="fused"`` (default) adds each cell's log-likelihood as one potential computed
    with its gradient in a single pass (:func:`~evtsync.evt.distribution.gev_logp_sum`);
    ``"elementwise"`` uses the :class:`~evtsync.evt.distribution.GEV` distribution as an
    observed variable (PyTensor autodiff; slower at large n, same posterior).

    Structure (each part only where the spec asks for it):

    * mu: one value; one per cell with its own prior; or partially pooled,
      ``mu = mu_mean + mu_dev`` with zero-sum deviations of spread ``mu_sd``;
    * sigma = bound_cell(mu, xi) + exp(sigma_log_excess) with bound = 0 for cells without the
      support transform; its prior (partial pooling: log sigma = log sigma_gmean + zero-sum
      deviations of spread ``log_sigma_sd``, sigma_gmean with the spec's prior) enters
      as a potential with the Jacobian;
    * xi = xi0 + sum_f delta_f[level] + (cell term in the interaction space, spread xi_sd_cell).
    """
    if logp_impl not in LOGP_IMPLS:
        raise ValueError(f"logp_impl must be one of {LOGP_IMPLS}, got {logp_impl!r}")
    check_scale(spec, data, source)
    fam = family_of(spec.family)
    basis = (interaction_basis(spec, data) if spec.xi.cell_sd_prior is not None and fam.allows_additive_xi
             else None)
    if basis is not None and basis.shape[1] == 0:
        log.info("model %s: the additive surface already fits every cell; no cell term", spec.name)
        basis = None
    parametrization = choose_parametrization(spec, data, basis)
    mles = cell_mles(spec, data)
    init = initial_values(spec, data, parametrization, mles, basis)
    n_cells = len(data.cells)
    coords: dict[str, list[str]] = {"cell": data.cell_labels}
    for f, levels in data.factor_levels.items():
        coords[f] = levels
    if basis is not None:
        coords["cell_effect"] = [f"e{k}" for k in range(basis.shape[1])]
    flags = use_support_transform(spec, data, mles)
    z_min = np.array([data.z_model[data.cell_slice(i)].min() for i in range(n_cells)])
    z_max = np.array([data.z_model[data.cell_slice(i)].max() for i in range(n_cells)])
    widths = support_widths(data)
    shared_width = float(np.min(widths))
    spread_priors: dict[str, str] = {}
    with pm.Model(coords=coords, check_bounds=False) as model:
        if spec.mu.pooling == "complete":
            mu = _prior_rv("mu", spec.mu.prior)
        elif spec.mu.pooling == "none":
            mu = _prior_rv("mu", spec.mu.prior, dims="cell")
        else:
            # mu_mean is the average of the cells' mu (pinned by the data), the deviations sum to
            # zero: a population mean next to its own deviations would make a funnel with the
            # spread (mu_mean's width ~ mu_sd / sqrt(cells)); it is integrated out instead.
            mu_mean = _prior_rv("mu_mean", spec.mu.prior)
            mu_sd = _prior_rv("mu_sd", spec.mu.population_sd_prior)
            spread_priors["mu_sd"] = _required(spec.mu.population_sd_prior, "mu_sd").describe()
            if parametrization.get("mu") == "noncentred":
                dev = mu_sd * pm.ZeroSumNormal("mu_dev_raw", sigma=1.0, dims="cell")
            else:
                dev = pm.ZeroSumNormal("mu_dev", sigma=mu_sd, dims="cell")
            mu = pm.Deterministic("mu", mu_mean + dev, dims="cell")
        if not fam.has_xi:
            xi = None
        elif spec.xi.structure == "pooled" and fam.xi_sign < 0:
            # xi < 0: the spec's (positive) prior is that of |xi|; xi itself is recorded
            xi = pm.Deterministic("xi", -_prior_rv(XI_MAGNITUDE, spec.xi.prior))
        elif spec.xi.structure == "pooled":
            xi = _prior_rv("xi", spec.xi.prior)
        else:
            xi0 = _prior_rv("xi0", spec.xi.prior)
            xi_cells = xi0
            for f in spec.xi.factors:
                sd_prior = spec.xi.spread_prior(len(data.factor_levels[f]))
                spread_priors[f"xi_sd_{f}"] = _required(sd_prior, f"xi_sd_{f}").describe()
                sd = _prior_rv(f"xi_sd_{f}", sd_prior)
                if parametrization[f] == "centred":
                    delta = pm.ZeroSumNormal(f"xi_delta_{f}", sigma=sd, dims=f)
                else:
                    raw = pm.ZeroSumNormal(f"xi_delta_{f}_raw", sigma=1.0, dims=f)
                    delta = pm.Deterministic(f"xi_delta_{f}", sd * raw, dims=f)
                xi_cells = xi_cells + delta[level_index(data, f)]
            if basis is not None:
                spread_priors["xi_sd_cell"] = _required(spec.xi.cell_sd_prior, "xi_sd_cell").describe()
                sd_cell = _prior_rv("xi_sd_cell", spec.xi.cell_sd_prior)
                # coefficients scaled so that the average marginal sd of a cell effect is xi_sd_cell
                coef_sd = sd_cell * np.sqrt(n_cells / basis.shape[1])
                if parametrization["cell"] == "centred":
                    coef = pm.Normal("xi_cell_coef", 0.0, coef_sd, dims="cell_effect")
                else:
                    coef = coef_sd * pm.Normal("xi_cell_coef_raw", 0.0, 1.0, dims="cell_effect")
                effect = pm.Deterministic("xi_cell_effect", pt.dot(pt.as_tensor_variable(basis), coef), dims="cell")
                xi_cells = xi_cells + effect
            xi = pm.Deterministic("xi", xi_cells, dims="cell")

        def cell_mu(i):
            return mu if spec.mu.pooling == "complete" else mu[i]

        def cell_xi(i):
            if xi is None:
                return 0.0
            return xi[i] if spec.xi.structure == "additive" else xi

        # the per-cell parameters as vectors (one graph node per quantity, whatever the cells)
        cells_zero = pt.zeros(n_cells)
        mu_vec = cells_zero + mu if spec.mu.pooling == "complete" else mu
        xi_vec = cells_zero if xi is None else (xi if spec.xi.structure == "additive" else cells_zero + xi)

        # sigma = bound(mu, xi) + exp(u): for the cells with the support transform every point
        # the sampler visits is inside the support of every z-score, so NUTS never meets the wall
        # where the likelihood vanishes; elsewhere bound = 0 (plain log-sigma). The smooth bound is
        # above the exact one by a sliver that gets no prior mass; the width keeps it clear of
        # every sigma the data allow (see SUPPORT_SMOOTHING). The prior of sigma enters as a
        # potential with the Jacobian exp(u).
        if not flags.any() and spec.sigma.pooling != "partial":
            # no cell near its support wall and no population: the plain (log-transformed) sigma
            sigma = (_prior_rv("sigma", spec.sigma.prior) if spec.sigma.pooling == "complete"
                     else _prior_rv("sigma", spec.sigma.prior, dims="cell"))
        else:
            # the data enter as pm.Data (not constants), so that a compiled model can be reused on
            # another data set of the same structure (fit_table's compiled_cache)
            z_min_d = pm.Data("z_min", z_min, dims="cell")
            z_max_d = pm.Data("z_max", z_max, dims="cell")
            if spec.sigma.pooling != "complete":
                width_d = pm.Data("support_smoothing_width", widths, dims="cell")
                u = pm.Flat("sigma_log_excess", dims="cell")
                bounds = support_bound(_support_bound_terms(mu_vec, xi_vec, z_min_d, z_max_d), width_d)
                sigma = pm.Deterministic("sigma", pt.as_tensor_variable(flags.astype(float)) * bounds + pt.exp(u),
                                         dims="cell")
            else:
                u = pm.Flat("sigma_log_excess")
                shared_width_d = pm.Data("support_smoothing_width_shared", shared_width)
                bound = (_shared_sigma_bound(spec, mu, [cell_xi(i) for i in range(n_cells)], z_min_d, z_max_d,
                                             shared_width_d) if flags.any() else 0.0)
                sigma = pm.Deterministic("sigma", bound + pt.exp(u))
            if spec.sigma.pooling == "partial":
                # log sigma = log sigma_gmean + zero-sum deviations (as for mu): the density of the
                # vector s = log sigma is p(mean s) * ZeroSumNormal(s - mean s | log_sigma_sd), then
                # the Jacobian of s = log(bound + exp(u)) is exp(u) / sigma.
                log_sd = _prior_rv("log_sigma_sd", spec.sigma.population_sd_prior)
                spread_priors["log_sigma_sd"] = _required(spec.sigma.population_sd_prior, "log_sigma_sd").describe() + " (of log sigma)"
                log_sigma = pt.log(sigma)
                centre = log_sigma.mean()
                pm.Deterministic("sigma_gmean", pt.exp(centre))
                dev = log_sigma - centre
                sigma_prior = (pm.logp(_prior_dist(spec.sigma.prior), pt.exp(centre)) + centre
                               - pt.sum(dev**2) / (2.0 * log_sd**2) - (n_cells - 1) * pt.log(log_sd)
                               + pt.sum(u - log_sigma))
            else:
                sigma_prior = pm.logp(_prior_dist(spec.sigma.prior), sigma).sum() + u.sum()
            pm.Potential("sigma_prior", sigma_prior)
            init = _excess_initval(init, spec, z_min, z_max, widths, shared_width, flags)
        obs_names = []
        if logp_impl == "fused":
            # every cell's log-likelihood in one node (z_model is ordered by cell)
            starts = np.array([data.cell_slice(i).start for i in range(n_cells)] + [len(data.z_model)], dtype=np.int64)
            sigma_vec = cells_zero + sigma if spec.sigma.pooling == "complete" else sigma
            pm.Potential("z_obs", gev_logp_sum_cells(pm.Data("z_model", data.z_model), pt.as_tensor_variable(starts),
                                                     mu_vec, sigma_vec, xi_vec))
            obs_names.append("z_obs")
        else:
            for i in range(n_cells):
                sigma_i = sigma if spec.sigma.pooling == "complete" else sigma[i]
                name = f"z_obs_{i}"
                GEV(name, mu=cell_mu(i), sigma=sigma_i, xi=cell_xi(i), observed=data.z_model[data.cell_slice(i)])
                obs_names.append(name)
        free = {rv.name for rv in model.free_RVs}
        init = {k: v for k, v in init.items() if k in free}
        for name, value in init.items():
            model.set_initval(model[name], value)
    log.info("model %s: %d z-scores in %d cell(s); xi parametrisation %s; support transform in %d cell(s)",
             spec.name, len(data.z), n_cells, parametrization or "n/a", int(flags.sum()))
    return BuiltModel(model, data, spec, init, parametrization, obs_names, flags, spread_priors, basis)


def simulate_zscore_table(cell_params: pd.DataFrame, n_per_cell: int | list[int], seed: int = 0) -> pd.DataFrame:
    """A z-score table drawn from known per-cell GEV parameters (for tests and benchmarks).

    ``cell_params`` has columns gpu, precision, mu, sigma, xi; the result has the columns of the
    table ``evtsync blocks`` writes (z, y, gpu, precision, workload, block, instance,
    block_mean_us, block_sd_us). A GEV sample has no ranks behind it, so the same draws stand
    for either statistic: ``y`` (what the shipped models fit) equals ``z``. To test the
    estimators against ranks, simulate ranks (``evtsync.synth`` with ``parent``).
    """
    from evtsync.evt import gev

    rng = np.random.default_rng(seed)
    counts = [n_per_cell] * len(cell_params) if isinstance(n_per_cell, int) else list(n_per_cell)
    parts = []
    for (_, row), n in zip(cell_params.iterrows(), counts, strict=True):
        z = gev.rvs(row["mu"], row["sigma"], row["xi"], rng=rng, size=n)
        parts.append(pd.DataFrame({
            "z": z, "y": z, "gpu": row["gpu"], "precision": row["precision"], "workload": "synthetic",
            "block": "gemm-block", "instance": np.arange(n), "block_mean_us": 1000.0, "block_sd_us": 20.0,
        }))
    return pd.concat(parts, ignore_index=True)


PRIOR_CHECK_QUANTILES = (0.05, 0.5, 0.95, 0.99)


def _draw_prior(prior: Prior | None, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws from a spec prior (scipy: no PyTensor compilation per prior)."""
    prior = _required(prior, "a drawn parameter")
    return np.asarray(_scipy_prior(prior).rvs(size=size, random_state=rng), dtype=float).reshape(size)


def draw_prior(spec: ModelSpec, data: ModelData, draws: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``draws`` parameter sets from the priors of ``spec`` on the cell structure of ``data``.

    The one forward sampler of the model's prior (the PyMC model puts the prior of sigma in a
    potential, which PyMC's prior sampling ignores). Returns ``mu``, ``sigma``, ``xi`` of shape
    (draws, cells) and each hyper-parameter the model has under its posterior name, shape
    (draws,): ``mu_mean``, ``mu_sd``, ``sigma_gmean``, ``log_sigma_sd`` (partial pooling),
    ``xi0``, ``xi_sd_<factor>``, ``xi_sd_cell`` (additive xi; the cell term when the spec and
    the cells have one). Only the z-data's cell labels are used, not the z-scores.
    """
    n_cells = len(data.cells)
    out: dict[str, np.ndarray] = {}

    def per_cell(param, name: str, log_scale: bool = False) -> np.ndarray:
        if param.pooling == "none":
            return np.stack([_draw_prior(param.prior, draws, rng) for _ in range(n_cells)], axis=1)
        centre_draws = _draw_prior(param.prior, draws, rng)
        centre = np.repeat(centre_draws[:, None], n_cells, axis=1)
        if param.pooling == "complete":
            return centre
        spread = _draw_prior(param.population_sd_prior, draws, rng)
        raw = rng.normal(size=(draws, n_cells))
        noise = spread[:, None] * (raw - raw.mean(axis=1, keepdims=True))  # ZeroSumNormal(spread)
        if log_scale:
            out[f"{name}_gmean"], out[f"log_{name}_sd"] = centre_draws, spread
            return centre * np.exp(noise)
        out[f"{name}_mean"], out[f"{name}_sd"] = centre_draws, spread
        return centre + noise

    out["mu"] = per_cell(spec.mu, "mu")
    out["sigma"] = per_cell(spec.sigma, "sigma", log_scale=True)
    fam = family_of(spec.family)
    if not fam.has_xi:
        xi = np.zeros((draws, n_cells))
    elif spec.xi.structure == "pooled":
        # a sign-constrained family's prior is that of |xi| (positive), xi = sign * |xi|
        xi = np.repeat((fam.xi_sign or 1) * _draw_prior(spec.xi.prior, draws, rng)[:, None], n_cells, axis=1)
    else:
        xi0 = _draw_prior(spec.xi.prior, draws, rng)
        out["xi0"] = xi0
        xi = np.repeat(xi0[:, None], n_cells, axis=1)
        for f in spec.xi.factors:
            sd = _draw_prior(spec.xi.spread_prior(len(data.factor_levels[f])), draws, rng)
            out[f"xi_sd_{f}"] = sd
            raw = rng.normal(size=(draws, len(data.factor_levels[f])))
            delta = (raw - raw.mean(axis=1, keepdims=True)) * sd[:, None]  # ZeroSumNormal(sd)
            xi = xi + delta[:, level_index(data, f)]
        if spec.xi.cell_sd_prior is not None:
            basis = interaction_basis(spec, data)
            if basis.shape[1]:
                sd_cell = _draw_prior(spec.xi.cell_sd_prior, draws, rng)
                out["xi_sd_cell"] = sd_cell
                sd = sd_cell * np.sqrt(n_cells / basis.shape[1])
                coef = rng.normal(size=(draws, basis.shape[1])) * sd[:, None]
                xi = xi + coef @ basis.T
    out["xi"] = xi
    return out


def prior_predictive_check(spec: ModelSpec, data: ModelData, draws: int = 500, seed: int = 0,
                           level: float = 0.99) -> pd.DataFrame:
    """Prior predictive check: per cell, the GEV quantiles implied by parameter draws from the
    priors (:func:`draw_prior`), against the observed quantiles of the z-scores.

    One row per (cell, quantile): observed value, the prior predictive median and central
    ``level`` interval of that quantile, the share of prior draws below the observed value
    and ``inside``. A quantile outside the interval means the priors rule out what the data
    show (too narrow, or centred in the wrong place).
    """
    from evtsync.evt import gev

    prior = draw_prior(spec, data, draws, np.random.default_rng(seed))
    mu, sigma, xi = prior["mu"], prior["sigma"], prior["xi"]
    rows = []
    lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
    for i, cell in enumerate(data.cell_labels):
        z_cell = data.z_model[data.cell_slice(i)]
        for q in PRIOR_CHECK_QUANTILES:
            implied = np.asarray(gev.ppf(q, mu[:, i], sigma[:, i], xi[:, i]), dtype=float)
            observed = float(np.quantile(z_cell, q))
            lo, med, hi = np.quantile(implied, [lo_q, 0.5, hi_q])
            rows.append({"cell": cell, "quantile": q, "observed": observed, "prior_median": med,
                         "prior_lower": lo, "prior_upper": hi, "share_below": float(np.mean(implied < observed)),
                         "inside": bool(lo <= observed <= hi), "level": level})
    return pd.DataFrame(rows)
