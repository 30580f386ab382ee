"""What-if options shared by ``predict`` and ``bandwidth``: hardware presets, lists of eps and
FLOPS factors, and alpha per topology from an nccl-tests sweep (with its draws)."""

from __future__ import annotations

import argparse
from typing import Any

from evtsync.cli._common import level_of, parse_domain_sizes
from evtsync.core.errors import InputError


def add_hardware_arguments(p: argparse.ArgumentParser) -> None:
    """``--gpu``, ``--precision``, ``--preset``, ``--seed``: ask about (possibly unseen) hardware."""
    from evtsync.core.reference import PRESETS

    p.add_argument("--gpu", metavar="NAME", help="predict for this GPU level; one the fit has not seen is drawn "
                   "from the hierarchy's population (population-level, wider interval)")
    p.add_argument("--precision", metavar="NAME", help="predict for this precision level (as --gpu)")
    p.add_argument("--preset", choices=sorted(PRESETS), metavar="NAME",
                   help=f"what-if hardware ({', '.join(sorted(PRESETS))}): sets --gpu, --n and --flops-factor "
                   "(TFLOPS / 989) unless given (evtsync.core.reference.PRESETS)")
    p.add_argument("--seed", type=int, default=0, help="seed of the population and alpha draws (default 0)")


def parse_float_list(text: str | list[str] | None, what: str, default: float) -> list[float]:
    """A comma list of numbers, or a doubling range ``LO..HI`` (LO, 2·LO, 4·LO ... up to HI)."""
    if text is None:
        return [default]
    if isinstance(text, list | tuple):
        return [v for part in text for v in parse_float_list(part, what, default)]
    text = str(text).strip()
    if ".." in text:
        lo_s, _, hi_s = text.partition("..")
        try:
            lo, hi = float(lo_s), float(hi_s)
        except ValueError:
            raise InputError(f"{what}: {text!r} is not a range LO..HI") from None
        if not (lo > 0 and hi >= lo):
            raise InputError(f"{what}: range {text!r} needs 0 < LO <= HI")
        values = [lo]
        while values[-1] * 2 <= hi * (1 + 1e-12):
            values.append(values[-1] * 2)
        return values
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{what}: {text!r} is not a number or a comma list of numbers") from None
    if not values:
        raise InputError(f"{what}: no value given")
    return values


def hardware(args: argparse.Namespace) -> dict[str, Any]:
    """gpu, n (list or None), flops factors, nvlink lines and notes from --preset and the flags over it."""
    from evtsync.core.reference import PRESETS, REFERENCE_TFLOPS, nvlink_reference_lines

    name = getattr(args, "preset", None) or ""
    preset: dict[str, Any] = dict(PRESETS[name]) if name in PRESETS else {}
    notes = []
    gpu = getattr(args, "gpu", None) or preset.get("gpu")
    sizes: list[int] | None
    if getattr(args, "n", None):
        sizes = parse_domain_sizes(args.n)
    else:
        sizes = [int(preset["n"])] if preset else None
    flops = getattr(args, "flops_factor", None)
    if flops is None and preset:
        factors = [float(preset["tflops"]) / REFERENCE_TFLOPS]
        notes.append(f"preset {args.preset}: {preset['tflops']:g} TFLOPS / {REFERENCE_TFLOPS:g} (H200) = "
                     f"flops factor {factors[0]:.4g}; {preset['source']}")
    else:
        factors = parse_float_list(flops, "--flops-factor", 1.0)
    for f in factors:
        if not f > 0:
            raise InputError(f"--flops-factor must be > 0; got {f:g}")
    lines = getattr(args, "nvlink_gbps", None)
    if lines is None:  # Table 1's NVLink generations
        nvlink = nvlink_reference_lines()
    else:
        nvlink = {f"{v:g} GB/s": v for v in parse_float_list(lines, "--nvlink-gbps", 450.0)}
    return {"gpu": gpu, "sizes": sizes, "factors": factors, "nvlink": nvlink, "notes": notes}


def alpha_setup(args: argparse.Namespace, topologies: list[str], n_draws: int | None = None
                ) -> tuple[dict[str, float], dict[str, Any] | None, list[str]]:
    """alpha per topology (µs), its draws per topology with ``n_draws`` (--alpha-from), and notes.

    ``--alpha-us A``: A for every topology, as given. ``--alpha-from LOG``: the sweep is fitted
    once (ring) and read per topology with :func:`evtsync.nccltests.alpha.alpha_for_topology`
    (intercept over that topology's p), or with ``--alpha-topology T`` fitted under T and its
    per-step alpha reused for every topology; both are printed.
    """
    from evtsync.predict.hockney import get_topology

    names = [get_topology(t).name for t in topologies]
    if args.alpha_us is not None:
        if getattr(args, "alpha_topology", None):
            raise InputError("--alpha-topology only applies with --alpha-from")
        if not args.alpha_us >= 0:
            raise InputError(f"--alpha-us must be >= 0 µs; got {args.alpha_us}")
        return {t: float(args.alpha_us) for t in names}, None, [f"alpha = {args.alpha_us:g} µs (given) for every topology"]
    from evtsync.nccltests.alpha import alpha_draws, alpha_for_topology, alpha_from_log

    machine = getattr(args, "alpha_topology", None)
    fit = alpha_from_log(args.alpha_from, topology=machine or "ring", level=level_of(args))
    per_topology = {}
    notes = []
    for t in names:
        if machine:
            per_topology[t] = fit
        else:
            per_topology[t] = alpha_for_topology(fit, t)
    for t, a in per_topology.items():
        lo, hi = a.alpha_interval_us
        how = (f"per-step alpha of the {a.topology} sweep reused (--alpha-topology {machine})" if machine
               else (f"read under {t}'s p = {a.p:g} at n = {a.n_ranks}" if a.topology == t else ""))
        notes.append(f"alpha for {t}: {a.alpha_us:.4g} µs [{a.level:.0%}: {lo:.4g}, {hi:.4g}] from {args.alpha_from}"
                     f" ({how})")
    draws = None
    if n_draws:
        draws = {t: alpha_draws(a, n_draws, seed=getattr(args, "seed", 0) + k)
                 for k, (t, a) in enumerate(per_topology.items())}
    return {t: float(a.alpha_us) for t, a in per_topology.items()}, draws, notes


def write_bandwidth_tables(path: str, table: Any, scaling: Any) -> None:
    """``-o PATH``: the B* table, and with a FLOPS sweep its scaling table as PATH_scaling."""
    from evtsync.cli._common import sibling_path
    from evtsync.core.tableio import write_table

    write_table(table, path)
    if scaling is not None:
        write_table(scaling, sibling_path(path, "scaling"))


def plot_bandwidth(path: str, table: Any, scaling: Any, nvlink: dict[str, float]) -> None:
    """``--plot PATH`` of ``bandwidth`` (with or without ``--fit``): B* against n, one panel per
    topology and eps (:func:`evtsync.plots.whatif.bstar_panels`), or with a FLOPS sweep B* against
    FLOPS (:func:`~evtsync.plots.whatif.bstar_vs_flops`, the paper's Fig. 13)."""
    from evtsync.plots import save_figure
    from evtsync.plots.base import figure_format
    from evtsync.plots.whatif import bstar_panels, bstar_vs_flops

    figure_format(path)
    save_figure(bstar_vs_flops(table, nvlink=nvlink) if scaling is not None else bstar_panels(table, nvlink=nvlink),
                path)
