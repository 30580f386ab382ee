"""Do the GEV comparators' chains start on their support wall? (starts54)

The rank model's free-shape chains once started with a cell's largest excess at the GPD's
support end and one stayed stuck there (step size ~1e-12). The GEV fits (evtsync.evt.fit,
``_dispersed_starts`` with no placement) start at the initial point + Uniform(-1, 1) per
coordinate, checked only for a finite log density. This fits ``models/gev.toml`` (its own
sampler settings: 4 chains, nutpie) to block maxima of a bounded-tail parent, simulated as the
physical thing: per collective, K ranks' times from the parent; y = (max - mean of the
collective) / the pooled within-collective sd, the column ``y`` the run fits. It records, per
chain, the start's 1 + xi (y - mu) / sigma at the observation nearest the support's end (the
GEV's wall: 0 there; xi < 0 the largest y, xi > 0 the smallest), the chain's adapted step size,
divergences and mean xi, and the fit's largest R-hat and convergence verdict. One JSON line per fit.

    .venv/bin/python benchmarks/gev_start_wall.py --parent uniform --seeds 0-9 [--n 200] >> out.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

PARENTS = {"uniform": lambda rng, size: rng.uniform(0.0, 1.0, size),  # xi = -1 domain
           "beta22": lambda rng, size: rng.beta(2.0, 2.0, size)}      # xi = -1/2 domain


def block_maxima(parent: str, n: int, ranks: int, seed: int) -> np.ndarray:
    """y per collective: (max over the ranks - their mean) / the pooled within-collective sd."""
    rng = np.random.default_rng(seed)
    t = PARENTS[parent](rng, (n, ranks)) + rng.standard_normal(n)[:, None]  # a shared shift per collective
    dev = t - t.mean(axis=1, keepdims=True)
    sd = float(np.sqrt((dev ** 2).sum() / (n * (ranks - 1))))
    return dev.max(axis=1) / sd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", choices=sorted(PARENTS), default="uniform")
    parser.add_argument("--seeds", default="0-9", help="FIRST-LAST (default 0-9)")
    parser.add_argument("--n", type=int, default=200, help="collectives (block maxima) per fit (default 200)")
    parser.add_argument("--ranks", type=int, default=8, help="ranks per collective (default 8)")
    args = parser.parse_args()
    import pytensor

    from evtsync.evt import fit as evt_fit
    from evtsync.evt.model import build_model, prepare_data
    from evtsync.evt.spec import load_spec

    spec = load_spec(Path(__file__).resolve().parents[1] / "models" / "gev.toml")
    base = evt_fit.resolve_sampler_config(spec)
    original = evt_fit._dispersed_starts
    first, last = (int(v) for v in args.seeds.split("-"))
    for seed in range(first, last + 1):
        y = block_maxima(args.parent, args.n, args.ranks, seed)
        built = build_model(spec, prepare_data(pd.DataFrame({"y": y}), spec))
        model, z = built.model, built.data.z_model  # the model's own scale (standardised data: not y's)
        _, to_point = evt_fit._point_splitter(model)
        fn = pytensor.function(model.value_vars, model.replace_rvs_by_values([model["mu"], model["sigma"], model["xi"]]),
                               mode="FAST_COMPILE", on_unused_input="ignore")
        starts: list[np.ndarray] = []

        def recording(compiled, built_, place=None, _starts=starts):
            inner = original(compiled, built_, place).initial_point_func

            def start(s=None):
                x = inner(s)
                _starts.append(x)
                return x

            return dataclasses.replace(compiled, initial_point_func=start)

        evt_fit._dispersed_starts = recording
        try:
            began = time.process_time()
            ta = evt_fit.resolve_target_accept(base.target_accept, y.size)
            config = base.override(adaptation=evt_fit.resolve_adaptation(base.adaptation, y.size))
            tree = evt_fit._sample_nutpie(built, config, seed, False, ta)
        finally:
            evt_fit._dispersed_starts = original
        gaps, start_xi = [], []
        for x in starts:
            point = to_point(x)
            mu, sigma, xi = (float(np.ravel(v)[0]) for v in fn(*(point[v.name] for v in model.value_vars)))
            end = z.max() if xi < 0 else z.min()
            gaps.append(round(1 + xi * (end - mu) / sigma, 4))
            start_xi.append(round(xi, 3))
        stats = tree["sample_stats"]
        post = tree["posterior"]
        convergence = evt_fit.check_convergence(tree)
        print(json.dumps({
            "parent": args.parent, "n": args.n, "seed": seed, "support_transform": bool(built.support_transform),
            "start_xi": start_xi, "start_wall_gap": gaps,
            "step_size": np.round(stats["step_size"].mean("draw").values, 5).tolist(),
            "divergences": stats["diverging"].sum("draw").values.astype(int).tolist(),
            "chain_mean_xi": np.round(post["xi"].mean("draw").values.ravel(), 3).tolist(),
            "max_rhat": round(float(convergence.max_rhat), 4), "converged": bool(convergence.converged),
            "cpu_s": round(time.process_time() - began, 1)}), flush=True)


if __name__ == "__main__":
    main()
