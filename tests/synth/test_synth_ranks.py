"""synth with simulated ranks (``parent``): the truth it states against closed forms, and the
centred estimator through the user's path (traces -> blocks -> fit of y -> tau(n)) against it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evtsync.synth import SynthConfig, synthesize
from tests._lazy import lazy_module

# the parents are SciPy's frozen distributions: imported on first use, not at collection (issue 48)
parents = lazy_module("evtsync.synth.parents")
#: the parents' names, for parametrize without importing them (test_parent_names checks the list)
PARENT_NAMES = ["gamma", "gumbel", "lognormal", "mixture", "normal", "student-t"]


def test_true_delay_matches_closed_forms() -> None:
    # normal: E[max of 2] = 1/sqrt(pi); Gumbel: E[max of n] - E[X] = ln n, sd pi/sqrt(6)
    assert parents.true_delay_sd("normal", 2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    for n in (8, 512, 4096):
        assert parents.true_delay_sd("gumbel", n) == pytest.approx(math.log(n) / (math.pi / math.sqrt(6)), rel=1e-5)


@pytest.mark.parametrize("name", PARENT_NAMES)
def test_parents_are_standardised(name: str) -> None:
    eps = parents.PARENTS[name].standard_draws(np.random.default_rng(1), (400_000,))
    assert abs(eps.mean()) < 0.01 and eps.std() == pytest.approx(1.0, abs=0.01)


def test_simulated_ranks_give_the_truth_and_the_centred_estimator_meets_it(tmp_path) -> None:
    from evtsync.blocks.cut import zscore_table
    from evtsync.evt.mlefit import MleCellFit, mle_cell_table
    from evtsync.predict.tables import tau_table

    cfg = SynthConfig.build(ranks=16, tp=16, iterations=40, parent="normal", seed=3)
    res = synthesize(cfg, tmp_path / "job")
    truth = res.truth["parent"]["true_straggler_delay_sd"]
    assert res.truth["gev"] is None and sorted(map(int, truth))[:3] == [4, 8, 16]
    block = res.truth["blocks"][0]
    assert block["true_straggler_delay_us"]["16"] == pytest.approx(block["b_design_us"] * truth["16"])
    z = zscore_table(res.traces_dir, m=4)
    assert z["mean_var_ratio"].median() < 1.5  # no drift was simulated
    fit = MleCellFit(mle_cell_table(z, (), column="y"), "gev")
    tau = tau_table(fit, [4, 16, 64], 1.0, 4).set_index("n")  # b = 1: in units of the block sd
    for n in (4, 16, 64):
        assert tau.loc[n, "tau_mean_us"] / truth[str(n)] == pytest.approx(1.0, abs=0.06), n


def test_parent_names() -> None:
    assert sorted(parents.PARENTS) == PARENT_NAMES
