"""The Bayesian fit as an object: :class:`BayesFit`, loaded and saved without the sampler.

A fit is one netCDF-4 file (an :class:`xarray.DataTree` in ArviZ 1.x layout, described in
:mod:`evtsync.evt.fit`). ``BayesFit`` wraps it and answers what every later step asks:

    fit = BayesFit.load("fits/gev-hier-gpu-precision")   # no PyMC import
    fit.spec                 # the ModelSpec that made it, parsed back from the stored text
    fit.provenance           # input sha256, seed, sampler settings, package versions, command
    fit.converged, fit.convergence
    fit.posterior["xi"].sel(gpu="H200", precision="bf16")   # labelled dimensions
    fit.cell_parameters()    # mu, sigma, xi per cell (pooled ones broadcast), cell = (gpu, precision)
    fit.save("elsewhere/")   # round trip

Labelled dimensions. In the file, per-cell parameters have a ``cell`` dimension with labels
such as ``"H200|bf16"`` (netCDF stores no MultiIndex); :attr:`BayesFit.posterior` unstacks it
into one dimension per group (``gpu``, ``precision``), the dims that the group effects
(``xi_delta_gpu``) already use. Cells absent from the data (an incomplete grid) are NaN there;
:meth:`BayesFit.cell_parameters` keeps the observed cells only, on a ``cell`` dimension
indexed by ``gpu`` and ``precision`` coordinates, so ``.sel(gpu=..., precision=...)`` works on
both.

Format. Every file written since this module records ``evtsync_fit_format``
(:data:`FIT_FORMAT`); loading refuses a newer version with the way out (upgrade evtsync).
Files without it (written before the format had a number) load as version 0.

:class:`BayesFit` and :class:`evtsync.evt.mlefit.MleCellFit` share the small interface that
predictions use (:class:`CellFit`): ``name``, ``family``, ``kind``, ``converged``,
``convergence_note``, ``cells`` and ``cell_draws()``.
"""

from __future__ import annotations

import json
import logging
import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from evtsync.core.defaults import POPULATION_MODEL
from evtsync.core.errors import FitError, InputError
from evtsync.evt.families import family as family_of
from evtsync.evt.fitfile import (  # noqa: F401 - the fit file's format, re-exported with the object
    CHECKSUMS_ATTR,
    CONTENT_ATTR,
    FIT_FILE,
    FIT_FORMAT,
    FORMAT_ATTR,
    PPC_GROUPS,
    PRIOR_DOMINATED_RATIO,
    PROVENANCE_KEYS,
    REQUIRED_GROUPS,
    _group_index,
    _split_single_chain,
    _spread_priors,
    cell_parameters,
    cell_table,
    content_sha256,
    convergence_note,
    fit_path,
    format_version,
    is_converged,
    load_fit,
    parameter_summary,
    part_checksums,
    require_netcdf_engine,
    save_fit,
    spread_prior_table,
)

log = logging.getLogger("evtsync.evt.bayesfit")

if TYPE_CHECKING:
    import xarray as xr  # imported by the functions that use it (issue 48: import cost)

    from evtsync.evt.spec import ModelSpec

@runtime_checkable
class CellFit(Protocol):
    """What predictions need of a fit, Bayesian or maximum likelihood."""

    @property
    def name(self) -> str: ...  # noqa: D102
    @property
    def family(self) -> str: ...  # noqa: D102
    @property
    def kind(self) -> str: ...  # noqa: D102
    @property
    def converged(self) -> bool: ...  # noqa: D102
    @property
    def convergence_note(self) -> str: ...  # noqa: D102
    @property
    def cells(self) -> pd.DataFrame: ...  # noqa: D102
    def cell_draws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...  # noqa: D102


def _zero_sum_new(sd: np.ndarray, n_levels: int, rng: np.random.Generator) -> np.ndarray:
    """A new level's deviation from the mean of ``n_levels`` zero-sum deviations of spread ``sd``.

    The fitted deviations are eta - mean(eta) with eta iid Normal(0, sd) (a ZeroSumNormal); a new
    level is eta_new - mean(eta), whose sd is ``sd · sqrt(1 + 1/L)`` (mean(eta) is not identified).
    """
    return rng.standard_normal(sd.shape) * sd * np.sqrt(1.0 + 1.0 / max(n_levels, 1))


def _flat(post: Any, name: str) -> np.ndarray:
    """A posterior variable as (sample, *rest) with chain and draw stacked."""
    da = post[name]
    rest = [d for d in da.dims if d not in ("chain", "draw")]
    return np.asarray(da.transpose("chain", "draw", *rest).values, dtype=float).reshape(-1, *[da.sizes[d] for d in rest])


