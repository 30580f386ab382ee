"""The Bayesian side of the command line: ``evtsync fit --model``, ``bandwidth --fit``, ``predict``, ``compare``.

The argument parsers live in ``evtsync/cli/`` (fit, bandwidth, predict, compare); the handlers
here call the library (:mod:`evtsync.evt.fit`, :mod:`~evtsync.evt.posterior`,
:mod:`~evtsync.evt.compare`) and print. Exit status 1 when a fit used is not converged (the
output is still written and says so), 0 otherwise; bad input raises an ``EvtsyncError``.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.errors import InputError


def _json_safe(value: Any) -> Any:
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [_json_safe(r) for r in table.to_dict(orient="records")]


def _read_z_table(args: argparse.Namespace) -> pd.DataFrame:
    from evtsync.tableio import read_table

    table = read_table(args.data)
    for clause in getattr(args, "where", []) or []:
        key, sep, value = clause.partition("=")
        if not sep or key not in table.columns:
            raise InputError(f"{args.data}: --where {clause!r}: expected COL=VALUE with COL one of the table's columns")
        table = table[table[key].astype(str) == value]
    if len(table) == 0:
        raise InputError(f"{args.data}: no rows left" + (" after --where" if getattr(args, "where", None) else ""))
    return table


def run_bayesian_fit(args: argparse.Namespace) -> int:
    """``evtsync fit DATA --model models/NAME.toml [--out fits/NAME] ...``: sample, save, summarise."""
    from dataclasses import replace

    from evtsync.evt.catalog import resolve_model
    from evtsync.evt.fit import fit_table, parameter_summary, save_fit
    from evtsync.evt.spec import load_spec
    from evtsync.progress import progress_enabled
    from evtsync.tableio import file_sha256

    spec = load_spec(resolve_model(args.model, getattr(args, "models_dir", None)))
    if getattr(args, "column", None):
        spec = replace(spec, column=args.column)
    table = _read_z_table(args)
    if getattr(args, "negate", False):
        table = table.assign(**{spec.column: -pd.to_numeric(table[spec.column], errors="coerce")})
    seed = args.seed if args.seed is not None else int(np.random.default_rng().integers(2**31 - 1))
    out = Path(args.out) if args.out else Path("fits") / spec.name
    command = "evtsync " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else ""
    tree = fit_table(
        table, spec, draws=args.draws, tune=args.tune, chains=args.chains, seed=seed,
        sampler=args.sampler, source=str(args.data), source_sha256=file_sha256(args.data),
        command=command, progress=progress_enabled(), target_accept=getattr(args, "target_accept", None),
    )
    path = save_fit(tree, out)
    summary = parameter_summary(tree)
    if getattr(args, "plot", None):
        plot_fit(tree, args.plot)
    converged = bool(tree.attrs["converged"])
    if args.json:
        print(json.dumps(_json_safe({
            "fit": str(path), "model": spec.name, "family": spec.family, "n_obs": int(tree.attrs["n_obs"]),
            "skipped_rows": int(tree.attrs["n_skipped"]), "seed": seed, "sampler": tree.attrs["sampler"],
            "converged": converged, "max_rhat": tree.attrs["max_rhat"], "min_ess_bulk": tree.attrs["min_ess_bulk"],
            "divergences": int(tree.attrs["divergences"]), "sampling_seconds": tree.attrs["sampling_seconds"],
            "prior_predictive": tree.attrs["prior_predictive"],
            "parameters": _records(summary),
        }), allow_nan=False))
    else:
        print(f"Bayesian fit of {spec.name} ({spec.family}) to {tree.attrs['n_obs']} z-scores of {args.data} "
              f"in {tree['cells'].sizes['cell']} cell(s); {tree.attrs['chains']} chains x {tree.attrs['draws']} draws "
              f"({tree.attrs['sampler']}, seed {seed}, {tree.attrs['sampling_seconds']:.1f} s)")
        if int(tree.attrs["n_skipped"]):
            print(f"  skipped rows: {tree.attrs['n_skipped']}")
        cols = ["parameter", "mean", "sd", "q05", "q95", "r_hat", "ess_bulk", "ess_tail"]
        print(summary[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"  prior predictive check: {tree.attrs['prior_predictive']}")
        print(f"  {tree.attrs['convergence']}")
        print(f"  written: {path}")
    return 0 if converged else 1


def plot_fit(tree, path: str) -> None:
    """Posterior of xi (or mu when xi = 0) per cell: density of the draws with the 90% interval."""
    from evtsync.evt.fit import cell_parameters
    from evtsync.evt.posterior import _figure, _save

    params = cell_parameters(tree)
    name = "xi" if tree.attrs.get("model_family") != "gumbel" else "mu"
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, cell in enumerate(params["cell"].values):
        v = params[name].sel(cell=cell).values.ravel()
        ax.hist(v, bins=50, density=True, histtype="step", color=f"C{i}", label=str(cell))
        lo, hi = np.quantile(v, [0.05, 0.95])
        ax.axvspan(lo, hi, color=f"C{i}", alpha=0.08)
    ax.set(xlabel=name, ylabel="posterior density",
           title=f"{tree.attrs.get('model_name')}: posterior of {name} per cell (shaded: 90% interval)")
    if not int(tree.attrs.get("converged", 0)):
        ax.text(0.02, 0.98, "NOT CONVERGED", transform=ax.transAxes, color="red", va="top")
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)


def _block_sd(args: argparse.Namespace) -> float:
    sd = getattr(args, "block_sd_us", None)
    mean = getattr(args, "block_mean_us", None)
    cv = getattr(args, "cv", None)
    if sd is not None:
        if mean is not None or cv is not None:
            raise InputError("give either --block-sd-us B or --block-mean-us A with --cv R, not both")
        if not sd >= 0:
            raise InputError(f"--block-sd-us must be >= 0 µs; got {sd}")
        return float(sd)
    if mean is None or cv is None:
        raise InputError("the block's spread is needed: --block-sd-us B, or --block-mean-us A with --cv R")
    if not mean > 0 or not cv >= 0:
        raise InputError(f"--block-mean-us must be > 0 and --cv >= 0; got {mean} and {cv}")
    return float(mean) * float(cv)


def _print_note(tree) -> None:
    from evtsync.evt.fit import convergence_note

    note = convergence_note(tree)
    if note:
        print(note)


def run_bayesian_bandwidth(args: argparse.Namespace) -> int:
    """``evtsync bandwidth --fit FIT ...``: B* and its reduction vs Hockney as credible intervals."""
    from evtsync.cli.bandwidth import alpha_us_from_args, parse_domain_sizes, parse_topologies
    from evtsync.evt.fit import is_converged, load_fit
    from evtsync.evt.posterior import bandwidth_summary, plot_bandwidth
    from evtsync.evt.predict import domain_multiple

    tree = load_fit(args.fit)
    topologies = parse_topologies(args.topology)
    sizes = parse_domain_sizes(args.n)
    domain_multiple(sizes, args.m)
    if not -1 < args.eps < 0:
        raise InputError(f"--eps must lie in (-1, 0); got {args.eps}")
    if getattr(args, "tau_us", None) is not None:
        raise InputError("--fit takes the tax from the posterior; do not also give --tau-us")
    block_sd = _block_sd(args)
    alpha = alpha_us_from_args(args)
    level = getattr(args, "level", 0.9)
    summary = bandwidth_summary(tree, topologies, sizes, alpha, args.bytes, block_sd, args.eps, args.m, level,
                                getattr(args, "flops_factor", 1.0))
    if args.plot:
        plot_bandwidth(summary, args.plot)
    if args.json:
        print(json.dumps(_records(summary), allow_nan=False))
    else:
        print(f"fit {tree.attrs['model_name']}: alpha = {alpha:g} µs, S = {args.bytes:.6g} bytes, eps = {args.eps:g}, "
              f"b = {block_sd:g} µs; mean [{level:.0%} interval]; bandwidths in GB/s")
        for _, r in summary.iterrows():
            print(f"  {r['cell']:14s} {r['topology']:8s} n={r['n']:<5d} tau {r['tau_mean_us']:9.4g} "
                  f"[{r['tau_lower_us']:.4g}, {r['tau_upper_us']:.4g}] µs   B* {r['bstar_mean']:10.5g} "
                  f"[{r['bstar_lower']:.5g}, {r['bstar_upper']:.5g}]   Hockney {r['bstar_hockney']:10.5g}   "
                  f"reduction {100 * r['reduction_mean']:.2f}% [{100 * r['reduction_lower']:.2f}, "
                  f"{100 * r['reduction_upper']:.2f}]")
        _print_note(tree)
        if args.plot:
            print(f"plot: {args.plot}")
    return 0 if is_converged(tree) else 1


def run_bayesian_predict(args: argparse.Namespace) -> int:
    """``evtsync predict FIT --n N... (--block-sd-us B | --block-mean-us A --cv R)``: tau(n) posterior."""
    from evtsync.cli.bandwidth import parse_domain_sizes
    from evtsync.evt.fit import is_converged, load_fit
    from evtsync.evt.posterior import plot_tau, tau_summary
    from evtsync.evt.predict import domain_multiple

    tree = load_fit(args.fit)
    if getattr(args, "straggler", None):
        return _straggler(args, tree)
    if not args.n:
        raise InputError("give the domain sizes --n N... (or --straggler TABLE)")
    sizes = parse_domain_sizes(args.n)
    domain_multiple(sizes, args.m)
    block_sd = _block_sd(args)
    summary = tau_summary(tree, sizes, block_sd, args.m, args.level)
    if getattr(args, "out", None):
        from evtsync.tableio import write_table

        write_table(summary, args.out)
    if args.plot:
        plot_tau(summary, args.plot)
    if args.json:
        print(json.dumps(_records(summary), allow_nan=False))
    else:
        print(f"fit {tree.attrs['model_name']}: tau(n) = b·E_(n/{args.m}) with b = {block_sd:g} µs; "
              f"posterior mean [{args.level:.0%} credible interval]")
        for _, r in summary.iterrows():
            print(f"  {r['cell']:14s} n={r['n']:<6d} tau {r['tau_mean_us']:10.4g} µs  "
                  f"[{r['tau_lower_us']:.4g}, {r['tau_upper_us']:.4g}]")
        _print_note(tree)
        if args.plot:
            print(f"plot: {args.plot}")
    return 0 if is_converged(tree) else 1


def _straggler(args: argparse.Namespace, tree) -> int:
    """Predicted vs measured mean straggler delay per row of ``--straggler TABLE``."""
    from evtsync.evt.fit import is_converged
    from evtsync.evt.posterior import plot_straggler, straggler_comparison
    from evtsync.tableio import read_table, write_table

    if args.n or any(getattr(args, k, None) is not None for k in ("block_sd_us", "block_mean_us", "cv")):
        raise InputError("--straggler takes n and b from the table; do not also give --n or the block spread")
    table = straggler_comparison(tree, read_table(args.straggler), args.m, args.level, source=str(args.straggler))
    if table.empty:
        raise InputError(f"{args.straggler}: no row matches a cell of the fit ({table.attrs['skipped']})")
    if getattr(args, "out", None):
        write_table(table, args.out)
    if args.plot:
        plot_straggler(table, args.plot)
    if args.json:
        print(json.dumps(_json_safe({"rows": _records(table), "skipped": table.attrs["skipped"]}), allow_nan=False))
    else:
        print(f"fit {tree.attrs['model_name']}: predicted vs measured mean straggler delay; "
              f"posterior mean [{args.level:.0%} interval]")
        for _, r in table.iterrows():
            print(f"  {r['workload']:16s} {r['gpu']:6s} {r['precision']:5s} n={r['n_ranks']:<4d} measured "
                  f"{r['measured_delay_us']:9.4g} µs  predicted {r['predicted_mean_us']:9.4g} "
                  f"[{r['predicted_lower_us']:.4g}, {r['predicted_upper_us']:.4g}]"
                  + ("" if r["inside_interval"] else "  outside"))
        skipped = {k: v for k, v in table.attrs["skipped"].items() if v}
        if skipped:
            print(f"  skipped rows: {skipped}")
        _print_note(tree)
    return 0 if is_converged(tree) else 1


def run_bayesian_compare(args: argparse.Namespace) -> int:
    """``evtsync compare FIT FIT ...``: PSIS-LOO table with ELPD differences and a verdict."""
    from evtsync.evt.compare import compare_fits
    from evtsync.evt.fit import load_fit
    from evtsync.tableio import write_table

    trees = [load_fit(p) for p in args.fits]
    table, words = compare_fits(trees)
    if args.out:
        write_table(table, args.out)
    if args.json:
        print(json.dumps(_json_safe({"models": _records(table), "verdict": words.splitlines()}), allow_nan=False))
    else:
        cols = ["rank", "model", "family", "elpd_loo", "se", "p_loo", "elpd_diff", "diff_se",
                "k_good", "k_bad", "k_very_bad", "converged"]
        print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.1f}"))
        print(words)
        if args.out:
            print(f"written: {args.out}")
    return 0 if bool(table["converged"].all()) else 1
