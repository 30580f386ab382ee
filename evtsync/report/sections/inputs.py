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
        ranks = int(sub["rank"].nunique()) if "rank" in sub else len(sub)
        rows.append({"workload": w, "GPU": sub["gpu"].iloc[0], "ranks": ranks,
                     "trace files": len(sub),  # a rank's trace may be split into windows, one file each
                     "events": int(sub["n_events"].sum()) if "n_events" in sub else None,
                     "process groups": len(g),
                     "PGs (label: ranks, collectives)": "; ".join(f"{r.pg}: {r.pg_ranks} ({r.n_collectives})"
                                                            for r in g.itertuples()) if len(g) else "none"})
    return [Section("Inputs", [Table(pd.DataFrame(rows), "One row per workload (one job's traces): ranks "
                                                         "counted as distinct ranks, beside the trace files read (a "
                                                         "rank's trace may span several files); process groups as "
                                                         "aligned (methodology §2).")],
                    anchor="inputs")]

