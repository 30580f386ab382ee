"""The shape parameter xi per GPU × precision cell: the hierarchical rank model's (the headline: per cell with
P(xi > 0) and the verdict, pooled per GPU and per precision), then the GEV fits of block maxima as labelled
comparators, with the hierarchical GEV's population effect."""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from evtsync.plots import fits as fit_figs
from evtsync.report.context import NOT_LABELS, PCT, ReportContext, label_columns
from evtsync.report.markdown import (
    Caption,
    Section,
    Skipped,
    Table,
    fmt,
    fmt_ci,
)

#: The heading of the GEV fits' shapes: comparators, not the headline (issue 45).
COMPARATORS = "Comparators (GEV of block maxima) — not the headline"


def comparators_ran(ctx: ReportContext, how_to: bool = True) -> str:
    """Which comparators the run computed and how to get the opt-in ones, in one sentence (the
    prediction stage's ``comparators``: each "ran" or why not; issue 48), "" for a run written before.
    ``how_to`` False: the text beside it already gave the reason and the command (a stage's
    :meth:`~evtsync.report.context.ReportContext.why_not`), so neither is said again."""
    from evtsync.core.defaults import BAYES_GEV, COMPARATOR_CHOICES

    done = ctx.stage("prediction").get("summary", {}).get("comparators") or {}
    if not done:
        return ""
    words = {"mle": "the GEV MLE per GPU × precision (each GPU's section)", "paper": "the paper's estimator (tau(n) "
             "section)", "ranktail": "ranktail (tau(n) section)", BAYES_GEV: "the Bayesian GEV fits of block maxima"}
    ran = [words.get(k, k) for k, v in done.items() if v == "ran"]
    not_ran = [f"{words.get(k, k)}: {v}" if how_to else words.get(k, k) for k, v in done.items() if v != "ran"]
    text = f"Comparators computed in this run: {', '.join(ran) or 'none'}."
    if not_ran:
        text += " Not computed: " + "; ".join(not_ran) + "."
    if how_to and done.get(BAYES_GEV) != "ran":
        text += (f" `evtsync run --comparators {BAYES_GEV}` (the same --out: finished stages are reused) adds "
                 f"{COMPARATOR_CHOICES[BAYES_GEV]}.")
    return text


def rank_model_missing(ctx: ReportContext, what: str, name: str) -> Skipped:
    """Why the rank model's ``tables/<name>.parquet`` is not in the run folder: its stage's reason (from
    the manifest), or that the run was made before the stage existed."""
    from evtsync.evt.rankreport import RANK_STAGE

    return Skipped(f"No {what} of the hierarchical rank model: " + (
        ctx.why_not(RANK_STAGE) if RANK_STAGE in ctx.manifest.get("stages", {}) else
        f"this run folder has no tables/{name}.parquet (a run made before the rank model's stage); rerun "
        "`evtsync run` to fit it."))


