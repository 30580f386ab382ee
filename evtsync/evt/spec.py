"""Model specifications: ``models/*.toml`` loaded and validated into a :class:`ModelSpec`.

One file describes one model variant (see ``docs/bayesian.md`` for every key)::

    name = "gev-hier-gpu-precision"
    family = "gev"                    # any name of evtsync.evt.families: gumbel (xi = 0) | frechet (xi > 0) | weibull (xi < 0) | gev (free xi)
    [data]
    column = "z"
    groups = ["gpu", "precision"]     # columns whose combinations are the cells; [] = pooled
    scale = "z"                       # "z" (priors on the z-score scale) | "raw" (standardised per cell)
    [mu]
    pooling = "partial"               # "complete" (one) | "none" (one per cell, own prior) |
                                      # "partial" (per cell, drawn from a fitted population)
    prior = { dist = "normal", mu = 0.0, sigma = 2.0 }       # of mu (or of the population mean)
    population_sd_prior = { dist = "lognormal", mu = -1.6, sigma = 0.7 }   # "partial" only
    [sigma]
    pooling = "partial"               # "partial": log sigma per cell ~ Normal(log sigma_pop, sd)
    prior = { dist = "halfnormal", sigma = 1.0 }
    population_sd_prior = { dist = "lognormal", mu = -1.6, sigma = 0.7 }
    support_transform = "auto"        # sample sigma above its support bound: "auto" | true | false (per cell)
    [xi]
    structure = "additive"            # "pooled" | "additive" (xi = xi0 + sum of deltas [+ cell term])
    prior = { dist = "normal", mu = 0.0, sigma = 0.3 }
    factors = ["gpu", "precision"]
    group_sd_prior = { dist = "halfnormal", sigma = 0.1 }            # factors with >= many_levels levels
    few_levels_sd_prior = { dist = "lognormal", mu = -2.5, sigma = 0.6 }   # factors with fewer (zero-avoiding)
    many_levels = 5
    cell_sd_prior = { dist = "lognormal", mu = -2.3, sigma = 0.6 }   # optional: interaction term per cell
    parametrization = "auto"          # "auto" | "centred" | "noncentred"
    centred_min_obs = 1000
    [sampling]                         # defaults of every fit of the spec (:class:`SamplerConfig`)
    draws = 1000
    tune = 1000
    chains = 4
    target_accept = "auto"             # NUTS step-size target in (0, 1), or "auto" (the default)
    seed = 1                           # optional; absent = 0 (DEFAULT_SEED, as `evtsync run`)
    sampler = "nutpie"                 # "nutpie" | "pymc"
    backend = "numba"                  # nutpie's backend: "numba" | "jax" (needs jax installed)
    adaptation = "auto"                # nutpie's mass matrix: "auto" (the default) | "low_rank" | "diag"

Every error names the file and the key at fault (:class:`~evtsync.core.errors.ModelSpecError`).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, cast

from evtsync.core.defaults import DEFAULT_SAMPLER, RANK_FAMILY, RANK_SPEC_FILE, SAMPLERS
from evtsync.core.errors import InputError, ModelSpecError
from evtsync.evt.families import FAMILIES
from evtsync.evt.families import family as family_of

POOLINGS = ("complete", "none", "partial")
SCALES = ("z", "raw")
BACKENDS = ("numba", "jax")
#: nutpie's mass-matrix adaptation: a diagonal plus low-rank correction from the draws and
#: their gradients, the diagonal only, or "auto" (:func:`evtsync.evt.fit.resolve_adaptation`).
ADAPTATIONS = ("auto", "low_rank", "diag")
XI_STRUCTURES = ("pooled", "additive")
PARAMETRIZATIONS = ("auto", "centred", "noncentred")

#: Prior distributions accepted and their required parameters.
PRIOR_PARAMS: dict[str, tuple[str, ...]] = {
    "normal": ("mu", "sigma"),
    "halfnormal": ("sigma",),
    "lognormal": ("mu", "sigma"),
    "exponential": ("lam",),
    "gamma": ("alpha", "beta"),
    "uniform": ("lower", "upper"),
}
POSITIVE_PRIORS = ("halfnormal", "lognormal", "exponential", "gamma")


@dataclass(frozen=True)
class Prior:
    """A prior distribution by name with its parameters."""

    dist: str
    params: dict[str, float]

    def describe(self) -> str:
        """Short text such as ``normal(mu=0, sigma=2)``."""
        inner = ", ".join(f"{k}={v:g}" for k, v in self.params.items())
        return f"{self.dist}({inner})"


@dataclass(frozen=True)
class ParamSpec:
    """Location or scale: pooled across cells, one per cell, or per cell from a population.

    With ``pooling = "partial"`` ``prior`` is the prior of the population centre (mu_pop,
    sigma_pop) and ``population_sd_prior`` that of the spread of the cells around it (of mu,
    or of log sigma).
    """

    pooling: str
    prior: Prior
    support_transform: str = "auto"
    population_sd_prior: Prior | None = None


@dataclass(frozen=True)
class XiSpec:
    """The shape parameter's structure (ignored for the Gumbel family)."""

    structure: str = "pooled"
    prior: Prior | None = None
    factors: tuple[str, ...] = ()
    group_sd_prior: Prior | None = None
    few_levels_sd_prior: Prior | None = None
    many_levels: int = 5
    cell_sd_prior: Prior | None = None
    parametrization: str = "auto"
    centred_min_obs: int = 1000

    def spread_prior(self, n_levels: int) -> Prior | None:
        """Prior of the spread of a factor's deltas: the zero-avoiding ``few_levels_sd_prior``
        below ``many_levels`` levels (where the spread is not identified and a prior with mass
        at zero makes a funnel), else ``group_sd_prior``."""
        if n_levels < self.many_levels and self.few_levels_sd_prior is not None:
            return self.few_levels_sd_prior
        return self.group_sd_prior


