"""The PSIS-LOO comparison of the Bayesian fits."""

from __future__ import annotations

from typing import Any

import pandas as pd

from evtsync.report.context import ReportContext
from evtsync.report.markdown import (
    Alert,
    Section,
    Table,
    fmt,
)


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    table = ctx.table("compare")
    if table is None:
        return [Section("Model comparison", [ctx.why_not("compare")], anchor="compare")]
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
        verdict_items[0] = f"Verdict: {verdict_items[0]}"
    return [Section("Model comparison", [
        *verdict_items,
        Table(shown, "PSIS-LOO comparison of the Bayesian fits on the same z-scores (methodology §6): expected log pointwise "
                     "predictive density with its standard error, difference to the best model with the standard "
                     "error of the difference (a difference under about 2 standard errors does not separate the "
                     "models), effective number of parameters, observations whose Pareto k exceeds "
                     "0.7 (unreliable LOO). Rows in red: fit not converged.", flag="not converged")],
        anchor="compare")]

