"""One home for the estimators of tau(n): a registry with one class per estimator (issue 45, item 5).

Each estimator is a subclass of :class:`Estimator` registered under its name
(:func:`register`); every other module asks the registry (:func:`get`, :func:`names`,
:func:`of_column`, :func:`of_model`, :func:`interval_words`) instead of comparing the name to a
literal (``tests/predict/test_registry.py`` counts such comparisons in the package source). A
class says:

* **what it needs** -- :attr:`~Estimator.column` (the z-score table column its fit is of),
  :attr:`~Estimator.needs` (in words, for errors) and :attr:`~Estimator.per_rank` (fitted to the
  table's per-rank values rather than given as a GEV fit);
* **how it loads** -- :meth:`~Estimator.load_run` (from a run folder) and
  :meth:`~Estimator.load_table` (from a z-score table); both return the fit the prediction tables
  take, or raise :class:`~evtsync.core.errors.InputError` naming what is missing;
* **its tau draws** -- :meth:`~Estimator.tau_draws`: tau(n) in µs, shape (draw, row, n), from the
  fit, each row's cell index and block sd b;
* **its wording** -- :attr:`~Estimator.meaning` (what the estimate is), :attr:`~Estimator.interval`
  (how its interval is made) and :attr:`~Estimator.shape_words` (what its shape xi, if any, is of);
* **its fallback** -- :attr:`~Estimator.fallback`: the estimator whose rows stand in, labelled,
  where it cannot predict (None: it is obeyed strictly).

A new estimator (the hierarchical model of rank times, issue 45 items 1-4) is one more subclass
with ``@register``; its name joins :data:`evtsync.core.defaults.ESTIMATOR_NAMES` (the CLI's
choices, checked against the registry at import) and docs/methodology.md, "The estimator
registry", says what it must provide.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from evtsync.core.defaults import (
    DEFAULT_ESTIMATOR,
    ESTIMATOR_NAMES,
    PAPER_MODEL,
    RANK_FLEET_WORDING,
    RANKTAIL_MODEL,
)
from evtsync.core.errors import InputError

__all__ = ["Centred", "Estimator", "Paper", "RankModel", "RankTail", "RunFolder", "default", "get", "interval_words", "names", "of_column", "of_fit",
           "of_model", "register"]

_REGISTRY: dict[str, Estimator] = {}


class RunFolder(Protocol):
    """What an estimator reads of a run folder (:meth:`Estimator.load_run`), given by the caller:
    :func:`evtsync.runfolder.layout.run_folder` makes one from a folder whose manifest it has
    checked. A protocol, so that predictions do not import the run-folder layer above them."""

    @property
    def run_dir(self) -> Path:
        """The run folder."""
        ...

    def table_path(self, name: str) -> Path:
        """The path of the run table ``name`` (it may not exist)."""
        ...

    def main_fit_path(self) -> Path | None:
        """The netCDF fit of the run's main Bayesian model (None when it has none)."""
        ...

    def output_path(self, rel: str) -> Path | None:
        """The run's output ``rel`` (e.g. ``fits/rankmodel.nc``) when its manifest lists it as written
        by the run (and checked against its recorded SHA-256), else None."""
        ...


