"""Parent distributions of simulated rank times, and the true mean straggler delay they imply.

With ``SynthConfig.parent`` set, every rank's block time is drawn independently,
X = a (1 + cv ε), ε from a parent standardised to mean 0 and sd 1, so the z-scores (and the
centred maxima y) are computed from simulated ranks like those of any trace, instead of being
designed to follow a GEV (:mod:`evtsync.synth.noise`). The quantity the model predicts (methodology §3,
§7), the mean straggler delay of n ranks E[max_n X - mean_n X] = b (E[max_n ε] - E[ε]) with
b = cv·a, is then known exactly: :func:`true_delay_sd` integrates it from the parent's CDF,
E[max_n ε] = ∫_0^∞ (1 - F^n) dε - ∫_-∞^0 F^n dε (quadrature, accurate to ~1e-8; a Monte-Carlo
estimate of E[max_4096 ε] would need ~10^6 draws per n for the same 0.1%).

Parents (all standardised): ``normal``; ``gumbel`` (xi = 0); ``lognormal`` (log-sd 0.5, right
skew); ``student-t`` (5 degrees of freedom, heavy tail, xi = 0.2); ``mixture`` (rare slow
ranks: with probability 1% a rank's time is shifted by +4 sd of the normal, the rest normal).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import integrate, stats

#: Slow-rank probability and shift (in sd of the normal part) of the ``mixture`` parent.
MIXTURE_P, MIXTURE_SHIFT = 0.01, 4.0


@dataclass(frozen=True)
class Parent:
    """One parent: ``cdf``/``rvs`` of the *unstandardised* distribution and its mean and sd."""

    name: str
    description: str
    dist: Any | None  # a frozen scipy distribution (None: the mixture)

    @property
    def mean(self) -> float:
        """Mean of the unstandardised distribution."""
        if self.dist is None:
            return MIXTURE_P * MIXTURE_SHIFT
        return float(self.dist.mean())

    @property
    def sd(self) -> float:
        """Standard deviation of the unstandardised distribution."""
        if self.dist is None:
            return float(np.sqrt(1 + MIXTURE_SHIFT ** 2 * MIXTURE_P * (1 - MIXTURE_P)))
        return float(self.dist.std())

    def cdf(self, x: np.ndarray | float) -> np.ndarray:
        """CDF of the unstandardised distribution."""
        if self.dist is None:
            return (1 - MIXTURE_P) * stats.norm.cdf(x) + MIXTURE_P * stats.norm.cdf(np.asarray(x) - MIXTURE_SHIFT)
        return self.dist.cdf(x)

    def standard_draws(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """Draws of ε = (X - mean)/sd: mean 0, sd 1."""
        if self.dist is None:
            x = rng.standard_normal(shape) + MIXTURE_SHIFT * (rng.random(shape) < MIXTURE_P)
        else:
            x = self.dist.rvs(size=shape, random_state=rng)
        return (x - self.mean) / self.sd


PARENTS: dict[str, Parent] = {
    "normal": Parent("normal", "Normal", stats.norm()),
    "gumbel": Parent("gumbel", "Gumbel (right-skewed, xi = 0)", stats.gumbel_r()),
    "lognormal": Parent("lognormal", "lognormal with log-sd 0.5", stats.lognorm(0.5)),
    "student-t": Parent("student-t", "Student-t with 5 degrees of freedom (xi = 0.2)", stats.t(5)),
    "mixture": Parent("mixture", f"rare slow ranks: Normal, with probability {MIXTURE_P:g} shifted by "
                                 f"+{MIXTURE_SHIFT:g} sd", None),
}


def get_parent(name: str) -> Parent:
    """The parent named ``name``; ``KeyError`` with the valid names otherwise."""
    try:
        return PARENTS[name]
    except KeyError:
        raise KeyError(f"unknown parent {name!r}; expected one of {', '.join(PARENTS)}") from None


@lru_cache(maxsize=256)
def true_delay_sd(name: str, n: int) -> float:
    """E[max_n ε] - E[ε] for the standardised parent ``name``: the mean straggler delay of n ranks
    in units of the rank-time sd b."""
    parent = get_parent(name)
    mean = parent.mean
    lo, hi = mean - 40 * parent.sd, mean + 200 * parent.sd
    upper = integrate.quad(lambda x: 1 - parent.cdf(x) ** n, mean, hi, limit=400, points=None)[0]
    lower = integrate.quad(lambda x: parent.cdf(x) ** n, lo, mean, limit=400)[0]
    return (upper - lower) / parent.sd


def true_delays_us(name: str, b_us: float, ns: Sequence[int]) -> dict[str, float]:
    """``{str(n): b · true_delay_sd(name, n)}``: the true mean straggler delay in µs per n."""
    return {str(int(n)): float(b_us * true_delay_sd(name, int(n))) for n in ns}
