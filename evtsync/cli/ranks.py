"""``evtsync ranks INPUT``: the rank model of per-rank block times (issue 45; docs/methodology.md,
"The rank model"): persistently slow ranks with their effect and interval, the variance shares
(shared per collective, drift, per rank, idiosyncratic), the shape xi with P(xi > 0) and its verdict,
and tau(n) under a stated fleet assumption, per GPU × precision.

INPUT is a z-score table (``evtsync blocks``) or a run folder (its ``tables/zscores.parquet``, read
after its manifest's checksums are checked); nothing is written into a run folder. ``-o DIR`` writes
the fit (``rankmodel.nc``) and the tables ``rank_effects``, ``variance_shares``, ``xi`` and ``tau``
(Parquet, each atomically).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evtsync.core.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("evtsync.cli.ranks")

HELP = "the rank model: persistently slow ranks, variance shares, tail shape and tau(n) per GPU x precision"
#: The tables ``-o DIR`` writes (beside the fit, ``rankmodel.nc``).
OUT_TABLES = ("rank_effects", "variance_shares", "xi", "tau")
FIT_FILE = "rankmodel.nc"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``ranks`` command."""
    from evtsync.cli._common import ListOption, add_out_argument, positive_int
    from evtsync.core.defaults import RANK_FLEET_WORDING as FLEET_WORDING

    p = subparsers.add_parser(
        "ranks", help=HELP,
        description="Fit the hierarchical rank model (docs/methodology.md, 'The rank model') to the per-rank "
        "values of a z-score table and say which ranks are persistently slow, how the block variance splits, "
        "the tail shape and tau(n). Intervals are 90% posterior intervals; points are posterior medians.")
    p.add_argument("input", metavar="INPUT", help="z-score table (.parquet/.csv written by `evtsync blocks`) or a "
                   "run folder (its tables/zscores.parquet)")
    p.add_argument("--n", action=ListOption, item=positive_int, examples=("8", "64"), metavar="N",
                   default=[8, 64, 512, 4096], help="domain sizes of tau(n) (default 8 64 512 4096)")
    p.add_argument("--fleet", choices=tuple(FLEET_WORDING), default="new",
                   help="who the n ranks are: new = '" + FLEET_WORDING["new"] + "' (default), these-plus-typical = '"
                   + FLEET_WORDING["these-plus-typical"] + "'")
    add_out_argument(p, "folder", "folder for the fit (rankmodel.nc) and the tables rank_effects, variance_shares, "
                     "xi, tau (.parquet); not inside a run folder", metavar="DIR")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--seed", type=int, default=None, help="random seed of the sampler and the predictions (default 0)")
    p.add_argument("--draws", type=positive_int, default=None,
                   help="posterior draws per chain (default: the rank model's, 2000)")
    p.set_defaults(handler=run_ranks)


def read_zscores(path: str) -> tuple[pd.DataFrame, str]:
    """The z-score table of INPUT (a table, or a run folder's ``tables/zscores.parquet`` after the
    manifest's checks) and the name of the file read."""
    from evtsync.core.tableio import read_table
    from evtsync.runfolder.layout import MANIFEST, read_verified_manifest, table_path

    source = Path(path)
    if source.is_dir():
        if not (source / MANIFEST).is_file():
            raise InputError(f"{path}: a folder without {MANIFEST}: expected a run folder of `evtsync run` or a "
                             "z-score table (.parquet/.csv written by `evtsync blocks`)")
        read_verified_manifest(source)
        zpath = table_path(source, "zscores")
        if not zpath.is_file():
            raise InputError(f"{path}: the run folder has no z-score table ({zpath.relative_to(source)}); rerun "
                             "`evtsync run` through the blocks stage")
        return read_table(str(zpath)), str(zpath)
    if not source.exists():
        raise InputError(f"{path}: no such file or folder; expected a z-score table or a run folder")
    if source.suffix.lower() not in (".parquet", ".pq", ".csv") and not source.name.lower().endswith(".csv.gz"):
        raise InputError(f"{path}: expected a z-score table (.parquet/.csv written by `evtsync blocks`) or a run "
                         f"folder, found a {source.suffix or 'suffix-less'} file")
    return read_table(str(source)), str(source)


def _block_sd_us(zscores: pd.DataFrame) -> dict[str, float]:
    """Each cell's own b (µs; :func:`evtsync.predict.tables.block_scale`), where the table gives it."""
    from evtsync.predict.tables import block_scale

    if not {"gpu", "precision", "block", "block_mean_us", "cv"} <= set(zscores.columns) or zscores.empty:
        return {}
    scale = block_scale(zscores)
    return {f"{g}|{p}": float(b) for g, p, b in zip(scale["gpu"], scale["precision"], scale["b_us"], strict=True)}


def results(fit: Any, ns: list[int], fleet: str, b_us: dict[str, float], seed: int) -> dict[str, Any]:
    """Everything the command prints (and -o writes), as tables and sentences."""
    from evtsync.evt.rankreport import slow_rank_sentences, slow_rank_table, slow_rule, tau_table

    effects = slow_rank_table(fit, ns, fleet=fleet, b_us=b_us, seed=seed)
    return {"model": fit.name, "converged": fit.converged, "convergence": fit.convergence_note,
            "cells": fit.cells, "slow_rule": slow_rule(fit),
            "slow_rank_text": slow_rank_sentences(fit, b_us, fleet=fleet, table=effects),
            "rank_effects": effects, "variance_shares": fit.variance_shares(), "xi": fit.xi_summary(),
            "tau": tau_table(fit, ns, fleet=fleet, b_us=b_us, seed=seed)}