def rank_items(ctx: ReportContext) -> list[Any]:
    """The rank model's shape xi of the rank times' GPD tail: per cell (posterior median, mean, interval,
    P(xi > 0), the tail verdict read from the interval) and pooled per GPU and per precision
    (``tables/rank_xi.parquet``); where the table is missing, why."""
    from evtsync.evt.families import tail_verdict

    table = ctx.table("rank_xi")
    if table is None or table.empty:
        return [rank_model_missing(ctx, "shape", "rank_xi")]
    kind = table["kind"].astype(str) if "kind" in table else pd.Series("cell", index=table.index)

    def shown(part: pd.DataFrame, first: dict[str, Any]) -> pd.DataFrame:
        return pd.DataFrame({
            **first,
            f"xi: posterior median [{PCT} CrI]": [fmt_ci(a, b, c, 2) for a, b, c in
                                                  zip(part["xi_median"], part["xi_lo"], part["xi_hi"], strict=True)],
            "posterior mean": [fmt(v, 2) for v in part["xi_mean"]],
            "P(xi > 0)": [fmt(v, 2) for v in part["p_xi_positive"]],
            "tail verdict (from the interval)": [tail_verdict(lo, hi) for lo, hi in
                                                 zip(part["xi_lo"], part["xi_hi"], strict=True)]})

    cells = table[kind == "cell"]
    items: list[Any] = [Table(shown(cells, {"GPU": cells["gpu"], "precision": cells["precision"]}),
        f"The headline shape: xi of the rank times' generalized Pareto tail in the hierarchical rank model "
        f"(xi = xi0 + delta_gpu + delta_precision, partially pooled; docs/methodology.md, \"The rank model\"), "
        f"posterior median with its central {PCT} credible interval, posterior mean and P(xi > 0). The verdict "
        "is the domain of attraction read from the interval: heavy (Fréchet) when it lies above 0, bounded "
        "(Weibull) below 0, light tail (Gumbel domain) when it holds 0 — a cell whose interval holds 0 is never "
        "called heavy or bounded.")]
    pooled = table[kind.isin(["gpu", "precision"])]
    if len(pooled):
        level = [str(g) if k == "gpu" else str(p) for k, g, p in
                 zip(pooled["kind"], pooled["gpu"], pooled["precision"], strict=True)]
        items.append(Table(shown(pooled, {"pooled over": pooled["kind"].map({"gpu": "GPU", "precision": "precision"}),
                                          "level": level}),
            f"Pooled shape per GPU model and per precision (xi0 + that level's deviation, over the other factor's "
            f"levels as the model pools them): posterior median [{PCT} CrI], mean, P(xi > 0) and the verdict its "
            "interval gives; what an unseen combination's shape is predicted from."))
    return items


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    xi = ctx.table("xi")
    pop = ctx.table("xi_population")
    items: list[Any] = rank_items(ctx)
    if xi is None or xi.empty:
        ran = comparators_ran(ctx) if ctx.stage("prediction").get("status") == "done" else ""
        items.append(Caption(f"{COMPARATORS}: {ran}") if ran else ctx.why_not("prediction"))
        return [Section("Shape parameter xi per device and precision", items, anchor="xi")]
    items.append(Caption(f"{COMPARATORS}: the shape xi of the GEV fitted to block maxima of m ranks (the paper's "
                         "model and the hierarchical GEV), shown beside the rank model for comparison."))
    population = None
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
            f"{COMPARATORS}. Population effect of the hierarchical GEV model: xi0 is the shape shared by all cells; xi_delta_<factor> the "
            "zero-sum deviations of each GPU model and precision; xi_sd_<factor> their spread (partial pooling), "
            "mu_sd and log_sigma_sd the spreads of mu and log sigma between cells. For each spread, its prior beside "
            "its posterior: \"prior-dominated\" when the posterior interval is at least half as wide as the prior's, "
            "so that the prior, not the data, sets the width of a prediction for a GPU or precision the fit has not "
            "seen (such predictions are labelled prior-dominated in the tables)."))
    free = (xi["xi_hi"] != 0) | (xi["xi_lo"] != 0)  # a Gumbel model's rows fix xi at 0: lo = hi = 0
    shown = xi[xi["model"].isin(set(xi.loc[free, "model"]))]
    if shown.empty:
        items.append(Skipped("Skipped — no fitted model has a free shape xi (the Gumbel models fix it at 0), so "
                                "there is no forest plot of xi."))
        return [Section("Shape parameter xi per device and precision", items, anchor="xi")]
    items.append(ctx.figure(functools.partial(fit_figs.xi_forest, shown, population), "xi-forest", f"{COMPARATORS}. Posterior mean and central {PCT} credible interval of the GEV shape xi in every GPU × "
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
        "not converged": ~shown["converged"].astype(bool)}), f"{COMPARATORS}. Posterior of the GEV's xi per cell, with the labels the prediction "
        "stage gives each row (rows in red: fit not converged).", flag="not converged"))
    z = ctx.table("zscores")
    if z is not None and len(z) and {"gpu", "precision", "z"} <= set(z.columns):
        from evtsync.plots.zscores import zscores_by_cell

        items.append(ctx.figure(functools.partial(zscores_by_cell, z), "zscores-by-cell", "Pooled z-scores of the block maxima per GPU × "
                                "precision (the paper's Fig. 10): the data every shape above is fitted to."))
    return [Section("Shape parameter xi per device and precision", items, anchor="xi")]

