"""Predicted synchronization tax for a domain of n = k·m ranks (methodology §7), and FLOPS scaling (§8).

A compute block with pooled standard deviation ``b`` (µs) whose pooled z-scores of the maximum
over ``m`` ranks follow GEV(mu, sigma, xi) has, in a domain of ``n = k·m`` ranks, a predicted
mean straggler delay

    tau(n) = b · E_k(mu, sigma, xi),   k = n / m,

with ``E_k`` the expected maximum of k iid GEV draws (:func:`evtsync.evt.gev.expected_max`).
For the Gumbel fit (xi = 0) this is ``b · (mu + sigma (gamma_E + ln(n/m)))``: the tax grows
at least logarithmically with the domain size.

What tau(n) estimates depends on the statistic the GEV was fitted to (:data:`ESTIMATORS`,
docs/methodology.md "Predicting tau(n)"): a fit of the centred maxima ``y = (M - block mean)/s``
gives the mean straggler delay of n ranks (``centred``; the study in docs/bayesian.md finds it
biased at large n for normal and Student-t ranks); a fit of the paper's ``z = (M - sample mean)/s`` gives the paper's estimate, exact at
n = m and biased low beyond (``paper``); the per-rank tail fit of every rank's value
(the rank model's :class:`evtsync.evt.rankmodel.RankModelPrediction`, ``rankmodel``, the default, and
:class:`evtsync.evt.ranktail.RankTailFit`, ``ranktail``) gives b·E[max_n u] itself through its
``expected_max`` (the seam: GEV fits give parameter draws, it gives draws of the expected maximum):
the default of the CLI and the run (:data:`~evtsync.core.defaults.DEFAULT_ESTIMATOR`), with the
centred estimator as its labelled fallback (:mod:`evtsync.predict.estimator`).
Every table checks the fit's column against its
``estimator`` argument (:func:`check_estimator`) and names the estimator in a column.

Shapes: every function broadcasts with NumPy's rules. Posterior draws are passed as arrays of
one common shape, e.g. ``(chain, draw)``; to evaluate a vector of domain sizes against them,
give the draws a trailing axis::

    tau = predicted_tax_us(b, mu[..., None], sigma[..., None], xi[..., None], n=[8, 64, 512])
    # tau.shape == (chain, draw, 3)

or call :func:`predicted_tax_curve_us`, which adds that axis itself. xarray users pass
``.values`` and wrap the result (dimensions ``(*draw_dims, "n")``).

Prediction tables. :func:`tau_table`, :func:`bandwidth_table`, :func:`predicted_vs_measured`
and :func:`cell_parameter_table` take any fit with the small interface of
:class:`evtsync.evt.bayesfit.CellFit` (a :class:`~evtsync.evt.bayesfit.BayesFit`, an
:class:`~evtsync.evt.mlefit.MleCellFit`, a fit tree or a fit path), compute every quantity
draw by draw and summarise it with :func:`summarise`. The CLI, the pipeline and the report
all call these, so there is one column scheme:

``{quantity}_mean{unit}``, ``_lo{unit}``, ``_median{unit}``, ``_hi{unit}``, ``_share_infinite``
    for ``tau`` (``_us``), ``bstar`` (``_gbps``), ``reduction`` (no unit), ``predicted``
    (``_us``) and the parameters ``mu``, ``sigma``, ``xi``; ``lo``/``hi`` bound the central
    ``level`` interval (column ``level``; default :data:`evtsync.core.defaults.INTERVAL_LEVEL`),
    credible for a Bayesian fit, approximate confidence for an MLE (``fit_kind``).
``{quantity}_point{unit}`` and ``point_estimate``
    the point estimate of every predicted quantity (not of the fit's own parameters): the
    summary the fit declares by its attribute ``point_estimate`` (:data:`POINT_SUMMARIES`;
    ``median`` for the per-rank estimators, ``mean`` for a fit without it), and what it is in
    words (:func:`point_label`: "posterior mean", "posterior median", ...). Every consumer
    reads the point through :func:`point_column`, which falls back to ``_mean`` for a table
    written before the point existed (docs/methodology.md, "The point estimate").

Infinite draws (tau, and with it B*, where xi >= 1: the mean maximum does not exist) are one
policy everywhere (:data:`INFINITE_POLICY`, also in each table's ``attrs``): their share is
``{quantity}_share_infinite``; the mean is over the finite draws (NaN when none is); the
quantiles are over all draws, so an interval reaching into them has an infinite bound.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from evtsync.core.defaults import (
    DEFAULT_EPS,
    DEFAULT_ESTIMATOR,
    DEFAULT_M,
    INTERVAL_LEVEL,
    POPULATION_MODEL,
    PVM_AGREEMENT,
    check_level,
)
from evtsync.core.display import point_key
from evtsync.core.errors import InputError
from evtsync.core.reference import REFERENCE_TFLOPS
from evtsync.predict import registry
from evtsync.predict.gevtau import domain_multiple, predicted_tax_curve_us, predicted_tax_us

log = logging.getLogger("evtsync.predict.tables")

__all__ = [
    "BEYOND_DATA_NOTE",
    "beyond_data_accuracy",
    "beyond_data_note",
    "DEFAULT_ESTIMATOR",
    "ESTIMATORS",
    "FALLBACK_ESTIMATOR",
    "FIXED_ALPHA_NOTE",
    "FIXED_B_NOTE",
    "GIVEN_TAX_NOTE",
    "INFINITE_POLICY",
    "REFERENCE_TFLOPS",
    "POPULATION_NOTE",
    "PREDICTION_KINDS",
    "PointFit",
    "SCALING_DEFINITION",
    "bandwidth_table",
    "beyond_data_rows",
    "bstar_draws_gbps",
    "cell_parameter_table",
    "check_estimator",
    "estimator_of",
    "fit_column",
    "agreement_summary",
    "POINT_SUMMARIES",
    "point_column",
    "point_key",
    "point_label",
    "point_labels",
    "point_words",
    "point_summary",
    "flops_scaling_table",
    "given_tax_bandwidth_table",
    "given_tax_scaling_table",
    "is_beyond_data",
    "population_draws",
    "predicted_vs_measured",
    "summarise",
    "tau_table",
    "block_sd_from_cv",
    "domain_multiple",
    "flops_factor",
    "predicted_tax_curve_us",
    "predicted_tax_us",
    "scale_block_sd_for_flops",
]


#: The estimators of tau(n) (docs/methodology.md, "Predicting tau(n)"): name -> (the column of the
#: z-score table the fit must be of, what the estimate is), read from their one home, the registry
#: (:mod:`evtsync.predict.registry`: each estimator's class says what it needs, how it loads, its
#: draws, its wording and its fallback). centred and paper compute b·E_k of the fitted GEV and differ
#: in what it was fitted to; ranktail models every rank's value u
#: (:class:`evtsync.evt.ranktail.RankTailFit`, built from the z-score table, not a GEV fit).
ESTIMATORS: dict[str, tuple[str, str]] = {name: (registry.get(name).column, registry.get(name).meaning)
                                          for name in registry.names()}
#: The estimator a prediction falls back to where the default (ranktail) cannot run: a GEV fit
#: given without its z-score table, a table without the per-rank column u, a cell with too few
#: rank values, or a GPU/precision that was not measured (only the hierarchical GEV's population
#: predicts it). Every such row says so (:mod:`evtsync.predict.estimator`); the default's class
#: names it (:attr:`evtsync.predict.registry.Estimator.fallback`).
FALLBACK_ESTIMATOR: str = str(registry.default().fallback)
#: What the B* and tau intervals hold fixed (issue 29, item 8): b and alpha's point values.
FIXED_B_NOTE = ("b fixed at its estimate (the pooled sd of the blocks; its sampling error cancels to first order "
                "against the scale the centred and per-rank estimators divide by, docs/methodology.md)")
FIXED_ALPHA_NOTE = "alpha fixed at its point value"

#: How every table treats infinite draws (see the module docstring).
INFINITE_POLICY = ("share_infinite = share of draws that are infinite (xi >= 1); mean over the finite draws; "
                   "quantiles over all draws (an infinite bound means the interval reaches them)")
#: The summaries a fit may name as its point (attribute ``point_estimate``; a fit without it: "mean").
POINT_SUMMARIES = ("mean", "median")
#: The ``point_estimate`` label of a fit whose "draws" are one given value (``fit_kind`` "point").
GIVEN_POINT_LABEL = "given value"
#: Columns a measured-delay table needs for :func:`predicted_vs_measured`.
MEASURED_COLUMNS = ("workload", "gpu", "precision", "n_ranks", "block_sd_us", "mean_delay_us")


def point_summary(fit: Any) -> str:
    """The summary of a fit's draws that is its point estimate: its ``point_estimate`` attribute
    (``median`` for :class:`evtsync.evt.ranktail.RankTailFit`), ``mean`` for a fit without one."""
    summary = str(getattr(fit, "point_estimate", "mean"))
    if summary not in POINT_SUMMARIES:
        raise InputError(f"fit {getattr(fit, 'name', 'fit')}: point_estimate {summary!r}; "
                         f"expected one of {', '.join(POINT_SUMMARIES)}")
    return summary


def point_label(fit_kind: str, summary: str = "mean") -> str:
    """What the ``*_point*`` columns of a fit of kind ``fit_kind`` are, in words (the
    ``point_estimate`` column): "posterior mean"/"posterior median"; for an MLE the mean of its
    normal-approximation draws; for a given value (``fit_kind`` "point") the value itself."""
    if fit_kind == "point":
        return GIVEN_POINT_LABEL
    if fit_kind == "mle":
        return f"{summary} of the MLE's normal-approximation draws"
    return f"posterior {summary}"


def point_column(table: pd.DataFrame, prefix: str, unit: str = "") -> pd.Series:
    """The point estimate ``{prefix}_point{unit}`` of a prediction table (e.g. ``point_column(t,
    "tau", "_us")``), or the ``_mean`` column of a table written before it (:func:`point_key`);
    ``KeyError`` naming both when neither is there."""
    column = point_key(table, prefix, unit)
    if column not in table:
        raise KeyError(f"the table has neither {prefix}_point{unit} nor {prefix}_mean{unit}")
    return table[column]


def point_words(table: pd.DataFrame) -> str:
    """The distinct :func:`point_labels` of a table's rows in words, in order of first appearance,
    joined by " / " ("posterior median / posterior mean"); "" for a table without rows."""
    return " / ".join(dict.fromkeys(point_labels(table))) if len(table) else ""


def point_labels(table: pd.DataFrame) -> pd.Series:
    """The ``point_estimate`` column of a prediction table; for a table written before it existed,
    the label of its ``_mean`` columns (the point then), by ``fit_kind`` where the table has it."""
    if "point_estimate" in table:
        return table["point_estimate"].astype(str)
    kinds = table["fit_kind"].astype(str) if "fit_kind" in table else pd.Series("bayes", index=table.index)
    return kinds.map(lambda kind: point_label(kind, "mean"))


def fit_column(fit: Any) -> str | None:
    """The column of the z-score table a fit was made of (``y``, ``z``, ...), or None when the fit
    does not record it (a fit built from draws)."""
    column = getattr(fit, "column", None)
    if column is None:
        try:
            column = fit.spec.column
        except Exception:  # noqa: BLE001 - a fit without its spec text records no column
            return None
    return str(column)


def estimator_of(fit: Any) -> str | None:
    """The estimator a fit gives (``centred`` for a fit of y, ``paper`` for z, the per-rank fit's own
    for u: :func:`evtsync.predict.registry.of_fit`), None when unknown."""
    found = registry.of_fit(fit, fit_column(fit))
    return found.name if found is not None else None


def domain_sizes_for(fit: Any, n: Sequence[int], m: int) -> None:
    """Check the domain sizes ``n`` a fit is asked for: a per-rank fit (one with ``expected_max``:
    the rank model, ranktail) predicts any n >= 1, a GEV fit of m-rank maxima multiples of m only
    (:func:`~evtsync.predict.gevtau.domain_multiple`); ``InputError`` naming what is wrong."""
    if hasattr(fit, "expected_max"):
        values = np.asarray(n, dtype=float)
        if values.size == 0 or np.any(~np.isfinite(values)) or np.any(values != np.round(values)) or np.any(values < 1):
            raise InputError(f"domain size n must be positive integers; got {np.asarray(n).ravel()[:5].tolist()}")
        return
    domain_multiple(n, m)


def check_estimator(fit: Any, estimator: str | None = None) -> str:
    """The estimator's name after checking that ``fit`` was made of the column it needs.

    ``estimator`` None takes the fit's own (:func:`estimator_of`: ``centred`` for a fit of y,
    ``paper`` for z, the per-rank fit's own for u (``rankmodel``, ``ranktail``); ``centred`` when the fit records no
    column), named in every table's ``estimator`` column. The run's and the CLI's default,
    :data:`~evtsync.core.defaults.DEFAULT_ESTIMATOR`, and its fallback are chosen one level up,
    where the fit is chosen (:func:`evtsync.predict.estimator.choose_estimator`).

    Each estimator needs a fit of its registry class's column (:mod:`evtsync.predict.registry`):
    ``centred`` a fit of ``y``, ``paper`` of ``z``, ``rankmodel`` and ``ranktail`` a per-rank fit of ``u``
    (built from the z-score table); any other pairing
    is an ``InputError`` that says what to do (a fit of ``z`` answered as if calibrated would be
    biased low by 10-20% at n > m without a word). A fit that records no column is taken as the
    estimator asked for (logged).
    """
    if estimator is None:
        estimator = estimator_of(fit) or FALLBACK_ESTIMATOR
    wanted = registry.get(estimator)
    column = fit_column(fit)
    name = getattr(fit, "name", "fit")
    if column is None:
        log.info("fit %s records no data column; its tau(n) is taken as the %s estimator", name, estimator)
        return estimator
    if column == wanted.column:
        return estimator
    given = registry.of_column(column)
    if wanted.per_rank or (given is not None and given.per_rank):
        per_rank = ", ".join(e for e in registry.names() if registry.get(e).per_rank)
        raise InputError(
            f"fit {name} is of column {column!r}, which does not give the {estimator!r} estimator: "
            + (wanted.refit if wanted.per_rank else
               f"ask for --estimator {per_rank}, or give a GEV fit of "
               + " or ".join(f"{registry.get(e).column} ({e})" for e in registry.names()
                             if not registry.get(e).per_rank)))
    if given is not None:
        raise InputError(f"fit {name} is of column {column!r}, which gives the {given.name!r} estimator, not "
                         f"{estimator!r}: {wanted.refit}")
    raise InputError(f"fit {name} is of column {column!r}: tau(n) = b·E_(n/m) needs a fit of the centred maximum "
                     f"'y' (default) or of the z-scores 'z' (--estimator paper)")


def block_sd_from_cv(block_mean_us: ArrayLike, cv: ArrayLike) -> NDArray[np.float64]:
    """b = r·a: the block standard deviation from its mean a (µs) and coefficient of variation r."""
    value = np.asarray(block_mean_us, dtype=float) * np.asarray(cv, dtype=float)
    return value[()] if value.ndim == 0 else value


def flops_factor(target_tflops: ArrayLike, reference_tflops: float = REFERENCE_TFLOPS) -> NDArray[np.float64]:
    """f = target peak / reference peak (reference: H200, 989 dense BF16 TFLOPS)."""
    target = np.asarray(target_tflops, dtype=float)
    if np.any(target <= 0) or reference_tflops <= 0:
        raise InputError("peak TFLOPS must be > 0")
    value = target / reference_tflops
    return value[()] if value.ndim == 0 else value


def scale_block_sd_for_flops(block_sd_us: ArrayLike, factor: ArrayLike) -> NDArray[np.float64]:
    """b / f: a GPU f times faster runs the block in a/f, and with r fixed, b = r·a scales alike.

    Since tau(n) is linear in b, the tax on the faster GPU is tau(n) / f as well (methodology §8).
    """
    f = np.asarray(factor, dtype=float)
    if np.any(f <= 0):
        raise InputError("FLOPS factor f must be > 0")
    value = np.asarray(block_sd_us, dtype=float) / f
    return value[()] if value.ndim == 0 else value


# --------------------------------------------------------------------------- prediction tables

def summarise(draws: ArrayLike, level: float = INTERVAL_LEVEL, axis: int = 0) -> dict[str, NDArray[np.float64]]:
    """mean, lo, median, hi, share_infinite of draws along ``axis`` (policy: :data:`INFINITE_POLICY`)."""
    level = check_level(level)
    x = np.asarray(draws, dtype=float)
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore"), __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN, said so
        mean = np.nanmean(np.where(finite, x, np.nan), axis=axis)
        lo, median, hi = np.nanquantile(x, [(1 - level) / 2, 0.5, (1 + level) / 2], axis=axis)
    share = np.mean(np.isinf(x), axis=axis)
    # a quantile between two infinite draws interpolates inf - inf = NaN: it is infinite (the policy)
    lo, median, hi = (np.where(np.isnan(q) & (share > 0), np.inf, q) for q in (lo, median, hi))
    return {"mean": mean, "lo": lo, "median": median, "hi": hi, "share_infinite": share}


def _columns(prefix: str, unit: str, summary: dict[str, NDArray[np.float64]], index: Any,
             point: str | None = None) -> dict[str, float]:
    """The summary columns of one quantity at ``index``; with ``point`` (a :data:`POINT_SUMMARIES`
    name, :func:`point_summary`), first ``{prefix}_point{unit}``, that summary's value."""
    out = {}
    if point is not None:
        out[f"{prefix}_point{unit}"] = float(np.asarray(summary[point])[index])
    for key in ("mean", "lo", "median", "hi"):
        out[f"{prefix}_{key}{unit}"] = float(np.asarray(summary[key])[index])
    out[f"{prefix}_share_infinite"] = float(np.asarray(summary["share_infinite"])[index])
    return out