def population_refusal(fit: Any, parameter: str, why: str) -> InputError:
    """The error for a fit that cannot draw a new level: ``parameter`` ``why``, and the model that can."""
    return InputError(
        f"fit {fit.name}: cannot predict a GPU/precision level it has not seen: {parameter} {why}, so it has no "
        f"population to draw a new level from (methodology §7); fit models/{POPULATION_MODEL}.toml (mu and sigma partially "
        f"pooled across cells, xi = xi0 + delta_gpu + delta_precision + cell term) to answer this question")


def _cell_term_spread(fit: Any, post: Any, n_sample: int, rng: np.random.Generator) -> np.ndarray | None:
    """Spread draws of xi's cell term for a new cell: the posterior's ``xi_sd_cell``; when the spec
    has a cell term that the data could not identify (no variable stored), its prior; else None."""
    if "xi_sd_cell" in post:
        return _flat(post, "xi_sd_cell")
    try:
        prior = fit.spec.xi.cell_sd_prior
    except Exception:  # noqa: BLE001 - a fit without its spec text (built from draws) has no term to draw
        return None
    if prior is None:
        return None
    from evtsync.evt.model import _scipy_prior

    log.info("fit %s: xi's cell term was not identified by the data; a new cell's term is drawn from its prior %s",
             fit.name, prior.describe())
    return np.asarray(_scipy_prior(prior).rvs(size=n_sample, random_state=rng), dtype=float)


# --------------------------------------------------------------------------- the object

