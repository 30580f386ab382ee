"""Where the rank model's chains start (starts54): the distribution of the start policy's points.

Builds the free-shape rank model of a finished ``evtsync run`` of the demo (its
``tables/zscores.parquet``; ``--half early``: the rows before each workload's median collective
index, the run's out-of-sample check) exactly as :func:`evtsync.evt.rankmodel.fit_rank_model` does,
asks the fit's own start policy (:func:`evtsync.evt.rankmodel._chain_starts`, PyMC's log density
as the finiteness check) for one start per seed, and prints one JSON line: the quantiles of the
starts' xi0 and of the cells' xi, the share of starts with xi0 below the initial point (by 0, 0.25,
0.5), the quantiles of each start's smallest 1 + xi_c y_max,c / sigma_c over the cells (xi and sigma
the model's own deterministics, y_max counted from the excesses), and how many starts fell back to
the initial point. No sampling: ~1 ms a start.

    .venv/bin/python benchmarks/rankmodel_chain_starts.py RUN_DIR --starts 400 [--half early] >> out.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd


@dataclasses.dataclass
class _Compiled:
    initial_point_func: Callable


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished `evtsync run` folder of the demo")
    parser.add_argument("--starts", type=int, default=400, help="seeds 0 .. STARTS-1 (default 400)")
    parser.add_argument("--half", choices=("all", "early"), default="all", help="all rows, or the earlier half")
    args = parser.parse_args()
    import pytensor

    from evtsync.evt import rankmodel
    from evtsync.evt.fit import _point_splitter

    z = pd.read_parquet(args.run / "tables" / "zscores.parquet")
    if args.half == "early":
        z = z[z["index"] < z.groupby("workload")["index"].transform("median")]
    long = rankmodel.rank_table_from_zscores(z, "zscores")
    model, _cells, exc, _thresholds, _ks = rankmodel._prepare_model(long, free_shape=True)
    flat, to_point = _point_splitter(model)
    fn = pytensor.function(model.value_vars, model.replace_rvs_by_values([model["xi"], model["sigma"]]),
                           mode="FAST_COMPILE", on_unused_input="ignore")
    y_max = np.array([e.max() for e in exc])
    start = rankmodel._chain_starts(_Compiled(lambda seed=None: None), model).initial_point_func
    xi0, xi_cells, gaps, fallback = [], [], [], 0
    for seed in range(args.starts):
        x = start(seed)
        fallback += bool(np.array_equal(x, flat))
        point = to_point(x)
        xi, sigma = fn(*(point[v.name] for v in model.value_vars))
        xi0.append(float(point["xi0"]))
        xi_cells.append(np.asarray(xi))
        gaps.append(float(np.min(1 + xi * y_max / sigma)))
    xi0_a, cells_a, gaps_a = np.array(xi0), np.concatenate(xi_cells), np.array(gaps)
    q = (0, 0.05, 0.25, 0.5, 0.75, 0.95, 1)

    def quantiles(a: np.ndarray) -> dict[str, float]:
        return dict(zip(map(str, q), np.round(np.quantile(a, q), 3).tolist(), strict=True))

    init = float(to_point(flat)["xi0"])
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    print(json.dumps({
        "commit": commit, "half": args.half, "starts": args.starts, "cells": int(y_max.size),
        "xi0_initial": init, "xi0_quantiles": quantiles(xi0_a),
        "xi0_below_initial": {str(d): float(np.mean(xi0_a < init - d)) for d in (0, 0.25, 0.5)},
        "xi0_above_initial": {str(d): float(np.mean(xi0_a > init + d)) for d in (0, 0.25, 0.5)},
        "cell_xi_quantiles": quantiles(cells_a),
        "min_wall_gap_quantiles": quantiles(gaps_a),
        "at_initial_point": fallback}), flush=True)


if __name__ == "__main__":
    main()
