"""CPU of the rank model's fit (evtsync.evt.rankmodel, issue 45) against today's hierarchical GEV fit.

Run by hand (minutes; each fit in a fresh subprocess, so each pays its own first compilation, as a
run's fit stage does):

    .venv/bin/evtsync run --demo /tmp/demo-run                      # once: the demo's z-scores
    .venv/bin/python benchmarks/bench_rankmodel.py --run /tmp/demo-run --blocks 250000

Measures, per data set, the process CPU time (``time.process_time``: every thread of the process,
nutpie's chains included) and the wall time of

1. ``gev``: ``models/gev-hier-gpu-precision.toml`` fitted to the z-score table's column y (the
   run's main model, ``evtsync.evt.bayesfit.BayesFit.fit``, seed 0, its default settings);
2. ``rankmodel``: :func:`evtsync.evt.rankmodel.fit_rank_model` on the same table's per-rank
   values (``rank_table_from_zscores``), seed 0, its default settings, xi free and then xi ≡ 0 (the
   run's ``rankmodel`` stage fits both: its estimator, and the Gumbel-domain fit of the LOO and the
   verdict); ``cpu_s`` is both together, ``cpu_free_s`` and ``cpu_gumbel_s`` each;

on (a) the demo's z-score table (``--run``: a finished ``evtsync run`` folder; with its
``tables/truth_delay.parquet`` the rank model's tau(n)/b is printed beside the truth), and
(b) ``--blocks`` simulated samples of m = 4 ranks (collectives of 8 ranks, 6 cells of
GPU × precision, normal and Gumbel ranks with a shared shock), the GEV on their centred maxima y.
Prints one JSON line per measurement and the ratio rankmodel/gev.

``--stage RUN --baseline-src DIR`` (issue 48): the rank model's fits of a run, as the run makes them, with
this checkout's code and with the code in DIR (``git -C /work/main archive main | tar -x -C DIR``),
interleaved ``--rounds`` times: per code, a "stage" process (the ``rankmodel`` stage's fits of xi free and
xi = 0 on the run's z-scores, their files and tables) and then a "holdout" process (predicted-vs-measured's
refit on the earlier half), both on one evtsync cache folder: ``cold`` a fresh, empty one (the cold demo),
then ``warm`` the same folder again. PyTensor's own compile folder is not emptied (as in
``bench_demo_cpu.py --cold``). Per process: CPU of the fits (``cpu_fits_s``) and of the whole process
(``cpu_process_s``: getrusage of the child, imports included), each fit's convergence line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def simulated(blocks: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(long rank table, z-score-like table with y) of ``blocks`` samples of 4 ranks, in 6 cells."""
    rng = np.random.default_rng(seed)
    cells = [(g, p) for g in ("A100", "H100", "H200") for p in ("bf16", "fp32")]
    per_cell = blocks // len(cells)
    iters = per_cell // 2  # two samples of 4 per collective of 8 ranks
    longs, ys = [], []
    for k, (gpu, precision) in enumerate(cells):
        e = rng.standard_normal((iters, 8)) if k % 2 == 0 else rng.gumbel(size=(iters, 8)) / 1.2825
        x = e + rng.standard_normal(iters)[:, None]  # a shared shock
        coll = np.repeat(np.arange(iters), 8).astype(str)
        longs.append(pd.DataFrame({"value": x.ravel(), "collective": coll, "series": "b",
                                   "rank": np.tile(np.arange(8), iters).astype(str),
                                   "gpu": gpu, "precision": precision, "order": np.repeat(np.arange(iters), 8)}))
        samples = x.reshape(iters * 2, 4)
        ys.append(pd.DataFrame({"y": (samples.max(axis=1) - x.mean()) / x.std(), "gpu": gpu, "precision": precision}))
    return pd.concat(longs, ignore_index=True), pd.concat(ys, ignore_index=True)


