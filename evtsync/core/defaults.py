"""The defaults every layer shares, in one validated table (like ArviZ's ``ci_prob``).

Light on purpose (no NumPy): the command line reads these to build its parser before any
command runs. Each default is written here once and imported everywhere else:
``tests/core/test_defaults.py`` scans the package's syntax tree and fails when one of these values
is written again as a literal outside this module (a parameter ``m=4``, ``eps=-0.5``,
``level=0.9``, the sampler or topology lists, a model name, the convergence thresholds).
:data:`DEFAULTS` is the table, checked at import by :func:`check_defaults`.
"""

from __future__ import annotations

from typing import Any

#: Central credible / confidence level of every interval evtsync reports (equal-tailed).
INTERVAL_LEVEL = 0.90
#: Ranks per sample of the pooled z-scores (a domain of n = k·m ranks gives k samples).
DEFAULT_M = 4
#: Target elasticity eps of the optimal bandwidth B* (in (-1, 0)).
DEFAULT_EPS = -0.5
#: Convergence of a Bayesian fit: split R-hat at most this, bulk and tail ESS at least ESS_MIN,
#: no divergence (Vehtari et al. 2021).
RHAT_MAX = 1.01
ESS_MIN = 400
#: NUTS samplers a fit can run on, the default first.
SAMPLERS = ("nutpie", "pymc")
DEFAULT_SAMPLER = SAMPLERS[0]
#: The hierarchical model whose population predicts hardware a fit has not seen.
POPULATION_MODEL = "gev-hier-gpu-precision"
#: The model of the paper's estimator (tau(n) from the per-cell GEV MLE), shown beside the fits'.
PAPER_MODEL = "mle-gev"
#: The model a run reports its predictions with when LOO cannot choose, in this order.
MAIN_MODEL_PREFERENCE = (POPULATION_MODEL, "gev", "gumbel")
#: Topologies of a run's predictions (names of :data:`evtsync.predict.hockney.TOPOLOGIES`, which holds
#: their p, q and labels), in the order of its tables.
RUN_TOPOLOGIES = ("full", "ring", "torus3d")
#: Default tolerance on end-time agreement across ranks that share a clock (µs).
END_TOLERANCE_US = 50.0
#: Ranks per host when traces do not name their host (clock domains for end-time checks).
RANKS_PER_HOST = 8

#: Sampler settings of real runs (per chain), shared by ``evtsync fit`` and ``evtsync run``, and
#: the seed both use unless given one (recorded in every fit).
DEFAULT_DRAWS, DEFAULT_TUNE, DEFAULT_CHAINS = 1000, 1000, 4
DEFAULT_SEED = 0
#: Sampler settings of the bundled demo where a model's own [sampling] table does not set them
#: (issue 29: 4 dispersed chains x 1000 draws). With 500 draws per chain the hierarchical model's
#: bulk ESS was 266 on the demo (2026-12-02), short of the 400 the convergence verdict asks for;
#: with 1000 + 1000 it failed at seeds 4 (a divergence) and 5 (R-hat 1.0154) of 0-9, so its
#: models/gev-hier-gpu-precision.toml asks for 2000 + 2000 (issue 45; docs/bayesian.md,
#: "Convergence of the default settings over seeds").
DEMO_DRAWS, DEMO_TUNE, DEMO_CHAINS = DEFAULT_DRAWS, DEFAULT_TUNE, DEFAULT_CHAINS


#: The estimators of tau(n) (docs/methodology.md, "Predicting tau(n)") and the one used unless
#: told otherwise; their meaning and checks live in :mod:`evtsync.predict.tables`.
ESTIMATOR_NAMES = ("centred", "paper", "rankmodel", "ranktail")
#: issue 45: the hierarchical rank model (evtsync.evt.rankmodel) answers; it falls back to "centred"
#: (evtsync.predict.estimator) only for a cell with too few rank values or no z-score table; ranktail
#: (issue 29) stays as a labelled comparator
DEFAULT_ESTIMATOR = "rankmodel"
#: The per-rank tail estimator (``ranktail``, :mod:`evtsync.evt.ranktail`): the share of a cell's
#: rank values above the generalized-Pareto threshold, the fewest exceedances it fits, the
#: fewest and the most exceedances it fits (a large cell gets a higher threshold), the fewest
#: rank values a cell needs, and the number of draws of E[max_n u] it returns.
RANKTAIL_MODEL = "ranktail"  # the ``model`` of its rows in the prediction tables
RANKTAIL_TAIL_SHARE = 0.035  # docs/bayesian.md: with the posterior median as the point, the best of 2.5/3.5/5% on 2,560 values
#: The share holds up to RANKTAIL_SHARE_VALUES rank values; beyond, the exceedances grow as
#: N^RANKTAIL_EXCEEDANCE_POWER (k = share · 2560 · (N/2560)^power), so the threshold rises with N
#: and the GPD's approximation bias, which a fixed share keeps however many values there are,
#: shrinks (docs/methodology.md, "Choosing the threshold and the prior";
#: benchmarks/ranktail_approximation.py)
RANKTAIL_SHARE_VALUES = 2560
RANKTAIL_EXCEEDANCE_POWER = 0.5  # k ∝ √N: of √N and N^(2/3) the smaller worst bias at 10,240 and 40,960 values (docs/bayesian.md)
RANKTAIL_MIN_EXCEEDANCES = 30
RANKTAIL_MAX_EXCEEDANCES = 5000
RANKTAIL_MIN_VALUES = 120
RANKTAIL_DRAWS = 1000
RANKTAIL_XI_PRIOR_SD = 0.3  # sd of the Normal(0, sd) prior on the GPD shape (docs/methodology.md)
RANKTAIL_STABILITY_ALPHA = 0.05  # level of the threshold-stability test (docs/methodology.md)

