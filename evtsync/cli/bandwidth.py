"""``evtsync bandwidth``: optimal bandwidth B* of the augmented Hockney model (methodology §8).

The tax tau(n) is given directly (``--tau-us``, the same for every n) or predicted from a
Gumbel/GEV fit of the pooled z-scores as tau(n) = b·E_{n/m} (``--gumbel MU SIGMA`` or
``--gev MU SIGMA XI`` with ``--block-sd-us B`` and ``--m M``). ``--flops-factor F`` divides
tau by F (a GPU F times faster, methodology §8). Bandwidths are printed in GB/s (1e9 bytes/s);
alpha and tau in µs; ``--bytes`` in bytes (suffixes K/M/G and KiB/MiB/GiB accepted).
With ``--fit FIT_DIR`` the posterior of a Bayesian fit is used (``evtsync.cli._bayes``); without
it the same tables of :mod:`evtsync.predict.tables` are built from one draw (a
:class:`~evtsync.predict.tables.PointFit` of the given GEV, or
:func:`~evtsync.predict.tables.given_tax_bandwidth_table` for ``--tau-us``), so ``--json`` and
``-o`` have the columns of ``bandwidth --fit``.

``--eps`` and ``--flops-factor`` take comma lists (``--flops-factor 1,2,4,8`` or the doubling
range ``1..8``); with two or more factors the bandwidth-scaling requirement
against the roofline is printed as well (the paper's Fig. 13, :func:`evtsync.predict.tables.flops_scaling_table`).
``--alpha-from LOG`` fits alpha per topology: the sweep's intercept p·alpha over each
topology's p at the log's rank count (or, with ``--alpha-topology T``, the machine's topology T,
whose per-step alpha is then reused for every topology, said so); with ``--fit`` its posterior
draws are carried into B*'s interval. ``--gpu``/``--precision``/``--preset`` ask for
hardware the fit may not have seen (population-level predictions).
"""

from __future__ import annotations

import argparse
import math
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
    plot_bandwidth,
    write_bandwidth_tables,
)
from evtsync.core.defaults import DEFAULT_EPS, DEFAULT_ESTIMATOR, DEFAULT_M
from evtsync.core.errors import InputError
from evtsync.core.units import SIZE_HELP


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
    tax.add_argument("--fit", metavar="FIT", help="B* with its posterior from a run folder (its rank model, "
                     "fits/rankmodel.nc; its main GEV fit for the fallback), a z-score table (the rank model fitted to "
                     "it) or a Bayesian fit folder "
                     "(centred/paper; with the default estimator a labelled centred fallback)")
    p.add_argument("--block-sd-us", action=ListOption, metavar="B", examples=("H100/bf16=18", "A100/fp32=20"),
                   help="block standard deviation b in µs: one value B, or with --fit one per cell as "
                   "GPU/precision=B (a run folder or z-score table gives each cell its own b when this is left out; "
                   "one B over several of its cells is refused)")
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
                   "several --eps one panel row per eps; with a FLOPS sweep, B* against FLOPS (Fig. 13)")
    p.add_argument("--nvlink-gbps", action=ListOption, default=None, metavar="GBPS", examples=("450", "900"),
                   help="reference lines on the plot, space or comma separated (default: Table 1's 450 (H100/H200) and 900 (B200))")
    add_estimator_argument(p)
    p.set_defaults(handler=run_bandwidth)


def _bayesian(args: argparse.Namespace) -> int:
    from evtsync.cli._bayes import run_bayesian_bandwidth

    return int(run_bayesian_bandwidth(args) or 0)


def point_fit(args: argparse.Namespace, sizes: list[int]) -> Any:
    """The one-draw fit of ``--gumbel MU SIGMA`` / ``--gev MU SIGMA XI`` (:class:`evtsync.predict.tables.PointFit`),
    or None for ``--tau-us``, after checking the options that go with each."""
    from evtsync.cli._bayes import parse_block_sd
    from evtsync.predict.tables import PointFit, domain_multiple

    one, per_cell = parse_block_sd(args.block_sd_us)
    if per_cell:
        raise InputError("--block-sd-us GPU/precision=B applies with --fit; --gumbel/--gev take one value B")
    if args.tau_us is not None:
        if one is not None:
            raise InputError("--block-sd-us only applies with --gumbel or --gev, not with --tau-us")
        if not args.tau_us >= 0:
            raise InputError(f"--tau-us must be >= 0 µs; got {args.tau_us}")
        return None
    if one is None:
        raise InputError("--gumbel/--gev need --block-sd-us B (the block's pooled standard deviation in µs)")
    args.block_sd_us = one  # the one value, for the tables below
    mu, sigma, xi = (args.gumbel[0], args.gumbel[1], 0.0) if args.gumbel else tuple(args.gev)
    if not sigma > 0:
        raise InputError(f"{'--gumbel' if args.gumbel else '--gev'}: the scale sigma must be > 0; got {sigma}")
    if xi >= 1:
        raise InputError(f"--gev shape xi = {xi:g} >= 1: the mean of the maximum is infinite, so tau(n) and B* "
                         "are not defined (methodology §6: the mean exists for xi < 1)")
    domain_multiple(sizes, args.m)
    return PointFit(mu, sigma, xi, estimator=_point_estimator(args), name="gumbel" if args.gumbel else "gev")


