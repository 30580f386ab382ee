"""``evtsync bandwidth``: optimal bandwidth B* of the augmented Hockney model (methodology §8).

The tax tau(n) is given directly (``--tau-us``, the same for every n) or predicted from a
Gumbel/GEV fit of the pooled z-scores as tau(n) = b·E_{n/m} (``--gumbel MU SIGMA`` or
``--gev MU SIGMA XI`` with ``--block-sd-us B`` and ``--m M``). ``--flops-factor F`` divides
tau by F (a GPU F times faster, methodology §8). Bandwidths are printed in GB/s (1e9 bytes/s);
alpha and tau in µs; ``--bytes`` in bytes (suffixes K/M/G and KiB/MiB/GiB accepted).
With ``--fit FIT_DIR`` the posterior of a Bayesian fit is used (``evtsync.cli._bayes``).

``--eps`` and ``--flops-factor`` take comma lists (``--flops-factor 1,2,4,8`` or the doubling
range ``1..8``); with ``--fit`` and two or more factors the bandwidth-scaling requirement
against the roofline is printed as well (the paper's Fig. 13, :func:`evtsync.evt.predict.flops_scaling_table`).
``--alpha-from LOG`` fits alpha per topology: the sweep's intercept p·alpha over each
topology's p at the log's rank count (or, with ``--alpha-topology T``, the machine's topology T,
whose per-step alpha is then reused for every topology, said so); with ``--fit`` its posterior
draws are carried into B*'s interval. ``--gpu``/``--precision``/``--preset`` ask for
hardware the fit may not have seen (population-level predictions).
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from evtsync.cli._common import (
    ListOption,
    add_estimator_argument,
    add_level_argument,
    add_out_argument,
    byte_size,
    parse_topologies,
)
from evtsync.cli._whatif import (
    add_hardware_arguments,
    alpha_setup,
    hardware,
    parse_float_list,
    write_bandwidth_tables,
)
from evtsync.defaults import DEFAULT_EPS, DEFAULT_M
from evtsync.errors import InputError
from evtsync.units import SIZE_HELP


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bandwidth`` command."""
    p = subparsers.add_parser(
        "bandwidth",
        help="optimal bandwidth B* with the synchronization tax vs Hockney's, per topology and n",
        description="B*(eps) = q S (1+eps) / (-eps (p alpha + tau)) for each topology and domain size, "
        "beside Hockney's B*_H (tau = 0). Bandwidths in GB/s (1e9 bytes/s).",
    )
    p.add_argument("--topology", action=ListOption, required=True, metavar="NAME", examples=("full", "ring"),
                   help="ring, torus3d or full (space or comma separated, repeatable)")
    p.add_argument("--n", action=ListOption, metavar="N", examples=("8", "64"),
                   help="domain sizes (space or comma separated; default: --preset's)")
    alpha = p.add_mutually_exclusive_group(required=True)
    alpha.add_argument("--alpha-us", type=float, help="per-step latency alpha in µs")
    alpha.add_argument("--alpha-from", metavar="LOG",
                       help="fit alpha with its interval from an nccl-tests AllReduce log (per topology)")
    p.add_argument("--alpha-topology", metavar="NAME",
                   help="with --alpha-from: the topology of the machine the sweep ran on; its per-step alpha is "
                   "reused for every --topology (default: each topology reads the sweep with its own p)")
    p.add_argument("--bytes", type=byte_size, required=True, metavar="S", help=f"buffer size S: {SIZE_HELP}")
    p.add_argument("--eps", action=ListOption, default=[str(DEFAULT_EPS)], metavar="EPS", examples=("-0.5", "-0.1"),
                   help=f"target elasticities in (-1, 0): --eps -0.5 -0.1 or --eps=-0.5,-0.1 (default {DEFAULT_EPS:g})")
    tax = p.add_mutually_exclusive_group(required=True)
    tax.add_argument("--tau-us", type=float, metavar="T", help="synchronization tax in µs, the same for every n")
    tax.add_argument("--gumbel", type=float, nargs=2, metavar=("MU", "SIGMA"), help="Gumbel fit of the z-scores")
    tax.add_argument("--gev", type=float, nargs=3, metavar=("MU", "SIGMA", "XI"), help="GEV fit of the z-scores")
    tax.add_argument("--fit", metavar="FIT_DIR", help="Bayesian fit folder: B* with its posterior")
    p.add_argument("--block-sd-us", type=float, metavar="B", help="block standard deviation b in µs (with a fit)")
    p.add_argument("--m", type=int, default=DEFAULT_M,
                   help=f"ranks per sample of the fit (default {DEFAULT_M}); n must be a multiple")
    p.add_argument("--flops-factor", action=ListOption, metavar="F", examples=("1", "2"),
                   help="GPU peak FLOPS relative to the reference (H200): tau is divided by F; a comma list or "
                   "a doubling range LO..HI sweeps it (space or comma separated; default 1, or --preset's TFLOPS / 989)")
    add_hardware_arguments(p)
    add_level_argument(p)
    p.add_argument("--json", action="store_true", help="print a JSON list, one record per (topology, n)")
    add_out_argument(p, "table", "write the table, one row per (topology, n, eps, FLOPS factor) (.parquet/.csv); "
                     "with a FLOPS sweep also PATH_scaling")
    p.add_argument("--plot", metavar="PATH", help="B* against n per topology beside Hockney (.png/.svg/.pdf); with "
                   "several --eps one panel row per eps; with a FLOPS sweep and --fit, B* against FLOPS (Fig. 13)")
    p.add_argument("--nvlink-gbps", action=ListOption, default=None, metavar="GBPS", examples=("450", "900"),
                   help="reference lines on the plot, space or comma separated (default: Table 1's 450 (H100/H200) and 900 (B200))")
    add_estimator_argument(p)
    p.set_defaults(handler=run_bandwidth)


