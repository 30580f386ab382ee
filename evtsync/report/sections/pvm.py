"""Predicted against measured straggler delay, in-sample and out-of-sample."""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from evtsync.core.defaults import DEFAULT_ESTIMATOR, DEFAULT_M, PVM_AGREEMENT
from evtsync.plots import predictions as pred_figs
from evtsync.predict.tables import agreement_summary, point_column
from evtsync.report.context import PCT, ReportContext
from evtsync.report.estimator import UNNAMED_ESTIMATOR, estimator_points, row_estimators
from evtsync.report.markdown import (
    Alert,
    Section,
    Skipped,
    Table,
    fmt,
    fmt_ci,
)


def _ratio_line(agreement: dict[str, Any] | None) -> str:
    """The agreement the stage recorded (:func:`evtsync.predict.tables.agreement_summary`), as a sentence."""
    if not agreement:
        return ("Predicted / measured: not recorded by this run folder's predicted-vs-measured stage (an evtsync "
                "that left it to the report); rerun `evtsync run --force` to add it.")
    groups = agreement.get("groups")
    text = (f"Predicted (the point estimate) / measured: median {fmt(agreement.get('ratio_median'))}, range "
            f"{fmt(agreement.get('ratio_min'))} – {fmt(agreement.get('ratio_max'))} over {groups} workload group(s)")
    if agreement.get("inside") is not None:
        text += f"; measured mean inside the predicted {PCT} interval in {agreement['inside']} of {groups}"
    return text + "."


def _beyond_m_table(beyond: pd.DataFrame, m: int) -> Table | Skipped:
    """The rows of groups larger than the fitted sample size m: the extrapolation k = n/m > 1."""
    if not {"k", "ratio", "within_agreement"} <= set(beyond.columns):
        return Skipped("No \"beyond m\" table: this run folder's predicted-vs-measured table lacks the columns k, "
                       "ratio and within_agreement (written by an evtsync that left them to the report); rerun "
                       "`evtsync run --force` to add them.")
    estimator = estimator_words(beyond)
    return Table(pd.DataFrame({
        "workload": beyond["workload"], "GPU": beyond["gpu"], "precision": beyond["precision"],
        "n": beyond["n"], "k = n/m": beyond["k"], "estimator": _row_estimators(beyond),
        "collectives": beyond["n_collectives"],
        f"measured µs [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(
            beyond["measured_mean_us"], beyond["measured_lo_us"], beyond["measured_hi_us"], strict=True)],
        f"predicted µs [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in zip(
            point_column(beyond, "predicted", "_us"), beyond["predicted_lo_us"], beyond["predicted_hi_us"],
            strict=True)],
        "predicted / measured": beyond["ratio"].round(3),
        # agreement: within ±PVM_AGREEMENT *and* inside the interval (a table written before issue 45
        # marked the first alone: the conjunction is taken here too)
        f"agrees (within ±{PVM_AGREEMENT:.0%} and inside the interval)":
            beyond["within_agreement"].astype(bool) & beyond["inside_interval"].astype(bool),
        "inside interval": beyond["inside_interval"].astype(bool)}),
        f"Beyond the fitted sample size (n > m = {m}): the tail fitted on samples of m ranks is carried to the "
        f"whole group of n ranks (k = n/m > 1), an extrapolation in the domain size that the fit never sees "
        f"as one sample; estimator: {estimator} (docs/methodology.md, \"Predicting tau(n)\").")


def _row_estimators(table: pd.DataFrame) -> list[str]:
    """Per row: "ranktail (default)", "centred (fallback)" for a row the default could not give (its
    ``estimator_note`` says why), or the plain name (a row of an estimator asked for by name)."""
    if "estimator" not in table:
        return list(row_estimators(table))
    notes = table["estimator_note"].fillna("").astype(str) if "estimator_note" in table else [""] * len(table)
    return [f"{e} (fallback)" if note else f"{e} (default)" if e == DEFAULT_ESTIMATOR else e
            for e, note in zip(table["estimator"].astype(str), notes, strict=True)]