#: Largest chain x draw x observation count whose pointwise log-likelihood a fit stores in its
#: file (the ``log_likelihood`` group, what :func:`arviz.loo` reads; 8 MB of float64). Above it
#: the group is left out: evtsync's compare recomputes the values from the posterior (it never
#: reads the group), and storing the demo's 14 million per fit cost ~1 s of CPU each (computing,
#: moving from the pool, checksums, writing, hashing: issue 30).
LOGLIK_STORE_LIMIT = 1_000_000

#: Relative agreement a predicted-vs-measured row is marked within: |predicted / measured - 1| at
#: most this, and the measured value inside the predicted interval (the ``within_agreement`` column
#: of :func:`evtsync.predict.tables.predicted_vs_measured`; issue 45).
PVM_AGREEMENT = 0.05

#: The table: every default above by name.
DEFAULTS: dict[str, Any] = {
    "INTERVAL_LEVEL": INTERVAL_LEVEL, "DEFAULT_M": DEFAULT_M, "DEFAULT_EPS": DEFAULT_EPS, "RHAT_MAX": RHAT_MAX,
    "ESS_MIN": ESS_MIN, "SAMPLERS": SAMPLERS, "DEFAULT_SAMPLER": DEFAULT_SAMPLER,
    "POPULATION_MODEL": POPULATION_MODEL, "MAIN_MODEL_PREFERENCE": MAIN_MODEL_PREFERENCE,
    "PAPER_MODEL": PAPER_MODEL,
    "RUN_TOPOLOGIES": RUN_TOPOLOGIES, "END_TOLERANCE_US": END_TOLERANCE_US, "RANKS_PER_HOST": RANKS_PER_HOST,
    "DEFAULT_DRAWS": DEFAULT_DRAWS, "DEFAULT_TUNE": DEFAULT_TUNE, "DEFAULT_CHAINS": DEFAULT_CHAINS,
    "DEMO_DRAWS": DEMO_DRAWS, "DEMO_TUNE": DEMO_TUNE, "DEMO_CHAINS": DEMO_CHAINS,
    "PVM_AGREEMENT": PVM_AGREEMENT, "LOGLIK_STORE_LIMIT": LOGLIK_STORE_LIMIT,
    "ESTIMATOR_NAMES": ESTIMATOR_NAMES, "DEFAULT_ESTIMATOR": DEFAULT_ESTIMATOR,
    "RANKTAIL_MODEL": RANKTAIL_MODEL, "RANKTAIL_TAIL_SHARE": RANKTAIL_TAIL_SHARE,
    "RANKTAIL_SHARE_VALUES": RANKTAIL_SHARE_VALUES, "RANKTAIL_EXCEEDANCE_POWER": RANKTAIL_EXCEEDANCE_POWER,
    "RANKTAIL_MIN_EXCEEDANCES": RANKTAIL_MIN_EXCEEDANCES,
    "RANKTAIL_MAX_EXCEEDANCES": RANKTAIL_MAX_EXCEEDANCES,
    "RANKTAIL_MIN_VALUES": RANKTAIL_MIN_VALUES, "RANKTAIL_DRAWS": RANKTAIL_DRAWS,
    "RANKTAIL_XI_PRIOR_SD": RANKTAIL_XI_PRIOR_SD, "RANKTAIL_STABILITY_ALPHA": RANKTAIL_STABILITY_ALPHA,
}