def one(kind: str, path: str, long_path: str | None) -> dict:
    """Fit one model in this process and report its CPU and wall time."""
    table = pd.read_parquet(path)
    c0, w0 = time.process_time(), time.perf_counter()
    if kind == "gev":
        from evtsync.evt.bayesfit import BayesFit

        fit = BayesFit.fit(table, "gev-hier-gpu-precision", seed=0)
        note, n = fit.convergence_note, len(table)
    else:
        from evtsync.evt.rankmodel import fit_rank_model, rank_table_from_zscores

        long = pd.read_parquet(long_path) if long_path else rank_table_from_zscores(table)
        fit = fit_rank_model(long, seed=0)
        c1 = time.process_time()
        gumbel = fit_rank_model(long, seed=0, free_shape=False)  # the run's stage fits both (LOO, the verdict)
        note, n = f"{fit.convergence_note}; xi = 0: {gumbel.convergence_note}", len(long)
        return {"kind": kind, "cpu_s": round(time.process_time() - c0, 2), "cpu_free_s": round(c1 - c0, 2),
                "cpu_gumbel_s": round(time.process_time() - c1, 2), "wall_s": round(time.perf_counter() - w0, 2),
                "n": n, "convergence": note}
    return {"kind": kind, "cpu_s": round(time.process_time() - c0, 2), "wall_s": round(time.perf_counter() - w0, 2),
            "n": n, "convergence": note}


def measure(kind: str, path: Path, long_path: Path | None = None) -> dict:
    """:func:`one` in a fresh subprocess (its own first compilation, as a run's fit stage)."""
    cmd = [sys.executable, __file__, "--one", kind, str(path)] + ([str(long_path)] if long_path else [])
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def stage_one(part: str, path: str, out: str) -> dict:
    """In this process: the rankmodel stage's work (``part`` "stage") or the out-of-sample refit ("holdout")."""
    from evtsync.evt.rankmodel import fit_table

    z = pd.read_parquet(path)
    c0 = time.process_time()
    if part == "holdout":
        early = z[z["index"] < z.groupby("workload")["index"].transform("median")]
        fits = [fit_table(early, seed=0, source="earlier half", refused={})]
    else:
        from evtsync.pipeline import rankmodel as tables
        from evtsync.predict.tables import block_scale

        fits = [fit_table(z, seed=0, source="zscores", refused={}),
                fit_table(z, seed=0, source="zscores", refused={}, free_shape=False)]
        fits[0].save(Path(out) / "rankmodel.nc")
        fits[1].save(Path(out) / "rankmodel-gumbel.nc")
        scales = block_scale(z)
        tables.rank_effects_table(fits[0], scales)
        tables.rank_variance_table(fits[0])
        tables.rank_xi_table(fits[0])
        tables.rank_loo_table(fits[0], fits[1])
    return {"part": part, "cpu_fits_s": round(time.process_time() - c0, 2),
            "convergence": [f.convergence_note for f in fits]}


def stage_rounds(run: Path, baseline: Path, rounds: int, workdir: Path) -> None:
    """:func:`stage_one` for both codes, cold then warm, interleaved (module docstring)."""
    z = run / "tables" / "zscores.parquet"
    for r in range(rounds):
        for label, src in (("baseline", baseline), ("this", ROOT)):
            cache = workdir / f"cache-{label}-{r}"
            shutil.rmtree(cache, ignore_errors=True)
            for state in ("cold", "warm"):
                for part in ("stage", "holdout"):
                    out = workdir / f"out-{label}-{r}-{state}-{part}"
                    out.mkdir(parents=True, exist_ok=True)
                    env = {**os.environ, "PYTHONWARNINGS": "ignore", "EVTSYNC_CACHE_DIR": str(cache),
                           "PYTHONPATH": str(src)}
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    w0 = time.perf_counter()
                    proc = subprocess.run([sys.executable, "-P", str(Path(__file__).resolve()), "--stage-one", part,
                                           str(z), str(out)], capture_output=True, text=True, env=env, cwd=str(src))
                    if proc.returncode:
                        raise SystemExit(f"{label} {part} failed:\n{proc.stderr[-3000:]}")
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    row = json.loads(proc.stdout.strip().splitlines()[-1])
                    row.update({"code": label, "round": r, "cache": state, "wall_s": round(time.perf_counter() - w0, 2),
                                "cpu_process_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
                                "load": os.getloadavg()[0]})
                    print(json.dumps(row), flush=True)


