"""Predicted tax tau(n) and the optimal bandwidth B* against n (from ``tables/tau``, ``tables/bstar``)."""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from evtsync.core.defaults import DEFAULT_ESTIMATOR, PAPER_MODEL, RANKTAIL_MODEL
from evtsync.plots import predictions as pred_figs
from evtsync.predict import registry
from evtsync.predict.tables import ESTIMATORS, beyond_data_note, beyond_data_rows, point_column
from evtsync.report.context import PCT, ReportContext, label_columns
from evtsync.report.estimator import UNNAMED_ESTIMATOR, estimator_points, row_estimators
from evtsync.report.markdown import (
    Alert,
    Section,
    Skipped,
    Table,
    fmt,
    fmt_ci,
)
from evtsync.runfolder.summary import fleet_assumption

#: Domain sizes shown in the tables of tau(n) and B* (the figures show every power of two).
TABLE_NS = (8, 64, 128, 512, 4096)


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    tau = ctx.table("tau")
    bstar = ctx.table("bstar")
    if tau is None or tau.empty:
        return [Section("Predicted tax tau(n) and optimal bandwidth B*", [ctx.why_not("prediction")], anchor="tau")]
    summary = ctx.stage("prediction").get("summary", {})
    main = summary.get("main_model")
    if "estimator" not in tau:  # a run folder from before the estimators were named
        tau = tau.assign(estimator=row_estimators(tau))
    view = ctx.estimator
    headline, rest = view.tau_rows(tau)
    head_models = list(dict.fromkeys(headline["model"].astype(str)))
    # the estimator shown: the asked one, or the run's as its rows say (its fallback rows labelled)
    own = (headline["estimator_note"].fillna("").astype(str) == "" if "estimator_note" in headline
           else pd.Series(True, index=headline.index))
    name = view.name if view.explicit else next(iter(headline.loc[own, "estimator"].astype(str)), view.name)
    label = view.label(headline) if view.explicit else _estimators_of(headline)
    alternatives = [RANKTAIL_MODEL] if view.explicit and view.name != DEFAULT_ESTIMATOR else []
    models = [*head_models] + [m for m in [*alternatives, main, *("gumbel-hier", "gumbel")]
                               if m in set(tau["model"]) and m not in head_models][:1]
    shown_tau = pd.concat([headline, rest[rest["model"].isin(models[len(head_models):])]], ignore_index=True)
    right = (f"; right: {models[-1]}, " + ("the default estimator ranktail, shown as an alternative"
                                          if models[-1] == RANKTAIL_MODEL else
                                          "the GEV model's centred estimator b·E_k (E_k the expected maximum of k = "
                                          "n/m GEV draws of the centred block maxima y), shown as an alternative")
             if len(models) > len(head_models) else "")
    items: list[Any] = [ctx.figure(functools.partial(pred_figs.tau_curves, shown_tau, models), "tau-n",
                                   f"Predicted mean straggler delay tau(n) for domains of n = m … 4096 ranks "
                                   f"(methodology §7). Left: {', '.join(head_models)} — estimator "
                                   f"{label}: {ESTIMATORS.get(name, ('', name))[1]}"
                                   + (f", with the main model {main}'s centred rows where it could not predict "
                                      f"(labelled)" if not view.explicit and main in head_models else "")
                                   + right + f". b = mean r × mean a over the cell's block identities, held at its "
                                   f"estimate. Lines: the point estimate (per estimator, as named); bands: {PCT} intervals.")]
    if not view.explicit:
        items += _estimator_notes(headline, summary)
    shown_rows = headline[headline["n"].isin(TABLE_NS)]
    if beyond_data_rows(shown_rows).any():
        note = _beyond_note(shown_rows[beyond_data_rows(shown_rows)])
        items.append(Alert(f"{BEYOND_MARK} {note[0].upper()}{note[1:]}.", level="warning"))
    fleets = list(dict.fromkeys(w for w in map(fleet_assumption, headline.to_dict("records")) if w))
    items.append(_tau_table(headline, f"Headline: tau(n) in µs by the estimator {label}, point [{PCT} "
                                      "interval] (" + _interval_words(headline, name) + ")"
                                      + (f", for {' / '.join(fleets)}" if fleets else "")
                                      + ("; a row whose cell it cannot predict comes from the main GEV model's "
                                         "centred estimator and says so in \"fallback\"." if not view.explicit else
                                         "; only this estimator's rows (no fallback): a cell it does not predict "
                                         "has no row.")))
    others = rest[rest["model"].isin([*models, main, PAPER_MODEL, RANKTAIL_MODEL])]
    if len(others):
        points = "; ".join(f"{e}, {estimator_points(others, e)}" for e in dict.fromkeys(row_estimators(others)))
        items.append(_tau_table(others, f"Alternatives, labelled: tau(n) in µs, point ({points}) "
                                        f"[{PCT} interval]. "
                                        + " ".join(f"Estimator \"{e.name}\""
                                                   + (" (the default)" if e.name == DEFAULT_ESTIMATOR else "")
                                                   + f" ({e.interval}): {e.meaning}." for e in map(registry.get,
                                                                                                   registry.names()))))
    sections = [Section("Predicted tax tau(n)", items, anchor="tau")]
    if bstar is not None and len(bstar):
        bstar, left_out = view.rows(bstar, "B*")
        if bstar.empty:
            sections.append(Section("Optimal bandwidth B* against n", [Skipped(f"Skipped — {left_out}.")],
                                    anchor="bstar"))
            return sections
        bstar, held_fixed = _held_fixed(bstar)
        b_items: list[Any] = [ctx.figure(functools.partial(pred_figs.bstar_curves, bstar), "bstar-n", f"Optimal bandwidth B* at elasticity eps = {fmt(summary.get('eps'))} of "
                                               f"the augmented Hockney model T(B) = p·alpha + q·S/B + tau (methodology §8) "
                                               f"against n, per topology, with tau(n) by the estimator "
                                               f"{_estimators_of(bstar)} (point, {PCT} "
                                               f"band per GPU × precision) beside Hockney's B*_H (tau = 0, dashed). "
                                               f"alpha = {fmt(summary.get('alpha_us'))} µs, S = "
                                               f"{fmt(summary.get('bytes'))} bytes ({summary.get('bytes_source', '')})."
                                               + held_fixed)]
        if left_out:
            b_items.append(Alert(f"{left_out}.", level="warning"))
        b_items += _bstar_tables(bstar[bstar["n"].isin(TABLE_NS)])
        sections.append(Section("Optimal bandwidth B* against n", b_items, anchor="bstar"))
    return sections