def estimator_words(table: pd.DataFrame) -> str:
    """The estimators of a predicted-vs-measured table's rows in words, each with its point
    (:func:`~evtsync.report.estimator.estimator_points`), with a fallback's reason."""
    if "estimator" not in table:
        return (f"{UNNAMED_ESTIMATOR} (a run folder from before the estimators were named; "
                f"{estimator_points(table)})")
    names = [f"{label} ({estimator_points(table, e)})" for label, e in
             dict.fromkeys(zip(_row_estimators(table), table["estimator"].astype(str), strict=True))]
    notes = sorted({str(v) for v in table.get("estimator_note", pd.Series(dtype=str)).fillna("") if v})
    return ", ".join(names) + (f" ({'; '.join(notes)})" if notes else "")


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    pvm = ctx.table("predicted_vs_measured")
    title = "Predicted vs measured straggler delay"
    if pvm is None or pvm.empty:
        return [Section(title, [ctx.why_not("predicted-vs-measured")], anchor="pvm")]
    pvm, left_out = ctx.estimator.rows(pvm, "predicted vs measured")
    if pvm.empty:
        return [Section(title, [Skipped(f"Skipped — {left_out}.")], anchor="pvm")]
    selection = ctx.stage("predicted-vs-measured").get("summary", {}).get("selection", "")
    m = ctx.manifest.get("options", {}).get("m", DEFAULT_M)
    ns = sorted({int(n) for n in pvm["n"]})
    pvm_fig = functools.partial(pred_figs.predicted_vs_measured, pvm)
    items: list[Any] = [
        Alert(f"In-sample: the fit was made on the z-scores of the very blocks whose following collectives are "
              f"measured here (group sizes n = {', '.join(map(str, ns))}; m = {m}"
              + (", so k = n/m = 1: no extrapolation in the domain size either" if ns == [m] else "")
              + "). Agreement shows that the model describes its own data; it is not a test of prediction.",
              level="warning"),
        ctx.figure(pvm_fig, "predicted-vs-measured", f"In-sample. Measured mean straggler delay (mean − min NCCL "
                   f"kernel duration over the ranks, averaged over {selection}; error bars: {PCT} t interval of the "
                   f"mean) against the predicted tau(n) by {estimator_words(pvm)} "
                   f"and b the pooled sd of the preceding blocks (error bars: {PCT} interval), per workload "
                   "(methodology §7)."),
        "In-sample. " + (_ratio_line(ctx.stage("predicted-vs-measured").get("summary", {}).get("agreement"))
                         if not left_out else _ratio_line(agreement_summary(pvm) if "ratio" in pvm else None))]
    if left_out:
        items.insert(1, Alert(f"{left_out}.", level="warning"))
    beyond = pvm[pvm["beyond_m"].astype(bool)] if "beyond_m" in pvm else pvm[pvm["n"].astype(int) > int(m)]
    if len(beyond):
        items.append(_beyond_m_table(beyond, int(m)))
    sections = [Section(f"{title} (in-sample)", items, anchor="pvm")]
    hold = ctx.table("predicted_vs_measured_holdout")
    summary = ctx.stage("predicted-vs-measured").get("summary", {})
    hold_left = ""
    if hold is not None and len(hold):
        hold, hold_left = ctx.estimator.rows(hold, "out-of-sample check")
    if hold is not None and len(hold):
        split = summary.get("holdout", {})
        shown = pd.DataFrame({
            "workload": hold["workload"], "GPU": hold["gpu"], "precision": hold["precision"], "n": hold["n"],
            "estimator": _row_estimators(hold),
            "later block–collective pairs": hold["n_collectives"],
            f"measured µs [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(hold["measured_mean_us"], hold["measured_lo_us"], hold["measured_hi_us"], strict=True)],
            f"predicted µs [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(point_column(hold, "predicted", "_us"), hold["predicted_lo_us"], hold["predicted_hi_us"], strict=True)],
            "inside interval": hold["inside_interval"].astype(bool)})
        sections.append(Section("Out-of-sample check: later collectives from earlier ones", [
            f"{split.get('description', 'A fit to the earlier collectives predicts the later ones.')} "
            + _ratio_line(split.get("agreement") if not hold_left else
                          agreement_summary(hold) if "ratio" in hold else None),
            *([Alert(f"{hold_left}.", level="warning")] if hold_left else []),
            Table(shown, f"Out-of-sample: predicted (estimator {estimator_words(hold)}; {PCT} interval: the "
                         f"ranktail posterior, or the normal approximation of the MLE) against measured ({PCT} t interval of the mean) mean "
                         "straggler delay of the later collectives, which the fit never saw.")],
            level=3, anchor="pvm-holdout"))
    else:
        reason = hold_left or summary.get("holdout_reason") or ("this run folder has no out-of-sample table "
                                                               "(tables/predicted_vs_measured_holdout.parquet)")
        sections.append(Section("Out-of-sample check", [Skipped(f"Skipped — {reason}.")], level=3,
                                anchor="pvm-holdout"))
    return sections