#: Sampler settings: the defaults of :class:`SamplerConfig`, shared by ``evtsync fit`` and
#: ``evtsync run`` (one home: :mod:`evtsync.core.defaults`).
from evtsync.core.defaults import DEFAULT_CHAINS, DEFAULT_DRAWS, DEFAULT_TUNE  # noqa: E402


@dataclass(frozen=True)
class SamplerConfig:
    """How a spec is sampled: from the spec's ``[sampling]`` table, overridden by CLI flags.

    ``seed = None`` means :data:`evtsync.core.defaults.DEFAULT_SEED` (0, the seed ``evtsync run``
    uses too; recorded in the fit); ``target_accept``
    is a number in (0, 1) or ``"auto"`` (see :func:`evtsync.evt.fit.resolve_target_accept`);
    ``backend`` is nutpie's (``numba``, or ``jax`` where jax is installed); ``adaptation`` its
    mass matrix (``low_rank``: diagonal plus a low-rank correction, which follows the strong
    correlations of a hierarchical posterior with large cells, e.g. a small cell's xi against
    the factor effects; ``diag``: diagonal only; ``auto``, the default: by the number of
    z-scores, :func:`evtsync.evt.fit.resolve_adaptation`; ignored by the pymc sampler);
    ``extend``: how many
    times a fit that fails only on R-hat or ESS (no divergence) continues its chains to twice
    the draws (0, the default: never; see :func:`evtsync.evt.fit.fit_table`).
    """

    draws: int = DEFAULT_DRAWS
    tune: int = DEFAULT_TUNE
    chains: int = DEFAULT_CHAINS
    target_accept: float | str = "auto"
    seed: int | None = None
    sampler: str = DEFAULT_SAMPLER
    backend: str = "numba"
    adaptation: str = "auto"
    extend: int = 0

    def override(self, **values: Any) -> SamplerConfig:
        """A copy with the given values replaced; ``None`` keeps the current one (CLI flags)."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise TypeError(f"unknown sampler setting(s) {unknown}; expected {sorted(known)}")
        changed = {k: v for k, v in values.items() if v is not None}
        out = replace(self, **changed)
        try:
            out.validate("sampler settings")
        except ModelSpecError as exc:  # a flag or keyword, not the file, is at fault
            raise InputError(str(exc)) from exc
        return out

    def validate(self, source: str) -> None:
        """Raise ModelSpecError naming ``source`` and the setting when a value is out of range."""
        for key in ("draws", "tune", "chains"):
            val = getattr(self, key)
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise _err(source, f"sampling.{key}", f"expected an integer >= 1, got {val!r}")
        _target_accept(source, self.target_accept)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise _err(source, "sampling.seed", f"expected an integer >= 0, got {self.seed!r}")
        _str(source, "sampling.sampler", self.sampler, SAMPLERS)
        _str(source, "sampling.backend", self.backend, BACKENDS)
        _str(source, "sampling.adaptation", self.adaptation, ADAPTATIONS)
        if isinstance(self.extend, bool) or not isinstance(self.extend, int) or self.extend < 0:
            raise _err(source, "sampling.extend", f"expected an integer >= 0, got {self.extend!r}")


@dataclass(frozen=True)
class ModelSpec:
    """A validated model specification; ``text`` is the file's exact content (provenance)."""

    name: str
    family: str
    column: str
    groups: tuple[str, ...]
    mu: ParamSpec
    sigma: ParamSpec
    xi: XiSpec
    description: str = ""
    sampling: dict[str, int | float | str] = field(default_factory=dict)
    path: str = "<string>"
    text: str = ""
    scale: str = "z"

    def sampler_config(self) -> SamplerConfig:
        """The spec's ``[sampling]`` table as a :class:`SamplerConfig` (defaults for absent keys)."""
        # the parser checked each key's type against SamplerConfig's fields
        return SamplerConfig(**cast(dict[str, Any], self.sampling))

    def _repr_html_(self) -> str:
        """The specification in a notebook: family, data, each parameter's structure and prior."""
        from evtsync.core.display import spec_html
        from evtsync.evt.families import family, family_label

        entry = family(self.family)
        if entry.has_xi:
            x = self.xi
            xi_row = (f"{x.structure}; prior {x.prior.describe() if x.prior is not None else '–'}"
                      + (" of |xi|" if entry.xi_sign else "") + (f"; factors {', '.join(x.factors)}" if x.factors else ""))
        else:
            xi_row = f"0 ({family_label(self.family)})"
        return spec_html(self, xi_row)


