"""Build the PyMC model of a :class:`~evtsync.evt.spec.ModelSpec` on a z-score table.

Design choices that make the fit fast and robust at 250k z-scores (issue 9):

* Cells. The rows are grouped into cells, one per combination of the spec's ``data.groups``
  columns (e.g. GPU x precision), and each cell gets its own observed variable with scalar
  parameters. The log density is then one fused elementwise loop per cell and its gradient a
  plain sum: no gather of per-row parameters and no scatter-add of per-row gradients.
* Shape. ``xi = xi0 + delta_f[level]`` summed over the spec's factors; every ``delta_f`` sums
  to zero (``ZeroSumNormal``) so that xi0 and the deltas are identified, with a fitted spread
  ``xi_sd_f``. A factor is centred when every one of its levels has at least
  ``centred_min_obs`` z-scores (then the data pin each delta down and the centred form needs
  few leapfrog steps), non-centred otherwise (sparse levels); the spec may force either.
* Start. The support ``1 + xi (z - mu)/sigma > 0`` makes random starting points useless
  (most fall outside). The initial point is the per-cell maximum-likelihood fit, projected on
  the additive structure and re-fitted for mu and sigma at that xi so that every z-score lies
  inside the support; xi is never started at exactly 0.
* Support wall. With small cells the posterior reaches the region where some z-score leaves
  the support and the likelihood drops to zero; NUTS then diverges at that wall. There sigma is
  sampled as ``bound(mu, xi) + exp(u)`` (a smooth maximum of ``xi (mu - z_min)``,
  ``xi (mu - z_max)`` and 0, with the Jacobian), which keeps every point inside the support and
  leaves the posterior unchanged. Large cells keep the plain log-sigma (closer to Gaussian
  there); ``[sigma] support_transform`` overrides the automatic choice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt
from scipy import optimize

from evtsync.errors import InputError
from evtsync.evt.distribution import GEV, gev_logp_sum, gev_logp_sum_grad_np
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
    return ModelData(
        z=z_all[rows][order_in_kept],
        order=rows[order_in_kept],
        cell_of_obs=cell_of_obs,
        cells=cells,
        factor_levels=factor_levels,
        n_skipped=n_skipped,
    )


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
    """Maximum-likelihood (mu, sigma, xi) of one cell, for the initial point.

    ``family`` gumbel fixes xi = 0, frechet keeps xi > 0; ``xi_fixed`` re-fits mu and sigma
    only. The result always has every z inside the support.
    """
    z = np.asarray(z, dtype=float)
    sd = float(np.std(z)) or 1.0
    sigma0 = sd * np.sqrt(6.0) / np.pi
    mu0 = float(np.mean(z)) - 0.5772156649 * sigma0

    def nll(mu: float, log_sigma: float, xi: float) -> float:
        val = -gev_logp_sum_grad_np(z, mu, np.exp(log_sigma), xi)[0]
        return float(val) if np.isfinite(val) else 1e300

    if family == "gumbel" or xi_fixed is not None:
        xi_val = 0.0 if family == "gumbel" else float(xi_fixed)
        sigma_start = _feasible_sigma(z, mu0, sigma0, xi_val)
        res = optimize.minimize(lambda p: nll(p[0], p[1], xi_val), [mu0, np.log(sigma_start)], method="Nelder-Mead",
                                options={"xatol": 1e-6, "fatol": 1e-8, "maxiter": 2000})
        mu, sigma = float(res.x[0]), float(np.exp(res.x[1]))
        return mu, _feasible_sigma(z, mu, sigma, xi_val), xi_val
    best = None
    for xi_start in (0.1, -0.1):
        sigma_start = _feasible_sigma(z, mu0, sigma0, xi_start)
        res = optimize.minimize(lambda p: nll(p[0], p[1], p[2]), [mu0, np.log(sigma_start), xi_start],
                                method="Nelder-Mead", options={"xatol": 1e-6, "fatol": 1e-8, "maxiter": 4000})
        if best is None or res.fun < best.fun:
            best = res
    mu, sigma, xi = float(best.x[0]), float(np.exp(best.x[1])), float(best.x[2])
    if family == "frechet":
        xi = max(xi, 0.01)
    return mu, _feasible_sigma(z, mu, sigma, xi), xi


def _nonzero(x: float, eps: float = 1e-3) -> float:
    """Move ``x`` off exactly zero (the xi = 0 point is excluded from starting points)."""
    return float(x) if abs(x) >= eps else float(np.copysign(eps, x if x != 0 else 1.0))


_PRIOR_CLASSES = {
    "normal": pm.Normal, "halfnormal": pm.HalfNormal, "lognormal": pm.LogNormal,
    "exponential": pm.Exponential, "gamma": pm.Gamma, "uniform": pm.Uniform,
}


def _prior_rv(name: str, prior: Prior, **kwargs):
    """A model variable with the prior of the spec."""
    return _PRIOR_CLASSES[prior.dist](name, **prior.params, **kwargs)


def _prior_dist(prior: Prior):
    """The prior as an unnamed distribution (for its log density)."""
    return _PRIOR_CLASSES[prior.dist].dist(**prior.params)


#: Width of the smooth maximum in the support bound of sigma, relative to the z-scores' sd.
#: The smooth bound exceeds the exact one by at most width·ln 3, and only where the bound is
#: within a few widths of zero; near the exact bound (where the excess is exponentially small)
#: the GEV likelihood vanishes like gap^(1/|xi| - 1). A wide smoothing keeps the bend of the
#: transform at xi = 0 gentle: at Port Pirie 1e-3 gave a bulk ESS of xi of ~180 per 2000
#: draws, 0.2 gave ~350, with the same posterior median and sd within Monte Carlo error.
SUPPORT_SMOOTHING = 0.2


def _smooth_max0(values: list, width: float):
    """``width * log(1 + sum(exp(v / width)))`` >= max(0, *values), smooth (PyTensor or NumPy)."""
    lib = pt if any(isinstance(v, pt.TensorVariable) for v in values) else np
    scaled = [v / width for v in values]
    m = scaled[0]
    for v in scaled[1:]:
        m = lib.maximum(m, v)
    m = lib.maximum(m, 0.0)
    total = lib.exp(-m)
    for v in scaled:
        total = total + lib.exp(v - m)
    return width * (m + lib.log(total))


def _support_bound_terms(mu_i, xi_i, z_min: float, z_max: float) -> list:
    """sigma must exceed both: xi (mu - z_min) (binding for xi > 0), xi (mu - z_max) (xi < 0)."""
    return [xi_i * (mu_i - z_min), xi_i * (mu_i - z_max)]


@dataclass
class BuiltModel:
    """A PyMC model with the data it was built on, its initial point and its choices."""

    model: pm.Model
    data: ModelData
    spec: ModelSpec
    initial_point: dict[str, np.ndarray]
    parametrization: dict[str, str]
    obs_names: list[str]
    support_transform: bool = False


def choose_parametrization(spec: ModelSpec, data: ModelData) -> dict[str, str]:
    """Centred or non-centred per factor of xi: centred when every level is data-rich."""
    out: dict[str, str] = {}
    if spec.family != "gev" or spec.xi.structure != "additive":
        return out
    for f in spec.xi.factors:
        if spec.xi.parametrization != "auto":
            out[f] = spec.xi.parametrization
            continue
        per_level = data.cells.groupby(f)["n_obs"].sum()
        out[f] = "centred" if int(per_level.min()) >= spec.xi.centred_min_obs else "noncentred"
    return out


def initial_values(spec: ModelSpec, data: ModelData, parametrization: dict[str, str]) -> dict[str, np.ndarray]:
    """Initial point from per-cell MLE, inside the support, xi never exactly 0."""
    n_cells = len(data.cells)
    fits = [fit_cell_mle(_subsample(data.z[data.cell_slice(i)], INIT_MLE_MAX_ROWS), spec.family)
            for i in range(n_cells)]
    mus = np.array([f[0] for f in fits])
    sigmas = np.array([f[1] for f in fits])
    xis = np.array([f[2] for f in fits])
    init: dict[str, np.ndarray] = {}
    if spec.family == "gumbel":
        xi_cells = np.zeros(n_cells)
    elif spec.xi.structure == "pooled":
        xi_pool = float(np.average(xis, weights=data.cells["n_obs"]))
        xi_pool = max(xi_pool, 0.01) if spec.family == "frechet" else _nonzero(xi_pool)
        init["xi"] = np.array(xi_pool)
        xi_cells = np.full(n_cells, xi_pool)
    else:
        xi0 = _nonzero(float(np.mean(xis)))
        init["xi0"] = np.array(xi0)
        xi_cells = np.full(n_cells, xi0)
        resid = xis - xi0
        for f in spec.xi.factors:
            levels = data.factor_levels[f]
            level_of_cell = data.cells[f].map({lv: k for k, lv in enumerate(levels)}).to_numpy()
            delta = np.array([resid[level_of_cell == k].mean() for k in range(len(levels))])
            delta -= delta.mean()
            sd = max(float(np.std(delta)) * np.sqrt(len(delta) / max(len(delta) - 1, 1)), 0.02)
            init[f"xi_sd_{f}"] = np.array(sd)
            if parametrization[f] == "centred":
                init[f"xi_delta_{f}"] = delta
            else:
                init[f"xi_delta_{f}_raw"] = delta / sd
            xi_cells = xi_cells + delta[level_of_cell]
            init[f"_level_of_cell_{f}"] = level_of_cell
    # Re-fit mu and sigma at the starting xi so that every z-score is inside the support.
    if spec.family != "gumbel":
        for i in range(n_cells):
            if abs(xi_cells[i] - xis[i]) > 1e-9 or not _support_ok(data.z[data.cell_slice(i)], mus[i], sigmas[i], xi_cells[i]):
                mus[i], sigmas[i], _ = fit_cell_mle(_subsample(data.z[data.cell_slice(i)], INIT_MLE_MAX_ROWS),
                                                    spec.family, xi_fixed=float(xi_cells[i]))
            z_cell = data.z[data.cell_slice(i)]
            sigmas[i] = _feasible_sigma(z_cell, mus[i], sigmas[i], xi_cells[i])
    weights = data.cells["n_obs"].to_numpy()
    init["mu"] = mus if spec.mu.pooling == "none" else np.array(np.average(mus, weights=weights))
    init["sigma"] = sigmas if spec.sigma.pooling == "none" else np.array(np.average(sigmas, weights=weights))
    if spec.mu.pooling == "complete" or spec.sigma.pooling == "complete":
        # A pooled mu/sigma must keep every cell's z-scores inside the support.
        mu_c = np.broadcast_to(init["mu"], (n_cells,))
        sig_c = np.broadcast_to(init["sigma"], (n_cells,)).copy()
        for i in range(n_cells):
            sig_c[i] = _feasible_sigma(data.z[data.cell_slice(i)], mu_c[i], sig_c[i], xi_cells[i])
        init["sigma"] = sig_c if spec.sigma.pooling == "none" else np.array(sig_c.max())
    return init


LOGP_IMPLS = ("fused", "elementwise")


#: "auto" samples sigma above its support bound when the smallest cell has fewer z-scores.
SUPPORT_TRANSFORM_MAX_OBS = 2000


def use_support_transform(spec: ModelSpec, data: ModelData) -> bool:
    """Whether sigma is sampled as bound(mu, xi) + exp(u) (see :func:`build_model`).

    Small cells leave the posterior wide enough to reach the support wall, where plain NUTS
    diverges (e.g. Port Pirie, n = 65); with thousands of z-scores per cell the posterior is far
    from the wall and the plain log-sigma is closer to Gaussian (fewer leapfrog steps).
    """
    if spec.family == "gumbel" or spec.sigma.support_transform == "off":
        return False
    if spec.sigma.support_transform == "on":
        return True
    return int(data.cells["n_obs"].min()) < SUPPORT_TRANSFORM_MAX_OBS


def _excess_initval(init: dict[str, np.ndarray], spec: ModelSpec, z_min: np.ndarray, z_max: np.ndarray,
                    width: float) -> dict[str, np.ndarray]:
    """Initial ``sigma_log_excess`` from the initial sigma (which is inside the support)."""
    n_cells = len(z_min)
    mu = np.broadcast_to(init["mu"], (n_cells,))
    if "xi" in init:
        xi = np.broadcast_to(init["xi"], (n_cells,))
    else:
        xi = np.full(n_cells, float(init["xi0"]))
        for key, value in init.items():
            if key.startswith("xi_delta_"):
                factor = key.removeprefix("xi_delta_").removesuffix("_raw")
                delta = value * init[f"xi_sd_{factor}"] if key.endswith("_raw") else value
                xi = xi + delta[init[f"_level_of_cell_{factor}"]]
    terms = [_support_bound_terms(mu[i], xi[i], z_min[i], z_max[i]) for i in range(n_cells)]
    sigma = np.asarray(init["sigma"], dtype=float)
    if spec.sigma.pooling == "none":
        bound = np.array([_smooth_max0(t, width) for t in terms])
    else:
        bound = _smooth_max0([v for t in terms for v in t], width)
    out = {k: v for k, v in init.items() if k != "sigma" and not k.startswith("_")}
    out["sigma_log_excess"] = np.log(np.maximum(sigma - bound, 0.05 * sigma))
    return out


def build_model(spec: ModelSpec, data: ModelData, logp_impl: str = "fused") -> BuiltModel:
    """The PyMC model of ``spec`` on ``data``, with its initial point set as initvals.

    ``logp_impl="fused"`` (default) adds each cell's log-likelihood as one potential computed
    with its gradient in a single pass (:func:`~evtsync.evt.distribution.gev_logp_sum`);
    ``"elementwise"`` uses the :class:`~evtsync.evt.distribution.GEV` distribution as an
    observed variable (PyTensor autodiff; slower at large n, same posterior).
    """
    if logp_impl not in LOGP_IMPLS:
        raise ValueError(f"logp_impl must be one of {LOGP_IMPLS}, got {logp_impl!r}")
    parametrization = choose_parametrization(spec, data)
    init = initial_values(spec, data, parametrization)
    n_cells = len(data.cells)
    coords: dict[str, list[str]] = {"cell": data.cell_labels}
    for f, levels in data.factor_levels.items():
        coords[f] = levels
    support_transform = use_support_transform(spec, data)
    z_min = np.array([data.z[data.cell_slice(i)].min() for i in range(n_cells)])
    z_max = np.array([data.z[data.cell_slice(i)].max() for i in range(n_cells)])
    width = SUPPORT_SMOOTHING * max(float(np.std(data.z)), 1e-12)
    with pm.Model(coords=coords, check_bounds=False) as model:
        mu = _prior_rv("mu", spec.mu.prior, dims="cell") if spec.mu.pooling == "none" else _prior_rv("mu", spec.mu.prior)
        if spec.family == "gumbel":
            xi = None
        elif spec.xi.structure == "pooled":
            xi = _prior_rv("xi", spec.xi.prior)
        else:
            xi0 = _prior_rv("xi0", spec.xi.prior)
            xi_cells = xi0
            for f in spec.xi.factors:
                sd = _prior_rv(f"xi_sd_{f}", spec.xi.group_sd_prior)
                if parametrization[f] == "centred":
                    delta = pm.ZeroSumNormal(f"xi_delta_{f}", sigma=sd, dims=f)
                else:
                    raw = pm.ZeroSumNormal(f"xi_delta_{f}_raw", sigma=1.0, dims=f)
                    delta = pm.Deterministic(f"xi_delta_{f}", sd * raw, dims=f)
                level_of_cell = data.cells[f].map({lv: k for k, lv in enumerate(data.factor_levels[f])}).to_numpy()
                xi_cells = xi_cells + delta[level_of_cell]
            xi = pm.Deterministic("xi", xi_cells, dims="cell")

        def cell_mu(i):
            return mu[i] if spec.mu.pooling == "none" else mu

        def cell_xi(i):
            if xi is None:
                return 0.0
            return xi[i] if spec.xi.structure == "additive" else xi

        if support_transform:
            # sigma = bound(mu, xi) + exp(u): every point the sampler visits is inside the
            # support of every z-score, so NUTS never hits the wall where the likelihood
            # vanishes. The posterior is unchanged (the likelihood is zero below the bound);
            # the prior of sigma enters as a potential with the Jacobian exp(u).
            terms = [_support_bound_terms(cell_mu(i), cell_xi(i), z_min[i], z_max[i]) for i in range(n_cells)]
            if spec.sigma.pooling == "none":
                bound = pt.stack([_smooth_max0(t, width) for t in terms])
                u = pm.Flat("sigma_log_excess", dims="cell")
                sigma = pm.Deterministic("sigma", bound + pt.exp(u), dims="cell")
            else:
                bound = _smooth_max0([v for t in terms for v in t], width)
                u = pm.Flat("sigma_log_excess")
                sigma = pm.Deterministic("sigma", bound + pt.exp(u))
            pm.Potential("sigma_prior", pm.logp(_prior_dist(spec.sigma.prior), sigma).sum() + u.sum())
            init = _excess_initval(init, spec, z_min, z_max, width)
        else:
            sigma = (_prior_rv("sigma", spec.sigma.prior, dims="cell") if spec.sigma.pooling == "none"
                     else _prior_rv("sigma", spec.sigma.prior))
        obs_names = []
        for i in range(n_cells):
            mu_i = cell_mu(i)
            sigma_i = sigma[i] if spec.sigma.pooling == "none" else sigma
            xi_i = cell_xi(i)
            name = f"z_obs_{i}"
            z_cell = data.z[data.cell_slice(i)]
            if logp_impl == "fused":
                pm.Potential(name, gev_logp_sum(z_cell, mu_i, sigma_i, xi_i))
            else:
                GEV(name, mu=mu_i, sigma=sigma_i, xi=xi_i, observed=z_cell)
            obs_names.append(name)
        init = {k: v for k, v in init.items() if not k.startswith("_")}
        for name, value in init.items():
            model.set_initval(model[name], value)
    log.info("model %s: %d z-scores in %d cell(s); xi parametrisation %s", spec.name, len(data.z), n_cells,
             parametrization or "n/a")
    return BuiltModel(model, data, spec, init, parametrization, obs_names, support_transform)


def simulate_zscore_table(cell_params: pd.DataFrame, n_per_cell: int | list[int], seed: int = 0) -> pd.DataFrame:
    """A z-score table drawn from known per-cell GEV parameters (for tests and benchmarks).

    ``cell_params`` has columns gpu, precision, mu, sigma, xi; the result has the columns of the
    table ``evtsync blocks`` writes (z, gpu, precision, workload, block, instance,
    block_mean_us, block_sd_us).
    """
    from evtsync.evt.distribution import gev_rvs_np

    rng = np.random.default_rng(seed)
    counts = [n_per_cell] * len(cell_params) if isinstance(n_per_cell, int) else list(n_per_cell)
    parts = []
    for (_, row), n in zip(cell_params.iterrows(), counts, strict=True):
        z = gev_rvs_np(row["mu"], row["sigma"], row["xi"], rng, size=n)
        parts.append(pd.DataFrame({
            "z": z, "gpu": row["gpu"], "precision": row["precision"], "workload": "synthetic",
            "block": "gemm-block", "instance": np.arange(n), "block_mean_us": 1000.0, "block_sd_us": 20.0,
        }))
    return pd.concat(parts, ignore_index=True)


PRIOR_CHECK_QUANTILES = (0.05, 0.5, 0.95, 0.99)


def _draw_prior(prior: Prior, size: int, rng: np.random.Generator) -> np.ndarray:
    seed = int(rng.integers(2**31 - 1))
    return np.asarray(pm.draw(_prior_dist(prior), draws=size, random_seed=seed), dtype=float).reshape(size)


def prior_predictive_check(spec: ModelSpec, data: ModelData, draws: int = 500, seed: int = 0,
                           level: float = 0.99) -> pd.DataFrame:
    """Prior predictive check: per cell, the GEV quantiles implied by parameter draws from the
    priors, against the observed quantiles of the z-scores.

    One row per (cell, quantile): observed value, the prior predictive median and central
    ``level`` interval of that quantile, the share of prior draws below the observed value
    and ``inside``. A quantile outside the interval means the priors rule out what the data
    show (too narrow, or centred in the wrong place).
    """
    from evtsync.evt import gev

    rng = np.random.default_rng(seed)
    n_cells = len(data.cells)

    def per_cell(prior: Prior, pooling: str) -> np.ndarray:
        if pooling == "none":
            return np.stack([_draw_prior(prior, draws, rng) for _ in range(n_cells)], axis=1)
        return np.repeat(_draw_prior(prior, draws, rng)[:, None], n_cells, axis=1)

    mu = per_cell(spec.mu.prior, spec.mu.pooling)
    sigma = per_cell(spec.sigma.prior, spec.sigma.pooling)
    if spec.family == "gumbel":
        xi = np.zeros((draws, n_cells))
    elif spec.xi.structure == "pooled":
        xi = per_cell(spec.xi.prior, "complete")
    else:
        xi = per_cell(spec.xi.prior, "complete")
        for f in spec.xi.factors:
            sd = _draw_prior(spec.xi.group_sd_prior, draws, rng)
            raw = rng.normal(size=(draws, len(data.factor_levels[f])))
            delta = (raw - raw.mean(axis=1, keepdims=True)) * sd[:, None]  # ZeroSumNormal(sd)
            level_of_cell = data.cells[f].map({lv: k for k, lv in enumerate(data.factor_levels[f])}).to_numpy()
            xi = xi + delta[:, level_of_cell]
    rows = []
    lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
    for i, cell in enumerate(data.cell_labels):
        z_cell = data.z[data.cell_slice(i)]
        for q in PRIOR_CHECK_QUANTILES:
            implied = np.asarray(gev.ppf(q, mu[:, i], sigma[:, i], xi[:, i]), dtype=float)
            observed = float(np.quantile(z_cell, q))
            lo, med, hi = np.quantile(implied, [lo_q, 0.5, hi_q])
            rows.append({"cell": cell, "quantile": q, "observed": observed, "prior_median": med,
                         "prior_lower": lo, "prior_upper": hi, "share_below": float(np.mean(implied < observed)),
                         "inside": bool(lo <= observed <= hi), "level": level})
    return pd.DataFrame(rows)
