"""``evtsync blocks TRACES…``: compute blocks between collectives and their pooled z-scores (methodology §5)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    from evtsync.cli._common import add_out_argument, add_scale_arguments, add_trace_arguments
    from evtsync.core.defaults import DEFAULT_M
    from evtsync.core.vocabulary import PRECISIONS, TIME_DEFINITIONS

    parser = sub.add_parser(
        "blocks", help="compute blocks between collectives and pooled z-scores (methodology §5)",
        description="Cut every rank's GPU timeline into compute blocks between consecutive "
        "collectives of one process group (default: the TP group), and write the pooled z-score "
        "of each block maximum over samples of m ranks. See docs/blocks.md.")
    add_trace_arguments(parser)
    add_scale_arguments(parser)
    for action in parser._actions:
        if "--pg" in action.option_strings:
            action.metavar = "NAME | NAME=RANKS[@STREAM]"
            action.help = ("NAME selects the process group to cut blocks by (label, pg_name or "
                           "pg_desc; default: the TP group); NAME=RANKS[@STREAM] declares a group "
                           "as in `evtsync tax` (repeatable)")
    parser.add_argument("--m", type=int, default=DEFAULT_M,
                        help=f"sample size m (default {DEFAULT_M}); a group of n = k·m ranks gives "
                             "k samples, group rank p in sample p mod k; with n = k·m + r, k samples of m "
                             "per block drawn without replacement, the r left over rotating (docs/blocks.md)")
    parser.add_argument("--time", choices=TIME_DEFINITIONS, default="busy",
                        help="block time per rank: busy = GPU busy time (default), span = first "
                             "kernel start to last kernel end, window = collective end to next start")
    parser.add_argument("--workload", help="workload label (default: the traces' folder name)")
    parser.add_argument("--precision", metavar="P",
                        help=f"precision label for every block ({', '.join(PRECISIONS)}); default: "
                             "from GEMM kernel names, else the collectives' dtype")
    parser.add_argument("--gemm-pattern", action="append", default=[], metavar="REGEX",
                        help="extra regular expression for GEMM kernel names (repeatable)")
    parser.add_argument("--keep-all", action="store_true",
                        help="keep blocks without GEMM kernels (default: GEMM blocks only)")
    add_out_argument(parser, "table", "write the z-score table (.parquet/.csv); PATH_times has the "
                     "per-rank block times, PATH_dropped the block samples left out", old=("--output",))
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import contextlib

    from evtsync.blocks.cut import compute_zscores, drop_summary
    from evtsync.cli._common import align_options, enter_dask, reading_options, sibling_path
    from evtsync.core.errors import InputError
    from evtsync.core.tableio import write_table
    from evtsync.sync.collectives import PGOverride
    from evtsync.trace.traceset import load_traces

    selectors = [text for text in args.pg if "=" not in text]
    if len(selectors) > 1:
        raise InputError(f"--pg: give one process group to cut blocks by, got {', '.join(selectors)}")
    args.pg = [text for text in args.pg if "=" in text]
    declared = [PGOverride.parse(text).name for text in args.pg]
    selector = selectors[0] if selectors else (declared[0] if len(declared) == 1 else None)
    with contextlib.ExitStack() as stack:
        options = reading_options(args)
        backend = enter_dask(options, stack)  # one cluster: reading, alignment, blocks
        traces = load_traces(args.traces, scope="blocks", **options)  # the rows blocks read
        table, blocks = compute_zscores(
            traces, pg=selector, m=args.m, time=args.time, workload=args.workload,
            precision=args.precision, gemm_patterns=args.gemm_pattern, keep_all=args.keep_all,
            backend=backend, **align_options(args))
    from evtsync.blocks.zscores import drifting_identities

    summary = drop_summary(blocks)
    if args.out:
        write_table(table, args.out)
        write_table(blocks.times, sibling_path(args.out, "times"))
        write_table(blocks.dropped, sibling_path(args.out, "dropped"))
    n_dropped = int(summary["count"].sum()) if len(summary) else 0
    if args.json:
        from evtsync.cli._common import emit_json

        emit_json({
            "pg": blocks.groups["pg"].astype(str).tolist(), "m": blocks.m, "time": args.time,
            "iterations": blocks.iterations, "n_zscores": len(table),
            "n_identities": int(table["block"].nunique()) if len(table) else 0,
            "dropped": summary, "n_dropped": n_dropped,
            "unassigned_kernels": blocks.unassigned_kernels,
            "drifting_identities": drifting_identities(table),
        })
        return 0
    _print_report(table, blocks, summary, n_dropped, args)
    return 0


def _print_report(table, blocks, summary, n_dropped, args) -> None:  # noqa: ANN001 - CLI rendering only
    groups = ", ".join(f"{g.pg} (ranks {g.pg_ranks})" for g in blocks.groups.itertuples())
    print(f"blocks between the collectives of {groups}; m = {blocks.m}, time = {args.time}")
    n_coll = dict(zip(blocks.groups["pg"].astype(str), blocks.groups["n_collectives"], strict=True))
    for pg, source in blocks.iterations.items():
        print(f"  {pg}: {n_coll.get(pg, 0)} collectives; iterations from {source}; "
              f"{blocks.unassigned_kernels.get(pg, 0)} compute kernel(s) outside every block")
    kept = len(table)
    print(f"{kept} z-score(s) kept, {n_dropped} block sample(s) dropped")
    for row in summary.itertuples():
        print(f"  dropped {row.count:>6}  {row.pg}: {row.reason}")
    if kept:
        ident = table.groupby("block", sort=False).agg(
            n=("z", "size"), pgs=("pg", "nunique"), position=("position", "first"),
            mean_us=("block_mean_us", "first"), sd_us=("block_sd_us", "first"), cv=("cv", "first"),
            precision=("precision", "first"), gemms=("n_gemm_kernels", "first"), z_mean=("z", "mean"))
        ident = ident.sort_values("position", kind="stable")
        print(f"\n{len(ident)} block identit{'y' if len(ident) == 1 else 'ies'} (position:signature; "
              "a_c = mean block time, s = pooled sd, r = s/a_c; pooled over instances, samples, PGs):")
        print(f"  {'block':<18} {'n':>5} {'PGs':>4} {'GEMMs':>5} {'a_c us':>11} {'s us':>10} {'r':>7} "
              f"{'prec':>6} {'mean z':>7}")
        for block, row in ident.head(40).iterrows():
            print(f"  {block!s:<18} {row.n:>5} {row.pgs:>4} {row.gemms:>5} {row.mean_us:>11.1f} "
                  f"{row.sd_us:>10.2f} {row.cv:>7.4f} {row.precision!s:>6} {row.z_mean:>7.3f}")
        if len(ident) > 40:
            print(f"  … {len(ident) - 40} more")
        from evtsync.blocks.zscores import DRIFT_P, drifting_identities

        drift = drifting_identities(table)
        if len(drift):
            print(f"\nWARNING: {len(drift)} of {len(ident)} block identities have a mean that drifts between instances "
                  f"(m·var(sample means)/s² up to {drift['mean_var_ratio'].max():.3g}, F-test p < {DRIFT_P:g}): the "
                  "centred maximum y assumes a stationary mean, so tau(n) from them is an upper bound "
                  "(docs/methodology.md, \"Predicting tau(n)\")")
        by = table.groupby(["gpu", "precision", "workload"]).size()
        print("\nz-scores per GPU, precision and workload: "
              + "; ".join(f"{g}/{p}/{w}: {c}" for (g, p, w), c in by.items()))
    if args.out:
        print(f"\nwrote {args.out} (+ _times, _dropped)")
