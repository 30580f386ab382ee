"""The defaults every layer shares, in one table (like ArviZ's ``ci_prob``).

Light on purpose (no NumPy): the command line reads these to build its parser before any
command runs.
"""

from __future__ import annotations

#: Central credible / confidence level of every interval evtsync reports (equal-tailed).
INTERVAL_LEVEL = 0.90
#: Default tolerance on end-time agreement across ranks that share a clock (µs).
END_TOLERANCE_US = 50.0
#: Ranks per host when traces do not name their host (clock domains for end-time checks).
RANKS_PER_HOST = 8

#: Sampler settings of real runs (per chain), shared by ``evtsync fit`` and ``evtsync run``, and
#: the seed both use unless given one (recorded in every fit).
DEFAULT_DRAWS, DEFAULT_TUNE, DEFAULT_CHAINS = 1000, 1000, 4
DEFAULT_SEED = 0
#: Sampler settings of the bundled demo: those of every fit (issue 29: 4 dispersed chains x 1000
#: draws). With 500 draws per chain the hierarchical model's bulk ESS was 266 on the demo
#: (2026-12-02), short of the 400 the convergence verdict asks for.
DEMO_DRAWS, DEMO_TUNE, DEMO_CHAINS = DEFAULT_DRAWS, DEFAULT_TUNE, DEFAULT_CHAINS


#: The estimators of tau(n) (docs/methodology.md, "Predicting tau(n)") and the one used unless
#: told otherwise; their meaning and checks live in :mod:`evtsync.evt.predict`.
ESTIMATOR_NAMES = ("centred", "paper")
DEFAULT_ESTIMATOR = "centred"


def check_level(level: float) -> float:
    """``level`` as a float after checking that it lies in (0, 1); ``InputError`` otherwise."""
    from evtsync.errors import InputError

    if not 0 < float(level) < 1:
        raise InputError(f"interval level must lie in (0, 1); got {level}")
    return float(level)
