"""The PSIS-LOO comparison: the hierarchical rank model's xi free against xi = 0 (the Gumbel domain) on
the same excesses, the headline (issue 45); then the GEV fits of block maxima, labelled comparators."""

from __future__ import annotations

from typing import Any

import pandas as pd

from evtsync.report.context import ReportContext
from evtsync.report.markdown import (
    Alert,
    Caption,
    Section,
    Table,
    fmt,
)
from evtsync.report.sections.xi import COMPARATORS, comparators_ran, rank_model_missing


def rank_items(ctx: ReportContext) -> list[Any]:
    """The rank model's LOO (``tables/rank_loo.parquet``): its sentence and table, or why it is missing."""
    from evtsync.evt.rankreport import loo_block

    table = ctx.table("rank_loo")
    if table is None or table.empty:
        return [rank_model_missing(ctx, "LOO", "rank_loo")]
    block = loo_block(table)
    rows = pd.DataFrame(block["rows"])
    shown = pd.DataFrame({
        "model": rows["model"],
        "elpd_loo ± se": [f"{fmt(a, 5)} ± {fmt(b, 3)}" for a, b in zip(rows["elpd_loo"], rows["se"], strict=True)],
        "Δelpd ± se": [f"{fmt(a + 0.0, 4)} ± {fmt(b, 3)}" for a, b in zip(rows["d_elpd"], rows["d_se"], strict=True)],
        "p_loo": rows["p_loo"], "Pareto k > 0.7": rows["pareto_k_gt_0.7"], "excesses": rows["n_obs"]})
    return [f"Verdict: {block['sentence']}",
            Table(shown, "The headline comparison: the hierarchical rank model with a free tail shape xi against xi ≡ 0 "
                         "(an exponential tail: the Gumbel domain), the same hierarchy, thresholds and data; PSIS-LOO "
                         "over the excesses of the rank times above each cell's threshold: expected log pointwise "
                         "predictive density with its standard error, difference to the best fit with the standard "
                         "error of the difference (under about 2 standard errors does not separate the fits), "
                         "effective number of parameters, excesses whose Pareto k exceeds 0.7 (unreliable LOO).")]


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    items = rank_items(ctx)
    table = ctx.table("compare")
    if table is None:
        why = ctx.why_not("compare")
        ran = comparators_ran(ctx, how_to="--comparators" not in why)  # how to add the fits: said once
        items.append(Caption(f"{COMPARATORS}: {why}" + (f" {ran}" if ran else "")))
        return [Section("Model comparison", items, anchor="compare")]
    verdict = ctx.stage("compare").get("summary", {}).get("verdict", "")
    shown = pd.DataFrame({
        "rank": table["rank"], "model": table["model"],
        "elpd_loo ± se": [f"{fmt(a, 5)} ± {fmt(b, 3)}" for a, b in zip(table["elpd_loo"], table["se"], strict=True)],
        "Δelpd ± se": [f"{fmt(-a + 0.0, 4)} ± {fmt(b, 3)}" for a, b in zip(table["elpd_diff"], table["diff_se"], strict=True)],
        "p_loo": table["p_loo"], "Pareto k > 0.7": table["n_bad_k"],
        "not converged": ~table["converged"].astype(bool)})
    lines = [line.strip() for line in str(verdict).splitlines() if line.strip()]
    verdict_items: list[Any] = [Alert(line, level="warning") if line.startswith("WARNING") else line
                                for line in lines]
    if verdict_items and isinstance(verdict_items[0], str):
        verdict_items[0] = f"{COMPARATORS}: {verdict_items[0]}"
    return [Section("Model comparison", [
        *items,
        *verdict_items,
        Table(shown, f"{COMPARATORS}. PSIS-LOO comparison of the Bayesian GEV fits of block maxima on the same z-scores "
                     "(methodology §6): expected log pointwise "
                     "predictive density with its standard error, difference to the best model with the standard "
                     "error of the difference (a difference under about 2 standard errors does not separate the "
                     "models), effective number of parameters, observations whose Pareto k exceeds "
                     "0.7 (unreliable LOO). Rows in red: fit not converged.", flag="not converged")],
        anchor="compare")]
