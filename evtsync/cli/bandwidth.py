"""``evtsync bandwidth``: optimal bandwidth B* of the augmented Hockney model (SPEC §8).

The tax tau(n) is given directly (``--tau-us``, the same for every n) or predicted from a
Gumbel/GEV fit of the pooled z-scores as tau(n) = b·E_{n/m} (``--gumbel MU SIGMA`` or
``--gev MU SIGMA XI`` with ``--block-sd-us B`` and ``--m M``). ``--flops-factor F`` divides
tau by F (a GPU F times faster, SPEC §8). Bandwidths are printed in GB/s (1e9 bytes/s);
alpha and tau in µs; ``--bytes`` in bytes (suffixes K/M/G and KiB/MiB/GiB accepted).
With ``--fit FIT_DIR`` the posterior of a Bayesian fit is used (``evtsync.cli._bayes``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

from evtsync.cli._common import alpha_us_from_args, parse_domain_sizes, parse_topologies
from evtsync.defaults import INTERVAL_LEVEL
from evtsync.errors import InputError


def parse_bytes(text: str) -> float:
    """``--bytes``: ``"268435456"``, ``"256MiB"``, ``"0.27GB"`` -> bytes (:func:`evtsync.units.parse_bytes`)."""
    from evtsync.units import parse_bytes as parse

    try:
        return parse(text, "buffer size")
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bandwidth`` command."""
    p = subparsers.add_parser(
        "bandwidth",
        help="optimal bandwidth B* with the synchronization tax vs Hockney's, per topology and n",
        description="B*(eps) = q S (1+eps) / (-eps (p alpha + tau)) for each topology and domain size, "
        "beside Hockney's B*_H (tau = 0). Bandwidths in GB/s (1e9 bytes/s).",
    )
    p.add_argument("--topology", action="append", required=True, metavar="NAME",
                   help="ring, torus3d or full; repeatable or a comma list")
    p.add_argument("--n", nargs="+", required=True, metavar="N", help="domain sizes (space or comma separated)")
    alpha = p.add_mutually_exclusive_group(required=True)
    alpha.add_argument("--alpha-us", type=float, help="per-step latency alpha in µs")
    alpha.add_argument("--alpha-from", metavar="LOG", help="take alpha from an nccl-tests AllReduce log")
    p.add_argument("--bytes", type=parse_bytes, required=True, metavar="S", help="buffer size S in bytes")
    p.add_argument("--eps", type=float, default=-0.5, help="target elasticity in (-1, 0) (default -0.5)")
    tax = p.add_mutually_exclusive_group(required=True)
    tax.add_argument("--tau-us", type=float, metavar="T", help="synchronization tax in µs, the same for every n")
    tax.add_argument("--gumbel", type=float, nargs=2, metavar=("MU", "SIGMA"), help="Gumbel fit of the z-scores")
    tax.add_argument("--gev", type=float, nargs=3, metavar=("MU", "SIGMA", "XI"), help="GEV fit of the z-scores")
    tax.add_argument("--fit", metavar="FIT_DIR", help="Bayesian fit folder: B* with its posterior")
    p.add_argument("--block-sd-us", type=float, metavar="B", help="block standard deviation b in µs (with a fit)")
    p.add_argument("--m", type=int, default=4, help="ranks per sample of the fit (default 4); n must be a multiple")
    p.add_argument("--flops-factor", type=float, default=1.0, metavar="F",
                   help="GPU peak FLOPS relative to the reference (H200): tau is divided by F (default 1)")
    p.add_argument("--level", type=float, default=INTERVAL_LEVEL,
                   help=f"central interval level with --fit (default {INTERVAL_LEVEL:g})")
    p.add_argument("--json", action="store_true", help="print a JSON list, one record per (topology, n)")
    p.add_argument("--plot", metavar="PATH", help="B* against n per topology beside Hockney (.png/.svg/.pdf)")
    p.set_defaults(handler=run_bandwidth)


def _bayesian(args: argparse.Namespace) -> int:
    from evtsync.cli._bayes import run_bayesian_bandwidth

    return int(run_bayesian_bandwidth(args) or 0)


