"""Do the default sampler settings converge on the demo for seeds 0-9? (issue 45, item 6)

Fits each model of the demo run (its ``tables/zscores.parquet``) at the default settings of
``evtsync run`` (4 dispersed chains x 1000 draws x 1000 tuning steps, target_accept and
adaptation "auto") once per seed, one fit at a time, and prints the convergence verdict of
each (split R-hat <= 1.01, bulk and tail ESS >= 400, no divergence). Settings can be
overridden to try others (``--draws``, ``--tune``, ``--target-accept``).

    python benchmarks/demo_convergence_seeds.py fits/demo --seeds 0-9 --model gev-hier-gpu-precision

Results in docs/bayesian.md, "Convergence of the default settings over seeds".
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pandas as pd

from evtsync.evt.fit import check_convergence, fit_table
from evtsync.evt.spec import SamplerConfig, load_spec

MODELS = Path(__file__).resolve().parent.parent / "models"


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    """Fit each seed in turn and print one JSON line per fit."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a demo run folder (its tables/zscores.parquet)")
    p.add_argument("--model", action="append", help="model name (repeatable; default gev-hier-gpu-precision)")
    p.add_argument("--seeds", default="0-9")
    p.add_argument("--draws", type=int)
    p.add_argument("--tune", type=int)
    p.add_argument("--target-accept")
    args = p.parse_args()
    table = pd.read_parquet(Path(args.run) / "tables" / "zscores.parquet")
    for model in args.model or ["gev-hier-gpu-precision"]:
        spec = load_spec(MODELS / f"{model}.toml")
        config = spec.sampler_config()
        for seed in _seeds(args.seeds):
            start = time.process_time()
            tree = fit_table(table, spec, sampler=SamplerConfig(**{**config.__dict__, "seed": seed}),
                             draws=args.draws, tune=args.tune,
                             target_accept=(float(args.target_accept) if args.target_accept not in (None, "auto")
                                            else args.target_accept))
            conv = check_convergence(tree)
            print(json.dumps({"model": model, "seed": seed, "converged": conv.converged,
                              "max_rhat": round(conv.max_rhat, 4), "worst_rhat": conv.worst_rhat_param,
                              "min_ess_bulk": round(conv.min_ess_bulk), "min_ess_tail": round(conv.min_ess_tail),
                              "divergences": conv.divergences, "draws": tree.posterior.sizes["draw"],
                              "cpu_s": round(time.process_time() - start, 1)}), flush=True)


if __name__ == "__main__":
    main()
