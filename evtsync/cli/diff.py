"""``evtsync diff A B``: did the tax change between two runs (before/after, generation vs generation)?"""

from __future__ import annotations

import argparse
import math
from typing import Any

from evtsync.core.defaults import DEFAULT_EPS, DEFAULT_M


def register(sub: argparse._SubParsersAction) -> None:
    from evtsync.cli._common import ListOption, add_level_argument, add_out_argument, byte_size
    from evtsync.core.units import SIZE_HELP

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
    parser.add_argument("--workload-a", default=None,
                        help="workload of run folder A (default: every workload found in both A and B, each "
                             "compared with its namesake)")
    parser.add_argument("--workload-b", default=None, help="workload of run folder B (as --workload-a)")
    add_level_argument(parser)
    parser.add_argument("--allow", action=ListOption, default=[], item_choices=("gpu", "bytes", "group_size"),
                        metavar="WHAT", examples=("gpu", "bytes"),
                        help="give a verdict although this differs: gpu, bytes, group_size (space or comma "
                             "separated, repeatable), e.g. --allow gpu to compare hardware generations")
    parser.add_argument("--min-collectives", type=int, default=None,
                        help="fewest collectives per side for a verdict (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--no-cache", action="store_true", help="read traces without the Parquet cache")
    parser.add_argument("--rank-from", choices=("file", "order"), default="file",
                        help="where each trace's rank comes from when A/B are traces: file (default) or order "
                             "(the i-th file is rank i; NCCL Inspector logs without a world communicator)")
    add_out_argument(parser, "table", "write the table (Parquet or CSV by extension); with the fit level also "
                     "PATH_fits and PATH_bstar", old=("--output",))
    fits = parser.add_argument_group(
        "fit level (Δξ, Δτ(n) and ΔB* per GPU × precision cell; run folders with fits use their main fit)")
    fits.add_argument("--fit-a", metavar="FIT", help="A's fit: a Bayesian fit (a fit folder or .nc: centred/paper) or a "
                      "z-score table (.parquet/.csv of `evtsync blocks`: ranktail)")
    fits.add_argument("--fit-b", metavar="FIT", help="B's fit (the same kind as --fit-a)")
    fits.add_argument("--n", action=ListOption, item=int, default=[8, 64, 512], metavar="N", examples=("8", "64"),
                      help="domain sizes of Δτ(n) and ΔB* (default 8 64 512)")
    fits.add_argument("--block-sd-us", type=float, default=None,
                      help="block sd b (µs) for Δτ(n) and ΔB*, the same on both sides (needed with --fit-a/--fit-b; "
                           "run folders: default A's measured b per cell)")
    fits.add_argument("--own-b", action="store_true",
                      help="run folders: each run's own measured b per cell, so Δτ and ΔB* show the change of the "
                           "whole tax (block spread and tail); default: A's b on both sides (the tail alone)")
    fits.add_argument("--m", type=int, default=None,
                      help=f"ranks per sample of the fits (default {DEFAULT_M}, or A's run's)")
    from evtsync.cli._common import add_estimator_argument

    add_estimator_argument(parser)  # both sides with the same estimator: run folders compare ranktail by default
    bw = parser.add_argument_group(
        "ΔB* inputs (as in `evtsync bandwidth`; run folders: default A's run's topologies, alpha, S and eps)")
    bw.add_argument("--topology", action=ListOption, default=[], metavar="NAME", examples=("full", "ring"),
                    help="ring, torus3d or full (space or comma separated, repeatable)")
    alpha = bw.add_mutually_exclusive_group()
    alpha.add_argument("--alpha-us", type=float, default=None, help="per-step latency alpha in µs")
    alpha.add_argument("--alpha-from", metavar="LOG",
                       help="alpha with its interval from an nccl-tests AllReduce log (per topology; its draws "
                            "are carried into ΔB*)")
    bw.add_argument("--alpha-topology", metavar="NAME",
                    help="with --alpha-from: the topology the sweep ran on (its per-step alpha reused for every topology)")
    bw.add_argument("--bytes", type=byte_size, default=None, metavar="S", help=f"buffer size S: {SIZE_HELP}")
    bw.add_argument("--eps", action=ListOption, default=None, metavar="EPS", examples=("-0.5", "-0.1"),
                    help=f"target elasticities in (-1, 0) (default {DEFAULT_EPS:g}, or A's run's)")
    parser.add_argument("--html", metavar="PATH", help="write an HTML report: the table and the tax CDFs of both runs")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from evtsync.core.tableio import write_table
    from evtsync.runfolder.diff import MIN_COLLECTIVES, diff_runs

    load_options: dict = {"cache": None} if args.no_cache else {}
    if args.rank_from != "file":
        load_options["rank_from"] = args.rank_from
    table, a, b = diff_runs(
        args.a, args.b, label_a=args.label_a, label_b=args.label_b, workload_a=args.workload_a,
        workload_b=args.workload_b, load_options=load_options, level=args.level,
        allow=args.allow, seed=args.seed,
        min_collectives=MIN_COLLECTIVES if args.min_collectives is None else args.min_collectives)
    fit_table, bstar_table, fit_notes, bstar_note = _fit_level(args)
    if args.out:
        from evtsync.cli._common import sibling_path

        write_table(table, args.out)
        for tag, extra in (("fits", fit_table), ("bstar", bstar_table)):
            if extra is not None:
                write_table(extra, sibling_path(args.out, tag))
    if args.html:
        from evtsync.report.diff import write_diff_report

        write_diff_report(table, a, b, args.html, fits=fit_table, bstar=bstar_table,
                          notes=[*fit_notes, *([bstar_note] if bstar_note else [])])
    if args.json:
        from evtsync.cli._common import emit_json

        doc = {"a": a.label, "b": b.label, "level": table.attrs["level"],
               "missing_ranks": table.attrs.get("missing_ranks", {"a": [], "b": []}), "rows": table}
        if fit_table is not None:
            doc["fits"] = fit_table
            doc["bstar"] = bstar_table
            doc["bstar_inputs"] = None if bstar_table is None else bstar_table.attrs["inputs"]
            if bstar_note:
                doc["bstar_note"] = bstar_note
        if fit_notes:
            doc["fit_notes"] = fit_notes
        emit_json(doc)
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
    workload = None
    for r in table.itertuples():
        if "workload" in table.columns and r.workload != workload:  # several workloads: one block each
            workload = r.workload
            print(f"  workload {workload}:")
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
              f"(posteriors paired at random; tau with {_b_words(fit_table)})")
        for r in fit_table.itertuples():
            what = "xi" if r.quantity == "xi" else f"tau(n={int(r.n)}) µs"
            if isinstance(r.d_mean, float) and math.isnan(r.d_mean):
                print(f"  {r.cell:<14} {what:<16} {r.verdict}: {r.reason}")
            else:
                print(f"  {r.cell:<14} {what:<16} {r.a_median:>9.4g} → {r.b_median:<9.4g} Δ {r.d_median:+.4g} "
                      f"[{r.d_lo:+.4g}, {r.d_hi:+.4g}]  {r.verdict}: {r.reason}" + _beyond(r))
    if fit_table is not None or fit_notes:
        for note in [*fit_notes, *([fit_table.attrs["beyond_data_note"]]
                                   if fit_table is not None and "beyond_data_note" in fit_table.attrs else [])]:
            print(f"note: {note}")
    if bstar_table is not None:
        _print_bstar(bstar_table, level)
    elif bstar_note:
        print(f"\nΔB*: {bstar_note}")
    for note in table.attrs.get("notes", []):
        print(f"note: {note}")
    return 0


