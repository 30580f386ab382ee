"""The report of a run folder (or of one fit): self-contained HTML plus a Markdown summary.

``build_report(source, out)`` reads what ``evtsync run`` wrote (``manifest.json``, the
tables in ``tables/``, the fits in ``fits/``), draws the figures into ``out/figures/`` as PNG
(and SVG with ``svg=True``; ``evtsync report --svg``), and writes ``out/report.html`` (every
figure embedded as a base64 PNG, styles inline: it opens without a network) and
``out/report.md``. Given a single fit (a folder with ``fit.nc`` or a ``.nc`` file) it reports
that fit alone (:mod:`evtsync.report.fit`). The report only reads: the sections
(:mod:`evtsync.report.sections`, one module each, registered in one list) show the stages'
tables; :mod:`evtsync.report.render` is the one HTML renderer and stylesheet. The text is built
first; the figures are then drawn, by one worker process per idle core where that pays, else in
this process (:meth:`~evtsync.report.context.ReportContext.draw_figures`).

Every interval is a central ``evtsync.core.defaults.INTERVAL_LEVEL`` (90%) interval (credible for
posteriors, confidence for MLE and measured means) unless a caption says otherwise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evtsync.core.errors import InputError
from evtsync.core.tableio import write_text_atomic
from evtsync.plots.base import PLOT_MODULES
from evtsync.report.context import PCT, ReportContext
from evtsync.report.fit import fit_sections
from evtsync.report.markdown import Section, render_markdown
from evtsync.report.render import render_html
from evtsync.report.sections import RUN_SECTIONS
from evtsync.runfolder.layout import REPORT_HTML, REPORT_MD

log = logging.getLogger("evtsync.report.html")


__all__ = ["REPORT_HTML", "REPORT_MD", "build_report", "render_html", "run_sections", "timestamp_text"]


def run_sections(run_dir: Path, out: Path, manifest: dict[str, Any],
                 load_fit: Callable[[Path], Any] | None = None, svg: bool = False,
                 workers: int | None = None, figure_cache: str | os.PathLike[str] | None = None,
                 estimator: str | None = None) -> tuple[list[Section], list[Path]]:
    """The document of a run folder, and the figure files written for it (``load_fit``: how to
    read a fit's tree, :func:`evtsync.evt.bayesfit.load_fit` by default; ``svg``: each figure as
    SVG too; ``workers``: processes drawing the figures, see :meth:`ReportContext.draw_figures`;
    ``figure_cache``: a folder of figures drawn before, see :class:`FigureCache`; ``estimator``: the
    estimator of tau(n) whose rows the report shows, see :mod:`evtsync.report.estimator`)."""
    ctx = ReportContext(run_dir, out, manifest, load_fit, svg, figure_cache, estimator)
    # (with a figure cache the figures may all be there: the pool starts only for those to draw;
    # by default whether a pool pays is known only once the figures are planned)
    if figure_cache is None and workers is not None and ctx.figure_workers(workers) > 1:
        from evtsync.core.parallel import start_fork_server

        start_fork_server(PLOT_MODULES)  # it imports matplotlib while the text is built here
    sections: list[Section] = []
    for builder in RUN_SECTIONS:
        sections += builder(ctx)
    ctx.draw_figures(workers)
    return sections, ctx.written


def timestamp_text(stamp: Any) -> str:
    """An ISO timestamp of the manifest to the second, in UTC (``2026-12-01 09:35:28 UTC``)."""
    from datetime import UTC, datetime

    if not stamp:
        return "?"
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
        return when.strftime("%Y-%m-%d %H:%M:%S UTC")
    return when.strftime("%Y-%m-%d %H:%M:%S")


def build_report(source: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
                 load_fit: Callable[[Path], Any] | None = None, svg: bool = False,
                 workers: int | None = None, figure_cache: str | os.PathLike[str] | None = None,
                 estimator: str | None = None) -> list[Path]:
    """Write ``report.html``, ``report.md`` and ``figures/`` (PNG; with ``svg`` each figure as SVG
    too) for a run folder or a fit; returns every file written (figures first). ``load_fit`` reads
    a run's fit trees (the pipeline passes its own, so that a fit the stages read is not read
    again); default :func:`evtsync.evt.bayesfit.load_fit`. ``workers``: processes that draw the
    figures (default one per idle core where that pays, else this process; 1 draws them in this
    process). ``figure_cache``: a folder where
    figures are kept by a hash of their input tables and the code (:class:`FigureCache`), so a
    figure whose data has not changed is copied, not drawn again; None: every figure is drawn.
    ``estimator``: the estimator of tau(n) whose rows the report shows (``evtsync report
    --estimator``; :mod:`evtsync.report.estimator`); None: the run's own. A run folder without rows
    of it, or a fit (whose report has no tau(n)), is refused with ``InputError`` before anything
    is written."""
    from evtsync.evt.bayesfit import FIT_FILE
    from evtsync.runfolder.layout import MANIFEST, enclosing_run, read_verified_manifest

    src = Path(source)
    if (src / MANIFEST).is_file():
        manifest = read_verified_manifest(src)  # tables and fits as the run wrote them, or refused
        from evtsync.report.estimator import check_report_estimator

        check_report_estimator(src, manifest, estimator)
        dest = Path(out) if out else src
        sections, written = run_sections(src, dest, manifest, load_fit, svg, workers, figure_cache, estimator)
        name = src.resolve().name
        title = f"evtsync report: {name}"
        subtitle = (f"Run folder {src}; evtsync {manifest.get('evtsync_version', '?')}; last updated "
                    f"{timestamp_text(manifest.get('updated'))}. Intervals are central {PCT} intervals. Tables and "
                    f"figures ({'PNG and SVG' if svg else 'PNG'}) lie beside this file.")
    else:
        fit_file = src / FIT_FILE if src.is_dir() else src
        if not fit_file.is_file():
            raise InputError(f"{src}: neither a run folder ({MANIFEST}) nor a fit ({FIT_FILE} or a .nc file)")
        if estimator is not None:
            raise InputError(f"--estimator {estimator}: {src} is one fit, whose report shows no tau(n); give a run "
                             f"folder (or leave out --estimator)")
        if out is None and not src.is_dir():
            raise InputError(f"{src}: a fit file: its report (report.html, report.md, figures/) is written only where "
                             f"-o DIR says (-o {src.parent or '.'} to write it beside the file)")
        dest = Path(out) if out else src
        run_dir = enclosing_run(dest)
        if run_dir is not None:
            raise InputError(f"{dest}: {'is' if run_dir == dest.resolve() else 'lies inside'} the run folder "
                             f"{run_dir}, whose files its manifest lists: write this fit's report elsewhere with -o "
                             f"DIR (the run's own report: evtsync report {run_dir})")
        sections, written = fit_sections(fit_file, dest, svg, workers, figure_cache)
        title = f"evtsync report: fit {fit_file.stem if fit_file.name != FIT_FILE else src.name}"
        subtitle = f"Fit file {fit_file}. Intervals are central {PCT} credible intervals."
    dest.mkdir(parents=True, exist_ok=True)
    html_path = write_text_atomic(dest / REPORT_HTML, render_html(title, subtitle, sections))
    md_path = write_text_atomic(dest / REPORT_MD, render_markdown(title, sections, dest))
    log.info("report written: %s (%d figures)", html_path, sum(p.suffix == ".png" and p.parent.name != "narrow" for p in written))
    return [*written, html_path, md_path]