def _fit(fit: Any) -> Any:
    from evtsync.evt.bayesfit import as_fit

    return as_fit(fit)


def _rows_for(fit: Any, block_sd_us: float | pd.DataFrame,
              need_b: bool = True) -> tuple[pd.DataFrame, list[int], dict[str, int]]:
    """The cells to predict for, each with its block sd ``b_us`` and the index of its fit cell.

    A number applies to every cell of the fit. A table gives one ``b_us`` (or ``block_sd_us``)
    per row of group values (e.g. gpu, precision); rows whose cell the fit does not have are
    skipped and counted (a pooled fit has one cell, used for every row).
    """
    cells = fit.cells.reset_index(drop=True)
    groups = [c for c in cells.columns if c not in ("cell", "n_obs")]
    if not isinstance(block_sd_us, pd.DataFrame):
        b = float(block_sd_us)
        if not b >= 0:
            raise InputError(f"block standard deviation must be >= 0 µs; got {block_sd_us}")
        rows = cells.drop(columns=["n_obs"]).assign(b_us=b)
        return rows, list(range(len(cells))), {}
    table = block_sd_us.rename(columns={"block_sd_us": "b_us"})
    if need_b and "b_us" not in table:
        raise InputError("block scale table: needs a column b_us (or block_sd_us)")
    keep, index, skipped = [], [], {"no matching cell": 0}
    lookup = {tuple(r[g] for g in groups): i for i, r in cells.astype(str).iterrows()} if groups else None
    for _, row in table.iterrows():
        if lookup is None:
            c = 0
        else:
            if any(g not in row.index for g in groups):
                raise InputError(f"block scale table: needs the fit's group column(s) {groups}")
            found = lookup.get(tuple(str(row[g]) for g in groups))
            if found is None:
                skipped["no matching cell"] += 1
                continue
            c = found
        keep.append({**row.to_dict(), "cell": str(cells["cell"].iloc[c])})
        index.append(c)
    return pd.DataFrame(keep), index, skipped


def _finish(out: pd.DataFrame, fit: Any, level: float, skipped: dict[str, int], what: str,
            estimator: str | None = None, point: bool = False) -> pd.DataFrame:
    out.insert(0, "model", fit.name)
    if estimator is not None:
        out.insert(1, "estimator", estimator)
        out.attrs["estimator"] = f"{estimator}: {ESTIMATORS[estimator][1]}"
    if point:  # a table of predicted quantities: its *_point* columns are this summary
        out["point_estimate"] = point_label(fit.kind, point_summary(fit))
    out["fit_kind"] = fit.kind
    out["level"] = level
    out["converged"] = bool(fit.converged)
    out.attrs["infinite_draws"] = INFINITE_POLICY
    out.attrs["skipped"] = skipped
    for why, count in skipped.items():
        if count:
            log.warning("%s: skipped %d row(s): %s", what, count, why)
    if fit.convergence_note and fit.convergence_note not in _NOTED_FITS:
        # once per fit and process: a run predicts from one fit for many tables (it was said 13
        # times); every table still carries the fit's ``converged`` flag
        _NOTED_FITS.add(fit.convergence_note)
        log.warning("%s", fit.convergence_note.removeprefix("WARNING: "))
    return out


#: Convergence warnings already logged by this process (see :func:`_finish`).
_NOTED_FITS: set[str] = set()