class BayesFit:
    """A Bayesian fit: its posterior on labelled dimensions, spec, provenance and convergence."""

    kind = "bayes"

    def __init__(self, tree: xr.DataTree, path: str | os.PathLike[str] | None = None) -> None:
        for group in REQUIRED_GROUPS:
            if group not in tree.children:
                raise FitError(f"{path or 'fit'}: not an evtsync fit (group '{group}' missing)")
        self.tree = tree
        self.path = Path(path) if path is not None else (Path(tree.attrs["fit_path"])
                                                         if "fit_path" in tree.attrs else None)
        self.format_version = format_version(tree, str(self.path or "fit"))

    # ---- files
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BayesFit:
        """Read a fit file (or its folder); checks the groups and the format version.

        Parameters
        ----------
        path : path
            A fit file (``fit.nc``) or the folder that holds it.

        Returns
        -------
        BayesFit
            The fit, with ``path`` set.

        Raises
        ------
        FitError
            As for :func:`load_fit`.
        """
        p = fit_path(path)
        return cls(load_fit(p), p)

    @classmethod
    def fit(cls, table: pd.DataFrame, spec: ModelSpec | str | os.PathLike[str], **options: Any) -> BayesFit:
        """Sample ``spec`` on the z-score ``table``: :func:`evtsync.evt.fit.fit_table`, wrapped.

        Parameters
        ----------
        table : pandas.DataFrame
            The z-score table with the spec's column and groups.
        spec : ModelSpec, str or path
            The model, or a specification file or shipped model's name
            (:func:`evtsync.evt.catalog.resolve_model`).
        **options
            Passed to :func:`~evtsync.evt.fit.fit_table` (``draws``, ``tune``, ``chains``,
            ``seed``, ``sampler``, ``source``, ...).

        Returns
        -------
        BayesFit
            The fit (not saved: ``path`` is None until :meth:`save`).

        Raises
        ------
        InputError, ModelSpecError
            As for :func:`~evtsync.evt.fit.fit_table` and :func:`~evtsync.evt.spec.load_spec`.
        """
        from evtsync.evt.fit import fit_table  # the sampler (PyMC, nutpie) only when sampling
        from evtsync.evt.spec import ModelSpec, load_spec

        if not isinstance(spec, ModelSpec):
            from evtsync.evt.catalog import resolve_model

            spec = load_spec(resolve_model(spec))
        return cls(fit_table(table, spec, **options))

    def save(self, out: str | os.PathLike[str]) -> Path:
        """Write the fit to ``out/fit.nc`` (or the .nc file ``out``) atomically; returns the path.

        Parameters
        ----------
        out : path
            A folder (created if needed) or a ``.nc`` file name.

        Returns
        -------
        pathlib.Path
            The file written (also stored as ``self.path``).

        Raises
        ------
        FitError
            The netCDF engine (h5netcdf) is not installed.
        """
        self.tree.attrs[FORMAT_ATTR] = FIT_FORMAT
        dest = save_fit(self.tree, out)
        self.path = dest
        return dest

    # ---- identity
    @property
    def name(self) -> str:
        """The model's name (from its specification)."""
        return str(self.tree.attrs.get("model_name", "?"))

    @property
    def family(self) -> str:
        """The family's name, a key of :data:`evtsync.evt.families.FAMILY_TABLE` (``gumbel``, ``frechet``, ``weibull``, ``gev``)."""
        return str(self.tree.attrs.get("model_family", "gev"))

    @property
    def column(self) -> str | None:
        """The z-score table's column the fit was made of (``y``: the centred estimator of tau(n);
        ``z``: the paper's), from the fit's record, else from its spec text; None without either."""
        column = self.tree.attrs.get("data_column")
        if column:
            return str(column)
        try:
            return self.spec.column
        except Exception:  # noqa: BLE001 - a fit built from draws stores no spec
            return None

    @cached_property
    def spec(self) -> ModelSpec:
        """The specification that made the fit, parsed back from the stored text."""
        from evtsync.evt.spec import parse_spec

        text = self.tree.attrs.get("model_spec_text")
        if not text:
            raise FitError(f"{self.path or 'fit'}: the fit stores no model specification text")
        source = f"{self.path or 'fit'} (model_spec_text of {self.tree.attrs.get('model_spec_path', '?')})"
        return parse_spec(str(text), source)

    @property
    def provenance(self) -> dict[str, Any]:
        """Where the fit came from: input and its sha256, seed, sampler settings, command, versions."""
        out: dict[str, Any] = {}
        for key in PROVENANCE_KEYS:
            if key in self.tree.attrs:
                value = self.tree.attrs[key]
                if key == "package_versions" and isinstance(value, str):
                    value = json.loads(value)
                out[key] = value.item() if isinstance(value, np.generic) else value
        return out

    # ---- convergence
    @property
    def converged(self) -> bool:
        """The recorded verdict (R-hat, ESS, divergences; see :mod:`evtsync.evt.fit`)."""
        return is_converged(self.tree)

    @property
    def convergence(self) -> dict[str, Any]:
        """The recorded convergence numbers (``converged``, ``max_rhat``, ``min_ess_bulk``, ...)."""
        keys = [k for k in map(str, self.tree.attrs) if k in ("converged", "convergence", "divergences")
                or k.startswith(("max_rhat", "min_ess"))]
        out = {k: self.tree.attrs[k] for k in keys}
        out["converged"] = self.converged
        return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in out.items()}

    @property
    def convergence_note(self) -> str:
        """Empty when converged, else the warning line every output using the fit carries."""
        return convergence_note(self.tree)

    # ---- cells and parameters
    @cached_property
    def cells(self) -> pd.DataFrame:
        """One row per cell: ``cell`` label, group columns (e.g. gpu, precision), ``n_obs``."""
        return cell_table(self.tree)

    @property
    def groups(self) -> tuple[str, ...]:
        """The columns whose combinations are the cells (empty for a pooled fit)."""
        return tuple(c for c in self.cells.columns if c not in ("cell", "n_obs"))

    @cached_property
    def posterior(self) -> xr.Dataset:
        """The posterior with per-cell parameters on one dimension per group (NaN for absent cells)."""
        import xarray as xr
        post = self.tree["posterior"].to_dataset()
        index = _group_index(self.cells)
        per_cell = [v for v, da in post.data_vars.items() if "cell" in da.dims]
        if index is None or not per_cell:
            return post
        coords = xr.Coordinates.from_pandas_multiindex(index, "cell")
        cellwise = post[per_cell].drop_vars("cell").assign_coords(coords).unstack("cell")
        rest = post.drop_vars([*per_cell, "cell"])
        return xr.merge([rest, cellwise], join="outer", compat="override", combine_attrs="override")

    def cell_parameters(self) -> xr.Dataset:
        """``mu``, ``sigma``, ``xi`` draws (chain, draw, cell) for the observed cells, pooled ones broadcast.

        Returns
        -------
        xarray.Dataset
            ``cell`` is indexed by the group coordinates (e.g. ``.sel(gpu="H200",
            precision="bf16")``) and keeps its label as ``cell_label``.
        """
        import xarray as xr
        params = cell_parameters(self.tree)
        index = _group_index(self.cells)
        if index is None:
            return params
        labels = params["cell"].values
        coords = xr.Coordinates.from_pandas_multiindex(index, "cell")
        return params.drop_vars("cell").assign_coords(coords).assign_coords(cell_label=("cell", labels))

    def cell_draws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """mu, sigma, xi as arrays (sample, cell), cells in the order of :attr:`cells`.

        Returns
        -------
        tuple of three numpy.ndarray
            mu, sigma and xi, each of shape (chains × draws, cells); pooled parameters are
            broadcast to every cell.
        """
        params = cell_parameters(self.tree)
        n_cell = params.sizes["cell"]
        return tuple(params[v].values.reshape(-1, n_cell) for v in ("mu", "sigma", "xi"))  # type: ignore[return-value]

    # ---- checks stored with the fit
    @property
    def prior_predictive_check(self) -> xr.Dataset | None:
        """The stored prior predictive check (cell x quantile), if the file has one."""
        group = "prior_predictive_check"
        return self.tree[group].to_dataset() if group in self.tree.children else None

    @property
    def ppc(self) -> xr.Dataset | None:
        """The stored posterior predictive check per cell, if the file has one, else None."""
        for group in PPC_GROUPS:
            if group in self.tree.children:
                return self.tree[group].to_dataset()
        return None

    # ---- the population
    def draw_new_level(self, levels: dict[str, str], seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """mu, sigma, xi draws (sample,) of a cell not in the fit, drawn from the fitted population.

        Per posterior draw: xi = xi0 + the fitted delta of each seen level + a new delta for
        each unseen level of a factor (from that factor's fitted spread) + a new cell term (from
        ``xi_sd_cell``); mu = mu_mean + a new deviation (spread ``mu_sd``); log sigma =
        log sigma_gmean + a new deviation (``log_sigma_sd``); new deviations as in
        :func:`_zero_sum_new` (methodology §7). A pooled parameter keeps its draws.

        Parameters
        ----------
        levels : dict
            The new cell's level of each group column (``{"gpu": "B200", "precision": "fp8"}``).
        seed : int
            Fixes the new deviations.

        Raises
        ------
        InputError
            A parameter is one value per cell without a population (pooling "none"), naming it
            and the shipped model that can answer.
        """
        cells = self.cells.reset_index(drop=True)
        groups = [c for c in cells.columns if c not in ("cell", "n_obs")]
        mu_c, sigma_c, _ = self.cell_draws()
        rng = np.random.default_rng(seed)
        post = self.tree["posterior"].to_dataset()
        n_sample = mu_c.shape[0]
        n_cells = len(cells)
        # mu
        if "cell" not in post["mu"].dims:
            mu = _flat(post, "mu").reshape(n_sample)
        elif "mu_sd" in post and "mu_mean" in post:
            mu = _flat(post, "mu_mean") + _zero_sum_new(_flat(post, "mu_sd"), n_cells, rng)
        else:
            raise population_refusal(self, "mu", "is one value per cell without a population (pooling 'none')")
        # sigma
        if "sigma" not in post or "cell" not in post["sigma"].dims:
            sigma = sigma_c[:, 0]
        elif "log_sigma_sd" in post and "sigma_gmean" in post:
            sigma = _flat(post, "sigma_gmean") * np.exp(_zero_sum_new(_flat(post, "log_sigma_sd"), n_cells, rng))
        else:
            raise population_refusal(self, "sigma", "is one value per cell without a population (pooling 'none')")
        # xi
        if not family_of(self.family).has_xi or "xi" not in post:
            xi = np.zeros(n_sample)
        elif "cell" not in post["xi"].dims:
            xi = _flat(post, "xi").reshape(n_sample)
        elif "xi0" not in post:
            raise population_refusal(self, "xi", "is one value per cell without a population")
        else:
            xi = _flat(post, "xi0").copy()
            for g in groups:
                name = f"xi_delta_{g}"
                if name not in post:
                    continue
                fitted_levels = [str(v) for v in post[name][g].values]
                if str(levels[g]) in fitted_levels:
                    xi = xi + _flat(post, name)[:, fitted_levels.index(str(levels[g]))]
                else:
                    xi = xi + _zero_sum_new(_flat(post, f"xi_sd_{g}"), len(fitted_levels), rng)
            spread = _cell_term_spread(self, post, n_sample, rng)
            if spread is not None:
                xi = xi + rng.standard_normal(n_sample) * spread
        return mu, sigma, xi

    def __repr__(self) -> str:
        where = f" from {self.path}" if self.path else ""
        verdict = "converged" if self.converged else "NOT CONVERGED"
        return f"<BayesFit {self.name} ({self.family}), {len(self.cells)} cell(s), {verdict}{where}>"

    def _repr_html_(self) -> str:
        """The fit in a notebook: cells, ξ with its 90% credible interval, convergence."""
        from evtsync.core.display import fit_html

        return fit_html(self)


def as_fit(value: Any) -> Any:
    """A :class:`CellFit` from a fit object, a fit tree, or a path to a fit file."""
    import xarray as xr
    if isinstance(value, xr.DataTree):
        return BayesFit(value)
    if isinstance(value, str | os.PathLike):
        return BayesFit.load(value)
    if isinstance(value, CellFit):
        return value
    raise TypeError(f"expected a BayesFit, MleCellFit, fit tree or fit path, got {type(value).__name__}")
