"""Convergence diagnostics of every Bayesian fit."""

from __future__ import annotations

from evtsync.report.context import ReportContext, fit_rows
from evtsync.report.markdown import (
    Section,
    Table,
)


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    from evtsync.evt.fit import ESS_MIN, RHAT_MAX

    fits = fit_rows(ctx.run_dir, ctx.manifest)
    if fits.empty:
        return []
    fits["not converged"] = (fits["status"] == "done") & (fits["converged"] == False)  # noqa: E712
    return [Section("Convergence diagnostics", [
        Table(fits, f"Every Bayesian fit: converged means max split R-hat ≤ {RHAT_MAX:g}, min bulk ESS ≥ {ESS_MIN} and no divergent "
                    "transition over all free parameters; rows in red did not converge.", flag="not converged")],
        anchor="convergence")]

