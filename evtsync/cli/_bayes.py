"""The Bayesian side of the command line: ``evtsync fit --model``, ``bandwidth --fit``, ``predict``, ``compare``.

The argument parsers live in the command modules (fit, bandwidth, predict, compare); the
handlers here call the library (:class:`evtsync.evt.bayesfit.BayesFit`,
:mod:`evtsync.predict.tables`, :mod:`evtsync.evt.compare`), draw with :mod:`evtsync.plots` and
print. Exit status 1 when a fit used is not converged (the output is still written and says
so), 0 otherwise; bad input raises an ``EvtsyncError``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.cli._common import emit_json, level_of
from evtsync.core.defaults import DEFAULT_EPS
from evtsync.core.errors import InputError


def sampler_settings(spec: Any, args: argparse.Namespace) -> Any:
    """The :class:`~evtsync.evt.spec.SamplerConfig` of a fit: the spec's ``[sampling]`` table
    (evtsync's defaults for absent keys: 1000 draws, 1000 tuning steps, 4 chains, seed 0, target
    "auto", nutpie), overridden by the CLI flags that were given — the one place where flags
    meet the spec."""
    return spec.sampler_config().override(
        draws=getattr(args, "draws", None), tune=getattr(args, "tune", None),
        chains=getattr(args, "chains", None), target_accept=getattr(args, "target_accept", None),
        seed=getattr(args, "seed", None), sampler=getattr(args, "sampler", None),
        adaptation=getattr(args, "adaptation", None))


def _read_z_table(args: argparse.Namespace) -> pd.DataFrame:
    from evtsync.core.tableio import read_table

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

    from evtsync.core.progress import progress_enabled
    from evtsync.core.tableio import file_sha256
    from evtsync.evt.bayesfit import require_netcdf_engine, spread_prior_table
    from evtsync.evt.catalog import resolve_model
    from evtsync.evt.fit import fit_table, parameter_summary, save_fit
    from evtsync.evt.spec import load_spec

    spec = load_spec(resolve_model(args.model, getattr(args, "models_dir", None)))
    if getattr(args, "column", None):
        spec = replace(spec, column=args.column)
    table = _read_z_table(args)
    if getattr(args, "negate", False):
        table = table.assign(**{spec.column: -pd.to_numeric(table[spec.column], errors="coerce")})
    from evtsync.core.tableio import check_output_dir, check_output_file

    out = Path(args.out) if args.out else Path("fits") / spec.name
    if out.suffix == ".nc":
        check_output_file(out, "--out")
    else:
        check_output_dir(out, "--out")  # before the sampling, not after it
    require_netcdf_engine()  # likewise: the fit file's engine is checked before any draw
    command = "evtsync " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else ""
    settings = sampler_settings(spec, args)  # flags over the spec's [sampling]
    from evtsync.core.defaults import DEFAULT_SEED

    seed = settings.seed if settings.seed is not None else DEFAULT_SEED  # the seed `evtsync run` uses
    tree = fit_table(
        table, spec, sampler=settings, seed=seed, source=str(args.data), source_sha256=file_sha256(args.data),
        command=command, progress=progress_enabled(),
    )
    path = save_fit(tree, out)
    summary = parameter_summary(tree, level_of(args))
    if getattr(args, "plot", None):
        plot_fit(tree, args.plot)
    converged = bool(tree.attrs["converged"])
    if args.json:
        emit_json({
            "fit": str(path), "model": spec.name, "family": spec.family, "n_obs": int(tree.attrs["n_obs"]),
            "skipped_rows": int(tree.attrs["n_skipped"]), "seed": seed, "sampler": tree.attrs["sampler"],
            "converged": converged, "max_rhat": tree.attrs["max_rhat"], "min_ess_bulk": tree.attrs["min_ess_bulk"],
            "divergences": int(tree.attrs["divergences"]), "sampling_seconds": tree.attrs["sampling_seconds"],
            "prior_predictive": tree.attrs["prior_predictive"],
            "parameters": summary,
            "spreads_prior_vs_posterior": spread_prior_table(tree, float(summary["level"].iloc[0])),
            "chain_starts": tree.attrs.get("chain_starts", ""), "data_column": tree.attrs.get("data_column", ""),
        }, indent=None)
    else:
        print(f"Bayesian fit of {spec.name} ({spec.family}) to {tree.attrs['n_obs']} z-scores of {args.data} "
              f"in {tree['cells'].sizes['cell']} cell(s); {tree.attrs['chains']} chains x {tree.attrs['draws']} draws "
              f"({tree.attrs['sampler']}, seed {seed}, {tree.attrs['sampling_seconds']:.1f} s)")
        if int(tree.attrs["n_skipped"]):
            print(f"  skipped rows: {tree.attrs['n_skipped']}")
        cols = ["parameter", "mean", "sd", "lo", "hi", "r_hat", "ess_bulk", "ess_tail"]
        print(f"  (lo, hi: central {summary['level'].iloc[0]:.0%} credible interval)")
        print(summary[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        from evtsync.evt.bayesfit import PRIOR_DOMINATED_RATIO

        spreads = spread_prior_table(tree, float(summary["level"].iloc[0]))
        if len(spreads):
            print(f"  spreads, prior against posterior ({summary['level'].iloc[0]:.0%} intervals; prior-dominated: the "
                  f"posterior interval is at least {PRIOR_DOMINATED_RATIO:.0%} of the prior's, so the prior sets the "
                  "width of a new level's prediction):")
            for r in spreads.itertuples():
                print(f"    {r.parameter:16s} prior {r.prior:28s} [{r.prior_lo:.3g}, {r.prior_hi:.3g}]   posterior "
                      f"{r.mean:.3g} [{r.lo:.3g}, {r.hi:.3g}]   width ratio {r.width_ratio:.2f}"
                      + ("   PRIOR-DOMINATED" if r.prior_dominated else ""))
        print(f"  prior predictive check: {tree.attrs['prior_predictive']}")
        print(f"  {tree.attrs['convergence']}")
        print(f"  written: {path}")
    return 0 if converged else 1


def plot_fit(tree, path: str) -> None:
    """Posterior of xi (or mu when xi = 0) per cell with its interval (:func:`evtsync.plots.fits.posterior_by_cell`)."""
    from evtsync.evt.bayesfit import BayesFit
    from evtsync.plots import save_figure
    from evtsync.plots.fits import posterior_by_cell

    fit = BayesFit(tree)
    save_figure(posterior_by_cell(fit.cell_parameters(), fit.name, fit.family, fit.converged), path)


def parse_block_sd(values: list[str] | None) -> tuple[float | None, dict[tuple[str, str], float]]:
    """``--block-sd-us`` as (one b for every cell or None, {(gpu, precision): b} given per cell as
    ``GPU/precision=B``); ``InputError`` on a malformed value, a negative b, or both forms at once."""
    one: float | None = None
    per_cell: dict[tuple[str, str], float] = {}
    for text in values or []:
        key, _, value = str(text).rpartition("=")
        try:
            b = float(value)
        except ValueError:
            raise InputError(f"--block-sd-us {text!r}: expected B or GPU/precision=B (µs)") from None
        if not b >= 0:
            raise InputError(f"--block-sd-us must be >= 0 µs; got {text}")
        if not key:
            if one is not None:
                raise InputError("--block-sd-us: one plain value B at most (per cell: GPU/precision=B)")
            one = b
            continue
        gpu, sep, precision = key.partition("/")
        if not sep or not gpu or not precision:
            raise InputError(f"--block-sd-us {text!r}: a per-cell value is GPU/precision=B, e.g. H100/bf16=18")
        per_cell[(gpu, precision)] = b
    if one is not None and per_cell:
        raise InputError("--block-sd-us: give one b for every cell or one per cell (GPU/precision=B), not both")
    return one, per_cell


def _block_sd(args: argparse.Namespace, choice: Any = None) -> float | pd.DataFrame:
    """The block sd b of a prediction: a number for every cell, or a table with one ``b_us`` per cell.

    A source that carries its own b per cell (a run folder or z-score table: ``choice.block_scale``,
    :func:`evtsync.predict.tables.block_scale`) gives each cell its own b unless told otherwise;
    ``--block-sd-us GPU/precision=B`` replaces a cell's b; one plain ``--block-sd-us B`` (or
    ``--block-mean-us A --cv R``) over a source with several cells is refused (issue 45: it was
    silently applied to every cell)."""
    one, per_cell = parse_block_sd(getattr(args, "block_sd_us", None))
    mean, cv = getattr(args, "block_mean_us", None), getattr(args, "cv", None)
    own = getattr(choice, "block_scale", None)
    if one is not None or per_cell:
        if mean is not None or cv is not None:
            raise InputError("give either --block-sd-us B or --block-mean-us A with --cv R, not both")
    elif mean is not None or cv is not None:
        if mean is None or cv is None:
            raise InputError("the block's spread is needed: --block-sd-us B, or --block-mean-us A with --cv R")
        if not mean > 0 or not cv >= 0:
            raise InputError(f"--block-mean-us must be > 0 and --cv >= 0; got {mean} and {cv}")
        one = float(mean) * float(cv)
    if per_cell:
        rows = {} if own is None else {(str(g), str(p)): float(b) for g, p, b in
                                       zip(own["gpu"], own["precision"], own["b_us"], strict=True)}
        rows.update(per_cell)
        return pd.DataFrame([{"gpu": g, "precision": p, "b_us": b} for (g, p), b in rows.items()])
    if own is not None:
        cells = own
        for column in ("gpu", "precision"):
            asked = getattr(args, column, None)
            if asked is not None:
                cells = cells[cells[column].astype(str) == str(asked)]
        if one is None:
            return own[["gpu", "precision", "b_us"]].reset_index(drop=True)
        if len(cells) > 1:
            listed = ", ".join(f"{g}/{p} {b:.4g}" for g, p, b in zip(cells["gpu"], cells["precision"], cells["b_us"],
                                                                         strict=True))
            raise InputError(f"one block sd b = {one:g} µs over {len(cells)} cells, each with its own b in the table "
                             f"(µs: {listed}): leave out --block-sd-us to use each cell's own b, give one per cell as "
                             "--block-sd-us GPU/precision=B, or ask for one cell with --gpu and --precision")
    if one is None:
        raise InputError("the block's spread is needed: --block-sd-us B, or --block-mean-us A with --cv R")
    return float(one)


def _b_words(block_sd: float | pd.DataFrame) -> str:
    """b in words for a printed header: "b = 20 µs", or "b per cell (µs): H100/bf16 18, ..."."""
    if isinstance(block_sd, pd.DataFrame):
        return "b per cell (µs): " + ", ".join(f"{g}/{p} {b:.4g}" for g, p, b in zip(
            block_sd["gpu"], block_sd["precision"], block_sd["b_us"], strict=True))
    return f"b = {block_sd:g} µs"


def _scaled_b(block_sd: float | pd.DataFrame, factor: float) -> float | pd.DataFrame:
    """b / f for a GPU f times faster (a per-cell table: every cell's b)."""
    if isinstance(block_sd, pd.DataFrame):
        return block_sd.assign(b_us=block_sd["b_us"] / factor)
    return block_sd / factor


def _print_note(tree) -> None:
    from evtsync.evt.bayesfit import convergence_note

    note = convergence_note(tree)
    if note:
        print(note)


def _write_outputs(args: argparse.Namespace, table: pd.DataFrame, figure: Any) -> None:
    """``--out`` the table, ``--plot`` the figure ``figure(table)`` (a function of :mod:`evtsync.plots`)."""
    if getattr(args, "out", None):
        from evtsync.core.tableio import write_table

        write_table(table, args.out)
    if getattr(args, "plot", None):
        from evtsync.plots import save_figure

        save_figure(figure(table), args.plot)


def load_prediction_choice(path: str, estimator: str | None) -> Any:
    """The estimator of tau(n) a prediction command uses and its fits
    (:func:`evtsync.predict.estimator.choose_estimator`), from ``path``:

    - a run folder (``manifest.json``): its rank model (``fits/rankmodel.nc``; ``--estimator ranktail``
      fitted to its ``tables/zscores.parquet``) and its main GEV fit (the fallback, or ``--estimator
      centred``); ``--estimator paper`` takes its GEV MLE of z (``tables/mle.parquet``);
    - a z-score table (``.parquet``/``.csv`` written by ``evtsync blocks``): the per-rank estimators
      only (the rank model fitted to it, or ranktail);
    - a Bayesian fit folder (or its fit.nc): centred/paper as the fit's column says; with the default
      estimator the labelled centred fallback (the fit holds no per-rank values).

    ``estimator`` None is the default (the rank model) with its fallback; a name is obeyed strictly.
    """
    from pathlib import Path

    from evtsync.core.tableio import read_table
    from evtsync.evt.bayesfit import BayesFit
    from evtsync.predict import registry
    from evtsync.predict.estimator import choose_estimator

    source = Path(path)
    if source.is_dir() and (source / "manifest.json").is_file():
        from evtsync.runfolder.layout import read_verified_manifest, run_folder, table_path

        manifest = read_verified_manifest(source)
        zpath = table_path(source, "zscores")
        zscores = read_table(str(zpath)) if zpath.is_file() else None
        # the GEV fit the asked estimator loads from the run (a per-rank estimator: its fallback's), and
        # a per-rank estimator's own fit of the run (the rank model: fits/rankmodel.nc, the run's draws)
        wanted = registry.get(estimator)
        folder = run_folder(source, manifest)
        gev = (registry.get(wanted.fallback) if wanted.per_rank else wanted).load_run(folder)
        if not wanted.per_rank:
            return _with_block_scale(choose_estimator(estimator, gev=gev, zscores=zscores, source=str(zpath)), zscores)
        try:
            fitted = wanted.load_run(folder)
        except InputError as exc:
            if estimator is not None or gev is None:
                raise
            return _with_block_scale(choose_estimator(estimator, gev=gev, unavailable=str(exc)), zscores)
        return _with_block_scale(choose_estimator(estimator, gev=gev, fitted=fitted, source=str(source)), zscores)
    if source.is_file() and source.suffix in (".parquet", ".csv"):
        table = read_table(source)
        return _with_block_scale(choose_estimator(estimator, zscores=table, source=str(source)), table)
    if estimator is not None and registry.get(estimator).per_rank:
        raise InputError(f"{path}: --estimator {estimator} takes the z-score table (.parquet/.csv written by "
                         "`evtsync blocks`, or a run folder with tables/zscores.parquet), not a fit")
    return choose_estimator(estimator, gev=BayesFit.load(path))


def _with_block_scale(choice: Any, zscores: pd.DataFrame | None) -> Any:
    """``choice`` with ``block_scale``: each cell's own b of the z-score table
    (:func:`evtsync.predict.tables.block_scale`), None when the table cannot give it."""
    from evtsync.predict.tables import block_scale

    needed = {"gpu", "precision", "block", "block_mean_us", "cv"}
    if zscores is not None and needed <= set(zscores.columns) and len(zscores):
        choice.block_scale = block_scale(zscores)
    return choice


def _shown_fit(choice: Any) -> Any:
    """The fit a prediction's header names: the per-rank fit when it predicts, else the GEV fit."""
    from evtsync.predict import registry

    return choice.per_rank if registry.get(choice.asked).per_rank and choice.per_rank is not None else choice.gev


def _close(fit: Any, args: argparse.Namespace, table: pd.DataFrame | None = None) -> int:
    """The convergence note and the figure's path after the text output; the exit status (the
    rows' ``converged`` when a table is given: a fallback fit counts only where it predicted)."""
    if getattr(fit, "tree", None) is not None:
        _print_note(fit.tree)
    if getattr(args, "plot", None):
        print(f"plot: {args.plot}")
    return 0 if _converged(fit, table) else 1


def _models(table: pd.DataFrame, fit: Any) -> str:
    """The fits whose rows a table holds (the per-rank fit and a fallback GEV fit), comma-joined."""
    if "model" in table and len(table):
        return ", ".join(dict.fromkeys(table["model"].astype(str)))
    return str(fit.name)


def _converged(fit: Any, table: pd.DataFrame | None = None) -> bool:
    if table is not None and "converged" in table and len(table):
        return bool(table["converged"].astype(bool).all())
    return bool(fit.converged)


def _interval_name(table: pd.DataFrame) -> str:
    """How the intervals of a prediction table's rows are made, each estimator's rows in its own
    words, a fallback's by its own (:func:`evtsync.predict.registry.interval_words`; issue 45)."""
    from evtsync.predict import registry

    if "estimator" not in table or not len(table):
        return "interval"
    fallback = table["estimator_note"].fillna("").astype(str) != "" if "estimator_note" in table else None
    words = registry.interval_words(table["estimator"].astype(str),
                                    table.loc[fallback, "estimator"].astype(str) if fallback is not None else (),
                                    table["model"].astype(str) if "model" in table else None)
    return f"interval: {words}"


def run_bayesian_bandwidth(args: argparse.Namespace) -> int:
    """``evtsync bandwidth --fit FIT ...``: B* and its reduction vs Hockney as credible intervals.

    Several ``--eps`` and ``--flops-factor`` values give one row each; two or more FLOPS factors
    add the bandwidth-scaling requirement (:func:`evtsync.predict.tables.flops_scaling_table`);
    ``--alpha-from`` carries alpha's draws; ``--gpu``/``--precision``/``--preset`` may ask for
    cells the fit has not seen (population-level rows, labelled).
    """
    from evtsync.cli._common import parse_topologies
    from evtsync.cli._whatif import alpha_setup, hardware, parse_float_list
    from evtsync.predict.estimator import predict_table
    from evtsync.predict.tables import (
        FIXED_ALPHA_NOTE,
        FIXED_B_NOTE,
        bandwidth_table,
        domain_sizes_for,
        flops_scaling_table,
        point_column,
    )

    choice = load_prediction_choice(args.fit, args.estimator)
    fit = _shown_fit(choice)
    topologies = parse_topologies(args.topology)
    hw = hardware(args)
    if not hw["sizes"]:
        raise InputError("give the domain sizes --n N... (or --preset NAME)")
    sizes = hw["sizes"]
    domain_sizes_for(fit, sizes, args.m)  # a per-rank fit: any n; a GEV fit: multiples of m
    eps_values = parse_float_list(args.eps, "--eps", DEFAULT_EPS)
    for eps in eps_values:
        if not -1 < eps < 0:
            raise InputError(f"--eps must lie in (-1, 0); got {eps:g}")
    if getattr(args, "tau_us", None) is not None:
        raise InputError("--fit takes the tax from the posterior; do not also give --tau-us")
    block_sd = _block_sd(args, choice)
    level = level_of(args)
    n_draws = (int(fit.expected_max([args.m], [0]).shape[0]) if hasattr(fit, "expected_max")
               else int(np.prod(fit.cell_draws()[0].shape[:1])))
    alpha, alpha_draws, alpha_notes = alpha_setup(args, topologies, n_draws if args.alpha_from else None)
    common = {"alpha_draws_us": alpha_draws, "gpu": hw["gpu"], "precision": getattr(args, "precision", None),
              "seed": getattr(args, "seed", 0)}
    summary = predict_table(choice, bandwidth_table, topologies, sizes, alpha, args.bytes, block_sd, eps_values,
                            args.m, level, hw["factors"], **common)
    scaling = None
    if len(set(hw["factors"])) > 1:
        scaling = predict_table(choice, flops_scaling_table, topologies, sizes, alpha, args.bytes, block_sd,
                                hw["factors"], eps_values, args.m, level, **common)
    if args.plot:
        from evtsync.cli._whatif import plot_bandwidth

        plot_bandwidth(args.plot, summary, scaling, hw["nvlink"])
    if getattr(args, "out", None):
        from evtsync.cli._whatif import write_bandwidth_tables

        write_bandwidth_tables(args.out, summary, scaling)
    if args.json:
        if scaling is None:
            emit_json(summary, indent=None)
        else:
            emit_json({"rows": summary, "flops_scaling": scaling, "definition": scaling.attrs["definition"]},
                      indent=None)
        return 0 if _converged(fit, summary) else 1
    else:
        for note in [*alpha_notes, *hw["notes"]]:
            print(note)
        print(f"fit {_models(summary, fit)}: S = {args.bytes:.6g} bytes, {_b_words(block_sd)} on the reference GPU; "
              f"point [{level:.0%} {_interval_name(summary)}]; bandwidths in GB/s")
        print(f"tau(n): {summary.attrs['estimator']}; {_point_words(summary)}")
        tau_pt, bstar_pt = point_column(summary, "tau", "_us"), point_column(summary, "bstar", "_gbps")
        red_pt = point_column(summary, "reduction")
        print(f"intervals: {FIXED_B_NOTE}; "
              + ("alpha's draws carried" if alpha_draws is not None else FIXED_ALPHA_NOTE))
        for i, r in summary.iterrows():
            kind = _row_labels(r)
            mark = "" if r.get("converged", True) else "  NOT CONVERGED"
            hock = (f"{r['bstar_hockney_gbps']:10.5g}" if r["alpha_source"] == "point" else
                    f"{r['bstar_hockney_gbps']:10.5g} [{r['bstar_hockney_lo_gbps']:.5g}, {r['bstar_hockney_hi_gbps']:.5g}]")
            print(f"  {r['cell']:14s} {r['topology']:8s} n={r['n']:<5d} eps={r['eps']:<5g} f={r['flops_factor']:<5.3g} "
                  f"tau {tau_pt[i]:9.4g} [{r['tau_lo_us']:.4g}, {r['tau_hi_us']:.4g}] µs   "
                  f"B* {bstar_pt[i]:10.5g} [{r['bstar_lo_gbps']:.5g}, {r['bstar_hi_gbps']:.5g}]   "
                  f"Hockney {hock}   reduction {100 * red_pt[i]:.2f}% [{100 * r['reduction_lo']:.2f}, "
                  f"{100 * r['reduction_hi']:.2f}]" + _infinite(r, "tau") + kind + mark)
        if scaling is not None:
            print(f"bandwidth-scaling requirement, FLOPS x{scaling['roofline_growth'].iloc[0]:g} "
                  f"({scaling['flops_lo'].iloc[0]:g} -> {scaling['flops_hi'].iloc[0]:g}); "
                  "roofline (bytes per FLOP kept) grows as the FLOPS, Hockney's B*_H not at all:")
            for _, r in scaling.iterrows():
                print(f"  {r['cell']:14s} {r['topology']:8s} n={r['n']:<5d} eps={r['eps']:<5g} B* grows "
                      f"x{r['growth_median']:.4g} [{r['growth_lo']:.4g}, {r['growth_hi']:.4g}]  "
                      f"= {100 * r['scaling_reduction_median']:.1f}% [{100 * r['scaling_reduction_lo']:.1f}, "
                      f"{100 * r['scaling_reduction_hi']:.1f}] below the roofline" + mark)
        _print_prediction_notes(summary)
        return _close(fit, args, summary)


def _point_words(table: pd.DataFrame) -> str:
    """"point: posterior median" (what the table's point estimates are; several joined by " / ")."""
    from evtsync.predict.tables import point_words

    return "point: " + (point_words(table) or "none")


def _row_labels(row: pd.Series) -> str:
    """The labels a printed prediction row carries: the estimator when it is a fallback,
    population-level, prior-dominated width, n beyond the cell's rank values."""
    text = f"  [{row.get('estimator')}: fallback]" if row.get("estimator_note") else ""
    text += "  [population-level]" if row.get("prediction_kind") == "population" else ""
    if row.get("prior_dominated"):
        text += f"  [prior-dominated: {row.get('prior_dominated_spreads')}]"
    from evtsync.predict.tables import is_beyond_data

    if is_beyond_data(row.get("beyond_data")):
        text += f"  [beyond the data: n > N = {int(row['n_values'])} rank values]"
    return text


def _print_prediction_notes(table: pd.DataFrame) -> None:
    """The notes a prediction table carries (population-level rows, prior-dominated widths, a pooled fit)."""
    for note in (table.attrs.get("estimator_note"), table.attrs.get("population_note"),
                 table.attrs.get("prior_dominated_note"), table.attrs.get("pooled_note"),
                 table.attrs.get("ranktail_note"), table.attrs.get("beyond_data_note")):
        if note:
            print(f"NOTE: {note}")


def _infinite(row: pd.Series, prefix: str) -> str:
    share = float(row.get(f"{prefix}_share_infinite", 0.0) or 0.0)
    return f"  ({share:.1%} of draws infinite: xi >= 1)" if share > 0 else ""


def run_bayesian_predict(args: argparse.Namespace) -> int:
    """``evtsync predict FIT --n N... (--block-sd-us B | --block-mean-us A --cv R)``: tau(n) posterior.

    ``--gpu``/``--precision``/``--preset`` ask for cells, unseen ones from the population;
    ``--flops-factor F`` divides b (and so tau) by F for a GPU F times faster (methodology §8).
    """
    from evtsync.cli._whatif import hardware
    from evtsync.plots.predictions import tau_curves
    from evtsync.predict.estimator import predict_table
    from evtsync.predict.tables import FIXED_B_NOTE, domain_sizes_for, point_column, tau_table

    choice = load_prediction_choice(args.fit, args.estimator)
    fit = _shown_fit(choice)
    if getattr(args, "straggler", None):
        return _straggler(args, fit, choice)
    hw = hardware(args)
    if not hw["sizes"]:
        raise InputError("give the domain sizes --n N... (or --preset NAME, or --straggler TABLE)")
    sizes = hw["sizes"]
    domain_sizes_for(fit, sizes, args.m)  # a per-rank fit: any n; a GEV fit: multiples of m
    block_sd = _block_sd(args, choice)
    level = level_of(args)
    parts = []
    for factor in hw["factors"]:
        part = predict_table(choice, tau_table, sizes, _scaled_b(block_sd, factor), args.m, level, gpu=hw["gpu"],
                             precision=getattr(args, "precision", None), seed=getattr(args, "seed", 0))
        parts.append(part.assign(flops_factor=factor))
    summary = pd.concat(parts, ignore_index=True)
    summary.attrs.update(parts[0].attrs)
    _write_outputs(args, summary, tau_curves)
    if args.json:
        emit_json(summary, indent=None)
        return 0 if _converged(fit, summary) else 1
    else:
        for note in hw["notes"]:
            print(note)
        # a per-rank fit (the rank model, ranktail) gives b·E[max_n − mean_n] of n ranks, a GEV fit b·E_(n/m)
        formula = "b·E[max_n − mean_n]" if hasattr(fit, "expected_max") else f"b·E_(n/{args.m})"
        print(f"fit {_models(summary, fit)}: tau(n) = {formula} with {_b_words(block_sd)} on the reference GPU / flops factor; "
              f"point [{level:.0%} {_interval_name(summary)}]")
        print(f"estimator: {summary.attrs['estimator']}; {_point_words(summary)}; {FIXED_B_NOTE}")
        tau_pt = point_column(summary, "tau", "_us")
        for i, r in summary.iterrows():
            kind = _row_labels(r)
            mark = "" if r.get("converged", True) else "  NOT CONVERGED"
            flops = f" f={r['flops_factor']:<5.3g}" if len(hw["factors"]) > 1 or r["flops_factor"] != 1 else ""
            print(f"  {r['cell']:14s} n={r['n']:<6d}{flops} tau {tau_pt[i]:10.4g} µs  "
                  f"[{r['tau_lo_us']:.4g}, {r['tau_hi_us']:.4g}]" + _infinite(r, "tau") + kind + mark)
        _print_prediction_notes(summary)
        return _close(fit, args, summary)


def _straggler(args: argparse.Namespace, fit: Any, choice: Any) -> int:
    """Predicted vs measured mean straggler delay per row of ``--straggler TABLE``."""
    from evtsync.core.tableio import read_table
    from evtsync.plots.predictions import predicted_vs_measured as pvm_figure
    from evtsync.predict.estimator import predict_table
    from evtsync.predict.tables import point_column, predicted_vs_measured

    if args.n or any(getattr(args, k, None) is not None for k in ("block_sd_us", "block_mean_us", "cv")):
        raise InputError("--straggler takes n and b from the table; do not also give --n or the block spread")
    level = level_of(args)
    table = predict_table(choice, predicted_vs_measured, read_table(args.straggler), args.m, level,
                          source=str(args.straggler))
    if table.empty:
        raise InputError(f"{args.straggler}: no row matches a cell of the fit ({table.attrs['skipped']})")
    _write_outputs(args, table, pvm_figure)
    if args.json:
        emit_json({"rows": table, "skipped": table.attrs["skipped"]}, indent=None)
        return 0 if _converged(fit, table) else 1
    print(f"fit {_models(table, fit)}: predicted vs measured mean straggler delay; "
          f"predicted: point [{level:.0%} {_interval_name(table)}]; ratio = point / measured mean")
    print(f"estimator: {table.attrs['estimator']}; {_point_words(table)}")
    predicted_pt = point_column(table, "predicted", "_us")
    for i, r in table.iterrows():
        mark = "" if r.get("converged", True) else "  NOT CONVERGED"
        print(f"  {r['workload']:16s} {r['gpu']:6s} {r['precision']:5s} n={r['n']:<4d} measured "
              f"{r['measured_mean_us']:9.4g} µs  predicted {predicted_pt[i]:9.4g} "
              f"[{r['predicted_lo_us']:.4g}, {r['predicted_hi_us']:.4g}]"
              + ("" if r["inside_interval"] else "  outside") + _row_labels(r) + mark)
    skipped = {k: v for k, v in table.attrs["skipped"].items() if v}
    if skipped:
        print(f"  skipped rows: {skipped}")
    _print_prediction_notes(table)
    return _close(fit, args, table)


def run_bayesian_compare(args: argparse.Namespace) -> int:
    """``evtsync compare FIT FIT ...``: PSIS-LOO table with ELPD differences and a verdict."""
    from evtsync.core.tableio import write_table
    from evtsync.evt.bayesfit import load_fit
    from evtsync.evt.compare import compare_fits

    if args.out:
        from evtsync.core.tableio import check_output_file

        check_output_file(args.out, "--out")
    trees = [load_fit(p) for p in args.fits]
    table, words = compare_fits(trees)
    if args.out:
        write_table(table, args.out)
    if args.json:
        emit_json({"models": table, "verdict": words.splitlines()}, indent=None)
    else:
        cols = ["rank", "model", "family", "elpd_loo", "se", "p_loo", "elpd_diff", "diff_se",
                "k_good", "k_bad", "k_very_bad", "converged"]
        print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.1f}"))
        print(words)
        if args.out:
            print(f"written: {args.out}")
    return 0 if bool(table["converged"].all()) else 1