def _b_words(table) -> str:  # noqa: ANN001 - the table of evtsync.runfolder.diff.diff_fits
    def words(b: object) -> str:
        if isinstance(b, dict):
            return "per cell " + ", ".join(f"{c} {v:.4g} µs" for c, v in b.items() if c != "all")
        return f"{float(b):g} µs"  # type: ignore[arg-type]

    a, b = table.attrs.get("block_sd_us"), table.attrs.get("block_sd_b_us")
    return f"the same b on both sides: {words(a)}" if a == b else f"A's b {words(a)}; B's b {words(b)}"


def _print_bstar(bstar, level: float) -> None:  # noqa: ANN001 - the table of evtsync.runfolder.diff.diff_bstar
    print(f"\nΔB* (GB/s) per cell, topology, n and eps: medians A → B and B − A with its {level:.0%} interval")
    print(f"  inputs: {bstar.attrs['inputs']}")
    for r in bstar.itertuples():
        if isinstance(r.d_mean_gbps, float) and math.isnan(r.d_mean_gbps):
            print(f"  {r.cell:<14} {r.verdict}: {r.reason}")
            continue
        print(f"  {r.cell:<14} {r.topology:<8} n={int(r.n):<5d} eps={r.eps:<5g} B* {r.a_median_gbps:>10.5g} → "
              f"{r.b_median_gbps:<10.5g} Δ {r.d_median_gbps:+.5g} [{r.d_lo_gbps:+.5g}, {r.d_hi_gbps:+.5g}] "
              f"({100 * r.d_rel_median:+.1f}%)  {r.verdict}: {r.reason}" + _beyond(r))
    if "beyond_data_note" in bstar.attrs:
        print(f"note: {bstar.attrs['beyond_data_note']}")


def _beyond(row: Any) -> str:
    """The label of a diff row whose n is beyond its cell's rank values on either side (ranktail)."""
    from evtsync.predict.tables import is_beyond_data

    return "  [beyond the data]" if is_beyond_data(getattr(row, "beyond_data", None)) else ""