class Estimator:
    """One estimator of tau(n): what it needs, how it loads, its draws, its wording, its fallback."""

    #: Its name (the ``estimator`` column of every prediction table, ``--estimator``).
    name: ClassVar[str] = ""
    #: The z-score table column its fit is made of (``y``, ``z``, ``u``).
    column: ClassVar[str] = ""
    #: What the estimate is, in words (captions, the tables' ``attrs["estimator"]``).
    meaning: ClassVar[str] = ""
    #: How its interval is made, in words (captions and printed headers).
    interval: ClassVar[str] = ""
    #: What it needs, in words (errors).
    needs: ClassVar[str] = ""
    #: What to do when a fit of another column is given for it (errors).
    refit: ClassVar[str] = ""
    #: The estimator whose rows stand in, labelled, where this one cannot predict (None: none).
    fallback: ClassVar[str | None] = None
    #: Fitted to the z-score table's per-rank values (True), or given as a GEV fit (False).
    per_rank: ClassVar[bool] = False
    #: Whether it has one fit per GEV model of a run (its rows in tau.parquet: one set per model).
    per_model: ClassVar[bool] = False
    #: What its shape xi is of, for the tail verdict ("" when it has none of its own).
    shape_words: ClassVar[str] = ""
    #: The ``model`` of its rows in a table written before the ``estimator`` column (None: any other).
    legacy_model: ClassVar[str | None] = None
    #: Who the n ranks of its tau(n) are, in words, stated wherever it is quoted ("" when it assumes none).
    fleet: ClassVar[str] = ""

    def load_table(self, table: pd.DataFrame, *, source: str = "z-score table", seed: int = 0,
                   refused: dict[str, str] | None = None) -> Any:
        """Its fit from a z-score table; ``InputError`` when the table cannot give it. A per-rank
        estimator given a dict ``refused`` leaves out a cell it cannot fit (too few rank values) and
        records why there under the cell's label; None: such a cell raises."""
        raise InputError(f"the {self.name} estimator needs {self.needs}; a z-score table alone gives only "
                         f"{', '.join(e.name for e in _REGISTRY.values() if e.per_rank)}")

    def load_run(self, run: RunFolder, *, seed: int = 0) -> Any:
        """Its fit from a run folder; ``InputError`` naming what the folder lacks."""
        raise NotImplementedError

    def tau_draws(self, fit: Any, n: Sequence[int], b_us: NDArray[np.float64], index: Sequence[int],
                  m: int) -> NDArray[np.float64]:
        """tau(n) draws in µs, shape (draw, row, len(n)), for rows of cell ``index`` with block sd ``b_us``:
        a per-rank estimator's own draws of E[max_n] in sd units (its fit's ``expected_max``) times b,
        a GEV fit's b·E_(n/m) of its parameter draws."""
        from evtsync.predict.gevtau import predicted_tax_curve_us

        if self.per_rank:
            draws = np.asarray(fit.expected_max(list(n), [int(i) for i in index]), dtype=float)
            return draws * np.asarray(b_us, dtype=float)[None, :, None]

        mu, sigma, xi = fit.cell_draws()
        idx = np.asarray(index, dtype=int)
        return predicted_tax_curve_us(np.asarray(b_us, dtype=float)[None, :], mu[:, idx], sigma[:, idx], xi[:, idx],
                                      list(n), m)

    def interval_of(self, model: str = "") -> str:
        """How its intervals are made for rows whose fit is ``model`` (a table's ``model`` column):
        :attr:`interval`, unless the fit behind them makes them another way."""
        del model
        return self.interval

    def describe(self) -> dict[str, Any]:
        """Its record (docs and the run's manifest): every attribute above by name."""
        return {"name": self.name, "column": self.column, "meaning": self.meaning, "interval": self.interval,
                "needs": self.needs, "fallback": self.fallback, "per_rank": self.per_rank}


def register(cls: type[Estimator]) -> type[Estimator]:
    """Class decorator: put one instance of ``cls`` in the registry under ``cls.name``."""
    if not cls.name or cls.name in _REGISTRY:
        raise RuntimeError(f"estimator class {cls.__name__}: name {cls.name!r} is empty or taken")
    _REGISTRY[cls.name] = cls()
    return cls


@register
class Centred(Estimator):
    """b·E_(n/m) of a GEV fit of the centred block maxima y (the run's main Bayesian model)."""

    name = "centred"
    column = "y"
    meaning = ("b·E_(n/m) of the GEV of the centred maximum y = (M - block mean)/s, the mean straggler delay of n "
               "ranks as the GEV extrapolates it (biased at large n for normal and Student-t ranks: the study in "
               "docs/bayesian.md; the fallback of the default)")
    interval = "posterior of the GEV model: credible interval"
    needs = ("a GEV fit of y (a run folder's main model: the Bayesian GEV comparators, opt-in with `evtsync run "
             "--comparators bayes-gev`; or a fit folder of `evtsync fit`)")
    refit = ("refit with a model whose data.column is 'y' (the shipped models; a z-score table written by "
             "`evtsync blocks` before the centred maximum existed lacks y: rerun blocks), or ask for --estimator "
             "paper (biased low at n > m)")
    per_model = True
    shape_words = "xi of the GEV of the centred block maxima"
    #: Its intervals when the fit is a GEV MLE of y (``mle-gev``: the fallback of a run without the
    #: Bayesian GEV comparators, evtsync.evt.mlefit.MleCellFit), not a posterior.
    mle_interval = ("GEV MLE of y per cell: approximate confidence interval (parameter draws from the MLE's "
                    "asymptotic normal)")

    def interval_of(self, model: str = "") -> str:
        """A posterior's credible interval, or the MLE's approximate interval where the rows' fit is an MLE."""
        return self.mle_interval if str(model).startswith("mle-") else self.interval

    def load_run(self, run: RunFolder, *, seed: int = 0) -> Any:
        """The run's main Bayesian model (:func:`evtsync.runfolder.layout.main_model`); None when it has none."""
        from evtsync.evt.bayesfit import BayesFit

        path = run.main_fit_path()
        return BayesFit.load(path) if path is not None else None


