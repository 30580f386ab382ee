"""``evtsync inject TRACES… -o OUT_DIR``: a copy of a trace set with a known CPU delay."""

from __future__ import annotations

import argparse

ORDER = 22


def register(sub: argparse._SubParsersAction) -> None:
    from evtsync.cli._common import ListOption, add_out_argument

    parser = sub.add_parser(
        "inject", help="copy a trace set with a known delay before one CPU launch (methodology §4 b)",
        description="Insert DELAY before one kernel launch on one rank (the occurrence-th launch "
        "in the iteration-th ProfilerStep whose kernel name matches --kernel) and move every event "
        "that depends on it consistently, on that rank and, through the collectives, on the others. "
        "Writes every rank's trace into OUT_DIR/traces/ and OUT_DIR/injection.json. Then run "
        "`evtsync attribute OUT_DIR/traces` to check that the critical path moves to the CPU.")
    parser.add_argument("traces", nargs="+", metavar="TRACES", help="trace files and/or folders, one per rank")
    add_out_argument(parser, "folder", "output folder (created)", required=True, metavar="OUT_DIR",
                     old=("--output",))
    parser.add_argument("--rank", type=int, required=True, help="rank whose CPU is delayed")
    parser.add_argument("--delay-ms", type=float, default=None, help="delay in ms, 0 to 20")
    parser.add_argument("--sweep", action=ListOption, item=float, metavar="MS", default=None, examples=("0", "5"),
                        help="instead of --delay-ms: inject each delay into OUT_DIR/delay-<D>ms/, attribute each "
                             "and print (and write OUT_DIR/sweep.csv) where the cause of the next collective moves, "
                             "e.g. --sweep 0 1 5 20 (or 0,1,5,20)")
    parser.add_argument("--iteration", type=int, default=None,
                        help="0-based index of the ProfilerStep annotation (default: whole trace)")
    parser.add_argument("--kernel", default=None, metavar="REGEX", help="launched kernel name pattern")
    parser.add_argument("--occurrence", type=int, default=0, help="0-based among the matching launches")
    parser.add_argument("--on", choices=("launch", "kernel"), default="launch",
                        help="launch: delay the CPU before the launch call (default); kernel: make the launched "
                             "GPU event itself (kernel or copy) run DELAY longer")
    parser.add_argument("--correlation", type=int, default=None, help="the launch's correlation id")
    parser.add_argument("--pg", action="append", default=[], metavar="NAME=RANKS[@STREAM]",
                        help="declare a process group (as in `tax`)")
    parser.add_argument("--allow-partial", action="store_true", help="align PGs over the ranks present")
    parser.add_argument("--json", action="store_true",
                        help="print the injection record (injection.json) as JSON; with --sweep the sweep table")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from evtsync.core.errors import InputError
    from evtsync.critpath.inject import inject_delay, inject_sweep
    from evtsync.sync.collectives import PGOverride

    if (args.delay_ms is None) == (args.sweep is None):
        raise InputError("inject: give one of --delay-ms D or --sweep D1,D2,...")
    options = dict(iteration=args.iteration, kernel=args.kernel, occurrence=args.occurrence, on=args.on,
                   correlation=args.correlation, overrides=[PGOverride.parse(p) for p in args.pg],
                   allow_partial=args.allow_partial)
    if args.sweep is not None:
        return _run_sweep(args, options, inject_sweep)
    result = inject_delay(args.traces, args.out, rank=args.rank, delay_us=args.delay_ms * 1000.0, **options)
    m = result.manifest
    if args.json:
        from evtsync.cli._common import emit_json

        emit_json({**m, "files": [str(f) for f in result.files], "out_dir": result.out_dir})
        return 0
    where = f"into the kernel launched by {m['launch']['name']}" if m["on"] == "kernel" else \
        f"before {m['launch']['name']}"
    print(f"injected {args.delay_ms:g} ms {where} (correlation {m['launch']['correlation']}) "
          f"on rank {m['rank']}{' in ' + m['step'] if m['step'] else ''}")
    print(f"  kernel {m['kernel']['name'][:80]} starts {m['kernel']['start_shift_us']:.0f} µs later "
          f"(its launch returned {m['kernel']['lead_us']:.0f} µs ahead of it)")
    first = m["first_collective_moved"]
    if first:
        print(f"  {m['collectives_moved']} collective(s) end later; first: PG {first['pg']} index {first['index']} "
              f"(+{first['end_shift_us']:.0f} µs)")
    else:
        print("  no collective moves: the CPU was far enough ahead of the GPU to absorb the delay")
    print(f"  wrote {len(result.files)} trace(s) to {result.out_dir / 'traces'} and {result.out_dir / 'injection.json'}")
    return 0


def _run_sweep(args: argparse.Namespace, options: dict, inject_sweep) -> int:  # noqa: ANN001 - CLI only
    from pathlib import Path

    from evtsync.core.errors import InputError
    from evtsync.core.tableio import write_table

    delays = list(args.sweep)
    if not delays:
        raise InputError("--sweep: no delay given")
    table = inject_sweep(args.traces, args.out, delays_ms=delays, rank=args.rank, **options)
    write_table(table, Path(args.out) / "sweep.csv")
    if args.json:
        from evtsync.cli._common import emit_json

        emit_json(table)
        return 0
    print(f"delay sweep on rank {args.rank}: the collective after the delayed kernel, per delay")
    print(f"  {'delay ms':>8} {'lead µs':>8} {'shift µs':>9} {'colls':>5}  {'pg':<6} {'index':>5} {'straggler':>9} "
          f"{'path':<15} {'extra µs':>9} {'extra-delay':>11} {'moved':>5} {'in lead':>7}  cause")
    for r in table.itertuples():
        extra = "" if r.cause_extra_us is None or r.cause_extra_us != r.cause_extra_us else f"{r.cause_extra_us:.0f}"
        diff = "" if r.extra_minus_delay_us is None or r.extra_minus_delay_us != r.extra_minus_delay_us \
            else f"{r.extra_minus_delay_us:.0f}"
        print(f"  {r.delay_ms:>8g} {r.lead_us:>8.0f} {r.kernel_shift_us:>9.0f} {r.collectives_moved:>5}  {str(r.pg):<6} "
              f"{'' if r.index is None else r.index:>5} {'' if r.straggler_rank is None else r.straggler_rank:>9} "
              f"{str(r.path_kind):<15} {extra:>9} {diff:>11} {str(r.cause_moved):>5} {str(r.within_lead):>7}  {str(r.cause_name)[:50]}")
    print(f"  wrote {Path(args.out) / 'sweep.csv'}")
    return 0
