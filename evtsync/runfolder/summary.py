"""The run's answer table: one row per GPU × precision with the tax, the attribution, the tail
and the predictions (the ``summary`` stage writes it as ``tables/summary.parquet`` and
``summary.json``; the report's summary shows it; ``evtsync run --json`` prints it).

Every number is read from the stages' tables; the intervals of the measured tax and of the
GPU-only share are computed here (:mod:`evtsync.core.intervals`), once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL
from evtsync.core.display import fmt
from evtsync.core.intervals import (
    mean_interval,
    median_interval,
    median_interval_kind,
    quantile_interval,
    wilson_interval,
)
from evtsync.core.tableio import read_table
from evtsync.evt.families import (  # noqa: F401 - the verdicts are summary vocabulary too
    BOUNDED_TAIL,
    HEAVY_TAIL,
    LIGHT_TAIL,
    family_label,
    fixes_xi,
    known_structure,
    structure_note,
    tail_verdict,
)
from evtsync.runfolder.layout import (
    STATUS_DONE,
    STATUS_TEXT,
    SUMMARY_JSON,
    TABLES,
    main_model,
    next_step,
    root_cause,
)

#: Domain size of the summary's tau(n) and B* when the run's options name none (the paper's
#: 3D-torus example; the largest tabulated n below it otherwise).
SUMMARY_N = 512
#: Between the notes of a summary row (a reason may hold semicolons itself).
NOTE_SEPARATOR = "\n"
#: The format tag of ``summary.json``.
SUMMARY_FORMAT = "evtsync-summary/1"


def _workload_precision(z: pd.DataFrame | None) -> dict[str, str]:
    """Workload -> its compute precision (from the z-scores); workloads with several map to none."""
    if z is None or z.empty:
        return {}
    per = z.groupby("workload")["precision"].unique()
    return {str(w): str(p[0]) for w, p in per.items() if len(p) == 1}


def summary_n(manifest: dict[str, Any], tau: pd.DataFrame | None) -> int | None:
    """The domain size the summary reports tau(n) and B* at: the run's ``n`` option, else
    :data:`SUMMARY_N` when tabulated, else the largest tabulated n not above it (else the smallest)."""
    wanted = manifest.get("options", {}).get("n") or SUMMARY_N
    if tau is None or tau.empty:
        return int(wanted)
    ns = sorted(int(n) for n in tau["n"].unique())
    if int(wanted) in ns:
        return int(wanted)
    below = [n for n in ns if n <= int(wanted)]
    return below[-1] if below else ns[0]


#: Root causes of a summary row named (``root1_*``, ``root2_*``: :func:`root_causes`).
TOP_ROOTS = 2


def root_causes(attributed: pd.DataFrame, top: int = TOP_ROOTS) -> dict[str, Any]:
    """The ``top`` root causes of a cell's stragglers by the share of the tax routed to them (the
    attribution stage's per-collective table, rows walked to a root: status ok or unexplained),
    as flat summary columns: ``root_tax_us`` (the tax with a root, the shares' denominator),
    ``n_root_causes`` (distinct workload × rank × cause), ``root_top_category`` with its
    ``root_top_category_share`` (the cause category, e.g. gemm, holding the most tax), and per place i = 1..top ``root{i}_workload``,
    ``_rank``, ``_cause``, ``_category``, ``_collectives``, ``_share`` (of ``root_tax_us``). The same
    grouping as :func:`evtsync.critpath.attribution.root_cause_table`, over the whole cell, not capped."""
    need = {"status", "root_cause", "root_rank", "root_category", "tau_max_us", "workload"}
    if attributed is None or attributed.empty or not need <= set(attributed.columns):
        return {}
    rows = attributed[attributed["status"].isin(["ok", "unexplained"]) & attributed["root_cause"].notna()]
    total = float(rows["tau_max_us"].sum())
    out: dict[str, Any] = {"root_tax_us": total, "n_root_causes": 0}
    if rows.empty or total <= 0:
        return out
    grouped = (rows.groupby(["workload", "root_rank", "root_cause", "root_category"], dropna=False, sort=False)
               .agg(collectives=("tau_max_us", "size"), tax_us=("tau_max_us", "sum")).reset_index()
               .sort_values(["tax_us", "workload", "root_rank"], ascending=[False, True, True]))
    out["n_root_causes"] = len(grouped)
    categories = rows.groupby(rows["root_category"].astype(str), sort=True)["tau_max_us"].sum().sort_values(
        ascending=False, kind="stable")
    out["root_top_category"], out["root_top_category_share"] = str(categories.index[0]), float(categories.iloc[0]) / total
    for i, r in enumerate(grouped.head(top).itertuples(index=False), start=1):
        out.update({f"root{i}_workload": str(r.workload), f"root{i}_rank": int(r.root_rank),
                    f"root{i}_cause": str(r.root_cause), f"root{i}_category": str(r.root_category),
                    f"root{i}_collectives": int(r.collectives), f"root{i}_share": float(r.tax_us) / total})
    return out


#: The tail verdicts (issue 45): the domain of attraction of the rank times, read from the interval
#: of a shape xi. A cell whose interval holds 0 is never called heavy or bounded.
def _verdict_read(verdicts: list[str]) -> tuple[list[str], list[str]]:
    """The verdicts read from an interval (not a fixed shape, not missing), and those of them
    that call the tail heavy or bounded."""
    read = [v for v in verdicts if v and v != "–" and "model fixes xi" not in v]
    return read, [v for v in read if v != LIGHT_TAIL and not v.startswith("Gumbel")]


def loo_choice(compare: pd.DataFrame | None) -> tuple[str | None, bool]:
    """The family LOO prefers ("gumbel" or "free") and whether the preference is clear (the
    difference exceeds 2 standard errors); (None, False) without two families to compare."""
    if compare is None or compare.empty or "family" not in compare:
        return None, False
    table = compare.sort_values("rank")
    gumbel = table.iloc[0]["family"] == "gumbel"
    other = table[(table["family"] == "gumbel") != gumbel]
    if other.empty:
        return None, False
    rival = _rival(table.iloc[0], other)
    return ("gumbel" if gumbel else "free"), abs(float(rival["elpd_diff"])) > 2 * float(rival["diff_se"])


def reconcile_loo_tail(compare: pd.DataFrame | None, verdicts: list[str]) -> str:
    """One sentence that puts the LOO preference beside the per-cell tail verdicts ("" when either
    is missing): LOO weighs one model against another over every z-score of every cell at once,
    the verdict reads each cell's interval of xi, so the two answer different questions."""
    family, clear = loo_choice(compare)
    read, nonzero = _verdict_read(verdicts)
    if family is None or not read:
        return ""
    cells = f"{len(nonzero)} of {len(read)} cell(s)"
    if family == "free" and clear:
        if nonzero:
            return (f"Consistent: LOO clearly prefers a free shape over all cells pooled, and the tail column's shape "
                    f"interval excludes 0 in {cells}.")
        return ("LOO clearly prefers a free shape over all cells pooled although no single cell's shape interval (the tail column) "
                "excludes 0: the evidence for a non-zero shape adds up across cells; read each cell's tail as "
                "undetermined.")
    if family == "gumbel" and clear:
        if nonzero:
            return (f"LOO clearly prefers Gumbel over all cells pooled, yet the tail column's shape interval excludes 0 in {cells}: those "
                    "cells' shapes are not enough to improve the predictive fit of the whole; treat their tail verdicts "
                    "with caution.")
        return "Consistent: LOO clearly prefers Gumbel, and every cell's shape interval (the tail column) holds 0."
    if nonzero:
        return (f"LOO does not clearly separate Gumbel from a free shape over all cells pooled (difference under 2 "
                f"standard errors), while the tail column's shape interval excludes 0 in {cells}: a non-zero shape in some cells is too "
                "small a change in predictive fit overall to separate the models; the per-cell tail column is the "
                "finer reading, the LOO line the overall one.")
    return ("Consistent: LOO does not clearly separate Gumbel from a free shape, and every cell's shape interval (the tail column) "
            "holds 0: the data do not determine the tail type.")


def _rival(best: pd.Series, other: pd.DataFrame) -> pd.Series:
    """The model of the other family compared with the best: the best-ranked one with the same
    location and scale structure (column ``location_scale``), so that their ΔELPD is the shape's;
    else the best-ranked of the other family (the sentence then says they differ in more)."""
    structure = known_structure(best)
    if structure and "location_scale" in other:
        same = other[[known_structure(r) == structure for _, r in other.iterrows()]]
        if len(same):
            return same.iloc[0]
    return other.iloc[0]


def loo_verdict(compare: pd.DataFrame | None) -> str:
    """The LOO comparison's answer to "Gumbel or a free shape?" in one sentence ("" without a table).

    The comparison table gives each model's difference to the best model with the standard
    error of that difference; the best model of the other family is compared with the best overall.
    """
    if compare is None or compare.empty or "family" not in compare:
        return ""
    table = compare.sort_values("rank")
    best = table.iloc[0]
    gumbel = best["family"] == "gumbel"
    other = table[(table["family"] == "gumbel") != gumbel]
    if other.empty:
        return f"LOO: best model {best['model']}; no model of the other family (Gumbel / free xi) to compare."
    rival = _rival(best, other)
    diff, se = float(rival["elpd_diff"]), float(rival["diff_se"])
    diff = abs(diff)
    clear = diff > 2 * se
    note = structure_note(best, rival)
    winner = ("Gumbel (xi = 0)" if gumbel else "a free shape xi") if not note else (
        "Gumbel (xi = 0) with its location and scale" if gumbel else "a free shape xi with its location and scale")
    text = (f"LOO prefers {winner}: {best['model']} over {rival['model']} by Δelpd {fmt(diff, 3)} ± {fmt(se, 2)}"
            + (" (more than 2 standard errors)" if clear else " — less than 2 standard errors: not a clear preference")
            + (f"{note}; no fitted model of the other family shares {best['model']}'s location and scale, so the "
               "shape's own gain is not separated." if note else
               (" between models with the same location and scale: the shape's gain."
                if known_structure(best) else ".")))
    if not bool(best.get("converged", True)) or not bool(rival.get("converged", True)):
        text += " WARNING: a compared fit did not converge."
    return text


def summary_numbers(run_dir: Path, manifest: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The numbers of the report's summary, one row per GPU × precision, unformatted.

    Columns: gpu, precision; tax over the valid collectives of the process group(s) the
    compute blocks were cut from (all valid collectives where there are no z-scores):
    ``n_collectives``, ``tax_median_us`` / ``_lo`` / ``_hi`` (order-statistic interval),
    ``tax_p90_us`` / ``_lo`` / ``_hi``, with ``tax_median_interval`` / ``tax_p90_interval`` saying
    what each interval is (the level, or "range of n" / an unbounded side where the collectives are
    too few for it), ``tax_mean_us`` / ``_lo_us`` / ``_hi_us`` (Student-t interval: the most one
    collective would save without its stragglers) and ``tax_total_ms``; the attribution: ``n_attributed``, ``n_not_attributed``,
    ``gpu_only_share`` / ``_lo`` / ``_hi`` (Wilson), the top root causes (:func:`root_causes`); the main model's ``xi_mean`` / ``_lo`` /
    ``_hi``, ``family``, ``verdict``; ``tau_point_us`` (the estimator's point estimate, named in
    ``point_estimate``: :func:`evtsync.predict.tables.point_column`), ``tau_mean_us`` / ``_lo_us`` /
    ``_hi_us`` and ``tau_share_infinite`` at n; per topology ``reduction_<topology>`` / ``_lo`` /
    ``_hi`` and ``bstar_<topology>_gbps`` / ``_lo_gbps`` / ``_hi_gbps`` (the points and their intervals); ``cv_mean``, the mean coefficient of
    variation r over the cell's block identities (from the z-scores); ``converged`` and ``notes`` (one per line,
    :data:`NOTE_SEPARATOR`, with what to do next where something could not be computed). The second value holds ``n``, ``model``,
    ``loo``, ``loo_and_tail`` (the sentence reconciling them), ``topologies``, ``level`` and
    ``point_estimate`` (per estimator of the rows: what its point is, e.g. "posterior median") and ``jobs`` (per workload the what-if replay: ``step_time_ms``, ``step_time_without_stragglers_ms``, ``slowdown``, ``n_rank_steps`` (ranks × recorded steps), ``whatif_durations`` (the duration model the replay used) and ``whatif_host_cores`` (the host layout given, or None); docs/critical-path.md §8); a cell holding one job also carries those three columns.
    """
    from evtsync.predict.tables import is_beyond_data, point_column, point_labels, point_words

    def table(name: str) -> pd.DataFrame | None:
        path = run_dir / TABLES / f"{name}.parquet"
        return read_table(path) if path.is_file() else None

    stages = manifest.get("stages", {})

    def why(stage: str) -> str:
        """Why ``stage`` has no result: its root cause up the chain, and what to do about it."""
        cause, reason = root_cause(manifest, stage)
        status = stages.get(cause, {}).get("status", "not run")
        step = next_step(cause, reason)
        return (f"stage {cause} {STATUS_TEXT.get(status, status)}" + (f": {reason}" if reason else "")
                + (f". {step}" if step else ""))

    coll, z, att = table("tax_collectives"), table("zscores"), table("attribution_collectives")
    xi, tau, bstar, compare = table("xi"), table("tau"), table("bstar"), table("compare")
    whatif = table("whatif_jobs")
    rank_rows, rank_block = rank_model_summary(run_dir, manifest, table, why)
    model = main_model(run_dir, manifest)
    n = summary_n(manifest, tau)
    prec_of = _workload_precision(z)
    if z is not None and len(z):
        cells = z[["gpu", "precision"]].astype(str).drop_duplicates().sort_values(["gpu", "precision"])
    elif coll is not None and len(coll):
        cells = pd.DataFrame({"gpu": sorted(coll["gpu"].astype(str).unique()), "precision": "all"})
    else:
        cells = pd.DataFrame(columns=["gpu", "precision"])
    block_pgs = (set(zip(z["workload"].astype(str), z["pg"].astype(str), strict=True))
                 if z is not None and len(z) else None)

    def in_cell(frame: pd.DataFrame, gpu: str, precision: str) -> pd.DataFrame:
        mask = frame["gpu"].astype(str) == gpu
        if precision != "all":
            mask &= frame["workload"].astype(str).map(prec_of) == precision
        return frame[mask]

    topologies = list(dict.fromkeys(bstar["topology"])) if bstar is not None and len(bstar) else []
    level_text = f"{INTERVAL_LEVEL:.0%}"
    rows = []
    for gpu, precision in cells.itertuples(index=False):
        row: dict[str, Any] = {"gpu": gpu, "precision": precision}
        notes: list[str] = []
        if coll is not None and len(coll):
            c = in_cell(coll[coll["valid"].astype(bool)], gpu, precision)
            if block_pgs is not None:
                c = c[[(w, p) in block_pgs for w, p in zip(c["workload"].astype(str), c["pg"].astype(str), strict=True)]]
            values = c["tau_max_us"].to_numpy(float)
            row["n_collectives"] = int(values.size)
            row["tax_median_us"], row["tax_median_lo_us"], row["tax_median_hi_us"] = median_interval(values)
            row["tax_median_interval"] = median_interval_kind(values.size)
            row["tax_p90_us"], row["tax_p90_lo_us"], row["tax_p90_hi_us"] = quantile_interval(values, 0.9)
            row["tax_p90_interval"] = (level_text if np.isfinite(row["tax_p90_lo_us"]) and np.isfinite(row["tax_p90_hi_us"])
                                       else f"{values.size} collectives cannot bound the P90 at {level_text} on each side")
            # the mean tax per collective: what one collective would save, at most, if its ranks arrived together
            # (the first screen's "without stragglers" bound, methodology §3)
            row["tax_mean_us"], row["tax_mean_lo_us"], row["tax_mean_hi_us"] = mean_interval(values)
            row["tax_total_ms"] = float(values.sum()) / 1000.0
        else:
            notes.append(f"tax: {why('tax')}")
        if z is not None and len(z) and "cv" in z:  # the cell's blocks: their mean coefficient of variation r
            zc = z[(z["gpu"].astype(str) == gpu) & (z["precision"].astype(str) == precision)]
            row["cv_mean"] = float(zc.drop_duplicates("block")["cv"].mean()) if len(zc) else float("nan")
        if att is not None and len(att):
            a = in_cell(att, gpu, precision)
            ok = a[a["status"] == "ok"]
            row["n_attributed"], row["n_not_attributed"] = len(ok), len(a) - len(ok)
            share = wilson_interval(int((ok["path_kind"] == "gpu_only").sum()), len(ok))
            row["gpu_only_share"], row["gpu_only_share_lo"], row["gpu_only_share_hi"] = share
            if len(a) - len(ok):
                notes.append(f"{len(a) - len(ok)} of {len(a)} collectives not attributed")
            row.update(root_causes(a))
        else:
            notes.append(f"GPU-only share: {why('attribution')}")
        fit_ok = True
        if xi is not None and model is not None and len(xi):
            x = xi[(xi["model"] == model) & (xi["gpu"].astype(str) == gpu) & (xi["precision"].astype(str) == precision)]
            if len(x):
                r = x.iloc[0]
                family = str(compare.set_index("model")["family"].get(model, "")) if compare is not None and \
                    "family" in compare else ""
                fixed = float(r["xi_lo"]) == float(r["xi_hi"]) == 0.0
                family = family or ("gumbel" if fixed else "gev")
                # the GEV of the m-rank maxima: its verdict stands only where the rank times' own tail
                # (ranktail's GPD shape, below) is not available, and says which xi it read
                row.update(xi_mean=float(r["xi_mean"]), xi_lo=float(r["xi_lo"]), xi_hi=float(r["xi_hi"]),
                           family=family, verdict=tail_verdict(float(r["xi_lo"]), float(r["xi_hi"]), family),
                           verdict_source=f"xi of the GEV of the block maxima ({model})")
                fit_ok = bool(r["converged"])
            else:
                notes.append(f"no cell of {model} for {gpu} {precision}")
        elif stages.get("prediction", {}).get("status") != STATUS_DONE:
            notes.append(f"xi, tau(n) and B*: {why('prediction')}")
        # (a run without the Bayesian GEV comparators, opt-in: the rank model's xi below is the row's, and
        # info["comparators"] says which comparators ran)
        if tau is not None and len(tau) and (model is not None or "default_estimate" in tau):
            # the default estimator's rows (ranktail, or the main model's labelled fallback: issue 29);
            # a run written before tau.parquet marked them: the main model's
            chosen = (tau["default_estimate"].astype(bool) if "default_estimate" in tau else tau["model"] == model)
            t = tau[chosen & (tau["gpu"].astype(str) == gpu)
                    & (tau["precision"].astype(str) == precision) & (tau["n"] == n)]
            if len(t):
                r = t.iloc[0]
                row.update(estimator=str(r.get("estimator", "")), estimator_model=str(r["model"]),
                           estimator_note=str(r.get("estimator_note", "") or ""))
                if row["estimator_note"]:
                    notes.append(f"tau(n): {row['estimator_note']}")
                fleet = fleet_assumption(r)
                if fleet:  # the rank model's tau(n) holds under a stated fleet assumption (issue 45)
                    row["fleet_assumption"] = fleet
                gpd = [float(r.get(k, np.nan)) for k in ("gpd_xi_mean", "gpd_xi_lo", "gpd_xi_hi")]
                if all(np.isfinite(gpd)):  # the rank times' own tail: the verdict reads its shape (issue 45)
                    row.update(gpd_xi_mean=gpd[0], gpd_xi_lo=gpd[1], gpd_xi_hi=gpd[2],
                               verdict=tail_verdict(gpd[1], gpd[2], "gpd"),
                               verdict_source="GPD shape of the rank times' tail (ranktail)")
                row["beyond_data"] = is_beyond_data(r.get("beyond_data"))
                if row["beyond_data"]:  # the GPD tail's extrapolation (evtsync.predict.tables.BEYOND_DATA_NOTE)
                    notes.append(f"tau(n) at n = {n}: beyond the data (n > N = {int(r['n_values'])} rank values), the "
                                 "GPD tail's extrapolation")
                row.update(point_estimate=str(point_labels(t).iloc[0]),
                           tau_point_us=float(point_column(t, "tau", "_us").iloc[0]),
                           tau_mean_us=float(r["tau_mean_us"]), tau_lo_us=float(r["tau_lo_us"]),
                           tau_hi_us=float(r["tau_hi_us"]), tau_share_infinite=float(r.get("tau_share_infinite", 0.0)))
                fit_ok = fit_ok and bool(r["converged"])
                if row["tau_share_infinite"] > 0:
                    notes.append(f"{row['tau_share_infinite']:.1%} of tau draws infinite (xi >= 1): mean over the "
                                 "finite draws, interval open")
            else:
                notes.append(f"tau(n): no row of the default estimator at n = {n} for {gpu} {precision}")
        for topo in topologies:
            assert bstar is not None  # topologies come from bstar
            b = bstar[(bstar["topology"] == topo) & (bstar["gpu"].astype(str) == gpu)
                      & (bstar["precision"].astype(str) == precision) & (bstar["n"] == n)]
            if len(b):
                r = b.iloc[0]
                row.update({f"reduction_{topo}": float(point_column(b, "reduction").iloc[0]),
                            f"reduction_{topo}_lo": float(r["reduction_lo"]),
                            f"reduction_{topo}_hi": float(r["reduction_hi"]),
                            f"bstar_{topo}_gbps": float(point_column(b, "bstar", "_gbps").iloc[0]),
                            f"bstar_{topo}_lo_gbps": float(r["bstar_lo_gbps"]),
                            f"bstar_{topo}_hi_gbps": float(r["bstar_hi_gbps"])})
                fit_ok = fit_ok and bool(r.get("converged", True))
        if whatif is not None and len(whatif):  # the what-if replay (docs/critical-path.md §8), per job
            wc = whatif[whatif["gpu"].astype(str) == gpu]
            if precision != "all":
                wc = wc[wc["workload"].astype(str).map(prec_of) == precision]
            if len(wc) == 1:
                row.update(step_time_ms=float(wc["step_time_ms"].iloc[0]),
                           step_time_without_stragglers_ms=float(wc["step_time_without_stragglers_ms"].iloc[0]),
                           slowdown=float(wc["slowdown"].iloc[0]))
            elif len(wc) > 1:
                notes.append(f"step time without stragglers: {len(wc)} jobs in this cell, per job in summary.json "
                             "(jobs) and tables/whatif_jobs.parquet")
        if not fit_ok:
            notes.insert(0, f"fit {model or row.get('estimator_model', '')} NOT converged: xi, tau and B* are unreliable")
        rank = rank_rows.get((str(gpu), str(precision)))
        if rank:  # the rank model's verdict (xi of the rank times' tail) and slow ranks replace the comparators'
            row.update(rank)
            if rank.get("rank_model_converged") is False:
                fit_ok = False
                notes.insert(0, "rank model NOT converged (the alert above says why): its xi, verdict and slow ranks "
                                "are unreliable")
        row["converged"] = fit_ok
        row["notes"] = NOTE_SEPARATOR.join(notes)
        rows.append(row)
    # which estimator of tau(n) the rows' tau and B* are (issue 29: ranktail, with the main model's
    # centred estimator as its labelled fallback)
    chosen_all = (None if tau is None else tau["default_estimate"].astype(bool) if "default_estimate" in tau
                  else tau["model"] == model)
    estimators: list[str] = []
    points: dict[str, Any] = {}
    if tau is not None and "estimator" in tau and (model is not None or "default_estimate" in tau):
        estimators = sorted(set(tau.loc[chosen_all, "estimator"].astype(str)))
        points = {str(e): point_words(part) for e, part in
                  tau[chosen_all].groupby(tau.loc[chosen_all, "estimator"].astype(str), sort=True)}
    rank_loo = rank_block.get("loo")
    info = {"n": n, "model": model, "estimator": ", ".join(estimators) or None, "point_estimate": points,
            # the LOO line: the rank model's xi free vs xi = 0 where it ran; the GEV fits of block maxima
            # are comparators (``loo_comparators``), never the headline
            "loo": rank_loo["sentence"] if rank_loo else loo_verdict(compare),
            "loo_comparators": loo_verdict(compare) if rank_loo else "",
            "topologies": topologies, "level": INTERVAL_LEVEL,
            "loo_and_tail": reconcile_loo_tail(rank_loo_frame(rank_loo) if rank_loo else compare,
                                               [str(r.get("verdict") or "") for r in rows]),
            "rank_model": rank_block,
            # the comparators of the run: each "ran" or why not (the Bayesian GEV fits are opt-in, issue 48)
            "comparators": stages.get("prediction", {}).get("summary", {}).get("comparators", {}),
            # per job: measured step time, predicted without stragglers, slowdown S (docs/critical-path.md §8)
            "jobs": [] if whatif is None else [
                {"workload": str(r["workload"]), "gpu": str(r["gpu"]), "step_time_ms": float(r["step_time_ms"]),
                 "step_time_without_stragglers_ms": float(r["step_time_without_stragglers_ms"]),
                 "slowdown": float(r["slowdown"]), "n_rank_steps": int(r["whatif_rank_steps"]),
                 **_duration_model(r)}
                for _, r in whatif.iterrows()]}
    return pd.DataFrame(rows), info



#: ``whatif_durations`` of a what-if table written before the duration model was recorded.
NOT_RECORDED = "not recorded (an older run)"


def _duration_model(row: Any) -> dict[str, Any]:
    """The what-if's duration model of a ``tables/whatif_jobs.parquet`` row (docs/critical-path.md §8):
    ``whatif_durations`` (the sentence) and ``whatif_host_cores`` (the layout as given, or None); a
    table written before the columns existed says it did not record them."""
    said = row.get("whatif_durations")
    cores = row.get("whatif_host_cores")
    return {"whatif_durations": str(said) if isinstance(said, str) and said else NOT_RECORDED,
            "whatif_host_cores": str(cores) if isinstance(cores, str) and cores else None}


def fleet_assumption(tau_row: Any) -> str:
    """The fleet assumption of a tau(n) row: its ``fleet_assumption`` column, else the rank model's
    default wording for a row of the rank model (written before the column), else "" (no assumption):
    the estimator's own :attr:`~evtsync.predict.registry.Estimator.fleet`."""
    from evtsync.predict import registry

    given = tau_row.get("fleet_assumption")
    if isinstance(given, str) and given:
        return given
    name = str(tau_row.get("estimator", ""))
    return registry.get(name).fleet if name in registry.names() else ""


def rank_loo_frame(block: dict[str, Any]) -> pd.DataFrame:
    """The rank model's LOO rows (summary.json's ``rank_model.loo``) as the comparison table
    :func:`reconcile_loo_tail` reads (rank, model, family, elpd_diff ≥ 0, diff_se)."""
    from evtsync.evt.rankreport import GUMBEL_LOO_MARK

    table = pd.DataFrame(block["rows"])
    return pd.DataFrame({"rank": range(len(table)), "model": table["model"],
                         "family": ["gumbel" if GUMBEL_LOO_MARK in str(m) else "free" for m in table["model"]],
                         "elpd_diff": -table["d_elpd"].astype(float), "diff_se": table["d_se"].astype(float)})


def rank_model_summary(run_dir: Path, manifest: dict[str, Any], table: Any, why: Any
                       ) -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, Any]]:
    """The rank model's part of the answer table (issue 45): per (gpu, precision) the row's columns and
    summary.json's ``rank_model`` block (:func:`evtsync.evt.rankreport.rank_model_block`), read from the
    ``rankmodel`` stage's tables and its fit file's convergence. A run folder without them (an older run,
    a stage refused) gets ``available`` false and the ``reason`` (the stage's, from the manifest)."""
    from evtsync.core.defaults import RANK_FLEET_WORDING
    from evtsync.evt.rankreport import (
        RANK_FIT_FILES,
        RANK_STAGE,
        RANK_TABLES,
        model_words,
        rank_model_block,
    )

    frames = {name: table(name) for name in RANK_TABLES}
    missing = [f"tables/{name}.parquet" for name, frame in frames.items() if frame is None]
    if len(missing) == len(RANK_TABLES):
        reason = ("not in this run folder (" + why(RANK_STAGE) + ")" if RANK_STAGE in manifest.get("stages", {})
                  else "not in this run folder: the run was made before the rank model's stage existed (rerun "
                  "`evtsync run` to fit it)")
        return {}, {"available": False, "reason": reason, "model": model_words(None),
                    "fleet_assumption": RANK_FLEET_WORDING["new"]}
    converged, convergence, chains = _rank_fit_convergence(run_dir / RANK_FIT_FILES[0], manifest)
    rows, block = rank_model_block(frames["rank_effects"], frames["rank_variance"], frames["rank_xi"],
                                   frames["rank_loo"], converged, convergence, chains)
    block["available"] = True
    if missing:
        block["missing_tables"] = missing
        block["reason"] = f"{', '.join(missing)} missing ({why(RANK_STAGE)})"
    return rows, block