def check_defaults(table: dict[str, Any]) -> dict[str, Any]:
    """``table`` after checking that its values make sense together; ``ValueError`` naming the
    first one that does not (run at import on :data:`DEFAULTS`, so a bad edit fails at once)."""
    rules = [
        ("INTERVAL_LEVEL", lambda v: 0 < v < 1, "a level in (0, 1)"),
        ("DEFAULT_M", lambda v: isinstance(v, int) and v >= 2, "a whole number of ranks >= 2"),
        ("DEFAULT_EPS", lambda v: -1 < v < 0, "an elasticity in (-1, 0)"),
        ("RHAT_MAX", lambda v: v > 1, "an R-hat threshold above 1"),
        ("ESS_MIN", lambda v: isinstance(v, int) and v > 0, "a positive effective sample size"),
        ("SAMPLERS", lambda v: len(v) == len(set(v)) > 0, "distinct sampler names"),
        ("DEFAULT_SAMPLER", lambda v: v in table["SAMPLERS"], "one of SAMPLERS"),
        ("MAIN_MODEL_PREFERENCE", lambda v: v[0] == table["POPULATION_MODEL"] and len(set(v)) == len(v),
         "distinct model names, the population model first"),
        ("PAPER_MODEL", lambda v: v.startswith("mle-") and v not in table["MAIN_MODEL_PREFERENCE"],
         "an MLE model name (mle-FAMILY), apart from the Bayesian fits'"),
        ("RUN_TOPOLOGIES", lambda v: len(v) == len(set(v)) > 0, "distinct topology names"),
        ("END_TOLERANCE_US", lambda v: v >= 0, "a tolerance >= 0 µs"),
        ("RANKS_PER_HOST", lambda v: isinstance(v, int) and v >= 1, "a whole number >= 1"),
        ("PVM_AGREEMENT", lambda v: 0 < v < 1, "a relative tolerance in (0, 1)"),
        *((name, lambda v: isinstance(v, int) and v >= 1, "a whole number >= 1")
          for name in ("DEFAULT_DRAWS", "DEFAULT_TUNE", "DEFAULT_CHAINS", "DEMO_DRAWS", "DEMO_TUNE", "DEMO_CHAINS",
                       "RANKTAIL_MIN_EXCEEDANCES", "RANKTAIL_MAX_EXCEEDANCES", "RANKTAIL_DRAWS",
                       "RANKTAIL_SHARE_VALUES",
                       "LOGLIK_STORE_LIMIT")),
        ("DEFAULT_ESTIMATOR", lambda v: v in table["ESTIMATOR_NAMES"], "one of ESTIMATOR_NAMES"),
        ("RANKTAIL_TAIL_SHARE", lambda v: 0 < v < 0.5, "a share in (0, 0.5)"),
        ("RANKTAIL_EXCEEDANCE_POWER", lambda v: 0 < v <= 1, "a power in (0, 1] (1: the share at every N)"),
        ("RANKTAIL_XI_PRIOR_SD", lambda v: v > 0, "a standard deviation > 0"),
        ("RANKTAIL_STABILITY_ALPHA", lambda v: 0 <= v < 1, "a level in [0, 1) (0: no test)"),
        ("RANKTAIL_MIN_VALUES", lambda v: isinstance(v, int) and v >= 2 * table["RANKTAIL_MIN_EXCEEDANCES"],
         "a whole number at least twice RANKTAIL_MIN_EXCEEDANCES"),
    ]
    for name, ok, expected in rules:
        if not ok(table[name]):
            raise ValueError(f"evtsync.core.defaults: {name} = {table[name]!r} is not {expected}")
    return table


check_defaults(DEFAULTS)


def check_level(level: float) -> float:
    """``level`` as a float after checking that it lies in (0, 1); ``InputError`` otherwise."""
    from evtsync.core.errors import InputError

    if not 0 < float(level) < 1:
        raise InputError(f"interval level must lie in (0, 1); got {level}")
    return float(level)


#: The fleets a rank-model prediction can assume, with the words every output states them in
#: (evtsync.evt.rankmodel; here so that `evtsync ranks --help` names them without loading the model).
RANK_FLEET_WORDING = {"new": "a job of n ranks from the same fleet",
                      "these-plus-typical": "these ranks plus typical ones from the same fleet"}

#: The opt-in comparator of ``evtsync run --comparators`` (issue 48): the Bayesian GEV fits of the
#: block maxima (a ``fit-<model>`` stage per models/*.toml) and their PSIS-LOO ``compare``. The
#: run's one model is the rank model (issue 45); these fits are comparators only, and the dearest
#: stages of a cold run (~55 of ~165 s of CPU on the demo), so they run only when asked for. The
#: cheap comparators (the GEV MLE of the ``mle`` stage, the paper's estimator and ranktail) always run.
BAYES_GEV = "bayes-gev"
#: ``--comparators`` choices, each with what it runs (the CLI's help and docs/cli.md).
COMPARATOR_CHOICES: dict[str, str] = {
    BAYES_GEV: "the Bayesian GEV fits of the block maxima (a fit-<model> stage per models/*.toml) and their "
               "PSIS-LOO comparison (stage compare)",
}
#: The reason recorded for a stage of an opt-in comparator a run did not ask for (never silently absent).
OPT_IN_REASON = "not run (opt-in: --comparators " + BAYES_GEV + ")"

#: The ``family`` of the rank model's specification (``models/rankmodel.toml``): not a GEV family, so
#: :func:`evtsync.evt.spec.parse_spec` refuses it and :func:`evtsync.evt.catalog.model_paths` leaves it out.
RANK_FAMILY = "rankmodel"
#: The rank model's specification file in a models folder.
RANK_SPEC_FILE = "rankmodel.toml"
