"""The files of the run folder."""

from __future__ import annotations

import pandas as pd

from evtsync.report.context import ReportContext
from evtsync.report.markdown import (
    Section,
    Table,
)
from evtsync.runfolder.layout import REPORT_HTML, REPORT_MD


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    rows = []
    for name, entry in ctx.manifest.get("stages", {}).items():
        for rel in entry.get("outputs", {}):
            if not rel.startswith(("figures/", "inputs/")) and rel not in (REPORT_HTML, REPORT_MD):
                rows.append({"stage": name, "file": rel})
    return [Section("Files of the run", [Table(pd.DataFrame(rows), "Tables (Parquet) and fits (netCDF, ArviZ layout) "
                                                                   "in the run folder; manifest.json holds each stage's "
                                                                   "content hash and status.")], anchor="files")]

