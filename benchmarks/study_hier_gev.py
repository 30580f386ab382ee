"""Simulation study of the main model (issue 19): divergences and 90% coverage across effect
sizes and cell sizes, at the spec's default sampler settings.

Run by hand (minutes; one fit at a time, both cores):

    nice -n 10 .venv/bin/python benchmarks/study_hier_gev.py --out study.jsonl
    .venv/bin/python benchmarks/study_hier_gev.py --table study.jsonl      # markdown table

Cases: 3 GPUs x 2 precisions, xi = xi0 + spread * (gpu effect -1, 0, 1) + spread *
(precision effect +0.5, -0.5), xi0 = 0.1, for spread 0 (no effect), 0.05, 0.15 and cell sizes
200, 2000, 10,000 z-scores; plus a grid of mixed cell sizes (200 ... 50,000) and the
off-surface small cell of issue 19 (5 cells of 5,000 on the additive surface, one of 200
with xi = 0.05 where the surface says 0.30). mu and sigma vary by cell. Each line of the
output is one fit: settings, wall time, divergences, R-hat, ESS, and per cell the truth,
the 90% interval and whether it contains the truth, plus the posterior predictive verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
GPUS, PRECISIONS = ["A100", "B200", "H200"], ["bf16", "fp32"]
GPU_EFFECT = {"A100": -1.0, "B200": 0.0, "H200": 1.0}
PREC_EFFECT = {"bf16": 0.5, "fp32": -0.5}
MU = {"A100": 0.85, "B200": 0.75, "H200": 0.80}
SIGMA = {"bf16": 0.5, "fp32": 0.42}


def truth(spread: float, xi0: float = 0.1) -> pd.DataFrame:
    """True per-cell parameters of a case with the given spread of xi."""
    rows = []
    for g in GPUS:
        for p in PRECISIONS:
            rows.append({"gpu": g, "precision": p, "mu": MU[g], "sigma": SIGMA[p],
                         "xi": xi0 + spread * (GPU_EFFECT[g] + PREC_EFFECT[p])})
    return pd.DataFrame(rows)


def cases() -> list[dict]:
    """The study's cases (name, truth, cell sizes)."""
    out = []
    for spread in (0.0, 0.05, 0.15):
        for n in (200, 2000, 10_000):
            out.append({"name": f"spread {spread:g}, {n} per cell", "spread": spread, "truth": truth(spread),
                        "sizes": [n] * 6})
    out.append({"name": "spread 0.05, mixed sizes", "spread": 0.05, "truth": truth(0.05),
                "sizes": [200, 1000, 5000, 20_000, 50_000, 2000]})
    off = truth(0.1, xi0=0.15)
    off.loc[(off["gpu"] == "H200") & (off["precision"] == "bf16"), "xi"] = 0.05  # surface: 0.30
    out.append({"name": "off-surface cell (200, xi 0.05 vs 0.30)", "spread": 0.1, "truth": off,
                "sizes": [5000, 5000, 5000, 5000, 200, 5000]})
    return out


def run_case(case: dict, seed: int) -> dict:
    """Fit the main model at its default settings on one simulated data set."""
    from evtsync.evt.fit import cell_parameters, fit_table
    from evtsync.evt.model import simulate_zscore_table
    from evtsync.evt.spec import load_spec

    table = simulate_zscore_table(case["truth"], case["sizes"], seed=seed)
    spec = load_spec(ROOT / "models" / "gev-hier-gpu-precision.toml")
    start = time.perf_counter()
    tree = fit_table(table, spec, seed=seed)
    wall = time.perf_counter() - start
    params = cell_parameters(tree)
    cells = []
    for (_, row), n in zip(case["truth"].iterrows(), case["sizes"], strict=True):
        cell = f"{row['gpu']}|{row['precision']}"
        entry = {"cell": cell, "n": n}
        for name in ("mu", "sigma", "xi"):
            lo, hi = np.quantile(params[name].sel(cell=cell).values, [0.05, 0.95])
            entry[name] = {"true": float(row[name]), "lo": float(lo), "hi": float(hi),
                           "inside": bool(lo <= row[name] <= hi)}
        cells.append(entry)
    return {
        "case": case["name"], "seed": seed, "n_obs": int(sum(case["sizes"])), "wall_s": round(wall, 1),
        "divergences": int(tree.attrs["divergences"]), "max_rhat": float(tree.attrs["max_rhat"]),
        "min_ess_bulk": float(tree.attrs["min_ess_bulk"]), "convergence": tree.attrs["convergence"],
        "steps_per_draw": float(tree["sample_stats"]["n_steps"].mean()),
        "target_accept": float(tree.attrs["target_accept"]),
        "ppc": tree.attrs["posterior_predictive"], "ppc_fits": int(tree.attrs["posterior_predictive_fits"]),
        "timings": json.loads(tree.attrs["timings"]), "cells": cells,
        "load_avg": os.getloadavg()[0],
    }


def table(path: Path) -> str:
    """Markdown table of a study's output."""
    lines = ["| case | z-scores | wall s (load) | divergences | max R-hat | min bulk ESS | steps/draw | "
             "xi in 90% | mu, sigma in 90% | posterior predictive |", "|---|---|---|---|---|---|---|---|---|---|"]
    hits = total = 0
    for line in path.read_text().splitlines():
        r = json.loads(line)
        xi_in = sum(c["xi"]["inside"] for c in r["cells"])
        ms_in = sum(c["mu"]["inside"] + c["sigma"]["inside"] for c in r["cells"])
        hits += xi_in
        total += len(r["cells"])
        ppc = "fits" if r["ppc_fits"] else r["ppc"][:80]
        lines.append(f"| {r['case']} | {r['n_obs']} | {r['wall_s']} ({r['load_avg']:.1f}) | {r['divergences']} | "
                     f"{r['max_rhat']:.4f} | {r['min_ess_bulk']:.0f} | {r['steps_per_draw']:.1f} | "
                     f"{xi_in}/{len(r['cells'])} | {ms_in}/{2 * len(r['cells'])} | {ppc} |")
    if total:
        sd = np.sqrt(total * 0.9 * 0.1)
        lines.append(f"\nxi coverage: {hits}/{total} = {hits / total:.1%} (nominal 90%: {0.9 * total:.1f} "
                     f"± {sd:.1f}, binomial sd)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="append one JSON line per fit")
    parser.add_argument("--table", type=Path, help="print the markdown table of a study output and exit")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="run the cases whose name contains this text")
    args = parser.parse_args()
    if args.table:
        print(table(args.table))
        return
    done = set()
    if args.out and args.out.exists():  # resume: cases already in the output are not rerun
        done = {json.loads(line)["case"] for line in args.out.read_text().splitlines() if line.strip()}
    for k, case in enumerate(cases()):
        if (args.only and args.only not in case["name"]) or case["name"] in done:
            continue
        result = run_case(case, seed=args.seed + k)
        line = json.dumps(result)
        print(f"{case['name']}: {result['wall_s']} s, {result['convergence']}; {result['ppc'][:100]}", flush=True)
        if args.out:
            with args.out.open("a") as fh:
                fh.write(line + "\n")


if __name__ == "__main__":
    main()
