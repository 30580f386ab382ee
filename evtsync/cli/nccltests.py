"""``evtsync nccl-tests parse|stats|compare|alpha|plan|run``: nccl-tests logs and experiments.

Thin layer over :mod:`evtsync.nccltests`: parses arguments, calls the library, prints a
readable table (or JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

from evtsync.cli._common import ListOption, add_level_argument, add_out_argument
from evtsync.core.errors import InputError, NcclTestsError
from evtsync.core.units import SIZE_HELP
from evtsync.nccltests.parse import ParsedLog, parse_log
from evtsync.nccltests.plan import DEFAULT_MATRICES

if TYPE_CHECKING:  # heavy modules (pandas, scipy) load inside the handlers that use them
    import pandas as pd

ORDER = 80

def parse_size(text: str) -> float:
    """Bytes from '8', '4e9', '1G' (10^9), '1Gi' (2^30), '512KiB': evtsync's one size convention
    (:func:`evtsync.core.units.parse_bytes`; SI prefixes are powers of ten, IEC ones powers of two)."""
    from evtsync.core.units import parse_bytes

    return parse_bytes(text, "size")


def _size_range(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    parts = re.split(r"[:,]|\.\.", text)
    if len(parts) != 2:
        raise InputError(f"--range {text!r}: expected LOW:HIGH, e.g. 1Gi:4Gi")
    lo, hi = parse_size(parts[0]), parse_size(parts[1])
    if not 0 < lo <= hi:
        raise InputError(f"--range {text!r}: need 0 < LOW <= HIGH")
    return lo, hi


def _fmt_size(n: Any) -> str:
    from evtsync.core.units import format_bytes

    return format_bytes(n)


def _num(v: Any, fmt: str = ".2f") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, fmt)


def _dump_json(obj: Any) -> None:
    from evtsync.cli._common import emit_json

    emit_json(obj)


def _print_table(df: pd.DataFrame) -> None:
    if df.empty:
        print("(no rows)")
    else:
        print(df.to_string(index=False))


def _print_rows(rows: list[dict[str, Any]], columns: list[str]) -> None:
    """Right-aligned text table of plain dicts (no pandas: ``parse`` stays fast to start)."""
    if not rows:
        print("(no rows)")
        return

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "NaN"
        if isinstance(v, float):
            return f"{v:g}"
        return str(v)

    cells = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print(" ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print(" ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))


def _plan_size(text: str) -> str:
    """``--min-bytes``/``--max-bytes``: checked now, kept as written (the plan records it)."""
    from evtsync.core.units import nccl_tests_size

    try:
        nccl_tests_size(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _add_log_overrides(p: argparse.ArgumentParser) -> None:
    p.add_argument("--collective", help="collective when the log does not name it (e.g. all_gather)")
    p.add_argument("--ranks", type=int, help="number of ranks when the log does not list devices")


def _load(path: str, args: argparse.Namespace) -> ParsedLog:
    return parse_log(path, collective=getattr(args, "collective", None), n_ranks=getattr(args, "ranks", None))


def _run_line(pl: ParsedLog) -> list[str]:
    lines = []
    for r in pl.runs:
        cfg = (f"iters {r.iters} warmup {r.warmup_iters} agg {r.agg_iters}" if r.iters is not None
               else "no header (configuration unknown)")
        lines.append(f"run {r.index}: {r.collective or 'unknown collective'} ({r.collective_source or '-'}), "
                     f"{r.n_ranks or '?'} ranks ({r.n_ranks_source or '-'}), {', '.join(r.gpus) or 'GPU unknown'}, "
                     f"NCCL {r.nccl_version or '?'}, {cfg}, {r.n_rows} table lines, {r.n_cycles} cycle(s), "
                     f"{r.n_flagged} flagged"
                     + (f", out of bounds {r.out_of_bounds} {'OK' if r.out_of_bounds_ok else 'FAILED'}"
                        if r.out_of_bounds is not None else ", no footer"))
        if r.failure:
            lines.append(f"  FAILED: {r.failure}")
            lines += [f"    launcher: {c}" for c in r.failure_context]
        lines += [f"  warning: {w}" for w in r.warnings]
    lines += [f"warning: {w}" for w in pl.warnings]
    return lines


# --------------------------------------------------------------------------- handlers


def _cmd_parse(args: argparse.Namespace) -> int:
    pl = _load(args.log, args)
    if args.out:
        from evtsync.core.tableio import write_table

        write_table(pl.measurements, args.out)
    if args.json:
        _dump_json(pl.to_dict())
        return 0
    print(f"{pl.path} ({pl.format})")
    for line in _run_line(pl):
        print(line)
    keys = ["run", "cycle", "size", "count", "type", "redop", "root"]
    vals = ["time_us", "busbw_gbps", "wrong"] + (["error"] if any(r.old_error_column for r in pl.runs) else [])
    wide: dict[tuple[int, int], dict[str, Any]] = {}
    for r in pl.rows:
        row = wide.setdefault((r["run"], r["line"]), {k: r[k] for k in keys} | {"flag": []})
        prefix = "oop" if r["placement"] == "out-of-place" else "ip"
        row.update({f"{prefix}_{v}": r[v] for v in vals})
        if r["bw_flag"]:
            row["flag"].append(r["bw_flag"])
    table = []
    for _, row in sorted(wide.items()):
        row["size"] = _fmt_size(row["size"])
        row["flag"] = "; ".join(row["flag"])
        table.append(row)
    _print_rows(table, [*keys, *(f"oop_{v}" for v in vals), *(f"ip_{v}" for v in vals), "flag"])
    reasons = Counter(s.reason for s in pl.skipped)
    if reasons:
        print(f"skipped {len(pl.skipped)} line(s): " + ", ".join(f"{n} {r}" for r, n in reasons.most_common()))
        if args.show_skipped:
            for s in pl.skipped:
                print(f"  line {s.line}: [{s.reason}] {s.text}")
    if args.out:
        print(f"measurements written to {args.out}")
    return 0


def _line_ranges(lines: list[int]) -> str:
    """``[3, 4, 5, 9]`` -> ``"3-5, 9"``."""
    out: list[str] = []
    for n in sorted(set(lines)):
        if out and n == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{n}"
        else:
            out.append(str(n))
    return ", ".join(out)


def _print_damaged(pl: ParsedLog) -> None:
    """The damaged rows of a log that --allow-damaged let through, one line each."""
    if pl.damaged:
        print(f"DAMAGED: {len(pl.damaged)} result row(s) of {pl.path} (--allow-damaged): rows lost are left out "
              "of these results; rows kept with a #wrong that is not a count fail correctness")
        for d in pl.damaged:
            print(f"  line {d.line}: [{d.reason}] {d.text.strip()[:120]}")


def damaged_rows(logs: list[ParsedLog], *, allow: bool) -> list[dict[str, Any]]:
    """Every damaged result row of the logs (:attr:`ParsedLog.damaged`) as plain dicts; with
    rows damaged and not ``allow``, an :class:`NcclTestsError` naming each log's lines (results
    computed without rows a log held would read as the whole sweep): ``stats``, ``compare`` and
    ``alpha`` alike."""
    found = [{"log": pl.path, "line": d.line, "reason": d.reason, "text": d.text} for pl in logs for d in pl.damaged]
    if found and not allow:
        parts = []
        for pl in logs:
            if pl.damaged:
                reasons = Counter(d.reason.split(" (")[0] for d in pl.damaged)
                parts.append(f"{pl.path}: {len(pl.damaged)} damaged result row(s), line(s) "
                             f"{_line_ranges([d.line for d in pl.damaged])} ("
                             + ", ".join(f"{n} {r}" for r, n in reasons.most_common()) + ")")
        raise NcclTestsError("; ".join(parts) + ": results computed from it would leave out or misread them; repair the "
                             "log, or pass --allow-damaged to go on without them (every output then lists these "
                             "rows)")
    return found


#: Columns of ``stats -o OUT``'s companion table of damaged rows (``OUT_damaged``).
DAMAGED_COLUMNS = ["log", "line", "reason", "text"]


def _write_stats_tables(out: str, table: list[dict[str, Any]], columns: list[str],
                        damaged: list[dict[str, Any]]) -> str:
    """Write ``stats -o OUT``: the statistics, and beside them the companion table
    ``OUT_damaged`` (same format; columns :data:`DAMAGED_COLUMNS`) of the logs' damaged rows that
    ``--allow-damaged`` let through, so that the table outputs, not only the printed text, say
    which rows were left out or fail correctness. Written every time, with no rows when no row
    was damaged, so that a companion left by an earlier run never describes these statistics.
    Returns the companion's path."""
    import pandas as pd

    from evtsync.cli._common import sibling_path
    from evtsync.core.tableio import write_table

    write_table(pd.DataFrame(table, columns=columns), out)
    path = sibling_path(out, "damaged")
    write_table(pd.DataFrame([{c: d[c] for c in DAMAGED_COLUMNS} for d in damaged], columns=DAMAGED_COLUMNS), path)
    return path


