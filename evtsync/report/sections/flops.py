"""B* as FLOPS grow (the paper's Fig. 13) from ``tables/bstar_flops`` and ``tables/flops_scaling``."""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from evtsync.report.context import PCT, ReportContext
from evtsync.report.markdown import (
    Alert,
    Section,
    Skipped,
    Table,
    fmt,
    fmt_ci,
)


def build(ctx: ReportContext) -> list[Section]:
    """B* as FLOPS grow (the paper's Fig. 13) for the main fit's reference cell at n = 256 and
    4096, with the bandwidth-scaling requirement against the roofline (docs/what-if.md), from the
    prediction stage's ``tables/bstar_flops`` and ``tables/flops_scaling``."""
    from evtsync.core.reference import REFERENCE_TFLOPS, nvlink_reference_lines
    from evtsync.plots.whatif import bstar_vs_flops

    title = "Optimal bandwidth as FLOPS grow"
    summary = ctx.stage("prediction").get("summary", {})
    if not ctx.done("prediction") or not summary:
        return [Section(title, [ctx.why_not("prediction")], anchor="flops")]
    made = summary.get("flops")
    table, scaling = ctx.table("bstar_flops"), ctx.table("flops_scaling")
    if made is None or (table is None and "refused" not in made):
        return [Section(title, [Skipped("Skipped — this run folder has no tables/bstar_flops.parquet (its prediction "
                                        "stage was run by an evtsync that left the FLOPS sweep to the report); rerun "
                                        "`evtsync run --force` to add it.")], anchor="flops")]
    if "refused" in made or table is None or scaling is None:
        return [Section(title, [Skipped(f"Skipped — {made.get('refused', 'no table')}.")], anchor="flops")]
    table, left_out = ctx.estimator.rows(table, "FLOPS sweep of B*")
    if left_out:  # the scaling table is the sweep's ratio: it goes with the sweep's rows, whole or not at all
        return [Section(title, [Skipped(f"Skipped — {left_out}.")], anchor="flops")]
    name = summary.get("main_model")
    converged = bool(scaling["converged"].all()) if "converged" in scaling else True
    sweep = made.get("sweep", [1.0, 16.0])
    which, cell, b_ref = made.get("which", ""), made.get("cell", "?"), made.get("b_us")
    alpha, size, eps = summary.get("alpha_us"), summary.get("bytes"), summary.get("eps")
    items: list[Any] = []
    if not converged:
        items.append(Alert(f"{name} did not converge; this figure inherits it.", level="warning"))
    items.append(ctx.figure(functools.partial(bstar_vs_flops, table, nvlink=nvlink_reference_lines()), "bstar-flops", (
        f"Optimal bandwidth B* as peak FLOPS grow {sweep[0]:g}–{sweep[-1]:g}x over the H200's "
        f"{REFERENCE_TFLOPS:g} TFLOPS, for n = 256 and 4096 (the paper's Figure 13), at eps = {fmt(eps)}: the block's b "
        f"is divided by the factor, and tau(n) with it (methodology §8). Tax by the "
        f"{_estimator_words(table, name)} for {which}, {cell}, b = {fmt(b_ref)} "
        f"µs; alpha = {fmt(alpha)} µs, S = {fmt(size)} bytes ({summary.get('bytes_source', '')}). Solid with "
        f"{PCT} band: with the tax; dashed: Hockney's B*_H (no compute term, flat); dotted: the roofline "
        "(B*_H grown with the FLOPS); horizontal lines: Table 1's NVLink generations.")))
    shown = pd.DataFrame({
        "topology": scaling["topology"], "n": scaling["n"],
        f"B* growth x{scaling['roofline_growth'].iloc[0]:g} FLOPS [{PCT} CrI]": [
            fmt_ci(a, b, c) for a, b, c in zip(scaling["growth_median"], scaling["growth_lo"], scaling["growth_hi"], strict=True)],
        f"below the roofline, % [{PCT} CrI]": [
            fmt_ci(100 * a, 100 * b, 100 * c) for a, b, c in zip(scaling["scaling_reduction_median"],
                                                                 scaling["scaling_reduction_lo"],
                                                                 scaling["scaling_reduction_hi"], strict=True)],
        "not converged": not converged})
    items.append(Table(shown, (
        f"Bandwidth-scaling requirement over the sweep: growth = B*(x{sweep[-1]:g}) / B*(x{sweep[0]:g}) draw "
        f"by draw (median [{PCT} interval], tax by the {_estimator_words(table, name)}); the roofline grows as the FLOPS, Hockney's B*_H not at "
        "all; 'below the roofline' = 1 − growth / FLOPS growth (the paper's \"11.7% lower bandwidth scaling "
        "requirement\" is this quantity for its unstated FLOPS range: docs/what-if.md)."), flag="not converged"))
    return [Section(title, items, anchor="flops")]


def _estimator_words(table: pd.DataFrame, main: str | None) -> str:
    """Which estimator gave the sweep's tax: "ranktail (default) estimator", or the labelled fallback."""
    from evtsync.core.defaults import DEFAULT_ESTIMATOR

    if "estimator" not in table or not len(table):
        return f"centred estimator of {main}'s posterior"
    fallback = (table["estimator_note"].fillna("").astype(str) != "" if "estimator_note" in table
                else table["estimator"].astype(str) != DEFAULT_ESTIMATOR)
    names = list(dict.fromkeys(table["estimator"].astype(str)))
    return " and ".join(f"{e} (default) estimator" if e == DEFAULT_ESTIMATOR else
                        f"{e} estimator of {main} (fallback, labelled)"
                        if fallback[table["estimator"].astype(str) == e].any() else f"{e} estimator of {main}"
                        for e in names)
