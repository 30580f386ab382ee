"""The demo's estimates beside its planted truth, from the summary stage's ``tables/truth_xi`` and
``tables/truth_attribution`` (:mod:`evtsync.pipeline.truth`)."""

from __future__ import annotations

from typing import Any

import pandas as pd

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
    items: list[Any] = [
        "The demo's traces were generated with known GEV parameters per GPU × precision and known stragglers "
        "(inputs/demo/<workload>/ground_truth.json, docs/synth.md); here the estimates stand beside them.",
        Table(xi_rows, f"Planted GEV parameters of the z-scores against the estimated shape xi: the main model "
                       f"{model or '(none)'} ({PCT} credible interval) and the GEV MLE ({PCT} profile-likelihood "
                       "interval); \"covers truth\" says whether the interval contains the planted xi (at the "
                       f"{PCT} level about one cell in ten may miss by chance). Rows in red: fit not converged.",
              flag="not converged" if "not converged" in xi_rows else None),
        Table(att_rows, "Critical-path attribution against the truth: the straggler rank it found against the "
                        "generator's (ties left out); the planted causes (none in the bundled demo) and the "
                        "collectives whose straggler lost GPU time to a random CPU delay, beside the attribution's "
                        "GPU-only and non-GPU paths.")]
    return [Section(title, items, anchor="truth")]