def _fit_level(args: argparse.Namespace):  # noqa: ANN202 - (fit table, ΔB* table, notes, ΔB* note)
    """The fits of both sides (--fit-a/--fit-b, or the main fit of each run folder), their Δξ and
    Δτ(n) table and, when the B* inputs are known, the ΔB* table; notes on what was used."""
    from pathlib import Path

    from evtsync.core.errors import InputError
    from evtsync.runfolder.diff import diff_bstar, diff_fits, estimator_fits_of_runs, fit_of_run

    if bool(args.fit_a) != bool(args.fit_b):
        raise InputError("diff: give both --fit-a and --fit-b (or neither)")
    notes: list[str] = []
    run_a = fit_of_run(args.a) if (Path(args.a) / "manifest.json").is_file() else None
    run_b = fit_of_run(args.b) if (Path(args.b) / "manifest.json").is_file() else None
    if args.fit_a:
        fit_a, fit_b, note = _given_fits(args.fit_a, args.fit_b, args.estimator, args.seed)
        notes.append(note)
    else:
        runs = {"A": run_a, "B": run_b}
        if not all(runs.values()):
            missing = [side for side, r in runs.items() if r is None]
            if any((Path(path) / "manifest.json").is_file() for path in (args.a, args.b)):
                notes.append(f"fit level skipped: {' and '.join(missing)} {'has' if len(missing) == 1 else 'have'} "
                             "no Bayesian fit with results (give --fit-a/--fit-b, or run folders whose fits finished)")
            return None, None, notes, None
        assert run_a is not None and run_b is not None  # else returned above
        fit_a, fit_b, note = estimator_fits_of_runs(run_a, run_b, args.estimator, args.seed)
        notes.append(note)
    block_sd_b: dict[str, float] | None = None
    if args.own_b:
        if args.block_sd_us is not None:
            raise InputError("diff: --own-b takes each run's measured b; do not also give --block-sd-us")
        if run_a is None or run_b is None or not run_a.block_sd_us or not run_b.block_sd_us:
            raise InputError("diff: --own-b needs two run folders with a block_scale table (their prediction stage)")
        block_sd_b = run_b.block_sd_us
        notes.append("--own-b: each run's own measured b per cell (A's block_scale for A, B's for B), so Δτ and ΔB* "
                     "show the change of the whole tax: block spread and tail")
    if args.block_sd_us is not None:
        if not args.block_sd_us > 0:
            raise InputError(f"diff: --block-sd-us must be > 0 µs; got {args.block_sd_us}")
        block_sd: float | dict[str, float] = float(args.block_sd_us)
    elif run_a is not None and run_a.block_sd_us:
        block_sd = run_a.block_sd_us
        if block_sd_b is None:
            notes.append("b per cell from A's measured block_scale table (the same b on both sides, so Δτ and ΔB* "
                         "show the change in the z-scores' tail; --own-b for each run's own b)")
        if "all" in set(fit_a.cells["cell"]):
            notes.append("pooled fit: b is the median over the run's cells")
    else:
        raise InputError("diff: the fit level needs --block-sd-us B (> 0), the block sd of Δτ(n) and ΔB*")
    if args.workload_a or args.workload_b:
        notes.append("the fits are the runs' own, over every workload of each run; --workload-a/-b select the "
                     "tax table only")
    m = args.m if args.m is not None else (run_a.m if run_a is not None else DEFAULT_M)
    refuse = []
    if run_a is not None and run_b is not None and run_a.m != run_b.m:
        refuse.append(f"sample size m of the z-scores differs ({run_a.m} vs {run_b.m}): the fits describe "
                      "maxima over different numbers of ranks")
    fit_table = diff_fits(fit_a, fit_b, n=args.n, block_sd_us=block_sd, m=m, level=args.level, seed=args.seed,
                          block_sd_b_us=block_sd_b, refuse=refuse)
    inputs, why = _bandwidth_inputs(args, run_a, m, fit_a, fit_b)
    if inputs is None:
        return fit_table, None, notes, why
    if run_a is not None and run_b is not None:
        for what, va, vb in (("alpha (µs)", run_a.alpha_us, run_b.alpha_us), ("S (bytes)", run_a.size_bytes,
                                                                              run_b.size_bytes),
                             ("eps", run_a.eps, run_b.eps)):
            if va is not None and vb is not None and float(va) != float(vb):
                notes.append(f"the runs' B* inputs differ: {what} {va:g} in A, {vb:g} in B; ΔB* uses one value for "
                             "both sides (A's unless a flag is given), so it shows the change in the tax alone")
    bstar = diff_bstar(fit_a, fit_b, inputs, n=args.n, block_sd_us=block_sd, level=args.level, seed=args.seed,
                       block_sd_b_us=block_sd_b, refuse=refuse)
    return fit_table, bstar, notes, None


