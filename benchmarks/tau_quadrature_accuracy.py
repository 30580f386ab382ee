"""The rank model's tau-draw quadrature: accuracy against a high-resolution reference, and cost (issue 48).

Run by hand (not a test)::

    git -C /work/main archive main | tar -x -C /tmp/base          # the integrator to compare with
    .venv/bin/python benchmarks/tau_quadrature_accuracy.py --fit RUN/fits/rankmodel.nc --baseline-src /tmp/base

Each configuration computes, in a fresh subprocess (``PYTHONPATH`` its checkout), the draws of D(n) of
every measured cell of the fit (fleet "new", then "these-plus-typical"), and the population-level
prediction of an unseen GPU with the fit's first precision (when the fit has several GPUs and
precisions), at n = 2, 3, 4, 8, …, 4096, ``--draws`` draws, with the quadrature's node counts
(``_BODY_POINTS``, ``_W_POINTS``) set as asked; the draws use the same random numbers in every
configuration, so they compare draw by draw. The reference is the baseline checkout's integrator with
10× the body nodes and 10× the tail nodes (``--ref-body``, ``--ref-w``). Printed per configuration:
process CPU of the draws, and against the reference the largest relative error of a single draw and
of each cell's median and 5%/95% quantiles, over cells and n.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent.parent
NS = [2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]

WORKER = r"""
import json, sys, time
import numpy as np
import evtsync.evt.rankmodel as rm
print(rm.__file__, file=sys.stderr)
fit_path, out, body, w, draws = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[6])
rm._BODY_POINTS, rm._W_POINTS = body, w
fit = rm.load_rank_model(fit_path)
ns = json.loads(sys.argv[5])
cells = list(fit.cells["cell"])
res = {}
t0 = time.process_time()
for i, cell in enumerate(cells):
    for fleet in ("new", "these-plus-typical"):
        res[f"{cell}/{fleet}"] = fit.tau_draws(ns, cell, fleet=fleet, draws=draws, seed=i)
gpus = sorted(set(fit.cells["gpu"]))
precs = sorted(set(fit.cells["precision"]))
if len(gpus) > 1 and len(precs) > 1:
    res["unseen/new"] = fit.tau_draws(ns, gpu="unseen-gpu", precision=precs[0], draws=draws, seed=99)
cpu = time.process_time() - t0
np.savez(out, **{k.replace("|", "__"): v for k, v in res.items()})
print(json.dumps({"cpu_s": cpu}))
"""


def compute(src: Path, fit: Path, body: int, w: int, out: Path, draws: int) -> float:
    """The draws of one configuration (``src``'s code, ``body``/``w`` nodes) into ``out``; its CPU seconds."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    # run in the checkout: ``python -c`` puts the working folder first on sys.path
    done = subprocess.run([sys.executable, "-c", WORKER, str(fit.resolve()), str(out), str(body), str(w), json.dumps(NS),
                           str(draws)], env=env, cwd=src, check=True, capture_output=True, text=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["cpu_s"])


def errors(draws: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> dict[str, float]:
    """Largest relative error against ``ref``: of a single draw, and of the median and the 5%/95% quantiles."""
    single = median = ends = 0.0
    for key, r in ref.items():
        a = draws[key]
        ok = np.isfinite(r) & (np.abs(r) > 0)
        if np.isnan(r).any():  # main's these-plus-typical beyond 24 ranks: NaN (fixed on draws48)
            print(f"{key}: the reference is not finite; left out of the comparison", file=sys.stderr)
            continue
        single = max(single, float(np.max(np.abs(a[ok] - r[ok]) / np.abs(r[ok]))))
        for q, acc in ((0.5, "median"), (0.05, "ends"), (0.95, "ends")):
            qa, qr = np.quantile(a, q, axis=0), np.quantile(r, q, axis=0)
            e = float(np.max(np.abs(qa - qr) / np.abs(qr)))
            if acc == "median":
                median = max(median, e)
            else:
                ends = max(ends, e)
    return {"max_rel_draw": single, "max_rel_median": median, "max_rel_q05_q95": ends}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", type=Path, required=True, help="a rank-model fit (a run folder's fits/rankmodel.nc)")
    ap.add_argument("--baseline-src", type=Path, required=True, help="a checkout of the integrator to compare with")
    ap.add_argument("--draws", type=int, default=1000, help="draws per cell (the run's: 1000)")
    ap.add_argument("--ref-body", type=int, default=30000)
    ap.add_argument("--ref-w", type=int, default=8001)
    ap.add_argument("--ref-file", type=Path, help="keep the reference's draws here (.npz; reused when it exists)")
    ap.add_argument("--config", action="append", default=[], metavar="BODY,W",
                    help="this checkout's node counts to measure (repeatable; default: its own)")
    ap.add_argument("--out", type=Path, help="also write the results as JSON lines here")
    args = ap.parse_args()
    import evtsync.evt.rankmodel as rm

    configs = [tuple(int(v) for v in c.split(",")) for c in args.config] or [(rm._BODY_POINTS, rm._W_POINTS)]
    with tempfile.TemporaryDirectory() as tmp:
        ref_file = args.ref_file or Path(tmp) / "ref.npz"
        ref_cpu = (compute(args.baseline_src, args.fit, args.ref_body, args.ref_w, ref_file, args.draws)
                   if not ref_file.is_file() else float("nan"))
        ref = dict(np.load(ref_file))
        runs = [("baseline", args.baseline_src, 3000, 801)] + [("this", HERE, b, w) for b, w in configs]
        rows = [{"code": "baseline (reference)", "body": args.ref_body, "w": args.ref_w, "cpu_s": ref_cpu}]
        for i, (label, src, body, w) in enumerate(runs):
            f = Path(tmp) / f"run{i}.npz"
            cpu = compute(src, args.fit, body, w, f, args.draws)
            rows.append({"code": label, "body": body, "w": w, "cpu_s": cpu, **errors(dict(np.load(f)), ref)})
    for row in rows:
        print(json.dumps(row))
    if args.out:
        with args.out.open("a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
