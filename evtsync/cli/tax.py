"""``evtsync tax TRACES…``: the synchronization tax of every collective of every PG."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from evtsync.core.vocabulary import collective_event_words


def register(sub: argparse._SubParsersAction) -> None:
    from evtsync.cli._common import add_out_argument, add_scale_arguments, add_trace_arguments

    parser = sub.add_parser(
        "tax", help="synchronization tax of every collective (methodology §3)",
        description="Read one trace per rank (Kineto JSON, Nsight Systems SQLite) or a folder of NCCL "
        "Inspector logs, align the collectives of every process group (Inspector: by communicator and "
        "sequence number) and report how long the early ranks waited for the straggler.")
    add_trace_arguments(parser, required=False)
    add_scale_arguments(parser)
    parser.add_argument("--demo", action="store_true",
                        help="run on a synthetic 8-rank trace set generated on the fly")
    add_out_argument(parser, "table", "write the full tables: PATH (per collective), PATH_ranks (per rank), "
                     "PATH_mismatches, PATH_groups, PATH_stragglers, PATH_straggler_ranks; Parquet or CSV by "
                     "extension", old=("--output",))
    parser.add_argument("--plot", metavar="PATH", help="CDFs of tau per PG and collective type (.png/.svg)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import contextlib
    import tempfile

    from evtsync.cli._common import align_options, enter_dask, reading_options, sibling_path
    from evtsync.core.errors import InputError
    from evtsync.core.tableio import all_or_nothing, write_table
    from evtsync.sync.logtax import inspector_files, stream_tax

    traces: Any
    alignment: Any
    if args.demo == bool(args.traces):
        raise InputError("give TRACES or --demo (not both)")
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="evtsync-demo-"))
        paths = args.traces
        if args.demo:
            from evtsync.synth import write_demo_traces

            paths = [str(write_demo_traces(tmp))]
            print("demo: synthetic 8-rank trace set written to a temporary folder", file=sys.stderr)
        options = reading_options(args)
        if args.demo:
            options["cache"] = None  # a temporary folder: nothing to reuse
        backend = enter_dask(options, stack)  # one cluster: reading and per-PG tasks
        logs = inspector_files(paths, options["rank_from"]) if backend is None else None
        report = None
        if logs is not None:  # NCCL Inspector logs: streamed, memory bounded by the open collectives
            streamed = stream_tax(logs, salvage=options["salvage"], keep_ranks=bool(args.out), report=not args.plot,
                                  **align_options(args))  # --plot reads the tables: no printed report made
            report = streamed.report
        if report is not None:  # a clean job, no table written: printed from its arrays, no pandas (issue 48)
            traces = alignment = report
            summary, stragglers, straggler_ranks = report.summary, report.stragglers, None  # (no -o: not written)
        else:
            from evtsync.sync.tax import straggler_identity, tax_from_traces, tax_summary

            if logs is not None:
                traces, alignment, tables = streamed.traces, streamed.alignment, streamed.tables
            else:
                from evtsync.trace.traceset import load_traces

                # the tax needs the collectives only: workers send back a small fraction of each rank
                traces = load_traces(paths, scope="collectives", **options)
                alignment, tables = tax_from_traces(traces, backend=backend, **align_options(args))
            summary = tax_summary(tables)
            stragglers, straggler_ranks = straggler_identity(tables)
    notes = sys.stderr if args.json else sys.stdout  # --json: standard output holds the JSON document alone
    if traces.logged is None and traces.comm_kernels.empty:
        if alignment.instances.empty:
            print(f"no NCCL kernels, no other communication kernels and no gloo collectives in {len(traces.rank_ids)} "
                  "trace(s): nothing to align (empty result)", file=notes)
        else:
            print("CPU-side collectives (gloo): each one's gloo:<op> event on its group's worker thread, whose "
                  "duration includes the wait (docs/gloo.md)", file=notes)
    with all_or_nothing():  # a full disk at the third table leaves none of them, not two
        if args.out:
            write_table(tables.collectives, args.out)
            write_table(tables.ranks, sibling_path(args.out, "ranks"))
            write_table(alignment.mismatches, sibling_path(args.out, "mismatches"))
            write_table(alignment.groups, sibling_path(args.out, "groups"))
            write_table(stragglers, sibling_path(args.out, "stragglers"))
            write_table(straggler_ranks, sibling_path(args.out, "straggler_ranks"))
        if args.plot:
            from evtsync.plots.tax import plot_tax_cdfs

            plot_tax_cdfs(tables.collectives, args.plot)
    if args.json:
        from evtsync.cli._common import emit_json

        emit_json({"groups": alignment.groups, "summary": summary, "stragglers": stragglers,
                   "n_mismatches": len(alignment.mismatches), "missing_ranks": list(traces.missing_ranks),
                   "rank_set_problems": traces.problems})
        return 0
    _print_report(traces, alignment, summary, stragglers)
    return 0


def _print_report(traces, alignment, summary, stragglers) -> None:  # noqa: ANN001 - CLI rendering only
    ranks = traces.ranks
    if traces.logged is not None:
        _print_logged_header(traces, alignment)
    else:
        gpus = ", ".join(sorted(set(ranks["gpu"])))
        other = len(traces.comm_kernels) - len(traces.nccl_kernels)
        cpu_side = traces.comm_kernels.empty and len(alignment.instances) > 0
        kernels = (f"{len(alignment.instances)} gloo collective events" if cpu_side else
                   f"{len(traces.nccl_kernels)} NCCL kernels" + (f", {other} other communication kernels" if other else ""))
        print(f"{len(traces.rank_ids)} rank(s) [{gpus}], {int(ranks['n_events'].sum())} events, " + kernels
              + (f", {traces.n_windows} profiling windows" if traces.n_windows > 1 else "")
              + (f" (read from {traces.source})" if traces.source != "kineto" else ""))
        if len(alignment.groups):
            print("\nprocess groups:")
            for g in alignment.groups.itertuples():
                print(f"  {g.pg:<24} {g.pg_source:<9} ranks {g.pg_ranks:<24} {g.n_collectives} collectives"
                      f" (stream {g.streams})")
    if len(summary):
        n_invalid = int(summary["n_invalid"].sum())
        cpu_side = traces.logged is None and traces.comm_kernels.empty
        event = collective_event_words(cpu_side)
        print(f"\ntax per PG and collective over the valid collectives (tau = max-min {event} duration, µs; "
              f"wait share = waiting / {'collective' if cpu_side else 'kernel'} time; invalid = flagged by the "
              "alignment checks, left out):")
        header = (f"  {'pg':<20} {'collective':<14} {'n':>6} {'invalid':>8} {'tau med':>10} {'tau p90':>10} "
                  f"{'tau max':>10} {'fastest waits':>14} {'median waits':>13}")
        print(header)
        for s in summary.itertuples():
            if not s.count:
                print(f"  {s.pg:<20} {s.collective:<14} {s.count:>6} {s.n_invalid:>8}   no valid collective: "
                      "no tax measured (see the mismatches)")
                continue
            print(f"  {s.pg:<20} {s.collective:<14} {s.count:>6} {s.n_invalid:>8} {s.tau_median_us:>10.1f} "
                  f"{s.tau_p90_us:>10.1f} {s.tau_max_us:>10.1f} {s.fastest_wait_share:>13.0%} "
                  f"{s.median_rank_wait_share:>13.0%}")
        if n_invalid:
            print(f"  {n_invalid} of {n_invalid + int(summary['count'].sum())} collective(s) flagged invalid "
                  "are left out of these statistics and of the stragglers")
    if len(stragglers):
        print("\nwho straggles per PG (change rate = share of consecutive collectives whose straggler "
              "differs; top = the most frequent straggler, against 1/|R| if all were alike):")
        for s in stragglers.itertuples():
            if s.n_collectives:
                print(f"  {s.pg:<20} {s.n_collectives:>6} collectives  change rate {s.change_rate:>5.0%}  "
                      f"{s.n_distinct} distinct of {s.n_ranks}  top rank {s.top_rank} {s.top_share:.0%} "
                      f"(uniform {s.uniform_share:.0%})")
    if len(alignment.mismatches):
        print(f"\n{len(alignment.mismatches)} alignment mismatch(es):")
        for m in alignment.mismatches.head(20).itertuples():
            print(f"  PG {m.pg} collective {m.index} rank {m.rank}: {m.kind}: {m.detail}")
    if traces.problems:  # only here with --allow-partial: say what the tables lack
        print(f"\nINCOMPLETE rank set (--allow-partial): {'; '.join(traces.problems)}")
    if len(traces.skipped):
        total = int(traces.skipped["count"].sum())
        print(f"\nskipped {total} event(s) that could not be tabulated (see warnings)")


def _print_logged_header(traces, alignment) -> None:  # noqa: ANN001 - CLI rendering only
    """What a folder of NCCL Inspector logs held, and its communicators."""
    ranks = traces.ranks
    verbose = int(ranks["n_verbose_records"].sum())
    print(f"{len(traces.rank_ids)} rank(s) from NCCL Inspector logs ({ranks['rank_source'][0]}): "
          f"{int(ranks['n_collective_records'].sum())} collective records"
          + (f" ({verbose} with kernel times)" if verbose else "")
          + f", {int(ranks['n_p2p_records'].sum())} p2p records not used (no collective tax)")
    tails = int((ranks["unread_tail_bytes"] > 0).sum())
    if tails:
        print(f"{tails} log(s) end in an incomplete record (still being written?): read up to the last complete one")
    if len(alignment.groups):
        print("\ncommunicators (process groups):")
        for g in alignment.groups.itertuples():
            print(f"  {g.pg:<20} {str(g.pg_desc or '-'):<16} ranks {g.pg_ranks:<24} {g.n_collectives} collectives")