def _interval_words(table: pd.DataFrame, name: str) -> str:
    """How the intervals of a table's rows are made, each estimator in its own words, a fallback
    row's by its own estimator (:func:`evtsync.predict.registry.interval_words`)."""
    if "estimator" not in table or not len(table):
        return registry.interval_words(name)
    notes = (table["estimator_note"].fillna("").astype(str) != "" if "estimator_note" in table
             else pd.Series(False, index=table.index))
    return registry.interval_words(table["estimator"].astype(str), table.loc[notes, "estimator"].astype(str),
                                   table["model"].astype(str) if "model" in table else None)


def _estimators_of(table: pd.DataFrame) -> str:
    """"ranktail (default; point: posterior median)" and any other estimator of a table's rows, in
    words ("(fallback, labelled)" where its rows say why the default did not give them), each with
    what its point estimate is (:func:`~evtsync.report.estimator.estimator_points`)."""
    if "estimator" not in table or not len(table):
        return UNNAMED_ESTIMATOR
    notes = (table["estimator_note"].fillna("").astype(str) != "" if "estimator_note" in table
             else pd.Series(table["estimator"].astype(str) != DEFAULT_ESTIMATOR, index=table.index))
    names = list(dict.fromkeys(table["estimator"].astype(str)))

    def words(e: str) -> str:
        tags = ["default"] if e == DEFAULT_ESTIMATOR else (
            ["fallback, labelled"] if notes[table["estimator"].astype(str) == e].any() else [])
        tags += [p for p in [estimator_points(table, e)] if p]
        return f"{e} ({'; '.join(tags)})" if tags else e

    return ", ".join(words(e) for e in names)


