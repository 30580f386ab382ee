"""The inputs: one row per workload (ranks, events, process groups)."""

from __future__ import annotations

import pandas as pd

from evtsync.report.context import ReportContext
from evtsync.report.markdown import (
    Section,
    Skipped,
    Table,
)
from evtsync.report.wording import all_cpu, device_word


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    workloads = ctx.table("tax_workloads")
    groups = ctx.table("tax_groups")
    if ctx.table("tax_traces") is None:
        return [Section("Inputs", [ctx.why_not("tax")], anchor="inputs")]
    if workloads is None:
        return [Section("Inputs", [Skipped("No inputs table: this run folder has no tables/tax_workloads.parquet (its "
                                           "tax stage was run by an evtsync that left the counts to the report); "
                                           "rerun `evtsync run --force` to add it.")], anchor="inputs")]
    rows = []
    device = device_word(all_cpu(workloads["gpu"]))  # "device" on a CPU-only run (issue 46)
    for r in workloads.sort_values("workload").itertuples(index=False):
        g = groups[groups["workload"] == r.workload] if groups is not None and len(groups) else pd.DataFrame()
        rows.append({"workload": r.workload, device: r.gpu, "ranks": int(r.ranks), "trace files": int(r.trace_files),
                     "events": None if pd.isna(r.events) else int(r.events),
                     "process groups": int(r.process_groups),
                     "PGs (label: ranks, collectives)": "; ".join(f"{p.pg}: {p.pg_ranks} ({p.n_collectives})"
                                                            for p in g.itertuples()) if len(g) else "none"})
    return [Section("Inputs", [Table(pd.DataFrame(rows), "One row per workload (one job's traces): ranks "
                                                         "counted as distinct ranks, beside the trace files read (a "
                                                         "rank's trace may span several files); events over its "
                                                         "files; process groups as aligned (methodology §2).")],
                    anchor="inputs")]
