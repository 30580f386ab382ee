"""The inputs: one row per workload (ranks, events, process groups)."""

from __future__ import annotations

import pandas as pd

from evtsync.report.context import ReportContext
from evtsync.report.markdown import (
    Section,
    Table,
)


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    traces = ctx.table("tax_traces")
    groups = ctx.table("tax_groups")
    if traces is None:
        return [Section("Inputs", [ctx.why_not("tax")], anchor="inputs")]
    rows = []
    for w, sub in traces.groupby("workload", sort=True):
        g = groups[groups["workload"] == w] if groups is not None and len(groups) else pd.DataFrame()
        rows.append({"workload": w, "GPU": sub["gpu"].iloc[0], "ranks": len(sub),
                     "events": int(sub["n_events"].sum()) if "n_events" in sub else None,
                     "process groups": len(g),
                     "PGs (label: ranks, collectives)": "; ".join(f"{r.pg}: {r.pg_ranks} ({r.n_collectives})"
                                                            for r in g.itertuples()) if len(g) else "none"})
    return [Section("Inputs", [Table(pd.DataFrame(rows), "One row per workload (one job's traces, one file per "
                                                         "rank); process groups as aligned (SPEC §2).")],
                    anchor="inputs")]

