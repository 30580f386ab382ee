"""The main job: traces → tax → attribution → z-scores → fits → predictions → report.

``run_pipeline(RunOptions(...))`` runs the stages of a study in order and writes every stage's
output into one run folder as soon as the stage finishes; a rerun reuses the stages whose
inputs did not change and resumes an interrupted run. Modules:

- :mod:`~evtsync.pipeline.options` — :class:`RunOptions` (checked before any work), workloads;
- :mod:`~evtsync.pipeline.engine` — stages, cache keys, resume, manifest, lock, temporaries;
- :mod:`~evtsync.runfolder.layout` — the run folder's layout and queries on it (the report's view);
- :mod:`~evtsync.pipeline.stages` — the stage bodies, each calling the library.
"""

from __future__ import annotations

from collections.abc import Callable

from evtsync.pipeline.engine import (
    NotApplicable,
    Run,
    Stage,
    StageEvent,
    Unavailable,
    execute,
    source_digest,
)
from evtsync.pipeline.options import RunOptions, Workload, default_out, discover_workloads
from evtsync.pipeline.stages import build_stages
from evtsync.runfolder.layout import (
    FITS,
    MANIFEST,
    MANIFEST_FORMAT,
    STATUS_DONE,
    STATUS_FAILED,
    STATUS_NA,
    STATUS_UNAVAILABLE,
    TABLES,
    fitted_models,
    main_model,
    read_manifest,
    stage_table,
)


def run_pipeline(options: RunOptions, on_stage: Callable[[StageEvent], None] | None = None) -> Run:
    """Run (or resume) every stage of a study into ``options.out``; returns the finished run.

    Stage failures (the package's own errors) are recorded, not raised; the caller reads
    ``run.manifest["stages"]``. Bad options and output paths are refused before any work.

    Parameters
    ----------
    options : RunOptions
        What to run: traces or the demo, output folder, models, sampler settings, ...
    on_stage : callable or None, default None
        Called with a :class:`StageEvent` when a stage starts, runs or is reused.

    Returns
    -------
    Run
        The finished run: its folder (``run.out``), manifest (``run.manifest``, with every
        stage's status) and tables (``run.table("tables/summary.parquet")``, ...). Where logging
        is not set up (no handler on the ``evtsync`` logger or above it: a notebook), the
        warnings are not printed one by one: ``run.warnings`` holds each once with its count,
        and one line says how many there were.

    Raises
    ------
    InputError
        Bad options or output path, or another ``evtsync run`` writing the same folder.
    """
    import logging

    run = Run(options, on_stage)
    logger = logging.getLogger("evtsync")
    if logger.hasHandlers():  # the command line's handler, or the user's logging set-up: theirs to show
        return execute(run, build_stages)
    # logging not set up (a notebook, a script): Python would print every warning as it comes
    # (the notebook's first run printed 28 lines); they are kept, with their counts, in
    # ``run.warnings`` and said in one line at the end (issue 49)
    from evtsync.core.progress import WarningCollector

    collector = WarningCollector()
    logger.addHandler(collector)
    try:
        return execute(run, build_stages)
    finally:
        logger.removeHandler(collector)
        run.warnings = collector.counted()
        if run.warnings:
            logging.getLogger("evtsync.pipeline").warning(
                "evtsync run: %d warning(s), %d distinct, kept in run.warnings (logging.basicConfig() shows each "
                "as it comes)", sum(c for _, c in run.warnings), len(run.warnings))


__all__ = [
    "FITS", "MANIFEST", "MANIFEST_FORMAT", "STATUS_DONE", "STATUS_FAILED", "STATUS_NA", "STATUS_UNAVAILABLE",
    "TABLES", "NotApplicable", "Run", "RunOptions", "Stage", "StageEvent", "Unavailable", "Workload",
    "build_stages", "default_out", "discover_workloads", "fitted_models", "main_model", "read_manifest",
    "run_pipeline", "source_digest", "stage_table",
]