#: Why given GEV parameters are predicted with the centred estimator, not the default (the rank model).
POINT_FALLBACK_NOTE = ("fallback to the centred estimator: GEV parameters given (--gumbel/--gev) hold no per-rank "
                       f"values, which the default {DEFAULT_ESTIMATOR} estimator needs (give --fit ZSCORES or a run "
                       "folder)")


def _point_estimator(args: argparse.Namespace) -> str:
    """The estimator of given GEV parameters: the one named, else the labelled centred fallback."""
    from evtsync.predict.tables import FALLBACK_ESTIMATOR

    return str(args.estimator) if args.estimator is not None else FALLBACK_ESTIMATOR


def run_bandwidth(args: argparse.Namespace) -> int:
    """Handler of ``evtsync bandwidth``."""
    if args.fit is not None:
        return _bayesian(args)
    from evtsync.predict import registry

    if args.estimator is not None and registry.get(args.estimator).per_rank and args.tau_us is None:
        # GEV parameters cannot give it
        raise InputError(f"--estimator {args.estimator} predicts from every rank's value: give --fit ZSCORES (the "
                         "z-score table written by `evtsync blocks`, or a run folder)")
    from evtsync.predict.tables import (
        SCALING_DEFINITION,
        bandwidth_table,
        flops_scaling_table,
        given_tax_bandwidth_table,
        given_tax_scaling_table,
        point_column,
    )

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
    fit = point_fit(args, sizes)
    sweep = len(set(hw["factors"])) > 1
    if fit is None:  # the tax given: the same tables, one draw (evtsync.predict.tables)
        table = given_tax_bandwidth_table(args.tau_us, topologies, sizes, alpha_by_topology, args.bytes, eps_values,
                                          hw["factors"])
        scaling = (given_tax_scaling_table(args.tau_us, topologies, sizes, alpha_by_topology, args.bytes,
                                           hw["factors"], eps_values) if sweep else None)
    else:  # given GEV parameters: a one-draw fit through the posterior's tables
        estimator = _point_estimator(args)
        table = bandwidth_table(fit, topologies, sizes, alpha_by_topology, args.bytes, args.block_sd_us, eps_values,
                                args.m, flops_factor=hw["factors"], estimator=estimator)
        scaling = (flops_scaling_table(fit, topologies, sizes, alpha_by_topology, args.bytes, args.block_sd_us,
                                       hw["factors"], eps_values, args.m, estimator=estimator) if sweep else None)
        if args.estimator is None:  # the default could not run: every row says so (issue 29)
            import logging

            logging.getLogger("evtsync.cli.bandwidth").warning("%s", POINT_FALLBACK_NOTE)
            for t in (table, scaling):
                if t is not None:
                    t["estimator_note"] = POINT_FALLBACK_NOTE
                    t.attrs["estimator_note"] = POINT_FALLBACK_NOTE
    if args.out:
        write_bandwidth_tables(args.out, table, scaling)
    if args.plot:
        plot_bandwidth(args.plot, table, scaling, hw["nvlink"])
    if args.json:
        from evtsync.cli._common import emit_json

        payload: Any = table if scaling is None else {"rows": table, "flops_scaling": scaling,
                                                     "definition": SCALING_DEFINITION}
        emit_json(payload, indent=None)
        return 0
    for note in notes:
        print(note)
    print(f"S = {args.bytes:.6g} bytes; bandwidths in GB/s")
    if args.tau_us is None:  # tau from given GEV parameters: what they were fitted to decides the estimator
        if args.estimator is None:
            print(f"NOTE: {POINT_FALLBACK_NOTE}")
        given = registry.get(_point_estimator(args))
        print(f"tau(n) = b·E_(n/{args.m}) of the given GEV, as the {given.name} estimator: its parameters must be a "
              f"fit of {given.column}: {given.meaning}; b and alpha fixed at the values given")
    print(f"{'topology':9s} {'n':>6s} {'eps':>5s} {'flops':>6s} {'p':>9s} {'q':>7s} {'alpha_us':>8s} {'tau_us':>10s} "
          f"{'B*':>12s} {'B*_Hockney':>12s} {'reduction':>9s}")
    points = zip(point_column(table, "tau", "_us"), point_column(table, "bstar", "_gbps"),
                 point_column(table, "reduction"), strict=True)
    for r, (tau, bstar, red) in zip(table.to_dict(orient="records"), points, strict=True):
        reduction = "nan" if math.isnan(red) else f"{100 * red:.2f}%"
        print(f"{r['topology']:9s} {r['n']:6d} {r['eps']:5g} {r['flops_factor']:6.3g} {r['p']:9.4g} {r['q']:7.4f} "
              f"{r['alpha_us']:8.4g} {tau:10.4g} {bstar:12.5g} "
              f"{r['bstar_hockney_gbps']:12.5g} {reduction:>9s}")
    if scaling is not None:
        print(f"bandwidth-scaling requirement ({SCALING_DEFINITION}):")
        for r in scaling.to_dict(orient="records"):
            print(f"  {r['topology']:9s} n={r['n']:<6d} eps={r['eps']:<5g} FLOPS x{r['roofline_growth']:.4g}: B* grows "
                  f"x{r['growth_median']:.4g}, {100 * r['scaling_reduction_median']:.1f}% below the roofline; "
                  "Hockney's B*_H x1")
    if args.plot:
        print(f"plot: {Path(args.plot)}")
    return 0