@register
class Paper(Estimator):
    """The paper's b·E_(n/m) of the per-cell GEV MLE of z = (M - sample mean)/s."""

    name = "paper"
    column = "z"
    meaning = ("the paper's b·E_(n/m) of z = (M - sample mean)/s: exact at n = m, biased low at n > m (8-18% low at "
               "n = 8-512 for normal, Gumbel and lognormal ranks, 8-21% for Student-t5: the study in "
               "docs/bayesian.md)")
    interval = "GEV MLE per cell: approximate confidence interval"
    needs = "a GEV fit of z (a run folder's tables/mle.parquet, or `evtsync fit --column z`)"
    refit = "refit with data.column = 'z' (`evtsync fit --column z`) for the paper's estimator"
    shape_words = "xi of the GEV MLE of z"
    legacy_model = PAPER_MODEL

    def load_run(self, run: RunFolder, *, seed: int = 0) -> Any:
        """The run's GEV MLE of z per cell (``tables/mle.parquet``)."""
        from evtsync.core.tableio import read_table
        from evtsync.evt.mlefit import MleCellFit

        path = run.table_path("mle")
        if not path.is_file():
            raise InputError(f"{run.run_dir}: the paper's estimator needs the run's GEV MLE of z (tables/mle.parquet)")
        return MleCellFit(read_table(str(path)), family="gev")


@register
class RankTail(Estimator):
    """b·E[max_n u] of every rank's standardised value u: empirical body, generalized Pareto tail."""

    name = "ranktail"
    column = "u"
    meaning = ("b·E[max_n u] of every rank's standardised value u = (X - block mean)/s: empirical body and "
               "generalized Pareto tail per cell, no rank or shared effects (a comparator of the default rank "
               "model; evtsync.evt.ranktail; docs/methodology.md)")
    interval = "GPD grid posterior and Bayesian bootstrap"
    needs = ("the z-score table's per-rank values (column u): the z-score table (.parquet/.csv written by "
             "`evtsync blocks`) or a run folder")
    refit = ("the ranktail estimator is fitted to the z-score table's per-rank values "
             "(evtsync.evt.ranktail.RankTailFit.from_table; on the command line `evtsync predict ZSCORES.parquet "
             "--estimator ranktail`)")
    fallback = "centred"
    per_rank = True
    shape_words = "the GPD shape of the rank times' tail"
    legacy_model = RANKTAIL_MODEL

    def load_table(self, table: pd.DataFrame, *, source: str = "z-score table", seed: int = 0,
                   refused: dict[str, str] | None = None) -> Any:
        """Every cell of the table fitted (:meth:`evtsync.evt.ranktail.RankTailFit.from_table`)."""
        from evtsync.evt.ranktail import RankTailFit

        return RankTailFit.from_table(table, seed=seed, source=source, refused=refused)

    def load_run(self, run: RunFolder, *, seed: int = 0) -> Any:
        """Fitted to the run's ``tables/zscores.parquet``."""
        from evtsync.core.tableio import read_table

        path = run.table_path("zscores")
        if not path.is_file():
            raise InputError(f"{run.run_dir}: no z-score table (tables/zscores.parquet), which the {self.name} estimator "
                             "needs")
        return self.load_table(read_table(str(path)), source=str(path), seed=seed)


@register
class RankModel(Estimator):
    """b·E[max_n V − mean_n V] of the hierarchical rank model (evtsync.evt.rankmodel), the default."""

    name = "rankmodel"
    fleet = RANK_FLEET_WORDING["new"]
    column = "u"
    meaning = ("b·E[max_n V − mean_n V] for a job of n ranks from the same fleet, hierarchical rank model: "
               "per-collective shifts eliminated (they cancel in max − mean), persistent rank effects from "
               "their fitted population, idiosyncratic values with an empirical body and a generalized Pareto "
               "tail whose shape is pooled over GPUs and precisions (the default; evtsync.evt.rankmodel; "
               "docs/methodology.md, \"The rank model\")")
    interval = "posterior of the rank model (nutpie, 4 chains): credible interval"
    needs = ("the z-score table's per-rank values (column u): the z-score table (.parquet/.csv written by "
             "`evtsync blocks`) or a run folder")
    refit = ("the rank model is fitted to the z-score table's per-rank values (evtsync.evt.rankmodel; on the "
             "command line `evtsync predict ZSCORES.parquet` or a run folder)")
    fallback = "centred"
    per_rank = True
    shape_words = "xi of the rank model's tail, xi0 + delta_gpu + delta_precision"

    def load_table(self, table: pd.DataFrame, *, source: str = "z-score table", seed: int = 0,
                   refused: dict[str, str] | None = None) -> Any:
        """The rank model fitted to the table's cells (:func:`evtsync.evt.rankmodel.fit_table`, the
        default sampler settings), as the prediction tables take it."""
        from evtsync.evt.rankmodel import RankModelPrediction, fit_table

        return RankModelPrediction(fit_table(table, seed=seed, source=source, refused=refused), seed=seed)

    def load_run(self, run: RunFolder, *, seed: int = 0) -> Any:
        """The run's rank model (``fits/rankmodel.nc``, written by the ``rankmodel`` stage and checked
        against the manifest's SHA-256); a run folder written before that stage: fitted to its
        ``tables/zscores.parquet`` (logged)."""
        import logging

        from evtsync.core.tableio import read_table
        from evtsync.evt.rankmodel import RankModelPrediction, load_rank_model

        path = run.output_path(f"fits/{self.name}.nc")
        if path is not None:
            return RankModelPrediction(load_rank_model(path), seed=seed)
        zpath = run.table_path("zscores")
        if not zpath.is_file():
            raise InputError(f"{run.run_dir}: neither a rank-model fit (fits/{self.name}.nc) nor a z-score table "
                             "(tables/zscores.parquet), which the rank model needs")
        logging.getLogger(__name__).info("%s: no fits/%s.nc (a run before the rankmodel stage): fitting the rank "
                                         "model to %s", run.run_dir, self.name, zpath)
        return self.load_table(read_table(str(zpath)), source=str(zpath), seed=seed, refused={})


