"""Sample a model specification on a z-score table and keep the result as one netCDF file.

The fit is an :class:`xarray.DataTree` in ArviZ 1.x layout:

* ``posterior`` — parameters (``mu``, ``sigma``, ``xi`` per cell, hyper-parameters),
* ``sample_stats`` — per-draw sampler statistics (``diverging``, ``n_steps``, ...),
* ``observed_data`` — ``z`` per observation (sorted by cell) with ``cell`` and the original
  ``row`` of the input table,
* ``cells`` — one row per cell: its group labels and number of z-scores,
* ``prior_predictive_check`` — per cell and quantile (5, 50, 95, 99%): the observed z-score
  quantile against the prior predictive 99% interval of that quantile (attribute
  ``prior_predictive`` says which fall outside),
* ``log_likelihood`` — pointwise ``z`` log-likelihood, stored when it is small
  (:data:`evtsync.core.defaults.LOGLIK_STORE_LIMIT` values; :func:`evtsync.evt.compare.arviz_loo`
  then gives ArviZ's own ``loo``); otherwise :func:`evtsync.evt.compare.pointwise_loglik`
  recomputes it in chunks from the posterior and the observed data, to the same numbers,
* root attributes — provenance (input sha256, spec text, package versions, seed, command,
  sampler) and the convergence verdict (``converged``, ``max_rhat``, ``min_ess_bulk``,
  ``divergences``).

A fit with R-hat > 1.01, bulk ESS < 400 or any divergence is marked ``converged = 0`` and
every later output that uses it says so.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import ESS_MIN, LOGLIK_STORE_LIMIT, RHAT_MAX
from evtsync.core.errors import InputError
from evtsync.core.tableio import file_sha256
from evtsync.evt.fitfile import (  # noqa: F401 - the fit file's reading and writing, re-exported here
    FIT_FILE,
    FIT_FORMAT,
    FORMAT_ATTR,
    R_EFF_ATTR,
    cell_parameters,
    convergence_note,
    fit_path,
    is_converged,
    load_fit,
    parameter_summary,
    relative_efficiency,
    save_fit,
)
from evtsync.evt.spec import ModelSpec, SamplerConfig

if TYPE_CHECKING:  # PyMC (evtsync.evt.model) is imported by the functions that build or sample a model: a
    import xarray as xr  # imported by the functions that use it (issue 48: import cost)

    # process that only writes fits or reads ESS_MIN from here (a run's main process) does not pay for it
    from evtsync.evt.model import BuiltModel

log = logging.getLogger("evtsync.evt.fit")

#: NUTS step-size target for ``target_accept = "auto"`` (the default): the stricter target
#: up to AUTO_TARGET_MAX_OBS z-scores, where the group spreads of the hierarchical models
#: put curvature into the posterior that 0.8 steps through with divergences (demo study,
#: 1,908 z-scores: 3-7 divergences per fit at 0.8, none in 7 of 7 seeds at 0.95, same
#: time); above it the posterior is nearly Gaussian and each step costs more, so the
#: samplers' usual 0.8 (250k z-scores: 0.95 took 130 s against 65 s at 0.8).
#: Up to AUTO_TARGET_TINY_MAX_OBS z-scores (cells of a few hundred) the spreads' funnels are
#: sharper still: at 0.95 the SBC (150 z-scores per cell) had divergences in 24 of 117 fits and
#: issue 19's 200-per-cell study cases in 1 of 4 seeds of one case and at the slow test's seed
#: of another; at 0.99, 1 of 117 and none, for ~2x the leapfrog steps of cheap evaluations.
TARGET_ACCEPT_TINY, TARGET_ACCEPT_SMALL, TARGET_ACCEPT_LARGE = 0.99, 0.95, 0.8
AUTO_TARGET_TINY_MAX_OBS = 5_000
AUTO_TARGET_MAX_OBS = 20_000


def resolve_adaptation(value: str | None, n_obs: int) -> str:
    """nutpie's mass-matrix adaptation of a fit: ``value``, or for ``"auto"`` the low-rank one
    above AUTO_TARGET_MAX_OBS z-scores and the diagonal one up to it.

    Measured on the main model (docs/bayesian.md): with large cells the posterior is close to
    Gaussian but strongly correlated (a small cell's xi against the factor effects and the cell
    term), which a low-rank correction follows (issue 19's off-surface case, 25,200 z-scores:
    bulk ESS 1133 against 302, 7.0 against 8.6 leapfrog steps per draw); with small cells
    (150 per cell, SBC replicates) the curvature of the spreads' funnels dominates, and the
    low-rank matrix stepped into divergences in 4 of 8 replicates against 1 of 8 with the
    diagonal one.
    """
    if value is None or value == "auto":
        return "low_rank" if n_obs > AUTO_TARGET_MAX_OBS else "diag"
    return value


def resolve_target_accept(value: float | str | None, n_obs: int) -> float:
    """The NUTS target of a fit: ``value`` if a number, else the ``"auto"`` rule above."""
    if value is None or value == "auto":
        if n_obs <= AUTO_TARGET_TINY_MAX_OBS:
            return TARGET_ACCEPT_TINY
        return TARGET_ACCEPT_SMALL if n_obs <= AUTO_TARGET_MAX_OBS else TARGET_ACCEPT_LARGE
    if isinstance(value, str) or not 0 < float(value) < 1:
        raise InputError(f"--target-accept must lie in (0, 1) or be 'auto', got {value!r}")
    return float(value)
_PACKAGES = ("evtsync", "pymc", "pytensor", "nutpie", "arviz", "arviz-stats", "numpy", "scipy", "xarray", "numba")


def package_versions() -> dict[str, str]:
    """Versions of the packages a fit depends on (``absent`` when not installed)."""
    from evtsync.core.versions import package_versions as versions_of

    return versions_of(_PACKAGES)


@dataclass
class Convergence:
    """Convergence verdict of a fit (R-hat <= 1.01, bulk and tail ESS >= 400, no divergence).

    Tail ESS counts because every summary is an equal-tailed interval: its end points are
    the 5% and 95% quantiles, whose Monte Carlo error the tail ESS measures.
    """

    max_rhat: float
    min_ess_bulk: float
    divergences: int
    worst_rhat_param: str
    worst_ess_param: str
    min_ess_tail: float = float("inf")
    worst_ess_tail_param: str = ""

    @property
    def converged(self) -> bool:
        """Whether every check passes."""
        return (self.max_rhat <= RHAT_MAX and self.min_ess_bulk >= ESS_MIN and self.min_ess_tail >= ESS_MIN
                and self.divergences == 0)

    def describe(self) -> str:
        """One line: verdict with the worst parameters."""
        verdict = "converged" if self.converged else "NOT CONVERGED"
        return (f"{verdict}: max R-hat {self.max_rhat:.4f} ({self.worst_rhat_param}), "
                f"min bulk ESS {self.min_ess_bulk:.0f} ({self.worst_ess_param}), "
                f"min tail ESS {self.min_ess_tail:.0f} ({self.worst_ess_tail_param}), divergences {self.divergences}")


def _is_constant(values: np.ndarray) -> bool:
    return bool(np.ptp(values) == 0)


def check_convergence(tree: xr.DataTree, summary: pd.DataFrame | None = None) -> Convergence:
    """R-hat, bulk and tail ESS and divergences over every free posterior quantity.

    Quantities that are constant across all draws (e.g. the last entry of nothing) have an
    undefined R-hat and are left out; a non-finite R-hat elsewhere counts as a failure.
    """
    if summary is None:
        summary = parameter_summary(tree)
    post = tree["posterior"].to_dataset()
    keep = []
    for _, row in summary.iterrows():
        name = row["parameter"].split("[")[0]
        keep.append(not _is_constant(post[name].values))
    s = summary[np.array(keep, dtype=bool)]
    rhat = s["r_hat"].fillna(np.inf)
    ess = s["ess_bulk"].fillna(0.0)
    tail = s["ess_tail"].fillna(0.0)
    div = np.asarray(tree["sample_stats"]["diverging"].values)
    return Convergence(
        max_rhat=float(rhat.max()) if len(s) else float("nan"),
        min_ess_bulk=float(ess.min()) if len(s) else float("nan"),
        divergences=int(np.sum(div)),
        worst_rhat_param=str(s["parameter"].iloc[int(np.argmax(rhat.to_numpy()))]) if len(s) else "",
        worst_ess_param=str(s["parameter"].iloc[int(np.argmin(ess.to_numpy()))]) if len(s) else "",
        min_ess_tail=float(tail.min()) if len(s) else float("nan"),
        worst_ess_tail_param=str(s["parameter"].iloc[int(np.argmin(tail.to_numpy()))]) if len(s) else "",
    )


def _loglik_tree(tree: xr.DataTree) -> xr.Dataset:
    """Pointwise log-likelihood of every z-score at every draw: each z-score against its own
    cell's parameters, in one compiled pass (:func:`evtsync.evt.loglik.gev_loglik`)."""
    import xarray as xr

    from evtsync.evt.loglik import gev_loglik

    params = cell_parameters(tree)
    obs = tree["observed_data"].to_dataset()
    mu, sigma, xi = (params[name].transpose("chain", "draw", "cell").values for name in ("mu", "sigma", "xi"))
    n_chain, n_draw = mu.shape[:2]
    ll = gev_loglik(obs["z"].values, obs["cell"].values, *(v.reshape(n_chain * n_draw, -1) for v in (mu, sigma, xi)))
    return xr.Dataset({"z": (("chain", "draw", "obs"), ll.reshape(n_chain, n_draw, -1))},
                      coords={"chain": params["chain"], "draw": params["draw"], "obs": obs["obs"]})


