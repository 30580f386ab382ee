"""``evtsync report FIT_OR_RUN_DIR``: the self-contained HTML report and Markdown summary."""

from __future__ import annotations

import argparse

from evtsync.cli._common import add_estimator_argument, add_out_argument, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``report`` command."""
    parser = sub.add_parser(
        "report", help="HTML report (figures embedded) and Markdown summary of a run folder or a fit",
        description="Write report.html (self-contained: every figure embedded, no network needed), report.md and "
        "figures/ (PNG; --svg adds SVG) for a run folder written by `evtsync run`, or for one Bayesian fit (a folder "
        "holding fit.nc, or a .nc file). The report is organised per GPU model and precision; non-converged fits "
        "and failed stages are flagged in red at the top.")
    parser.add_argument("source", metavar="FIT_OR_RUN_DIR", help="run folder (with manifest.json) or fit (folder or .nc)")
    add_out_argument(parser, "own", "folder of the report (default: the run folder, or the fit folder that holds "
                     "fit.nc; required for a .nc file: -o beside it writes there). Never inside a run folder other "
                     "than the one reported: its files are the ones its manifest lists", metavar="DIR")
    parser.add_argument("--svg", action="store_true",
                        help="also save each figure as SVG (vector, for papers) beside its PNG; slower")
    parser.add_argument("-j", "--jobs", type=positive_int, default=None, metavar="N",
                        help="processes that draw the figures (default: one per idle core where that costs at most 10%% "
                             "more CPU than this process, else this process; 1: in this process)")
    add_estimator_argument(parser, help_text="estimator of tau(n) whose tau(n), B*, what-if and predicted-vs-measured "
                           "rows the report shows (default: the one the run used, from its manifest, with its "
                           "labelled fallback rows): ranktail, centred (the main GEV model's) or paper. A named "
                           "estimator is shown strictly: rows the run stored by another estimator are left out and "
                           "counted; a run folder without tau(n) rows of it is refused")
    parser.add_argument("--json", action="store_true", help="print the written files and notes as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``evtsync report``."""
    from pathlib import Path

    from evtsync.core.errors import InputError
    from evtsync.report.html import REPORT_HTML, REPORT_MD, build_report
    from evtsync.runfolder.layout import MANIFEST, being_written, incomplete_notes, read_manifest

    if being_written(args.source):
        raise InputError(f"{args.source}: an `evtsync run` is writing this folder now; run `evtsync report` "
                         "when it has finished (it writes the report itself at the end)")
    if args.out:
        from evtsync.core.tableio import check_output_dir

        check_output_dir(args.out, "--out")
    written = build_report(args.source, args.out, svg=args.svg, workers=args.jobs, estimator=args.estimator)
    html = next(p for p in written if Path(p).name == REPORT_HTML)
    md = next(p for p in written if Path(p).name == REPORT_MD)
    is_run = (Path(args.source) / MANIFEST).is_file()
    notes = incomplete_notes(read_manifest(args.source)) if is_run else []
    if args.json:
        from evtsync.cli._common import emit_json
        from evtsync.report.estimator import run_estimator

        # the estimator whose tau(n) the report shows (None for a fit's report, which has none)
        shown = (args.estimator or run_estimator(read_manifest(args.source))) if is_run else None
        emit_json({"report": html, "summary": md, "figures": [p for p in written if p not in (html, md)],
                   "notes": notes, "estimator": shown, "estimator_asked": args.estimator is not None})
        return 0
    print(f"report: {html}\nsummary: {md}\nfigures: {len(written) - 2} file(s) in {Path(html).parent / 'figures'}")
    import sys

    for note in notes:  # a partial study or rank set is said here too, not only in the report
        print(note, file=sys.stderr)
    return 0