def truth_check(run: Path) -> None:
    """The rank model's tau(n)/b on the demo beside the truth (tables/truth_delay.parquet)."""
    from evtsync.evt.rankmodel import fit_rank_model, rank_table_from_zscores

    truth_path = run / "tables" / "truth_delay.parquet"
    if not truth_path.is_file():
        return
    table = pd.read_parquet(run / "tables" / "zscores.parquet")
    fit = fit_rank_model(rank_table_from_zscores(table), seed=0)
    truth = pd.read_parquet(truth_path).drop_duplicates(["gpu", "precision", "n"])
    for (gpu, precision), rows in truth.groupby(["gpu", "precision"]):
        ns = rows["n"].astype(int).tolist()
        draws = fit.tau_draws(ns, f"{gpu}|{precision}")
        for j, row in enumerate(rows.itertuples()):
            lo, mid, hi = np.quantile(draws[:, j], [0.05, 0.5, 0.95])
            print(json.dumps({"cell": f"{gpu}|{precision}", "parent": row.parent, "n": int(row.n),
                              "true_sd": round(row.true_delay_sd, 4), "rankmodel_median_sd": round(mid, 4),
                              "ratio": round(mid / row.true_delay_sd, 4), "covers_90": bool(lo <= row.true_delay_sd <= hi)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a finished `evtsync run --demo` folder")
    parser.add_argument("--blocks", type=int, default=0, help="simulated samples of 4 ranks (0: none)")
    parser.add_argument("--stage", type=Path, help="a finished demo run folder: the rank model's fits of a run, "
                        "cold and warm, this checkout against --baseline-src, interleaved")
    parser.add_argument("--baseline-src", type=Path, help="the baseline's source folder (with --stage)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (with --stage)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "evtsync-bench-rankmodel")
    parser.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--stage-one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage_one:
        print(json.dumps(stage_one(*args.stage_one)))
        return
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], args.one[2] if len(args.one) > 2 else None)))
        return
    print(json.dumps({"machine": platform.node(), "cpus": os.cpu_count(), "load": os.getloadavg(),
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}))
    if args.stage:
        if args.baseline_src is None:
            parser.error("--stage needs --baseline-src")
        stage_rounds(args.stage, args.baseline_src.resolve(), args.rounds, args.workdir)
    if args.run:
        z = args.run / "tables" / "zscores.parquet"
        gev, rank = measure("gev", z), measure("rankmodel", z)
        print(json.dumps({"data": "demo", "gev": gev, "rankmodel": rank, "ratio_cpu": round(rank["cpu_s"] / gev["cpu_s"], 3)}))
        truth_check(args.run)
    if args.blocks:
        with tempfile.TemporaryDirectory() as tmp:
            long, ys = simulated(args.blocks)
            long_path, y_path = Path(tmp) / "long.parquet", Path(tmp) / "y.parquet"
            long.to_parquet(long_path)
            ys.to_parquet(y_path)
            gev, rank = measure("gev", y_path), measure("rankmodel", y_path, long_path)
            print(json.dumps({"data": f"{args.blocks} simulated blocks", "gev": gev, "rankmodel": rank,
                              "ratio_cpu": round(rank["cpu_s"] / gev["cpu_s"], 3)}))
    print(json.dumps({"load_after": os.getloadavg()}))


if __name__ == "__main__":
    main()
