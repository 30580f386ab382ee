"""Predictions for a GPU or precision level absent from the fit (methodology §7): population draws.

The fit trees are built from known posterior arrays (``tree_from_draws`` plus the hierarchy's
variables), so every expected value is a hand computation from those arrays, not the code's
output: a new GPU's xi per draw is xi0 + a new deviation of sd xi_sd_gpu·sqrt(1 + 1/L) +
delta_precision + a new cell term of sd xi_sd_cell; mu = mu_mean + Normal(0, mu_sd·sqrt(1 + 1/C));
log sigma = log sigma_gmean + Normal(0, log_sigma_sd·sqrt(1 + 1/C)).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import InputError
from evtsync.evt import gev
from evtsync.evt.fit import tree_from_draws
from evtsync.predict.tables import (
    bandwidth_table,
    cell_parameter_table,
    population_draws,
    tau_table,
)
from tests._lazy import lazy_module

xr = lazy_module("xarray")

GPUS = ["A100", "H100", "H200"]
PRECISIONS = ["bf16", "fp32"]
CHAINS, DRAWS = 2, 2000
# posterior "truth" of the toy fit: constants plus small noise, so hand computations are exact
XI0, SD_GPU, SD_CELL = 0.05, 0.08, 0.03
DELTA_GPU = np.array([-0.06, 0.01, 0.05])
DELTA_PREC = np.array([0.02, -0.02])
MU_MEAN, MU_SD, SIGMA_GMEAN, LOG_SIGMA_SD = 0.8, 0.2, 0.45, 0.2


def _hier_tree(pooling: str = "partial") -> xr.DataTree:
    rng = np.random.default_rng(0)
    cells = pd.DataFrame([(f"{g}|{p}", g, p) for g in GPUS for p in PRECISIONS], columns=["cell", "gpu", "precision"])
    n = len(cells)
    gi = np.repeat(np.arange(3), 2)
    pi = np.tile(np.arange(2), 3)
    shape = (CHAINS, DRAWS)
    xi0 = XI0 + 0.005 * rng.standard_normal(shape)
    dg = DELTA_GPU + 0.002 * rng.standard_normal((*shape, 3))
    dp = DELTA_PREC + 0.002 * rng.standard_normal((*shape, 2))
    xi = xi0[..., None] + dg[..., gi] + dp[..., pi]
    mu = MU_MEAN + 0.1 * np.linspace(-1, 1, n) + 0.01 * rng.standard_normal((*shape, n))
    sigma = SIGMA_GMEAN * np.exp(0.1 * np.linspace(-1, 1, n)) * np.ones((*shape, n))
    tree = tree_from_draws({"mu": mu, "sigma": sigma, "xi": xi}, cells, rng.gumbel(size=60), np.arange(60) % n,
                           model_name="toy-hier")
    post = tree["posterior"].to_dataset()
    extra = {"xi0": (("chain", "draw"), xi0), "xi_sd_gpu": (("chain", "draw"), np.full(shape, SD_GPU)),
             "xi_sd_precision": (("chain", "draw"), np.full(shape, 0.05)),
             "xi_delta_gpu": (("chain", "draw", "gpu"), dg), "xi_delta_precision": (("chain", "draw", "precision"), dp),
             "xi_sd_cell": (("chain", "draw"), np.full(shape, SD_CELL))}
    if pooling == "partial":
        extra.update({"mu_mean": (("chain", "draw"), np.full(shape, MU_MEAN)),
                      "mu_sd": (("chain", "draw"), np.full(shape, MU_SD)),
                      "sigma_gmean": (("chain", "draw"), np.full(shape, SIGMA_GMEAN)),
                      "log_sigma_sd": (("chain", "draw"), np.full(shape, LOG_SIGMA_SD))})
    post = post.assign(extra).assign_coords(gpu=GPUS, precision=PRECISIONS)
    tree["posterior"] = xr.DataTree(post)
    return tree


def test_new_gpu_is_centred_on_xi0_plus_delta_precision_and_wider() -> None:
    tree = _hier_tree()
    post = tree["posterior"].to_dataset()
    mu, sigma, xi = population_draws(tree, {"gpu": "B200", "precision": "bf16"}, seed=3)
    # hand computation from the posterior arrays
    centre = float((post["xi0"] + post["xi_delta_precision"].sel(precision="bf16")).mean())
    assert centre == pytest.approx(XI0 + DELTA_PREC[0], abs=0.002)
    sd_new = np.sqrt(SD_GPU**2 * (1 + 1 / 3) + SD_CELL**2 + 0.005**2 + 0.002**2)
    assert xi.mean() == pytest.approx(centre, abs=4 * sd_new / np.sqrt(xi.size))
    assert xi.std() == pytest.approx(sd_new, rel=0.05)
    assert mu.mean() == pytest.approx(MU_MEAN, abs=0.02)
    assert mu.std() == pytest.approx(MU_SD * np.sqrt(1 + 1 / 6), rel=0.05)
    assert np.log(sigma).std() == pytest.approx(LOG_SIGMA_SD * np.sqrt(1 + 1 / 6), rel=0.05)
    assert np.exp(np.log(sigma).mean()) == pytest.approx(SIGMA_GMEAN, rel=0.02)
    # wider than an observed cell's posterior (sd 0.0055)
    observed = post["xi"].sel(cell="H200|bf16").values.ravel()
    assert xi.std() > 10 * observed.std()


def test_seen_levels_in_an_absent_cell_keep_their_deltas() -> None:
    """A100|bf16 observed, but ask with a new precision: the GPU delta stays, the precision is new."""
    tree = _hier_tree()
    post = tree["posterior"].to_dataset()
    _, _, xi = population_draws(tree, {"gpu": "A100", "precision": "fp8"}, seed=1)
    centre = float((post["xi0"] + post["xi_delta_gpu"].sel(gpu="A100")).mean())
    assert xi.mean() == pytest.approx(centre, abs=0.005)
    assert xi.std() == pytest.approx(np.sqrt(0.05**2 * 1.5 + SD_CELL**2), rel=0.06)


def test_observed_cell_is_its_own_posterior_and_labelled_so() -> None:
    tree = _hier_tree()
    table = cell_parameter_table(tree, gpu="H200", precision="bf16")
    xi = tree["posterior"]["xi"].sel(cell="H200|bf16").values.ravel()
    assert table["prediction_kind"].tolist() == ["cell"]
    assert table["xi_median"].iloc[0] == pytest.approx(np.median(xi))


def test_tau_table_population_rows_are_labelled_wider_and_match_hand_tau() -> None:
    tree = _hier_tree()
    tau = tau_table(tree, [8, 64], 20.0, gpu="B200", seed=5)
    assert set(tau["prediction_kind"]) == {"population"} and "population_note" in tau.attrs
    assert sorted(tau["cell"].unique()) == ["B200|bf16", "B200|fp32"]
    mu, sigma, xi = population_draws(tree, {"gpu": "B200", "precision": "bf16"}, seed=5)
    hand = 20.0 * gev.expected_max(mu, sigma, xi, 64 / 4)
    row = tau[(tau["cell"] == "B200|bf16") & (tau["n"] == 64)].iloc[0]
    assert row["tau_median_us"] == pytest.approx(np.median(hand))
    seen = tau_table(tree, [64], 20.0, gpu="H200", precision="bf16")
    assert seen["prediction_kind"].tolist() == ["cell"]
    assert (row["tau_hi_us"] - row["tau_lo_us"]) > 3 * (seen["tau_hi_us"] - seen["tau_lo_us"]).iloc[0]
    bw = bandwidth_table(tree, ["full"], [64], 5.0, 2**28, 20.0, gpu="B200", precision="bf16", seed=5)
    assert bw["prediction_kind"].tolist() == ["population"]
    assert bw["tau_median_us"].iloc[0] == pytest.approx(row["tau_median_us"])


def test_model_without_population_refuses_naming_the_parameter_and_the_model() -> None:
    tree = _hier_tree(pooling="none")
    with pytest.raises(InputError, match=r"mu is one value per cell.*gev-hier-gpu-precision"):
        tau_table(tree, [64], 20.0, gpu="B200", precision="bf16")
    # an observed cell is still answered
    assert tau_table(tree, [64], 20.0, gpu="H200", precision="bf16")["prediction_kind"].tolist() == ["cell"]


def test_pooled_fit_answers_any_gpu_as_pooled() -> None:
    rng = np.random.default_rng(1)
    tree = tree_from_draws({"mu": 0.8 + 0.01 * rng.standard_normal((2, 100)), "sigma": np.full((2, 100), 0.4)},
                           pd.DataFrame({"cell": ["all"]}), rng.gumbel(size=20), np.zeros(20, dtype=int),
                           family="gumbel")
    tau = tau_table(tree, [64], 10.0, gpu="B200", precision="bf16")
    assert tau["prediction_kind"].tolist() == ["pooled"] and "pooled_note" in tau.attrs


def test_the_fit_draws_its_own_new_level() -> None:
    """The model-variable reading is the fit's method; predict.population_draws delegates to it.

    Hand expectation: a new GPU's xi mean is XI0 + DELTA_PREC[bf16]; mu's mean MU_MEAN.
    """
    from evtsync.evt.bayesfit import BayesFit

    fit = BayesFit(_hier_tree())
    mu, sigma, xi = fit.draw_new_level({"gpu": "B200", "precision": "bf16"}, seed=3)
    assert abs(xi.mean() - (XI0 + DELTA_PREC[0])) < 0.01 and abs(mu.mean() - MU_MEAN) < 0.02
    assert mu.shape == sigma.shape == xi.shape == (CHAINS * DRAWS,)
    via_predict = population_draws(fit, {"gpu": "B200", "precision": "bf16"}, seed=3)
    for a, b in zip((mu, sigma, xi), via_predict, strict=True):
        np.testing.assert_array_equal(a, b)
    # without a population of mu (pooling "none") the fit refuses and names the model that can answer
    with pytest.raises(InputError, match="mu is one value per cell.*gev-hier-gpu-precision"):
        BayesFit(_hier_tree(pooling="none")).draw_new_level({"gpu": "B200", "precision": "bf16"})
