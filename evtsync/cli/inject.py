"""``evtsync inject TRACES… -o OUT_DIR``: a copy of a trace set with a known CPU delay."""

from __future__ import annotations

import argparse

ORDER = 22


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "inject", help="copy a trace set with a known delay before one CPU launch (SPEC §4 b)",
        description="Insert DELAY before one kernel launch on one rank (the occurrence-th launch "
        "in the iteration-th ProfilerStep whose kernel name matches --kernel) and move every event "
        "that depends on it consistently, on that rank and, through the collectives, on the others. "
        "Writes every rank's trace into OUT_DIR/traces/ and OUT_DIR/injection.json. Then run "
        "`evtsync attribute OUT_DIR/traces` to check that the critical path moves to the CPU.")
    parser.add_argument("traces", nargs="+", metavar="TRACES", help="trace files and/or folders, one per rank")
    parser.add_argument("-o", "--output", metavar="OUT_DIR", required=True, help="output folder (created)")
    parser.add_argument("--rank", type=int, required=True, help="rank whose CPU is delayed")
    parser.add_argument("--delay-ms", type=float, required=True, help="delay in ms, 0 to 20")
    parser.add_argument("--iteration", type=int, default=None,
                        help="0-based index of the ProfilerStep annotation (default: whole trace)")
    parser.add_argument("--kernel", default=None, metavar="REGEX", help="launched kernel name pattern")
    parser.add_argument("--occurrence", type=int, default=0, help="0-based among the matching launches")
    parser.add_argument("--correlation", type=int, default=None, help="the launch's correlation id")
    parser.add_argument("--pg", action="append", default=[], metavar="NAME=RANKS[@STREAM]",
                        help="declare a process group (as in `tax`)")
    parser.add_argument("--allow-partial", action="store_true", help="align PGs over the ranks present")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from evtsync.collectives import PGOverride
    from evtsync.critpath.inject import inject_delay

    result = inject_delay(args.traces, args.output, rank=args.rank, delay_us=args.delay_ms * 1000.0,
                          iteration=args.iteration, kernel=args.kernel, occurrence=args.occurrence,
                          correlation=args.correlation, overrides=[PGOverride.parse(p) for p in args.pg],
                          allow_partial=args.allow_partial)
    m = result.manifest
    print(f"injected {args.delay_ms:g} ms before {m['launch']['name']} (correlation {m['launch']['correlation']}) "
          f"on rank {m['rank']}{' in ' + m['step'] if m['step'] else ''}")
    print(f"  kernel {m['kernel']['name'][:80]} starts {m['kernel']['start_shift_us']:.0f} µs later")
    first = m["first_collective_moved"]
    if first:
        print(f"  {m['collectives_moved']} collective(s) end later; first: PG {first['pg']} index {first['index']} "
              f"(+{first['end_shift_us']:.0f} µs)")
    else:
        print("  no collective moves: the CPU was far enough ahead of the GPU to absorb the delay")
    print(f"  wrote {len(result.files)} trace(s) to {result.out_dir / 'traces'} and {result.out_dir / 'injection.json'}")
    return 0