_TOP_KEYS = {"name", "family", "description", "data", "mu", "sigma", "xi", "sampling"}
_DATA_KEYS = {"column", "groups", "scale"}
_PARAM_KEYS = {"pooling", "prior", "population_sd_prior"}
_XI_KEYS = {"structure", "prior", "factors", "group_sd_prior", "few_levels_sd_prior", "many_levels",
            "cell_sd_prior", "parametrization", "centred_min_obs"}
_SAMPLING_KEYS = {"draws", "tune", "chains", "target_accept", "seed", "sampler", "backend", "adaptation", "extend"}


def _err(src: str, key: str, what: str) -> ModelSpecError:
    return ModelSpecError(f"{src}: key '{key}': {what}")


def _check_keys(src: str, section: str, table: dict[str, Any], allowed: set[str]) -> None:
    for key in table:
        if key not in allowed:
            where = f"{section}.{key}" if section else key
            raise _err(src, where, f"unknown key; expected one of {sorted(allowed)}")


def _table(src: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _err(src, key, f"expected a table, got {type(value).__name__}")
    return value


def _str(src: str, key: str, value: Any, choices: tuple[str, ...] | None = None) -> str:
    if not isinstance(value, str):
        raise _err(src, key, f"expected a string, got {value!r}")
    if choices is not None and value not in choices:
        raise _err(src, key, f"expected one of {list(choices)}, got {value!r}")
    return value


def _str_list(src: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _err(src, key, f"expected a list of column names, got {value!r}")
    if len(set(value)) != len(value):
        raise _err(src, key, f"duplicate names in {value!r}")
    return tuple(value)


def _prior(src: str, key: str, value: Any, positive: bool = False) -> Prior:
    table = _table(src, key, value)
    if "dist" not in table:
        raise _err(src, f"{key}.dist", "missing; expected one of " + str(sorted(PRIOR_PARAMS)))
    dist = _str(src, f"{key}.dist", table["dist"], tuple(PRIOR_PARAMS))
    if positive and dist not in POSITIVE_PRIORS:
        raise _err(src, f"{key}.dist", f"this parameter is positive; expected one of {list(POSITIVE_PRIORS)}, got {dist!r}")
    needed = PRIOR_PARAMS[dist]
    params: dict[str, float] = {}
    for name, val in table.items():
        if name == "dist":
            continue
        if name not in needed:
            raise _err(src, f"{key}.{name}", f"not a parameter of {dist}; expected {list(needed)}")
        if isinstance(val, bool) or not isinstance(val, int | float):
            raise _err(src, f"{key}.{name}", f"expected a number, got {val!r}")
        params[name] = float(val)
    for name in needed:
        if name not in params:
            raise _err(src, f"{key}.{name}", f"missing parameter of {dist}")
    for name in ("sigma", "lam", "alpha", "beta"):
        if name in params and not params[name] > 0:
            raise _err(src, f"{key}.{name}", f"must be > 0, got {params[name]}")
    if dist == "uniform" and not params["lower"] < params["upper"]:
        raise _err(src, f"{key}.upper", "must exceed lower")
    return Prior(dist, params)


def _param(src: str, key: str, value: Any, positive: bool) -> ParamSpec:
    table = _table(src, key, value)
    _check_keys(src, key, table, _PARAM_KEYS | ({"support_transform"} if key == "sigma" else set()))
    pooling = _str(src, f"{key}.pooling", table.get("pooling", "complete"), POOLINGS)
    if "prior" not in table:
        raise _err(src, f"{key}.prior", "missing")
    transform = table.get("support_transform", "auto")
    if isinstance(transform, bool):
        transform = "on" if transform else "off"
    transform = _str(src, f"{key}.support_transform", transform, ("auto", "on", "off"))
    pop_sd = None
    if pooling == "partial":
        if "population_sd_prior" not in table:
            raise _err(src, f"{key}.population_sd_prior", "missing (prior of the spread of the cells; pooling = 'partial')")
        pop_sd = _prior(src, f"{key}.population_sd_prior", table["population_sd_prior"], positive=True)
    elif "population_sd_prior" in table:
        raise _err(src, f"{key}.population_sd_prior", "only used with pooling = 'partial'")
    return ParamSpec(pooling, _prior(src, f"{key}.prior", table["prior"], positive=positive), transform, pop_sd)


def _int(src: str, key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _err(src, key, f"expected an integer >= {minimum}, got {value!r}")
    return value


def _target_accept(src: str, value: Any) -> float | str:
    if value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise _err(src, "sampling.target_accept", f"expected a number in (0, 1) or \"auto\", got {value!r}")
    return float(value)


def parse_spec(text: str, source: str = "<string>") -> ModelSpec:
    """Validate the TOML ``text`` of a model specification; ``source`` names it in errors."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelSpecError(f"{source}: not valid TOML: {exc}") from exc
    if raw.get("family") == RANK_FAMILY:
        raise _err(source, "family", f"{RANK_FAMILY!r} is the rank model's specification (read by "
                   "evtsync.evt.spec.load_rank_spec and fit by the run's rankmodel stage), not a GEV model's")
    _check_keys(source, "", raw, _TOP_KEYS)
    for key in ("name", "family", "data", "mu", "sigma"):
        if key not in raw:
            raise _err(source, key, "missing")
    name = _str(source, "name", raw["name"])
    family = _str(source, "family", raw["family"], FAMILIES)
    description = _str(source, "description", raw.get("description", ""))
    data = _table(source, "data", raw["data"])
    _check_keys(source, "data", data, _DATA_KEYS)
    column = _str(source, "data.column", data.get("column", "z"))
    groups = _str_list(source, "data.groups", data.get("groups", []))
    scale = _str(source, "data.scale", data.get("scale", "z"), SCALES)
    mu = _param(source, "mu", raw["mu"], positive=False)
    sigma = _param(source, "sigma", raw["sigma"], positive=True)
    for key, par in (("mu", mu), ("sigma", sigma)):
        if par.pooling in ("none", "partial") and not groups:
            raise _err(source, f"{key}.pooling", f"{par.pooling!r} (one per cell) needs data.groups to name cell columns")

    xi_raw = _table(source, "xi", raw.get("xi", {}))
    _check_keys(source, "xi", xi_raw, _XI_KEYS)
    fam = family_of(family)
    if not fam.has_xi:
        if xi_raw:
            raise _err(source, "xi", f"the {family} family fixes xi = 0; remove the [xi] table")
        xi = XiSpec()
    else:
        if "prior" not in xi_raw:
            raise _err(source, "xi.prior", "missing")
        structure = _str(source, "xi.structure", xi_raw.get("structure", "pooled"), XI_STRUCTURES)
        prior = _prior(source, "xi.prior", xi_raw["prior"], positive=fam.xi_prior_positive)
        factors = _str_list(source, "xi.factors", xi_raw.get("factors", []))
        if structure == "additive":
            if not fam.allows_additive_xi:
                raise _err(source, "xi.structure", "'additive' needs a family with xi of any sign (e.g. 'gev')")
            if not factors:
                raise _err(source, "xi.factors", "'additive' needs at least one factor")
            for f in factors:
                if f not in groups:
                    raise _err(source, "xi.factors", f"factor {f!r} is not among data.groups {list(groups)}")
            if "group_sd_prior" not in xi_raw:
                raise _err(source, "xi.group_sd_prior", "missing (prior of each factor's spread of deltas)")
            sd_prior: Prior | None = _prior(source, "xi.group_sd_prior", xi_raw["group_sd_prior"], positive=True)
            few_prior = (_prior(source, "xi.few_levels_sd_prior", xi_raw["few_levels_sd_prior"], positive=True)
                         if "few_levels_sd_prior" in xi_raw else None)
            cell_prior = (_prior(source, "xi.cell_sd_prior", xi_raw["cell_sd_prior"], positive=True)
                          if "cell_sd_prior" in xi_raw else None)
        else:
            for key in ("factors", "few_levels_sd_prior", "cell_sd_prior", "group_sd_prior"):
                if xi_raw.get(key):
                    raise _err(source, f"xi.{key}", "only used with structure = 'additive'")
            sd_prior = few_prior = cell_prior = None
        xi = XiSpec(
            structure=structure,
            prior=prior,
            factors=factors,
            group_sd_prior=sd_prior,
            few_levels_sd_prior=few_prior,
            many_levels=_int(source, "xi.many_levels", xi_raw.get("many_levels", 5), 2),
            cell_sd_prior=cell_prior,
            parametrization=_str(source, "xi.parametrization", xi_raw.get("parametrization", "auto"), PARAMETRIZATIONS),
            centred_min_obs=_int(source, "xi.centred_min_obs", xi_raw.get("centred_min_obs", 1000), 1),
        )
    sampling_raw = _table(source, "sampling", raw.get("sampling", {}))
    _check_keys(source, "sampling", sampling_raw, _SAMPLING_KEYS)
    sampling: dict[str, int | float | str] = {}
    for k, v in sampling_raw.items():
        if k == "target_accept":
            sampling[k] = _target_accept(source, v)
        elif k in ("sampler", "backend", "adaptation"):
            sampling[k] = _str(source, f"sampling.{k}", v,
                               {"sampler": SAMPLERS, "backend": BACKENDS, "adaptation": ADAPTATIONS}[k])
        else:
            sampling[k] = _int(source, f"sampling.{k}", v, 0 if k in ("seed", "extend") else 1)
    return ModelSpec(
        name=name,
        family=family,
        column=column,
        groups=groups,
        mu=mu,
        sigma=sigma,
        xi=xi,
        description=description,
        sampling=sampling,
        path=source,
        text=text,
        scale=scale,
    )


def load_spec(path: str | Path) -> ModelSpec:
    """Read and validate ``models/NAME.toml``.

    Parameters
    ----------
    path : str or path
        The specification file (:func:`evtsync.resolve_model` finds it by name).

    Returns
    -------
    ModelSpec
        The validated specification, with its text and path.

    Raises
    ------
    ModelSpecError
        No such file, invalid TOML, or an invalid key; the message names the file and the key.
    """
    p = Path(path)
    return parse_spec(_read_spec(p, "model specification"), str(p))


def _read_spec(p: Path, what: str) -> str:
    """The text of a specification file; ``ModelSpecError`` naming it when it is absent or unreadable."""
    if not p.is_file():
        raise ModelSpecError(f"{p}: no such {what} file")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelSpecError(f"{p}: cannot read: {exc}") from exc


# --------------------------------------------------------------------------------------------- the rank model

# RANK_FAMILY (the ``family`` of the rank model's specification: not a GEV family, so :func:`parse_spec`
# refuses it and :func:`evtsync.evt.catalog.model_paths` leaves it out) and RANK_SPEC_FILE (its file in a
# models folder) live in evtsync.core.defaults, which the catalog reads without importing this module.
_RANK_TOP_KEYS = {"name", "family", "description", "xi", "sigma", "rho", "sampling"}
_RANK_XI_KEYS = {"prior", "spread_prior"}
_RANK_SIGMA_KEYS = {"population_sd_prior"}
_RANK_RHO_KEYS = {"population_sd_prior"}
_RANK_SAMPLING_KEYS = {"draws", "tune", "chains", "target_accept", "adaptation"}
#: nutpie's mass matrix for the rank model (its few parameters: no low-rank correction needed).
RANK_ADAPTATIONS = ("diag", "low_rank")


@dataclass(frozen=True)
class RankModelSpec:
    """The rank model's priors and sampler settings (``models/rankmodel.toml``; docs/bayesian.md,
    "Model files"; the model: docs/methodology.md, "The rank model").

    ``xi_prior``: of xi0; ``xi_spread_prior``: of the spread of each factor's (GPU, precision)
    zero-sum shape deviations; ``sigma_spread_prior``: of the spread of the cells' log GPD scale
    around their population (sampled non-centred); ``rho_spread_prior``: of each cell's spread of
    persistent rank effects; then NUTS's draws, tuning steps and chains, its target acceptance and
    nutpie's mass matrix."""

    name: str
    xi_prior: Prior
    xi_spread_prior: Prior
    sigma_spread_prior: Prior
    rho_spread_prior: Prior
    draws: int
    tune: int
    chains: int
    target_accept: float
    adaptation: str = "diag"
    description: str = ""
    path: str = "<string>"
    text: str = ""


def _section(src: str, raw: dict[str, Any], key: str, allowed: set[str]) -> dict[str, Any]:
    if key not in raw:
        raise _err(src, key, "missing")
    table = _table(src, key, raw[key])
    _check_keys(src, key, table, allowed)
    for name in sorted(allowed):
        if name not in table:
            raise _err(src, f"{key}.{name}", "missing")
    return table


def parse_rank_spec(text: str, source: str = "<string>") -> RankModelSpec:
    """Validate the TOML ``text`` of the rank model's specification; ``source`` names it in errors
    (every error names the file and the key: :class:`~evtsync.core.errors.ModelSpecError`). Every
    key is required: the file is the model's one home, with no hidden default."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ModelSpecError(f"{source}: not valid TOML: {exc}") from exc
    _check_keys(source, "", raw, _RANK_TOP_KEYS)
    for key in ("name", "family"):
        if key not in raw:
            raise _err(source, key, "missing")
    name = _str(source, "name", raw["name"])
    _str(source, "family", raw["family"], (RANK_FAMILY,))
    description = _str(source, "description", raw.get("description", ""))
    xi = _section(source, raw, "xi", _RANK_XI_KEYS)
    sigma = _section(source, raw, "sigma", _RANK_SIGMA_KEYS)
    rho = _section(source, raw, "rho", _RANK_RHO_KEYS)
    sampling = _section(source, raw, "sampling", _RANK_SAMPLING_KEYS)
    target = _target_accept(source, sampling["target_accept"])
    if isinstance(target, str):
        raise _err(source, "sampling.target_accept", f"expected a number in (0, 1), got {target!r}")
    return RankModelSpec(
        name=name,
        xi_prior=_prior(source, "xi.prior", xi["prior"]),
        xi_spread_prior=_prior(source, "xi.spread_prior", xi["spread_prior"], positive=True),
        sigma_spread_prior=_prior(source, "sigma.population_sd_prior", sigma["population_sd_prior"], positive=True),
        rho_spread_prior=_prior(source, "rho.population_sd_prior", rho["population_sd_prior"], positive=True),
        draws=_int(source, "sampling.draws", sampling["draws"], 1),
        tune=_int(source, "sampling.tune", sampling["tune"], 1),
        chains=_int(source, "sampling.chains", sampling["chains"], 1),
        target_accept=target,
        adaptation=_str(source, "sampling.adaptation", sampling["adaptation"], RANK_ADAPTATIONS),
        description=description, path=source, text=text)


def load_rank_spec(path: str | os.PathLike[str] | None = None) -> RankModelSpec:
    """Read and validate the rank model's specification: ``path``, or None for the shipped
    ``models/rankmodel.toml`` (:func:`evtsync.evt.catalog.default_models_dir`: the wheel's package
    data or the checkout's folder). ``ModelSpecError`` names the file (and the key) at fault."""
    p = rank_spec_path() if path is None else Path(path)
    return parse_rank_spec(_read_spec(p, "rank-model specification"), str(p))


def rank_spec_path(folder: str | os.PathLike[str] | None = None) -> Path:
    """The rank model's specification of a models ``folder`` (its ``rankmodel.toml``) when it holds
    one, else the shipped one (:func:`evtsync.evt.catalog.default_models_dir`: the wheel's package
    data or the checkout's folder)."""
    if folder is not None and (Path(folder) / RANK_SPEC_FILE).is_file():
        return Path(folder) / RANK_SPEC_FILE
    from evtsync.evt.catalog import default_models_dir

    return default_models_dir() / RANK_SPEC_FILE