def _bayesian(args: argparse.Namespace) -> int:
    from evtsync.cli._bayes import run_bayesian_bandwidth

    return int(run_bayesian_bandwidth(args) or 0)


def tax_function(args: argparse.Namespace, sizes: list[int], flops_factor: float = 1.0):
    """tau(n) in µs from the command line, checked for every requested n, on a GPU ``flops_factor`` times faster."""
    from evtsync.evt.predict import domain_multiple, predicted_tax_us

    if not flops_factor > 0:
        raise InputError(f"--flops-factor must be > 0; got {flops_factor}")
    if args.tau_us is not None:
        if args.block_sd_us is not None:
            raise InputError("--block-sd-us only applies with --gumbel or --gev, not with --tau-us")
        if not args.tau_us >= 0:
            raise InputError(f"--tau-us must be >= 0 µs; got {args.tau_us}")
        return lambda n: args.tau_us / flops_factor
    if args.block_sd_us is None:
        raise InputError("--gumbel/--gev need --block-sd-us B (the block's pooled standard deviation in µs)")
    if not args.block_sd_us >= 0:
        raise InputError(f"--block-sd-us must be >= 0 µs; got {args.block_sd_us}")
    mu, sigma, xi = (args.gumbel[0], args.gumbel[1], 0.0) if args.gumbel else tuple(args.gev)
    if not sigma > 0:
        raise InputError(f"{'--gumbel' if args.gumbel else '--gev'}: the scale sigma must be > 0; got {sigma}")
    if xi >= 1:
        raise InputError(f"--gev shape xi = {xi:g} >= 1: the mean of the maximum is infinite, so tau(n) and B* "
                         "are not defined (methodology §6: the mean exists for xi < 1)")
    domain_multiple(sizes, args.m)
    b = args.block_sd_us / flops_factor
    return lambda n: float(predicted_tax_us(b, mu, sigma, xi, n, args.m))


def _plot(records: list[dict[str, Any]], path: str | os.PathLike[str], nvlink: dict[str, float]) -> None:
    from evtsync.plots.base import figure_format, save_figure
    from evtsync.plots.whatif import bstar_points

    figure_format(path)
    save_figure(bstar_points(records, nvlink), path, dpi=120)