def _estimator_notes(headline: pd.DataFrame, summary: dict[str, Any]) -> list[Any]:
    """Why rows of the headline fell back to the centred estimator (the prediction stage's note)."""
    note = summary.get("estimator_note") or ""
    if not note and "estimator_note" in headline:
        note = "; ".join(sorted({str(v) for v in headline["estimator_note"] if v}))
    return [Alert(f"Not every headline row is by the default estimator: {note}", level="warning")] if note else []


def _beyond_note(beyond: pd.DataFrame) -> str:
    """The beyond-the-data note of the rows shown beyond their cell's N rank values, with an
    accuracy only where the study measured one (the stage's column ``beyond_data_accuracy``; a table
    written before it: none quoted, :func:`~evtsync.predict.tables.beyond_data_note`)."""
    if "beyond_data_accuracy" not in beyond:
        return beyond_data_note(None)
    texts = [t for t in dict.fromkeys(beyond["beyond_data_accuracy"].fillna("").astype(str)) if t]
    return "; ".join([beyond_data_note(None), *texts])


#: The mark of a value whose n is beyond its cell's N rank values (:func:`~evtsync.predict.tables.beyond_data_note`).
BEYOND_MARK = "†"


def _rank_values_label(t: pd.DataFrame) -> pd.DataFrame:
    """The cell's N rank values as a text label column "N rank values" (ranktail rows; "" otherwise)."""
    if "n_values" not in t:
        return t
    n_values = pd.to_numeric(t["n_values"], errors="coerce")
    return t.assign(**{"N rank values": [f"{int(v)}" if pd.notna(v) else "" for v in n_values]})


def _tau_table(t: pd.DataFrame, caption: str) -> Table:
    """tau(n) at :data:`TABLE_NS`: one row per model × estimator × GPU × precision, one column per n
    (a value beyond its cell's rank values marked :data:`BEYOND_MARK`)."""
    t = _rank_values_label(t[t["n"].isin(TABLE_NS)])
    if "estimator_note" in t:
        t = t.assign(fallback=t["estimator_note"].fillna("").astype(str).map(lambda v: "yes" if v else ""))
    keys = ["model", "estimator", "gpu", "precision"]
    labels = label_columns(t, keys)
    t = t.assign(**{c: t[c].fillna("") for c in labels})  # the paper's rows lack the Bayesian fits' labels
    marks = [f" {BEYOND_MARK}" if v else "" for v in beyond_data_rows(t)]
    if any(marks):
        caption += (f" {BEYOND_MARK}: n beyond the cell's N rank values (column \"N rank values\"): the GPD tail's "
                    "extrapolation (see the note above).")
    wide = t.assign(value=[fmt_ci(a, b, c) + mark for a, b, c, mark in
                           zip(point_column(t, "tau", "_us"), t["tau_lo_us"], t["tau_hi_us"], marks, strict=True)])
    wide = wide.pivot_table(index=keys + labels, columns="n", values="value", aggfunc="first", sort=False)
    wide.columns = [f"n={c} µs [{PCT} interval]" for c in wide.columns]
    return Table(wide.reset_index(), caption)


#: Columns of the B* table that say what its intervals hold fixed (evtsync.predict.tables.FIXED_B_NOTE, …).
HELD_FIXED_COLUMNS = ("b_uncertainty", "alpha_uncertainty")


