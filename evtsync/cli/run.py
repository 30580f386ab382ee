"""``evtsync run [TRACES…]``: the main job, from traces to the report, resumable."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from evtsync.core.progress import write_line

log = logging.getLogger("evtsync.cli.run")

#: Exit status of a study in which a workload failed while the others' results were written.
PARTIAL_STUDY_EXIT = 3


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``run`` command."""
    from evtsync.cli._common import (
        HOST_CORES_HELP,
        ListOption,
        add_out_argument,
        add_scale_arguments,
        add_trace_arguments,
        byte_size,
    )
    from evtsync.core.defaults import (
        DEFAULT_CHAINS,
        DEFAULT_DRAWS,
        DEFAULT_EPS,
        DEFAULT_M,
        DEFAULT_SAMPLER,
        DEFAULT_SEED,
        DEFAULT_TUNE,
        DEMO_CHAINS,
        DEMO_DRAWS,
        DEMO_TUNE,
        SAMPLERS,
    )
    from evtsync.core.reference import DGX_H200_ALPHA_US
    from evtsync.core.units import SIZE_HELP
    from evtsync.core.vocabulary import TIME_DEFINITIONS

    parser = sub.add_parser(
        "run", help="the main job: traces -> tax -> attribution -> z-scores -> fits -> predictions -> report",
        description="Run every stage of the analysis on one job's traces (one file per rank), or on a "
        "study of several jobs (a folder of trace folders, one per workload), and write tables, fits "
        "and report.html into the run folder. Without TRACES, runs on the bundled demo: a small "
        "synthetic study (A100/H100/H200 x bf16/fp32) generated deterministically. Finished stages "
        "are reused when their inputs did not change (content hashes in manifest.json), so an "
        "interrupted run resumes where it stopped: manifest.json is written before the first stage, so even a run "
        "stopped by a full disk leaves a folder the same command resumes once space is freed.",
        epilog="Stages: demo (without TRACES), tax, zscores, attribution, mle, fit-<model> for every "
        "models/*.toml (opt-in comparators, --comparators bayes-gev: the fits start in a process pool once the "
        "z-scores exist and run beside the attribution and the MLE; otherwise each is listed as not run), rankmodel "
        "(the run's one model), compare (of the GEV fits, opt-in with them), prediction, predicted-vs-measured, "
        "summary (the answer table: tables/summary.parquet and "
        "summary.json), report. Stages that do "
        "not apply to the data are recorded with the reason and listed in the report.")
    add_trace_arguments(parser, required=False,
                        jobs_help="local processes for reading the traces (in-process for small sets), for "
                                  "the Bayesian fits, which then run side by side, and for drawing the report's "
                                  "figures (in-process where a pool would cost more than 10%% more CPU) (default: "
                                  "one per core; 1: everything in this process)")
    add_scale_arguments(parser)
    for action in parser._actions:
        if action.dest == "pg":
            action.help = ("NAME=RANKS[@STREAM] declares a process group (e.g. tp=0-3@84, repeatable); "
                           "a plain NAME chooses the PG whose compute blocks are fitted (default: the "
                           "tensor-parallel group)")
            action.metavar = "NAME[=RANKS[@STREAM]]"
    add_out_argument(parser, "own", "run folder (default fits/demo for the demo, else fits/<name of the trace "
                     "folder>): new, empty or a run folder; never an input folder or inside one", metavar="DIR")
    parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no progress bars or stage lines; warnings and the final summary only")
    parser.add_argument("--json", action="store_true",
                        help="print the outcome as JSON: the answer table (summary.json: one row per GPU × precision), "
                             "run folder, report, every stage's status, reason, wall and CPU seconds (and, when copied "
                             "from the result cache, where and when it was computed), failed workloads "
                             "and notes (the stage lines are not printed)")
    parser.add_argument("--force", action="store_true", help="redo every stage, even those whose inputs did not change (none copied from the "
                        "result cache; what it computes is kept there); also write into a "
                        "non-empty --out that is not a run folder (its files of the same names are replaced)")
    parser.add_argument("--no-result-cache", dest="result_cache", action="store_false",
                        help="compute every stage in this run folder: neither copy stage results that another run "
                             "folder computed with the same inputs, parameters and code from the result cache "
                             "(CACHE/results, see `evtsync cache`) nor keep this run's there (--no-cache implies it)")
    parser.add_argument("--no-report", dest="report", action="store_false", help="stop before the report")
    parser.add_argument("--allow-failed-workloads", action="store_true",
                        help="exit 0 although a workload of the study failed (default: exit 3; either way the "
                        "other workloads' results are written and every output names the failed one)")
    blocks = parser.add_argument_group("blocks and z-scores")
    blocks.add_argument("--m", type=int, default=DEFAULT_M,
                        help=f"ranks per sample of the block maxima (default {DEFAULT_M})")
    blocks.add_argument("--time", choices=TIME_DEFINITIONS, default="busy",
                        help="block time definition (default busy; see `evtsync blocks --help`)")
    fit = parser.add_argument_group("Bayesian fits")
    fit.add_argument("--draws", type=int, default=None,
                     help=f"posterior draws per chain (default {DEFAULT_DRAWS}; demo {DEMO_DRAWS})")
    fit.add_argument("--tune", type=int, default=None,
                     help=f"tuning steps per chain (default {DEFAULT_TUNE}; demo {DEMO_TUNE})")
    fit.add_argument("--chains", type=int, default=None,
                     help=f"chains (default {DEFAULT_CHAINS}; demo {DEMO_CHAINS})")
    fit.add_argument("--seed", type=int, default=DEFAULT_SEED,
                     help=f"random seed of the samplers (default {DEFAULT_SEED}, as `evtsync fit`)")
    fit.add_argument("--sampler", choices=SAMPLERS, default=DEFAULT_SAMPLER,
                     help=f"NUTS sampler (default {DEFAULT_SAMPLER})")
    fit.add_argument("--models-dir", metavar="DIR", default=None,
                     help="folder of model specifications (default: the models shipped with evtsync; see `evtsync models`); "
                          "its rankmodel.toml, when it has one, is the rank model's (else the shipped one)")
    fit.add_argument("--model", dest="models", action=ListOption, default=[], metavar="NAME",
                     examples=("gumbel", "frechet"),
                     help="fit only these models of the models folder (space or comma separated, repeatable; "
                          "default: all, with --comparators bayes-gev; naming models implies it)")
    from evtsync.core.defaults import BAYES_GEV, COMPARATOR_CHOICES

    fit.add_argument("--comparators", action=ListOption, default=[], metavar="NAME", item_choices=COMPARATOR_CHOICES,
                     examples=(BAYES_GEV, BAYES_GEV),
                     help="opt-in comparators of the rank model, the run's one model (space or comma separated, "
                          "repeatable): " + "; ".join(f"{k}: {v}" for k, v in COMPARATOR_CHOICES.items())
                          + ". Default: none of them; the cheap comparators (the GEV MLE per cell, the paper's "
                          "estimator, ranktail) always run, and each opt-in one not asked for is listed as 'not run "
                          "(opt-in: --comparators NAME)'. --model implies bayes-gev")
    bw = parser.add_argument_group("predictions (tau(n) and B*)")
    bw.add_argument("--alpha-us", type=float, default=DGX_H200_ALPHA_US,
                    help=f"per-step latency alpha in µs (default {DGX_H200_ALPHA_US:g}, DGX H200)")
    bw.add_argument("--bytes", type=byte_size, default=None, metavar="S",
                    help=f"buffer size S (default: median message size of the block PG's collectives); {SIZE_HELP}")
    bw.add_argument("--eps", type=float, default=DEFAULT_EPS,
                    help=f"target elasticity of B* in (-1, 0) (default {DEFAULT_EPS:g})")
    whatif = parser.add_argument_group("what-if without stragglers (the attribution stage's replay)")
    whatif.add_argument("--host-cores", metavar="LAYOUT", default=None, dest="host_cores",
                        help=f"{HOST_CORES_HELP}; a job it does not fit (a GPU job, ranks not in the layout) gets no "
                             "replay, with the reason in the stage's record")
    parser.set_defaults(handler=run)


