"""The run's answer table: one row per GPU × precision with the tax, the attribution, the tail
and the predictions (the ``summary`` stage writes it as ``tables/summary.parquet`` and
``summary.json``; the report's summary shows it; ``evtsync run --json`` prints it).

Every number is read from the stages' tables; the intervals of the measured tax and of the
GPU-only share are computed here (:mod:`evtsync.intervals`), once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.display import fmt
from evtsync.intervals import median_interval, quantile_interval, wilson_interval
from evtsync.pipeline.layout import STATUS_TEXT, TABLES, main_model
from evtsync.tableio import read_table

#: Domain size of the summary's tau(n) and B* when the run's options name none (the paper's
#: 3D-torus example; the largest tabulated n below it otherwise).
SUMMARY_N = 512


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


def tail_verdict(lo: float, hi: float, family: str) -> str:
    """The tail type read from the interval [lo, hi] of xi (a Gumbel model fixes it)."""
    if family == "gumbel":
        return "Gumbel (model fixes xi = 0)"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "–"
    if lo > 0:
        return "Fréchet (xi > 0)"
    if hi < 0:
        return "Weibull (xi < 0)"
    return "Gumbel (0 in interval)"


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
    rival = other.iloc[0]
    diff, se = float(rival["elpd_diff"]), float(rival["dse"])
    diff = abs(diff)
    clear = diff > 2 * se
    winner = "Gumbel (xi = 0)" if gumbel else "a free shape xi"
    text = (f"LOO prefers {winner}: {best['model']} over {rival['model']} by Δelpd {fmt(diff, 3)} ± {fmt(se, 2)}"
            + (" (more than 2 standard errors)." if clear else " — less than 2 standard errors: not a clear preference."))
    if not bool(best.get("converged", True)) or not bool(rival.get("converged", True)):
        text += " WARNING: a compared fit did not converge."
    return text


def summary_numbers(run_dir: Path, manifest: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The numbers of the report's summary, one row per GPU × precision, unformatted.

    Columns: gpu, precision; tax over the valid collectives of the process group(s) the
    compute blocks were cut from (all valid collectives where there are no z-scores):
    ``n_collectives``, ``tax_median_us`` / ``_lo`` / ``_hi`` (order-statistic interval),
    ``tax_p90_us`` / ``_lo`` / ``_hi``; the attribution: ``n_attributed``, ``n_not_attributed``,
    ``gpu_only_share`` / ``_lo`` / ``_hi`` (Wilson); the main model's ``xi_mean`` / ``_lo`` /
    ``_hi``, ``family``, ``verdict``; ``tau_mean_us`` / ``_lo_us`` / ``_hi_us`` and
    ``tau_share_infinite`` at n; per topology ``reduction_<topology>`` / ``_lo`` / ``_hi``;
    ``converged`` and ``notes``. The second value holds ``n``, ``model``, ``loo`` and ``topologies``.
    """
    def table(name: str) -> pd.DataFrame | None:
        path = run_dir / TABLES / f"{name}.parquet"
        return read_table(path) if path.is_file() else None

    stages = manifest.get("stages", {})

    def why(stage: str) -> str:
        entry = stages.get(stage, {})
        return f"stage {stage} {STATUS_TEXT.get(entry.get('status', 'not run'), entry.get('status', 'not run'))}" + (
            f": {entry['reason']}" if entry.get("reason") else "")

    coll, z, att = table("tax_collectives"), table("zscores"), table("attribution_collectives")
    xi, tau, bstar, compare = table("xi"), table("tau"), table("bstar"), table("compare")
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
            row["tax_p90_us"], row["tax_p90_lo_us"], row["tax_p90_hi_us"] = quantile_interval(values, 0.9)
        else:
            notes.append(f"tax: {why('tax')}")
        if att is not None and len(att):
            a = in_cell(att, gpu, precision)
            ok = a[a["status"] == "ok"]
            row["n_attributed"], row["n_not_attributed"] = len(ok), len(a) - len(ok)
            share = wilson_interval(int((ok["path_kind"] == "gpu_only").sum()), len(ok))
            row["gpu_only_share"], row["gpu_only_share_lo"], row["gpu_only_share_hi"] = share
            if len(a) - len(ok):
                notes.append(f"{len(a) - len(ok)} of {len(a)} collectives not attributed")
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
                row.update(xi_mean=float(r["xi_mean"]), xi_lo=float(r["xi_lo"]), xi_hi=float(r["xi_hi"]),
                           family=family, verdict=tail_verdict(float(r["xi_lo"]), float(r["xi_hi"]), family))
                fit_ok = bool(r["converged"])
            else:
                notes.append(f"no cell of {model} for {gpu} {precision}")
        else:
            notes.append(f"xi: {why('prediction')}")
        if tau is not None and model is not None and len(tau):
            t = tau[(tau["model"] == model) & (tau["gpu"].astype(str) == gpu)
                    & (tau["precision"].astype(str) == precision) & (tau["n"] == n)]
            if len(t):
                r = t.iloc[0]
                row.update(tau_mean_us=float(r["tau_mean_us"]), tau_lo_us=float(r["tau_lo_us"]),
                           tau_hi_us=float(r["tau_hi_us"]), tau_share_infinite=float(r.get("tau_share_infinite", 0.0)))
                fit_ok = fit_ok and bool(r["converged"])
                if row["tau_share_infinite"] > 0:
                    notes.append(f"{row['tau_share_infinite']:.1%} of tau draws infinite (xi >= 1): mean over the "
                                 "finite draws, interval open")
        else:
            notes.append(f"tau(n): {why('prediction')}")
        for topo in topologies:
            b = bstar[(bstar["topology"] == topo) & (bstar["gpu"].astype(str) == gpu)
                      & (bstar["precision"].astype(str) == precision) & (bstar["n"] == n)]
            if len(b):
                r = b.iloc[0]
                row.update({f"reduction_{topo}": float(r["reduction_mean"]), f"reduction_{topo}_lo": float(r["reduction_lo"]),
                            f"reduction_{topo}_hi": float(r["reduction_hi"])})
                fit_ok = fit_ok and bool(r.get("converged", True))
        row["converged"] = fit_ok
        if not fit_ok:
            notes.insert(0, f"fit {model} NOT converged: xi, tau and B* are unreliable")
        row["notes"] = "; ".join(notes)
        rows.append(row)
    info = {"n": n, "model": model, "loo": loo_verdict(compare), "topologies": topologies}
    return pd.DataFrame(rows), info

