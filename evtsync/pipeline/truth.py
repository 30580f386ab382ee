"""The bundled demo's estimates beside its planted truth (``ground_truth.json`` of each workload,
docs/synth.md): the summary stage writes them as ``tables/truth_xi.parquet`` and
``tables/truth_attribution.parquet`` for a demo run; the report shows them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd


def read_truths(run_dir: Path, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Workload -> the demo study's ``ground_truth.json`` (only those the demo stage wrote)."""
    import orjson

    from evtsync.synth.truth import TRUTH_FILE

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
    """The estimates beside the demo's truth, as numbers: per workload (one GPU × precision) the
    planted GEV parameters and the main model's and the GEV MLE's interval of xi with whether each
    covers the planted xi; per workload the attribution against the truth's straggler ranks
    (ties left out), planted causes and CPU delays."""
    rows, att_rows = [], []
    for workload, t in sorted(truths.items()):
        gpu, precision = str(t["gpu"]), str(t["precision"])
        g = t["gev"]
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
        att_rows.append(arow)
    return pd.DataFrame(rows), pd.DataFrame(att_rows)
