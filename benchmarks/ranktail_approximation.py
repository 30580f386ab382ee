"""The ranktail estimator's approximation bias with unlimited data: what the tail model alone costs (issue 29).

The per-rank tail estimator (:mod:`evtsync.evt.ranktail`) keeps the empirical distribution below a
threshold t, the (1 − s) quantile, and a generalized Pareto tail (GPD) above it. With unlimited data
the GPD's parameters converge to the best GPD for the parent's tail above t (the one minimising the
Kullback–Leibler divergence, i.e. the maximum of the expected log-likelihood), which is not the
tail itself unless the parent's tail is exactly a GPD: for Student-t₅ the shape above the 96.5%
quantile is 0.14, below its limit 0.2 (the penultimate approximation). This script computes that
best GPD for each of the study's parents (:data:`ranktail_bias.PARENTS`) and tail share s, from
the parent's exact quantile function (``scipy.stats``; 20,000 tail quantiles, Nelder–Mead), and the
mean straggler delay it implies, (E[max_n X̂] − E X)/(E[max_n X] − E X) with X̂ = the parent below t
and the GPD above; E[max_n X] = ∫_0^1 Q(v^(1/n)) dv by the midpoint rule (as
:func:`ranktail_bias.true_delay`). No sampling, no prior, no estimator code: the ratio is the bias
the model would keep with infinitely many rank values at that share.

``--quadratic N`` also fits the second-order alternative measured for issue 29: a tail whose local
shape drifts linearly with the level up to the top of N values' data, x'(w) = sigma·exp(xi·w +
eta·D(w)), w = −log of the survival within the tail, D(w) = w²/2 up to w_c = log(s·N) and linear
beyond (the drift frozen at the data's top); unlimited data identify eta, ~90 exceedances do not
(docs/methodology.md, "The per-rank tail estimator").

    .venv/bin/python benchmarks/ranktail_approximation.py --shares 0.1,0.05,0.035,0.02,0.01,0.005 \
        --quadratic 2560 --out benchmarks/results/ranktail_approximation.jsonl
    .venv/bin/python benchmarks/ranktail_approximation.py --table benchmarks/results/ranktail_approximation.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ranktail_bias as rb  # noqa: E402 - the sibling script's parents

NS = (8, 64, 512, 4096, 32768)
#: Midpoints of [0, 1] for E[max_n X] = ∫ Q(v^(1/n)) dv.
_V = (np.arange(200_000) + 0.5) / 200_000
#: Quantiles of the tail above t at which the expected log-likelihood is evaluated.
_TAIL = (np.arange(20_000) + 0.5) / 20_000
#: The w grid of the second-order tail's quantile function (w = −log survival within the tail).
_W = np.linspace(0.0, 60.0, 6001)


def _drift(w: np.ndarray, cap: float) -> np.ndarray:
    """D(w): w²/2 up to ``cap``, then linear with slope ``cap`` (the local shape frozen there)."""
    wc = np.minimum(w, cap)
    return wc ** 2 / 2 + cap * (w - wc)


def _spacing(xi: float, eta: float, cap: float) -> np.ndarray:
    """The second-order tail's standard quantile function h(w) = ∫_0^w exp(xi·v + eta·D(v)) dv on :data:`_W`."""
    g = np.exp(np.clip(xi * _W + eta * _drift(_W, cap), -60.0, 60.0))
    return np.concatenate([[0.0], np.cumsum(0.5 * (g[1:] + g[:-1]) * np.diff(_W))])