def _settings_word(sampling: dict[str, Any]) -> str:
    """How the demo's sampler settings compare with a real run's defaults (:mod:`evtsync.core.defaults`)."""
    from evtsync.core.defaults import DEFAULT_CHAINS, DEFAULT_DRAWS, DEFAULT_TUNE

    same = (sampling.get("draws"), sampling.get("tune"), sampling.get("chains")) == (
        DEFAULT_DRAWS, DEFAULT_TUNE, DEFAULT_CHAINS)
    return " — the defaults, as a real run" if same else " — the demo's own settings, not a real run's defaults"


def run(args: argparse.Namespace) -> int:
    """Handler of ``evtsync run``: exit 0 when every stage ran or did not apply, 1 when a stage failed,
    3 when a workload of the study failed and the others went on (0 with ``--allow-failed-workloads``)."""
    from evtsync.cli._common import reading_options
    from evtsync.core.errors import InputError
    from evtsync.pipeline import (
        STATUS_FAILED,
        STATUS_NA,
        STATUS_UNAVAILABLE,
        RunOptions,
        StageEvent,
        default_out,
        run_pipeline,
    )
    from evtsync.runfolder.layout import failed_workloads, incomplete_notes
    from evtsync.trace.cache_dir import default_cache_dir

    declared = [p for p in args.pg if "=" in p]
    chosen = [p for p in args.pg if "=" not in p]
    if len(chosen) > 1:
        raise InputError(f"--pg: choose at most one process group to fit ({', '.join(chosen)})")
    cache = reading_options(args)["cache"] if args.traces else None  # the demo is never cached
    # report figures are kept by content (their tables' hash), so the demo's are reused too; the
    # stages' results by their key, across run folders (pipeline.resultcache: the demo's study too)
    figure_cache = None if args.no_cache else Path(args.cache or default_cache_dir()) / "figures"
    result_cache = (None if args.no_cache or not args.result_cache
                    else Path(args.cache or default_cache_dir()) / "results")
    options = RunOptions(
        traces=list(args.traces), out=Path(args.out) if args.out else None, force=args.force,
        draws=args.draws, tune=args.tune, chains=args.chains, seed=args.seed, sampler=args.sampler,
        block_pg=chosen[0] if chosen else None, pg_overrides=declared, m=args.m, time=args.time,
        models_dir=Path(args.models_dir) if args.models_dir else None, models=args.models,
        alpha_us=args.alpha_us, bytes=args.bytes, eps=args.eps, salvage=args.salvage, jobs=args.jobs,
        workers=args.workers, scheduler=args.scheduler, cache=None if cache is None else str(cache),
        figure_cache=None if figure_cache is None else str(figure_cache),
        result_cache=None if result_cache is None else str(result_cache),
        strict=args.strict, allow_partial=args.allow_partial, end_tolerance_us=args.end_tolerance_us,
        ranks_per_host=args.ranks_per_host, report=args.report, rank_from=args.rank_from,
        comm_kernels=list(args.comm_kernel), comparators=sorted(set(args.comparators)), host_cores=args.host_cores)
    options.check()  # bad options and output paths fail here, before any work
    out = options.out or default_out(options)
    quiet = args.quiet or args.json
    if not quiet:
        what = "the bundled demo study" if options.is_demo else " ".join(options.traces)
        s = options.sampling()
        write_line(f"evtsync run: {what} -> {out}  (sampling: {s['draws']} draws, {s['tune']} tune, "
                   f"{s['chains']} chains{_settings_word(s) if options.is_demo and not args.draws else ''}"
                   f"{'' if args.draws or args.tune else ', unless a model sets its own'}); "
                   "per stage: status, CPU time (the stage's cost) and wall time")

    def show(event: StageEvent) -> None:
        """One whole line per stage (written above the progress bar, never through it)."""
        if quiet:
            return
        if event.action == "start":
            log.info("stage %s running", event.stage)
        elif event.action == "reused":
            write_line(f"  {event.stage:<24} reused ({event.status})")
        elif event.action == "cached":
            origin = event.cached_from
            then = (f"; computed {str(origin.get('computed', '?'))[:16].replace('T', ' ')} UTC, CPU "
                    f"{float(origin.get('cpu_seconds') or 0):.1f} s then") if origin else ""
            write_line(f"  {event.stage:<24} {event.status}, copied from the result cache "
                       f"(CPU {event.cpu_seconds:.1f} s{then})")
        else:
            detail = f": {event.reason}" if event.reason else ""
            write_line(f"  {event.stage:<24} {event.status}, CPU {event.cpu_seconds:.1f} s "
                       f"(wall {event.seconds:.1f} s){detail}")

    result = run_pipeline(options, on_stage=show)
    stages = result.manifest.get("stages", {})
    failed = [n for n, e in stages.items() if e.get("status") == STATUS_FAILED]
    skipped = [n for n, e in stages.items() if e.get("status") in (STATUS_NA, STATUS_UNAVAILABLE)]
    report = result.out / "report.html"
    said = sys.stdout
    if args.json:
        return _print_json(result, failed, report if report.is_file() and options.report else None,
                           args.allow_failed_workloads)
    bad_workloads = failed_workloads(result.manifest)
    partial = (f"; INCOMPLETE study: {len(bad_workloads)} of {len(result.workloads)} workload(s) failed "
               f"({', '.join(bad_workloads)})") if bad_workloads else ""
    # one line: the run folder and the report in it (make demo's output fits a screen, issue 49)
    print(f"run folder: {result.out} ({len(stages) - len(failed) - len(skipped)} stage(s) with results, "
          f"{len(skipped)} not applicable or unavailable, {len(failed)} failed{partial})"
          + (f"; report: {report}" if report.is_file() and options.report else ""), file=said)
    for name in failed:
        print(f"  FAILED {name}: {stages[name].get('reason', '')}", file=sys.stderr)
    for note in incomplete_notes(result.manifest):
        print(note, file=sys.stderr)
    if failed:
        return 1
    if bad_workloads and not args.allow_failed_workloads:
        print(f"evtsync run: exit status {PARTIAL_STUDY_EXIT}: {len(bad_workloads)} workload(s) of the study failed "
              f"({', '.join(bad_workloads)}); the results cover the others only (--allow-failed-workloads to "
              "exit 0)", file=sys.stderr)
        return PARTIAL_STUDY_EXIT
    return 0


