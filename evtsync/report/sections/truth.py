"""The demo's estimates beside its planted truth, from the summary stage's ``tables/truth_xi``,
``tables/truth_delay`` and ``tables/truth_attribution`` (:mod:`evtsync.pipeline.truth`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from evtsync.core.defaults import DEFAULT_ESTIMATOR, PAPER_MODEL, RANKTAIL_MODEL
from evtsync.predict.tables import point_column, point_words
from evtsync.report.context import PCT, ReportContext
from evtsync.report.markdown import Section, Skipped, Table, fmt_ci


def build(ctx: ReportContext) -> list[Section]:
    """The demo's estimates beside its planted truth (the summary stage's ``tables/truth_*``)."""
    if not ctx.manifest.get("demo"):
        return []
    title = "Estimates vs ground truth (demo)"
    xi, att = ctx.table("truth_xi"), ctx.table("truth_attribution")
    if xi is None or att is None:
        why = (ctx.why_not("demo") if not ctx.done("demo") else
               "this run folder has no tables/truth_xi.parquet (written by the summary stage of a newer evtsync); "
               "rerun `evtsync run --force` to add it")
        return [Section(title, [Skipped(f"Skipped — {why}")], anchor="truth")]
    delay = ctx.table("truth_delay")
    items: list[Any] = [
        ("The demo's traces simulate ranks: every rank's block time is drawn from a stated parent distribution, "
         "so the true mean straggler delay of n ranks is known for every n, and the stragglers are known "
         if delay is not None and len(delay) else
         "The demo's traces were generated with known GEV parameters per GPU × precision and known stragglers ")
        + "(inputs/demo/<workload>/ground_truth.json, docs/synth.md); here the estimates stand beside them."]
    if delay is not None and len(delay):
        items.append(_delay_table(delay))
    if len(xi):
        items.append(_xi_table(xi))
    items.append(_attribution_table(att))
    return [Section(title, items, anchor="truth")]


def _delay_table(delay: pd.DataFrame) -> Table:
    """Simulated ranks: the true mean straggler delay against tau(n)/b, one row per workload × n,
    two columns (ratio, covers) per model."""
    keys = ["workload", "gpu", "precision", "parent", "n"]
    rows = delay[keys + ["measured_here", "true_delay_sd"]].drop_duplicates(keys).set_index(keys)
    shown = pd.DataFrame({"measured here": rows["measured_here"].map(lambda v: "yes" if v else ""),
                          "true delay / b": rows["true_delay_sd"].round(4)})
    flagged = pd.Series(False, index=shown.index)
    others = delay.loc[~delay["model"].isin([PAPER_MODEL, RANKTAIL_MODEL]), "model"]
    main = str(others.iloc[0]) if len(others) else None
    points: list[str] = []  # what each model's predicted/true is the ratio of (its point estimate)
    for (model, estimator), d in delay.groupby(["model", "estimator"], sort=False):
        d = d.set_index(keys)
        label = f"{model} ({estimator})" if estimator else str(model)
        if "default_estimate" in d and d["default_estimate"].astype(bool).all() and estimator == DEFAULT_ESTIMATOR:
            label = f"{model} ({estimator}, default)"
        points.append(f"{label}: {point_words(d)}")
        shown[f"{label}: predicted/true [{PCT}]"] = pd.Series(
            [fmt_ci(*v) for v in zip(point_column(d, "ratio"), d["ratio_lo"], d["ratio_hi"], strict=True)],
            index=d.index)
        shown[f"{label}: covers"] = d["covers"]
        flagged = flagged | (~d["converged"].astype(bool)).reindex(shown.index, fill_value=False)
    if not flagged.empty and flagged.any():
        shown["not converged"] = flagged
    shown = shown.reset_index().rename(columns={"gpu": "GPU"})
    return Table(shown, f"The true mean straggler delay E[max_n X − mean_n X] in units of the block sd b against "
                        f"tau(n)/b of the default estimator ranktail (every rank's value, generalized Pareto tail: the "
                        f"headline), of the main model {main or '(none)'} (the GEV's centred estimator, {PCT} "
                        f"credible interval) and of the paper's estimator (mle-gev: GEV MLE of z, {PCT} approximate "
                        "confidence interval; biased low beyond n = m), at n = m, at the workload's TP group size "
                        "(\"measured here\": its collectives measure the delay directly, see predicted vs measured) "
                        "and extrapolated to 512 and 4096 ranks; \"covers\" says whether the interval contains the "
                        f"truth (at the {PCT} level about one in ten may miss by chance); an empty cell: that model "
                        "has no tau(n) for the cell at that n. predicted/true is each estimator's point estimate "
                        f"over the truth ({'; '.join(points)}).",
                 flag="not converged" if "not converged" in shown else None)


def _xi_table(xi: pd.DataFrame) -> Table:
    """Planted GEV parameters against the estimated shape xi."""
    model = str(xi["model"].dropna().iloc[0]) if "model" in xi and xi["model"].notna().any() else None
    xi_rows = pd.DataFrame({"workload": xi["workload"], "GPU": xi["gpu"], "precision": xi["precision"],
                            "true xi": xi["true_xi"], "true mu": xi["true_mu"], "true sigma": xi["true_sigma"]})
    if model is not None:
        xi_rows[f"{model} xi [{PCT} CrI]"] = [fmt_ci(*v) for v in zip(xi["model_xi_mean"], xi["model_xi_lo"],
                                                                        xi["model_xi_hi"], strict=True)]
        xi_rows["CrI covers truth"] = xi["model_covers"]
    if "mle_xi" in xi:
        xi_rows[f"MLE xi [{PCT} profile CI]"] = [fmt_ci(*v) for v in zip(xi["mle_xi"], xi["mle_xi_lo"], xi["mle_xi_hi"],
                                                                          strict=True)]
        xi_rows["CI covers truth"] = xi["mle_covers"]
    if "converged" in xi:
        xi_rows["not converged"] = xi["converged"].eq(False)
    return Table(xi_rows, f"Planted GEV parameters of the z-scores against the estimated shape xi: the main model "
                          f"{model or '(none)'} ({PCT} credible interval) and the GEV MLE ({PCT} profile-likelihood "
                          "interval); \"covers truth\" says whether the interval contains the planted xi (at the "
                          f"{PCT} level about one cell in ten may miss by chance). Rows in red: fit not converged.",
                 flag="not converged" if "not converged" in xi_rows else None)


def _attribution_table(att: pd.DataFrame) -> Table:
    """Critical-path attribution against the truth's stragglers and planted causes."""
    att_rows = pd.DataFrame({"workload": att["workload"], "TP collectives (truth)": att["tp_collectives"],
                             "planted causes (truth)": att["planted"],
                             "CPU delay idled the straggler's GPU (truth)": att["cpu_delay_idled_straggler"]})
    if "attributed" in att:
        att_rows["attributed"] = att["attributed"]
        att_rows["straggler rank = truth"] = [f"{int(h)} of {int(n)}" for h, n in
                                              zip(att["straggler_hits"], att["straggler_compared"], strict=True)]
        att_rows["GPU-only paths"] = att["gpu_only_paths"]
        att_rows["non-GPU paths"] = att["non_gpu_paths"]
        att_rows["planted causes found"] = [f"{int(f)} of {int(p)}" if p else "– (none planted)"
                                            for f, p in zip(att["planted_found"], att["planted"], strict=True)]
    return Table(att_rows, "Critical-path attribution against the truth: the straggler rank it found against the "
                           "generator's (ties left out); the planted causes (none in the bundled demo) and the "
                           "collectives whose straggler lost GPU time to a random CPU delay, beside the attribution's "
                           "GPU-only and non-GPU paths.")
