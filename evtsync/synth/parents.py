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
skew); ``gamma`` (shape 2, right skew, xi = 0); ``student-t`` (5 degrees of freedom, heavy tail,
xi = 0.2); ``mixture`` (rare slow ranks: with probability 1% a rank's time is shifted by +4 sd of
the normal, the rest normal).

Persistently slow ranks (``SynthConfig.slow_ranks``, issue 45) add a fixed shift rho_r (in units of
b) to every time of rank r. The truth is then stated for "a job of n ranks from the same fleet":
each of the n new ranks takes the effect of one of the job's ranks at random, so a new rank's
time is eps + rho with rho uniform over the job's ranks' effects (0 for the others), whose CDF is
G(v) = mean_r F(v − rho_r); :func:`true_delay_sd` integrates E[max_n − mean_n] from G as above.
A shock shared by the ranks of a collective, or a drift over the job, shifts every rank of a
collective alike and cancels in max − mean: it does not enter the truth.
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
    "gamma": Parent("gamma", "gamma with shape 2 (right skew, xi = 0)", stats.gamma(2.0)),
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
def true_delay_sd(name: str, n: int, shifts: tuple[float, ...] = ()) -> float:
    """E[max_n V] - E[V] for V = ε + rho, ε from the standardised parent ``name`` and rho uniform over
    ``shifts`` (the fleet's persistent rank effects in units of b; empty: no rank effects): the mean
    straggler delay of n ranks from that fleet in units of the rank-time sd b."""
    parent = get_parent(name)
    rho = np.asarray(shifts if shifts else (0.0,), dtype=float) * parent.sd   # in the parent's own units

    def cdf(x: float) -> float:
        return float(np.mean(parent.cdf(x - rho)))

    mean = parent.mean + float(rho.mean())
    lo, hi = mean - 40 * parent.sd + float(rho.min()), mean + 200 * parent.sd + float(rho.max())
    upper = integrate.quad(lambda x: 1 - cdf(x) ** n, mean, hi, limit=400, points=None)[0]
    lower = integrate.quad(lambda x: cdf(x) ** n, lo, mean, limit=400)[0]
    return (upper - lower) / parent.sd


def fleet_shifts(ranks: int, slow_ranks: Sequence[tuple[int, float]]) -> tuple[float, ...]:
    """The persistent effects (in units of b) of a job's ``ranks`` ranks: each slow rank's, 0 for the others;
    () when no rank is slow (the iid truth)."""
    if not slow_ranks:
        return ()
    rho = [0.0] * ranks
    for r, sd in slow_ranks:
        rho[r] = float(sd)
    return tuple(rho)


def true_delays_us(name: str, b_us: float, ns: Sequence[int], shifts: tuple[float, ...] = ()) -> dict[str, float]:
    """``{str(n): b · true_delay_sd(name, n, shifts)}``: the true mean straggler delay in µs per n."""
    return {str(int(n)): float(b_us * true_delay_sd(name, int(n), shifts)) for n in ns}