def _print_json(result: Any, failed: list[str], report: Path | None, allow_failed_workloads: bool) -> int:
    """``run --json``: the outcome as one strict JSON document, the answer table (``summary.json``)
    under ``summary`` (or why there is none); the same exit status as the text."""
    from evtsync.cli._common import emit_json
    from evtsync.runfolder.layout import failed_workloads, incomplete_notes

    stages = result.manifest.get("stages", {})
    bad_workloads = failed_workloads(result.manifest)
    emit_json({
        "run_folder": result.out, "report": report, "workloads": [{"name": w.name, "n_traces": len(w.files)} for w in result.workloads],
        "stages": {name: {"status": e.get("status"), "reason": e.get("reason", ""), "seconds": e.get("seconds"),
                          "cpu_seconds": e.get("cpu_seconds"),
                          # copied from the result cache: the key, where, when and at what cost it was computed
                          "reused_from_cache": e.get("reused_from_cache")} for name, e in stages.items()},
        "failed_stages": failed, "failed_workloads": bad_workloads,
        "notes": incomplete_notes(result.manifest),
        "summary": run_summary(result.out, result.manifest),
    })
    if failed:
        return 1
    return PARTIAL_STUDY_EXIT if bad_workloads and not allow_failed_workloads else 0


def run_summary(run_dir: Path, manifest: dict) -> dict:
    """``summary.json`` of the run folder (the answer table), or a document saying why there is
    none (the summary stage did not run)."""
    import json

    from evtsync.runfolder.layout import SUMMARY_JSON, root_cause

    path = run_dir / SUMMARY_JSON
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    stage, reason = root_cause(manifest, "summary")
    return {"rows": [], "missing": f"no {SUMMARY_JSON}: stage {stage}: {reason or 'not run'}"}
