"""The stages of ``evtsync run``: each a short body that calls the library and writes its outputs.

=====================  ==============================================  ======  =====================
stage                  what it computes (methodology §)                shared  outputs
=====================  ==============================================  ======  =====================
demo                   the bundled synthetic study (demo run only)     yes     ``inputs/demo/``
tax                    alignment and synchronization tax (§2, §3)      yes     ``tables/tax_*.parquet``
zscores                compute blocks and pooled z-scores (§5)         yes     ``tables/zscores.parquet``
attribution            critical-path causes of the straggler (§4)      yes     ``tables/attribution_*``
mle                    Gumbel/GEV maximum likelihood per cell (§6)     yes     ``tables/mle.parquet``
fit-<model>            Bayesian fit of each model specification (§6)   seed    ``fits/<model>.nc``
rankmodel              the hierarchical rank model, xi free and xi ≡ 0  seed    ``fits/rankmodel.nc``,
                       (the run's estimator of tau(n); "The rank               ``tables/rank_*.parquet``
                       model")
compare                PSIS-LOO comparison of the fits (§6)            yes     ``tables/compare.parquet``
prediction             tau(n) and B* with credible bands (§7, §8)      yes     ``tables/tau.parquet`` …
predicted-vs-measured  predicted vs measured straggler delay (§7)      yes     ``tables/predicted_vs_measured.parquet``
summary                the answer table, one row per GPU × precision   no      ``tables/summary.parquet``, ``summary.json``
                       (demo: its estimates beside the planted truth)          ``tables/truth_*.parquet``
report                 HTML report, Markdown summary, figures          no      ``report.html`` …
=====================  ==============================================  ======  =====================

Stages that do not apply to the data (no tensor-parallel blocks, no GEMM blocks, too few
z-scores, one cell only) raise :class:`~evtsync.pipeline.engine.NotApplicable` with the reason;
stages whose module is not installed :class:`~evtsync.pipeline.engine.Unavailable`.
The fits are jobs (:class:`~evtsync.pipeline.engine.Stage`): they start in a process pool as soon
as the z-scores exist and run beside the attribution, the MLE and one another.

Every stage but ``summary`` (it reads the manifest) and ``report`` (it names the run folder and
the stages' times) is *shareable* (column "shared"): its results are kept in the result cache
(:mod:`evtsync.pipeline.resultcache`) and copied into another run folder whose stage has the same
key; a fit only with a fixed seed (``seed=None`` draws a random one).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import DEFAULT_SEED, INTERVAL_LEVEL, RUN_TOPOLOGIES
from evtsync.core.errors import InputError
from evtsync.core.tableio import file_sha256
from evtsync.evt.mlefit import MIN_Z_MLE
from evtsync.pipeline.engine import NotApplicable, Run, Stage, Unavailable
from evtsync.pipeline.options import BAYES_GEV, DEMO_OVERRIDES, DEMO_STUDY, OPT_IN_REASON
from evtsync.runfolder.layout import (
    FITS,
    SUMMARY_JSON,
    TABLES,
    failed_workloads,
    fitted_models,
    main_model,
)

log = logging.getLogger("evtsync.pipeline.stages")

#: Fewest z-scores for a Bayesian fit (for an MLE: :data:`evtsync.evt.mlefit.MIN_Z_MLE`).
MIN_Z_BAYES = 30
#: Central credible / confidence level of every interval the run reports.
LEVEL = INTERVAL_LEVEL
#: Largest domain size of the tau(n) and B* curves.
N_MAX = 4096
TOPOLOGIES = RUN_TOPOLOGIES


def _stage_demo(run: Run) -> dict[str, Any]:
    """The bundled synthetic study, written into ``inputs/demo`` (the same bytes for the same
    settings and code: a second demo copies it from the result cache)."""
    try:
        from evtsync.synth import study
    except ImportError as exc:
        raise Unavailable(f"evtsync.synth is not installed ({exc})") from exc
    folder = run.path("inputs/demo")
    results = study(folder, DEMO_STUDY, **{**DEMO_OVERRIDES, **run.options.demo_overrides})
    paths: list[Path] = []
    for res in results:
        paths.extend(sorted(res.traces.values()))
        paths.append(res.truth_path)
    run.produced("demo", *(str(p.relative_to(run.out)) for p in paths))
    return {"workloads": [r.out_dir.name for r in results], "files": len(paths)}


def _tag(table: pd.DataFrame, workload: str, gpu: str) -> pd.DataFrame:
    table = table.copy()
    table.insert(0, "workload", workload)
    table.insert(1, "gpu", gpu)
    return table


def _workload_inputs(info: pd.DataFrame, groups: pd.DataFrame) -> pd.DataFrame:
    """One row of what a workload's traces hold (``tables/tax_workloads``, the report's inputs):
    distinct ranks, trace files (a rank's trace may be split into windows, one file each), events
    over its files (None when the reader does not count them) and aligned process groups."""
    return pd.DataFrame([{
        "ranks": int(info["rank"].nunique()) if "rank" in info else len(info), "trace_files": len(info),
        "events": int(info["n_events"].sum()) if "n_events" in info else None, "process_groups": len(groups)}])


def _gpu_of(traces: Any) -> str:
    gpus = traces.ranks["gpu"].astype(str)
    return str(gpus.mode().iloc[0]) if len(gpus) else "unknown"


def _stage_tax(run: Run) -> dict[str, Any]:
    from evtsync.sync.tax import straggler_identity, tax_summary

    parts: dict[str, list[pd.DataFrame]] = {k: [] for k in ("collectives", "ranks", "summary", "groups", "mismatches",
                                                             "traces", "workloads", "stragglers", "straggler_ranks")}
    missing: dict[str, list[int]] = {}
    problems: dict[str, list[str]] = {}

    def one(w: Any) -> None:
        traces = run.traces(w)
        gpu = _gpu_of(traces)
        alignment = run.alignment(w)
        tables = run.tax(w)
        info = traces.ranks.drop(columns=[c for c in ("path",) if c in traces.ranks]).copy()
        info["file"] = traces.ranks["path"].map(lambda p: Path(str(p)).name)
        stragglers, straggler_ranks = straggler_identity(tables)  # who straggles, per PG (methodology §3)
        for name, table in (("collectives", tables.collectives), ("ranks", tables.ranks),
                            ("stragglers", stragglers), ("straggler_ranks", straggler_ranks),
                            ("summary", tax_summary(tables)), ("groups", alignment.groups),
                            ("mismatches", alignment.mismatches), ("traces", info.drop(columns=["gpu"])),
                            ("workloads", _workload_inputs(info, alignment.groups))):
            parts[name].append(_tag(table, w.name, gpu))
        if traces.missing_ranks:  # only with --allow-partial: an incomplete set is refused otherwise
            missing[w.name] = [int(r) for r in traces.missing_ranks]
        if traces.problems:
            problems[w.name] = list(traces.problems)

    done = run.per_workload("tax", "tax", one)
    counts = {}
    for name, frames in parts.items():
        frames = [f for f in frames if len(f)] or frames[:1]
        table = pd.concat(frames, ignore_index=True)
        for col in table.columns:
            if table[col].dtype == object:
                table[col] = table[col].map(lambda v: v if v is None or isinstance(v, str | int | float | bool)
                                            else str(v))
        run.produced("tax", run.write_table(f"{TABLES}/tax_{name}.parquet", table))
        counts[name] = len(table)
    if counts["collectives"] == 0:
        log.warning("no collectives in any workload")
    return {"workloads": len(done), "collectives": counts["collectives"], "mismatches": counts["mismatches"],
            "missing_ranks": missing, "rank_problems": problems}


def attribution_with_intervals(summary: pd.DataFrame, collectives: pd.DataFrame) -> pd.DataFrame:
    """A workload's attribution summary with its Wilson intervals (evtsync.core.intervals): each
    category's share of the attributed collectives (``collective_share`` / ``_lo`` / ``_hi``) and
    the GPU-only share of the stragglers (``gpu_only_share`` / ``_lo`` / ``_hi``, ``n_attributed``)."""
    from evtsync.core.intervals import wilson_interval
    from evtsync.critpath.attribution import valid_collectives
    from evtsync.critpath.cpu import CPU_SIDE_CATEGORIES

    valid, _ = valid_collectives(collectives)  # as the summary: flagged collectives left out
    ok = valid[valid["status"] == "ok"]
    share: float | None
    lo: float | None
    hi: float | None
    share, lo, hi = wilson_interval(int((ok["path_kind"] == "gpu_only").sum()), len(ok))
    if len(ok) and ok["path_kind"].isin(CPU_SIDE_CATEGORIES).all():
        share = lo = hi = None  # CPU-side (gloo) paths only: a GPU-only share has no meaning
    summary = summary.assign(gpu_only_share=share, gpu_only_share_lo=lo, gpu_only_share_hi=hi, n_attributed=len(ok))
    total = int(summary["count"].sum()) if len(summary) else 0
    shares = [wilson_interval(int(k), total) for k in summary["count"]] if len(summary) else []
    return summary.assign(collective_share=[s[0] for s in shares], collective_share_lo=[s[1] for s in shares],
                          collective_share_hi=[s[2] for s in shares])


def _stage_attribution(run: Run) -> dict[str, Any]:
    try:
        from evtsync.critpath.attribution import attribute, valid_collectives, why_tables
    except ImportError as exc:
        raise Unavailable(f"evtsync.critpath is not installed ({exc})") from exc
    run.require("tax")
    collectives, summaries, validations, paths = [], [], [], []
    reasons = []
    cpu_side: list[bool] = []
    whatif_jobs, whatif_rows = [], []

    def one(w: Any) -> None:
        traces = run.traces(w)
        gpu = _gpu_of(traces)
        alignment = run.alignment(w)
        if alignment.instances.empty and traces.logged is None:  # (Inspector logs: attribute() says why not)
            reasons.append(f"{w.name}: no collectives")
            return
        try:
            result = attribute(traces, alignment=alignment, tax=run.tax(w))
        except InputError as exc:  # does not apply to this workload (no CPU side, …): said, not failed
            reasons.append(f"{w.name}: {exc}")
            return
        cpu_side.append(result.cpu_side)
        collectives.append(_tag(result.collectives, w.name, gpu))
        summary = attribution_with_intervals(result.summary.copy(), result.collectives)
        summaries.append(_tag(summary, w.name, gpu))
        validations.append(_tag(result.validation, w.name, gpu))
        paths.append(_tag(_path_view_rows(result), w.name, gpu))
        whatif = _what_if_of(traces, alignment, result.cpu_side, w.name, reasons, run.options.host_cores)
        if whatif is not None:  # docs/critical-path.md §8
            whatif_jobs.append(_tag(pd.DataFrame([whatif.summary()]), w.name, gpu))
            whatif_rows.append(_tag(whatif.table, w.name, gpu))

    run.per_workload("attribution", "attribution", one)
    if not collectives:
        raise NotApplicable("no collective to attribute: " + "; ".join(reasons))
    table = pd.concat(collectives, ignore_index=True)
    why = why_tables(_stringify(table), run.table(f"{TABLES}/tax_ranks.parquet"))  # who and why, for the report
    run.produced("attribution",
                 *(run.write_table(f"{TABLES}/attribution_{name}.parquet", _stringify(frame))
                   for name, frame in why.items()),
                 run.write_table(f"{TABLES}/attribution_collectives.parquet", _stringify(table)),
                 run.write_table(f"{TABLES}/attribution_summary.parquet",
                                 _stringify(pd.concat(summaries, ignore_index=True))),
                 run.write_table(f"{TABLES}/attribution_validation.parquet",
                                 _stringify(pd.concat(validations, ignore_index=True))),
                 run.write_table(f"{TABLES}/attribution_paths.parquet",
                                 _stringify(pd.concat(paths, ignore_index=True))))
    if whatif_jobs:
        run.produced("attribution",
                     run.write_table(f"{TABLES}/whatif_jobs.parquet",
                                     _stringify(pd.concat(whatif_jobs, ignore_index=True))),
                     run.write_table(f"{TABLES}/whatif_stragglers.parquet",
                                     _stringify(pd.concat(whatif_rows, ignore_index=True))))
    valid, n_invalid = valid_collectives(table)
    ok = valid[valid["status"] == "ok"]
    return {"collectives": len(table), "invalid_left_out": n_invalid, "attributed": len(ok),
            "gpu_only_share": float((ok["path_kind"] == "gpu_only").mean()) if len(ok) and not all(cpu_side) else None,
            "skipped_workloads": reasons}


def _what_if_of(traces: Any, alignment: Any, cpu_side: bool, name: str, reasons: list[str],
                host_cores: str | None = None) -> Any:
    """The workload's what-if replay (docs/critical-path.md §8), or None with the reason noted;
    ``host_cores`` (``run --host-cores``): the host layout of a CPU-side job (a GPU job or a layout that
    does not fit the job's ranks: no replay, the reason noted)."""
    from evtsync.critpath.replay import what_if

    try:
        return what_if(traces, alignment, cpu=cpu_side, host_cores=host_cores)
    except InputError as exc:
        reasons.append(f"{name}: what-if: {exc}")
        return None


def _path_view_rows(result: Any) -> pd.DataFrame:
    """The straggler's and fastest rank's paths, event by event, of the attributed collective
    with the largest tax (the report's Fig. 4-style view); no rows when none has a kept path."""
    ok = result.collectives[result.collectives["status"] == "ok"]
    keys = result.paths[["pg", "index"]].drop_duplicates() if len(result.paths) else result.paths[["pg", "index"]]
    ok = ok.merge(keys, on=["pg", "index"])
    if ok.empty:
        return result.paths.iloc[:0]
    top = ok.sort_values("tau_max_us", ascending=False, kind="stable").iloc[0]
    return result.paths[(result.paths["pg"] == top["pg"]) & (result.paths["index"] == top["index"])]


def _stringify(table: pd.DataFrame) -> pd.DataFrame:
    """Object columns with mixed values as strings, so that Parquet can store them."""
    table = table.copy()
    for col in table.columns:
        if table[col].dtype == object:
            values = table[col]
            types = {type(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))}
            if len(types) > 1 or (types and not types <= {str, bool, int, float}):
                table[col] = values.map(lambda v: None if v is None else str(v))
    return table


def _stage_zscores(run: Run) -> dict[str, Any]:
    try:
        from evtsync.blocks.cut import block_sampling, compute_zscores
    except ImportError as exc:
        raise Unavailable(f"evtsync.blocks is not installed ({exc})") from exc
    run.require("tax")
    o = run.options
    tables: list[pd.DataFrame] = []
    dropped: list[pd.DataFrame] = []
    reasons: dict[str, str] = {}
    sampling: list[dict[str, Any]] = []

    def one(w: Any) -> None:
        traces = run.traces(w)
        alignment = run.alignment(w)
        try:
            table, blocks = compute_zscores(traces, alignment=alignment, pg=o.block_pg, m=o.m, time=o.time,
                                            workload=w.name, backend=run.backend)
        except InputError as exc:  # does not apply to this workload (no such PG, …): said, not failed
            reasons[w.name] = str(exc)
            return
        sampling.extend(block_sampling(blocks.groups, blocks.m, w.name))
        if len(blocks.dropped):
            dropped.append(blocks.dropped.assign(workload=w.name))
        if table.empty:
            why = blocks.dropped["reason"].value_counts() if len(blocks.dropped) else pd.Series(dtype=int)
            detail = ", ".join(f"{n} {r}" for r, n in why.items()) or "no blocks between the collectives"
            reasons[w.name] = f"no compute block with GEMM kernels kept (block samples dropped: {detail})"
            return
        tables.append(table)

    run.per_workload("zscores", "blocks and z-scores", one)
    if dropped:
        run.produced("zscores", run.write_table(f"{TABLES}/blocks_dropped.parquet",
                                                _stringify(pd.concat(dropped, ignore_index=True))))
    if not tables:
        raise NotApplicable("; ".join(f"{n}: {r}" for n, r in reasons.items()) or "no workloads")
    z = _stringify(pd.concat(tables, ignore_index=True))
    run.produced("zscores", run.write_table(f"{TABLES}/zscores.parquet", z))
    drops = pd.concat(dropped, ignore_index=True)["reason"].value_counts().to_dict() if dropped else {}
    from evtsync.blocks.zscores import drifting_identities

    drift = drifting_identities(z)
    if len(drift):
        log.warning("%d block identit(ies) drift between instances (F-test on the sample means): tau(n) from the "
                    "centred maxima is an upper bound for them", len(drift))
    return {"zscores": len(z), "cells": _cells(z).to_dict(orient="records"), "skipped_workloads": reasons,
            "drifting_identities": [str(b) for b in drift["block"]],
            "dropped": {str(k): int(v) for k, v in drops.items()}, "not_tensor_parallel": _not_tensor_parallel(run, z),
            "block_pgs": sorted(z["pg"].astype(str).unique().tolist()) if "pg" in z else [],
            "sampling": sampling}


def _not_tensor_parallel(run: Run, z: pd.DataFrame) -> list[str]:
    """Workloads whose blocks were cut between the collectives of a PG that is not tensor-parallel."""
    out = []
    for w in run.workloads:
        if w.name not in set(z["workload"].astype(str)):
            continue
        groups = run.alignment(w).groups
        used = groups[groups["pg"].astype(str).isin(z.loc[z["workload"] == w.name, "pg"].astype(str))]
        text = (used["pg_desc"].astype(str) + " " + used["pg_name"].astype(str)).str.lower()
        if len(used) and not text.str.contains(r"(?<![a-z])(?:tp|tensor)", regex=True).any():
            out.append(f"{w.name}: PG {', '.join(used['pg'].astype(str))} ({', '.join(used['pg_desc'].astype(str))})")
    return out


def _workloads_lacking(run: Run, z: pd.DataFrame) -> dict[str, str]:
    """Workloads of the study with no z-score in ``z`` (so in no fit or prediction made from it),
    each with the reason: failed in a stage, or no compute block kept."""
    have = set(z["workload"].astype(str)) if "workload" in z else set()
    failed = failed_workloads(run.manifest)
    skipped = run.stage_entry("zscores").get("summary", {}).get("skipped_workloads", {})
    out = {}
    for w in run.workloads:
        if w.name in have:
            continue
        if w.name in failed:
            out[w.name] = f"failed in stage {failed[w.name]['stage']}: {failed[w.name]['reason']}"
        else:
            out[w.name] = skipped.get(w.name, "no z-scores")
    return out


def _drop_note(run: Run) -> str:
    """``; block samples dropped: N reason, …`` from the z-score stage's summary, or empty."""
    summary = run.stage_entry("zscores").get("summary", {})
    note = ""
    if summary.get("not_tensor_parallel"):
        note += ("; no tensor-parallel process group, blocks were cut between the collectives of "
                 + "; ".join(summary["not_tensor_parallel"]))
    if summary.get("dropped"):
        note += "; block samples dropped: " + ", ".join(f"{n} {reason}" for reason, n in summary["dropped"].items())
    return note


def _cells(z: pd.DataFrame) -> pd.DataFrame:
    return z.groupby(["gpu", "precision"], sort=True).size().rename("n").reset_index()


def _stage_mle(run: Run) -> dict[str, Any]:
    from evtsync.evt.mlefit import mle_cell_table

    run.require("zscores")
    z = run.table(f"{TABLES}/zscores.parquet")
    table = mle_cell_table(z, ("gpu", "precision"), level=LEVEL, min_n=MIN_Z_MLE)
    if "mu" not in table:
        raise NotApplicable(f"no GPU × precision cell has {MIN_Z_MLE} z-scores for a maximum-likelihood fit "
                            f"({len(z)} in all{_drop_note(run)})")
    run.produced("mle", run.write_table(f"{TABLES}/mle.parquet", table))
    return {"fits": len(table), "workloads_lacking": _workloads_lacking(run, z)}


def _model_paths(run: Run) -> list[Path]:
    from evtsync.evt.catalog import model_paths, models_dir

    folder = models_dir(run.options.models_dir)
    paths = model_paths(folder)
    if not paths:
        raise InputError(f"{folder}: holds no model specifications (*.toml); give --models-dir DIR of them")
    if run.options.models:
        wanted = set(run.options.models)
        paths = [p for p in paths if p.stem in wanted]
        missing = wanted - {p.stem for p in paths}
        if missing:
            raise InputError(f"--model {', '.join(sorted(missing))}: not in {folder}")
    from evtsync.evt.spec import load_spec

    raw = [p for p in paths if load_spec(p).scale == "raw"]
    if raw and run.options.models:
        raise InputError(f"--model {', '.join(p.stem for p in raw)}: a model of raw block maxima (data.scale = "
                         "'raw'); evtsync run fits pooled z-scores, whose predictions tau(n) = b·E_k need "
                         "them — fit raw maxima with `evtsync fit TABLE --model NAME`")
    if raw:
        log.info("models of raw block maxima left out of the run (it fits pooled z-scores): %s",
                 ", ".join(p.stem for p in raw))
    return [p for p in paths if p not in raw]


def _check_fit_applies(run: Run, spec: Any, z: pd.DataFrame) -> None:
    """``NotApplicable`` when the z-scores cannot carry the model (too few, one cell, one level)."""
    if len(z) < MIN_Z_BAYES:
        raise NotApplicable(f"{len(z)} z-scores, fewer than {MIN_Z_BAYES} for a Bayesian fit{_drop_note(run)}")
    if not spec.groups:
        return
    missing = [g for g in spec.groups if g not in z.columns]
    if missing:
        raise NotApplicable(f"the z-score table has no column(s) {missing} named by data.groups")
    if len(z.groupby(list(spec.groups))) < 2:
        raise NotApplicable(f"one {' × '.join(spec.groups)} cell only: the per-cell model is the pooled one")
    if spec.xi.structure == "additive":
        levels = {f: z[f].nunique() for f in spec.xi.factors}
        if all(v < 2 for v in levels.values()):
            raise NotApplicable(f"every factor of xi has one level ({levels}): nothing to pool")


def _fit_inputs(run: Run, model_path: Path) -> tuple[Any, pd.DataFrame, dict[str, int], Callable[[], Any]]:
    """The spec, z-scores and sampling settings of one model's fit, and the fit itself as a
    self-contained, picklable call (run here or in a pool process); ``NotApplicable`` when the
    z-scores cannot carry the model."""
    from evtsync.evt.spec import load_spec

    run.require("zscores")
    spec = load_spec(model_path)
    rel = f"{TABLES}/zscores.parquet"
    z = run.table(rel)
    z = z[np.isfinite(pd.to_numeric(z[spec.column], errors="coerce"))]
    _check_fit_applies(run, spec, z)
    s = run.options.sampling(spec.sampling)
    # the input named relative to the run folder (where the fit's file lies, in fits/): the fit's
    # bytes name no run folder, so that another run folder may copy them (result cache)
    fit = functools.partial(fit_in_process, z, model_path, s, run.options.seed, run.options.sampler,
                            rel, file_sha256(run.path(rel)))
    return spec, z, s, fit


def fit_in_process(z: pd.DataFrame, model_path: Path, sampling: dict[str, int], seed: int | None,
                   sampler: str | None, source: str, source_sha256: str) -> Any:
    """Fit ``model_path``'s model to the z-scores ``z`` (:func:`evtsync.evt.fit.fit_table`): one
    fit stage's work, with a progress bar only when run in the main process."""
    import multiprocessing

    from evtsync.core.progress import progress_enabled
    from evtsync.evt.fit import fit_table
    from evtsync.evt.spec import load_spec

    in_main = multiprocessing.parent_process() is None
    return fit_table(z, load_spec(model_path), draws=sampling["draws"], tune=sampling["tune"],
                     chains=sampling["chains"], seed=seed, sampler=sampler, source=source,
                     source_sha256=source_sha256, command="evtsync run", progress=in_main and progress_enabled())


def _warm_up_fits() -> None:
    """What each pool process of the fits compiles before its first fit (the sampler's own part)."""
    from evtsync.evt.fit import warm_up_sampler

    warm_up_sampler()


def _fit_stage(model_path: Path) -> tuple[Callable[[Run], dict[str, Any]], Callable[[Run], Callable[[], Any]]]:
    """The body of the fit stage of ``model_path``, and its job (the fit alone)."""
    def job(run: Run) -> Callable[[], Any]:
        return _fit_inputs(run, model_path)[3]

    def stage(run: Run) -> dict[str, Any]:
        # from fitfile, not evtsync.evt.fit: this process need not import PyMC to write the file
        from evtsync.evt.fitfile import save_fit

        name = f"fit-{model_path.stem}"
        spec, z, s, fit = _fit_inputs(run, model_path)
        tree = run.job_result(name, fit)
        lacking = _workloads_lacking(run, z)
        tree.attrs["workloads"] = ", ".join(sorted(set(z["workload"].astype(str)))) if "workload" in z else ""
        tree.attrs["workloads_lacking"] = "; ".join(f"{n} ({r})" for n, r in lacking.items())
        out = f"{FITS}/{spec.name}.nc"
        save_fit(tree, run.path(out))
        run.produced(name, out, *[f"{out}.sig"] * run.path(f"{out}.sig").is_file())  # its signature (core.trust.sign_file)
        if not int(tree.attrs["converged"]):  # said once, here; the tables and the report carry the flag
            log.warning("fit %s: %s", spec.name, tree.attrs["convergence"])
        return {"model": spec.name, "family": spec.family, "n_obs": int(tree.attrs["n_obs"]),
                "converged": bool(int(tree.attrs["converged"])), "convergence": tree.attrs["convergence"],
                "sampling_seconds": float(tree.attrs.get("sampling_seconds", 0.0)), "workloads_lacking": lacking, **s}
    return stage, job


def compare_fits(trees: dict[str, Any]) -> tuple[pd.DataFrame, str]:
    """PSIS-LOO comparison of fits of the same z-scores (:func:`evtsync.evt.compare.compare_fits`):
    one row per model, best first, and the verdict in words: the table of ``evtsync compare
    --out``, with the same columns (:data:`evtsync.evt.compare.COMPARE_COLUMNS`).
    """
    from evtsync.core.errors import FitError
    from evtsync.evt import compare

    if len(trees) < 2:
        raise NotApplicable(f"{len(trees)} fitted model(s): nothing to compare")
    try:
        table, verdict = compare.compare_fits(list(trees.values()))
    except FitError as exc:
        raise NotApplicable(str(exc)) from exc
    return table, verdict


def _load_trees(run: Run) -> dict[str, Any]:
    return {name: run.fit_tree(path) for name, path in fitted_models(run.out, run.manifest).items()}


def _load_fit(run: Run, path: Path) -> Any:
    """The :class:`~evtsync.evt.bayesfit.BayesFit` of ``path``, its tree read once per run."""
    from evtsync.evt.bayesfit import BayesFit, fit_path

    return BayesFit(run.fit_tree(path), fit_path(path))


def _opted_out(run: Run) -> dict[str, Any]:
    """The body of an opt-in comparator's stage in a run that did not ask for it (:data:`OPT_IN_REASON`)."""
    raise NotApplicable(OPT_IN_REASON)


def _stage_compare(run: Run) -> dict[str, Any]:
    if not run.options.bayes_gev:
        raise NotApplicable(OPT_IN_REASON)
    trees = _load_trees(run)
    table, verdict = compare_fits(trees)
    run.produced("compare", run.write_table(f"{TABLES}/compare.parquet", table))
    return {"models": table["model"].tolist(), "best": table["model"].iloc[0], "verdict": verdict}


#: The rank model's fits in a run folder (the ``rankmodel`` stage; :mod:`evtsync.pipeline.rankmodel`).
RANKMODEL_FIT = f"{FITS}/rankmodel.nc"
RANKMODEL_GUMBEL_FIT = f"{FITS}/rankmodel-gumbel.nc"


def _rankmodel_spec(run: Run) -> Any:
    """The rank model's specification of a run (:class:`evtsync.evt.spec.RankModelSpec`): ``rankmodel.toml``
    of ``--models-dir`` when that folder holds one, else the shipped one (:func:`evtsync.evt.spec.rank_spec_path`)."""
    from evtsync.evt.spec import load_rank_spec, rank_spec_path

    return load_rank_spec(rank_spec_path(run.options.models_dir))


def _rankmodel_settings(run: Run, spec: Any = None) -> dict[str, Any]:
    """The rank model's specification file (``spec``) and sampler settings in a run: the user's
    flags, else the specification's draws, tuning steps and chains."""
    spec = spec or _rankmodel_spec(run)
    return {"spec": spec.path, **run.options.sampling({"draws": spec.draws, "tune": spec.tune, "chains": spec.chains})}


def _rankmodel_params(run: Run) -> dict[str, Any]:
    """The rankmodel stage's parameters (its result key): the settings and the specification's text,
    so a changed prior is never served a fit made under another (the path alone would not say)."""
    spec = _rankmodel_spec(run)
    return {**_rankmodel_settings(run, spec), "spec_text": spec.text, "seed": run.options.seed, "level": LEVEL}


def _stage_rankmodel(run: Run) -> dict[str, Any]:
    """The hierarchical rank model (docs/methodology.md, "The rank model"): xi free (the run's
    estimator of tau(n)) and xi ≡ 0 (the Gumbel domain, for PSIS-LOO) on the same per-rank values,
    ``fits/rankmodel.nc``, ``fits/rankmodel-gumbel.nc`` and the tables of
    :mod:`evtsync.pipeline.rankmodel`."""
    import time

    from evtsync.core.defaults import RANK_FLEET_WORDING
    from evtsync.evt.rankmodel import fit_table
    from evtsync.pipeline import rankmodel as tables
    from evtsync.predict.tables import block_scale

    run.require("zscores")
    start = time.process_time()
    z = run.table(f"{TABLES}/zscores.parquet")
    settings = _rankmodel_settings(run)
    seed = run.options.seed if run.options.seed is not None else int(np.random.SeedSequence().entropy % (2 ** 31))
    refused: dict[str, str] = {}
    source = f"{TABLES}/zscores.parquet"
    try:
        free = fit_table(z, seed=seed, source=source, refused=refused, **settings)
        gumbel = fit_table(z, seed=seed, source=source, free_shape=False, refused={}, **settings)
    except InputError as exc:  # an old table without u, no cell with enough rank values
        raise NotApplicable(f"the rank model cannot be fitted: {exc}{_drop_note(run)}") from exc
    free.save(run.path(RANKMODEL_FIT))
    run.rank_model(RANKMODEL_FIT, DEFAULT_SEED, fit=free)  # prediction's estimator, not read back
    gumbel.save(run.path(RANKMODEL_GUMBEL_FIT))
    run.produced("rankmodel", *(rel for out in (RANKMODEL_FIT, RANKMODEL_GUMBEL_FIT)  # with their signatures
                                for rel in (out, f"{out}.sig") if run.path(rel).is_file()))
    scales = block_scale(z)
    written = [run.write_table(f"{TABLES}/rank_effects.parquet", tables.rank_effects_table(free, scales)),
               run.write_table(f"{TABLES}/rank_variance.parquet", tables.rank_variance_table(free)),
               run.write_table(f"{TABLES}/rank_xi.parquet", tables.rank_xi_table(free)),
               run.write_table(f"{TABLES}/rank_loo.parquet", tables.rank_loo_table(free, gumbel))]
    run.produced("rankmodel", *written)
    for label, fit in (("rank model", free), ("rank model, xi = 0", gumbel)):
        if not fit.converged:  # said once, here; the prediction tables carry the flag (column converged)
            log.warning("%s: %s", label, fit.convergence_note)
    return {"fit": tables.convergence_info(free), "fit_gumbel": tables.convergence_info(gumbel),
            "converged": free.converged and gumbel.converged, "cells": [str(c) for c in free.cells["cell"]],
            "refused": refused, "fleet": RANK_FLEET_WORDING["new"], "seed": seed, **settings,
            "cpu_seconds_fits": round(float(free.attrs["fit_cpu_seconds"]) + float(gumbel.attrs["fit_cpu_seconds"]), 3),
            "cpu_seconds": round(time.process_time() - start, 3)}


def _message_bytes(run: Run) -> tuple[float, str]:
    if run.options.bytes:
        return float(run.options.bytes), "--bytes"
    z = run.table(f"{TABLES}/zscores.parquet")
    coll = run.table(f"{TABLES}/tax_collectives.parquet")
    used = coll[coll["pg"].astype(str).isin(z["pg"].astype(str).unique()) & (coll["bytes"] > 0)]
    if len(used):
        return float(used["bytes"].median()), "median message size of the block PG's collectives"
    return float(256 * 2**20), "default 256 MiB (the traces record no message sizes)"


def _stage_prediction(run: Run) -> dict[str, Any]:
    """tau(n) of every estimator (``tables/tau.parquet``: the rank model's, each GEV model's centred
    rows, the paper's, ranktail's as a comparator), and B*, what-if and FLOPs tables by the default
    estimator (the rank model of the rankmodel stage, measured cells and, from its population,
    unseen ones; the main GEV model's centred rows, labelled, where it cannot: issue 45). The rows
    the default gives are marked ``default_estimate`` in tau.parquet; the others are comparators."""
    from evtsync.predict import tables as predict
    from evtsync.predict.estimator import predict_table

    run.require("zscores")
    fitted = fitted_models(run.out, run.manifest)
    main = main_model(run.out, run.manifest)
    scales = predict.block_scale(run.table(f"{TABLES}/zscores.parquet"))
    ns = predict.domain_sizes(run.options.m, N_MAX)
    size_bytes, size_source = _message_bytes(run)
    o = run.options
    tau, xi, pop = [], [], []
    main_fit = None
    for model, path in fitted.items():
        fit = _load_fit(run, path)
        tau.append(predict.tau_table(fit, ns.tolist(), scales, o.m, LEVEL))
        xi.append(predict.cell_parameter_table(fit, LEVEL, scales[["gpu", "precision"]]))
        pop.append(predict.population_table(fit, LEVEL))
        if model == main:
            main_fit = fit
    paper = _paper_tau(run, ns, scales)
    if paper is not None:
        tau.append(paper)
    ranktail = _ranktail_tau(run, ns, scales)
    if ranktail is not None:
        tau.append(ranktail)
    if main_fit is None:  # no Bayesian GEV comparator (opt-in): the centred fallback is the GEV MLE of y
        main_fit, fallback_reason = _mle_centred_fallback(run)
    else:
        fallback_reason = ""
    choice = _estimator_choice(run, main_fit)
    default = predict_table(choice, predict.tau_table, ns.tolist(), scales, o.m, LEVEL).assign(default_estimate=True)
    others = (pd.concat(tau, ignore_index=True) if tau else default.iloc[0:0]).assign(default_estimate=False)
    tau_all = pd.concat([default, others], ignore_index=True)
    # the default's fallback rows are the main model's own rows, labelled: one copy of each
    tau_all = tau_all.drop_duplicates([c for c in ("model", "gpu", "precision", "cell", "n") if c in tau_all],
                                      keep="first").reset_index(drop=True)
    if tau_all.empty:
        raise NotApplicable("no fit covers the GPU × precision cells of the z-scores")
    bstar = [predict_table(choice, predict.bandwidth_table, TOPOLOGIES, ns.tolist(), o.alpha_us, size_bytes, scales,
                           o.eps, o.m, LEVEL)]
    # xi and xi_population are the Bayesian GEV comparators' (none when they did not run: opt-in)
    run.produced("prediction", *(run.write_table(f"{TABLES}/{name}.parquet", pd.concat(parts, ignore_index=True))
                                 for name, parts in (("tau", [tau_all]), ("bstar", bstar), ("xi", xi),
                                                     ("xi_population", pop), ("block_scale", [scales])) if parts))
    whatif: dict[str, Any] = {"refused": "no GEV fit for the fallback"}
    flops: dict[str, Any] = {"refused": "no GEV fit for the fallback"}
    if (main_fit is not None or choice.per_rank is not None) and "b_us" in tau_all.columns:
        from evtsync.pipeline.whatif import flops_tables, whatif_table

        presets, whatif = whatif_table(choice, tau_all, o.m)
        bstar_flops, scaling, flops = flops_tables(choice, tau_all, TOPOLOGIES, o.alpha_us, size_bytes, o.eps, o.m)
        for name, table in (("whatif", presets), ("bstar_flops", bstar_flops), ("flops_scaling", scaling)):
            if len(table):
                run.produced("prediction", run.write_table(f"{TABLES}/{name}.parquet", table))
    return {"main_model": main, "fallback_model": getattr(main_fit, "name", None), "fallback_reason": fallback_reason,
            "comparators": _comparators_run(run), "domain_sizes": ns.tolist(), "bytes": size_bytes, "bytes_source": size_source,
            "alpha_us": o.alpha_us, "eps": o.eps, "level": LEVEL, "infinite_draws": predict.INFINITE_POLICY,
            "estimator": choice.describe(), "estimator_note": default.attrs.get("estimator_note", ""),
            "workloads_lacking": _workloads_lacking(run, run.table(f"{TABLES}/zscores.parquet")),
            "whatif": whatif, "flops": flops}


def _mle_centred_fallback(run: Run) -> tuple[Any, str]:
    """The centred fallback of the default estimator in a run without the Bayesian GEV comparators
    (opt-in, issue 48): the GEV maximum-likelihood fit per GPU × precision of the centred maxima y
    (:func:`evtsync.evt.mlefit.mle_cell_table`, as the out-of-sample check's fallback) of the run's
    z-scores, and why it is the fallback; (None, why) when no cell has enough z-scores for it. Fitted
    once per run (:meth:`Run.once`): prediction and predicted-vs-measured use the same fit."""
    def fit() -> tuple[Any, str]:
        from evtsync.evt.mlefit import MleCellFit, mle_cell_table

        reason = f"the Bayesian GEV comparators did not run ({OPT_IN_REASON}): the centred fallback is the GEV MLE of y"
        table = mle_cell_table(run.table(f"{TABLES}/zscores.parquet"), ("gpu", "precision"), column="y", level=LEVEL,
                               min_n=MIN_Z_MLE)
        try:
            return MleCellFit(table, family="gev"), reason
        except InputError as exc:
            return None, f"{reason}, which has no cell ({exc})"

    return run.once(f"{TABLES}/zscores.parquet", "centred fallback: GEV MLE of y", fit)


def _comparators_run(run: Run) -> dict[str, str]:
    """Each comparator of the run and whether it ran: ``ran`` or the reason it did not (the report's
    comparator section and summary.json say which ran and how to get the opt-in ones)."""
    def status(name: str) -> str:
        entry = run.stage_entry(name)
        return "ran" if entry.get("status") == "done" else str(entry.get("reason") or entry.get("status") or "did not run")

    fits = [n for n in run.manifest.get("stage_order", []) if n.startswith("fit-")]
    bayes = ("ran" if any(run.done(n) for n in fits) else
             OPT_IN_REASON if not run.options.bayes_gev else
             "; ".join(f"{n}: {status(n)}" for n in fits) or "no model specification")
    return {"mle": status("mle"), "paper": status("mle"), "ranktail": "ran" if run.done("zscores") else status("zscores"),
            BAYES_GEV: bayes}


def _estimator_choice(run: Run, main_fit: Any) -> Any:
    """The run's estimator of tau(n): the default (the rank model of the ``rankmodel`` stage,
    ``fits/rankmodel.nc``) with the main GEV model's centred estimator as its labelled fallback
    (:func:`evtsync.predict.estimator.choose_estimator`): every row of a cell the rank model refused
    (too few rank values), and every row when the stage has no results (its reason in each row)."""
    from evtsync.predict.estimator import choose_estimator

    if run.done("rankmodel"):
        fitted = run.rank_model(RANKMODEL_FIT, DEFAULT_SEED)  # read once, its draws shared by both stages
        return choose_estimator(None, gev=main_fit, fitted=fitted, source=RANKMODEL_FIT, seed=DEFAULT_SEED)
    entry = run.stage_entry("rankmodel")
    reason = f"the rankmodel stage has no results ({entry.get('reason') or entry.get('status') or 'did not run'})"
    if main_fit is None:  # no GEV fit to fall back to (the Bayesian comparators opt-in, no MLE cell)
        raise NotApplicable(f"no estimator of tau(n): {reason}, and no GEV fit of the centred maxima to fall back to")
    return choose_estimator(None, gev=main_fit, unavailable=reason, seed=DEFAULT_SEED)


def _paper_tau(run: Run, ns: Any, scales: pd.DataFrame) -> pd.DataFrame | None:
    """The paper's estimator beside the calibrated ones, labelled (``estimator`` = "paper"): tau(n) =
    b·E_(n/m) of the per-cell GEV MLE of z (the ``mle`` stage); None without that table."""
    from evtsync.evt.mlefit import MleCellFit
    from evtsync.predict import registry
    from evtsync.predict import tables as predict

    if not run.done("mle"):
        return None
    try:
        fit = MleCellFit(run.table(f"{TABLES}/mle.parquet"), family="gev")
    except InputError as exc:
        log.info("no paper-estimator rows in tau.parquet: %s", exc)
        return None
    paper = registry.Paper.name
    if predict.estimator_of(fit) not in (None, paper):
        return None
    return predict.tau_table(fit, ns, scales, run.options.m, LEVEL, estimator=paper)


def _ranktail_tau(run: Run, ns: Any, scales: pd.DataFrame) -> pd.DataFrame | None:
    """The ranktail estimator beside the rank model, a labelled comparator (``estimator`` "ranktail":
    the per-cell GPD tail of the rank values without rank or shared effects, issue 29), for the cells
    with enough rank values; None when none has."""
    from evtsync.predict import registry
    from evtsync.predict import tables as predict
    from evtsync.predict.estimator import fit_per_rank

    name = registry.RankTail.name
    try:
        fit, refused = fit_per_rank(run.table(f"{TABLES}/zscores.parquet"), name, seed=DEFAULT_SEED,
                                    source=f"{TABLES}/zscores.parquet")
    except InputError as exc:
        log.info("no %s rows in tau.parquet: %s", name, exc)
        return None
    for cell, why in refused.items():
        log.info("no %s rows in tau.parquet for cell %s: %s", name, cell, why)
    return predict.tau_table(fit, ns.tolist(), scales, run.options.m, LEVEL, estimator=name) if fit is not None else None


def _stage_predicted_vs_measured(run: Run) -> dict[str, Any]:
    """Predicted (the default estimator, as the prediction stage: the rank model with the main model's
    labelled centred fallback) against measured straggler delay, at n <= m and n > m, and out of sample."""
    from evtsync.predict import tables as predict
    from evtsync.predict.estimator import predict_table

    run.require("zscores", "prediction")
    main = main_model(run.out, run.manifest)
    attribution = run.table(f"{TABLES}/attribution_collectives.parquet") if run.done("attribution") else None
    measured, selection = predict.measured_delays(run.table(f"{TABLES}/zscores.parquet"),
                                                  run.table(f"{TABLES}/tax_collectives.parquet"), attribution)
    if measured.empty:
        raise NotApplicable(f"no {selection}")
    if main is not None:
        fit = _load_fit(run, fitted_models(run.out, run.manifest)[main])
    else:  # no Bayesian GEV comparator (opt-in): the centred fallback is the GEV MLE of y, as in prediction
        fit, _ = _mle_centred_fallback(run)
    choice = _estimator_choice(run, fit)
    table = predict_table(choice, predict.predicted_vs_measured, measured, run.options.m, LEVEL,
                          source="predicted-vs-measured")
    if table.empty:
        raise NotApplicable(f"no {selection} in a group whose size is a multiple of m = {run.options.m} "
                            f"and whose cell the fit has ({table.attrs['skipped']})")
    run.produced("predicted-vs-measured", run.write_table(f"{TABLES}/predicted_vs_measured.parquet", table))
    hold, note = _holdout(run, fit.family if fit is not None else "gev", attribution)
    if hold is not None:
        run.produced("predicted-vs-measured", run.write_table(f"{TABLES}/predicted_vs_measured_holdout.parquet", hold))
    estimators = sorted(set(table["estimator"].astype(str))) if "estimator" in table else []
    return {"model": main, "estimator": ", ".join(estimators), "estimator_note": table.attrs.get("estimator_note", ""),
            "selection": selection, "rows": len(table), "skipped": table.attrs["skipped"],
            "agreement": predict.agreement_summary(table),
            "agreement_beyond_m": predict.agreement_summary(table[table["beyond_m"].astype(bool)])
            if "beyond_m" in table else None, **note}


def _holdout(run: Run, family: str, attribution: pd.DataFrame | None) -> tuple[pd.DataFrame | None, dict[str, Any]]:
    """Out of sample: the default estimator fitted to the z-score rows of each workload's earlier
    collectives (index below the workload's median) predicts the measured delay after its later
    blocks: the rank model of their rank values, with a per-cell MLE of their centred maxima as the
    labelled fallback (as in the run's prediction)."""
    from evtsync.evt.families import fixes_xi
    from evtsync.evt.mlefit import MleCellFit, mle_cell_table
    from evtsync.predict import tables as predict
    from evtsync.predict.estimator import choose_estimator, predict_table

    z = run.table(f"{TABLES}/zscores.parquet")
    cut = z.groupby("workload")["index"].transform("median")
    early, late = z[z["index"] < cut], z[z["index"] >= cut]
    mle_family = "gumbel" if fixes_xi(family) else "gev"  # the MLE's two families: xi fixed at 0 or free
    table = mle_cell_table(early, ("gpu", "precision"), column="y", level=LEVEL, min_n=MIN_Z_MLE)
    fit: Any = None
    mle_reason = ""
    try:
        fit = MleCellFit(table, family=mle_family)
    except InputError as exc:
        mle_reason = f"no cell has {MIN_Z_MLE} z-scores in the earlier half of its collectives ({len(early)} in all: {exc})"
    from evtsync.evt.rankmodel import RankModelPrediction, fit_table

    source = "tables/zscores.parquet (earlier half)"
    try:
        try:  # the rank model fitted to the earlier half alone, with the run's rank-model settings
            fitted = RankModelPrediction(fit_table(early, seed=DEFAULT_SEED, source=source, refused={},
                                                   **_rankmodel_settings(run)), seed=DEFAULT_SEED,
                                         label="rank model of the out-of-sample check (the earlier half)")
        except InputError as exc:
            choice = choose_estimator(None, gev=fit, unavailable=f"the rank model cannot be fitted to the earlier "
                                      f"half: {exc}", seed=DEFAULT_SEED)
        else:
            choice = choose_estimator(None, gev=fit, fitted=fitted, source=source, seed=DEFAULT_SEED)
    except InputError as exc:
        return None, {"holdout_reason": mle_reason or str(exc)}
    measured, _ = predict.measured_delays(late, run.table(f"{TABLES}/tax_collectives.parquet"), attribution)
    hold = predict_table(choice, predict.predicted_vs_measured, measured, run.options.m, LEVEL,
                         source="out-of-sample check")
    if hold.empty:
        return None, {"holdout_reason": f"no later collective to predict ({hold.attrs['skipped']})"}
    estimators = sorted(set(hold["estimator"].astype(str)))
    text = (f"The {', '.join(estimators)} estimator of tau(n) fitted to the {len(early)} z-score rows of the blocks "
            f"before each workload's median collective index ({choice.asked}: their per-rank values; centred: a "
            f"{mle_family.upper()} maximum-likelihood fit per GPU × precision of their centred maxima, the labelled "
            f"fallback) predicts the mean straggler delay after the {len(late)} later blocks (the fit never saw the "
            "later blocks; b, a block's pooled sd, is measured over all its instances).")
    return hold, {"holdout": {"description": text, "family": mle_family, "estimator": ", ".join(estimators),
                              "early_z": len(early), "late_z": len(late),
                              "skipped": hold.attrs["skipped"], "agreement": predict.agreement_summary(hold)}}


def _stage_summary(run: Run) -> dict[str, Any]:
    """The answer table: ``tables/summary.parquet`` and ``summary.json`` (evtsync.runfolder.summary)."""
    from evtsync.runfolder.summary import summary_document, summary_numbers

    run.require("tax")
    run.save_manifest()  # the summary reads the stages' reasons from it
    numbers, info = summary_numbers(run.out, run.manifest)
    run.produced("summary", run.write_table(f"{TABLES}/summary.parquet", numbers),
                 run.write_json(SUMMARY_JSON, summary_document(numbers, info)))
    if run.options.is_demo:  # the demo's estimates beside its planted truth
        from evtsync.pipeline.truth import read_truths, truth_delay_table, truth_tables

        truths = read_truths(run.out, run.manifest)
        if truths:
            def table(name: str) -> pd.DataFrame | None:
                return run.table(f"{TABLES}/{name}.parquet") if run.path(f"{TABLES}/{name}.parquet").is_file() else None

            xi, att = truth_tables(truths, table("xi"), table("mle"), table("attribution_collectives"), info["model"])
            run.produced("summary", run.write_table(f"{TABLES}/truth_xi.parquet", xi),
                         run.write_table(f"{TABLES}/truth_attribution.parquet", att))
            delay = truth_delay_table(truths, table("tau"), info["model"])
            if len(delay):  # simulated ranks: the true straggler delay against tau(n)
                run.produced("summary", run.write_table(f"{TABLES}/truth_delay.parquet", delay))
    return {"rows": len(numbers), "model": info["model"], "n": info["n"]}


def _stage_report(run: Run) -> dict[str, Any]:
    from evtsync.report.context import FIGURE_WORKER_CPU
    from evtsync.report.html import build_report

    run.save_manifest()
    pools = len(FIGURE_WORKER_CPU)
    # --jobs sizes the figure processes too (1: every figure drawn in this process)
    written = build_report(run.out, run.out, load_fit=run.fit_tree, workers=run.options.jobs,
                           figure_cache=run.options.figure_cache)
    run.add_worker_cpu("report", sum(FIGURE_WORKER_CPU[pools:]))  # the figure workers' drawing is the stage's
    run.produced("report", *[str(Path(p).relative_to(run.out)) for p in written])
    return {"files": len(written)}


def build_stages(run: Run) -> list[Stage]:
    """The stages of a run, in order (the demo first when there are no traces; the report last)."""
    o = run.options
    sampling = o.sampling()

    def none(_run: Run) -> dict[str, Any]:
        return {}

    def traces_params(r: Run) -> dict[str, Any]:
        return {"files": r.trace_hashes(), "align": {k: str(v) for k, v in r.align_options().items()},
                "salvage": o.salvage, "rank_from": o.rank_from, "comm_kernels": sorted(o.comm_kernels)}

    # shareable (the result cache, across run folders): every stage whose outputs are a function
    # of its key (the demo's files, tables, fits with a fixed seed: a fit names its input relative
    # to the run folder); not the summary (it reads the manifest) nor the report (it names the run
    # folder, the stages' times)
    stages = []
    if o.is_demo:
        stages.append(Stage("demo", _stage_demo, (), lambda r: {"study": DEMO_STUDY,
                                                                  "overrides": {**DEMO_OVERRIDES, **o.demo_overrides}},
                            shareable=True))
    stages += [
        Stage("tax", _stage_tax, (), traces_params, shareable=True),
        # the z-scores before the attribution: the fits, which need only them, start in the pool
        # then and run beside the attribution and the MLE (engine: jobs)
        Stage("zscores", _stage_zscores, ("tax",),
               lambda r: {**traces_params(r), "pg": o.block_pg, "m": o.m, "time": o.time}, shareable=True),
        # the what-if replay runs in this stage: a host layout given is part of its key (none given: the
        # key as before, so earlier results stay valid)
        Stage("attribution", _stage_attribution, ("tax",),
              lambda r: {**traces_params(r), **({"host_cores": o.host_cores} if o.host_cores is not None else {})},
              shareable=True),
        Stage("mle", _stage_mle, ("zscores",), lambda r: {"level": LEVEL, "min": MIN_Z_MLE}, shareable=True),
    ]
    models = _model_paths(run)
    if not o.bayes_gev:
        # the Bayesian GEV comparators are opt-in (issue 48): each fit stage is listed with why it did
        # not run (the report, summary.json and `evtsync diff` say so), no pool is opened for them
        stages += [Stage(f"fit-{path.stem}", _opted_out, (), lambda r: {"comparators": sorted(o.comparators)})
                   for path in models]
        models = []
    elif models:
        from evtsync.evt.bayesfit import require_netcdf_engine

        require_netcdf_engine()  # the fits' file engine, before the run starts rather than after sampling
    for path in models:
        text = path.read_text(encoding="utf-8")
        body, job = _fit_stage(path)
        # the spec's path too: the fit's file names it (model_spec_path); a random seed (None) is never shared
        stages.append(Stage(f"fit-{path.stem}", body, ("zscores",),
                            functools.partial(lambda r, text, path: {"spec": text, "spec_path": path, **sampling,
                                                                     "seed": o.seed, "sampler": o.sampler,
                                                                     "min": MIN_Z_BAYES}, text=text, path=str(path)),
                            job=job, job_warm_up=_warm_up_fits, shareable=o.seed is not None))
    fit_names = tuple(s.name for s in stages if s.name.startswith("fit-"))
    stages += [
        # the rank model: the run's estimator of tau(n) (a random seed, None, is never shared)
        Stage("rankmodel", _stage_rankmodel, ("zscores",),
              _rankmodel_params, shareable=o.seed is not None),
        Stage("compare", _stage_compare, fit_names, lambda r: {"bayes_gev": o.bayes_gev}, shareable=True),
        # with or without the Bayesian GEV comparators (their statuses are in the key too): never the other's
        Stage("prediction", _stage_prediction, ("zscores", "tax", "mle", "compare", "rankmodel", *fit_names),
               lambda r: {"m": o.m, "alpha": o.alpha_us, "bytes": o.bytes, "eps": o.eps, "level": LEVEL,
                          "n_max": N_MAX, "bayes_gev": o.bayes_gev}, shareable=True),
        Stage("predicted-vs-measured", _stage_predicted_vs_measured,
               ("zscores", "tax", "attribution", "prediction", "compare", "rankmodel", *fit_names),
               lambda r: {"m": o.m, "level": LEVEL, "bayes_gev": o.bayes_gev}, shareable=True),
    ]
    stages.append(Stage("summary", _stage_summary, tuple(s.name for s in stages), none))
    if o.report:
        all_names = tuple(s.name for s in stages)
        stages.append(Stage("report", _stage_report, all_names, none))
    return stages