def _given_fits(path_a: str, path_b: str, estimator: str | None, seed: int):  # noqa: ANN202 - (fit, fit, note)
    """The fits of --fit-a/--fit-b: two z-score tables give ranktail (the default), two GEV fits their
    own estimator (centred for fits of y; with the default estimator a labelled fallback, warned)."""
    import logging
    from pathlib import Path

    from evtsync.core.errors import InputError
    from evtsync.core.tableio import read_table
    from evtsync.evt.bayesfit import BayesFit
    from evtsync.predict import registry

    tables = [Path(p).suffix in (".parquet", ".csv") and Path(p).is_file() for p in (path_a, path_b)]
    if tables[0] != tables[1]:
        raise InputError("diff: --fit-a and --fit-b must be of one kind (two z-score tables, or two Bayesian fits)")
    wanted = registry.get(estimator)
    if tables[0]:
        if not wanted.per_rank:
            raise InputError(f"diff: --estimator {estimator} needs Bayesian fits; z-score tables give "
                             f"{registry.default().name}")
        fits = [wanted.load_table(read_table(p), seed=seed, source=p) for p in (path_a, path_b)]
        return fits[0], fits[1], f"tau(n): the {wanted.name} estimator on both sides (the z-score tables given)"
    if estimator is not None and wanted.per_rank:
        raise InputError(f"diff: --estimator {estimator} needs the z-score tables (give them as --fit-a/--fit-b, or "
                         "compare run folders), not Bayesian fits")
    fit_a, fit_b = BayesFit.load(path_a), BayesFit.load(path_b)
    if estimator is None:
        note = (f"tau(n): fallback to the fits' own ({wanted.fallback}) estimator: Bayesian fits hold no per-rank "
                f"values, which the default {wanted.name} estimator needs (give z-score tables or run folders)")
        logging.getLogger("evtsync.cli.diff").warning("%s", note)
        return fit_a, fit_b, note
    return fit_a, fit_b, f"tau(n): the {estimator} estimator on both sides"


def _bandwidth_inputs(args: argparse.Namespace, run_a, m: int, fit_a, fit_b):  # noqa: ANN001, ANN202
    """(BandwidthInputs, None), or (None, why ΔB* is not computed): the flags of `evtsync
    bandwidth`, each defaulting to what A's run used (alpha, S, eps; every topology of the run)."""
    from evtsync.cli._common import parse_topologies
    from evtsync.cli._whatif import alpha_setup, parse_float_list
    from evtsync.core.errors import InputError
    from evtsync.runfolder.diff import BandwidthInputs

    sources = []
    if args.topology:
        topologies = parse_topologies(args.topology)
    elif run_a is not None and run_a.topologies:
        topologies = list(run_a.topologies)
        sources.append("the topologies of A's run")
    else:
        topologies = []
    alpha_given = args.alpha_us is not None or args.alpha_from is not None
    size = args.bytes if args.bytes is not None else (run_a.size_bytes if run_a is not None else None)
    if args.bytes is None and size is not None:
        sources.append(f"S from A's run ({run_a.bytes_source or 'its prediction stage'})")
    run_alpha = run_a.alpha_us if run_a is not None else None
    missing = [flag for flag, ok in (("--topology", bool(topologies)), ("--alpha-us or --alpha-from",
                                                                        alpha_given or run_alpha is not None),
                                     ("--bytes", size is not None)) if not ok]
    if missing:
        return None, (f"not computed: give {', '.join(missing)} (the inputs of `evtsync bandwidth`; a run folder "
                      "with a prediction stage supplies them)")
    assert size is not None  # else missing above
    if not size > 0:
        raise InputError(f"diff: --bytes must be > 0; got {size}")
    draws = None
    if alpha_given:
        from evtsync.runfolder.diff import _draw_count

        n_draws = max(_draw_count(fit_a), _draw_count(fit_b))
        alpha, draws, alpha_notes = alpha_setup(args, topologies, n_draws if args.alpha_from else None)
        sources += alpha_notes
    else:
        if args.alpha_topology:
            raise InputError("--alpha-topology only applies with --alpha-from")
        assert run_alpha is not None  # else missing above
        alpha = {t: float(run_alpha) for t in topologies}
        sources.append(f"alpha {run_alpha:g} µs from A's run")
    run_eps = run_a.eps if run_a is not None else None
    eps = parse_float_list(args.eps, "--eps", DEFAULT_EPS if run_eps is None else float(run_eps))
    if args.eps is None:
        sources.append("eps from A's run" if run_eps is not None else f"eps {DEFAULT_EPS:g} (the default of evtsync bandwidth)")
    return BandwidthInputs(topologies, alpha, float(size), eps, m, draws, "; ".join(sources) or "given"), None
