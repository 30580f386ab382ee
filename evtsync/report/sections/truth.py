"""The demo's estimates beside its planted truth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from evtsync.report.context import PCT, ReportContext
from evtsync.report.markdown import (
    Section,
    Skipped,
    Table,
    fmt_ci,
)


def _read_truths(ctx: ReportContext) -> dict[str, dict[str, Any]]:
    """Workload -> the demo study's ``ground_truth.json`` (only those the demo stage wrote)."""
    import orjson

    from evtsync.synth.truth import TRUTH_FILE

    out = {}
    for rel in ctx.stage("demo").get("outputs", {}):
        if Path(rel).name == TRUTH_FILE:
            path = ctx.run_dir / rel
            if path.is_file():
                truth = orjson.loads(path.read_bytes())
                out[str(truth.get("workload", path.parent.name))] = truth
    return out


def truth_tables(truths: dict[str, dict[str, Any]], xi: pd.DataFrame | None, mle: pd.DataFrame | None,
                 attribution: pd.DataFrame | None, model: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The estimates beside the demo's truth: per GPU × precision the planted GEV shape xi against
    the main model's and the MLE's interval (does it cover the truth?); per workload the
    attribution against the truth's straggler ranks and planted causes."""
    rows, att_rows = [], []
    for workload, t in sorted(truths.items()):
        gpu, precision = str(t["gpu"]), str(t["precision"])
        g = t["gev"]
        row: dict[str, Any] = {"workload": workload, "GPU": gpu, "precision": precision, "true xi": float(g["xi"]),
                               "true mu": float(g["mu"]), "true sigma": float(g["sigma"])}
        if xi is not None and model is not None and len(xi):
            x = xi[(xi["model"] == model) & (xi["gpu"].astype(str) == gpu) & (xi["precision"].astype(str) == precision)]
            if len(x):
                r = x.iloc[0]
                row[f"{model} xi [{PCT} CrI]"] = fmt_ci(r["xi_mean"], r["xi_lo"], r["xi_hi"])
                row["CrI covers truth"] = bool(r["xi_lo"] <= g["xi"] <= r["xi_hi"])
                row["not converged"] = not bool(r["converged"])
        if mle is not None and "xi" in mle:
            m = mle[(mle["family"] == "gev") & (mle["gpu"].astype(str) == gpu) & (mle["precision"].astype(str) == precision)]
            if len(m):
                r = m.iloc[0]
                row[f"MLE xi [{PCT} profile CI]"] = fmt_ci(r["xi"], r["xi_lo"], r["xi_hi"])
                row["CI covers truth"] = bool(r["xi_lo"] <= g["xi"] <= r["xi_hi"])
        rows.append(row)
        coll = t.get("collectives", [])
        tp = [c for c in coll if c.get("group_kind", "tp") == "tp"]
        planted = [c for c in tp if c.get("planted_cause")]
        noisy = [c for c in tp if any(n.get("rank") == c.get("straggler_rank") for n in c.get("cpu_noise", []))]
        arow: dict[str, Any] = {"workload": workload, "TP collectives (truth)": len(tp),
                                "planted causes (truth)": len(planted),
                                "CPU delay idled the straggler's GPU (truth)": len(noisy)}
        if attribution is not None and len(attribution):
            a = attribution[attribution["workload"].astype(str) == workload]
            ok = a[a["status"] == "ok"]
            key = {(str(c["pg"]), int(c["index"])): c for c in tp if not c.get("straggler_tie")}
            hits = [(int(r.straggler_rank) == int(key[(str(r.pg), int(r.index))]["straggler_rank"]))
                    for r in ok.itertuples() if (str(r.pg), int(r.index)) in key]
            arow["attributed"] = len(ok)
            arow["straggler rank = truth"] = f"{sum(hits)} of {len(hits)}"
            arow["GPU-only paths"] = int((ok["path_kind"] == "gpu_only").sum())
            arow["non-GPU paths"] = int((ok["path_kind"] != "gpu_only").sum())
            found = 0
            for c in planted:
                hit = ok[(ok["pg"].astype(str) == str(c["pg"])) & (ok["index"].astype(int) == int(c["index"]))]
                kind = c["planted_cause"].get("kind")
                if len(hit) and ((kind == "slow_gemm") == (hit["path_kind"].iloc[0] == "gpu_only")):
                    found += 1
            arow["planted causes found"] = f"{found} of {len(planted)}" if planted else "– (none planted)"
        att_rows.append(arow)
    return pd.DataFrame(rows), pd.DataFrame(att_rows)


def build(ctx: ReportContext) -> list[Section]:
    """This module's sections of the run report (see the module docstring)."""
    if not ctx.manifest.get("demo"):
        return []
    title = "Estimates vs ground truth (demo)"
    truths = _read_truths(ctx)
    if not truths:
        return [Section(title, [Skipped("Skipped — the demo's ground_truth.json files are not in the run folder "
                                        "(" + ctx.why_not("demo") + ")")], anchor="truth")]
    from evtsync.pipeline.layout import main_model

    model = main_model(ctx.run_dir, ctx.manifest)
    xi_rows, att_rows = truth_tables(truths, ctx.table("xi"), ctx.table("mle"), ctx.table("attribution_collectives"),
                                     model)
    items: list[Any] = [
        "The demo's traces were generated with known GEV parameters per GPU × precision and known stragglers "
        "(inputs/demo/<workload>/ground_truth.json, docs/synth.md); here the estimates stand beside them.",
        Table(xi_rows, f"Planted GEV parameters of the z-scores against the estimated shape xi: the main model "
                       f"{model or '(none)'} ({PCT} credible interval) and the GEV MLE ({PCT} profile-likelihood "
                       "interval); \"covers truth\" says whether the interval contains the planted xi (at the "
                       f"{PCT} level about one cell in ten may miss by chance). Rows in red: fit not converged.",
              flag="not converged" if "not converged" in xi_rows else None),
        Table(att_rows, "Critical-path attribution against the truth: the straggler rank it found against the "
                        "generator's (ties left out); the planted causes (none in the bundled demo) and the "
                        "collectives whose straggler lost GPU time to a random CPU delay, beside the attribution's "
                        "GPU-only and non-GPU paths.")]
    return [Section(title, items, anchor="truth")]

