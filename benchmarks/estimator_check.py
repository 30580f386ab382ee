"""Independent Monte-Carlo check of the estimators of tau(n) (docs/methodology.md, "Predicting tau(n)").

NumPy and SciPy only (no evtsync code): for each parent distribution of rank times, draw
``--samples`` samples of m = 4 ranks, build the paper's z = (M - sample mean)/s and the centred
y = (M - overall mean)/s with s the pooled within-sample sd, fit a GEV to each by maximum
likelihood (scipy) and compare s·E_(n/m) with the exact mean straggler delay
E[max_n X] - E[X], integrated numerically from the parent's CDF. Also the two alternatives the
methodology rejects (convolution with a normal sample-mean term; peaks over threshold).

    python benchmarks/estimator_check.py [--replicates 10] [--samples 600] [--alternatives]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from scipy import integrate, special, stats

M = 4
NS = (8, 64, 512, 4096)
PARENTS = {
    "normal": stats.norm(),
    "gumbel": stats.gumbel_r(),
    "lognormal(0.5)": stats.lognorm(0.5),
    "student-t(5)": stats.t(5),
}


def true_delay(dist: stats.rv_continuous, n: int) -> float:
    """E[max_n X] - E[X] in units of the parent's sd, by integrating 1 - F^n and F^n around the mean."""
    mean = dist.mean()
    lo, hi = dist.ppf(1e-12), dist.isf(1e-15)
    upper = integrate.quad(lambda x: 1 - dist.cdf(x) ** n, mean, hi, limit=200)[0]
    lower = integrate.quad(lambda x: dist.cdf(x) ** n, lo, mean, limit=200)[0]
    return (upper - lower) / dist.std()


def expected_max(c: float, loc: float, scale: float, k: float) -> float:
    """E of the max of k GEV draws (scipy's c = -xi)."""
    xi = -c
    if abs(xi) < 1e-8:
        return loc + scale * (np.euler_gamma + np.log(k))
    return loc + scale * np.expm1(xi * np.log(k) + special.gammaln(1 - xi)) / xi


def convolution_max(c: float, loc: float, scale: float, k: float, mean_sd: float) -> float:
    """E[max_k (W + V)], W ~ GEV, V ~ Normal(0, mean_sd²) independent (rejected alternative)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(24)
    weights = weights / weights.sum()
    x = np.linspace(-6, 60, 20001)
    cdf = (stats.genextreme.cdf(x[:, None] - mean_sd * nodes[None, :], c, loc, scale) * weights).sum(1)
    pos = x >= 0
    return float(((1 - cdf[pos] ** k).sum() - (cdf[~pos] ** k).sum()) * (x[1] - x[0]))


def pot_max(u: np.ndarray, n: int, q: float = 0.9) -> float:
    """E[max_n] from the empirical body and a GPD tail above the q quantile (rejected alternative)."""
    u = np.sort(u)
    t = np.quantile(u, q)
    c, _, sc = stats.genpareto.fit(u[u > t] - t, floc=0)
    x = np.linspace(u[0], max(60.0, u[-1]), 40001)
    cdf = np.searchsorted(u, x, side="right") / len(u)
    tail = x > t
    cdf[tail] = 1 - (1 - q) * stats.genpareto.sf(x[tail] - t, c, 0, sc)
    pos = x >= 0
    return float(((1 - cdf[pos] ** n).sum() - (cdf[~pos] ** n).sum()) * (x[1] - x[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=10)
    parser.add_argument("--samples", type=int, default=600, help="samples of m = 4 ranks per replicate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--alternatives", action="store_true", help="also the two rejected alternatives")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    rng = np.random.default_rng(args.seed)
    print(f"m = {M}, {args.samples} samples per replicate, {args.replicates} replicates; "
          f"mean predicted/true (sd between replicates) at n = {', '.join(map(str, NS))}")
    for name, dist in PARENTS.items():
        truth = np.array([true_delay(dist, n) for n in NS]) * dist.std()
        ratios: dict[str, list[list[float]]] = {"centred": [], "paper": []}
        if args.alternatives:
            ratios.update({"convolution": [], "pot": []})
        for _ in range(args.replicates):
            x = dist.rvs(size=(args.samples, M), random_state=rng)
            sample_mean, sample_max = x.mean(1), x.max(1)
            s = np.sqrt(((x - sample_mean[:, None]) ** 2).sum() / (args.samples * (M - 1)))
            z = (sample_max - sample_mean) / s
            y = (sample_max - x.mean()) / s
            fz, fy = stats.genextreme.fit(z), stats.genextreme.fit(y)
            ratios["paper"].append([s * expected_max(*fz, n / M) / t for n, t in zip(NS, truth, strict=True)])
            ratios["centred"].append([s * expected_max(*fy, n / M) / t for n, t in zip(NS, truth, strict=True)])
            if args.alternatives:
                ratios["convolution"].append([s * convolution_max(*fz, n / M, M ** -0.5) / t
                                              for n, t in zip(NS, truth, strict=True)])
                u = ((x - x.mean()) / s).ravel()
                ratios["pot"].append([s * pot_max(u, n) / t for n, t in zip(NS, truth, strict=True)])
        print(f"{name}: true delay / sd = {', '.join(f'{t / dist.std():.3f}' for t in truth)}")
        for label, values in ratios.items():
            v = np.asarray(values)
            cells = "  ".join(f"{a:.3f} ({b:.3f})" for a, b in zip(v.mean(0), v.std(0), strict=True))
            print(f"  {label:12s} {cells}")


if __name__ == "__main__":
    main()
