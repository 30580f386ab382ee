"""Is the tail interval's lower side too short? (issue 45, reps45; docs/bayesian.md, "More replicates").

Over the iid parents the 90% interval's half-width below the point ÷ 1.645 is about 0.6-0.75 of the
point's spread over jobs at n = 512 and 4096, for ranktail and the rank model alike. This script
measures what that means for coverage, outside the study:

- ``--table``: over the 80-iteration estimator study (``benchmarks/results/
  estimator_study_80iterations.jsonl``, ranktail, 285 jobs per parent) and over this script's own
  runs, the misses above the truth (lo > true) and below it (hi < true) per parent and n, the mean
  below-side half-width over all jobs and over the top decile of point/true (where a miss above
  can happen), and its correlation with point/true;
- a run (``--parents``, ``--replicates``): ranktail on iid standardised values of a parent (N =
  5,112, as a study job, no traces: the truth is exact, no scale is estimated) with the shape's
  prior Normal(0, RANKTAIL_XI_PRIOR_SD) (the default) and flat on the grid (the prior's sd set to
  1e6), on the same data sets, one line per data set.

    nice -n 10 .venv/bin/python benchmarks/interval_sides.py --parents normal,gumbel --replicates 200 --out benchmarks/results/interval_sides_reps45.jsonl
    .venv/bin/python benchmarks/interval_sides.py --table benchmarks/results/interval_sides_reps45.jsonl
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
NS = (512, 4096)
N_VALUES = 5112
PRIORS = {"prior0.3": None, "flat": 1e6}  # None: the library's default sd
STUDY80 = ROOT / "benchmarks" / "results" / "estimator_study_80iterations.jsonl"


def run(parents: list[str], replicates: int, first: int, out_path: str) -> None:
    """ranktail on ``replicates`` iid data sets per parent, under each prior of :data:`PRIORS`."""
    import evtsync.evt.ranktail as rt
    from evtsync.synth.parents import get_parent, true_delay_sd

    default_sd = rt.RANKTAIL_XI_PRIOR_SD
    with open(out_path, "a", encoding="utf-8") as out:
        for parent in parents:
            truth = np.array([true_delay_sd(parent, n) for n in NS])
            dist = get_parent(parent)
            for r in range(first, replicates):
                u = dist.standard_draws(np.random.default_rng(777000 + r), (N_VALUES,))
                rec: dict[str, object] = {"parent": parent, "rep": r}
                for name, sd in PRIORS.items():
                    rt.RANKTAIL_XI_PRIOR_SD = default_sd if sd is None else sd  # the grid posterior reads it
                    cpu0 = time.process_time()
                    tail = rt.fit_rank_tail(u, draws=600, seed=r)
                    q = np.quantile(rt.expected_max_draws(tail, NS), [0.05, 0.5, 0.95], axis=0) / truth
                    rec[name] = {"lo": q[0].tolist(), "point": q[1].tolist(), "hi": q[2].tolist(),
                                 "k": tail.n_exceedances, "xi_med": float(np.median(tail.xi)),
                                 "cpu": time.process_time() - cpu0}
                rt.RANKTAIL_XI_PRIOR_SD = default_sd
                out.write(json.dumps(rec) + "\n")
                out.flush()


def _study80() -> pd.DataFrame:
    rows = []
    for line in STUDY80.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r["estimator"] != "ranktail":
            continue
        rows += [{"source": "estimator study (ranktail, traces)", "parent": r["parent"], "n": x["n"],
                  "ratio": x["point"] * r["b_ratio"] / x["true"], "lo": x["lo"] * r["b_ratio"] / x["true"],
                  "hi": x["hi"] * r["b_ratio"] / x["true"]} for x in r["rows"] if x["n"] in NS]
    return pd.DataFrame(rows)


def _own(paths: list[str]) -> pd.DataFrame:
    rows = []
    for p in paths:
        for line in Path(p).read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            for name in PRIORS:
                rows += [{"source": f"iid values, xi prior {name}", "parent": r["parent"], "n": n,
                          "ratio": r[name]["point"][j], "lo": r[name]["lo"][j], "hi": r[name]["hi"][j]}
                         for j, n in enumerate(NS)]
    return pd.DataFrame(rows)


def table(paths: list[str]) -> None:
    """The sides of the misses, per source, parent and n (module docstring)."""
    from scipy import stats

    flat = pd.concat([_study80(), _own(paths)], ignore_index=True)
    flat["low"] = (flat["ratio"] - flat["lo"]) / flat["ratio"] / 1.645
    print("| source | parent | n | jobs | mean point/true (± se) | above / below (range per side) | below-side half-width "
          "÷ 1.645: all, top decile | corr(point/true, that half-width) | sd of point/true |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (source, parent, n), g in flat.groupby(["source", "parent", "n"], sort=False):
        jobs = len(g)
        top = g["ratio"] >= g["ratio"].quantile(0.9)
        rng = f"{int(stats.binom.ppf(0.025, jobs, 0.05))}–{int(stats.binom.ppf(0.975, jobs, 0.05))}"
        print(f"| {source} | {parent} | {n} | {jobs} | {g['ratio'].mean():.3f} (± {g['ratio'].std() / np.sqrt(jobs):.3f}) | "
              f"{int((g['lo'] > 1).sum())} / {int((g['hi'] < 1).sum())} ({rng}) | {100 * g['low'].mean():.1f}%, "
              f"{100 * g.loc[top, 'low'].mean():.1f}% | {np.corrcoef(g['ratio'], g['low'])[0, 1]:.2f} | "
              f"{100 * g['ratio'].std():.1f}% |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parents", default="normal,gumbel")
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--first-replicate", type=int, default=0)
    parser.add_argument("--out", default="interval_sides.jsonl")
    parser.add_argument("--table", nargs="*", metavar="JSONL", help="summarise (the estimator study and these files)")
    args = parser.parse_args()
    if args.table is not None:
        table(args.table)
    else:
        run(args.parents.split(","), args.replicates, args.first_replicate, args.out)


if __name__ == "__main__":
    main()
