"""Cost of the ranktail estimator of tau(n) (issue 29) against the centred one, on a run folder.

Run by hand (not a test), on a run folder written by ``evtsync run`` (the demo: ``evtsync run
--out /tmp/demo -q``, about 4-6 minutes on 2 shared cores)::

    .venv/bin/python benchmarks/bench_ranktail.py /tmp/demo [--repeat 3] [--json]

In this one process, on the run's ``tables/zscores.parquet`` and its main Bayesian fit, each step
``--repeat`` times (median of the CPU seconds, ``time.process_time``: user + system of every thread
of the process; wall beside it):

- ``fit``: :meth:`evtsync.evt.ranktail.RankTailFit.from_table` (every GPU × precision cell: the
  rank values, the threshold-stability test and the GPD grid posterior), also per cell;
- ``expected_max``: E[max_n u] draws of every cell at the run's domain sizes (m … 4096), one
  uncached call on a fresh fit (the quadrature), also per cell × n;
- ``tau ranktail``: :func:`evtsync.predict.tables.tau_table` of a fresh fit (fit excluded; its
  expected maxima computed inside), the table the prediction stage writes;
- ``tau centred``: the same table from the main GEV fit's posterior (already read), the
  baseline in the same run; the ratio ranktail / centred is printed.

Also printed: the load average before and after, and the prediction and predicted-vs-measured
stages' ``cpu_seconds`` from the run's manifest (the stage as the run measured it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE))


def _timed(step: Callable[[], Any], repeat: int) -> dict[str, float]:
    """Median CPU and wall seconds of ``repeat`` calls of ``step``."""
    cpu, wall = [], []
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        step()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return {"cpu_s": statistics.median(cpu), "wall_s": statistics.median(wall), "cpu_all": cpu}


def measure(run_dir: Path, repeat: int) -> dict[str, Any]:
    """The steps of the module docstring on ``run_dir``."""
    from evtsync.core.defaults import DEFAULT_SEED, INTERVAL_LEVEL
    from evtsync.core.tableio import read_table
    from evtsync.evt.bayesfit import BayesFit, fit_path, load_fit
    from evtsync.evt.ranktail import RankTailFit
    from evtsync.predict import tables as predict
    from evtsync.runfolder.layout import fitted_models, main_model, read_manifest

    manifest = read_manifest(run_dir)
    m = int(manifest.get("options", {}).get("m", 4))
    z = read_table(run_dir / "tables" / "zscores.parquet")
    scales = predict.block_scale(z)
    ns = predict.domain_sizes(m, 4096).tolist()
    main = main_model(run_dir, manifest)
    if main is None:
        raise SystemExit(f"{run_dir}: no fitted Bayesian model (the centred baseline needs one)")
    path = fitted_models(run_dir, manifest)[main]
    gev = BayesFit(load_fit(path), fit_path(path))

    def fit() -> Any:
        return RankTailFit.from_table(z, seed=DEFAULT_SEED, source="tables/zscores.parquet")

    cells = len(fit().cells)
    out: dict[str, Any] = {"run": str(run_dir), "main_model": main, "cells": cells, "ns": ns,
                           "z_rows": len(z), "repeat": repeat, "machine": platform.node(),
                           "cpus": os.cpu_count(), "load_before": os.getloadavg()}
    out["fit"] = _timed(fit, repeat)
    fits = [fit() for _ in range(repeat)]  # fresh fits: expected_max is not cached on a plain fit
    out["expected_max"] = _timed(lambda: fits.pop().expected_max(ns), repeat)
    fits = [fit() for _ in range(repeat)]
    out["tau_ranktail"] = _timed(lambda: predict.tau_table(fits.pop(), ns, scales, m, INTERVAL_LEVEL,
                                                          estimator="ranktail"), repeat)
    out["tau_centred"] = _timed(lambda: predict.tau_table(gev, ns, scales, m, INTERVAL_LEVEL), repeat)
    out["load_after"] = os.getloadavg()
    stages = manifest.get("stages", {})
    out["manifest_cpu_seconds"] = {name: stages.get(name, {}).get("cpu_seconds")
                                   for name in ("prediction", "predicted-vs-measured")}
    out["manifest_seconds"] = {name: stages.get(name, {}).get("seconds")
                               for name in ("prediction", "predicted-vs-measured")}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="run folder written by `evtsync run`")
    parser.add_argument("--repeat", type=int, default=3, help="calls per step (median; default 3)")
    parser.add_argument("--json", action="store_true", help="print the measurements as JSON")
    args = parser.parse_args(argv)
    r = measure(args.run, args.repeat)
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    cells, k = r["cells"], len(r["ns"])
    print(f"{r['run']}: {r['z_rows']} z-score rows, {cells} cells, n = {r['ns'][0]} … {r['ns'][-1]} ({k} sizes); "
          f"main model {r['main_model']}; load {r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}")
    for step in ("fit", "expected_max", "tau_ranktail", "tau_centred"):
        t = r[step]
        print(f"  {step:13s} CPU {t['cpu_s']:7.3f} s (runs {', '.join(f'{v:.3f}' for v in t['cpu_all'])}), "
              f"wall {t['wall_s']:.3f} s")
    print(f"  per cell: fit {r['fit']['cpu_s'] / cells:.3f} s; expected max per cell × n "
          f"{r['expected_max']['cpu_s'] / (cells * k) * 1000:.1f} ms")
    print(f"  tau table ranktail / centred (CPU): {r['tau_ranktail']['cpu_s'] / r['tau_centred']['cpu_s']:.2f}; "
          f"with the fit: {(r['fit']['cpu_s'] + r['tau_ranktail']['cpu_s']) / r['tau_centred']['cpu_s']:.2f}")
    print(f"  manifest CPU s: {r['manifest_cpu_seconds']} (wall {r['manifest_seconds']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
