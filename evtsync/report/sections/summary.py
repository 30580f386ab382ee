"""The summary: the answer table first (one row per GPU × precision, from ``tables/summary.parquet``), who straggles, alerts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.display import fmt_interval, point_key
from evtsync.predict.hockney import topology_label
from evtsync.report.context import PCT, ReportContext, fit_rows, slug
from evtsync.report.markdown import (
    Alert,
    Caption,
    Link,
    Section,
    Skipped,
    Table,
)
from evtsync.report.sections.stragglers import straggler_table
from evtsync.runfolder.layout import STATUS_TEXT
from evtsync.runfolder.summary import NOTE_SEPARATOR, read_summary

#: The summary's column of notes (convergence, refusals) shown beside the numbers.
SUMMARY_NOTE = "flags"


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    from evtsync.runfolder.layout import incomplete_notes

    numbers, info = read_summary(ctx.run_dir, ctx.manifest)
    items: list[Any] = [Alert(note) for note in incomplete_notes(ctx.manifest)]  # a failed workload, missing ranks
    fits = fit_rows(ctx.run_dir, ctx.manifest)
    bad = fits[(fits["status"] == "done") & (fits["converged"] == False)] if len(fits) else fits  # noqa: E712
    for row in bad.itertuples():
        items.append(Alert(f"Fit {row.model} did NOT converge ({row.convergence}). Every number computed from it "
                           "is marked; rerun with more --draws/--tune before relying on it."))
    for name, stage in ctx.manifest.get("stages", {}).items():
        if stage.get("status") == "failed":
            items.append(Alert(f"Stage {name} FAILED: {stage.get('reason', '')}"))
    if numbers.empty:
        items.append(Skipped("No summary: the run has no tax table (" + ctx.why_not("tax") + ")"))
        return [Section("Summary: the answers", items, anchor="summary")]
    n, model = info["n"], info["model"]

    def ci(row: Any, key: str, lo: str, hi: str, scale: float = 1.0, digits: int = 3, kind: str | None = None) -> str:
        value = row.get(key)
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return "–"
        return fmt_interval(scale * value, scale * row[lo], scale * row[hi], row.get(kind) if kind else None, digits)

    records = numbers.to_dict(orient="records")
    split = [[n for n in str(r.get("notes") or "").split(NOTE_SEPARATOR) if n] for r in records]
    common = [n for n in split[0] if all(n in other for other in split) and "NOT converged" not in n] if split else []
    for r, notes in zip(records, split, strict=True):
        r["notes"] = "; ".join(n for n in notes if n not in common)
    shown = []
    for r in records:
        gslug, pslug = slug(r["gpu"]), slug(r["precision"])
        cell_anchor = f"#cell-{gslug}-{pslug}" if r["precision"] != "all" else f"#gpu-{gslug}"
        entry: dict[str, Any] = {
            "GPU × precision": Link(f"{r['gpu']} {r['precision']}", cell_anchor),
            "tax median (µs)": Link(ci(r, "tax_median_us", "tax_median_lo_us", "tax_median_hi_us",
                                       kind="tax_median_interval"), f"#tax-{gslug}"),
            "tax P90 (µs)": Link(ci(r, "tax_p90_us", "tax_p90_lo_us", "tax_p90_hi_us"), f"#tax-{gslug}"),
            "GPU-only stragglers (%)": Link(ci(r, "gpu_only_share", "gpu_only_share_lo", "gpu_only_share_hi", 100.0),
                                            f"#attribution-{gslug}"),
            "xi": Link(ci(r, "xi_mean", "xi_lo", "xi_hi", digits=2), "#xi"),
            "tail": Link(str(r.get("verdict") or "–"), "#compare"),
            f"tau(n = {n}) (µs)": Link(ci(r, point_key(r, "tau", "_us"), "tau_lo_us", "tau_hi_us"), "#tau"),
        }
        for topo in info["topologies"]:
            entry[f"B*, {topology_label(topo)} (GB/s)"] = Link(
                ci(r, f"bstar_{topo}_gbps", f"bstar_{topo}_lo_gbps", f"bstar_{topo}_hi_gbps"), "#bstar")
        for topo in info["topologies"]:
            entry[f"B* reduction, {topology_label(topo)} (%)"] = Link(
                ci(r, f"reduction_{topo}", f"reduction_{topo}_lo", f"reduction_{topo}_hi", 100.0), "#bstar")
        if any(split):
            entry[SUMMARY_NOTE] = r.get("notes") or "–"
        entry["not converged"] = not bool(r.get("converged", True))
        shown.append(entry)
    frame = pd.DataFrame(shown)
    if SUMMARY_NOTE in frame and (frame[SUMMARY_NOTE] == "–").all():
        frame = frame.drop(columns=[SUMMARY_NOTE])
    compare = ctx.stage("compare")
    loo = info["loo"] or (f"LOO comparison: stage compare {STATUS_TEXT.get(compare.get('status', 'not run'), 'not run')}"
                          f": {compare.get('reason') or 'no reason recorded'} (why, and what to do: the notes below).")
    items.append(Link(loo, "#compare"))
    if info.get("loo_and_tail"):
        items.append(info["loo_and_tail"])
    items.append(Table(frame, f"Per GPU × precision: value [{PCT} interval], each linked to its section; xi, "
                              f"xi from {model or 'no fit'}; tau and B* by "
                              + (_estimator_words(info.get("estimator"), model, info.get("point_estimate"))
                                 if info.get("estimator")
                                 else f"{model or 'no fit'}")
                              + f" at n = {n} ranks. An interval marked \"range of "
                              "n\" is [min, max] of n values, too few for the level; ∞: too few values to bound that "
                              "side. Rows in red: fit not converged.", flag="not converged", css_class="summary",
                       note=SUMMARY_NOTE))
    for note in common:
        items.append(Alert(f"Every row of the summary: {note}.", level="warning"))
    view = ctx.estimator
    if view.explicit and view.asked != view.run:
        items.append(Alert(f"The summary's tau and B* are by the run's estimator, {view.run}; the sections below "
                           f"show the {view.asked} estimator asked with --estimator where the run stored it.",
                           level="warning"))
    items.append(Caption(f"How the summary is computed: tax = max − min NCCL kernel duration over the member ranks, over "
                 f"the valid collectives of the process group(s) the compute blocks were cut from (the PG tau(n) "
                 f"predicts), median and 90th percentile with distribution-free order-statistic {PCT} intervals; "
                 f"GPU-only share = attributed collectives whose straggler path is GPU-only, Wilson {PCT} "
                 f"interval; xi is the posterior mean with its {PCT} credible interval of {model or 'no fit'}; tau(n) "
                 f"and B* in GB/s and its reduction 1 − B*/B*_H per topology are point estimates "
                 f"({point_words(info.get('point_estimate'))}) with {PCT} intervals of the "
                 f"default estimator of tau(n), ranktail (every rank's value with a generalized Pareto tail), or, "
                 f"where it cannot predict (labelled in the notes), the centred estimator of {model or 'no fit'} (m = "
                 f"{ctx.manifest.get('options', {}).get('m', 4)}); the tail verdict is the rank times' domain of "
                 f"attraction, read from the {PCT} interval of the GPD shape of ranktail's tail (where ranktail "
                 f"predicts; elsewhere from xi of {model or 'the GEV'}'s block maxima): heavy (Fréchet) when it lies "
                 "above 0, bounded (Weibull) below 0, light tail (Gumbel domain) when it holds 0."))
    items.append(Caption("Who straggles (all process groups; per GPU in its tax section):"))
    items.append(straggler_table(ctx))
    if ctx.manifest.get("demo"):
        s = ctx.manifest.get("sampling", {})
        items.append(Alert(f"The bundled demo: a synthetic study with known truth (see "
                           f"\"Estimates vs ground truth\"), fitted with {s.get('draws')} draws, {s.get('tune')} tuning "
                           f"steps, {s.get('chains')} chains where a model's own [sampling] table does not ask for "
                           "others (the main model's does: each fit records its own, see the convergence table).",
                           level="warning"))
    return [Section("Summary: the answers", items, anchor="summary")]


def point_words(points: Any) -> str:
    """What the summary's points are, per estimator ("ranktail: posterior median; centred: posterior
    mean"), from summary.json's ``point_estimate``; a summary written before it: its means."""
    if not isinstance(points, dict) or not points:
        return "posterior means: a summary written before the point was recorded"
    return "; ".join(f"{e}: {p}" for e, p in points.items())


def _estimator_words(estimators: Any, model: str | None, points: Any = None) -> str:
    """The summary's estimator(s) of tau(n), "ranktail (default; point: posterior median)" first, a
    fallback named as one; ``points`` maps an estimator to what its point is (summary.json's
    ``point_estimate``; a summary written before it: the posterior mean, then the point)."""
    from evtsync.core.defaults import DEFAULT_ESTIMATOR

    points = points if isinstance(points, dict) else {}
    names = [e.strip() for e in str(estimators).split(",") if e.strip()]
    return ", ".join((f"{e} (default" if e == DEFAULT_ESTIMATOR else f"{e} of {model or 'the main model'} "
                      "(fallback, labelled") + f"; point: {points.get(e, 'posterior mean')})" for e in names)
