"""``evtsync diff A B``: did the tax change between two runs (before/after, generation vs generation)?"""

from __future__ import annotations

import argparse
import json
import math


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "diff", help="compare the tax of two runs: shifts with intervals and a verdict per PG role",
        description="Compare two runs — run folders of `evtsync run` or trace sets — per PG role "
        "and collective type: the shift of the median and P90 tax (bootstrap intervals), of the "
        "fastest rank's wait share and of the straggler's identity, and a verdict: lower / higher "
        "/ no difference / no verdict (with the reason: too few collectives, a different group "
        "size, message sizes or GPU).")
    parser.add_argument("a", metavar="A", help="the baseline: a run folder, a trace folder or a trace file")
    parser.add_argument("b", metavar="B", help="the run compared with it (same kinds)")
    parser.add_argument("--label-a", default=None, help="name of A in the outputs (default: its path)")
    parser.add_argument("--label-b", default=None, help="name of B in the outputs (default: its path)")
    parser.add_argument("--workload-a", default=None, help="workload of run folder A (when it holds several)")
    parser.add_argument("--workload-b", default=None, help="workload of run folder B (when it holds several)")
    parser.add_argument("--level", type=float, default=None,
                        help="interval level (default 0.90)")
    parser.add_argument("--allow", action="append", default=[], choices=["gpu", "bytes", "group_size"],
                        help="give a verdict although this differs (repeatable), e.g. --allow gpu to "
                             "compare hardware generations")
    parser.add_argument("--min-collectives", type=int, default=None,
                        help="fewest collectives per side for a verdict (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--no-cache", action="store_true", help="read traces without the Parquet cache")
    parser.add_argument("-o", "--output", metavar="PATH", help="write the table (Parquet or CSV by extension)")
    fits = parser.add_argument_group("fit level (Δξ and Δτ(n) per GPU × precision cell)")
    fits.add_argument("--fit-a", metavar="FIT", help="a Bayesian fit of A (a fit folder or .nc)")
    fits.add_argument("--fit-b", metavar="FIT", help="a Bayesian fit of B")
    fits.add_argument("--n", type=int, nargs="+", default=[8, 64, 512], help="domain sizes of Δτ(n) (default 8 64 512)")
    fits.add_argument("--block-sd-us", type=float, default=None,
                      help="block sd b (µs) for Δτ(n), the same on both sides (needed with --fit-a/--fit-b)")
    parser.add_argument("--html", metavar="PATH", help="write an HTML report: the table and the tax CDFs of both runs")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from evtsync.diff import MIN_COLLECTIVES, diff_tax, load_side
    from evtsync.tableio import write_table

    options = {"cache": None} if args.no_cache else {}
    a = load_side(args.a, args.label_a or args.a, args.workload_a, **options)
    b = load_side(args.b, args.label_b or args.b, args.workload_b, **options)
    table = diff_tax(a, b, level=args.level, allow=args.allow, seed=args.seed,
                     min_collectives=MIN_COLLECTIVES if args.min_collectives is None else args.min_collectives)
    fit_table = None
    if bool(args.fit_a) != bool(args.fit_b):
        from evtsync.errors import InputError

        raise InputError("diff: give both --fit-a and --fit-b (or neither)")
    if args.fit_a:
        from evtsync.diff import diff_fits
        from evtsync.errors import InputError
        from evtsync.evt.bayesfit import BayesFit

        if args.block_sd_us is None or not args.block_sd_us > 0:
            raise InputError("diff: --fit-a/--fit-b need --block-sd-us B (> 0), the block sd of Δτ(n)")
        fit_table = diff_fits(BayesFit.load(args.fit_a), BayesFit.load(args.fit_b), n=args.n,
                              block_sd_us=args.block_sd_us, level=args.level, seed=args.seed)
    if args.output:
        write_table(table, args.output)
    if args.html:
        from evtsync.report.diff import write_diff_report

        write_diff_report(table, a, b, args.html)
    if args.json:
        records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                   for r in table.to_dict(orient="records")]
        doc = {"a": a.label, "b": b.label, "level": table.attrs["level"],
               "missing_ranks": table.attrs.get("missing_ranks", {"a": [], "b": []}), "rows": records}
        if fit_table is not None:
            doc["fits"] = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                           for r in fit_table.to_dict(orient="records")]
        print(json.dumps(doc, indent=2, default=str))
        return 0
    level = table.attrs["level"]
    for name, side in (("A", a), ("B", b)):
        lacking = side.missing_ranks
        print(f"{name} = {side.label}" + (f"  (INCOMPLETE rank set: no trace of rank(s) {', '.join(map(str, lacking))})"
                                          if lacking else ""))
    print()
    print(f"tax tau_max per PG role and collective: medians (µs) and B − A with its {level:.0%} "
          "bootstrap interval")
    print(f"  {'role':<16} {'collective':<14} {'n A':>6} {'n B':>6} {'median A':>9} {'median B':>9} "
          f"{'Δ median [interval]':>28} {'Δ P90':>9}  verdict")
    for r in table.itertuples():
        if isinstance(r.d_median_us, float) and math.isnan(r.d_median_us):
            delta, d90, ma, mb = "—", "—", "—", "—"
        else:
            delta = f"{r.d_median_us:+.1f} [{r.d_median_lo_us:+.1f}, {r.d_median_hi_us:+.1f}]"
            d90 = f"{r.d_p90_us:+.1f}"
            ma, mb = f"{r.median_a_us:.1f}", f"{r.median_b_us:.1f}"
        print(f"  {r.role:<16} {r.collective:<14} {r.n_a:>6} {r.n_b:>6} {ma:>9} {mb:>9} {delta:>28} "
              f"{d90:>9}  {r.verdict}: {r.reason}")
    if table["change_rate_a"].notna().any():
        print("\nstraggler identity (change rate = share of consecutive collectives whose straggler differs):")
        for r in table.itertuples():
            if not (isinstance(r.change_rate_a, float) and math.isnan(r.change_rate_a)):
                print(f"  {r.role:<16} {r.collective:<14} change rate {r.change_rate_a:.2f} → {r.change_rate_b:.2f}, "
                      f"distinct stragglers {r.distinct_stragglers_a:.0f} → {r.distinct_stragglers_b:.0f}, "
                      f"fastest rank waits {r.fastest_wait_share_a:.0%} → {r.fastest_wait_share_b:.0%}")
    if fit_table is not None:
        print(f"\nfits: {fit_table.attrs['a']} → {fit_table.attrs['b']}; B − A per cell, {level:.0%} interval "
              f"(posteriors paired at random; tau with b = {args.block_sd_us:g} µs on both sides)")
        for r in fit_table.itertuples():
            what = "xi" if r.quantity == "xi" else f"tau(n={int(r.n)}) µs"
            if isinstance(r.d_mean, float) and math.isnan(r.d_mean):
                print(f"  {r.cell:<14} {what:<16} {r.verdict}: {r.reason}")
            else:
                print(f"  {r.cell:<14} {what:<16} {r.a_median:>9.4g} → {r.b_median:<9.4g} Δ {r.d_median:+.4g} "
                      f"[{r.d_lo:+.4g}, {r.d_hi:+.4g}]  {r.verdict}: {r.reason}")
    for note in table.attrs.get("notes", []):
        print(f"note: {note}")
    return 0