def _cmd_stats(args: argparse.Namespace) -> int:
    # computed and printed without pandas (issue 30: a small command starts small); pandas only
    # to write the table with -o
    from evtsync.nccltests.stats import size_stats_records

    logs = [_load(p, args) for p in args.logs]
    damaged = damaged_rows(logs, allow=args.allow_damaged)
    every = size_stats_records(logs, pool_runs=args.pool, cv_threshold=args.cv_threshold,
                               min_cycles=args.min_cycles)
    table = every if args.placement == "both" else [r for r in every if r["placement"] == args.placement]
    damaged_table = _write_stats_tables(args.out, table, list(every[0]), damaged) if args.out else None
    if args.json:
        _dump_json({"logs": [pl.path for pl in logs], "cv_threshold_pct": args.cv_threshold,
                    "min_cycles": args.min_cycles,
                    "runs": [[r.to_dict() for r in pl.runs] for pl in logs],
                    "damaged_rows": damaged, "stats": table,
                    **({"out": args.out, "damaged_rows_table": damaged_table} if args.out else {})})
        return 0
    for pl in logs:
        print(pl.path)
        for line in _run_line(pl):
            print(line)
        _print_damaged(pl)
    keys: list[str] = [c for c in ("source", "run", "placement", "type", "redop", "size") if c in every[0]]
    if len(logs) == 1 and "source" in keys:
        keys.remove("source")
    shown: list[dict[str, Any]] = []
    for r in table:
        row: dict[str, Any] = {c: (_fmt_size(r[c]) if c == "size" else r[c]) for c in keys}
        row.update({"n": r["n_cycles"], "median_us": _num(r["median_us"]), "p95_us": _num(r["p95_us"]),
                    # the median of the log's busbw column
                    "busbw_GB/s": _num(r["busbw_median_gbps"]), "cycle_cv%": _num(r["cycle_cv_pct"]),
                    "iter_cv%": _num(r["iter_cv_pct"]), "correctness": r["correctness"],
                    "stability": r["stability"]})
        shown.append(row)
    _print_rows(shown, [*keys, "n", "median_us", "p95_us", "busbw_GB/s", "cycle_cv%", "iter_cv%", "correctness",
                        "stability"])
    print(f"rule: precise relative differences only where cycle CV <= {args.cv_threshold:g}% "
          f"with >= {args.min_cycles} cycles; #wrong != 0 is not a valid baseline")
    if damaged_table:
        print(f"statistics written to {args.out}; damaged rows ({len(damaged)}: left out, or kept failing "
              f"correctness) listed in {damaged_table}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    import pandas as pd

    from evtsync.nccltests.stats import compare_logs

    old, new = _load(args.old, args), _load(args.new, args)
    damaged = damaged_rows([old, new], allow=args.allow_damaged)
    cmp = compare_logs(old, new, old_run=args.old_run, new_run=args.new_run, threshold_pct=args.threshold,
                       cv_threshold=args.cv_threshold, min_cycles=args.min_cycles)
    if args.json:
        _dump_json({**cmp.to_dict(), "damaged_rows": damaged})
    else:
        print(f"OLD {cmp.old}\nNEW {cmp.new}")
        for pl in (old, new):
            _print_damaged(pl)
        for d in cmp.config_differences:
            print(f"configuration differs: {d}")
        for c in cmp.config_caveats:
            print(f"caveat: {c}")
        rows = [{"placement": v.placement, "type": v.type, "size": _fmt_size(v.size), "verdict": v.verdict,
                 "change%": _num(v.change_pct, "+.2f"), "observed%": _num(v.observed_change_pct, "+.2f"),
                 "old_cv%": _num(v.old_cv_pct), "new_cv%": _num(v.new_cv_pct), "reasons": "; ".join(v.reasons)}
                for v in cmp.verdicts if args.placement == "both" or v.placement == args.placement]
        _print_table(pd.DataFrame(rows))
        print(f"{cmp.n_regressions} regression(s) with a precise verdict")
    return 1 if args.fail_on_regression and cmp.n_regressions else 0


def _cmd_alpha(args: argparse.Namespace) -> int:
    from evtsync.nccltests.alpha import fit_alpha

    pl = _load(args.log, args)
    damaged = damaged_rows([pl], allow=args.allow_damaged)
    fit = fit_alpha(pl, size_range=_size_range(args.range), topology=args.topology, level=args.level,
                    placement=args.placement, run=args.run, linear_tolerance=args.linear_tolerance)
    if args.json:
        _dump_json({**fit.to_dict(), "damaged_rows": damaged})
        return 0
    _print_damaged(pl)
    lo, hi = fit.alpha_interval_us
    blo, bhi = fit.bandwidth_interval_gbps
    print(f"{fit.source}: {fit.collective}, {fit.n_ranks} ranks, {fit.topology} (p = {fit.p:g}, q = {fit.q:.4g}), "
          f"{fit.placement}")
    print(f"size range {_fmt_size(fit.size_range_bytes[0])}..{_fmt_size(fit.size_range_bytes[1])} "
          f"({fit.n_sizes} sizes, {fit.n_points} points; {fit.range_source})")
    print(f"alpha = {fit.alpha_us:.3f} us   {fit.level:.0%} interval [{lo:.3f}, {hi:.3f}] us")
    print(f"B     = {fit.bandwidth_gbps:.2f} GB/s   {fit.level:.0%} interval [{blo:.2f}, "
          f"{'inf' if not math.isfinite(bhi) else f'{bhi:.2f}'}] GB/s")
    print(f"max |residual| {fit.max_abs_residual_pct:.2f}%  ({fit.method})")
    for w in fit.warnings:
        print(f"warning: {w}")
    return 0


def _parse_assignments(items: list[str] | None, kind: type, what: str) -> dict[str, Any]:
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or name not in DEFAULT_MATRICES:
            raise InputError(f"{what} {item!r}: expected MATRIX=VALUE with MATRIX in {', '.join(DEFAULT_MATRICES)}")
        try:
            out[name] = kind(value)
        except ValueError as exc:
            raise InputError(f"{what} {item!r}: bad value") from exc
    return out


def _cmd_plan(args: argparse.Namespace) -> int:
    import pandas as pd

    from evtsync.core.tableio import json_text, write_text_atomic
    from evtsync.nccltests.plan import PlanSettings, build_plan

    settings = PlanSettings(binary=args.binary, min_bytes=args.min_bytes, max_bytes=args.max_bytes,
                            step_factor=args.step_factor, gpus=args.gpus, cycles=args.cycles,
                            datatype=args.datatype, op=args.op, cpu=None if args.no_affinity else args.cpu,
                            remote_cpu=args.remote_cpu, extra=list(args.extra or []))
    matrices = list(args.matrices) if args.matrices else None
    if args.no_affinity and matrices is None:
        matrices = [m for m in DEFAULT_MATRICES if m not in ("affinity", "noise")]
    plan = build_plan(settings, matrices, replicates=_parse_assignments(args.replicates, int, "--replicates"),
                      designs=_parse_assignments(args.design, str, "--design"))
    text = json_text(plan, indent=1)
    if args.out:
        write_text_atomic(args.out, text + "\n")
    if args.json:
        print(text)
        return 0
    for m in plan["matrices"]:
        print(f"matrix {m['name']}: values {', '.join(m['values'])}, {m['design']} order, {m['replicates']} replicates")
    rows = [{"order": e["order"], "matrix": e["matrix"], "variant": e["variant"], "rep": e["replicate"],
             "pos": e["position"], "command": " ".join(e["argv"]),
             "noise_cpu": "-" if e["noise_cpu"] is None else e["noise_cpu"]} for e in plan["entries"]]
    _print_table(pd.DataFrame(rows))
    print(f"{len(plan['entries'])} commands" + (f"; plan written to {args.out}" if args.out else ""))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    import pandas as pd

    from evtsync.nccltests.plan import load_plan, run_plan

    plan = load_plan(args.plan)
    report = run_plan(plan, args.out, timeout_s=args.timeout, only_matrix=args.matrix,
                      allow_any_command=args.allow_any_command)
    if args.json:
        _dump_json({"out_dir": report.out_dir, "runs": report.records, "summary": report.summary})
    else:
        _print_table(pd.DataFrame([{k: r.get(k) for k in ("order", "matrix", "variant", "replicate", "status",
                                                           "rows", "seconds", "log")} for r in report.records]))
        if not report.summary.empty:
            view = report.summary[["matrix", "variant", "n_processes", "placement", "size", "n_cycles", "median_us",
                                   "p95_us", "cycle_cv_pct", "stability", "correctness"]].copy()
            view["size"] = view["size"].map(_fmt_size)
            _print_table(view.round(3))
        print(f"outputs in {report.out_dir} (index.json, summary.csv); {report.n_failed} failed run(s)")
    if report.n_failed:
        print(f"evtsync: {report.n_failed} run(s) failed; see {report.out_dir}/index.json", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------------------- registration


def _add_allow_damaged(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-damaged", action="store_true",
                   help="go on when result rows are damaged (malformed, cut, unreadable inside the table, or a "
                        "#wrong that is not a count); they are listed in every output. Without it such a log is "
                        "refused, naming the lines")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``nccl-tests`` command group."""
    group = subparsers.add_parser("nccl-tests", help="parse nccl-tests logs; stats, verdicts, alpha/B, run plans",
                                  description="Read nccl-tests output and apply the benchmark rules of methodology §9.")
    sub = group.add_subparsers(dest="nccl_command", metavar="SUBCOMMAND")
    group.set_defaults(handler=lambda a: (group.print_help(), 2)[1])

    p = sub.add_parser("parse", help="read a log: measurements, metadata, skipped lines")
    p.add_argument("log")
    _add_log_overrides(p)
    add_out_argument(p, "table", "write the measurements table (.csv or .parquet)")
    p.add_argument("--show-skipped", action="store_true", help="list every skipped line with its reason")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.set_defaults(handler=_cmd_parse)

    s = sub.add_parser("stats", help="median time, P95, busbw, cycle/iteration CV and stability per size")
    s.add_argument("logs", nargs="+")
    _add_log_overrides(s)
    s.add_argument("--pool", action="store_true", help="pool cycles of all logs and runs (replicate processes)")
    s.add_argument("--placement", choices=["both", "out-of-place", "in-place"], default="both")
    s.add_argument("--cv-threshold", type=float, default=5.0, help="stability threshold in %% (default 5)")
    s.add_argument("--min-cycles", type=int, default=3, help="cycles needed to judge stability (default 3)")
    add_out_argument(s, "table", "write the statistics table (.csv or .parquet) and beside it OUT_damaged: the "
                     "damaged rows that --allow-damaged let through (log, line, reason, text)")
    _add_allow_damaged(s)
    s.add_argument("--json", action="store_true", help="JSON output")
    s.set_defaults(handler=_cmd_stats)

    c = sub.add_parser("compare", help="regression verdict per size between OLD and NEW")
    c.add_argument("old")
    c.add_argument("new")
    _add_log_overrides(c)
    c.add_argument("--old-run", type=int, help="run index in OLD when it holds several")
    c.add_argument("--new-run", type=int, help="run index in NEW when it holds several")
    c.add_argument("--threshold", type=float, default=2.0, help="smallest change called a regression, %% (default 2)")
    c.add_argument("--cv-threshold", type=float, default=5.0)
    c.add_argument("--min-cycles", type=int, default=3)
    c.add_argument("--placement", choices=["both", "out-of-place", "in-place"], default="both")
    c.add_argument("--fail-on-regression", action="store_true", help="exit status 1 when a regression is found")
    _add_allow_damaged(c)
    c.add_argument("--json", action="store_true", help="JSON output")
    c.set_defaults(handler=_cmd_compare)

    a = sub.add_parser("alpha", help="fit T(S) = p*alpha + q*S/B: alpha and B with intervals")
    a.add_argument("log")
    _add_log_overrides(a)
    a.add_argument("--range", metavar="LOW:HIGH",
                   help=f"size range, e.g. 1Gi:4Gi (default: where T(S) is linear); {SIZE_HELP}")
    a.add_argument("--topology", default="ring",
                   help="p and q of methodology §8 by topology name, e.g. ring (default ring; an unknown name "
                        "is refused with the list of known ones)")
    add_level_argument(a, "level of the alpha and B intervals")
    a.add_argument("--placement", choices=["out-of-place", "in-place"], default="out-of-place")
    a.add_argument("--run", type=int, help="run index when the log holds several")
    a.add_argument("--linear-tolerance", type=float, default=0.05,
                   help="largest relative residual of the linear regime (default 0.05)")
    _add_allow_damaged(a)
    a.add_argument("--json", action="store_true", help="JSON output")
    a.set_defaults(handler=_cmd_alpha)

    pl = sub.add_parser("plan", help="write a balanced (Latin-square / mirrored) command matrix")
    pl.add_argument("--binary", required=True, help="nccl-tests binary, e.g. ./build/all_reduce_perf")
    add_out_argument(pl, "file", "write the plan as JSON here (the input of `nccl-tests run`)")
    pl.add_argument("--matrices", action=ListOption, item_choices=tuple(DEFAULT_MATRICES), metavar="MATRIX",
                    examples=tuple(DEFAULT_MATRICES)[:2],
                    help=f"subset of {', '.join(DEFAULT_MATRICES)} (space or comma separated)")
    pl.add_argument("--replicates", action="append", metavar="MATRIX=K", help="replicates of a matrix")
    pl.add_argument("--design", action="append", metavar="MATRIX=latin|mirror", help="ordering design of a matrix")
    pl.add_argument("--min-bytes", type=_plan_size, default="1Mi",
                    help=f"-b of nccl-tests (default 1Mi = 2^20), passed as the exact byte count; {SIZE_HELP}")
    pl.add_argument("--max-bytes", type=_plan_size, default="64Mi",
                    help=f"-e of nccl-tests (default 64Mi = 2^26), passed as the exact byte count; {SIZE_HELP}")
    pl.add_argument("--step-factor", type=int, default=64)
    pl.add_argument("--gpus", type=int, default=4, help="-g: GPUs per process")
    pl.add_argument("--cycles", type=int, default=10, help="-N: cycles per process")
    pl.add_argument("--datatype", default="float")
    pl.add_argument("--op", default="sum")
    pl.add_argument("--cpu", type=int, default=0, help="benchmark CPU (taskset) outside the affinity matrix")
    pl.add_argument("--remote-cpu", type=int, default=1, help="second CPU: affinity variant and remote noise")
    pl.add_argument("--no-affinity", action="store_true", help="no taskset (drops affinity and noise matrices)")
    pl.add_argument("--extra", nargs=argparse.REMAINDER, help="further nccl-tests arguments, appended as given")
    pl.add_argument("--json", action="store_true", help="print the plan as JSON")
    pl.set_defaults(handler=_cmd_plan)

    r = sub.add_parser("run", help="execute a plan, collecting outputs per variant",
                       description="Execute a plan's commands one at a time and collect their logs under --out. "
                       "A plan is a script: run only plans you wrote or trust. Its commands must be nccl-tests "
                       "binaries (*_perf), optionally behind mpirun/mpiexec/srun/taskset/numactl; anything else "
                       "is refused unless --allow-any-command. Logs are written only under --out.")
    r.add_argument("plan", help="plan JSON written by 'evtsync nccl-tests plan --out'")
    add_out_argument(r, "folder", "output folder (every log is written under it)", required=True)
    r.add_argument("--allow-any-command", action="store_true",
                   help="run commands other than nccl-tests binaries (the plan's author can run anything)")
    r.add_argument("--timeout", type=float, default=600.0, help="seconds per command (default 600)")
    r.add_argument("--matrix", help="run only this matrix")
    r.add_argument("--json", action="store_true", help="JSON output")
    r.set_defaults(handler=_cmd_run)
