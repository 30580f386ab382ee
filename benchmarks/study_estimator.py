"""Simulation study of the estimators of tau(n) (issue 29) through the user's own path.

Per parent (normal, Gumbel, lognormal, Student-t; optionally the rare-slow-rank mixture) and
replicate: ``synth --parent`` writes an 8-rank job (one TP group of 8, two samples of m = 4 per
block instance; ``--iterations`` 80 by default: 5,112 rank values per cell, so every n of the
study lies within the data; 40, the study's length before 2026-12-06, puts n = 4096 at 1.6× the
2,560 values, the GPD's extrapolation, measured as such in docs/bayesian.md); ``evtsync.zscore_table`` reads its traces as any user's; the shipped
``models/gev.toml`` is fitted at its default sampler settings (4 dispersed chains x 1000 draws)
to the centred maxima ``y`` (the default estimator) and, for the paper's estimator, to ``z``;
``tau_summary`` predicts tau(n) for n in 8, 64, 512, 4096 in units of b, and both are compared
with the truth the generator states (``ground_truth.json``: E[max_n X - mean_n X]/b integrated
from the parent). The table compares them in µs, as the pipeline predicts: tau = b_us·E_k with
b_us = mean a × mean r of the cell (``evtsync.predict.tables.block_scale``), against the true delay
of a block with that mean, cv·mean a·truth; the factor between the two scales, mean r / cv, is
recorded per job (``b_ratio``; regenerated from the seed for records without it). Each output
line is one fit.

The per-rank tail estimator (``ranktail``, :mod:`evtsync.evt.ranktail`) runs on the same jobs
(same seeds) from the same table: its semi-parametric fit of every rank's value u, no sampler
(``--estimators ranktail`` appends its lines to an existing results file). The table also gives
the mean of the posterior medians (``median`` column; records written before it lack it). The
ratio predicted/true uses each estimator's point (``tau_point_us``: the posterior median for
ranktail, the mean for the GEV fits; records written before it: the mean).

    nice -n 10 .venv/bin/python benchmarks/study_estimator.py --replicates 8 --out study.jsonl [--estimators ranktail] [--zscore-cache DIR]
    .venv/bin/python benchmarks/study_estimator.py --table study.jsonl [--plot figure.png]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
NS = (8, 64, 512, 4096)
PARENTS = ("normal", "gumbel", "lognormal", "student-t")


def run(args: argparse.Namespace) -> None:
    import evtsync
    from evtsync.evt.ranktail import RankTailFit
    from evtsync.synth import SynthConfig, synthesize

    spec_y = evtsync.load_spec(ROOT / "models" / "gev.toml")
    spec_z = replace(spec_y, column="z")
    parents = args.parents.split(",")
    estimators = args.estimators.split(",")
    with open(args.out, "a", encoding="utf-8") as out:
        for rep in range(args.first_replicate, args.replicates):
            for parent in parents:
                seed = 1000 * rep + parents.index(parent) if parent in PARENTS else 1000 * rep + 7
                name = f"{parent}_{seed}" + ("" if args.iterations == 40 else f"_{args.iterations}it")
                cached = Path(args.zscore_cache, f"{name}.parquet") if args.zscore_cache else None
                if cached is not None and cached.exists():
                    z = pd.read_parquet(cached)
                    truth, b_ratio = json.loads(str(z["truth"].iloc[0])), float(z["b_ratio"].iloc[0])
                else:
                    with tempfile.TemporaryDirectory() as tmp:
                        res = synthesize(SynthConfig.build(ranks=8, tp=8, iterations=args.iterations, seed=seed,
                                                           parent=parent), tmp)
                        z = evtsync.zscore_table(evtsync.load_traces(res.traces_dir))
                        truth = res.truth["parent"]["true_straggler_delay_sd"]
                    b_ratio = b_scale_ratio(z, res.truth["config"]["cv"])
                    if cached is not None:
                        cached.parent.mkdir(parents=True, exist_ok=True)
                        z.attrs = {}
                        z.assign(b_ratio=b_ratio, truth=json.dumps(truth)).to_parquet(cached)
                for estimator, spec in (("centred", spec_y), ("paper", spec_z), ("ranktail", None)):
                    if estimator not in estimators:
                        continue
                    cpu0, wall0 = time.process_time(), time.perf_counter()
                    fit = RankTailFit.from_table(z, seed=seed) if spec is None else evtsync.fit_table(z, spec, seed=seed)
                    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
                    tau = evtsync.tau_summary(fit, n=list(NS), block_sd_us=1.0, m=4, level=0.9, estimator=estimator)
                    rows = [{"n": int(r.n), "true": truth[str(int(r.n))], "mean": r.tau_mean_us, "lo": r.tau_lo_us,
                             "hi": r.tau_hi_us, "median": r.tau_median_us, "point": r.tau_point_us,
                             "point_estimate": r.point_estimate} for r in tau.itertuples()]
                    attrs = ({"n_obs": int(fit.cells["n_obs"].sum()), "converged": True, "max_rhat": float("nan"),
                              "divergences": 0} if spec is None else
                             {"n_obs": int(fit.attrs["n_obs"]), "converged": bool(fit.attrs["converged"]),
                              "max_rhat": float(fit.attrs["max_rhat"]), "divergences": int(fit.attrs["divergences"])})
                    out.write(json.dumps({"parent": parent, "replicate": rep, "seed": seed, "estimator": estimator,
                                          "b_ratio": b_ratio, "iterations": args.iterations, **attrs,
                                          "cpu_s": round(time.process_time() - cpu0, 2),
                                          "fit_cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                                          "load": os.getloadavg()[0], "rows": rows}) + "\n")
                    out.flush()
                    print(parent, rep, estimator, [round(r["point"] / r["true"], 3) for r in rows], flush=True)


def b_scale_ratio(z: pd.DataFrame, cv: float) -> float:
    """mean r / cv of the job's one cell: the pipeline's b_us over the true sd of a block of mean a."""
    from evtsync.predict.tables import block_scale

    return float(block_scale(z)["mean_r"].iloc[0]) / float(cv)


def _regenerated_b_ratio(parent: str, seed: int, iterations: int) -> float:
    import evtsync
    from evtsync.synth import SynthConfig, synthesize

    with tempfile.TemporaryDirectory() as tmp:
        res = synthesize(SynthConfig.build(ranks=8, tp=8, iterations=iterations, seed=seed, parent=parent), tmp)
        return b_scale_ratio(evtsync.zscore_table(evtsync.load_traces(res.traces_dir)), res.truth["config"]["cv"])


def table(path: str, plot: str | None) -> None:
    from scipy import stats

    records = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    cache: dict[tuple[str, int], float] = {}
    for r in records:
        if "b_ratio" not in r:
            key = (r["parent"], r["seed"])
            if key not in cache:
                cache[key] = _regenerated_b_ratio(r["parent"], r["seed"], r.get("iterations", 40))
            r["b_ratio"] = cache[key]
    flat = pd.DataFrame([{**{k: v for k, v in r.items() if k != "rows"}, **row} for r in records for row in r["rows"]])
    if "median" not in flat:
        flat["median"] = np.nan
    if "point" not in flat:  # records written before the point column: the mean was every estimator's point
        flat["point"] = flat["mean"]
    flat["point"] = flat["point"].fillna(flat["mean"])
    for col in ("mean", "lo", "hi", "median", "point"):  # in µs per (cv·mean a): the pipeline's b_us times E_k
        flat[col] = flat[col] * flat["b_ratio"]
    flat["ratio"] = flat["point"] / flat["true"]
    flat["mean_ratio"] = flat["mean"] / flat["true"]
    flat["median_ratio"] = flat["median"] / flat["true"]
    flat["covers"] = (flat["lo"] <= flat["true"]) & (flat["true"] <= flat["hi"])
    g = flat.groupby(["parent", "estimator", "n"])
    summary = g.agg(fits=("ratio", "size"), ratio=("ratio", "mean"), ratio_sd=("ratio", "std"),
                    ratio_mid=("ratio", "median"),
                    median_ratio=("median_ratio", "mean"), mean_ratio=("mean_ratio", "mean"), covered=("covers", "sum"),
                    converged=("converged", "sum")).reset_index()
    print("| parent | estimator | n | fits | point predicted/true, mean over fits (± se) | its median over fits "
          "| sd between replicates | posterior mean/true | posterior median/true | 90% intervals covering "
          "| 95% binomial range |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in summary.itertuples():
        se = r.ratio_sd / np.sqrt(r.fits) if r.fits > 1 else float("nan")
        lo, hi = stats.binom.ppf([0.025, 0.975], r.fits, 0.9)
        median = "–" if not np.isfinite(r.median_ratio) else f"{r.median_ratio:.3f}"
        print(f"| {r.parent} | {r.estimator} | {r.n} | {r.fits} | {r.ratio:.3f} (± {se:.3f}) | {r.ratio_mid:.3f} "
              f"| {r.ratio_sd:.3f} | "
              f"{r.mean_ratio:.3f} | {median} | {int(r.covered)} of {r.fits} | {int(lo)}–{int(hi)} |")
    fits = flat.drop_duplicates(["parent", "replicate", "estimator"])
    print(f"\n{len(fits)} fits, {int(fits['converged'].sum())} converged, {int(fits['divergences'].sum())} divergences; "
          f"load average {fits['load'].min():.1f}–{fits['load'].max():.1f}")
    for estimator, part in fits.groupby("estimator"):
        print(f"{estimator}: CPU per fit (with its tau(n)) median {part['cpu_s'].median():.2f} s")
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        parents = sorted(summary["parent"].unique())
        fig, axes = plt.subplots(1, len(parents), figsize=(3.2 * len(parents), 3.2), sharey=True)
        for ax, parent in zip(np.atleast_1d(axes), parents, strict=True):
            for estimator, marker, color in (("centred", "o", "C0"), ("paper", "s", "C1"), ("ranktail", "^", "C2")):
                s = summary[(summary["parent"] == parent) & (summary["estimator"] == estimator)]
                if s.empty:
                    continue
                se = s["ratio_sd"] / np.sqrt(s["fits"])
                ax.errorbar(s["n"], s["ratio"], yerr=2 * se, marker=marker, capsize=3, label=estimator, color=color)
            ax.axhline(1, color="grey", lw=0.8)
            ax.axhspan(0.97, 1.03, color="grey", alpha=0.15)
            ax.set(xscale="log", title=parent, xlabel="n ranks")
        np.atleast_1d(axes)[0].set_ylabel("point predicted / true (± 2 se)")
        np.atleast_1d(axes)[0].legend()
        fig.tight_layout()
        fig.savefig(plot, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=8)
    parser.add_argument("--first-replicate", type=int, default=0, help="resume: start at this replicate")
    parser.add_argument("--iterations", type=int, default=80,
                        help="profiled iterations per synthetic job: 80 gives 5,112 rank values per cell, so every n "
                             "of the study (up to 4096) lies within the data; 40 gives 2,560, where n = 4096 is 1.6x "
                             "beyond it (docs/bayesian.md, \"Beyond the data\")")
    parser.add_argument("--parents", default=",".join(PARENTS))
    parser.add_argument("--estimators", default="centred,paper,ranktail",
                        help="comma list of estimators to run (ranktail alone appends to an existing file)")
    parser.add_argument("--out", default="study_estimator.jsonl")
    parser.add_argument("--zscore-cache", metavar="DIR",
                        help="keep each job's z-score table (with its b_ratio and truth) in DIR/PARENT_SEED.parquet "
                             "(PARENT_SEED_Nit.parquet for N iterations other than 40) and reuse it: a rerun of an "
                             "estimator skips synth and reading")
    parser.add_argument("--table", metavar="JSONL", help="summarise a results file instead of running")
    parser.add_argument("--plot", metavar="PNG", help="with --table: the figure")
    args = parser.parse_args()
    if args.table:
        table(args.table, args.plot)
    else:
        run(args)


if __name__ == "__main__":
    main()
