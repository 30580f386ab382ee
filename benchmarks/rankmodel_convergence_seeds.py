"""Convergence of the rank model's default sampler settings over seeds (issue 45, item 6).

Fits the rank model (xi free and xi ≡ 0, as the run's ``rankmodel`` stage does) to the z-score table
of a finished ``evtsync run`` of the demo, at each seed, with the defaults of
:func:`evtsync.evt.rankmodel.fit_rank_model`; ``--half early`` fits the rows before each workload's
median collective index (the run's out-of-sample check). One JSON line per fit: converged, divergences,
max R-hat, min bulk ESS, CPU seconds.

    .venv/bin/python benchmarks/rankmodel_convergence_seeds.py RUN_DIR --seeds 0-9 [--half early] >> out.jsonl

``--draws``, ``--tune``, ``--target-accept`` and ``--adaptation`` override the specification's settings
(a candidate setting's evidence); each line records the settings it ran with and the mean number of
leapfrog steps per draw.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished `evtsync run` folder of the demo")
    parser.add_argument("--seeds", default="0-9", help="seeds, FIRST-LAST (default 0-9)")
    parser.add_argument("--half", choices=("all", "early"), default="all", help="all rows, or the earlier half")
    parser.add_argument("--draws", type=int, help="draws per chain (default: the specification's)")
    parser.add_argument("--tune", type=int, help="tuning steps per chain (default: the specification's)")
    parser.add_argument("--target-accept", type=float, help="NUTS target acceptance (default: the specification's)")
    parser.add_argument("--adaptation", help="nutpie's mass-matrix adaptation (default: the specification's)")
    args = parser.parse_args()
    from evtsync.evt.rankmodel import fit_table

    overrides = {k: v for k, v in (("draws", args.draws), ("tune", args.tune), ("target_accept", args.target_accept),
                                   ("adaptation", args.adaptation)) if v is not None}

    z = pd.read_parquet(args.run / "tables" / "zscores.parquet")
    if args.half == "early":
        z = z[z["index"] < z.groupby("workload")["index"].transform("median")]
    first, last = (int(v) for v in args.seeds.split("-"))
    for seed in range(first, last + 1):
        for free in (True, False):
            start = time.process_time()
            fit = fit_table(z, seed=seed, source="zscores", refused={}, free_shape=free, **overrides)
            steps = float(fit.tree["sample_stats"]["n_steps"].mean())
            print(json.dumps({"half": args.half, "seed": seed, "free_shape": free, "draws": int(fit.attrs["draws"]),
                              "tune": int(fit.attrs["tune"]), "target_accept": float(fit.attrs["target_accept"]),
                              "adaptation": fit.attrs["adaptation"], "mean_steps": round(steps, 1),
                              "converged": fit.converged, "divergences": int(fit.attrs["divergences"]),
                              "max_rhat": round(float(fit.attrs["max_rhat"]), 4),
                              "min_ess_bulk": round(float(fit.attrs["min_ess_bulk"])),
                              "cpu_s": round(time.process_time() - start, 1)}), flush=True)


if __name__ == "__main__":
    main()
