"""Prior against posterior for the spreads, and predictions whose width the prior sets (issue 29,
item 6). The fit tree is built from known arrays: one spread's "posterior" is a sample of its
own prior (the data taught nothing), the others are narrow; the prior intervals are computed
here with scipy from the numbers in the model file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.evt.bayesfit import BayesFit, spread_prior_table
from evtsync.evt.fit import tree_from_draws
from evtsync.predict.tables import population_table, tau_table
from tests._lazy import lazy_module

xr = lazy_module("xarray")
stats = lazy_module("scipy.stats")

ROOT = Path(__file__).resolve().parents[2]
GPUS, PRECISIONS = ["A100", "H100", "H200"], ["bf16", "fp32"]
SHAPE = (2, 2000)


def _fit() -> BayesFit:
    rng = np.random.default_rng(4)
    cells = pd.DataFrame([(f"{g}|{p}", g, p) for g in GPUS for p in PRECISIONS], columns=["cell", "gpu", "precision"])
    n = len(cells)
    narrow = lambda value, k=(): value + 0.002 * rng.standard_normal((*SHAPE, *k))  # noqa: E731
    tree = tree_from_draws({"mu": narrow(0.9, (n,)), "sigma": narrow(0.6, (n,)), "xi": narrow(0.05, (n,))}, cells,
                           rng.gumbel(size=60), np.arange(60) % n, model_name="toy-hier")
    # xi_sd_gpu: the few-levels prior lognormal(-2.5, 0.6) itself, drawn here
    sd_gpu = np.exp(-2.5 + 0.6 * rng.standard_normal(SHAPE))
    extra = {"xi0": narrow(0.05), "xi_sd_gpu": sd_gpu, "xi_sd_precision": np.abs(narrow(0.05)),
             "xi_delta_gpu": narrow(0.0, (3,)), "xi_delta_precision": narrow(0.0, (2,)),
             "xi_sd_cell": np.abs(narrow(0.03)), "mu_mean": narrow(0.9), "mu_sd": np.abs(narrow(0.2)),
             "sigma_gmean": narrow(0.6), "log_sigma_sd": np.abs(narrow(0.2))}
    dims = {"xi_delta_gpu": ("chain", "draw", "gpu"), "xi_delta_precision": ("chain", "draw", "precision")}
    post = tree["posterior"].to_dataset().assign(
        {k: (dims.get(k, ("chain", "draw")), v) for k, v in extra.items()}).assign_coords(
        gpu=GPUS, precision=PRECISIONS)
    tree["posterior"] = xr.DataTree(post)
    tree.attrs["model_spec_text"] = (ROOT / "models" / "gev-hier-gpu-precision.toml").read_text()
    return BayesFit(tree)


def test_spread_table_puts_each_prior_beside_its_posterior() -> None:
    table = spread_prior_table(_fit().tree, 0.9).set_index("parameter")
    assert set(table.index) == {"mu_sd", "log_sigma_sd", "xi_sd_gpu", "xi_sd_precision", "xi_sd_cell"}
    lo, hi = stats.lognorm(0.6, scale=np.exp(-2.5)).ppf([0.05, 0.95])
    gpu = table.loc["xi_sd_gpu"]
    assert (gpu["prior_lo"], gpu["prior_hi"]) == pytest.approx((lo, hi))
    assert gpu["width_ratio"] == pytest.approx(1.0, abs=0.1) and gpu["prior_dominated"]
    assert not table.drop(index="xi_sd_gpu")["prior_dominated"].any()
    pop = population_table(_fit()).set_index("parameter")
    assert bool(pop.loc["xi_sd_gpu", "prior_dominated"]) and pop.loc["xi0", "prior"] != pop.loc["xi0", "prior"]  # NaN


def test_an_unseen_gpu_is_labelled_prior_dominated_a_fitted_one_not() -> None:
    fit = _fit()
    new = tau_table(fit, [8], 1.0, gpu="B200", precision="bf16", estimator="centred")
    assert new["prediction_kind"].tolist() == ["population"]
    assert new["prior_dominated"].tolist() == [True] and "xi_sd_gpu" in new["prior_dominated_spreads"].iloc[0]
    assert "prior-dominated" in new.attrs["prior_dominated_note"]
    seen = tau_table(fit, [8], 1.0, gpu="H100", precision="bf16", estimator="centred")
    assert seen["prior_dominated"].tolist() == [False]
