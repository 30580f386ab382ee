"""``evtsync attribute TRACES… [-o PATH]``: critical-path attribution of every collective."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

ORDER = 20

from evtsync.core.reference import PAPER_GPU_CAUSES, PAPER_GPU_ONLY_SHARE  # noqa: E402 - the paper's numbers


def register(sub: argparse._SubParsersAction) -> None:
    from evtsync.cli._common import (
        HOST_CORES_HELP,
        add_out_argument,
        add_scale_arguments,
        add_trace_arguments,
    )

    parser = sub.add_parser(
        "attribute", help="why the straggler was late: critical-path attribution (methodology §4)",
        description="Build each rank's event DAG, walk the straggler's and the fastest rank's critical "
        "paths back to the previous collective of the process group and name the principal cause "
        "of every collective (event, category, extra µs, path kind); summarise the cause categories "
        "and the share of GPU-only paths; regress the path's compute difference on the tax. "
        "--pg NAME selects a process group; --pg NAME=RANKS[@STREAM] declares one (as in `tax`).")
    add_trace_arguments(parser)
    add_scale_arguments(parser)
    add_out_argument(parser, "table", "write the per-collective table (.parquet/.csv); also PATH_summary, "
                     "PATH_validation and, with --paths, PATH_paths", old=("--output",))
    parser.add_argument("--paths", action="store_true",
                        help="with -o: also write the straggler's and fastest rank's paths event by event")
    parser.add_argument("--plot", metavar="PATH", help="cause breakdown figure (.png/.svg/.pdf)")
    parser.add_argument("--plot-path", metavar="PATH",
                        help="the straggler's path against the fastest rank's, as a timeline (the paper's "
                             "Fig. 4), for --collective or else the collective with the largest tax")
    parser.add_argument("--collective", metavar="PG:INDEX", default=None,
                        help="the collective --plot-path draws, e.g. stream84:3 (default: the largest tax)")
    parser.add_argument("--same-stream-tolerance-us", type=float, default=3.0,
                        help="prefer a same-stream predecessor finishing within this of the latest "
                             "parent (default 3)")
    parser.add_argument("--category", action="append", default=[], metavar="NAME=REGEX",
                        help="add a cause category for kernel names matching REGEX (checked first; repeatable)")
    parser.add_argument("--perfetto", metavar="OUT.json",
                        help="write one Chrome trace-event file per profiling window (OUT.w<N>.json when there "
                             "are several) merging all ranks, with the straggler paths, causes and root-cause "
                             "links marked, for Perfetto or chrome://tracing")
    parser.add_argument("--what-if", action="store_true", dest="what_if",
                        help="replay the job with each straggler op at its typical (median) duration: the step "
                             "time without stragglers, the slowdown and, per rank and cause, the step time saved by "
                             "fixing that one alone (docs/critical-path.md §8); with -o also PATH_whatif")
    parser.add_argument("--host-cores", metavar="LAYOUT", default=None, dest="host_cores",
                        help=f"with --what-if {HOST_CORES_HELP}")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(handler=run)


def _plot_path(result, which: str | None, path: str) -> None:  # noqa: ANN001 - AttributionResult
    """Draw the straggler-vs-fastest view of one collective (``PG:INDEX`` or the largest tax)."""
    from evtsync.core.errors import InputError
    from evtsync.plots import save_figure
    from evtsync.plots.paths import straggler_vs_fastest

    coll = result.collectives
    if which:
        pg, sep, index = which.rpartition(":")
        if not sep or not index.isdigit():
            raise InputError(f"--collective {which!r}: expected PG:INDEX, e.g. stream84:3")
        rows = coll[(coll["pg"].astype(str) == pg) & (coll["index"] == int(index))]
        if rows.empty:
            raise InputError(f"--collective {which}: no such collective (PGs: {', '.join(sorted(set(coll['pg'].astype(str))))})")
    else:
        rows = coll.sort_values("tau_max_us", ascending=False).head(1)
        if rows.empty:
            raise InputError("--plot-path: no collective was attributed")
    row = rows.iloc[0]
    save_figure(straggler_vs_fastest(result.paths, row["pg"], int(row["index"]), coll), path)
    print(f"path view of {row['pg']}:{int(row['index'])}: {path}")


def run(args: argparse.Namespace) -> int:
    from evtsync.cli._common import align_options, reading_options, sibling_path
    from evtsync.core.errors import InputError
    from evtsync.core.parallel import InProcess, backend_for
    from evtsync.core.tableio import all_or_nothing, write_table
    from evtsync.critpath import categories
    from evtsync.critpath.attribution import attribute
    from evtsync.trace.traceset import expand_inputs, load_traces

    if args.paths and not args.out:
        raise InputError("--paths writes PATH_paths beside the table: give -o/--out PATH")
    if args.host_cores is not None and not args.what_if:
        raise InputError("--host-cores describes the host for the what-if replay: give --what-if too")
    if args.host_cores is not None:  # its form, before the traces are read (the ranks: after)
        from evtsync.critpath.cpushare import parse_host_cores

        parse_host_cores(args.host_cores, None)
    selections = [p for p in args.pg if "=" not in p]
    args.pg = [p for p in args.pg if "=" in p]
    if len(selections) > 1:
        raise InputError(f"--pg: select one process group at a time (got {', '.join(selections)})")
    for text in args.category:
        categories.add_pattern(*categories.parse_category_option(text))
    options = reading_options(args)
    with backend_for(len(expand_inputs(args.traces)), jobs=options.get("jobs"), workers=options.get("workers"),
                     scheduler=options.get("scheduler"), total_bytes=0, parallel_min_bytes=1) as backend:
        common = dict(same_stream_tolerance_us=args.same_stream_tolerance_us,
                      keep_paths=args.paths or bool(args.plot_path),
                      **align_options(args))
        pg = selections[0] if selections else None
        traces = None
        if not isinstance(backend, InProcess):
            print(f"attribution on {backend.name}: one task per rank", file=sys.stderr)
        # per-rank tasks read their own rank and drop it once its DAG is built: no process
        # holds every rank's tables (in this process too, one rank after the other)
        read: dict[str, Any] = {k: options[k] for k in ("salvage", "cache", "comm_kernels", "rank_from") if k in options}
        result = attribute(args.traces, pg, backend=backend, read_options=read, **common)
        whatif = _what_if(args, result, backend, read, align_options(args)) if args.what_if else None
    taxed = result.collectives[result.collectives["status"] != "no_tax"]
    if result.collectives.empty:
        raise InputError("nothing to attribute: no collective (NCCL/communication kernel or gloo:* annotation) "
                         f"in {', '.join(map(str, args.traces))}" + (f" for --pg {pg}" if pg else ""))
    if taxed.empty:
        raise InputError(f"nothing to attribute: all {len(result.collectives)} collective(s) have no tax "
                         "(one rank, or equal durations)")
    n_invalid = result.n_invalid  # left out of the summary and the regressions by attribute()
    with all_or_nothing():  # every output or none (a full disk half-way leaves nothing)
        if args.out:
            write_table(result.collectives, args.out)
            write_table(result.summary, sibling_path(args.out, "summary"))
            write_table(result.validation, sibling_path(args.out, "validation"))
            write_table(result.ranks, sibling_path(args.out, "ranks"))
            if args.paths:
                write_table(result.paths, sibling_path(args.out, "paths"))
            if whatif is not None:
                write_table(whatif.table, sibling_path(args.out, "whatif"))
        if args.plot:
            plot_breakdown(result, args.plot)
        if args.plot_path:
            _plot_path(result, args.collective, args.plot_path)
    if args.perfetto:
        from evtsync.critpath.perfetto import write_perfetto

        whole = traces if traces is not None else load_traces(args.traces, **options)
        for path in write_perfetto(result, whole, args.perfetto):
            print(f"Perfetto trace: {path}")
    if args.json:
        from evtsync.cli._common import emit_json

        emit_json({"gpu_only_share": result.gpu_only_share, "summary": result.summary,
                   "validation": result.validation,
                   "status": result.collectives["status"].value_counts().to_dict(),
                   "cpu_side": result.cpu_side, "ranks": result.ranks, "n_invalid_left_out": n_invalid,
                   **({"what_if": {**whatif.summary(), "stragglers": whatif.table}} if whatif is not None else {})})
        return 0
    _print_report(result, n_invalid)
    if whatif is not None:
        _print_what_if(whatif)
    return 0


def _what_if(args: argparse.Namespace, result, backend, read: dict[str, Any],  # noqa: ANN001
             align: dict[str, Any]):  # noqa: ANN202 - WhatIfResult
    """The counterfactual replay (per-rank lanes on ``backend`` when it is not this process)."""
    from evtsync.core.parallel import InProcess
    from evtsync.critpath.replay import what_if
    from evtsync.sync.collectives import align_collectives
    from evtsync.trace.traceset import load_traces

    per_rank = not isinstance(backend, InProcess)
    traces = load_traces(args.traces, scope="collectives" if per_rank else "all", **read)
    alignment = align_collectives(traces, **align)   # every group: the replay needs all of a rank's collectives
    paths = {int(r): g["path"].astype(str).tolist() for r, g in traces.ranks.groupby("rank")} if per_rank else None
    return what_if(traces, alignment, backend=backend if per_rank else None, paths=paths, read_options=read,
                   cpu=bool(result.cpu_side), host_cores=args.host_cores)


def _print_what_if(w) -> None:  # noqa: ANN001 - CLI rendering only
    print(f"\nwhat-if without stragglers (replay, each straggler op at its median over ranks and steps; "
          f"mean over {w.n_steps} rank-steps of {w.n_ranks} rank(s)):")
    print(f"  step time {w.step_time_ms:.1f} ms measured, {w.step_time_without_stragglers_ms:.1f} ms without "
          f"stragglers (-{w.saving_ms_per_step:.1f} ms, slowdown S = {w.slowdown:.3f})")
    print(f"  durations: {w.durations}")
    if w.cpu_sharing:
        c = w.cpu_sharing
        print(f"  CPU-busy: operators and enqueues; of {c['undecided_slices']} annotation / Python-gap slices "
              f"{c['judged_by_core_mates']} had core-mates' operators beside them, {c['judged_not_busy']} judged "
              f"not busy ({c['not_busy_ms']:.1f} ms); waits never busy")
    for reason, n in w.not_used.items():
        print(f"  not replayed: {n} {reason}")
    if len(w.table):
        print(f"  {'rank':>5}  {'category':<16} {'saving ms/step':>14} {'share':>6}  cause")
        for r in w.table.head(15).itertuples():
            # the cause may already be named in the user's words (docs/critical-path.md §6: "expert_mm > aten::mm")
            label = f"{r.annotation} > {r.cause}" if isinstance(r.annotation, str) \
                and not str(r.cause).startswith(f"{r.annotation} > ") else str(r.cause)
            print(f"  {r.rank:>5}  {r.category:<16} {r.saving_ms_per_step:>14.2f} {r.saving_share:>6.1%}  {label}")
        if len(w.table) > 15:
            print(f"  {len(w.table) - 15} more in PATH_whatif (-o)")


def plot_breakdown(result, path: str) -> None:  # noqa: ANN001 - figure rendering only
    """Bars: shares of GPU cause categories (paper's figures as markers) and of path kinds."""
    from evtsync.plots.base import new_figure, save_figure

    fig, (ax1, ax2) = new_figure(10.0, 4.0, ncols=2)
    gpu = result.summary[result.summary["cause_class"] == "gpu"]
    names = gpu["category"].tolist()
    ax1.bar(names, gpu["share_of_gpu_causes"].to_numpy(), color="tab:blue", label="this trace set")
    ref = [PAPER_GPU_CAUSES.get(n, float("nan")) for n in names]
    ax1.scatter(names, ref, color="black", marker="_", s=300, zorder=3, label="paper")
    ax1.set_ylabel("share of collectives with a GPU cause")
    ax1.set_title("GPU causes")
    ax1.tick_params(axis="x", rotation=30)
    ax1.legend(frameon=False)
    ok = result.collectives[result.collectives["status"] == "ok"]
    kinds = ok["path_kind"].value_counts(normalize=True)
    ax2.bar(kinds.index.tolist(), kinds.to_numpy(), color="tab:orange")
    ax2.axhline(PAPER_GPU_ONLY_SHARE, color="black", lw=0.8, ls="--")
    ax2.text(0, PAPER_GPU_ONLY_SHARE, " paper: GPU-only", va="bottom", fontsize=8)
    ax2.set_ylabel("share of collectives")
    ax2.set_title(f"straggler path kind (n = {len(ok)})")
    ax2.tick_params(axis="x", rotation=30)
    save_figure(fig, path)


def _print_blame(result) -> None:  # noqa: ANN001 - CLI rendering only
    """Collectives whose blame was routed to another collective, and per rank caused vs suffered wait."""
    table = result.collectives
    routed = table[table["root_chain"].fillna(0).astype(int) > 0]
    if len(routed):
        print(f"\nblame routed to another collective ({len(routed)}; chain = hops, root = the collective whose "
              "straggler started the delay):")
        print(f"  {'pg':<12} {'index':>5} {'tau µs':>9} {'straggler':>9} {'root':>5} {'root pg:index':<16} "
              f"{'chain':>5}  root cause")
        for r in routed.sort_values("tau_max_us", ascending=False).head(15).itertuples():
            reason = getattr(r, "root_reason", None)
            print(f"  {str(r.pg):<12} {r.index:>5} {r.tau_max_us:>9.1f} {r.straggler_rank:>9} {r.root_rank:>5} "
                  f"{f'{r.root_pg}:{r.root_index}':<16} {r.root_chain:>5}  {r.root_cause}"
                  + ("  (cycle cut)" if r.root_cycle else "")
                  + (f"  ({reason})" if isinstance(reason, str) else ""))
        if len(routed) > 15:
            print(f"  {len(routed) - 15} more routed collective(s) in the -o table (columns root_*)")
    cycles = int(table["root_cycle"].fillna(False).astype(bool).sum())
    if cycles:
        print(f"  {cycles} chain(s) came back to a collective already on them and were cut there")
    if len(result.ranks):
        print("\nper rank: wait suffered (its own waiting) against wait caused (the others' waiting where it "
              "straggled / where it is the root), µs:")
        for r in result.ranks.itertuples():
            print(f"  rank {r.rank:>5}  straggled {r.straggled:>4} of {r.collectives:<5} suffered "
                  f"{r.wait_suffered_us:>11.0f}  caused {r.wait_caused_us:>11.0f}  as root {r.wait_caused_root_us:>11.0f}")


def _print_report(result, n_invalid: int = 0) -> None:  # noqa: ANN001 - CLI rendering only
    table = result.collectives
    if n_invalid:
        table = table[table["valid"].fillna(False).astype(bool).to_numpy()]
    ok = table[table["status"] == "ok"]
    if result.cpu_side:
        print("CPU-side collectives (gloo): each straggler's main thread from the previous collective of its group "
              "to its enqueue, against the fastest rank's (docs/critical-path.md, CPU-side collectives)")
    others = [f"{n} {s}" for s, n in table["status"].value_counts().items() if s != "ok"]
    print(f"{len(table)} collective(s): {len(ok)} explained" + (f" ({', '.join(others)})" if others else ""))
    if n_invalid:
        print(f"{n_invalid} collective(s) flagged invalid by the alignment checks are left out of this listing, "
              "the cause categories and the regressions (rows kept with valid = False in the table)")
    if table.empty:
        print("no collective in the traces (no NCCL, communication-registry or gloo collective): nothing to attribute")
    if len(ok):
        print("\nlargest taxes and their principal causes (extra µs over the fastest rank):")
        print(f"  {'pg':<12} {'index':>5} {'tau µs':>9} {'straggler':>9} {'path':<16} {'category':<16} "
              f"{'extra µs':>9}  cause")
        for r in ok.sort_values("tau_max_us", ascending=False).head(15).itertuples():
            print(f"  {str(r.pg):<12} {r.index:>5} {r.tau_max_us:>9.1f} {r.straggler_rank:>9} {r.path_kind:<16} "
                  f"{r.cause_category:<16} {r.cause_extra_us:>9.1f}  {str(r.cause_name)[:70]}")
        print("\ncause categories:")
        for s in result.summary.itertuples():
            gpu_share = "" if math.isnan(s.share_of_gpu_causes) else f"  ({s.share_of_gpu_causes:.1%} of GPU causes" \
                + (f"; paper {PAPER_GPU_CAUSES[s.category]:.1%})" if s.category in PAPER_GPU_CAUSES else ")")
            print(f"  {s.category:<16} {s.cause_class:<4} {s.count:>6}  {s.share:>6.1%}{gpu_share}")
        if not result.cpu_side:
            print(f"\nGPU-only straggler paths: {result.gpu_only_share:.1%} (paper: {PAPER_GPU_ONLY_SHARE:.1%})")
    _print_blame(result)
    from evtsync.critpath.attribution import EXPLAINED_SHARE_MAX, EXPLAINED_SHARE_MIN

    unexplained = table[table["status"] == "unexplained"]
    if len(unexplained):
        print(f"\n{len(unexplained)} collective(s) unexplained (path extra outside "
              f"{EXPLAINED_SHARE_MIN:.0%}-{EXPLAINED_SHARE_MAX:.0%} of tau); largest taxes:")
        for r in unexplained.sort_values("tau_max_us", ascending=False).head(5).itertuples():
            print(f"  {str(r.pg):<12} {r.index:>5} {r.tau_max_us:>9.1f}  {r.unexplained_reason}")
    if len(result.validation):
        level = float(result.validation["level"].iloc[0])
        print(f"\npath extra time vs tax (µs; OLS and Theil-Sen, {level:.0%} intervals):")
        for v in result.validation.itertuples():
            if v.n >= 3 and not math.isnan(v.slope):
                print(f"  {v.scope:<12} {v.subset:<9} n={v.n:<5} OLS slope {v.slope:.3f} [{v.slope_lo:.3f}, "
                      f"{v.slope_hi:.3f}]  R² {v.r2:.3f}  intercept {v.intercept_us:.1f}  Theil-Sen slope "
                      f"{v.theil_slope:.3f} [{v.theil_lo:.3f}, {v.theil_hi:.3f}]")
            else:
                print(f"  {v.scope:<12} {v.subset:<9} n={v.n:<5} too few points for a regression")