def run_bandwidth(args: argparse.Namespace) -> int:
    """Handler of ``evtsync bandwidth``."""
    if args.fit is not None:
        return _bayesian(args)
    if args.estimator == "ranktail" and args.tau_us is None:  # GEV parameters cannot give it
        raise InputError("--estimator ranktail predicts from every rank's value: give --fit ZSCORES (the z-score "
                         "table written by `evtsync blocks`, or a run folder)")
    from evtsync.hockney import bandwidth_records

    for flag in ("gpu", "precision", "preset"):
        if getattr(args, flag, None):
            raise InputError(f"--{flag} asks a fit about hardware: it needs --fit FIT_DIR")
    topologies = parse_topologies(args.topology)
    hw = hardware(args)
    if not hw["sizes"]:
        raise InputError("give the domain sizes --n N... (or --preset NAME)")
    sizes = hw["sizes"]
    eps_values = parse_float_list(args.eps, "--eps", DEFAULT_EPS)
    for eps in eps_values:
        if not -1 < eps < 0:
            raise InputError(f"--eps must lie in (-1, 0); got {eps:g}")
    alpha_by_topology, _, notes = alpha_setup(args, topologies)
    records = []
    for factor in hw["factors"]:
        tau_of_n = tax_function(args, sizes, factor)
        for eps in eps_values:
            for t in topologies:
                for r in bandwidth_records([t], sizes, alpha_by_topology[get_name(t)], args.bytes, eps, tau_of_n):
                    records.append({**r, "flops_factor": factor})
    scaling = point_scaling(records) if len(set(hw["factors"])) > 1 else None
    if args.out:
        import pandas as pd

        write_bandwidth_tables(args.out, pd.DataFrame(records), None if scaling is None else pd.DataFrame(scaling))
    if args.plot:
        _plot(records, args.plot, hw["nvlink"])
    if args.json:
        from evtsync.cli._common import emit_json

        payload: Any = records if scaling is None else {"rows": records, "flops_scaling": scaling,
                                                       "definition": SCALING_DEFINITION}
        emit_json(payload, indent=None)
        return 0
    for note in notes:
        print(note)
    print(f"S = {args.bytes:.6g} bytes; bandwidths in GB/s")
    if args.tau_us is None:  # tau from given GEV parameters: what they were fitted to decides the estimator
        print(f"tau(n) = b·E_(n/{args.m}) of the given GEV, as the {args.estimator} estimator: "
              + ("its parameters must be a fit of the centred maxima y" if args.estimator == "centred" else
                 "the paper's, from a fit of z (biased low beyond n = m)")
              + "; b and alpha fixed at the values given")
    print(f"{'topology':9s} {'n':>6s} {'eps':>5s} {'flops':>6s} {'p':>9s} {'q':>7s} {'alpha_us':>8s} {'tau_us':>10s} "
          f"{'B*':>12s} {'B*_Hockney':>12s} {'reduction':>9s}")
    for r in records:
        reduction = "nan" if math.isnan(r["reduction"]) else f"{100 * r['reduction']:.2f}%"
        print(f"{r['topology']:9s} {r['n']:6d} {r['eps']:5g} {r['flops_factor']:6.3g} {r['p']:9.4g} {r['q']:7.4f} "
              f"{r['alpha_us']:8.4g} {r['tau_us']:10.4g} {r['bstar']:12.5g} {r['bstar_hockney']:12.5g} {reduction:>9s}")
    if scaling:
        print(f"bandwidth-scaling requirement ({SCALING_DEFINITION}):")
        for r in scaling:
            print(f"  {r['topology']:9s} n={r['n']:<6d} eps={r['eps']:<5g} FLOPS x{r['roofline_growth']:.4g}: B* grows "
                  f"x{r['growth']:.4g}, {100 * r['scaling_reduction']:.1f}% below the roofline; Hockney's B*_H x1")
    if args.plot:
        print(f"plot: {Path(args.plot)}")
    return 0


#: How the bandwidth-scaling requirement is defined (docs/what-if.md).
SCALING_DEFINITION = ("growth = B*(f_hi)/B*(f_lo); roofline growth = f_hi/f_lo; "
                      "scaling_reduction = 1 - growth/roofline growth; Hockney's B*_H does not depend on FLOPS")


def point_scaling(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per topology, n and eps: B*'s growth from the smallest to the largest FLOPS factor of
    ``records`` against the roofline's (:func:`evtsync.evt.predict.flops_scaling_table` with a point tax)."""
    out = []
    keys = dict.fromkeys((r["topology"], r["n"], r["eps"]) for r in records)
    for topo, n, eps in keys:
        rows = sorted((r for r in records if (r["topology"], r["n"], r["eps"]) == (topo, n, eps)),
                      key=lambda r: r["flops_factor"])
        lo, hi = rows[0], rows[-1]
        big_f = hi["flops_factor"] / lo["flops_factor"]
        growth = hi["bstar"] / lo["bstar"]
        out.append({"topology": topo, "n": n, "eps": eps, "flops_lo": lo["flops_factor"], "flops_hi": hi["flops_factor"],
                    "roofline_growth": big_f, "hockney_growth": hi["bstar_hockney"] / lo["bstar_hockney"],
                    "growth": growth, "scaling_exponent": math.log(growth) / math.log(big_f),
                    "scaling_reduction": 1 - growth / big_f})
    return out


def get_name(topology: str) -> str:
    """Canonical topology name."""
    from evtsync.hockney import get_topology

    return get_topology(topology).name