def _text(res: dict[str, Any], fleet: str, source: str) -> str:
    from evtsync.evt.rankmodel import FLEET_WORDING

    flag = "" if res["converged"] else " [NOT CONVERGED: read every number below with caution]"
    lines = [f"rank model of {source}{flag}", f"  {res['rows_note']}"]
    cells = list(res["cells"]["cell"])
    lines.append("Persistently slow ranks:")
    for cell in cells:
        text = res["slow_rank_text"].get(cell)
        lines.append(f"  {cell}: " + (text if text else f"no rank is credibly slow{flag}"))
    lines.append(f"  (rule: {res['slow_rule']}; effects against the mean of the cell's other ranks, 90% intervals)")
    lines.append("Block variance shares (shared per collective = drift + shocks; per rank; idiosyncratic):")
    for r in res["variance_shares"].to_dict("records"):
        lines.append(f"  {r['cell']}: shared {r['share_shared']:.1%} (drift {r['share_drift']:.1%}, shocks "
                     f"{r['share_shocks']:.1%}; drift range {r['drift_range_sd']:.2f} sd), per rank {r['share_rank']:.1%} "
                     f"[90% {r['share_rank_lo']:.1%}-{r['share_rank_hi']:.1%}], idiosyncratic "
                     f"{r['share_idiosyncratic']:.1%}{flag}")
    lines.append("Tail shape xi of the idiosyncratic part (posterior median, 90% interval):")
    for r in res["xi"].to_dict("records"):
        lines.append(f"  {r['cell']}: xi {r['xi_median']:+.3f} [{r['xi_lo']:+.3f}, {r['xi_hi']:+.3f}], "
                     f"P(xi > 0) = {r['p_xi_positive']:.2f}: {r['verdict']}{flag}")
    lines.append(f"tau(n) for {FLEET_WORDING[fleet]} (posterior median [90% interval]; µs = b x the sd value, b the "
                 "cell's block sd):")
    tau = res["tau"]
    for cell in cells:
        part = tau[tau["cell"] == cell]
        shown = []
        for r in part.to_dict("records"):
            if r["tau_median_us"] == r["tau_median_us"]:  # not NaN: b known
                shown.append(f"tau({r['n']}) {r['tau_median_us']:.4g} µs [{r['tau_lo_us']:.4g}, {r['tau_hi_us']:.4g}]")
            else:
                shown.append(f"tau({r['n']}) {r['d_median_sd']:.3g} sd [{r['d_lo_sd']:.3g}, {r['d_hi_sd']:.3g}]")
        lines.append(f"  {cell}: " + "; ".join(shown) + flag)
    lines.append(f"Convergence: {res['convergence']}" + ("" if res["converged"] else " — NOT CONVERGED"))
    dropped = res["cells"][res["cells"]["n_dropped"] > 0]
    for r in dropped.to_dict("records"):
        lines.append(f"  {r['cell']}: not used: {r['dropped']}")
    return "\n".join(lines)


def _write(out: str, fit: Any, res: dict[str, Any]) -> list[Path]:
    from evtsync.core.tableio import all_or_nothing, write_table

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    with all_or_nothing():
        written.append(fit.save(folder / FIT_FILE))
        for name in OUT_TABLES:
            written.append(write_table(res[name], folder / f"{name}.parquet"))
    return written


def run_ranks(args: argparse.Namespace) -> int:
    """Fit, print, and with ``-o`` write."""
    from evtsync.cli._common import emit_json
    from evtsync.core.defaults import DEFAULT_SEED
    from evtsync.evt.rankmodel import RANKMODEL_DRAWS, fit_rank_model, rank_table_from_zscores
    from evtsync.runfolder.layout import enclosing_run

    if args.out:
        run = enclosing_run(args.out)
        if run is not None:
            raise InputError(f"-o/--out {args.out}: lies in the run folder {run}, whose files are the run's own; "
                             "choose a folder outside it")
    ns = [int(n) for n in args.n]
    zscores, source = read_zscores(args.input)
    long = rank_table_from_zscores(zscores, source)
    no_gemm = int((~zscores["has_gemm"].astype(bool)).sum()) if "has_gemm" in zscores.columns else 0
    rows_note = (f"z-score rows used: {len(zscores) - no_gemm} of {len(zscores)}"
                 + (f" ({no_gemm} blocks without a GEMM kernel left out)" if no_gemm else "")
                 + f"; {len(long)} per-rank values")
    seed = DEFAULT_SEED if args.seed is None else args.seed
    fit = fit_rank_model(long, draws=args.draws or RANKMODEL_DRAWS, seed=seed, source=source)
    res = results(fit, ns, args.fleet, _block_sd_us(zscores), seed)
    res["rows_note"] = rows_note
    if not fit.converged:
        log.warning("rank model: %s", fit.convergence_note)
    written = _write(args.out, fit, res) if args.out else []
    if args.json:
        from evtsync.evt.rankmodel import FLEET_WORDING

        emit_json({"source": source, "model": res["model"], "converged": res["converged"],
                   "convergence": res["convergence"], "rows_note": rows_note, "fleet": args.fleet,
                   "fleet_assumption": FLEET_WORDING[args.fleet], "point": "posterior median", "level": 0.9,
                   "slow_rule": res["slow_rule"], "slow_rank_text": res["slow_rank_text"],
                   "cells": res["cells"].to_dict("records"),
                   **{name: res[name].to_dict("records") for name in OUT_TABLES},
                   "written": [str(p) for p in written]})
    else:
        print(_text(res, args.fleet, source))
        for p in written:
            print(f"wrote {p}")
    return 0
