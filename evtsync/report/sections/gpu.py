"""Per GPU: the synchronization tax, the critical-path attribution, and per precision the z-scores and fits."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.display import fmt_interval
from evtsync.plots import fits as fit_figs
from evtsync.plots import tax as tax_figs
from evtsync.predict.tables import point_column
from evtsync.report.attribution_section import attribution_why_items
from evtsync.report.context import MIN_Z_FIGURE, PCT, ReportContext, mle_parameters, slug
from evtsync.report.markdown import (
    Section,
    Skipped,
    Table,
    fmt,
    fmt_ci,
)
from evtsync.report.sections.pvm import estimator_words
from evtsync.report.sections.stragglers import straggler_table
from evtsync.report.wording import device_word, tau_words
from evtsync.trace.ranks import is_cpu_label


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    coll = ctx.table("tax_collectives")
    ranks = ctx.table("tax_ranks")
    summary = ctx.table("tax_summary")
    att = ctx.table("attribution_summary")
    z = ctx.table("zscores")
    mle = ctx.table("mle")
    pvm = ctx.table("predicted_vs_measured")
    if pvm is not None:  # the rows of the report's estimator (evtsync report --estimator), as its own section
        pvm = ctx.estimator.rows(pvm, "predicted vs measured")[0]
    main_tree, main_name = ctx.main_fit()
    if coll is None:
        return []
    cv_means = _cv_means(ctx)
    sections = []
    for gpu in sorted(coll["gpu"].astype(str).unique()):
        sub = coll[coll["gpu"].astype(str) == gpu]
        gslug = slug(gpu)
        cpu = is_cpu_label(gpu)
        workloads = sorted(sub["workload"].unique())
        sections.append(Section(f"{gpu}", [f"Workloads on {gpu}: {', '.join(workloads)}."], level=2,
                                anchor=f"gpu-{gslug}"))
        sec = Section(f"{gpu}: synchronization tax", level=3, anchor=f"tax-{gslug}")
        if summary is not None and len(summary):
            s = summary[summary["gpu"].astype(str) == gpu]
            if "tau_median_lo_us" in s:
                medians = [fmt_interval(*v) for v in zip(s["tau_median_us"], s["tau_median_lo_us"],
                                                         s["tau_median_hi_us"], s["tau_median_interval"], strict=True)]
            else:  # a tax table written before the interval was part of it
                medians = [fmt(v) for v in s["tau_median_us"]]
            shown = pd.DataFrame({
                "workload": s["workload"], "pg": s["pg"], "collective": s["collective"], "count": s["count"],
                f"tau median µs [{PCT} CI]": medians,
                "tau p90 µs": s["tau_p90_us"], "tau max µs": s["tau_max_us"],
                "wait share, longest-waiting rank": s["fastest_wait_share"],
                "wait share, median rank": s["median_rank_wait_share"], "invalid": s["n_invalid"]})
            sec.items.append(Table(shown, "Tax per workload, PG and collective type (methodology §3): tau = max − min "
                                          f"{tau_words(cpu)} over the member ranks, µs, over the valid collectives "
                                          "(count): median with "
                                          f"its distribution-free {PCT} confidence interval (order statistics), 90th "
                                          "percentile, maximum; wait share = (d_r − min d)/d_r, median over the "
                                          "collectives, for the rank that waited longest and for the median rank; "
                                          "invalid: collectives flagged by the alignment checks, left out of every "
                                          "statistic. An interval marked \"range of "
                                          "n\" is [min, max] of too few collectives for the level."))
        sec.items.append(straggler_table(ctx, gpu))
        if len(sub):
            labelled = sub.assign(pg=sub["workload"].astype(str) + " " + sub["pg"].astype(str))
            sec.items.append(ctx.figure(functools.partial(tax_figs.tax_cdfs, labelled), f"tax-cdf-{gslug}", f"Empirical CDF of the synchronization tax tau_max (max − min "
                                        f"{tau_words(cpu)} across the member ranks, log µs) of every aligned collective "
                                        f"on {gpu}, one curve per workload, process group and collective type "
                                        f"(methodology §3)."))
        if ranks is not None and len(ranks[ranks["gpu"].astype(str) == gpu]):
            fig = functools.partial(tax_figs.wait_shares, ranks[ranks["gpu"].astype(str) == gpu], f"Wait shares on {gpu}")
            sec.items.append(ctx.figure(fig, f"wait-shares-{gslug}", f"Distribution over collectives of the wait share (d_r − min d)/d_r: solid "
                                              f"for the rank that waited longest, dashed for the median rank, one "
                                              f"colour per workload on {gpu} (methodology §3)."))
        sections.append(sec)
        sections.append(Section(f"{gpu}: critical-path attribution", _attribution_items(ctx, att, gpu, gslug),
                                level=3, anchor=f"attribution-{gslug}"))
        precisions = sorted(z[z["gpu"].astype(str) == gpu]["precision"].astype(str).unique()) if z is not None else []
        if not precisions:
            sections.append(Section(f"{gpu}: z-scores and fits", [Skipped(
                f"Skipped — no z-scores for this {device_word(cpu)}: " + (ctx.why_not("zscores") if not ctx.done("zscores")
                                                         else "no kept GEMM block in its workloads."))], level=3,
                anchor=f"cell-{gslug}"))
        for precision in precisions:
            sections.append(_cell_section(ctx, gpu, precision, z, mle, pvm, main_tree, main_name,
                                          cv_means.get((gpu, precision))))
    return sections


def _cv_means(ctx: ReportContext) -> dict[tuple[str, str], float]:
    """The mean coefficient of variation r per (GPU, precision), as the summary stage wrote it."""
    from evtsync.runfolder.summary import read_summary

    numbers, _ = read_summary(ctx.run_dir, ctx.manifest)
    if numbers.empty or "cv_mean" not in numbers:
        return {}
    return {(str(r.gpu), str(r.precision)): r.cv_mean for r in numbers.itertuples()}


def _attribution_items(ctx: ReportContext, att: pd.DataFrame | None, gpu: str, gslug: str) -> list[Any]:
    if not ctx.done("attribution"):
        return [f"Critical-path attribution (methodology §4): {ctx.why_not('attribution')}"]
    sub = att[att["gpu"].astype(str) == gpu] if att is not None else pd.DataFrame()
    if sub.empty:
        return [f"Critical-path attribution: no attributed collective on {gpu}."]
    items: list[Any] = []
    if "collective_share_lo" not in sub:
        return [Skipped("No attribution tables with intervals: this run folder's attribution stage was run by an "
                        "evtsync that left the intervals to the report; rerun `evtsync run --force` to add them.")]
    per_workload = sub.drop_duplicates("workload").sort_values("workload")
    # CPU-side (gloo) runs have no GPU-only share (the stage writes None): no line for them.
    gpu_side = per_workload[per_workload["gpu_only_share"].notna()]
    if not gpu_side.empty:
        items.append(f"Share of attributed collectives whose straggler path is GPU-only, with its {PCT} Wilson "
                     "interval: " + "; ".join(
                         f"{r.workload} {fmt_ci(100 * r.gpu_only_share, 100 * r.gpu_only_share_lo, 100 * r.gpu_only_share_hi)}%"
                         f" of {int(r.n_attributed)}" for r in gpu_side.itertuples()) + " (paper: 93.7%).")
    cat = sub.assign(**{f"share [{PCT} CI]": [fmt_ci(*v) for v in zip(
        sub["collective_share"], sub["collective_share_lo"], sub["collective_share_hi"], strict=True)]})
    cat = cat.rename(columns={"cause_class": "cause class", "count": "collectives",
                              "share_of_gpu_causes": "share of GPU causes"})
    if is_cpu_label(gpu):  # CPU-side collectives: the main threads' slices, no GPU cause to compare with the paper
        items.append(Table(cat[["workload", "category", "collectives", f"share [{PCT} CI]"]],
                           "Principal cause of each straggler (the main-thread slice with the largest extra time "
                           "against the fastest rank's, between the previous collective of its group and its "
                           "enqueue, docs/critical-path.md §6), by category."))
    else:
        items.append(Table(cat[["workload", "category", "cause class", "collectives", f"share [{PCT} CI]",
                                "share of GPU causes"]],
                           "Principal cause of each straggler (the event with the largest extra time on its critical "
                           "path against the fastest rank's, methodology §4), by category; paper: GEMM 78%, "
                           "FlashAttention 15.4%, FSDP 4.3%, Norm 1.2%, Concat/Split 0.6% of GPU causes."))
    items.append(ctx.figure(functools.partial(tax_figs.attribution_breakdown, sub), f"attribution-{gslug}", f"Share of attributed collectives on {gpu} per principal-cause category, one bar per "
                                  f"workload (critical-path walk from each collective back to the previous collective "
                                  f"of its PG, straggler's path compared with the fastest rank's, methodology §4)."))
    items.append(_path_view(ctx, gpu, gslug))
    coll = ctx.table("attribution_collectives")
    if coll is not None:
        items += attribution_why_items(coll, gpu, {name: ctx.table(f"attribution_{name}")
                                                   for name in ("root_causes", "rank_blame", "unexplained")})
    return items


def _path_view(ctx: ReportContext, gpu: str, gslug: str) -> Any:
    """The Fig. 4-style view of the collective with the largest tax among those attributed on
    ``gpu`` (the attribution stage keeps that collective's two paths per workload), or why not."""
    from evtsync.plots.paths import straggler_vs_fastest

    paths = ctx.table("attribution_paths")
    if paths is None:
        return Skipped("No straggler-vs-fastest path view: this run folder has no tables/attribution_paths.parquet "
                       "(its attribution stage was run by an evtsync that did not keep the paths); rerun "
                       "`evtsync run --force` to draw it.")
    on_gpu = paths[paths["gpu"].astype(str) == gpu] if "gpu" in paths.columns else paths.iloc[:0]
    coll = ctx.table("attribution_collectives")
    if on_gpu.empty or coll is None:
        return Skipped(f"No straggler-vs-fastest path view on {gpu}: no attributed collective (status ok) of its "
                       "workloads kept a critical path.")
    keys = on_gpu[["workload", "pg", "index"]].drop_duplicates()
    kept = coll.astype({"pg": str}).merge(keys.astype({"pg": str}), on=["workload", "pg", "index"])
    if kept.empty:
        return Skipped(f"No straggler-vs-fastest path view on {gpu}: the kept paths match no attributed collective.")
    top = kept.sort_values("tau_max_us", ascending=False, kind="stable").iloc[0]
    rows = on_gpu[(on_gpu["workload"] == top["workload"]) & (on_gpu["pg"].astype(str) == str(top["pg"]))
                  & (on_gpu["index"] == top["index"])]
    fig = functools.partial(straggler_vs_fastest, rows, top["pg"], int(top["index"]), kept[kept["workload"] == top["workload"]])
    cause = f"{top.get('cause_name')} ({top.get('cause_category')}, +{fmt(top.get('cause_extra_us'))} µs)"
    lanes = "the main threads' events" if is_cpu_label(gpu) else "GPU and CPU-side events on separate lanes"
    return ctx.figure(fig, f"path-{gslug}", (
        f"The straggler's critical path (rank {int(top['straggler_rank'])}) against the fastest rank's "
        f"(rank {int(top['fastest_rank'])}) for collective {int(top['index'])} of PG {top['pg']} in workload "
        f"{top['workload']}, the attributed collective with the largest tax on {gpu} (tau_max "
        f"{fmt(top['tau_max_us'])} µs), as in the paper's Fig. 4: "
        f"{lanes}, time "
        f"from each path's first event (both ranks leave the previous collective together, methodology §4); outlined "
        f"in red: the principal cause, {cause}."))


def _cell_draws(fit: Any, gpu: str, precision: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Draws of mu, sigma, xi of the fit's cell for a GPU × precision (a pooled fit's one cell), or None."""
    cells = fit.cells
    if {"gpu", "precision"} <= set(cells.columns):
        hit = np.flatnonzero((cells["gpu"] == gpu).to_numpy() & (cells["precision"] == precision).to_numpy())
        if hit.size == 0:
            return None
        c = int(hit[0])
    elif len(cells) == 1:
        c = 0
    else:
        return None
    return tuple(d[:, c] for d in fit.cell_draws())


def _cell_section(ctx: ReportContext, gpu: str, precision: str, z: pd.DataFrame, mle: pd.DataFrame | None,
                  pvm: pd.DataFrame | None, tree: Any, model: str | None, cv_mean: float | None = None) -> Section:
    sec = Section(f"{gpu} {precision}: z-scores and fits", level=3, anchor=f"cell-{slug(gpu)}-{slug(precision)}")
    cell = z[(z["gpu"].astype(str) == gpu) & (z["precision"].astype(str) == precision)]
    values = cell["z"].to_numpy(float)
    values = values[np.isfinite(values)]
    if values.size < MIN_Z_FIGURE:
        sec.items.append(Skipped(f"Skipped — {values.size} z-score(s) from {cell['block'].nunique()} block "
                                 f"identit{'y' if cell['block'].nunique() == 1 else 'ies'} (workloads "
                                 f"{', '.join(sorted(cell['workload'].astype(str).unique()))}): fewer than "
                                 f"{MIN_Z_FIGURE}, too few for a histogram, a QQ plot or a fit: profile more training steps (how: "
                                 "the summary's note)."))
        return sec
    sec.items.append(f"{len(values)} pooled z-scores from {cell['block'].nunique()} block identities "
                     f"(workloads {', '.join(sorted(cell['workload'].unique()))}); mean coefficient of variation "
                     f"r = {fmt(cv_mean)} (paper: about 0.02).")
    post = _cell_draws(tree, gpu, precision) if tree is not None else None
    label = f"{model}{'' if tree is None or tree.converged else ' (NOT converged)'}"
    posterior_text = (f" and, in green, the posterior mean density of {label} with its {PCT} pointwise band"
                      if post is not None else " (no Bayesian fit covers this cell)")
    fig = functools.partial(fit_figs.gev_cell, values, mle_parameters(mle, "gev", gpu=gpu, precision=precision),
                            mle_parameters(mle, "gumbel", gpu=gpu, precision=precision),
                            post, label, f"{gpu} {precision}")
    sec.items.append(ctx.figure(fig, f"gev-{slug(gpu)}-{slug(precision)}", f"Left: histogram of the pooled z-scores z = (M − X̄)/s_pooled of the GEMM blocks "
                                      f"on {gpu} {precision} (methodology §5) with the GEV and Gumbel maximum-likelihood "
                                      f"densities where fitted{posterior_text}. Right: QQ plot of the ordered z-scores against the MLE model "
                                      f"quantiles at i/(n+1); points above the diagonal in the upper tail mean a "
                                      f"heavier tail than the model (methodology §6)."))
    if mle is not None and "mu" in mle:
        rows = mle[(mle["gpu"].astype(str) == gpu) & (mle["precision"].astype(str) == precision)]
        shown = pd.DataFrame({
            "family": rows["family"], "n": rows["n"],
            f"mu [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(rows["mu"], rows["mu_lo"], rows["mu_hi"], strict=True)],
            f"sigma [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(rows["sigma"], rows["sigma_lo"], rows["sigma_hi"], strict=True)],
            f"xi [{PCT} profile CI]": [fmt_ci(a, b, c) if f == "gev" else "0 (fixed)"
                                    for f, a, b, c in zip(rows["family"], rows["xi"], rows["xi_lo"], rows["xi_hi"], strict=True)],
            "AIC": rows["aic"], "LRT p (Gumbel vs GEV)": rows.get("lrt_pvalue"),
        })
        caption = (f"Maximum-likelihood fits of the cell (methodology §6): Wald {PCT} intervals for mu and "
                   f"sigma from the observed information, profile-likelihood {PCT} interval for xi; "
                   "the likelihood-ratio test of xi = 0 has one degree of freedom.")
        flag = None
        if "converged" in rows:
            shown["not converged"] = rows["converged"].ne(True)
            flag = "not converged"
            caption += " Rows in red: fit not converged."
        if "boundary" in rows:  # issue 29, item 7: the GEV fit ended on the boundary xi = -1
            shown["boundary xi = −1"] = rows["boundary"].eq(True)
            caption += (" \"boundary xi = −1\": the GEV likelihood was maximised on the edge of its parameter "
                        "space (xî = −1, where it is unbounded), so the fit is flagged not converged "
                        "(evtsync.evt.mlefit).")
        sec.items.append(Table(shown, caption, flag=flag))
    if pvm is not None and len(pvm):
        rows = pvm[(pvm["gpu"].astype(str) == gpu) & (pvm["precision"].astype(str) == precision)]
        if len(rows):
            sec.items.append(Table(pd.DataFrame({
                "workload": rows["workload"], "n": rows["n"], "collectives": rows["n_collectives"],
                f"measured µs [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(rows["measured_mean_us"], rows["measured_lo_us"], rows["measured_hi_us"], strict=True)],
                f"predicted µs [{PCT} interval]": [fmt_ci(a, b, c) for a, b, c in zip(point_column(rows, "predicted", "_us"), rows["predicted_lo_us"], rows["predicted_hi_us"], strict=True)],
            }), "IN-SAMPLE: mean straggler delay (mean − min kernel duration) of the collectives after this cell's "
                f"GEMM blocks, measured (t interval of the mean) and predicted as tau(n) by the estimator "
                f"{estimator_words(rows)}, fitted "
                "to these very blocks (methodology §7) — agreement shows the fit describes its data, not that "
                "it predicts new data; see the out-of-sample check in \"Predicted vs measured\"."))
    return sec