def _tau_from(params: tuple[NDArray[np.float64], ...], b: NDArray[np.float64], n: Sequence[int],
              m: int, fit: Any = None) -> NDArray[np.float64]:
    """tau draws (sample, row, n) from parameter draws (sample, row) and block sds ``b`` (row,).

    A fit with ``expected_max`` (a per-rank estimator) gives draws of E[max_n u] per cell
    itself: ``params`` is then its cell index per row, and tau = b·E[max_n u]."""
    if fit is not None and hasattr(fit, "expected_max"):  # its estimator's draws (evtsync.predict.registry)
        domain_sizes_for(fit, n, m)
        if np.any(b < 0):
            raise InputError("block standard deviation b must be >= 0 µs")
        own = registry.of_fit(fit, fit_column(fit)) or registry.default()
        return own.tau_draws(fit, list(n), b, [int(i) for i in params[0]], m)
    mu, sigma, xi = params
    return predicted_tax_curve_us(b[None, :], mu, sigma, xi, list(n), m)


def tau_table(fit: Any, n: Sequence[int], block_sd_us: float | pd.DataFrame, m: int = DEFAULT_M,
              level: float = INTERVAL_LEVEL, *, gpu: str | None = None, precision: str | None = None,
              seed: int = 0, estimator: str | None = None) -> pd.DataFrame:
    """tau(n) = b·E_(n/m) per cell and n: point, mean, ``level`` interval, share of infinite draws (µs).

    Parameters
    ----------
    fit : BayesFit, MleCellFit or fit tree
        A fit offering :class:`~evtsync.evt.bayesfit.CellFit` (a Bayesian fit, or an MLE with
        normal-approximation draws), or the tree of :func:`evtsync.fit_table`.
    n : sequence of int
        Domain sizes (ranks): any n >= 1 for a per-rank fit (the rank model, ranktail), each a
        multiple of ``m`` for a GEV fit (:func:`domain_sizes_for`).
    block_sd_us : float or pandas.DataFrame
        The block standard deviation b (µs): one number for every cell, or a table with the
        group columns and ``b_us`` (one row per cell to predict; see :func:`block_scale`).
    m : int, default 4
        Sample size of the fit's z-scores (ranks per block maximum).
    level : float, default 0.90
        Central interval level, in (0, 1).
    gpu, precision : str or None, default None
        Ask for these cells (None: every fitted level); a cell the fit has not seen is predicted
        from the hierarchy's population (``prediction_kind`` "population",
        :func:`population_draws`).
    seed : int, default 0
        Seed of the new population draws for unseen cells.
    estimator : str or None, default None
        :data:`ESTIMATORS`: must match the column the fit was made of
        (:func:`check_estimator`; None: the fit's own); it is the ``estimator`` column of the
        result. The default estimator of the CLI and the run (the rank model, with its fallback) is
        chosen where the fit is: :func:`evtsync.predict.estimator.predict_table`.

    Returns
    -------
    pandas.DataFrame
        One row per cell and n: ``n``, ``k`` = n/m and ``tau_point_us`` (the fit's point
        estimate, named in ``point_estimate``: :func:`point_summary`), ``tau_mean_us``,
        ``tau_lo_us``, ``tau_median_us``, ``tau_hi_us``, ``tau_share_infinite``.
        The table has ``model``, ``fit_kind``, ``level`` and ``converged``; rows that
        cannot be predicted (no matching cell) are skipped, counted in
        ``attrs["skipped"]`` and logged.

    Raises
    ------
    InputError
        A ``level`` outside (0, 1), an n that is not a positive multiple of ``m``, a negative
        block sd, a block-scale table without the fit's group columns, or cells the fit cannot
        give.
    """
    level = check_level(level)
    fit = _fit(fit)
    estimator = check_estimator(fit, estimator)
    domain_sizes_for(fit, n, m)
    rows, params, skipped = _target_rows(fit, block_sd_us, gpu, precision, seed)
    records = []
    if len(rows):
        tau = _tau_from(params, rows["b_us"].to_numpy(float), n, m, fit)
        s, point = summarise(tau, level), point_summary(fit)
        for i, row in enumerate(rows.to_dict(orient="records")):
            for j, nn in enumerate(n):
                records.append({**row, "n": int(nn), "k": int(nn) / m, **_columns("tau", "_us", s, (i, j), point)})
    return _kind_attrs(_finish(pd.DataFrame(records), fit, level, skipped, "tau(n)", estimator, point=True), fit)


def _as_list(value: float | Sequence[float], what: str) -> list[float]:
    values = [float(v) for v in np.atleast_1d(np.asarray(value, dtype=float))]
    if not values:
        raise InputError(f"{what}: give at least one value")
    return values


def _alpha_for(topology: str, alpha_us: float | Mapping[str, float],
               alpha_draws_us: ArrayLike | Mapping[str, ArrayLike] | None, n_sample: int,
               rng: np.random.Generator) -> tuple[float, NDArray[np.float64] | float]:
    """(point alpha, alpha draws (sample,) or the point) of one topology, draws paired at random.

    The alpha posterior comes from other data than the tax's, so pairing its draws with the tax
    draws in a random order is a draw from the joint posterior; fewer draws are resampled.
    """
    point = alpha_us[topology] if isinstance(alpha_us, Mapping) else alpha_us
    if isinstance(alpha_us, Mapping) and topology not in alpha_us:
        raise InputError(f"no alpha for topology {topology!r}; alpha was given for {sorted(alpha_us)}")
    if not float(point) >= 0:
        raise InputError(f"alpha must be >= 0 µs; got {point}")
    if alpha_draws_us is None:
        return float(point), float(point)
    if isinstance(alpha_draws_us, Mapping):
        if topology not in alpha_draws_us:
            raise InputError(f"no alpha draws for topology {topology!r}; draws were given for {sorted(alpha_draws_us)}")
        draws = np.asarray(alpha_draws_us[topology], dtype=float).ravel()
    else:
        draws = np.asarray(alpha_draws_us, dtype=float).ravel()
    if draws.size == 0 or np.any(~np.isfinite(draws)) or np.any(draws < 0):
        raise InputError("alpha draws must be finite and >= 0 µs")
    return float(point), rng.choice(draws, size=n_sample, replace=draws.size < n_sample)


def _topology_terms(topologies: Sequence[str], n: Sequence[int], alpha_us: float | Mapping[str, float],
                    alpha_draws_us: ArrayLike | Mapping[str, ArrayLike] | None, n_sample: int,
                    rng: np.random.Generator) -> Iterator[tuple[Any, NDArray[np.float64], NDArray[np.float64], float,
                                                                NDArray[np.float64] | float]]:
    """Per topology (:func:`evtsync.predict.hockney.get_topology`): the topology, its p and q per domain
    size in ``n``, and its point alpha with ``n_sample`` alpha draws (:func:`_alpha_for`)."""
    from evtsync.predict.hockney import get_topology

    for name in topologies:
        topo = get_topology(name)
        p = np.asarray(topo.p(np.asarray(n)), dtype=float).reshape(-1)
        q = np.asarray(topo.q(np.asarray(n)), dtype=float).reshape(-1)
        yield (topo, p, q, *_alpha_for(topo.name, alpha_us, alpha_draws_us, n_sample, rng))


def _fit_tax(fit: Any, n: Sequence[int], m: int, block_sd_us: float | pd.DataFrame, gpu: str | None,
             precision: str | None, seed: int, estimator: str | None
             ) -> tuple[Any, str, pd.DataFrame, NDArray[np.float64] | None, dict[str, int]]:
    """(fit, estimator, rows, tax draws (sample, row, n) on the reference GPU or None, skipped)
    of a B* or FLOPS scaling table."""
    fit = _fit(fit)
    estimator = check_estimator(fit, estimator)
    domain_sizes_for(fit, n, m)
    rows, params, skipped = _target_rows(fit, block_sd_us, gpu, precision, seed)
    tau_ref = _tau_from(params, rows["b_us"].to_numpy(float), n, m, fit) if len(rows) else None
    return fit, estimator, rows, tau_ref, skipped


