"""Which estimator of tau(n) a prediction uses, and its labelled fallback (issue 29; docs/methodology.md,
"Predicting tau(n)").

The default, :data:`~evtsync.core.defaults.DEFAULT_ESTIMATOR` (``rankmodel``, the hierarchical rank
model :mod:`evtsync.evt.rankmodel`; issue 45), is fitted to the z-score table's per-rank values, as is
the comparator ``ranktail`` (:class:`evtsync.evt.ranktail.RankTailFit`): a *per-rank* estimator
(:attr:`evtsync.predict.registry.Estimator.per_rank`). Where its values are not available — a GEV fit
given without its z-score table, a z-score table written before the column ``u`` existed, a cell with
too few rank values, or a GPU/precision the per-rank fit cannot predict (ranktail predicts measured
cells only; the rank model predicts unseen ones from its own population, labelled population-level,
unless a factor has one level) — the default falls back to the centred estimator
(:data:`~evtsync.predict.tables.FALLBACK_ESTIMATOR`) of the given (or the run's main) GEV fit. Every
row says which estimator made it (column ``estimator``) and, for a fallback row, why (column
``estimator_note``; also ``attrs["estimator_note"]`` and a logged warning). An estimator asked for
explicitly is obeyed strictly: when it cannot run, ``InputError`` names what is missing (an old
table without ``u`` gets :func:`evtsync.evt.ranktail.rank_values`' message).

:func:`choose_estimator` makes the choice once (an :class:`EstimatorChoice`);
:func:`predict_table` runs any prediction table of :mod:`evtsync.predict.tables` (``tau_table``,
``bandwidth_table``, ``flops_scaling_table``, ``predicted_vs_measured``) with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from evtsync.core.defaults import DEFAULT_ESTIMATOR
from evtsync.core.errors import InputError
from evtsync.predict import registry
from evtsync.predict.tables import FALLBACK_ESTIMATOR, check_estimator

log = logging.getLogger("evtsync.predict.estimator")

__all__ = ["EstimatorChoice", "cache_expected_max", "choose_estimator", "fit_per_rank", "predict_table"]

#: The reason of a fallback row whose GPU/precision the per-rank estimator ({name}) cannot predict.
UNMEASURED_REASON = ("GPU/precision not measured and the {name} estimator cannot predict it; the hierarchical "
                     "GEV's population predicts this one (population-level)")
#: The reason when a GEV fit is given without its z-score table.
NO_TABLE_REASON = ("no z-score table given (a GEV fit holds no per-rank values; give the z-score table or a "
                   "run folder for the {name} estimator)")


@dataclass
class EstimatorChoice:
    """The estimator of tau(n) a prediction uses and the fits it needs.

    Attributes
    ----------
    asked : str
        The estimator asked for (:data:`~evtsync.predict.tables.ESTIMATORS`).
    explicit : bool
        True when the user named it (``--estimator``): no fallback then.
    per_rank : fit or None
        The per-rank fit of the asked per-rank estimator (the rank model's
        :class:`~evtsync.evt.rankmodel.RankModelPrediction`, ranktail's
        :class:`~evtsync.evt.ranktail.RankTailFit`) of the measured cells that have enough rank values.
    gev : fit or None
        The GEV fit of the fallback (centred), or of the asked ``centred``/``paper`` estimator.
    reason : str
        Why the per-rank estimator cannot run at all ("" when it can).
    cell_reasons : dict of str to str
        Cells (``GPU|precision``) of the z-score table the per-rank estimator refused, and why.
    block_scale : pandas.DataFrame or None
        Each cell's own block sd b of the source's z-score table (``b_us``,
        :func:`evtsync.predict.tables.block_scale`), None when the source has none.
    """

    asked: str
    explicit: bool
    per_rank: Any = None
    gev: Any = None
    reason: str = ""
    cell_reasons: dict[str, str] = field(default_factory=dict)
    block_scale: pd.DataFrame | None = None

    def describe(self) -> dict[str, Any]:
        """The choice as a JSON-ready record (the run's manifest and summary)."""
        return {"estimator": self.asked, "explicit": self.explicit, "default": DEFAULT_ESTIMATOR,
                "fallback": registry.get(self.asked).fallback if not self.explicit else None,
                "fallback_model": getattr(self.gev, "name", None) if self.gev is not None else None,
                "per_rank_cells": ([str(c) for c in self.per_rank.cells["cell"]] if self.per_rank is not None else []),
                "reason": self.reason, "cell_reasons": dict(self.cell_reasons)}


def cache_expected_max(fit: Any) -> Any:
    """``fit`` (a per-rank fit: :class:`~evtsync.evt.ranktail.RankTailFit`,
    :class:`~evtsync.evt.rankmodel.RankModelPrediction`) with its :meth:`expected_max` draws
    computed once per cell and domain size: a run asks the same cells and n for tau(n), B*, what-if
    and FLOPS (seconds of quadrature each time on the demo). The draws of one (cell, n) do not depend
    on which other n are asked (checked in the tests), so the answers are the fit's own. The fit
    keeps its type (the prediction tables check it); only this instance's method is wrapped."""
    import numpy as np

    compute = fit.expected_max
    draws: dict[tuple[int, int], Any] = {}

    def expected_max(n: Any, index: Any = None) -> Any:
        cells = range(len(fit.cells)) if index is None else [int(i) for i in index]
        ns = [int(v) for v in n]
        for i in cells:
            todo = [v for v in dict.fromkeys(ns) if (i, v) not in draws]
            if todo:
                new = np.asarray(compute(todo, [i]))[:, 0, :]
                draws.update({(i, v): new[:, j] for j, v in enumerate(todo)})
        return np.stack([np.stack([draws[(i, v)] for v in ns], axis=1) for i in cells], axis=1)

    expected_max.__doc__ = compute.__doc__
    setattr(fit, "expected_max", expected_max)  # noqa: B010 - an instance attribute shadows the method
    return fit


def fit_per_rank(table: pd.DataFrame, estimator: str | None = None, *, seed: int = 0,
                 source: str = "z-score table", strict: bool = False) -> tuple[Any, dict[str, str]]:
    """The per-rank fit of a z-score table's cells by ``estimator`` (None: the default), and the
    cells it refused.

    The table's cells are fitted in one pass (the registry class's
    :meth:`~evtsync.predict.registry.Estimator.load_table` with ``refused``): a cell that cannot be
    fitted (too few rank values) is left out with its reason, and the others are fitted as the
    whole table gives them.

    Parameters
    ----------
    table : pandas.DataFrame
        A z-score table with the per-rank column ``u`` (``evtsync blocks``, the run's zscores stage).
    estimator : str or None, default None
        A per-rank estimator's name (None: the default).
    seed : int, default 0
        Seed of the fit and its draws.
    source : str, default "z-score table"
        The table's name in messages.
    strict : bool, default False
        Raise on a refused cell instead of leaving it out.

    Returns
    -------
    tuple
        (the fit or None when no cell could be fitted, {cell: reason} of the refused cells).

    Raises
    ------
    InputError
        The table lacks ``u`` or a group column (always), or a cell is refused (``strict``).
    """
    refused: dict[str, str] = {}
    try:
        fit = registry.get(estimator).load_table(table, seed=seed, source=source, refused=None if strict else refused)
    except InputError:
        if refused:  # every cell refused: the caller falls back for all of them
            return None, refused
        raise  # an old table without u, a missing column, no rows: never a per-cell fallback
    return fit, refused


def choose_estimator(estimator: str | None = None, *, gev: Any = None, zscores: pd.DataFrame | None = None,
                     source: str = "z-score table", seed: int = 0, fitted: Any = None,
                     unavailable: str = "") -> EstimatorChoice:
    """Choose the estimator of tau(n) and fit what it needs.

    Parameters
    ----------
    estimator : str or None, default None
        None: the default (:data:`~evtsync.core.defaults.DEFAULT_ESTIMATOR`) with its fallback;
        a name: that estimator, strictly.
    gev : fit or None, default None
        A GEV fit (:class:`~evtsync.evt.bayesfit.BayesFit`, an MLE fit, a fit tree or path): the
        fallback's, or the asked ``centred``/``paper`` estimator's.
    zscores : pandas.DataFrame or None, default None
        The z-score table a per-rank estimator is fitted to.
    source : str, default "z-score table"
        The table's name in messages.
    seed : int, default 0
        Seed of the per-rank fit and its draws.
    fitted : fit or None, default None
        The asked per-rank estimator's fit, already made (a run's ``fits/rankmodel.nc``:
        :meth:`~evtsync.predict.registry.Estimator.load_run`): used instead of fitting ``zscores``;
        its refused cells are its own (``refused`` attribute).
    unavailable : str, default ""
        Why the asked per-rank estimator has no fit (a run whose rankmodel stage did not apply): the
        default then falls back for every row with this reason; an explicit one raises it.

    Returns
    -------
    EstimatorChoice
        What :func:`predict_table` runs.

    Raises
    ------
    InputError
        An unknown estimator; an explicit estimator whose input is missing or unfit (naming it); a
        default choice with neither a usable z-score table nor a GEV fit.
    """
    explicit = estimator is not None
    wanted = registry.get(estimator)  # InputError naming the choices for an unknown name
    asked = wanted.name
    if gev is not None:
        from evtsync.evt.bayesfit import as_fit

        gev = as_fit(gev)
    if not wanted.per_rank:
        if gev is None:
            raise InputError(f"the {asked} estimator needs {wanted.needs}; a z-score table alone "
                             f"gives only the {' or '.join(e for e in registry.names() if registry.get(e).per_rank)} "
                             "estimator")
        check_estimator(gev, asked)
        return EstimatorChoice(asked, explicit, gev=gev)
    if unavailable:
        if explicit or gev is None:
            raise InputError(f"the {asked} estimator cannot predict: {unavailable}")
        return _fallback_all(asked, gev, unavailable)
    if fitted is not None:
        fit, refused = fitted, dict(getattr(fitted, "refused", {}) or {})
        if explicit and refused:
            cell, why = next(iter(refused.items()))
            raise InputError(f"{source}: the {asked} estimator refused cell {cell}: {why}")
    elif zscores is None:
        if explicit or gev is None:
            raise InputError(f"the {asked} estimator needs {wanted.needs}, not only a GEV fit"
                             + ("" if explicit else "; or ask for --estimator centred with a GEV fit"))
        return _fallback_all(asked, gev, NO_TABLE_REASON.format(name=asked))
    else:
        try:
            fit, refused = fit_per_rank(zscores, asked, seed=seed, source=source, strict=explicit)
        except InputError as exc:
            if explicit or gev is None:
                raise
            return _fallback_all(asked, gev, str(exc))
    if fit is None:
        reason = "no cell has enough rank values: " + "; ".join(f"{c}: {r}" for c, r in refused.items())
        if gev is None:
            raise InputError(f"{source}: {reason}")
        return _fallback_all(asked, gev, reason, refused)
    if gev is not None:
        check_estimator(gev, FALLBACK_ESTIMATOR)
    for cell, why in refused.items():
        log.warning("%s estimator: cell %s refused (%s); %s", asked, cell, why,
                    f"its rows fall back to the {FALLBACK_ESTIMATOR} estimator of {gev.name}" if gev is not None
                    else "no GEV fit to fall back to: its rows are left out")
    return EstimatorChoice(asked, explicit, per_rank=cache_expected_max(fit), gev=gev, cell_reasons=refused)


def _fallback_all(asked: str, gev: Any, reason: str, refused: dict[str, str] | None = None) -> EstimatorChoice:
    check_estimator(gev, FALLBACK_ESTIMATOR)  # never a silently biased fallback (a fit of z is refused)
    log.warning("tau(n): the default %s estimator cannot run (%s); every row falls back to the %s estimator of %s, "
                "labelled", asked, reason, FALLBACK_ESTIMATOR, gev.name)
    return EstimatorChoice(asked, False, gev=gev, reason=reason, cell_reasons=dict(refused or {}))


def _is_unmeasured(exc: InputError) -> bool:
    return "predicts only measured cells" in str(exc)


def _fallback_note(choice: EstimatorChoice, row: dict[str, Any], unmeasured: bool = False) -> str:
    cell = str(row.get("cell", ""))
    if unmeasured:
        why = UNMEASURED_REASON.format(name=choice.asked)
    elif choice.reason:
        why = choice.reason
    elif cell in choice.cell_reasons:
        why = choice.cell_reasons[cell]
    elif row.get("prediction_kind") == "population":
        why = UNMEASURED_REASON.format(name=choice.asked)
    else:
        why = f"the {choice.asked} fit has no such cell"
    return f"fallback to the {FALLBACK_ESTIMATOR} estimator of {choice.gev.name}: {why}"


def _keys(table: pd.DataFrame) -> list[tuple[str, ...]]:
    """The cell of each row: (gpu, precision) where the table has them, else its ``cell`` label."""
    if {"gpu", "precision"} <= set(table.columns):
        return list(zip(table["gpu"].astype(str), table["precision"].astype(str), strict=True))
    if "cell" in table:
        return [(str(c),) for c in table["cell"]]
    return [()] * len(table)


def _merge_skipped(parts: list[pd.DataFrame]) -> dict[str, int]:
    """Rows skipped by every part (a row the fallback predicts is not skipped)."""
    keys = {k for p in parts for k in p.attrs.get("skipped", {})}
    return {k: min(int(p.attrs.get("skipped", {}).get(k, 0)) for p in parts) for k in sorted(keys)}


def predict_table(choice: EstimatorChoice, table: Callable[..., pd.DataFrame], *args: Any,
                  gpu: str | None = None, precision: str | None = None, **kwargs: Any) -> pd.DataFrame:
    """A prediction table (:func:`~evtsync.predict.tables.tau_table`, ``bandwidth_table``,
    ``flops_scaling_table``, ``predicted_vs_measured``) made with ``choice``.

    The per-rank estimator's rows come first (``estimator`` its name, ``estimator_note`` ""); the
    cells it cannot give — all of them when it cannot run, a refused cell, a GPU/precision it cannot
    predict —
    come from the GEV fit's centred estimator with ``estimator_note`` saying why, logged once per
    table and summarised in ``attrs["estimator_note"]``. An explicit estimator gives its own rows
    only (and its errors).

    Parameters
    ----------
    choice : EstimatorChoice
        From :func:`choose_estimator`.
    table : callable
        The table function; called as ``table(fit, *args, estimator=..., **kwargs)``.
    *args, **kwargs
        Its arguments after the fit.
    gpu, precision : str or None, default None
        Passed on when given (cells asked for; unmeasured ones fall back).

    Returns
    -------
    pandas.DataFrame
        The rows, with ``estimator`` and ``estimator_note``; ``attrs`` of the first part, with
        ``estimator`` naming every estimator used and ``skipped`` counting rows no part predicted.

    Raises
    ------
    InputError
        As the table function, or an explicit per-rank estimator asked for a cell it cannot give.
    """
    asked = {k: v for k, v in (("gpu", gpu), ("precision", precision)) if v is not None}
    parts: list[pd.DataFrame] = []
    covered: set[tuple[str, ...]] = set()
    primary_failed = ""
    wanted = registry.get(choice.asked)
    if wanted.per_rank and choice.per_rank is not None:
        try:
            first = table(choice.per_rank, *args, estimator=wanted.name, **asked, **kwargs)
        except InputError as exc:
            if choice.explicit or choice.gev is None or not _is_unmeasured(exc):
                raise
            primary_failed = str(exc)
        else:
            first = first.assign(estimator_note="") if len(first) else first
            parts.append(first)
            covered = set(_keys(first)) if len(first) else set()
    # one cell asked for (gpu and precision) and the per-rank rows give it: no fallback to compute (its
    # population draws would be made, and warned about, for rows that are then dropped)
    one_cell_given = bool(parts) and len(parts[0]) > 0 and gpu is not None and precision is not None
    if choice.gev is not None and not (wanted.per_rank and choice.explicit) and not one_cell_given:
        estimator = str(wanted.fallback) if wanted.per_rank else wanted.name
        try:
            second = table(choice.gev, *args, estimator=estimator, **asked, **kwargs)
        except InputError as exc:
            if not parts:
                raise
            log.info("tau(n) fallback not computed (%s): the %s rows cover the table", exc, wanted.name)
        else:
            if wanted.per_rank and len(second):
                if covered and not {"gpu", "precision"} <= set(second.columns):
                    # a pooled fit's one cell stands for every GPU: the per-rank rows already give the
                    # measured cells it would repeat
                    second = second.iloc[0:0]
                second = second[[k not in covered for k in _keys(second)]].copy()
                second["estimator_note"] = [_fallback_note(choice, r, bool(primary_failed))
                                            for r in second.to_dict(orient="records")]
            elif len(second):
                second = second.assign(estimator_note="")
            if len(second) or not parts:
                parts.append(second)
    if not parts:
        raise InputError(primary_failed or "no estimator of tau(n) could predict these cells")
    out = pd.concat([p for p in parts if len(p)] or parts[:1], ignore_index=True)
    out.attrs.update(parts[0].attrs)
    out.attrs["estimator"] = "; ".join(dict.fromkeys(str(p.attrs["estimator"]) for p in parts
                                                      if len(p) and "estimator" in p.attrs)) \
        or parts[0].attrs.get("estimator", "")
    out.attrs["skipped"] = _merge_skipped(parts)
    for p in parts[1:]:
        for key in ("population_note", "prior_dominated_note", "pooled_note", "ranktail_note", "beyond_data_note"):
            if key in p.attrs:
                out.attrs[key] = p.attrs[key]
    notes = sorted({str(v) for v in out.get("estimator_note", pd.Series(dtype=str)) if v})
    if notes:
        out.attrs["estimator_note"] = "; ".join(notes)
        log.warning("tau(n): %d row(s) not by the %s estimator: %s",
                    int((out["estimator_note"] != "").sum()), wanted.name, out.attrs["estimator_note"])
    return out
