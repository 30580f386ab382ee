"""Which estimator of tau(n) a run report shows (``evtsync report --estimator``; issue 29).

A run's ``tables/tau.parquet`` holds tau(n) of every estimator (:data:`evtsync.predict.tables.ESTIMATORS`):
the default's rows (ranktail, with the main GEV model's centred rows as its labelled fallback) marked
``default_estimate``, each GEV model's centred rows and the paper's. The B*, what-if, FLOPs and
predicted-vs-measured tables hold the rows of the run's own estimator only (the prediction stage
computes them once, by :func:`evtsync.predict.estimator.choose_estimator`).

:class:`EstimatorView` picks the rows a report shows. Without ``--estimator`` it shows what the run
used (its manifest), fallback rows included and labelled, as before. With ``--estimator E`` it
shows E's rows strictly, as ``evtsync predict --estimator E`` does: E's tau(n) as the headline
(``centred``: the main model's), and of the other tables the rows E made; rows by another
estimator are left out and counted in a note, never shown under E's name. A run whose tau table
has no row of E is refused (:func:`check_report_estimator`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from evtsync.core.defaults import DEFAULT_ESTIMATOR, ESTIMATOR_NAMES
from evtsync.core.errors import InputError
from evtsync.predict import registry

__all__ = ["EstimatorView", "check_report_estimator", "estimator_points", "estimator_view", "row_estimators",
           "run_estimator"]

#: The estimator of a run folder's prediction tables written before the estimators were named: the
#: GEV models' (the registry's estimator with one row set per model, centred).
UNNAMED_ESTIMATOR = registry.of_model("").name


def run_estimator(manifest: dict[str, Any]) -> str:
    """The estimator the run used (the prediction stage's ``summary.estimator``); ``centred`` for a
    run folder from before the estimators were named (its tau(n) was the main model's)."""
    summary = manifest.get("stages", {}).get("prediction", {}).get("summary", {}) or {}
    chosen = summary.get("estimator")
    if isinstance(chosen, dict) and chosen.get("estimator") in ESTIMATOR_NAMES:
        return str(chosen["estimator"])
    return UNNAMED_ESTIMATOR


def row_estimators(table: pd.DataFrame) -> pd.Series:
    """Each row's estimator: the table's ``estimator`` column, or for a table written before the
    estimators were named ``paper`` for the paper's model and ``centred`` for the others."""
    if "estimator" in table:
        return table["estimator"].fillna("").astype(str)
    models = table["model"].astype(str) if "model" in table else pd.Series("", index=table.index)
    return models.map(lambda m: registry.of_model(m).name)


def estimator_points(table: pd.DataFrame, estimator: str | None = None) -> str:
    """What the point estimate of a table's rows (of ``estimator``'s rows; None: all) is, for a
    caption where the estimator is named: "point: posterior median" (several joined by " / ";
    a table from before the point existed: its mean, :func:`evtsync.predict.tables.point_labels`);
    "" when no row is ``estimator``'s."""
    from evtsync.predict.tables import point_words

    rows = table if estimator is None else table[row_estimators(table) == estimator]
    words = point_words(rows)
    return f"point: {words}" if words else ""


@dataclass(frozen=True)
class EstimatorView:
    """The estimator a report shows and how its rows are chosen from a run's tables.

    Attributes
    ----------
    run : str
        The estimator the run used (:func:`run_estimator`).
    asked : str or None
        The estimator named by ``--estimator``; None: the run's, fallback rows included.
    main : str or None
        The run's main Bayesian model (whose centred rows ``centred`` shows).
    """

    run: str
    asked: str | None = None
    main: str | None = None

    @property
    def explicit(self) -> bool:
        """Whether the report was asked for one estimator strictly."""
        return self.asked is not None

    @property
    def name(self) -> str:
        """The estimator shown: the asked one, else the run's."""
        return self.asked or self.run

    def label(self, table: pd.DataFrame | None = None) -> str:
        """The estimator shown, in words for a caption: "ranktail (default)", "paper (asked with
        --estimator; the run used ranktail)"; with ``table``, last, its point for the estimator's
        rows ("ranktail (default; point: posterior median)", :func:`estimator_points`)."""
        tags = ["default"] if self.name == DEFAULT_ESTIMATOR else []
        if self.explicit and self.asked != self.run:
            tags.append(f"asked with --estimator; the run used {self.run}")
        elif self.explicit:
            tags.append("asked with --estimator: its own rows only, no fallback")
        point = estimator_points(table, self.name) if table is not None else ""
        tags += [point] if point else []
        return f"{self.name} ({'; '.join(tags)})" if tags else self.name

    def tau_rows(self, tau: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The headline rows of a tau table and the others.

        Without ``asked``: the rows marked ``default_estimate`` (a table from before ranktail: the
        main model's). With it: that estimator's rows (``centred``: the main model's, else the first
        GEV model's), a fallback note cleared (they are that estimator's own rows); the others are
        every other row. Raises ``InputError`` when the table has no row of ``asked``.
        """
        if not self.explicit:
            chosen = (tau["default_estimate"].astype(bool) if "default_estimate" in tau
                      else tau["model"].astype(str) == str(self.main))
            return tau[chosen], tau[~chosen]
        chosen = row_estimators(tau) == self.asked
        if registry.get(self.asked).per_model and chosen.any():
            models = list(dict.fromkeys(tau.loc[chosen, "model"].astype(str)))
            model = self.main if self.main in models else models[0]
            chosen &= tau["model"].astype(str) == model
        if not chosen.any():
            raise InputError(self._missing("tau(n)", tau))
        headline = tau[chosen]
        if "estimator_note" in headline:
            headline = headline.assign(estimator_note="")
        return headline, tau[~chosen]

    def rows(self, table: pd.DataFrame, what: str) -> tuple[pd.DataFrame, str]:
        """The rows of a table the prediction stage wrote by the run's estimator (B*, what-if, FLOPs,
        predicted vs measured) that the report shows, and a sentence on the rows left out ("" when
        none): all rows without ``asked``; with it, the rows ``asked`` made (a fallback row by
        ``asked`` is its own row, its note cleared)."""
        if not self.explicit:
            return table, ""
        chosen = row_estimators(table) == self.asked
        shown = table[chosen]
        if "estimator_note" in shown:
            shown = shown.assign(estimator_note="")
        left = int((~chosen).sum())
        if not left:
            return shown, ""
        others = ", ".join(sorted(set(row_estimators(table)[~chosen])))
        if shown.empty:
            return shown, (f"No {what} by the {self.asked} estimator: this run stored {what} by its own estimator "
                           f"only ({len(table)} row(s) by {others}; the run used {self.run}, with its labelled "
                           f"fallback); `evtsync predict` and `evtsync bandwidth` on the run folder with --estimator "
                           f"{self.asked} compute them")
        return shown, (f"{what}: {len(shown)} row(s) by the {self.asked} estimator shown (the run's fallback rows); "
                       f"{left} row(s) by {others} left out (this run stored {what} by its own estimator, "
                       f"{self.run}, only)")

    def _missing(self, what: str, table: pd.DataFrame) -> str:
        present = ", ".join(sorted(set(row_estimators(table)))) or "none"
        return (f"--estimator {self.asked}: this run folder has no {what} row of the {self.asked} estimator "
                f"(tables/tau.parquet holds {present}); report it with the run's own estimator (leave out "
                f"--estimator; it used {self.run}) or one of those")


def estimator_view(run_dir: Any, manifest: dict[str, Any], asked: str | None = None) -> EstimatorView:
    """The :class:`EstimatorView` of a run folder: its estimator and main model (the prediction
    stage's ``main_model``, else :func:`evtsync.runfolder.layout.main_model`), and ``asked``."""
    from pathlib import Path

    from evtsync.runfolder.layout import main_model

    summary = manifest.get("stages", {}).get("prediction", {}).get("summary", {}) or {}
    main = summary.get("main_model") or main_model(Path(run_dir), manifest)
    return EstimatorView(run_estimator(manifest), asked, main)


def check_report_estimator(run_dir: Any, manifest: dict[str, Any], estimator: str | None) -> None:
    """Refuse ``--estimator`` for a run folder whose tau table lacks that estimator's rows (or has
    no tau table), before anything is written; an unknown name is refused naming the choices."""
    if estimator is None:
        return
    from pathlib import Path

    from evtsync.core.tableio import read_table

    if estimator not in ESTIMATOR_NAMES:
        raise InputError(f"--estimator {estimator!r}: expected one of {', '.join(ESTIMATOR_NAMES)}")
    path = Path(run_dir) / "tables" / "tau.parquet"
    view = estimator_view(run_dir, manifest, estimator)
    if not path.is_file():
        status = manifest.get("stages", {}).get("prediction", {}).get("status", "not run")
        raise InputError(f"--estimator {estimator}: this run folder has no tables/tau.parquet (stage prediction "
                         f"{status}), so no tau(n) of any estimator; leave out --estimator to report what it has")
    view.tau_rows(read_table(path))  # raises, naming the estimators the table holds
