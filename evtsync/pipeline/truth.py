"""The bundled demo's estimates beside its planted truth (``ground_truth.json`` of each workload,
docs/synth.md): the summary stage writes them as ``tables/truth_xi.parquet`` (planted GEV
parameters), ``tables/truth_delay.parquet`` (simulated ranks: the true mean straggler delay
against tau(n)) and ``tables/truth_attribution.parquet`` for a demo run; the report shows them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from evtsync.core.defaults import PAPER_MODEL, RANKTAIL_MODEL
from evtsync.predict.tables import point_column, point_labels


def read_truths(run_dir: Path, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Workload -> the demo study's ``ground_truth.json`` (only those the demo stage wrote)."""
    import orjson

    from evtsync.synth.config import TRUTH_FILE

    out = {}
    for rel in manifest.get("stages", {}).get("demo", {}).get("outputs", {}):
        if Path(rel).name == TRUTH_FILE:
            path = run_dir / rel
            if path.is_file():
                truth = orjson.loads(path.read_bytes())
                out[str(truth.get("workload", path.parent.name))] = truth
    return out


def truth_tables(truths: dict[str, dict[str, Any]], xi: pd.DataFrame | None, mle: pd.DataFrame | None,
                 attribution: pd.DataFrame | None, model: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The estimates beside the demo's truth, as numbers: per workload (one GPU × precision) whose
    truth plants GEV parameters, those and the main model's and the GEV MLE's interval of xi with
    whether each covers the planted xi (a workload of simulated ranks, ``gev`` null, has no planted
    xi: its truth is the straggler delay of :func:`truth_delay_table`); per workload the
    attribution against the truth's straggler ranks (ties left out), planted causes and CPU delays."""
    rows, att_rows = [], []
    for workload, t in sorted(truths.items()):
        gpu, precision = str(t["gpu"]), str(t["precision"])
        g = t.get("gev")
        if g is None:
            att_rows.append(_attribution_row(workload, t, attribution))
            continue
        row: dict[str, Any] = {"workload": workload, "gpu": gpu, "precision": precision, "true_xi": float(g["xi"]),
                               "true_mu": float(g["mu"]), "true_sigma": float(g["sigma"])}
        if xi is not None and model is not None and len(xi):
            x = xi[(xi["model"] == model) & (xi["gpu"].astype(str) == gpu) & (xi["precision"].astype(str) == precision)]
            if len(x):
                r = x.iloc[0]
                row.update(model=model, model_xi_mean=float(r["xi_mean"]), model_xi_lo=float(r["xi_lo"]),
                           model_xi_hi=float(r["xi_hi"]), model_covers=bool(r["xi_lo"] <= g["xi"] <= r["xi_hi"]),
                           converged=bool(r["converged"]))
        if mle is not None and "xi" in mle:
            m = mle[(mle["family"] == "gev") & (mle["gpu"].astype(str) == gpu) & (mle["precision"].astype(str) == precision)]
            if len(m):
                r = m.iloc[0]
                row.update(mle_xi=float(r["xi"]), mle_xi_lo=float(r["xi_lo"]), mle_xi_hi=float(r["xi_hi"]),
                           mle_covers=bool(r["xi_lo"] <= g["xi"] <= r["xi_hi"]))
        rows.append(row)
        att_rows.append(_attribution_row(workload, t, attribution))
    return pd.DataFrame(rows), pd.DataFrame(att_rows)


def _attribution_row(workload: str, t: dict[str, Any], attribution: pd.DataFrame | None) -> dict[str, Any]:
    """One workload's attribution against its truth (see :func:`truth_tables`)."""
    coll = t.get("collectives", [])
    tp = [c for c in coll if c.get("group_kind", "tp") == "tp"]
    planted = [c for c in tp if c.get("planted_cause")]
    noisy = [c for c in tp if any(n.get("rank") == c.get("straggler_rank") for n in c.get("cpu_noise", []))]
    arow: dict[str, Any] = {"workload": workload, "tp_collectives": len(tp), "planted": len(planted),
                            "cpu_delay_idled_straggler": len(noisy)}
    if attribution is not None and len(attribution):
        a = attribution[attribution["workload"].astype(str) == workload]
        ok = a[a["status"] == "ok"]
        key = {(str(c["pg"]), int(c["index"])): c for c in tp if not c.get("straggler_tie")}
        hits = [(int(r.straggler_rank) == int(key[(str(r.pg), int(r.index))]["straggler_rank"]))
                for r in ok.itertuples() if (str(r.pg), int(r.index)) in key]
        arow["attributed"] = len(ok)
        arow["straggler_hits"], arow["straggler_compared"] = sum(hits), len(hits)
        arow["gpu_only_paths"] = int((ok["path_kind"] == "gpu_only").sum())
        arow["non_gpu_paths"] = int((ok["path_kind"] != "gpu_only").sum())
        found = 0
        for c in planted:
            hit = ok[(ok["pg"].astype(str) == str(c["pg"])) & (ok["index"].astype(int) == int(c["index"]))]
            kind = c["planted_cause"].get("kind")
            if len(hit) and ((kind == "slow_gemm") == (hit["path_kind"].iloc[0] == "gpu_only")):
                found += 1
        arow["planted_found"] = found
    return arow


#: Domain sizes of the truth comparison besides m and each workload's TP group size.
TRUTH_NS = (512, 4096)


def truth_delay_table(truths: dict[str, dict[str, Any]], tau: pd.DataFrame | None, model: str | None) -> pd.DataFrame:
    """Simulated ranks (a truth with a ``parent``): the true mean straggler delay E[max_n X − mean_n X]
    in units of the block sd b against tau(n)/b of the run's default estimator (the rank model), of the main
    GEV model ``model`` and of the paper's
    estimator (:data:`PAPER_MODEL`) and of the per-rank tail estimator (:data:`RANKTAIL_MODEL`), at n = m, the workload's TP group size and :data:`TRUTH_NS`.

    One row per workload × n × model (``estimator`` as the tau table names it; ``default_estimate``
    marks the run's default estimator, the rank model, or its labelled fallback), with
    ``ratio_point`` (the estimator's point, ``point_estimate``: :func:`evtsync.predict.tables.point_column`),
    ``ratio_mean``/``ratio_lo``/``ratio_hi`` = tau/b over the truth and ``covers`` (is the truth
    inside the interval); a model without a row for that cell and n is left out of that n (its
    absence is the table's, not a miss). Workloads with planted GEV parameters have no row here."""
    rows = []
    for workload, t in sorted(truths.items()):
        parent = t.get("parent")
        if not parent:
            continue
        gpu, precision = str(t["gpu"]), str(t["precision"])
        m = int(t["config"]["sample_size"])
        tp_sizes = [int(pg["pg_size"]) for pg in t.get("process_groups", []) if pg.get("kind") == "tp"]
        group = max(tp_sizes) if tp_sizes else None
        for n in sorted({m, *TRUTH_NS} | ({group} if group else set())):
            true = parent["true_straggler_delay_sd"].get(str(n))
            if true is None:
                continue
            base = {"workload": workload, "gpu": gpu, "precision": precision, "parent": str(parent["name"]),
                    "n": n, "m": m, "measured_here": n == group, "true_delay_sd": float(true)}
            # the default estimator's models first (the rank model; its labelled fallback's), then the comparators
            default_models = ([str(v) for v in tau.loc[tau["default_estimate"].astype(bool), "model"].unique()]
                              if tau is not None and "default_estimate" in tau else [])
            for name in dict.fromkeys([*default_models, model, PAPER_MODEL, RANKTAIL_MODEL]):
                if tau is None or name is None or not len(tau):
                    continue
                x = tau[(tau["model"] == name) & (tau["gpu"].astype(str) == gpu)
                        & (tau["precision"].astype(str) == precision) & (tau["n"] == n)]
                if not len(x):
                    continue
                r = x.iloc[0]
                b = float(r["b_us"])
                lo, mean, hi = (float(r[c]) / b for c in ("tau_lo_us", "tau_mean_us", "tau_hi_us"))
                point = float(point_column(x, "tau", "_us").iloc[0]) / b
                rows.append({**base, "model": name, "estimator": str(r.get("estimator", "")),
                             "default_estimate": bool(r.get("default_estimate", False)),
                             "converged": bool(r.get("converged", True)),
                             "point_estimate": str(point_labels(x).iloc[0]),
                             "tau_point_sd": point, "tau_mean_sd": mean, "tau_lo_sd": lo, "tau_hi_sd": hi,
                             "ratio_point": point / true, "ratio_mean": mean / true, "ratio_lo": lo / true,
                             "ratio_hi": hi / true,
                             "covers": bool(lo <= true <= hi)})
    return pd.DataFrame(rows)
