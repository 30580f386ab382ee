"""Independent Monte-Carlo check of the estimators of tau(n) (docs/methodology.md, "Predicting tau(n)").

NumPy and SciPy only (no evtsync code): for each parent distribution of rank times, draw
``--samples`` samples of m = 4 ranks, build the paper's z = (M - sample mean)/s and the centred
y = (M - overall mean)/s with s the pooled within-sample sd, fit a GEV to each by maximum
likelihood (scipy) and compare s·E_(n/m) with the exact mean straggler delay
E[max_n X] - E[X], integrated numerically from the parent's CDF. Also the two alternatives the
methodology rejects (convolution with a normal sample-mean term; peaks over threshold).

``--ranktail`` also runs the package's per-rank tail estimator (:mod:`evtsync.evt.ranktail`) on
the standardised values u = (X - overall mean)/s of every rank, and prints the share of its
``--level`` intervals that cover the truth (the truth stays independent of the package).

    python benchmarks/estimator_check.py [--replicates 10] [--samples 600] [--alternatives] [--ranktail]
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


class Mixture:
    """Rare slow ranks: Normal(0, 1), with probability p shifted by +shift (as ``synth --parent mixture``)."""

    def __init__(self, p: float = 0.01, shift: float = 4.0) -> None:
        self.p, self.shift = p, shift

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        return (1 - self.p) * stats.norm.cdf(x) + self.p * stats.norm.cdf(np.asarray(x) - self.shift)

    def mean(self) -> float:
        return self.p * self.shift

    def std(self) -> float:
        return float(np.sqrt(1 + self.shift ** 2 * self.p * (1 - self.p)))

    def ppf(self, q: float) -> float:
        return float(stats.norm.ppf(q)) - 1.0

    def isf(self, q: float) -> float:
        return float(stats.norm.isf(q)) + self.shift + 1.0

    def rvs(self, size: tuple[int, int], random_state: np.random.Generator) -> np.ndarray:
        return random_state.standard_normal(size) + self.shift * (random_state.random(size) < self.p)


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
    parser.add_argument("--ranktail", action="store_true", help="also the per-rank tail estimator (evtsync), with coverage")
    parser.add_argument("--level", type=float, default=0.9, help="interval level of --ranktail's coverage")
    parser.add_argument("--parents", default=None, help="comma list of parents (default: all, with mixture)")
    args = parser.parse_args()
    parents: dict[str, object] = {**PARENTS, "mixture(1%, +4sd)": Mixture()}
    if args.parents:
        parents = {k: v for k, v in parents.items() if k.split("(")[0] in args.parents.split(",")}
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    rng = np.random.default_rng(args.seed)
    print(f"m = {M}, {args.samples} samples per replicate, {args.replicates} replicates; "
          f"mean predicted/true (sd between replicates) at n = {', '.join(map(str, NS))}")
    for name, dist in parents.items():
        truth = np.array([true_delay(dist, n) for n in NS]) * dist.std()
        ratios: dict[str, list[list[float]]] = {"centred": [], "paper": []}
        if args.alternatives:
            ratios.update({"convolution": [], "pot": []})
        covered: list[list[bool]] = []
        if args.ranktail:
            from evtsync.evt.ranktail import expected_max_draws, fit_rank_tail

            ratios["ranktail"] = []
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
            if args.ranktail:
                u = ((x - x.mean()) / s).ravel()
                draws = s * expected_max_draws(fit_rank_tail(u, seed=len(covered)), NS)
                lo, hi = np.quantile(draws, [(1 - args.level) / 2, (1 + args.level) / 2], axis=0)
                ratios["ranktail"].append(list(np.mean(draws, axis=0) / truth))
                covered.append(list((lo <= truth) & (truth <= hi)))
        print(f"{name}: true delay / sd = {', '.join(f'{t / dist.std():.3f}' for t in truth)}")
        for label, values in ratios.items():
            v = np.asarray(values)
            cells = "  ".join(f"{a:.3f} ({b:.3f})" for a, b in zip(v.mean(0), v.std(0), strict=True))
            print(f"  {label:12s} {cells}")
        if covered:
            print(f"  {'covering':12s} " + "  ".join(f"{int(c):d} of {len(covered)}" for c in np.sum(covered, axis=0)))


if __name__ == "__main__":
    main()