def _held_fixed(bstar: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """What the B* intervals hold fixed, as one sentence for the caption when every row says the
    same (those columns then leave the table); otherwise the columns stay, one value per row."""
    cols = [c for c in HELD_FIXED_COLUMNS if c in bstar]
    if not cols or any(bstar[c].nunique(dropna=False) != 1 for c in cols):
        return bstar, ""
    notes = ", ".join(str(bstar[c].iloc[0]) for c in cols)
    return bstar.drop(columns=cols), f" The bands carry the fit's uncertainty only: {notes}."


def bstar_pivot(bstar: pd.DataFrame, value: str) -> pd.DataFrame:
    """The B* table pivoted: one row per topology × GPU × precision, one column per n.

    ``value`` is ``"bstar"`` (GB/s) or ``"reduction"`` (1 − B*/B*_H, in %): each cell is the
    point estimate (:func:`~evtsync.predict.tables.point_column`; column ``point_estimate`` says
    which) with its interval, marked :data:`BEYOND_MARK` where n is beyond the cell's rank values;
    a row of a non-converged fit has ``not converged`` True.
    """
    unit, scale = ("_gbps", 1.0) if value == "bstar" else ("", 100.0)
    text = [fmt_ci(scale * a, scale * b, scale * c) for a, b, c in
            zip(point_column(bstar, value, unit), bstar[f"{value}_lo{unit}"], bstar[f"{value}_hi{unit}"], strict=True)]
    text = [v + (f" {BEYOND_MARK}" if mark else "") for v, mark in zip(text, beyond_data_rows(bstar), strict=True)]
    if "estimator_note" in bstar:  # a fallback row (issue 29) says so in a short label
        bstar = bstar.assign(fallback=bstar["estimator_note"].fillna("").astype(str).map(lambda v: "yes" if v else ""))
    keys = ["topology", "gpu", "precision"]
    index = keys + label_columns(bstar, keys)  # labels the prediction stage wrote (e.g. the estimator)
    wide = bstar.assign(_text=text).pivot_table(index=index, columns="n", values="_text", aggfunc="first", sort=False)
    wide.columns = [f"n = {c}" for c in wide.columns]
    # a row is flagged when any of its cells comes from a fit that did not converge
    flagged = set(map(tuple, bstar.loc[~bstar["converged"].astype(bool), index].to_numpy().tolist()))
    wide["not converged"] = [(key if isinstance(key, tuple) else (key,)) in flagged for key in wide.index]
    return wide.reset_index().rename(columns={"gpu": "GPU"})


def _bstar_tables(bt: pd.DataFrame) -> list[Table]:
    hockney = bt.drop_duplicates(["topology", "n"]).pivot_table(index="topology", columns="n",
                                                                values="bstar_hockney_gbps", sort=False)
    hockney.columns = [f"n = {c}" for c in hockney.columns]
    beyond = (f" {BEYOND_MARK}: n beyond the cell's N rank values, tau(n) the GPD tail's extrapolation (the tau "
              "table's note)." if beyond_data_rows(bt).any() else "")
    return [
        Table(bstar_pivot(bt, "reduction"), f"Reduction 1 − B*/B*_H in % [{PCT} CrI] per topology, GPU × precision "
              "and domain size n (paper, Llama-3 70B on DGX H200 with the Gumbel bound: 98.69% on the fully "
              "connected topology at n = 128, 37.26% on the ring at n = 128, 81.67% on the 3D torus at n = 512). "
              "Rows in red: fit not converged." + beyond, flag="not converged"),
        Table(bstar_pivot(bt, "bstar"), f"Optimal bandwidth B* in GB/s [{PCT} CrI] at the same n. Rows in red: fit "
              "not converged." + beyond, flag="not converged"),
        Table(hockney.reset_index(), "Hockney's B*_H in GB/s (tau = 0; the same for every GPU × precision).")]

