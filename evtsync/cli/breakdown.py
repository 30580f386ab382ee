"""``evtsync breakdown TRACES…``: per rank, where the GPU time of the profiled window went."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from evtsync.cli._common import add_out_argument, add_scale_arguments, add_trace_arguments

    parser = sub.add_parser(
        "breakdown", help="per-rank time breakdown: compute, communication, sync wait, idle",
        description="Cut each rank's GPU span (first GPU event to last) into compute, "
        "compute/communication overlap, exposed synchronisation wait (the tax), the rest of "
        "communication, CPU-bound idle and idle time; the parts add up to the span.")
    add_trace_arguments(parser)
    add_scale_arguments(parser)
    add_out_argument(parser, "table", "write the table (Parquet or CSV by extension)", old=("--output",))
    parser.add_argument("--json", action="store_true",
                        help="print the table as JSON (rows, and the ranks without a trace or without GPU events)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import contextlib

    from evtsync.cli._common import align_options, enter_dask, reading_options
    from evtsync.core.tableio import write_table
    from evtsync.critpath.breakdown import PARTS, step_breakdown, summarise_breakdown
    from evtsync.trace.traceset import load_traces

    with contextlib.ExitStack() as stack:
        options = reading_options(args)
        backend = enter_dask(options, stack)
        traces = load_traces(args.traces, **options)
        table = step_breakdown(traces, backend=backend, **align_options(args))
    if table.empty:
        from evtsync.core.errors import InputError

        raise InputError(f"nothing to break down: no GPU event and no CPU operator on any rank of "
                         f"{', '.join(map(str, args.traces))}")
    if args.out:
        write_table(table, args.out)
    if args.json:
        from evtsync.cli._common import emit_json

        emit_json({"rows": table, "missing_ranks": list(table.attrs.get("missing_ranks") or []),
                   "ranks_without_gpu_events": list(table.attrs.get("ranks_without_gpu_events") or [])})
        return 0
    labels = {"compute_comm_overlap": "overlap", "compute_only": "compute", "sync_wait": "sync wait",
              "comm_only": "comm", "cpu_bound_idle": "cpu-bound", "idle": "idle"}
    cpu = bool(table.attrs.get("cpu_timeline"))
    if cpu:
        labels.update(cpu_bound_idle="python")
        print("no GPU events: per-rank main-thread (CPU) time, µs (share of the span); compute = operators, "
              "comm = collectives (enqueue and run), sync wait = waiting in them, python = annotated Python, "
              "idle = uninstrumented Python (docs/critical-path.md)")
    else:
        print("per-rank GPU time, µs (share of the span); sync wait = exposed tax, "
              "tax wait = all waiting inside collectives")
    head = f"  {'rank':>5} {'window':>6} {'span':>11} " + " ".join(f"{labels[p]:>17}" for p in PARTS) \
        + f" {'tax wait':>11}"
    print(head)
    for row in table.itertuples():
        cells = " ".join(f"{getattr(row, p + '_us'):>9.0f} ({getattr(row, p + '_us') / row.span_us:>4.0%})"
                         if row.span_us > 0 else f"{'-':>17}" for p in PARTS)
        print(f"  {row.rank:>5} {row.window:>6} {row.span_us:>11.0f} {cells} {row.tax_wait_us:>11.0f}")
    total = summarise_breakdown(table).iloc[0]
    print(f"\nall ranks: sync wait {total['sync_wait_share']:.1%} of {'main-thread' if cpu else 'GPU'} time, compute "
          f"{total['compute_only_share'] + total['compute_comm_overlap_share']:.1%}, idle "
          f"{total['idle_share'] + total['cpu_bound_idle_share']:.1%}")
    if table.attrs.get("missing_ranks"):
        print(f"INCOMPLETE rank set (--allow-partial): rank(s) {', '.join(map(str, table.attrs['missing_ranks']))} "
              "have no trace file and no row")
    missing = table.attrs.get("ranks_without_gpu_events") or []
    if missing:
        print(f"rank(s) without GPU events (no row): {', '.join(map(str, missing))}")
    return 0