if tuple(sorted(_REGISTRY)) != tuple(sorted(ESTIMATOR_NAMES)):  # the CLI's choices come from evtsync.core.defaults
    raise RuntimeError(f"evtsync.core.defaults.ESTIMATOR_NAMES {ESTIMATOR_NAMES} != registry {tuple(_REGISTRY)}")


def names() -> tuple[str, ...]:
    """The registered estimators' names, in the order of :data:`~evtsync.core.defaults.ESTIMATOR_NAMES`."""
    return tuple(n for n in ESTIMATOR_NAMES if n in _REGISTRY)


def get(name: str | None) -> Estimator:
    """The estimator called ``name`` (None: the default); ``InputError`` naming the choices otherwise."""
    key = DEFAULT_ESTIMATOR if name is None else str(name)
    try:
        return _REGISTRY[key]
    except KeyError:
        raise InputError(f"estimator {key!r}: expected one of {', '.join(names())}") from None


def default() -> Estimator:
    """The default estimator (:data:`~evtsync.core.defaults.DEFAULT_ESTIMATOR`)."""
    return get(None)


def of_column(column: str | None) -> Estimator | None:
    """The estimator whose fit is of ``column`` (None when none is)."""
    return next((e for e in _REGISTRY.values() if e.column == column), None)


def of_fit(fit: Any, column: str | None) -> Estimator | None:
    """The estimator a fit of ``column`` gives: of the estimators of that column, the one whose
    name is the fit's ``name`` (the rank model's and ranktail's fits share the column u), else
    the first (:func:`of_column`); None when no estimator is of that column."""
    same = [e for e in _REGISTRY.values() if e.column == column]
    named = [e for e in same if e.name == str(getattr(fit, "name", ""))]
    return next(iter(named or same), None)


def of_model(model: str) -> Estimator:
    """The estimator of a row by its ``model``, for a table written before the ``estimator`` column:
    the one whose :attr:`~Estimator.legacy_model` it is, else the run's GEV models' (centred)."""
    found = next((e for e in _REGISTRY.values() if e.legacy_model == model), None)
    return found or next(e for e in _REGISTRY.values() if e.per_model)


def interval_words(estimators: Any, fallback_rows: Any = (), models: Any = None) -> str:
    """How the intervals of rows by ``estimators`` (a name, names, or a table's ``estimator`` column)
    are made, each estimator with its own wording ("ranktail: GPD grid posterior ...; centred
    (fallback rows): posterior of the GEV model: credible interval"); ``fallback_rows`` names the
    estimators whose rows here are another's fallback; ``models`` (the rows' ``model`` column, aligned
    with ``estimators``) words each estimator by the fit its rows come from
    (:meth:`Estimator.interval_of`: a GEV MLE's interval is not a posterior's)."""
    shown = [estimators] if isinstance(estimators, str) else [str(e) for e in estimators]
    fits = [""] * len(shown) if models is None else [str(m) for m in models]
    pairs = list(dict.fromkeys((e, m) for e, m in zip(shown, fits, strict=True) if e in _REGISTRY))
    words = list(dict.fromkeys((e, _REGISTRY[e].interval_of(m)) for e, m in pairs))
    fallback = {str(e) for e in fallback_rows}
    if len(words) == 1 and not fallback:
        return words[0][1]
    return "; ".join(f"{e}{' (fallback rows)' if e in fallback else ''}: {w}" for e, w in words)
