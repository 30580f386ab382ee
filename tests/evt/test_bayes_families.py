"""Families as data (evtsync.evt.families): the bounded Weibull-tail variant is one table entry
plus models/weibull.toml, and it samples, keeps xi < 0 and is listed with the other models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.cli import main
from evtsync.core.errors import InputError, ModelSpecError
from evtsync.evt.families import FAMILIES, family, fixes_xi
from evtsync.evt.spec import load_spec, parse_spec
from tests._lazy import lazy_module

# evtsync modules that import PyMC, PyTensor, xarray or numba: imported on first use, not at collection (issue 48)
evt_fit = lazy_module("evtsync.evt.fit")
evt_model = lazy_module("evtsync.evt.model")


MODELS = Path(__file__).resolve().parents[2] / "models"

# A bounded tail: the GEV with xi = -0.2 has its upper end point at mu + sigma / 0.2 = 3.1.
TRUTH = pd.DataFrame({"gpu": ["H200"], "precision": ["bf16"], "mu": [0.6], "sigma": [0.5], "xi": [-0.2]})


def test_table_entries_say_each_constraint():
    assert set(FAMILIES) == {"gumbel", "frechet", "gev", "weibull"}
    assert (family("weibull").xi_sign, family("frechet").xi_sign, family("gev").xi_sign) == (-1, 1, 0)
    assert not family("gumbel").has_xi and family("gev").allows_additive_xi
    assert not family("weibull").allows_additive_xi
    assert family("weibull").start_xi(0.3) == -0.01 and family("weibull").start_xi(-0.4) == -0.4
    assert fixes_xi("gumbel") and not fixes_xi("weibull") and not fixes_xi("")  # "" : a family not recorded
    with pytest.raises(InputError, match="unknown family 'pareto'"):
        family("pareto")


def test_weibull_spec_needs_a_positive_prior_of_abs_xi_and_no_additive_xi():
    text = (MODELS / "weibull.toml").read_text()
    assert parse_spec(text, "w.toml").family == "weibull"
    with pytest.raises(ModelSpecError, match="xi.prior.dist"):
        parse_spec(text.replace('prior = { dist = "halfnormal", sigma = 0.3 }',
                                'prior = { dist = "normal", mu = 0.0, sigma = 0.3 }'), "w.toml")
    with pytest.raises(ModelSpecError, match="xi.structure"):
        parse_spec(text.replace('structure = "pooled"', 'structure = "additive"'), "w.toml")


def test_weibull_prior_draws_and_initial_point_are_negative():
    spec = load_spec(MODELS / "weibull.toml")
    table = evt_model.simulate_zscore_table(TRUTH, 300, seed=1)
    draws = evt_model.draw_prior(spec, evt_model.prepare_data(table, spec), 500, np.random.default_rng(0))
    assert np.all(draws["xi"] < 0)
    # halfnormal(0.3) of |xi|: the mean of |xi| is 0.3 * sqrt(2 / pi) = 0.239
    assert abs(-draws["xi"].mean() - 0.3 * np.sqrt(2 / np.pi)) < 0.03
    built = evt_model.build_model(spec, evt_model.prepare_data(table, spec))
    # the sampled variable is |xi| (xi = -|xi| is recorded): it starts off zero
    assert float(built.initial_point["xi_abs"]) >= 0.01 and "xi" not in built.initial_point
    assert np.isfinite(built.model.compile_logp()(built.model.initial_point()))


def test_weibull_fit_recovers_a_negative_xi():
    table = evt_model.simulate_zscore_table(TRUTH, 400, seed=3)
    spec = load_spec(MODELS / "weibull.toml")
    tree = evt_fit.fit_table(table, spec, draws=200, tune=200, chains=2, seed=5)
    xi = evt_fit.cell_parameters(tree)["xi"].values.ravel()
    assert np.all(xi < 0)
    # the MLE's asymptotic sd of xi at n = 400 is ~0.04: the posterior mean within 3.5 sd of -0.2
    assert abs(xi.mean() - (-0.2)) < 3.5 * max(xi.std(), 0.03)


def test_models_lists_weibull(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.split() and ln.split()[0] == "weibull")
    assert line.split()[:2] == ["weibull", "weibull"]  # name, family


def test_bayesfit_fit_samples_a_named_model():
    """BayesFit.fit is fit_table wrapped: a shipped model's name resolves, the fit is unsaved, and
    the pooled Gumbel's location is recovered (truth mu = 0.6 from the simulated table)."""
    from evtsync.evt.bayesfit import BayesFit

    table = evt_model.simulate_zscore_table(TRUTH.assign(xi=0.0), 300, seed=4)
    fit = BayesFit.fit(table, "gumbel", draws=100, tune=100, chains=2, seed=2)
    assert isinstance(fit, BayesFit) and fit.path is None and fit.name == "gumbel"
    mu = fit.cell_draws()[0].ravel()
    assert abs(mu.mean() - 0.6) < 4 * max(mu.std(), 0.02)
