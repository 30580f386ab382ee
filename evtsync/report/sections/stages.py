"""The stages of the run: status, reason and seconds of each."""

from __future__ import annotations

from typing import Any

import pandas as pd

from evtsync.report.context import ReportContext
from evtsync.report.markdown import (
    Section,
    Table,
)
from evtsync.runfolder.layout import stage_reason


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    m = ctx.manifest
    rows = []
    for n in m.get("stage_order", []):
        e = m.get("stages", {}).get(n, {})
        if n == "report":
            rows.append({"stage": n, "status": "done", "reason": "this report", "seconds": None})
        else:
            rows.append({"stage": n, "status": e.get("status", "not run"), "reason": stage_reason(e),
                         "seconds": e.get("seconds")})
    stages = pd.DataFrame(rows, columns=["stage", "status", "reason", "seconds"])
    items: list[Any] = []
    na = stages[stages["status"].isin(["not_applicable", "unavailable"])] if len(stages) else stages
    if len(na):
        by_reason = na.groupby("reason", sort=False)["stage"].apply(list)
        items.append("Stages that did not apply: " + "; ".join(f"{', '.join(stages_)} — {reason}"
                                                               for reason, stages_ in by_reason.items()) + ".")
    items.append(Table(stages, "Stages of the run, in order: done, did not apply (with the reason), unavailable "
                               "(module not installed) or FAILED; seconds of work (reused stages keep their first "
                               "run's time; a stage copied from the result cache, the seconds of copying, its "
                               "computation's CPU time in the reason)."))
    return [Section("Stages of the run", items, anchor="stages")]