def _assemble(built: BuiltModel, raw: xr.DataTree, sampler: str, provenance: dict[str, str]) -> xr.DataTree:
    import xarray as xr
    data = built.data
    post = raw["posterior"].to_dataset()
    drop = [v for v in post.data_vars if str(v).startswith("z_obs")]
    post = post.drop_vars(drop)
    stats = raw["sample_stats"].to_dataset()
    if "diverging" not in stats and "divergences" in stats:
        stats["diverging"] = stats["divergences"].astype(bool)
    keep_stats = [v for v, da in stats.data_vars.items()
                  if set(da.dims) == {"chain", "draw"} and da.dtype != object]
    stats = stats[keep_stats]
    n_obs = len(data.z)
    observed = xr.Dataset(
        {"z": ("obs", data.z), "cell": ("obs", data.cell_of_obs.astype(np.int32)),
         "row": ("obs", data.order.astype(np.int64))},
        coords={"obs": np.arange(n_obs)},
    )
    cells_ds = xr.Dataset({"n_obs": ("cell", data.cells["n_obs"].to_numpy().astype(np.int64))},
                          coords={"cell": data.cells["cell"].to_numpy().astype(str)})
    for g in built.spec.groups:
        cells_ds[g] = ("cell", data.cells[g].astype(str).to_numpy())
    children = {"posterior": post, "sample_stats": stats, "observed_data": observed, "cells": cells_ds}
    tree = xr.DataTree.from_dict(children)
    for name in ("posterior", "sample_stats", "observed_data", "cells"):
        tree[name].attrs["sample_dims"] = ["chain", "draw"] if name in ("posterior", "sample_stats") else []
    n_values = post.sizes["chain"] * post.sizes["draw"] * n_obs
    if n_values <= LOGLIK_STORE_LIMIT:
        tree["log_likelihood"] = xr.DataTree(_loglik_tree(tree))
        tree["log_likelihood"].attrs["sample_dims"] = ["chain", "draw"]
        loglik_note = "stored"
    else:
        loglik_note = f"not stored ({n_values} values); computed in chunks by evtsync compare"
    summary = parameter_summary(tree)
    conv = check_convergence(tree, summary)
    tree.attrs.update(provenance)
    tree.attrs.update({
        FORMAT_ATTR: FIT_FORMAT,
        "sampler": sampler,
        "n_obs": n_obs,
        "n_skipped": int(data.n_skipped),
        "xi_parametrization": json.dumps(built.parametrization),
        "sigma_support_transform": int(built.support_transform),
        "initial_point": json.dumps({k: np.asarray(v).tolist() for k, v in built.initial_point.items()}),
        "log_likelihood": loglik_note,
        "converged": int(conv.converged),
        "max_rhat": conv.max_rhat,
        "min_ess_bulk": conv.min_ess_bulk,
        "divergences": conv.divergences,
        "convergence": conv.describe(),
        R_EFF_ATTR: relative_efficiency(tree),  # PSIS-LOO's, for compare (evtsync.evt.compare.loo)
    })
    return tree


