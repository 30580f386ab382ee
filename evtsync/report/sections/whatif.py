"""What if: tau(n) of hardware without traces (the named presets), from ``tables/whatif.parquet``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from evtsync.defaults import INTERVAL_LEVEL as LEVEL
from evtsync.report.context import PCT, ReportContext
from evtsync.report.markdown import (
    Section,
    Skipped,
    Table,
    fmt,
    fmt_ci,
)


def build(ctx: ReportContext) -> list[Section]:
    """What will hardware without traces pay? tau(n) of the named presets (reference.PRESETS),
    drawn from the main fit's population when the GPU is not in the fit (SPEC §7)."""
    from evtsync.errors import EvtsyncError
    from evtsync.evt.predict import tau_table
    from evtsync.reference import PRESETS, REFERENCE_TFLOPS

    title = "What if: hardware without traces"
    tau = ctx.table("tau")
    if tau is None or tau.empty or "b_us" not in tau.columns:
        return [Section(title, [ctx.why_not("prediction")], anchor="whatif")]
    fit, name = ctx.main_fit()
    if fit is None:
        return [Section(title, [Skipped("Skipped — no main Bayesian fit in this run.")], anchor="whatif")]
    ref = tau[(tau["model"] == name) & (tau.get("gpu", "") == "H200") & (tau.get("precision", "") == "bf16")]
    b_source = "the H200 bf16 cell's b (the paper's reference GPU)"
    if ref.empty:
        ref, b_source = tau[tau["model"] == name], "the median b over the fitted cells (no H200 bf16 cell)"
    b_ref = float(np.median(ref["b_us"]))
    m = int(round(float((tau["n"] / tau["k"]).median()))) if "k" in tau.columns else 4
    rows, notes = [], []
    for preset, spec in PRESETS.items():
        factor = float(spec["tflops"]) / REFERENCE_TFLOPS
        n = int(spec["n"])
        if n % m:
            notes.append(f"{preset}: n = {n} is not a multiple of m = {m}")
            continue
        try:
            t = tau_table(fit, [n], b_ref / factor, m, LEVEL, gpu=str(spec["gpu"]), precision="bf16")
        except EvtsyncError as exc:
            return [Section(title, [Skipped(f"Skipped — {exc}")], anchor="whatif")]
        for r in t.itertuples():
            rows.append({"preset": preset, "GPU": spec["gpu"], "n": n, "FLOPS factor": round(factor, 3),
                         "prediction": getattr(r, "prediction_kind", "cell"),
                         f"tau(n) µs [{PCT} CrI]": fmt_ci(r.tau_mean_us, r.tau_lo_us, r.tau_hi_us),
                         "NVLink GB/s": spec["nvlink_gbps"], "TFLOPS": spec["tflops"],
                         "TFLOPS from": spec.get("tflops_source", ""), "source": spec["source"]})
    items: list[Any] = [Table(pd.DataFrame(rows), (
        f"tau(n) of bf16 domains that have no traces, from {name}: a GPU absent from the fit is drawn from the "
        f"hierarchy's population (a new GPU deviation and cell term per posterior draw: 'population', wider "
        f"intervals); b = {b_source}, {fmt(b_ref)} µs, divided by the preset's FLOPS over the H200's "
        f"{REFERENCE_TFLOPS:g} TFLOPS (SPEC §8). n and NVLink GB/s are the paper's Table 1; its Table 1 lists no "
        f"TFLOPS: 'TFLOPS from' says whether a value is the paper's (H200) or an NVIDIA datasheet's (named in "
        f"'source'). Presets: evtsync.reference.PRESETS; any other with "
        f"`evtsync predict FIT --gpu G --precision P --n N --flops-factor F`."))]
    if not fit.converged:
        items.insert(0, f"WARNING: {name} did not converge; these predictions inherit it.")
    items += [f"Not predicted: {note}." for note in notes]
    return [Section(title, items, anchor="whatif")]