def tax_function(args: argparse.Namespace, sizes: list[int]):
    """tau(n) in µs from the command line, checked for every requested n."""
    from evtsync.evt.predict import domain_multiple, predicted_tax_us

    if not args.flops_factor > 0:
        raise InputError(f"--flops-factor must be > 0; got {args.flops_factor}")
    if args.tau_us is not None:
        if args.block_sd_us is not None:
            raise InputError("--block-sd-us only applies with --gumbel or --gev, not with --tau-us")
        if not args.tau_us >= 0:
            raise InputError(f"--tau-us must be >= 0 µs; got {args.tau_us}")
        return lambda n: args.tau_us / args.flops_factor
    if args.block_sd_us is None:
        raise InputError("--gumbel/--gev need --block-sd-us B (the block's pooled standard deviation in µs)")
    if not args.block_sd_us >= 0:
        raise InputError(f"--block-sd-us must be >= 0 µs; got {args.block_sd_us}")
    mu, sigma, xi = (args.gumbel[0], args.gumbel[1], 0.0) if args.gumbel else tuple(args.gev)
    if not sigma > 0:
        raise InputError(f"fit scale sigma must be > 0; got {sigma}")
    domain_multiple(sizes, args.m)
    b = args.block_sd_us / args.flops_factor
    return lambda n: float(predicted_tax_us(b, mu, sigma, xi, n, args.m))


def _plot(records: list[dict[str, Any]], path: str | os.PathLike[str], eps: float) -> None:
    from evtsync.hockney import get_topology
    from evtsync.plots.base import figure_format, plt, save_figure

    figure_format(path)
    fig, ax = plt.subplots(figsize=(7, 5))
    for i, name in enumerate(dict.fromkeys(r["topology"] for r in records)):
        rows = sorted((r for r in records if r["topology"] == name), key=lambda r: r["n"])
        ns = [r["n"] for r in rows]
        label = get_topology(name).label
        ax.plot(ns, [r["bstar"] for r in rows], "o-", color=f"C{i}", label=f"{label}: with tax")
        ax.plot(ns, [r["bstar_hockney"] for r in rows], "s--", color=f"C{i}", alpha=0.7, label=f"{label}: Hockney")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlabel="scale-up domain size n (GPUs)", ylabel="optimal bandwidth B* (GB/s)",
           title=f"Optimal bandwidth at elasticity {eps:g}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)


def run_bandwidth(args: argparse.Namespace) -> int:
    """Handler of ``evtsync bandwidth``."""
    if args.fit is not None:
        return _bayesian(args)
    from evtsync.hockney import bandwidth_records

    topologies = parse_topologies(args.topology)
    sizes = parse_domain_sizes(args.n)
    if not -1 < args.eps < 0:
        raise InputError(f"--eps must lie in (-1, 0); got {args.eps}")
    alpha = alpha_us_from_args(args)
    tau_of_n = tax_function(args, sizes)
    records = bandwidth_records(topologies, sizes, alpha, args.bytes, args.eps, tau_of_n)
    if args.plot:
        _plot(records, args.plot, args.eps)
    if args.json:
        from evtsync.tableio import json_ready

        print(json.dumps(json_ready(records), allow_nan=False))
        return 0
    print(f"alpha = {alpha:g} µs, S = {args.bytes:.6g} bytes, eps = {args.eps:g}; bandwidths in GB/s")
    print(f"{'topology':9s} {'n':>6s} {'p':>9s} {'q':>7s} {'tau_us':>10s} {'B*':>12s} {'B*_Hockney':>12s} {'reduction':>9s}")
    for r in records:
        reduction = "nan" if math.isnan(r["reduction"]) else f"{100 * r['reduction']:.2f}%"
        print(f"{r['topology']:9s} {r['n']:6d} {r['p']:9.4g} {r['q']:7.4f} {r['tau_us']:10.4g} "
              f"{r['bstar']:12.5g} {r['bstar_hockney']:12.5g} {reduction:>9s}")
    if args.plot:
        print(f"plot: {Path(args.plot)}")
    return 0
