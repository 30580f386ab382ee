"""The shape parameter xi per GPU × precision cell, with the hierarchical model's population effect."""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from evtsync.plots import fits as fit_figs
from evtsync.report.context import NOT_LABELS, PCT, ReportContext, label_columns
from evtsync.report.markdown import (
    Section,
    Skipped,
    Table,
    fmt,
    fmt_ci,
)


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    xi = ctx.table("xi")
    pop = ctx.table("xi_population")
    if xi is None or xi.empty:
        return [Section("Shape parameter xi per device and precision", [ctx.why_not("prediction")], anchor="xi")]
    population = None
    items: list[Any] = []
    if pop is not None and len(pop):
        p0 = pop[pop["parameter"] == "xi0"]
        if len(p0):
            r = p0.iloc[0]
            population = {"mean": float(r["mean"]), "lo": float(r["lo"]), "hi": float(r["hi"])}
        columns = {
            "model": pop["model"], "parameter": pop["parameter"],
            f"posterior mean [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in zip(pop["mean"], pop["lo"], pop["hi"], strict=True)]}
        if "prior_lo" in pop:  # the spreads' priors (evtsync.predict.tables.population_table)
            columns[f"prior [{PCT}]"] = ["" if not isinstance(d, str) else f"{d} [{fmt(a)}, {fmt(b)}]"
                                        for d, a, b in zip(pop["prior"], pop["prior_lo"], pop["prior_hi"], strict=True)]
            columns["prior-dominated"] = pop["prior_dominated"].map(lambda v: "yes" if pd.notna(v) and bool(v) else "")
        columns["converged"] = pop["converged"]
        items.append(Table(pd.DataFrame(columns),
            "Population effect of the hierarchical model: xi0 is the shape shared by all cells; xi_delta_<factor> the "
            "zero-sum deviations of each GPU model and precision; xi_sd_<factor> their spread (partial pooling), "
            "mu_sd and log_sigma_sd the spreads of mu and log sigma between cells. For each spread, its prior beside "
            "its posterior: \"prior-dominated\" when the posterior interval is at least half as wide as the prior's, "
            "so that the prior, not the data, sets the width of a prediction for a GPU or precision the fit has not "
            "seen (such predictions are labelled prior-dominated in the tables)."))
    free = (xi["xi_hi"] != 0) | (xi["xi_lo"] != 0)  # a Gumbel model's rows fix xi at 0: lo = hi = 0
    shown = xi[xi["model"].isin(set(xi.loc[free, "model"]))]
    if shown.empty:
        items.insert(0, Skipped("Skipped — no fitted model has a free shape xi (the Gumbel models fix it at 0), so "
                                "there is no forest plot of xi."))
        return [Section("Shape parameter xi per device and precision", items, anchor="xi")]
    items.insert(0, ctx.figure(functools.partial(fit_figs.xi_forest, shown, population), "xi-forest", f"Posterior mean and central {PCT} credible interval of the GEV shape xi in every GPU × "
                                     "precision cell, for every fitted model with a free shape (pooled models give one "
                                     f"value for all cells; x markers: fit not converged). Grey band: {PCT} interval of the "
                                     "population shape xi0 of the hierarchical model (methodology §6)."))
    keys = ["model", "gpu", "precision"]
    labels = label_columns(shown, keys) + [c for c in shown.columns if pd.api.types.is_bool_dtype(shown[c])
                                           and c not in NOT_LABELS]  # e.g. a prior-dominance flag
    items.append(Table(pd.DataFrame({
        "model": shown["model"], "GPU": shown["gpu"], "precision": shown["precision"],
        f"xi [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in zip(shown["xi_mean"], shown["xi_lo"], shown["xi_hi"], strict=True)],
        **{c: shown[c] for c in labels},
        "not converged": ~shown["converged"].astype(bool)}), "Posterior of xi per cell, with the labels the prediction "
        "stage gives each row (rows in red: fit not converged).", flag="not converged"))
    z = ctx.table("zscores")
    if z is not None and len(z) and {"gpu", "precision", "z"} <= set(z.columns):
        from evtsync.plots.zscores import zscores_by_cell

        items.append(ctx.figure(functools.partial(zscores_by_cell, z), "zscores-by-cell", "Pooled z-scores of the block maxima per GPU × "
                                "precision (the paper's Fig. 10): the data every shape above is fitted to."))
    return [Section("Shape parameter xi per device and precision", items, anchor="xi")]