def best_tail(parent: str, share: float, quadratic_values: int | None = None) -> dict:
    """The best GPD (or second-order tail, ``quadratic_values`` = N) for the parent above its (1 − share)
    quantile, and the ratio of the mean straggler delay it implies to the truth at each n of :data:`NS`."""
    from scipy import optimize

    d = rb._parent(parent)
    t = float(d.ppf(1 - share))
    exc = d.isf(share * (1 - _TAIL)) - t
    cap = float(np.log(share * quadratic_values)) if quadratic_values else 0.0

    def gpd_nll(p: np.ndarray) -> float:
        log_sigma, xi = p
        z = 1 + xi * exc / np.exp(log_sigma)
        if np.any(z <= 0) or abs(xi) < 1e-9:
            return 1e9
        return float(np.mean(log_sigma + (1 + 1 / xi) * np.log(z)))

    def second_order_nll(p: np.ndarray) -> float:
        log_sigma, xi, eta = p
        h = _spacing(xi, eta, cap)
        y = exc / np.exp(log_sigma)
        if y.max() >= h[-1]:
            return 1e9
        w = np.interp(y, h, _W)
        return float(np.mean(w + log_sigma + xi * w + eta * _drift(w, cap)))

    start = [float(np.log(exc.mean())), 0.05]
    if quadratic_values:
        fit = optimize.minimize(second_order_nll, [*start, 0.0], method="Nelder-Mead",
                                options={"xatol": 1e-7, "fatol": 1e-11, "maxiter": 4000})
        log_sigma, xi, eta = (float(v) for v in fit.x)
        h = _spacing(xi, eta, cap)

        def tail_quantile(p: np.ndarray) -> np.ndarray:
            return t + np.exp(log_sigma) * np.interp(-np.log(p), _W, h)
    else:
        fit = optimize.minimize(gpd_nll, start, method="Nelder-Mead",
                                options={"xatol": 1e-8, "fatol": 1e-12, "maxiter": 5000})
        (log_sigma, xi), eta = (float(v) for v in fit.x), float("nan")

        def tail_quantile(p: np.ndarray) -> np.ndarray:
            return t + np.exp(log_sigma) * (p ** (-xi) - 1) / xi

    def model_quantile(q: np.ndarray) -> np.ndarray:
        out = d.ppf(np.minimum(q, 1 - share))
        above = q > 1 - share
        out[above] = tail_quantile((1 - q[above]) / share)
        return out

    mean = float(d.mean())

    def ratio(n: int) -> float:
        return float((model_quantile(_V ** (1.0 / n)).mean() - mean) / (d.ppf(_V ** (1.0 / n)).mean() - mean))

    return {"parent": parent, "share": share, "model": "second-order" if quadratic_values else "gpd",
            "values_for_cap": quadratic_values, "sigma": float(np.exp(log_sigma)), "xi": xi, "eta": eta,
            "ratio": {str(n): ratio(n) for n in NS}}


def table(path: str) -> None:
    """Print the results file as a markdown table."""
    records = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    print("| model | tail share | parent | shape xi (eta) | " + " | ".join(f"n = {n}" for n in NS) + " |")
    print("|---|---|---|---|" + "---|" * len(NS))
    for r in records:
        shape = f"{r['xi']:.3f}" + ("" if r["model"] == "gpd" else f" ({r['eta']:.4f})")
        print(f"| {r['model']} | {r['share']:.3g} | {r['parent']} | {shape} | "
              + " | ".join(f"{r['ratio'][str(n)]:.4f}" for n in NS) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shares", default="0.1,0.05,0.035,0.02,0.01,0.005", help="comma list of tail shares")
    parser.add_argument("--quadratic", type=int, metavar="N",
                        help="also the second-order tail, its drift frozen at the top of N values")
    parser.add_argument("--out", default="ranktail_approximation.jsonl")
    parser.add_argument("--table", metavar="JSONL", help="summarise a results file instead of running")
    args = parser.parse_args()
    if args.table:
        table(args.table)
        return
    with open(args.out, "a", encoding="utf-8") as out:
        for values in (None, args.quadratic) if args.quadratic else (None,):
            for share in (float(s) for s in args.shares.split(",")):
                for parent in rb.PARENTS:
                    record = best_tail(parent, share, values)
                    out.write(json.dumps(record) + "\n")
                    out.flush()
                    print(record["model"], share, parent, {n: round(v, 4) for n, v in record["ratio"].items()}, flush=True)


if __name__ == "__main__":
    main()