def _bstar_draws(tau: NDArray[np.float64], alpha: NDArray[np.float64] | float, p: NDArray[np.float64],
                 q: NDArray[np.float64], size_bytes: float, eps: float
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """B* (GB/s), the reduction and Hockney's B*_H (GB/s) draw by draw; tau (sample, row, n),
    alpha a scalar or (sample,)."""
    from evtsync.predict.hockney import bandwidth_reduction, hockney_bandwidth, optimal_bandwidth

    a = np.asarray(alpha, dtype=float)
    a = a[:, None, None] if a.ndim == 1 else a
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        bstar = optimal_bandwidth(size_bytes, a, tau, p, q, eps) / 1e9
        red = bandwidth_reduction(a, tau, p)
        bh = np.asarray(hockney_bandwidth(size_bytes, a, p, q, eps), dtype=float) / 1e9
    return bstar, red, np.broadcast_to(bh, np.broadcast_shapes(np.shape(bh), (1, 1, len(p))))


def bstar_draws_gbps(tau_us: ArrayLike, topology: str, n: Sequence[int], alpha_us: float | Mapping[str, float],
                     size_bytes: float, eps: float = DEFAULT_EPS, *,
                     alpha_draws_us: ArrayLike | Mapping[str, ArrayLike] | None = None,
                     seed: int = 0) -> dict[str, Any]:
    """B* (GB/s), the reduction and Hockney's B*_H draw by draw for tax draws ``tau_us`` of shape
    (sample, len(n)) or (sample, row, len(n)), on one topology (methodology §8).

    The computation of :func:`bandwidth_table`, without the summary: for callers that combine
    draws (e.g. :func:`evtsync.runfolder.diff.diff_bstar`, B minus A). ``alpha_us``/``alpha_draws_us`` as
    in :func:`bandwidth_table`; alpha's draws, resampled to the sample count with ``seed``, are
    the same for every row, so rows stacked on the row axis share them. Returns ``bstar_gbps``,
    ``reduction``, ``bstar_hockney_gbps`` (tau's shape), ``p``, ``q`` (per n), ``alpha_us`` (the
    point) and ``alpha_draws_us`` (sample,) or the point.
    """
    tau = np.asarray(tau_us, dtype=float)
    if tau.ndim not in (2, 3) or tau.shape[-1] != len(n):
        raise InputError(f"tau draws must have shape (sample, len(n)) or (sample, row, len(n)); got {tau.shape}")
    if not float(size_bytes) > 0:
        raise InputError(f"buffer size S must be > 0 bytes; got {size_bytes}")
    if not -1 < float(eps) < 0:
        raise InputError(f"target elasticity eps must lie in (-1, 0); got {eps}")
    squeeze = tau.ndim == 2
    tau3 = tau[:, None, :] if squeeze else tau
    topo, p, q, point, alpha = next(_topology_terms([topology], n, alpha_us, alpha_draws_us, tau3.shape[0],
                                                    np.random.default_rng(seed)))
    bstar, red, bh = _bstar_draws(tau3, alpha, p, q, float(size_bytes), float(eps))
    bh = np.broadcast_to(bh, bstar.shape)
    out = {"bstar_gbps": bstar, "reduction": red, "bstar_hockney_gbps": bh}
    if squeeze:
        out = {k: v[:, 0, :] for k, v in out.items()}
    return {**out, "p": p, "q": q, "alpha_us": point, "alpha_draws_us": alpha, "topology": topo.name}


def bandwidth_table(fit: Any, topologies: Sequence[str], n: Sequence[int], alpha_us: float | Mapping[str, float],
                    size_bytes: float, block_sd_us: float | pd.DataFrame, eps: float | Sequence[float] = DEFAULT_EPS,
                    m: int = DEFAULT_M, level: float = INTERVAL_LEVEL, flops_factor: float | Sequence[float] = 1.0, *,
                    alpha_draws_us: ArrayLike | Mapping[str, ArrayLike] | None = None, gpu: str | None = None,
                    precision: str | None = None, seed: int = 0,
                    estimator: str | None = None) -> pd.DataFrame:
    """B* (GB/s) with the tax, Hockney's B*_H and the reduction 1 - B*/B*_H per cell, topology and n.

    The intervals carry the fit's uncertainty (and alpha's, given ``alpha_draws_us``); b is held
    at its estimate: the columns ``b_uncertainty`` and ``alpha_uncertainty`` say so (labels
    :data:`FIXED_B_NOTE`, :data:`FIXED_ALPHA_NOTE`).

    Parameters
    ----------
    fit : BayesFit, MleCellFit or fit tree
        A fit offering :class:`~evtsync.evt.bayesfit.CellFit` (a Bayesian fit, or an MLE with
        normal-approximation draws), or the tree of :func:`evtsync.fit_table`.
    topologies : sequence of str
        Collective algorithms (:mod:`evtsync.predict.hockney`: e.g. ``"full"``, ``"ring"``).
    n : sequence of int
        Domain sizes (ranks): any n >= 1 for a per-rank fit (the rank model, ranktail), each a
        multiple of ``m`` for a GEV fit (:func:`domain_sizes_for`).
    alpha_us : float or mapping of str to float
        Latency alpha (µs): one value, or one per topology.
    size_bytes : float
        Buffer size S (bytes), > 0.
    block_sd_us : float or pandas.DataFrame
        The block standard deviation b (µs): one number for every cell, or a table with the
        group columns and ``b_us`` (one row per cell to predict; see :func:`block_scale`).
    eps : float or sequence of float, default -0.5
        Target elasticity, in (-1, 0); a sequence gives one row per value.
    m : int, default 4
        Sample size of the fit's z-scores.
    level : float, default 0.90
        Central interval level, in (0, 1).
    flops_factor : float or sequence of float, default 1.0
        f > 0 divides the block sd, and with it tau, for a GPU f times faster
        (docs/methodology.md); a sequence gives one row per value.
    alpha_draws_us : array-like, mapping of str to array-like, or None, default None
        Draws of alpha (one array, or one per topology: e.g.
        :func:`evtsync.nccltests.alpha.alpha_draws`): carries alpha's uncertainty into B*, B*_H
        and the reduction, draw by draw against the tax draws (``bstar_hockney_gbps`` stays at
        the point alpha; ``bstar_hockney_lo_gbps``/``_hi_gbps`` bound it).
    gpu, precision : str or None, default None
        Ask for these cells (None: every fitted level); a cell the fit has not seen is predicted
        from the hierarchy's population (``prediction_kind`` "population",
        :func:`population_draws`).
    seed : int, default 0
        Seed of the new population draws for unseen cells.
    estimator : str or None, default None
        As in :func:`tau_table`.

    Returns
    -------
    pandas.DataFrame
        One row per cell, topology, n, eps and FLOPS factor: the ``tau_*_us``, ``bstar_*_gbps``
        (mean, lo, median, hi) and ``reduction_*`` columns, and ``bstar_hockney_gbps`` with
        ``bstar_hockney_lo_gbps``/``_hi_gbps``.
        The table has ``model``, ``fit_kind``, ``level`` and ``converged``; rows that
        cannot be predicted (no matching cell) are skipped, counted in
        ``attrs["skipped"]`` and logged.

    Raises
    ------
    InputError
        A ``level`` outside (0, 1), an unknown topology, alpha missing or negative for a
        topology, S <= 0, eps outside (-1, 0), a FLOPS factor <= 0, or an n that is not a
        positive multiple of ``m``.
    """
    level, eps_values, factors = _bandwidth_arguments(level, eps, flops_factor)
    fit, estimator, rows, tau_ref, skipped = _fit_tax(fit, n, m, block_sd_us, gpu, precision, seed, estimator)
    records = _bandwidth_records(rows, tau_ref, topologies, n, alpha_us, alpha_draws_us, size_bytes, eps_values,
                                 factors, level, np.random.default_rng(seed + 1), FIXED_B_NOTE, point_summary(fit))
    return _kind_attrs(_finish(pd.DataFrame(records), fit, level, skipped, "B*", estimator, point=True), fit)


def _bandwidth_arguments(level: float, eps: float | Sequence[float], flops_factor: float | Sequence[float]
                         ) -> tuple[float, list[float], list[float]]:
    """The checked level, eps values and FLOPS factors of a B* table."""
    level = check_level(level)
    eps_values = _as_list(eps, "eps")
    factors = _as_list(flops_factor, "FLOPS factor")
    for e in eps_values:
        if not -1 < e < 0:
            raise InputError(f"target elasticity eps must lie in (-1, 0); got {e}")
    for f in factors:
        if not f > 0:
            raise InputError(f"FLOPS factor must be > 0; got {f}")
    return level, eps_values, factors


def _bandwidth_records(rows: pd.DataFrame, tau_ref: NDArray[np.float64] | None, topologies: Sequence[str],
                       n: Sequence[int], alpha_us: float | Mapping[str, float],
                       alpha_draws_us: ArrayLike | Mapping[str, ArrayLike] | None, size_bytes: float,
                       eps_values: list[float], factors: list[float], level: float, rng: np.random.Generator,
                       b_note: str, point_stat: str = "mean") -> list[dict[str, Any]]:
    """The rows of every B* table (:func:`bandwidth_table`, :func:`given_tax_bandwidth_table`): one
    per row of ``rows``, topology, n, eps and FLOPS factor, from tax draws ``tau_ref`` (sample,
    row, n) on the reference GPU; ``point_stat`` is the summary of the ``*_point*`` columns."""
    if not float(size_bytes) > 0:
        raise InputError(f"buffer size S must be > 0 bytes; got {size_bytes}")
    if tau_ref is None or not len(rows):
        return []
    records: list[dict[str, Any]] = []
    for topo, p, q, point, alpha in _topology_terms(topologies, n, alpha_us, alpha_draws_us, tau_ref.shape[0], rng):
        als = summarise(np.atleast_1d(alpha), level)
        for f in factors:
            tau = tau_ref / f
            ts = summarise(tau, level)
            for e in eps_values:
                bstar, red, bh_draws = _bstar_draws(tau, alpha, p, q, size_bytes, e)
                bs, rs, hs = summarise(bstar, level), summarise(red, level), summarise(bh_draws, level)
                bh_point = _bstar_draws(tau[:1], point, p, q, size_bytes, e)[2].reshape(-1, len(p))[0]
                for i, row in enumerate(rows.to_dict(orient="records")):
                    for j, nn in enumerate(n):
                        records.append({
                            **row, "topology": topo.name, "n": int(nn), "p": float(p[j]), "q": float(q[j]),
                            "alpha_us": point, "alpha_lo_us": float(als["lo"]), "alpha_hi_us": float(als["hi"]),
                            "alpha_source": "draws" if alpha_draws_us is not None else "point",
                            "bytes": float(size_bytes), "eps": e, "flops_factor": f,
                            **_columns("tau", "_us", ts, (i, j), point_stat),
                            **_columns("bstar", "_gbps", bs, (i, j), point_stat),
                            "bstar_hockney_gbps": float(bh_point[j]),
                            "bstar_hockney_lo_gbps": float(np.asarray(hs["lo"]).reshape(-1, len(p))[0, j]),
                            "bstar_hockney_hi_gbps": float(np.asarray(hs["hi"]).reshape(-1, len(p))[0, j]),
                            **_columns("reduction", "", rs, (i, j), point_stat),
                            "b_uncertainty": b_note,
                            "alpha_uncertainty": ("alpha's draws carried" if alpha_draws_us is not None
                                                  else FIXED_ALPHA_NOTE)})
    return records


def flops_scaling_table(fit: Any, topologies: Sequence[str], n: Sequence[int],
                        alpha_us: float | Mapping[str, float], size_bytes: float,
                        block_sd_us: float | pd.DataFrame, flops_factors: Sequence[float],
                        eps: float | Sequence[float] = DEFAULT_EPS, m: int = DEFAULT_M, level: float = INTERVAL_LEVEL, *,
                        alpha_draws_us: ArrayLike | Mapping[str, ArrayLike] | None = None, gpu: str | None = None,
                        precision: str | None = None, seed: int = 0,
                        estimator: str | None = None) -> pd.DataFrame:
    """The bandwidth-scaling requirement as FLOPS grow (the paper's Fig. 13 and its 11.7%).

    Over the sweep f_lo = min(flops_factors) .. f_hi = max, per cell, topology, n and eps:

    * ``growth`` = B*(f_hi) / B*(f_lo), draw by draw (the same tax and alpha draws at both ends):
      how much more bandwidth the model asks for when FLOPS grow by F = f_hi/f_lo;
    * the conventional requirement (roofline: bytes per FLOP kept, bandwidth grows with FLOPS)
      is F; ``scaling_reduction`` = 1 - growth/F (the paper's "lower bandwidth scaling
      requirement"), ``scaling_exponent`` = ln(growth)/ln F (1 for the roofline);
    * Hockney's B*_H (tau = 0, methodology §8) does not depend on FLOPS at all (growth 1).

    Since tau/f shrinks with f, growth = (p·alpha + tau_lo)/(p·alpha + tau_lo·f_lo/f_hi) < F.
    """
    factors = _sweep_factors(flops_factors)
    level, eps_values, _ = _bandwidth_arguments(level, eps, 1.0)
    fit, estimator, rows, tau_ref, skipped = _fit_tax(fit, n, m, block_sd_us, gpu, precision, seed, estimator)
    records = _scaling_records(rows, tau_ref, topologies, n, alpha_us, alpha_draws_us, size_bytes, eps_values,
                               factors, level, np.random.default_rng(seed + 1), point_summary(fit))
    out = _kind_attrs(_finish(pd.DataFrame(records), fit, level, skipped, "FLOPS scaling", estimator, point=True),
                      fit)
    out.attrs["definition"] = SCALING_DEFINITION
    return out


#: How the bandwidth-scaling requirement is defined (docs/what-if.md; every FLOPS scaling table's attrs).
SCALING_DEFINITION = ("growth = B*(f_hi)/B*(f_lo) per draw; roofline growth = f_hi/f_lo; "
                      "scaling_reduction = 1 - growth/roofline growth; Hockney's B*_H does not depend on FLOPS")


def _sweep_factors(flops_factors: Sequence[float]) -> list[float]:
    """The FLOPS factors of a sweep, sorted and checked (two different ones at least, each > 0)."""
    factors = sorted(_as_list(flops_factors, "FLOPS factors"))
    if len(factors) < 2 or factors[0] == factors[-1]:
        raise InputError(f"a FLOPS sweep needs at least two different factors; got {factors}")
    for f in factors:
        if not f > 0:
            raise InputError(f"FLOPS factor must be > 0; got {f}")
    return factors


def _scaling_records(rows: pd.DataFrame, tau_ref: NDArray[np.float64] | None, topologies: Sequence[str],
                     n: Sequence[int], alpha_us: float | Mapping[str, float],
                     alpha_draws_us: ArrayLike | Mapping[str, ArrayLike] | None, size_bytes: float,
                     eps_values: list[float], factors: list[float], level: float,
                     rng: np.random.Generator, point_stat: str = "mean") -> list[dict[str, Any]]:
    """The rows of every FLOPS scaling table (:func:`flops_scaling_table`,
    :func:`given_tax_scaling_table`) from tax draws ``tau_ref`` (sample, row, n); ``point_stat``
    is the summary of the ``*_point*`` columns."""
    big_f = factors[-1] / factors[0]
    if tau_ref is None or not len(rows):
        return []
    records: list[dict[str, Any]] = []
    for topo, p, q, point, alpha in _topology_terms(topologies, n, alpha_us, alpha_draws_us, tau_ref.shape[0], rng):
        for e in eps_values:
            lo = _bstar_draws(tau_ref / factors[0], alpha, p, q, size_bytes, e)[0]
            hi = _bstar_draws(tau_ref / factors[-1], alpha, p, q, size_bytes, e)[0]
            with np.errstate(invalid="ignore", divide="ignore"):
                growth = hi / lo
                exponent = np.log(growth) / np.log(big_f)
            gs, xs, rs = summarise(growth, level), summarise(exponent, level), summarise(1 - growth / big_f, level)
            for i, row in enumerate(rows.to_dict(orient="records")):
                for j, nn in enumerate(n):
                    records.append({
                        **row, "topology": topo.name, "n": int(nn), "eps": e, "alpha_us": point,
                        "alpha_source": "draws" if alpha_draws_us is not None else "point",
                        "bytes": float(size_bytes), "flops_lo": factors[0], "flops_hi": factors[-1],
                        "roofline_growth": big_f, "hockney_growth": 1.0,
                        **_columns("growth", "", gs, (i, j), point_stat),
                        **_columns("scaling_exponent", "", xs, (i, j), point_stat),
                        **_columns("scaling_reduction", "", rs, (i, j), point_stat)})
    return records


class PointFit:
    """A one-draw fit: GEV parameters of the z-scores given as numbers (``evtsync bandwidth
    --gumbel MU SIGMA`` or ``--gev MU SIGMA XI``), with the small interface of
    :class:`~evtsync.evt.bayesfit.CellFit`, so that the prediction tables (:func:`tau_table`,
    :func:`bandwidth_table`, :func:`flops_scaling_table`) serve a point estimate as they serve a
    posterior: every interval is the point itself (``fit_kind`` "point").

    Parameters
    ----------
    mu, sigma, xi : float
        Location, scale (> 0) and shape of the GEV (Coles' sign convention; xi = 0 is Gumbel).
    estimator : str, default "centred"
        What the parameters were fitted to (:data:`ESTIMATORS`): the centred maxima ``y`` or the
        paper's ``z``.
    name : str, default "given"
        The table's ``model`` column.

    Raises
    ------
    InputError
        A parameter that is not finite, sigma <= 0, or an unknown estimator.
    """

    kind = "point"
    converged = True
    convergence_note = ""

    def __init__(self, mu: float, sigma: float, xi: float = 0.0, estimator: str = FALLBACK_ESTIMATOR,
                 name: str = "given") -> None:
        values = np.asarray([mu, sigma, xi], dtype=float)
        if not np.all(np.isfinite(values)):
            raise InputError(f"GEV parameters must be finite; got mu={mu}, sigma={sigma}, xi={xi}")
        if not sigma > 0:
            raise InputError(f"the GEV scale sigma must be > 0; got {sigma}")
        if estimator not in ESTIMATORS:
            raise InputError(f"estimator {estimator!r}: expected one of {', '.join(ESTIMATORS)}")
        self.mu, self.sigma, self.xi = (float(v) for v in values)
        self.name = name
        self.column = ESTIMATORS[estimator][0]

    @property
    def family(self) -> str:
        """``gumbel`` when xi = 0, else ``gev``."""
        return "gumbel" if self.xi == 0 else "gev"

    @property
    def cells(self) -> pd.DataFrame:
        """One cell, ``given``, pooled (no group columns)."""
        return pd.DataFrame({"cell": ["given"], "n_obs": [0]})

    def cell_draws(self) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """mu, sigma, xi as one draw of one cell, each of shape (1, 1)."""
        return np.full((1, 1), self.mu), np.full((1, 1), self.sigma), np.full((1, 1), self.xi)


class _GivenTax:
    """What a table of a tax given directly says of its source (the ``model`` and ``fit_kind`` columns)."""

    name = "given tau"
    kind = "point"
    converged = True
    convergence_note = ""


#: The ``b_uncertainty`` of a table whose tax is given directly (no block sd enters it).
GIVEN_TAX_NOTE = "tau given directly, the same for every n"


def _given_tax(tau_us: float) -> tuple[pd.DataFrame, NDArray[np.float64]]:
    if not float(tau_us) >= 0:
        raise InputError(f"synchronization tax tau must be >= 0 µs; got {tau_us}")
    rows = pd.DataFrame([{"cell": "given", "prediction_kind": "cell"}])
    return rows, np.full((1, 1, 1), float(tau_us))


def given_tax_bandwidth_table(tau_us: float, topologies: Sequence[str], n: Sequence[int],
                              alpha_us: float | Mapping[str, float], size_bytes: float,
                              eps: float | Sequence[float] = DEFAULT_EPS,
                              flops_factor: float | Sequence[float] = 1.0) -> pd.DataFrame:
    """:func:`bandwidth_table` for a tax tau given in µs, the same for every n (``evtsync bandwidth
    --tau-us``): the same rows and columns, one draw (every interval is the point).

    Parameters
    ----------
    tau_us : float
        The synchronization tax (µs, >= 0) on the reference GPU; a FLOPS factor f divides it.
    topologies : sequence of str
        Collective algorithms (:mod:`evtsync.predict.hockney`: e.g. ``"full"``, ``"ring"``).
    n : sequence of int
        Domain sizes (ranks), each >= 2.
    alpha_us : float or mapping of str to float
        Latency alpha (µs): one value, or one per topology.
    size_bytes : float
        Buffer size S (bytes), > 0.
    eps : float or sequence of float, default -0.5
        Target elasticity, in (-1, 0); a sequence gives one row per value.
    flops_factor : float or sequence of float, default 1.0
        f > 0 divides tau (a GPU f times faster, methodology §8); a sequence gives one row per value.

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`bandwidth_table` (``tau_*_us``, ``bstar_*_gbps``,
        ``bstar_hockney_gbps``, ``reduction_*`` ...), ``model`` "given tau", ``fit_kind`` "point",
        ``cell`` "given" (``prediction_kind`` "cell").

    Raises
    ------
    InputError
        tau < 0, an unknown topology, alpha missing or negative, S <= 0, eps outside (-1, 0) or a
        FLOPS factor <= 0.
    """
    level, eps_values, factors = _bandwidth_arguments(INTERVAL_LEVEL, eps, flops_factor)
    rows, tau = _given_tax(tau_us)
    tau_ref = np.broadcast_to(tau, (1, 1, len(n)))
    records = _bandwidth_records(rows, tau_ref, topologies, n, alpha_us, None, size_bytes, eps_values, factors,
                                 level, np.random.default_rng(0), GIVEN_TAX_NOTE)
    given = _GivenTax()
    return _kind_attrs(_finish(pd.DataFrame(records), given, level, {}, "B*", point=True), given)


def given_tax_scaling_table(tau_us: float, topologies: Sequence[str], n: Sequence[int],
                            alpha_us: float | Mapping[str, float], size_bytes: float,
                            flops_factors: Sequence[float], eps: float | Sequence[float] = DEFAULT_EPS
                            ) -> pd.DataFrame:
    """:func:`flops_scaling_table` for a tax tau given in µs, the same for every n (one draw).

    Parameters
    ----------
    tau_us : float
        The synchronization tax (µs, >= 0) on the reference GPU.
    topologies : sequence of str
        Collective algorithms (:mod:`evtsync.predict.hockney`).
    n : sequence of int
        Domain sizes (ranks), each >= 2.
    alpha_us : float or mapping of str to float
        Latency alpha (µs): one value, or one per topology.
    size_bytes : float
        Buffer size S (bytes), > 0.
    flops_factors : sequence of float
        The sweep: at least two different factors, each > 0.
    eps : float or sequence of float, default -0.5
        Target elasticity, in (-1, 0).

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`flops_scaling_table` (``growth_*``, ``scaling_exponent_*``,
        ``scaling_reduction_*`` ...); ``attrs["definition"]`` is :data:`SCALING_DEFINITION`.

    Raises
    ------
    InputError
        As :func:`given_tax_bandwidth_table`, or fewer than two different FLOPS factors.
    """
    factors = _sweep_factors(flops_factors)
    level, eps_values, _ = _bandwidth_arguments(INTERVAL_LEVEL, eps, 1.0)
    rows, tau = _given_tax(tau_us)
    tau_ref = np.broadcast_to(tau, (1, 1, len(n)))
    records = _scaling_records(rows, tau_ref, topologies, n, alpha_us, None, size_bytes, eps_values, factors, level,
                               np.random.default_rng(0))
    given = _GivenTax()
    out = _kind_attrs(_finish(pd.DataFrame(records), given, level, {}, "FLOPS scaling", point=True), given)
    out.attrs["definition"] = SCALING_DEFINITION
    return out


def predicted_vs_measured(fit: Any, measured: pd.DataFrame, m: int = DEFAULT_M, level: float = INTERVAL_LEVEL,
                          source: str = "measured table", estimator: str | None = None) -> pd.DataFrame:
    """Predicted against measured mean straggler delay per workload × GPU × precision × n.

    Rows are grouped by workload, gpu, precision and n_ranks: the measured mean with its
    Student-t ``level`` interval (NaN from a single row), against tau(n) = b·E_(n/m) with b the
    group's mean ``block_sd_us`` and the fit's cell for its GPU and precision.

    Parameters
    ----------
    fit : BayesFit, MleCellFit or fit tree
        A fit offering :class:`~evtsync.evt.bayesfit.CellFit` (a Bayesian fit, or an MLE with
        normal-approximation draws), or the tree of :func:`evtsync.fit_table`.
    measured : pandas.DataFrame
        One row per collective (or per workload, already averaged) with columns
        :data:`MEASURED_COLUMNS` (workload, gpu, precision, n_ranks, block_sd_us,
        mean_delay_us).
    m : int, default 4
        Sample size of the fit's z-scores.
    level : float, default 0.90
        Central interval level, in (0, 1).
    source : str, default "measured table"
        Name of ``measured`` in error messages.
    estimator : str or None, default None
        As in :func:`tau_table`; ``beyond_m`` marks the rows with n > m (an extrapolation, k > 1).

    Returns
    -------
    pandas.DataFrame
        One row per group: measured mean and interval, predicted tau with its interval
        (``predicted_point_us``, the fit's point: ``point_estimate``), ``k`` = n/m, ``ratio`` =
        predicted point / measured mean (NaN when the measured mean is not > 0),
        ``inside_interval`` (the measured mean inside the predicted interval), ``within_agreement``
        (|ratio - 1| <= :data:`evtsync.core.defaults.PVM_AGREEMENT` *and* ``inside_interval``: a
        close point whose interval misses the measured value is not agreement) and ``beyond_m``. Rows with no matching cell, an n that is not a
        multiple of m, or non-finite values are skipped and counted by reason
        (``attrs["skipped"]``, in input rows).

    Raises
    ------
    InputError
        ``measured`` lacks a column of :data:`MEASURED_COLUMNS`, or ``level`` is outside (0, 1).
    """
    from scipy import stats

    level = check_level(level)
    fit = _fit(fit)
    estimator = check_estimator(fit, estimator)
    missing = [c for c in MEASURED_COLUMNS if c not in measured.columns]
    if missing:
        raise InputError(f"{source}: missing column(s) {missing}; expected {list(MEASURED_COLUMNS)}")
    values = measured[list(MEASURED_COLUMNS)].copy()
    for col in ("n_ranks", "block_sd_us", "mean_delay_us"):
        values[col] = pd.to_numeric(values[col], errors="coerce")
    finite = np.isfinite(values[["n_ranks", "block_sd_us", "mean_delay_us"]].to_numpy(float)).all(axis=1)
    skipped = {"non-finite value": int((~finite).sum()), "n not a multiple of m": 0, "no matching cell": 0}
    values = values[finite]
    groups = values.groupby(["workload", "gpu", "precision", "n_ranks"], sort=True)
    agg = groups.agg(n_collectives=("mean_delay_us", "size"), block_sd_us=("block_sd_us", "mean"),
                     measured_mean_us=("mean_delay_us", "mean"), sd=("mean_delay_us", "std")).reset_index()
    # a per-rank fit predicts any n >= 2 (n <= m and n > m alike); a GEV fit of m-rank maxima multiples of m
    ok = (agg["n_ranks"] >= 2) if hasattr(fit, "expected_max") else (agg["n_ranks"] % m == 0) & (agg["n_ranks"] >= m)
    skipped["n not a multiple of m"] = int(groups.size()[~ok.to_numpy()].sum())
    agg = agg[ok.to_numpy()]
    rows, index, _ = _rows_for(fit, agg.rename(columns={"block_sd_us": "b_us"}))
    keys = ["workload", "gpu", "precision", "n_ranks"]
    matched = set(map(tuple, rows[keys].to_numpy().tolist())) if len(rows) else set()
    unmatched = [tuple(r) not in matched for r in agg[keys].to_numpy().tolist()]
    skipped["no matching cell"] = int(agg.loc[unmatched, "n_collectives"].sum())  # rows, as the other reasons
    records = []
    point = point_summary(fit)
    per_rank = hasattr(fit, "expected_max")
    draws = None if per_rank else fit.cell_draws()
    for row, c in zip(rows.to_dict(orient="records"), index, strict=True):
        n = int(row["n_ranks"])
        if draws is None:
            pred = _tau_from((np.asarray([c], dtype=float),), np.asarray([row["b_us"]], dtype=float), [n], m, fit)[:, 0, 0]
        else:
            mu, sigma, xi = draws
            pred = predicted_tax_us(row["b_us"], mu[:, c], sigma[:, c], xi[:, c], n, m)
        ps = summarise(pred, level)
        k = int(row["n_collectives"])
        se = row["sd"] / np.sqrt(k) if k > 1 else float("nan")
        tq = float(stats.t.ppf(0.5 + level / 2, max(k - 1, 1)))
        mean = float(row["measured_mean_us"])
        lo_p, hi_p = float(ps["lo"]), float(ps["hi"])
        ratio = float(ps[point]) / mean if mean > 0 else float("nan")  # the point, as every output shows
        records.append({"workload": row["workload"], "gpu": row["gpu"], "precision": row["precision"], "n": n,
                        "k": n / m, "cell": row["cell"], "n_collectives": k, "block_sd_us": float(row["b_us"]),
                        "measured_mean_us": mean, "measured_lo_us": mean - tq * se, "measured_hi_us": mean + tq * se,
                        **_columns("predicted", "_us", ps, (), point), "inside_interval": bool(lo_p <= mean <= hi_p),
                        # agreement needs both: the point close and the measured value inside the interval
                        # (issue 45: a ratio of 0.959 outside its interval was marked "within agreement")
                        "ratio": ratio, "within_agreement": bool(abs(ratio - 1) <= PVM_AGREEMENT and lo_p <= mean <= hi_p),
                        "beyond_m": n > m})
    return _finish(pd.DataFrame(records), fit, level, skipped, source, estimator, point=True)


def agreement_summary(table: pd.DataFrame) -> dict[str, Any]:
    """How a :func:`predicted_vs_measured` table agrees, for its stage's summary and the report.

    Parameters
    ----------
    table : pandas.DataFrame
        A table of :func:`predicted_vs_measured` (columns ``ratio`` and ``inside_interval``).

    Returns
    -------
    dict
        ``groups`` (rows), ``ratio_median``, ``ratio_min``, ``ratio_max`` of ``ratio`` =
        predicted / measured over its finite values (None when there is none), and ``inside``,
        the rows whose measured mean lies inside the predicted interval.
    """
    ratio = pd.to_numeric(table["ratio"], errors="coerce").to_numpy(float) if len(table) else np.zeros(0)
    finite = ratio[np.isfinite(ratio)]
    median, low, high = ((float(np.median(finite)), float(finite.min()), float(finite.max())) if finite.size
                         else (None, None, None))
    return {"groups": int(len(table)), "ratio_median": median, "ratio_min": low, "ratio_max": high,
            "inside": int(table["inside_interval"].astype(bool).sum()) if len(table) else 0}


def cell_parameter_table(fit: Any, level: float = INTERVAL_LEVEL, cells: pd.DataFrame | None = None, *,
                         gpu: str | None = None, precision: str | None = None, seed: int = 0) -> pd.DataFrame:
    """mu, sigma, xi per cell: mean, ``level`` interval, median (columns ``xi_mean``, ``xi_lo`` ...).

    Parameters
    ----------
    fit : BayesFit, MleCellFit or fit tree
        A fit offering :class:`~evtsync.evt.bayesfit.CellFit` (a Bayesian fit, or an MLE with
        normal-approximation draws), or the tree of :func:`evtsync.fit_table`.
    level : float, default 0.90
        Central interval level, in (0, 1).
    cells : pandas.DataFrame or None, default None
        A table of group values (such as gpu, precision): those cells, each with its fit cell
        (a pooled fit's one cell for all of them); default: the fit's own cells.
    gpu, precision : str or None, default None
        Ask for these cells (None: every fitted level); a cell the fit has not seen is predicted
        from the hierarchy's population (``prediction_kind`` "population",
        :func:`population_draws`).
    seed : int, default 0
        Seed of the new population draws for unseen cells.

    Returns
    -------
    pandas.DataFrame
        One row per cell: ``mu_*``, ``sigma_*``, ``xi_*`` (mean, lo, median, hi); with
        ``gpu``/``precision``, ``prediction_kind`` says which rows come from the population.
        The table has ``model``, ``fit_kind``, ``level`` and ``converged``; rows that
        cannot be predicted (no matching cell) are skipped, counted in
        ``attrs["skipped"]`` and logged.

    Raises
    ------
    InputError
        Both ``cells`` and ``gpu``/``precision`` given, a ``level`` outside (0, 1), or cells the
        fit cannot give.
    """
    level = check_level(level)
    fit = _fit(fit)
    if gpu is not None or precision is not None:
        if cells is not None:
            raise InputError("give either cells or gpu/precision, not both")
        rows, params, skipped = _target_rows(fit, 0.0, gpu, precision, seed)
        records = []
        for i, row in enumerate(rows.to_dict(orient="records")):
            rec = {k: v for k, v in row.items() if k != "b_us"}
            for name, draws in zip(("mu", "sigma", "xi"), params, strict=True):
                s = summarise(draws[:, i], level)
                rec.update({k: v for k, v in _columns(name, "", s, ()).items() if not k.endswith("share_infinite")})
            records.append(rec)
        return _kind_attrs(_finish(pd.DataFrame(records), fit, level, skipped, "cell parameters"))
    by_name = dict(zip(("mu", "sigma", "xi"), fit.cell_draws(), strict=True))
    summaries = {k: summarise(v, level) for k, v in by_name.items()}
    if cells is None:
        rows, index, skipped = fit.cells.reset_index(drop=True), list(range(len(fit.cells))), {}
    else:
        rows, index, skipped = _rows_for(fit, cells, need_b=False)
    records = []
    for row, c in zip(rows.to_dict(orient="records"), index, strict=True):
        rec = {k: v for k, v in row.items() if k != "b_us"}
        for name, s in summaries.items():
            rec.update({k: v for k, v in _columns(name, "", s, c).items() if not k.endswith("share_infinite")})
        records.append(rec)
    return _finish(pd.DataFrame(records), fit, level, skipped, "cell parameters")


# --------------------------------------------------------------------------- unseen hardware (methodology §7)

#: ``prediction_kind`` of a row: the fitted cell's own posterior, a draw from the hierarchy's
#: population for a level the fit has not seen, or a pooled fit's single cell (no GPU effect).
PREDICTION_KINDS = ("cell", "population", "pooled")
#: What a population-level row is, for the tables' ``attrs`` and every printed output.
POPULATION_NOTE = ("population-level prediction: the GPU/precision level was not in the fit; its effects are drawn, "
                   "per posterior draw, from the fitted population (new deviation ~ Normal(0, spread·sqrt(1 + 1/L)), "
                   "L = fitted levels), so the interval includes the spread between levels (methodology §7)")


def population_draws(fit: Any, levels: dict[str, str], seed: int = 0) -> tuple[NDArray[np.float64], ...]:
    """mu, sigma, xi draws (sample,) for a cell given by its group levels, observed or not.

    An observed cell returns its posterior draws; an unseen one is drawn from the fitted
    population by :meth:`~evtsync.evt.bayesfit.BayesFit.draw_new_level` (the fit reads its own
    model variables). A fit without a population (an MLE fit; a parameter with pooling "none")
    raises ``InputError`` naming it and the model that can answer. ``seed`` fixes the new draws.
    """
    fit = _fit(fit)
    cells = fit.cells.reset_index(drop=True)
    groups = [c for c in cells.columns if c not in ("cell", "n_obs")]
    mu_c, sigma_c, xi_c = fit.cell_draws()
    if not groups:
        return mu_c[:, 0], sigma_c[:, 0], xi_c[:, 0]
    unknown = [g for g in levels if g not in groups]
    if unknown or any(g not in levels for g in groups):
        raise InputError(f"fit {fit.name}: a cell is given by {groups}; got {sorted(levels)}")
    key = tuple(str(levels[g]) for g in groups)
    match = np.flatnonzero((cells[groups].astype(str).apply(tuple, axis=1) == key).to_numpy())
    if match.size:
        c = int(match[0])
        return mu_c[:, c], sigma_c[:, c], xi_c[:, c]
    if not hasattr(fit, "draw_new_level"):
        from evtsync.evt.bayesfit import population_refusal

        raise population_refusal(fit, "every parameter", f"is estimated per cell by a {fit.kind} fit")
    return fit.draw_new_level(levels, seed)


def _target_levels(fit: Any, gpu: str | None, precision: str | None) -> list[dict[str, str]]:
    """The cells asked for by ``gpu``/``precision`` (None: every fitted level of that group)."""
    cells = fit.cells.reset_index(drop=True)
    groups = [c for c in cells.columns if c not in ("cell", "n_obs")]
    asked = {"gpu": gpu, "precision": precision}
    extra = [g for g in groups if g not in asked]
    if extra:
        raise InputError(f"fit {fit.name}: cells are given by {groups}; only gpu and precision can be asked for")
    choices = []
    for g in groups:
        value = asked[g]
        choices.append([str(value)] if value is not None else sorted(cells[g].astype(str).unique()))
    from itertools import product

    return [dict(zip(groups, combo, strict=True)) for combo in product(*choices)]


def _target_rows(fit: Any, block_sd_us: float | pd.DataFrame, gpu: str | None, precision: str | None,
                 seed: int, need_b: bool = True
                 ) -> tuple[pd.DataFrame, tuple[NDArray[np.float64], ...], dict[str, int]]:
    """Rows to predict for with their ``b_us``, ``prediction_kind`` and (mu, sigma, xi) draws (sample, row).

    Without ``gpu``/``precision`` the fit's own cells (or the table's rows that match one); with
    them, the asked cells, each observed or drawn from the population (:func:`population_draws`).
    """
    if hasattr(fit, "expected_max"):  # a per-rank estimator: per-cell draws of E[max_n u] (evtsync.predict.registry)
        return _rank_tail_rows(fit, block_sd_us, gpu, precision, need_b)
    if gpu is None and precision is None:
        rows, index, skipped = _rows_for(fit, block_sd_us, need_b)
        mu, sigma, xi = fit.cell_draws()
        idx = np.asarray(index, dtype=int)
        rows = rows.assign(prediction_kind="cell") if len(rows) else rows
        return rows, (mu[:, idx], sigma[:, idx], xi[:, idx]), skipped
    cells = fit.cells.reset_index(drop=True)
    groups = [c for c in cells.columns if c not in ("cell", "n_obs")]
    records, draws = [], []
    skipped = {"no block sd for the cell": 0}
    targets = _target_levels(fit, gpu, precision) if groups else [{}]
    for levels in targets:
        b = _b_of_levels(block_sd_us, levels)
        if b is None:
            skipped["no block sd for the cell"] += 1
            continue
        label = "|".join(levels.values()) if levels else str(cells["cell"].iloc[0])
        observed = not groups or label in set(cells["cell"].astype(str))
        kind = "pooled" if not groups else ("cell" if observed else "population")
        rec = {"cell": label, **levels, "b_us": b, "prediction_kind": kind}
        if not groups:
            rec.update({"gpu": gpu, "precision": precision})
        records.append({k: v for k, v in rec.items() if v is not None})
        draws.append(population_draws(fit, levels, seed))
    if not draws:
        empty = np.zeros((fit.cell_draws()[0].shape[0], 0))
        return pd.DataFrame(records), (empty, empty, empty), skipped
    return pd.DataFrame(records), tuple(np.stack(d, axis=1) for d in zip(*draws, strict=True)), skipped


def _b_of_levels(block_sd_us: float | pd.DataFrame, levels: dict[str, str]) -> float | None:
    """The block sd b (µs) of the cell with these group ``levels``: the number given, or the first row
    of a block-scale table that matches them (None when none does); ``InputError`` for a b < 0."""
    if isinstance(block_sd_us, pd.DataFrame):
        table = block_sd_us.rename(columns={"block_sd_us": "b_us"})
        sel = np.ones(len(table), dtype=bool)
        for g, v in levels.items():
            if g in table:
                sel &= table[g].astype(str).to_numpy() == str(v)
        if not sel.any():
            return None
        b = float(table.loc[sel, "b_us"].iloc[0])
    else:
        b = float(block_sd_us)
    if not b >= 0:
        raise InputError(f"block standard deviation must be >= 0 µs; got {b}")
    return b


def _rank_tail_rows(fit: Any, block_sd_us: float | pd.DataFrame, gpu: str | None, precision: str | None,
                    need_b: bool) -> tuple[pd.DataFrame, tuple[NDArray[np.float64], ...], dict[str, int]]:
    """:func:`_target_rows` for a fit with ``expected_max`` (a per-rank estimator): the rows and, in
    place of parameter draws, a 1-tuple of the fit's cell indices (row,). A GPU/precision that was
    not measured is predicted from the fit's population where it has one (``population_index``:
    the rank model; ``prediction_kind`` "population"), else refused (ranktail: measured cells only)."""
    rows, index, skipped = _rows_for(fit, block_sd_us, need_b)
    own = registry.of_fit(fit, fit_column(fit))
    name = own.name if own is not None else getattr(fit, "name", "per-rank")
    if gpu is not None or precision is not None:
        keep = np.ones(len(rows), dtype=bool)
        for g, v in (("gpu", gpu), ("precision", precision)):
            if v is not None and g in rows:
                keep &= rows[g].astype(str).to_numpy() == str(v)
        if not keep.any():
            return _population_rows(fit, name, block_sd_us, gpu, precision, skipped)
        rows = rows[keep].reset_index(drop=True)
        index = [i for i, k in zip(index, keep, strict=True) if k]
    rows = rows.assign(prediction_kind="cell") if len(rows) else rows
    return rows, (np.asarray(index, dtype=float),), skipped


def _population_rows(fit: Any, name: str, block_sd_us: float | pd.DataFrame, gpu: str | None, precision: str | None,
                     skipped: dict[str, int]) -> tuple[pd.DataFrame, tuple[NDArray[np.float64], ...], dict[str, int]]:
    """The population-level row of a per-rank fit for an unmeasured GPU/precision
    (``fit.population_index``); ``InputError`` ("predicts only measured cells") when the fit has no
    population to draw it from, so that the default falls back, labelled."""
    measured = ", ".join(map(str, fit.cells["cell"]))
    population = getattr(fit, "population_index", None)
    why = ""
    if population is not None and gpu is not None and precision is not None:
        try:
            i = int(population(str(gpu), str(precision)))
        except InputError as exc:
            why = f" ({exc})"
        else:
            b = _b_of_levels(block_sd_us, {"gpu": str(gpu), "precision": str(precision)})
            if b is None:
                return pd.DataFrame(), (np.asarray([], dtype=float),), {**skipped, "no block sd for the cell": 1}
            row = {"cell": f"{gpu}|{precision}", "gpu": str(gpu), "precision": str(precision), "b_us": b,
                   "prediction_kind": "population"}
            return pd.DataFrame([row]), (np.asarray([i], dtype=float),), skipped
    raise InputError(f"the {name} estimator predicts only measured cells ({measured}){why}; gpu={gpu} "
                     f"precision={precision} was not measured: a hardware level without traces needs a population "
                     f"(the rank model's, or the hierarchical GEV's: --estimator centred with a fit of models/"
                     f"{POPULATION_MODEL}.toml), labelled population-level")


#: What a row whose width the prior sets is (issue 29, item 6).
PRIOR_DOMINATED_NOTE = ("prior-dominated: a spread this population-level prediction draws on is set by its prior, not "
                        "by the data (its posterior interval is at least half the prior's: "
                        "evtsync.evt.bayesfit.spread_prior_table), so the interval's width is the prior's choice")


#: What a ranktail row with n > N (the cell's rank values) is, without an accuracy: the accuracy is
#: quoted only where the study measured it (:func:`beyond_data_note`; issue 45).
BEYOND_DATA_NOTE = ("beyond the data: n exceeds the cell's N rank values, so the delay rests on the GPD tail's "
                    "extrapolation")
#: Where the study measured the estimator beyond the data (docs/bayesian.md, "Beyond the data"):
#: (n / N, the point's range as a share of the true delay over its parents).
BEYOND_DATA_MEASURED = ((1.6, "0.95-1.04"), (6.4, "0.91-1.05"))
#: What the study measured it on.
BEYOND_DATA_STUDY = ("measured through synthetic traces over four parents, Student-t5 short, lognormal long "
                     "(docs/bayesian.md, \"Beyond the data\")")


def beyond_data_accuracy(ratio: float) -> str:
    """What is known of the accuracy of a row at n = ``ratio`` × N (its cell's rank values), > 1:
    the study's measured range at the nearest measured ratio at or above it
    (:data:`BEYOND_DATA_MEASURED`), or, beyond the farthest, that it is an extrapolation whose
    accuracy was not measured (the column ``beyond_data_accuracy`` of the prediction tables)."""
    for measured, span in BEYOND_DATA_MEASURED:
        if ratio <= measured:
            return (f"up to n = {measured:g} N: {BEYOND_DATA_STUDY}, at n = {measured:g} N the point is {span} of the "
                    "true delay and the interval covers at its level")
    farthest = BEYOND_DATA_MEASURED[-1][0]
    return (f"beyond n = {farthest:g} N (the farthest the study measured): an extrapolation whose accuracy was not "
            "measured")


def beyond_data_note(ratios: float | Sequence[float] | None = None) -> str:
    """The beyond-the-data note for rows at n = ``ratios`` × N (one or several; None: no accuracy
    known, e.g. a table written before the ratio was), with an accuracy only where the study
    measured one (:func:`beyond_data_accuracy`, each distinct one once, nearest first)."""
    if ratios is None:
        return BEYOND_DATA_NOTE
    values = sorted(float(r) for r in np.atleast_1d(np.asarray(ratios, dtype=float)) if np.isfinite(r))
    texts = list(dict.fromkeys(beyond_data_accuracy(r) for r in values))
    return "; ".join([BEYOND_DATA_NOTE, *texts])


def is_beyond_data(value: Any) -> bool:
    """One row's ``beyond_data`` as a bool: False where the row has none (NaN or None: another
    estimator's row, or a table written before the column existed)."""
    return bool(value) if value is not None and pd.notna(value) else False


def beyond_data_rows(table: pd.DataFrame) -> pd.Series:
    """Per row of ``table``: n beyond the cell's N rank values (:func:`is_beyond_data` of the column
    ``beyond_data``; all False without the column)."""
    if "beyond_data" not in table:
        return pd.Series(False, index=table.index)
    return table["beyond_data"].map(is_beyond_data).astype(bool)


def _prior_dominated_spreads(fit: Any, out: pd.DataFrame) -> list[str]:
    """Per row: the prior-dominated spreads a population-level row draws on, comma-joined ("" for
    rows of fitted cells, or when the fit has no spreads)."""
    if "prediction_kind" not in out or not (out["prediction_kind"] == "population").any():
        return [""] * len(out)
    if getattr(fit, "kind", "") != "bayes" or getattr(fit, "tree", None) is None:
        return [""] * len(out)
    from evtsync.evt.bayesfit import spread_prior_table

    table = spread_prior_table(fit.tree)
    dominated = set(table.loc[table["prior_dominated"], "parameter"])
    cells = fit.cells
    labels = []
    for row in out.to_dict(orient="records"):
        if row.get("prediction_kind") != "population":
            labels.append("")
            continue
        used = {"mu_sd", "log_sigma_sd", "xi_sd_cell"}
        for g in ("gpu", "precision"):
            if g in cells and str(row.get(g)) not in set(cells[g].astype(str)):
                used.add(f"xi_sd_{g}")
        labels.append(", ".join(sorted(used & dominated)))
    return labels


def _kind_attrs(out: pd.DataFrame, fit: Any = None) -> pd.DataFrame:
    """Say in the table's attrs (and the log) when some rows are population-level or pooled, and
    which population-level rows have a prior-dominated width (column ``prior_dominated``); rows of
    a per-rank estimator carry their cell's size and notes (``n_values``, ``n_exceedances``,
    ``ranktail_note``, the name kept for the tables already written: a small cell, whose interval is
    wide; a population-level cell of the rank model) and ``beyond_data`` (n > n_values: the
    tail's extrapolation, :data:`BEYOND_DATA_NOTE` in the attrs)."""
    if fit is not None and len(out) and hasattr(fit, "cell_info") and "cell" in out:
        info = (fit.cell_info(float(out["level"].iloc[0])) if "level" in out else fit.cell_info()).set_index("cell")
        for column, source in (("n_values", "n_values"), ("n_exceedances", "n_exceedances"), ("ranktail_note", "note"),
                               ("gpd_xi_mean", "gpd_xi_mean"), ("gpd_xi_lo", "gpd_xi_lo"), ("gpd_xi_hi", "gpd_xi_hi")):
            out[column] = out["cell"].astype(str).map(info[source])
        if (out["ranktail_note"] != "").any():
            out.attrs["ranktail_note"] = "; ".join(sorted(set(out["ranktail_note"]) - {""}))
        if "n" in out:  # n beyond the cell's N values: the GPD's extrapolation (a NaN N, another fit's row: False)
            out["beyond_data"] = pd.to_numeric(out["n"]) > pd.to_numeric(out["n_values"])
            ratio = pd.to_numeric(out["n"]) / pd.to_numeric(out["n_values"])
            out["beyond_data_accuracy"] = [beyond_data_accuracy(r) if b else ""
                                           for r, b in zip(ratio, out["beyond_data"], strict=True)]
            if out["beyond_data"].any():
                out.attrs["beyond_data_note"] = beyond_data_note(ratio[out["beyond_data"]].to_numpy())
                log.info("%s", out.attrs["beyond_data_note"])
    if fit is not None and len(out):
        spreads = _prior_dominated_spreads(fit, out)
        out["prior_dominated_spreads"] = spreads
        out["prior_dominated"] = [bool(v) for v in spreads]
        if out["prior_dominated"].any():
            out.attrs["prior_dominated_note"] = PRIOR_DOMINATED_NOTE
            log.warning("%s", PRIOR_DOMINATED_NOTE)
    if "prediction_kind" in out and (out["prediction_kind"] == "population").any():
        # the fit's own wording where it has one (the rank model's population), else the hierarchical GEV's
        out.attrs["population_note"] = str(getattr(fit, "population_note", POPULATION_NOTE))
        log.info("%s", out.attrs["population_note"])  # in the table's attrs, printed by every output
    if "prediction_kind" in out and (out["prediction_kind"] == "pooled").any():
        out.attrs["pooled_note"] = "the pooled fit has no GPU or precision effect: every GPU is predicted alike"
    return out


def population_table(fit: Any, level: float = INTERVAL_LEVEL) -> pd.DataFrame:
    """The population parameters of a hierarchical fit (``xi0``, ``xi_delta_*``, ``xi_sd_*`` and the
    spreads ``mu_sd``, ``log_sigma_sd``): one row per scalar with mean, ``level`` interval and
    median (empty for other fits); spreads also with their prior's interval, the width ratio and
    ``prior_dominated`` (:func:`evtsync.evt.bayesfit.spread_prior_table`)."""
    level = check_level(level)
    fit = _fit(fit)
    records = []
    if fit.kind == "bayes":
        from evtsync.evt.bayesfit import spread_prior_table

        priors = spread_prior_table(fit.tree, level).set_index("parameter")
        post = fit.tree["posterior"].to_dataset()
        for var in post.data_vars:
            if var in ("mu_sd", "log_sigma_sd") or var == "xi0" or (
                    var.startswith(("xi_delta_", "xi_sd_")) and not var.endswith("_raw")):
                da = post[var]
                extra = [d for d in da.dims if d not in ("chain", "draw")]
                flat = da.stack(sample=("chain", "draw")).transpose(*extra, "sample")
                labels = [f"{var}[{v}]" for v in da[extra[0]].values] if extra else [var]
                for label, v in zip(labels, flat.values.reshape(len(labels), -1), strict=True):
                    s = summarise(v, level)
                    rec = {"parameter": label, **{k: float(s[k]) for k in ("mean", "lo", "median", "hi")}}
                    if label in priors.index:
                        p = priors.loc[label]
                        rec.update(prior=p["prior"], prior_lo=p["prior_lo"], prior_hi=p["prior_hi"],
                                   width_ratio=p["width_ratio"], prior_dominated=bool(p["prior_dominated"]))
                    records.append(rec)
    out = pd.DataFrame(records, columns=["parameter", "mean", "lo", "median", "hi", "prior", "prior_lo", "prior_hi",
                                         "width_ratio", "prior_dominated"])
    return _finish(out, fit, level, {}, "population parameters")


def block_scale(z: pd.DataFrame) -> pd.DataFrame:
    """Per GPU × precision: b = mean r × mean a over block identities (the paper's b = r·a), ``b_us``."""
    ident = z.groupby(["gpu", "precision", "block"], sort=True).agg(a=("block_mean_us", "first"),
                                                                     r=("cv", "first"))
    per_cell = ident.groupby(["gpu", "precision"]).agg(mean_a_us=("a", "mean"), mean_r=("r", "mean"),
                                                       n_blocks=("a", "size"))
    per_cell["b_us"] = per_cell["mean_a_us"] * per_cell["mean_r"]
    return per_cell.reset_index()


def domain_sizes(m: int, n_max: int = 4096) -> NDArray[np.int64]:
    """m, 2m, 4m, … up to ``n_max``: the domain sizes of the tau(n) and B* curves."""
    sizes = [int(m)]
    while sizes[-1] * 2 <= n_max:
        sizes.append(sizes[-1] * 2)
    return np.array(sizes, dtype=np.int64)


def measured_delays(zscores: pd.DataFrame, collectives: pd.DataFrame,
                    attribution: pd.DataFrame | None = None) -> tuple[pd.DataFrame, str]:
    """The measured straggler delay of each collective that follows a kept compute block.

    Joins the block of every z-score (its pooled ``block_sd_us``) with the valid collective right
    after it (``mean_delay_us``, ``n_ranks``); with an attribution table, only collectives whose
    straggler path is GPU-only are kept. Returns the table (columns :data:`MEASURED_COLUMNS`
    and pg, index) and a sentence saying which collectives it holds.
    """
    coll = collectives[collectives["valid"].astype(bool)]
    selection = "all valid collectives that follow a kept GEMM block"
    if attribution is not None:
        gpu_only = attribution[(attribution["status"] == "ok") & (attribution["path_kind"] == "gpu_only")]
        coll = coll.merge(gpu_only[["workload", "pg", "index"]], on=["workload", "pg", "index"], how="inner")
        selection = "valid collectives after a kept GEMM block whose straggler path is GPU-only"
    blocks = zscores.drop_duplicates(["workload", "pg", "index", "block"])[
        ["workload", "gpu", "precision", "pg", "index", "block", "block_sd_us"]].copy()
    blocks["next_index"] = blocks["index"].astype(np.int64) + 1
    joined = blocks.merge(coll[["workload", "pg", "index", "mean_delay_us", "n_ranks"]],
                          left_on=["workload", "pg", "next_index"], right_on=["workload", "pg", "index"],
                          suffixes=("", "_coll"))
    return joined, selection
