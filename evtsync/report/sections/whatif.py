"""What if: tau(n) of hardware without traces (the named presets), from ``tables/whatif.parquet``."""

from __future__ import annotations

from typing import Any

import pandas as pd

from evtsync.predict.tables import point_column, point_labels
from evtsync.report.context import PCT, ReportContext
from evtsync.report.estimator import row_estimators
from evtsync.report.markdown import (
    Alert,
    Section,
    Skipped,
    Table,
    fmt,
    fmt_ci,
)


def build(ctx: ReportContext) -> list[Section]:
    """What will hardware without traces pay? tau(n) of the named presets (reference.PRESETS),
    drawn from the main fit's population when the GPU is not in the fit (methodology §7), from the
    prediction stage's ``tables/whatif.parquet``."""
    from evtsync.core.reference import REFERENCE_TFLOPS

    title = "What if: hardware without traces"
    summary = ctx.stage("prediction").get("summary", {})
    if not ctx.done("prediction") or not summary:
        return [Section(title, [ctx.why_not("prediction")], anchor="whatif")]
    made = summary.get("whatif")
    presets = ctx.table("whatif")
    if made is None or (presets is None and "refused" not in made):
        return [Section(title, [Skipped("Skipped — this run folder has no tables/whatif.parquet (its prediction stage "
                                        "was run by an evtsync that left the what-if table to the report); rerun "
                                        "`evtsync run --force` to add it.")], anchor="whatif")]
    if "refused" in made or presets is None:
        return [Section(title, [Skipped(f"Skipped — {made.get('refused', 'no table')}.")], anchor="whatif")]
    view = ctx.estimator
    presets, left_out = view.rows(presets, "what-if")
    if presets.empty:
        return [Section(title, [Skipped(f"Skipped — {left_out}.")], anchor="whatif")]
    name = summary.get("main_model")
    b_source, b_ref, notes = made.get("b_source", ""), made.get("b_us"), made.get("not_predicted", [])
    rows = pd.DataFrame({
        "preset": presets["preset"], "GPU": presets["gpu"], "n": presets["n"],
        "FLOPS factor": [fmt(v) for v in presets["flops_factor"]],
        "estimator": (_estimator_labels(presets) if "estimator" in presets else list(row_estimators(presets))),
        "prediction": _prediction_labels(presets),
        f"tau(n) µs [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in
                                  zip(point_column(presets, "tau", "_us"), presets["tau_lo_us"], presets["tau_hi_us"],
                                      strict=True)],
        "NVLink GB/s": presets["nvlink_gbps"], "TFLOPS": presets["tflops"], "TFLOPS from": presets["tflops_source"],
        "source": presets["source"]})
    converged = bool(presets["converged"].all()) if "converged" in presets else True
    by = (f"a measured GPU by the default estimator, \"ranktail (default; point: …)\"; a GPU absent from the traces by the "
          f"centred estimator of {name} (ranktail has no population: the labelled fallback), drawn"
          if not view.explicit else f"only the rows by the estimator {view.label(presets)} (a GPU absent from the traces: "
          f"the centred estimator of {name}, drawn")
    items: list[Any] = [Table(rows, (
        f"tau(n) of bf16 domains that have no traces: {by} from the hierarchy's population (a new GPU deviation and "
        f"cell term per posterior draw: 'population', wider intervals){')' if view.explicit else ''}; b = {b_source}, {fmt(b_ref)} µs, divided by the preset's FLOPS over the H200's "
        f"{REFERENCE_TFLOPS:g} TFLOPS (methodology §8). n and NVLink GB/s are the paper's Table 1; its Table 1 lists no "
        f"TFLOPS: 'TFLOPS from' says whether a value is the paper's (H200) or an NVIDIA datasheet's (named in "
        f"'source'). Presets: evtsync.core.reference.PRESETS; any other with "
        f"`evtsync predict FIT --gpu G --precision P --n N --flops-factor F`."))]
    if not converged:
        items.insert(0, f"WARNING: {name} did not converge; these predictions inherit it.")
    if "prior_dominated" in presets and presets["prior_dominated"].astype(bool).any():
        from evtsync.predict.tables import PRIOR_DOMINATED_NOTE

        items.append(f"Rows labelled {PRIOR_DOMINATED_NOTE}.")
    items += [f"Not predicted: {note}." for note in notes]
    if left_out:
        items.append(Alert(f"{left_out}.", level="warning"))
    return [Section(title, items, anchor="whatif")]


def _estimator_labels(presets: pd.DataFrame) -> list[str]:
    """"ranktail (default; point: posterior median)", "centred (fallback: <model>; point: posterior
    mean)" for a fallback row, or "centred (<model>; point: ...)" for a row of an estimator asked for
    by name, per row (the point: :func:`evtsync.predict.tables.point_labels`)."""
    from evtsync.core.defaults import DEFAULT_ESTIMATOR

    notes = presets["estimator_note"].fillna("") if "estimator_note" in presets else [""] * len(presets)
    models = presets["model"] if "model" in presets else [""] * len(presets)
    points = point_labels(presets)
    return [(f"{e} (fallback: {model}" if note else f"{e} (default" if e == DEFAULT_ESTIMATOR else f"{e} ({model}")
            + f"; point: {point})"
            for e, note, model, point in zip(presets["estimator"].astype(str), notes, models, points, strict=True)]


def _prediction_labels(presets: pd.DataFrame) -> list[str]:
    """How each row was predicted, with "(prior-dominated: <spreads>)" where the prior sets its width."""
    dominated = presets["prior_dominated"].astype(bool) if "prior_dominated" in presets else [False] * len(presets)
    spreads = presets["prior_dominated_spreads"] if "prior_dominated_spreads" in presets else [""] * len(presets)
    return [f"{kind} (prior-dominated: {which})" if flag else str(kind)
            for kind, flag, which in zip(presets["prediction_kind"], dominated, spreads, strict=True)]