def model_structure_key(built: BuiltModel, backend: str) -> str:
    """What a compiled model depends on besides its ``pm.Data``: the spec, the cells and their
    sizes, and the choices made from the data (support transform, parametrisation, cell basis)."""
    basis = None if built.cell_basis is None else np.round(built.cell_basis, 12).tolist()
    return json.dumps({"spec": built.spec.text, "backend": backend, "cells": built.data.cell_labels,
                       "n_obs": built.data.cells["n_obs"].astype(int).tolist(),
                       "support_transform": built.support_transform_cells.astype(int).tolist(),
                       "parametrization": built.parametrization, "basis": basis})


@functools.lru_cache(maxsize=1)
def _model_code_digest() -> str:
    """SHA-256 of the sources a model's graph is built from (``evtsync/evt``, ``evtsync/core``)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for folder in ("evt", "core"):
        for path in sorted((root / folder).glob("*.py")):
            digest.update(f"{folder}/{path.name}".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def compiled_model_key(built: BuiltModel, backend: str) -> str:
    """The key of ``built``'s compiled model in the compiled-model cache
    (:func:`evtsync.evt.nutpie_numba.compile_numba_model`): SHA-256 of its structure
    (:func:`model_structure_key`), every value its graph may hold (the model's data variables,
    the z-scores with their cells, the cells' table) and the sources that build it. Two fits
    with one key build the same graph; any change of data, spec or code gives another key."""
    digest = hashlib.sha256()
    digest.update(model_structure_key(built, backend).encode())
    digest.update(_model_code_digest().encode())
    for var in sorted(built.model.data_vars, key=lambda v: str(v.name)):
        value = np.ascontiguousarray(var.get_value())
        digest.update(f"{var.name}:{value.dtype}:{value.shape}".encode())
        digest.update(value.tobytes())
    data = built.data
    for arr in (data.z, data.cell_of_obs):
        value = np.ascontiguousarray(arr)
        digest.update(f"{value.dtype}:{value.shape}".encode())
        digest.update(value.tobytes())
    digest.update(data.cells.to_csv().encode())  # floats written as their shortest round-trip repr
    return digest.hexdigest()


def _reuse_compiled(compiled, built: BuiltModel):
    """``compiled`` (the same structure) with ``built``'s data and initial point."""
    import dataclasses

    model = built.model
    compiled = compiled.with_data(**{v.name: v.get_value() for v in model.data_vars})
    flat, _ = _point_splitter(model)
    return dataclasses.replace(compiled, initial_point_func=lambda seed=None: flat.copy())


#: Half-width of each chain's uniform jitter around the model's initial point, per coordinate of
#: the unconstrained space (PyMC's "jitter+adapt_diag" uses 1 too): chains that start apart let
#: R-hat see a start dependence that chains started at one point would hide (issue 29).
START_JITTER = 1.0
#: How often a start outside the support (non-finite log density) is redrawn at half the width.
START_TRIES = 12
#: What the fit records about its chains' starting points (attribute ``chain_starts``).
START_POLICY = (f"dispersed: each chain starts at the initial point + Uniform(-{START_JITTER:g}, {START_JITTER:g}) per "
                "unconstrained coordinate, redrawn at half the width while outside the support")


def _point_splitter(model: Any) -> tuple[np.ndarray, Any]:
    """The model's initial point as nutpie's flat vector, and a function from such a vector to
    PyMC's point dict (free variables in ``model.free_RVs`` order)."""
    point = model.initial_point()
    names = [model.rvs_to_values[rv].name for rv in model.free_RVs]
    shapes = [np.shape(point[n]) for n in names]
    sizes = [int(np.prod(sh)) for sh in shapes]
    flat = np.concatenate([np.asarray(point[n], dtype=float).ravel() for n in names])

    def to_point(x: np.ndarray) -> dict[str, np.ndarray]:
        out, i = {}, 0
        for name, shape, size in zip(names, shapes, sizes, strict=True):
            out[name] = np.asarray(x[i:i + size]).reshape(shape)
            i += size
        return out

    return flat, to_point


def _finite_logp(compiled: Any, built: BuiltModel) -> Any:
    """A function of nutpie's flat vector: whether the model's log density there is finite.

    With nutpie's numba backend, the sampler's own compiled log density (its C callback, already
    compiled or loaded from the cache): the density the chains will evaluate, at no compilation
    cost. Otherwise (jax, another nutpie) PyMC's ``compile_logp`` (a compilation: 0.05-1 s)."""
    import ctypes

    cfunc = getattr(compiled, "compiled_logp_func", None)
    user_data = getattr(compiled, "user_data", None)
    n_dim = getattr(compiled, "_n_dim", None)
    # nutpie's n_dim is a numpy integer (an `int` test alone sent every fit to PyMC's compile_logp)
    if cfunc is not None and isinstance(user_data, np.ndarray) and isinstance(n_dim, (int, np.integer)):
        n_dim = int(n_dim)
        call = cfunc.ctypes
        doubles = ctypes.POINTER(ctypes.c_double)

        def finite_numba(x: np.ndarray) -> bool:
            x = np.ascontiguousarray(x, dtype=np.float64)
            grad, value = np.empty(n_dim), np.full((), np.nan)  # per call: the chains' threads may call at once
            # 0: log density and gradient finite; 3: the gradient is not (the density may be)
            code = call(n_dim, x.ctypes.data_as(doubles), grad.ctypes.data_as(doubles), value.ctypes.data_as(doubles),
                        user_data.ctypes.data_as(ctypes.c_void_p))
            return code in (0, 3) and bool(np.isfinite(value[()]))

        return finite_numba
    _, to_point = _point_splitter(built.model)
    logp = built.model.compile_logp()

    def finite_pymc(x: np.ndarray) -> bool:
        with np.errstate(all="ignore"):
            return bool(np.isfinite(float(logp(to_point(x)))))

    return finite_pymc


def _dispersed_starts(compiled: Any, built: BuiltModel,
                      place: Callable[[np.ndarray, np.random.Generator, float], np.ndarray | None] | None = None,
                      ) -> Any:
    """``compiled`` whose chains start apart (:data:`START_POLICY`), each start inside the support.

    nutpie asks ``initial_point_func`` for one start per chain with its own seed; each is the
    model's initial point plus a uniform jitter, checked against the model's log density
    (:func:`_finite_logp`). With ``place`` (a function of nutpie's flat vector, the start's
    generator and the current jitter width, callable from the sampler's threads), the jittered
    point is first handed to the model's own placement, which returns it moved to where the model's
    stricter condition holds (None: no such point; redrawn): the rank model's "every excess well
    inside the GPD's support", met by its scale (docs/methodology.md, "The rank model"). The GEV
    fits pass none: their starts are those of the log-density check alone (docs/bayesian.md,
    "Chains": in a bounded-tail experiment chains started near the GEV's support wall, none stayed)."""
    import dataclasses

    flat, _ = _point_splitter(built.model)
    finite = _finite_logp(compiled, built)

    def start(seed: Any = None) -> np.ndarray:
        rng = np.random.default_rng(seed)
        width = START_JITTER
        for _ in range(START_TRIES):
            jittered = flat + rng.uniform(-width, width, flat.size)
            x = jittered if place is None else place(jittered, rng, width)
            if x is not None and finite(x):
                return x
            width /= 2
        log.info("no dispersed start inside the support after %d tries: a chain starts at the initial point",
                 START_TRIES)
        return flat.copy()

    return dataclasses.replace(compiled, initial_point_func=start)


def _sample_nutpie(built: BuiltModel, config: SamplerConfig, seed: int, progress: bool,
                   target_accept: float, compiled_cache: dict | None = None) -> xr.DataTree:
    import nutpie
    import pytensor

    # No fast-math: with it, a freshly compiled graph and the same graph loaded from PyTensor's
    # cache round differently, and the same seed gave different draws on the first run.
    start = time.perf_counter()
    key = model_structure_key(built, config.backend) if compiled_cache is not None else None
    cache = compiled_cache if compiled_cache is not None else {}  # never used without a key
    reused = key is not None and key in cache
    # nutpie stores the free variables only; the deterministics are computed from their draws
    # afterwards (_with_deterministics): compiling them into nutpie's numba function cost ~3 s
    # of every fit, evaluating them over 2 x 1000 draws costs ~0.3 s
    free = [rv.name for rv in built.model.free_RVs]
    if reused:
        compiled = _reuse_compiled(cache[key], built)
    elif config.backend == "jax":
        from evtsync.evt.distribution import register_jax_backend

        register_jax_backend()
        compiled = nutpie.compile_pymc_model(built.model, backend="jax", gradient_backend="jax", jitter_rvs=set(),
                                             var_names=free)
    else:
        from evtsync.evt.nutpie_numba import compile_numba_model

        with pytensor.config.change_flags(numba__fastmath=False):
            compiled = compile_numba_model(built.model, free, cache_key=compiled_model_key(built, config.backend))
    if key is not None and not reused:
        cache[key] = compiled
    compiled = _dispersed_starts(compiled, built)
    compile_s = time.perf_counter() - start
    cores = min(config.chains, os.cpu_count() or 1)
    raw = nutpie.sample(compiled, draws=config.draws, tune=config.tune, chains=config.chains, cores=cores,
                        seed=seed, progress_bar=progress, save_warmup=False, target_accept=target_accept,
                        adaptation=config.adaptation)
    raw.attrs["compile_seconds"] = compile_s
    raw.attrs["compiled_model_reused"] = int(reused)
    return _with_deterministics(raw, built)


def warm_up_sampler() -> None:
    """Compile a one-variable model with nutpie's numba backend, as a fit does: the compilation
    that every first fit of a process pays besides its own model's (numba's helpers for
    nutpie's wrappers, ~4 s), done ahead, e.g. by a pool process while other work runs."""
    from importlib.util import find_spec

    if find_spec("nutpie") is None:
        return
    import pymc as pm
    import pytensor

    from evtsync.evt.nutpie_numba import compile_numba_model

    with pm.Model() as model:
        pm.Normal("x")

    with pytensor.config.change_flags(numba__fastmath=False):
        compile_numba_model(model, ["x"])


def _with_deterministics(raw: xr.DataTree, built: BuiltModel) -> xr.DataTree:
    """``raw`` with the model's deterministics added to its posterior, evaluated from the draws of
    the free variables in one call of a small PyTensor function vectorised over the draws (no
    numba compilation; PyMC's ``compute_deterministics`` calls one per draw: 1.4 s for 2,000)."""
    import pytensor
    import pytensor.tensor as pt
    import xarray as xr
    from pytensor.graph.replace import vectorize_graph

    model = built.model
    if not model.deterministics:
        return raw
    post = raw["posterior"].to_dataset()
    n_chain, n_draw = post.sizes["chain"], post.sizes["draw"]
    batched = {rv: pt.tensor(dtype=rv.dtype, shape=(None, *rv.type.shape), name=rv.name) for rv in model.free_RVs}
    outs = vectorize_graph(list(model.deterministics), replace=batched)
    fn = pytensor.function(list(batched.values()), outs, mode="FAST_COMPILE", on_unused_input="ignore")
    draws = [post[rv.name].values.reshape(n_chain * n_draw, *post[rv.name].shape[2:]).astype(rv.dtype)
             for rv in model.free_RVs]
    for det, values in zip(model.deterministics, fn(*draws), strict=True):
        dims = tuple(model.named_vars_to_dims.get(det.name) or ())
        values = np.asarray(values).reshape(n_chain, n_draw, *np.shape(values)[1:])
        dims = dims or tuple(f"{det.name}_dim_{i}" for i in range(values.ndim - 2))
        coords = {d: np.asarray(model.coords[d]) for d in dims if model.coords.get(d) is not None}
        post[det.name] = xr.DataArray(values, dims=("chain", "draw", *dims), coords=coords)
    raw["posterior"] = xr.DataTree(post)
    return raw


def _sample_pymc(built: BuiltModel, config: SamplerConfig, seed: int, progress: bool,
                 target_accept: float) -> xr.DataTree:
    import pymc as pm

    with built.model:
        return pm.sample(draws=config.draws, tune=config.tune, chains=config.chains, cores=1, init="jitter+adapt_diag",
                         random_seed=seed, progressbar=progress, compute_convergence_checks=False,
                         target_accept=target_accept)


def _run_sampler(built: BuiltModel, config: SamplerConfig, seed: int, progress: bool, target_accept: float,
                 compiled_cache: dict) -> tuple[xr.DataTree, str]:
    """Sample with the configured sampler (PyMC's NUTS when nutpie is missing); the sampler used."""
    if config.sampler == "nutpie":
        try:
            return _sample_nutpie(built, config, seed, progress, target_accept, compiled_cache), "nutpie"
        except ImportError as exc:
            log.warning("nutpie (or its %s backend) is not available (%s); falling back to PyMC's NUTS",
                        config.backend, exc)
    return _sample_pymc(built, config, seed, progress, target_accept), "pymc"


def resolve_sampler_config(spec: ModelSpec, sampler: SamplerConfig | str | None = None, **overrides) -> SamplerConfig:
    """The settings of a fit: ``sampler`` (a :class:`SamplerConfig`) or the spec's ``[sampling]``
    table, then every keyword that is not None (old keyword arguments, CLI flags)."""
    if isinstance(sampler, SamplerConfig):
        config = sampler
    else:
        config = spec.sampler_config()
        if sampler is not None:
            overrides["sampler"] = sampler
    return config.override(**overrides)


def fit_table(
    table: pd.DataFrame,
    spec: ModelSpec,
    *,
    sampler: SamplerConfig | str | None = None,
    draws: int | None = None,
    tune: int | None = None,
    chains: int | None = None,
    seed: int | None = None,
    source: str = "<table>",
    source_sha256: str = "",
    command: str = "",
    progress: bool = False,
    target_accept: float | str | None = None,
    backend: str | None = None,
    compiled_cache: dict | None = None,
) -> xr.DataTree:
    """Fit ``spec`` to ``table`` and return the self-describing fit tree (see module doc).

    Settings come from ``sampler``, else the spec's ``[sampling]`` table; ``draws``, ``tune``,
    ``chains``, ``seed``, ``target_accept`` and ``backend`` override them when not None.
    ``extend`` (a sampler setting, default 0): a fit that fails only on R-hat or ESS, with no
    divergence, continues its chains to twice the draws up to that many times; the attr
    ``extended`` and the convergence line keep each shorter run's verdict.

    Besides the posterior the tree holds the prior and the posterior predictive checks
    (``prior_predictive_check``, ``posterior_predictive_check`` groups; verdicts in the attrs
    ``prior_predictive``, ``posterior_predictive`` and ``posterior_predictive_fits``).

    Parameters
    ----------
    table : pandas.DataFrame
        The z-score table (:func:`evtsync.zscore_table`) with the spec's column and groups.
    spec : ModelSpec
        The model (:func:`evtsync.load_spec`).
    sampler : SamplerConfig, str or None, default None
        Sampler settings (:class:`~evtsync.evt.spec.SamplerConfig`), or, as before, the
        sampler's name; None: the spec's ``[sampling]`` table.
    draws, tune, chains : int or None, default None
        Draws and tuning steps per chain, and the number of chains.
    seed : int or None, default None
        Random seed; None draws a fresh one, recorded in the fit.
    source : str, default "<table>"
        Name of the input in messages and in the fit's provenance.
    source_sha256 : str, default ""
        Checksum of the input file, recorded in the provenance.
    command : str, default ""
        The command line that made the fit, recorded in the provenance.
    progress : bool, default False
        Show the sampler's progress bar.
    target_accept : float, str or None, default None
        A number in (0, 1) or ``"auto"`` (:func:`resolve_target_accept`).
    backend : str or None, default None
        nutpie's backend (``numba``, or ``jax`` where jax is installed).
    compiled_cache : dict or None, default None
        A dict kept by the caller (nutpie only): a model compiled for a data set of the same
        structure (:func:`model_structure_key`) is reused with this table's data and initial
        point instead of compiled again (studies that fit many simulated data sets); recorded
        in the attrs.

    Returns
    -------
    xarray.DataTree
        The fit: posterior, predictive checks, observed data, the spec text, provenance and
        convergence verdict (``converged``, ``convergence``) in the attrs; wrap it in
        :class:`evtsync.BayesFit`.

    Raises
    ------
    InputError
        Missing or non-numeric columns, fewer than 3 usable z-scores (in all, or in a cell), a
        cell whose values are all equal, or a ``target_accept`` outside (0, 1).
    """
    import xarray as xr

    from evtsync.evt.model import (
        build_model,
        cell_interaction_note,
        prepare_data,
        prior_predictive_check,
        to_data_scale,
    )
    from evtsync.evt.ppc import check_dataset, posterior_predictive_check, ppc_verdict

    config = resolve_sampler_config(spec, sampler, draws=draws, tune=tune, chains=chains, seed=seed,
                                    target_accept=target_accept, backend=backend)
    seed_used = config.seed if config.seed is not None else int(np.random.default_rng().integers(2**31 - 1))
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    data = prepare_data(table, spec, source)
    ta = resolve_target_accept(config.target_accept, len(data.z))
    config = config.override(adaptation=resolve_adaptation(config.adaptation, len(data.z)))
    built = build_model(spec, data, source=source)
    timings["build_s"] = time.perf_counter() - t0
    # A fit that fails only on R-hat or ESS (no divergence: more draws cannot remove those)
    # continues its chains to twice the draws, up to config.extend times: the same seed and
    # tuning give the same first draws (nutpie), so the longer run is the same chains run
    # longer, not a second try picked for its verdict. Each earlier verdict is kept in the fit.
    cache = compiled_cache if compiled_cache is not None else {}
    extensions: list[str] = []
    compile_s = sampling_s = assemble_s = 0.0
    reused = 0
    while True:
        start = time.perf_counter()
        raw, sampler_name = _run_sampler(built, config, seed_used, progress, ta, cache)
        elapsed = time.perf_counter() - start
        compile_s += float(raw.attrs.get("compile_seconds", 0.0))
        sampling_s += elapsed - float(raw.attrs.get("compile_seconds", 0.0))
        if not extensions:
            reused = int(raw.attrs.get("compiled_model_reused", 0))
        if built.data.standardised:
            raw["posterior"] = xr.DataTree(to_data_scale(built, raw["posterior"].to_dataset()))
        provenance = {
            "model_name": spec.name,
            "model_family": spec.family,
            "model_spec_path": spec.path,
            "model_spec_text": spec.text,
            "data_column": spec.column,  # the column fitted (a CLI --column may differ from the text's)
            "input_path": source,
            "input_sha256": source_sha256,
            "package_versions": json.dumps(package_versions()),
            "seed": int(seed_used),
            "draws": int(config.draws),
            "tune": int(config.tune),
            "chains": int(config.chains),
            "chain_starts": START_POLICY,
            "target_accept": float(ta),
            "nutpie_backend": config.backend if sampler_name == "nutpie" else "",
            "nutpie_adaptation": config.adaptation if sampler_name == "nutpie" else "",
            "command": command or " ".join(sys.argv),
            "sampling_seconds": round(compile_s + sampling_s, 3),
            "compiled_model_reused": reused,
            "created": pd.Timestamp.now(tz="UTC").isoformat(),
        }
        t1 = time.perf_counter()
        tree = _assemble(built, raw, sampler_name, provenance)
        assemble_s += time.perf_counter() - t1
        if is_converged(tree) or int(tree.attrs["divergences"]) > 0 or len(extensions) >= config.extend:
            break
        extensions.append(f"{config.draws} draws per chain gave {tree.attrs['convergence']}")
        log.warning("%s: %s; continuing the chains to %d draws", spec.name, extensions[-1], 2 * config.draws)
        config = config.override(draws=2 * config.draws)
    timings["compile_s"] = compile_s
    timings["sampling_s"] = sampling_s
    timings["assemble_s"] = assemble_s
    tree.attrs["extended"] = "; ".join(extensions) if extensions else "no"
    if extensions:
        tree.attrs["convergence"] += (f" (chains continued to {config.draws} draws: "
                                      + "; ".join(extensions).replace("draws per chain gave ", "draws: ") + ")")
    tree.attrs["sigma_support_transform_cells"] = json.dumps(
        [c for c, flag in zip(built.data.cell_labels, built.support_transform_cells, strict=True) if flag])
    tree.attrs["spread_priors"] = json.dumps(built.spread_priors)
    tree.attrs["cell_term"] = cell_interaction_note(built)
    tree.attrs["data_scale"] = spec.scale
    if built.data.standardised:
        cells = tree["cells"].to_dataset()
        cells["model_centre"] = ("cell", built.data.cell_centre)
        cells["model_scale"] = ("cell", built.data.cell_scale)
        tree["cells"] = xr.DataTree(cells)
    t1 = time.perf_counter()
    check = prior_predictive_check(spec, data, seed=seed_used)
    tree["prior_predictive_check"] = xr.DataTree(xr.Dataset.from_dataframe(check.set_index(["cell", "quantile"])))
    outside = check[~check["inside"]]
    tree.attrs["prior_predictive"] = (
        "observed quantiles inside the prior predictive 99% intervals" if outside.empty else
        "observed outside the prior predictive 99% interval: " + ", ".join(
            f"{r.cell} q{r.quantile:g}" for r in outside.itertuples()))
    if not outside.empty:
        log.warning("%s: prior predictive check: %s", spec.name, tree.attrs["prior_predictive"])
    timings["prior_check_s"] = time.perf_counter() - t1
    t1 = time.perf_counter()
    ppc = posterior_predictive_check(tree, seed=seed_used)
    fits, verdict = ppc_verdict(ppc)
    tree["posterior_predictive_check"] = xr.DataTree(check_dataset(ppc))
    tree.attrs["posterior_predictive"] = verdict
    tree.attrs["posterior_predictive_fits"] = int(fits)
    if not fits:
        log.warning("%s: posterior predictive check: %s", spec.name, verdict)
    timings["posterior_check_s"] = time.perf_counter() - t1
    tree.attrs["timings"] = json.dumps({k: round(v, 3) for k, v in timings.items()})
    log.info("fit %s: %s; posterior predictive check: %s", spec.name, tree.attrs["convergence"], verdict)
    return tree


def fit_file(path: str | Path, spec: ModelSpec, **kwargs) -> xr.DataTree:
    """Read a z-score table (Parquet/CSV) and fit ``spec``; provenance records its sha256."""
    from evtsync.core.tableio import read_table

    table = read_table(path)
    return fit_table(table, spec, source=str(path), source_sha256=file_sha256(path), **kwargs)


def tree_from_draws(
    draws: dict[str, np.ndarray],
    cells: pd.DataFrame,
    z: np.ndarray,
    cell_of_obs: np.ndarray,
    model_name: str = "external",
    family: str = "gev",
    converged: bool = True,
) -> xr.DataTree:
    """A fit tree in this module's layout from draws obtained elsewhere (or constructed).

    ``draws`` maps ``mu``, ``sigma`` and optionally ``xi`` to arrays of shape (chain, draw) or
    (chain, draw, cell); ``cells`` has a ``cell`` column (labels) and any group columns; ``z``
    and ``cell_of_obs`` are the observations and their cell index. Convergence is taken as given.
    """
    import xarray as xr
    first = np.asarray(next(iter(draws.values())))
    n_chain, n_draw = first.shape[:2]
    coords = {"chain": np.arange(n_chain), "draw": np.arange(n_draw), "cell": cells["cell"].astype(str).to_numpy()}
    post = xr.Dataset(
        {k: (("chain", "draw", "cell")[: np.asarray(v).ndim], np.asarray(v, dtype=float)) for k, v in draws.items()},
        coords=coords,
    )
    stats = xr.Dataset({"diverging": (("chain", "draw"), np.zeros((n_chain, n_draw), dtype=bool))},
                       coords={"chain": coords["chain"], "draw": coords["draw"]})
    z = np.asarray(z, dtype=float)
    observed = xr.Dataset({"z": ("obs", z), "cell": ("obs", np.asarray(cell_of_obs, dtype=np.int32)),
                           "row": ("obs", np.arange(len(z), dtype=np.int64))}, coords={"obs": np.arange(len(z))})
    n_obs = np.bincount(np.asarray(cell_of_obs), minlength=len(cells))
    cells_ds = xr.Dataset({"n_obs": ("cell", n_obs.astype(np.int64))}, coords={"cell": coords["cell"]})
    for g in cells.columns:
        if g not in ("cell", "n_obs", "start", "stop"):
            cells_ds[g] = ("cell", cells[g].astype(str).to_numpy())
    tree = xr.DataTree.from_dict({"posterior": post, "sample_stats": stats, "observed_data": observed,
                                  "cells": cells_ds})
    tree.attrs.update({FORMAT_ATTR: FIT_FORMAT, "model_name": model_name, "model_family": family,
                       "converged": int(converged),
                       "convergence": "given" if converged else "NOT CONVERGED (given)", "n_obs": len(z)})
    return tree
