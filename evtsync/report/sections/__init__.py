"""The sections of a run's report, one module each, in the order the report shows them.

Each module has ``build(ctx) -> list[Section]``: it reads the run folder's tables through the
:class:`~evtsync.report.context.ReportContext` and returns its sections (or one saying why it
was skipped, with what to do). A new section is a module plus one entry in :data:`RUN_SECTIONS`.
"""

from __future__ import annotations

from collections.abc import Callable

from evtsync.report.context import ReportContext
from evtsync.report.markdown import Section
from evtsync.report.sections import (
    compare,
    convergence,
    files,
    flops,
    gpu,
    inputs,
    prediction,
    pvm,
    stages,
    summary,
    truth,
    whatif,
    xi,
)

SectionBuilder = Callable[[ReportContext], list[Section]]

#: The run report's sections, in order.
RUN_SECTIONS: list[SectionBuilder] = [
    summary.build, inputs.build, gpu.build, xi.build, compare.build, prediction.build, flops.build,
    whatif.build, pvm.build, truth.build, convergence.build, stages.build, files.build,
]