def _rank_fit_convergence(path: Path, manifest: dict[str, Any] | None = None) -> tuple[bool | None, str, int | None]:
    """(converged, the convergence line, chains) of the rank-model fit: from what the ``rankmodel`` stage
    recorded in the (verified) manifest when it holds it, else from the fit file's attributes (a run
    folder of an older version); (None, why, None) where neither says."""
    from evtsync.evt.rankreport import RANK_STAGE

    recorded = (((manifest or {}).get("stages", {}).get(RANK_STAGE) or {}).get("summary") or {}).get("fit")
    if isinstance(recorded, dict) and "converged" in recorded and "convergence" in recorded:
        chains = recorded.get("chains")
        return (bool(recorded["converged"]), str(recorded["convergence"]),
                int(chains) if isinstance(chains, int | float) else None)
    if not path.is_file():
        return None, f"{path.name} missing: convergence unknown", None
    from evtsync.core.errors import EvtsyncError
    from evtsync.evt.fitfile import read_netcdf_tree

    try:  # the guarded reader: a damaged file never hangs libhdf5 here (docs/security.md)
        attrs = dict(read_netcdf_tree(path)[0].attrs)
    except (OSError, ValueError, EvtsyncError) as exc:
        return None, f"{path.name} unreadable ({exc}): convergence unknown", None
    chains = attrs.get("chains")
    return (bool(int(attrs.get("converged", 0))), str(attrs.get("convergence", "")),
            int(chains) if chains is not None else None)


def summary_document(numbers: pd.DataFrame, info: dict[str, Any]) -> dict[str, Any]:
    """The answer table as one JSON-ready document: ``info`` (n, model, loo, …) and ``rows`` (one
    per GPU × precision, :func:`summary_numbers`' columns; NaN and ±∞ become null, and each
    interval's ``*_interval`` column says when a null end means "unbounded")."""
    from evtsync.core.tableio import json_ready

    return json_ready({"format": SUMMARY_FORMAT, **info, "rows": numbers.to_dict(orient="records")})


def read_summary(run_dir: Path, manifest: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The run's answer table as the summary stage wrote it (``tables/summary.parquet`` and
    ``summary.json``); computed from the tables (:func:`summary_numbers`) for a run folder written
    before the summary stage existed."""
    import json

    path, doc = run_dir / TABLES / "summary.parquet", run_dir / SUMMARY_JSON
    if path.is_file() and doc.is_file():
        info = json.loads(doc.read_text(encoding="utf-8"))
        info.pop("rows", None)
        info.pop("format", None)
        return read_table(path), info
    return summary_numbers(run_dir, manifest)
