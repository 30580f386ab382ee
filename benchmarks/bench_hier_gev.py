"""Benchmark of the hierarchical Bayesian GEV (issue 9): fit and LOO at 250k z-scores.

Run by hand (it takes minutes and both cores):

    .venv/bin/python benchmarks/bench_hier_gev.py                 # full: 250k fit + LOO + baseline
    .venv/bin/python benchmarks/bench_hier_gev.py --n 3000 --baseline-n 3000 --draws 200 --tune 200  # smoke

Measures, in one session:

1. ``fit``: the main model ``models/gev-hier-gpu-precision.toml`` on N z-scores simulated from
   known parameters in 6 cells (3 GPU models x 2 precisions), 2 chains; wall time from the
   raw table to the finished fit tree (model build with its MLE start, nutpie/numba
   compilation, sampling, diagnostics), R-hat, bulk ESS, divergences, leapfrog steps per draw,
   and whether the 90% intervals contain the truth.
2. ``loo``: PSIS-LOO of that fit (wall time, memory above the fit's own: peak RSS reset before).
3. ``kernel`` (``--kernel``): the fused kernel alone against its scalar predecessor, ns per
   z-score, alternating in one process.
4. ``logp``: one log-density + gradient evaluation at N, compiled with numba, for
   (a) this package's fused per-cell op, (b) this package's elementwise PyTensor GEV as the
   observed distribution, (c) the baseline.
5. ``baseline``: the same hierarchical model written the usual way with pymc-extras'
   ``GenExtreme`` log density (re-implemented here from pymc-extras 0.2's source, because its
   only release pins pymc < 6.4: a switch on ``isclose(xi, 0)`` between the Gumbel and the GEV
   formula, ``pow`` for ``(1 + xi t)^(-1/xi)``), per-row parameters gathered by cell index,
   non-centred deltas, nutpie/numba, started from the same MLE point (PyMC's jittered start
   fails), at ``--baseline-n`` z-scores where it finishes; and this package's model at the
   same size and settings, for the ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
TRUTH6 = pd.DataFrame({
    "gpu": ["H200", "H200", "A100", "A100", "B200", "B200"],
    "precision": ["bf16", "fp32"] * 3,
    "mu": [0.80, 0.75, 0.90, 0.85, 0.70, 0.72],
    "sigma": [0.50, 0.45, 0.55, 0.50, 0.40, 0.42],
    # additive: bf16 0.15 above fp32; A100 = H200; B200 0.2 lower (one cell negative)
    "xi": [0.15, 0.0, 0.15, 0.0, -0.05, -0.20],
})


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def _reset_peak_rss() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _table(n: int, seed: int) -> pd.DataFrame:
    from evtsync.evt.model import simulate_zscore_table

    k = len(TRUTH6)
    counts = [n // k + (1 if i < n % k else 0) for i in range(k)]
    return simulate_zscore_table(TRUTH6, counts, seed=seed)


def _coverage(tree) -> dict[str, int]:
    from evtsync.evt.fit import cell_parameters

    params = cell_parameters(tree)
    hits = {"mu": 0, "sigma": 0, "xi": 0}
    for _, row in TRUTH6.iterrows():
        cell = f"{row['gpu']}|{row['precision']}"
        for name in hits:
            lo, hi = np.quantile(params[name].sel(cell=cell).values, [0.05, 0.95])
            hits[name] += int(lo <= row[name] <= hi)
    return hits


#: The main model as issue 9 left it (mu, sigma per cell with their own priors; half-normal
#: spreads of the deltas; no cell term; support transform off at 250k): the same-run
#: baseline of the fit benchmark.
PREVIOUS_MAIN = """
name = "gev-hier-gpu-precision (issue 9)"
family = "gev"
[data]
groups = ["gpu", "precision"]
[mu]
pooling = "none"
prior = { dist = "normal", mu = 0.0, sigma = 2.0 }
[sigma]
pooling = "none"
prior = { dist = "halfnormal", sigma = 1.0 }
support_transform = false
[xi]
structure = "additive"
prior = { dist = "normal", mu = 0.0, sigma = 0.3 }
factors = ["gpu", "precision"]
group_sd_prior = { dist = "halfnormal", sigma = 0.1 }
parametrization = "auto"
centred_min_obs = 1000
"""


def _spec(previous: bool):
    from evtsync.evt.spec import load_spec, parse_spec

    if previous:
        return parse_spec(PREVIOUS_MAIN, "bench:previous-main")
    return load_spec(ROOT / "models" / "gev-hier-gpu-precision.toml")


def bench_fit(n: int, draws: int, tune: int, seed: int, previous: bool = False) -> tuple[dict, object]:
    from evtsync.evt.fit import fit_table

    table = _table(n, seed)
    spec = _spec(previous)
    start = time.perf_counter()
    tree = fit_table(table, spec, draws=draws, tune=tune, chains=2, seed=seed)
    wall = time.perf_counter() - start
    stats = tree["sample_stats"]
    out = {
        "n": len(table), "draws": draws, "tune": tune, "chains": 2, "wall_s": round(wall, 1),
        "sampling_s": tree.attrs["sampling_seconds"], "converged": bool(tree.attrs["converged"]),
        "max_rhat": round(float(tree.attrs["max_rhat"]), 4), "min_ess_bulk": round(float(tree.attrs["min_ess_bulk"])),
        "convergence": tree.attrs["convergence"],
        "divergences": int(tree.attrs["divergences"]), "steps_per_draw": round(float(stats["n_steps"].mean()), 2),
        "xi_parametrization": tree.attrs["xi_parametrization"],
        "support_transform_cells": tree.attrs.get("sigma_support_transform_cells", ""),
        "timings": json.loads(tree.attrs.get("timings", "{}")),
        "cells_with_truth_in_90pct": _coverage(tree),
        "model": spec.name, "seed": seed, "load_average_after": round(os.getloadavg()[0], 2),
    }
    return out, tree


def bench_loo(tree) -> dict:
    from evtsync.evt.compare import loo

    if "log_likelihood" in tree.children:
        del tree["log_likelihood"]
    before = _rss_kib("VmRSS")
    reset = _reset_peak_rss()
    start = time.perf_counter()
    res = loo(tree)
    wall = time.perf_counter() - start
    peak = _rss_kib("VmHWM")
    counts = res.k_counts()
    return {"wall_s": round(wall, 1), "extra_memory_mib": round((peak - before) / 1024, 1) if reset else None,
            "elpd": round(res.elpd, 1), "se": round(res.se, 1), "p_loo": round(res.p_loo, 1), "pareto_k": counts}


def _baseline_logp(value, mu, sigma, xi):
    """pymc-extras 0.2 ``GenExtreme.logp`` (Coles' sign convention), re-implemented."""
    import pytensor.tensor as pt

    scaled = (value - mu) / sigma
    logp_expression = pt.switch(
        pt.isclose(xi, 0),
        -pt.log(sigma) - scaled - pt.exp(-scaled),
        -pt.log(sigma) - ((xi + 1) / xi) * pt.log1p(xi * scaled) - pt.pow(1 + xi * scaled, -1 / xi),
    )
    return pt.switch(pt.gt(1 + xi * scaled, 0.0), logp_expression, -np.inf)


def build_baseline(table: pd.DataFrame):
    """The main model written the usual way: gathered per-row parameters, non-centred deltas."""
    import pymc as pm

    from evtsync.evt.model import build_model, prepare_data

    spec = _spec(previous=True)
    spec = replace(spec, xi=replace(spec.xi, parametrization="noncentred"))
    data = prepare_data(table, spec)
    ours = build_model(spec, data)  # for its MLE initial point only
    cells = data.cells
    gpu_levels, prec_levels = data.factor_levels["gpu"], data.factor_levels["precision"]
    gpu_of_cell = cells["gpu"].map({g: i for i, g in enumerate(gpu_levels)}).to_numpy()
    prec_of_cell = cells["precision"].map({p: i for i, p in enumerate(prec_levels)}).to_numpy()
    coords = {"cell": data.cell_labels, "gpu": gpu_levels, "precision": prec_levels}
    with pm.Model(coords=coords) as model:
        mu = pm.Normal("mu", 0.0, 2.0, dims="cell")
        sigma = pm.HalfNormal("sigma", 1.0, dims="cell")
        xi0 = pm.Normal("xi0", 0.0, 0.3)
        sd_g = pm.HalfNormal("xi_sd_gpu", 0.1)
        sd_p = pm.HalfNormal("xi_sd_precision", 0.1)
        raw_g = pm.ZeroSumNormal("xi_delta_gpu_raw", 1.0, dims="gpu")
        raw_p = pm.ZeroSumNormal("xi_delta_precision_raw", 1.0, dims="precision")
        xi = pm.Deterministic("xi", xi0 + sd_g * raw_g[gpu_of_cell] + sd_p * raw_p[prec_of_cell], dims="cell")
        idx = data.cell_of_obs
        pm.CustomDist("z", mu[idx], sigma[idx], xi[idx], logp=_baseline_logp, observed=data.z)
        for name, value in ours.initial_point.items():
            model.set_initval(model[name], value)
    return model


def bench_logp(n: int, seed: int, repeats: int = 30) -> dict:
    from pymc.blocking import DictToArrayBijection

    from evtsync.evt.model import build_model, prepare_data

    table = _table(n, seed)
    spec = _spec(previous=True)
    data = prepare_data(table, spec)
    models = {
        "fused_op": build_model(spec, data, logp_impl="fused").model,
        "elementwise_pytensor_gev": build_model(spec, data, logp_impl="elementwise").model,
        "baseline_pymc_extras_style": build_baseline(table),
    }
    out = {}
    for name, model in models.items():
        start = time.perf_counter()
        fn = model.logp_dlogp_function(mode="NUMBA", ravel_inputs=True)
        fn.set_extra_values({})
        point = model.initial_point()
        x = DictToArrayBijection.map({v.name: point[v.name] for v in model.value_vars}).data
        fn(x)
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(repeats):
            fn(x)
        out[name] = {"ms_per_logp_and_grad": round((time.perf_counter() - start) / repeats * 1e3, 2),
                     "compile_s": round(compile_s, 1)}
    return out


#: The fused kernel as it was before issue 16's vectorisation (scalar glibc log1p/exp, an early
#: return and a branch per z-score): the same-run baseline of ``--kernel``.
def _scalar_kernel(z: np.ndarray, mu: float, sigma: float, xi: float) -> tuple[float, float, float, float]:
    inv_s = 1.0 / sigma
    acc_lp = 0.0
    acc_mu = 0.0
    acc_s = 0.0
    acc_xi = 0.0
    for i in range(z.shape[0]):
        t = (z[i] - mu) * inv_s
        zz = xi * t
        s = 1.0 + zz
        if not s > 0.0:
            return -np.inf, 0.0, 0.0, 0.0
        if abs(zz) < 1e-3:
            L = t * (1.0 + zz * (-0.5 + zz * (1.0 / 3.0 + zz * (-0.25 + zz * 0.2))))
            dL_dxi = t * t * (-0.5 + zz * (2.0 / 3.0 + zz * (-0.75 + zz * 0.8)))
        else:
            L = math.log1p(zz) / xi
            dL_dxi = (t / s - L) / xi
        e = math.exp(-L)
        g = e - (1.0 + xi)
        gt = g / s
        acc_lp += -(1.0 + xi) * L - e
        acc_mu += gt
        acc_s += gt * t
        acc_xi += g * dL_dxi - L
    n = z.shape[0]
    return acc_lp - n * math.log(sigma), -acc_mu * inv_s, -acc_s * inv_s - n * inv_s, acc_xi


def bench_kernel(n: int, seed: int, repeats: int = 40, rounds: int = 7) -> dict:
    """CPU ns per z-score of one log density + gradient pass over one cell of ``n`` z-scores:
    the package's kernel against the scalar one, alternating, best of ``rounds`` (CPU time)."""
    import numba

    from evtsync.evt import gev
    from evtsync.evt.distribution import _jit_kernel

    kernels = {"scalar_glibc (baseline)": numba.njit(fastmath=False)(_scalar_kernel), "vectorised (package)": _jit_kernel()}
    out: dict = {}
    for xi in (0.15, 0.0, -0.2):
        z = gev.rvs(0.0, 1.0, xi, rng=np.random.default_rng(seed), size=n)
        point = (0.02, 1.03, xi + 0.01)
        values = {name: np.array(k(z, *point)) for name, k in kernels.items()}
        best = dict.fromkeys(kernels, np.inf)
        for _ in range(rounds):
            for name, k in kernels.items():
                t0 = time.process_time()
                for _ in range(repeats):
                    k(z, *point)
                best[name] = min(best[name], (time.process_time() - t0) / repeats / n * 1e9)
        base, new = values["scalar_glibc (baseline)"], values["vectorised (package)"]
        out[f"xi={xi}"] = {**{f"{name} ns/z": round(v, 2) for name, v in best.items()},
                           "ratio baseline / package": round(best["scalar_glibc (baseline)"] / best["vectorised (package)"], 2),
                           "max relative difference (lp, dmu, dsigma, dxi)": float(np.max(np.abs(new - base) / np.abs(base)))}
    return out


def bench_baseline(n: int, draws: int, tune: int, seed: int) -> dict:
    import nutpie

    from evtsync.evt.fit import check_convergence

    table = _table(n, seed)
    start = time.perf_counter()
    model = build_baseline(table)
    compiled = nutpie.compile_pymc_model(model, backend="numba", jitter_rvs=set())
    tree = nutpie.sample(compiled, draws=draws, tune=tune, chains=2, cores=2, seed=seed, progress_bar=False,
                         save_warmup=False)
    wall = time.perf_counter() - start
    conv = check_convergence(tree)
    return {"n": len(table), "draws": draws, "tune": tune, "wall_s": round(wall, 1),
            "max_rhat": round(conv.max_rhat, 4), "min_ess_bulk": round(conv.min_ess_bulk),
            "divergences": conv.divergences, "steps_per_draw": round(float(tree["sample_stats"]["n_steps"].mean()), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=250_000, help="z-scores of the main fit (default 250000)")
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--tune", type=int, default=1000)
    parser.add_argument("--baseline-n", type=int, default=25_000, help="size for the baseline comparison")
    parser.add_argument("--baseline-draws", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="*", default=None,
                        help="fit once per seed (the 0-divergence check of issue 16), no LOO")
    parser.add_argument("--previous", action="store_true",
                        help="also fit the issue-9 main model at the first seed (same-run baseline, ratio)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["fit", "loo", "logp", "baseline"])
    parser.add_argument("--kernel", action="store_true",
                        help="only the fused kernel against its scalar predecessor (ns per z-score, same run)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    results: dict = {"machine": f"{platform.machine()}, {os.cpu_count()} cores",
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "load_average_at_start": [round(v, 2) for v in os.getloadavg()]}
    if args.kernel:
        results["kernel"] = bench_kernel(args.n, args.seed)
        print("kernel", json.dumps(results["kernel"], indent=1), flush=True)
        args.skip = ["fit", "loo", "logp", "baseline"]
    if args.seeds:
        results["fits"] = []
        for k, seed in enumerate(args.seeds):
            res, tree = bench_fit(args.n, args.draws, args.tune, seed)
            results["fits"].append(res)
            print("fit", json.dumps(res), flush=True)
            del tree
            if k == 0 and args.previous:  # the baseline right after the first fit: same load
                prev, _ = bench_fit(args.n, args.draws, args.tune, seed, previous=True)
                results["previous_main"] = prev
                print("previous_main", json.dumps(prev), flush=True)
                results["ratio_previous_over_new_wall"] = round(prev["wall_s"] / res["wall_s"], 2)
                print("ratio previous / new (wall, same seed)", results["ratio_previous_over_new_wall"], flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=2))
        args.skip = ["fit", "loo", "logp", "baseline"]
    if "fit" not in args.skip:
        results["fit"], tree = bench_fit(args.n, args.draws, args.tune, args.seed)
        print("fit", json.dumps(results["fit"]), flush=True)
        if "loo" not in args.skip:
            results["loo"] = bench_loo(tree)
            print("loo", json.dumps(results["loo"]), flush=True)
        del tree
    if "logp" not in args.skip:
        results["logp"] = bench_logp(args.n, args.seed)
        print("logp", json.dumps(results["logp"]), flush=True)
    if "baseline" not in args.skip:
        b = args.baseline_draws
        results["baseline"] = bench_baseline(args.baseline_n, b, b, args.seed)
        print("baseline", json.dumps(results["baseline"]), flush=True)
        results["ours_at_baseline_n"], _ = bench_fit(args.baseline_n, b, b, args.seed)
        print("ours_at_baseline_n", json.dumps(results["ours_at_baseline_n"]), flush=True)
        results["ratio_baseline_over_ours_wall"] = round(
            results["baseline"]["wall_s"] / results["ours_at_baseline_n"]["wall_s"], 2)
        print("ratio", results["ratio_baseline_over_ours_wall"])
    results["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    print("load average (1, 5, 15 min) at start", results["load_average_at_start"], "at end",
          results["load_average_at_end"])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
