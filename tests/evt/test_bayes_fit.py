"""Sampling the models: recovery of known parameters, the fit file, reproducibility, flags.

Kept small for the default run (a few hundred z-scores per cell, short chains). The 90%
interval recovery and the coverage study are in ``test_bayes_slow.py`` (``-m slow``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.cli import main
from evtsync.core.errors import FitError, InputError
from evtsync.evt import gev
from evtsync.evt.spec import load_spec
from tests._lazy import lazy_module
from tests.conftest import DATA as SHARED_DATA  # the public data copied into tests/data/public

# evtsync modules that import PyMC, PyTensor, xarray or numba: imported on first use, not at collection (issue 48)
evt_fit = lazy_module("evtsync.evt.fit")
evt_model = lazy_module("evtsync.evt.model")
stats = lazy_module("scipy.stats")

MODELS = Path(__file__).resolve().parents[2] / "models"

# Additive truth: xi = xi0 + delta_gpu + delta_precision with some cells at 0, some at 0.15,
# one negative.
TRUTH = pd.DataFrame({
    "gpu": ["H200", "H200", "B200", "B200"],
    "precision": ["bf16", "fp32", "bf16", "fp32"],
    "mu": [0.80, 0.75, 0.70, 0.72],
    "sigma": [0.50, 0.45, 0.40, 0.42],
    "xi": [0.15, 0.0, 0.0, -0.15],
})


@pytest.fixture(scope="module")
def hier_fit(tmp_path_factory):
    table = evt_model.simulate_zscore_table(TRUTH, 400, seed=11)
    spec = load_spec(MODELS / "gev-hier-gpu-precision.toml")
    tree = evt_fit.fit_table(table, spec, draws=300, tune=300, chains=2, seed=7, source="sim", source_sha256="abc",
                     command="pytest")
    path = evt_fit.save_fit(tree, tmp_path_factory.mktemp("fits") / "hier")
    return table, tree, path


def test_recovery_within_posterior_uncertainty(hier_fit):
    """Each of the 12 cell parameters within 3.5 posterior sd of the truth.

    With a correct posterior, (mean - truth)/sd is about standard normal: the chance that any
    of 12 exceeds 3.5 is 12 * 4.7e-4 = 0.6%.
    """
    _, tree, _ = hier_fit
    params = evt_fit.cell_parameters(tree)
    for _, row in TRUTH.iterrows():
        cell = f"{row['gpu']}|{row['precision']}"
        for name in ("mu", "sigma", "xi"):
            draws = params[name].sel(cell=cell).values.ravel()
            zscore = (draws.mean() - row[name]) / draws.std()
            assert abs(zscore) < 3.5, (cell, name, draws.mean(), row[name])
    # the data distinguish xi = 0.15 from xi = -0.15 clearly (posterior sd ~ 0.03)
    xi = params["xi"].mean(("chain", "draw"))
    assert xi.sel(cell="H200|bf16") - xi.sel(cell="B200|fp32") > 0.15


def test_fit_file_is_self_describing_and_loads_back(hier_fit):
    table, tree, path = hier_fit
    back = evt_fit.load_fit(path.parent)
    for group in ("posterior", "sample_stats", "observed_data", "cells", "log_likelihood", "prior_predictive_check"):
        assert group in back.children
    attrs = back.attrs
    assert attrs["input_sha256"] == "abc" and attrs["seed"] == 7 and attrs["command"] == "pytest"
    assert "xi0" in attrs["model_spec_text"] and json.loads(attrs["package_versions"])["pymc"]
    # 400 per cell, 800 per level, 4 x 400 / 4 = 400 for the cell coefficient: below
    # centred_min_obs = 1000; mu deviations centred from 100 per cell
    assert json.loads(attrs["xi_parametrization"]) == {"mu": "centred", "gpu": "noncentred",
                                                       "precision": "noncentred", "cell": "noncentred"}
    assert "posterior_predictive_check" in back.children and attrs["posterior_predictive"]
    assert attrs["converged"] in (0, 1) and "R-hat" in attrs["convergence"]
    # PSIS-LOO's relative efficiency, recorded for compare (issue 30 item 6): ArviZ's on the posterior
    import arviz_stats

    ess = arviz_stats.ess(back, method="mean")
    n_samples = back["posterior"].sizes["chain"] * back["posterior"].sizes["draw"]
    assert attrs["loo_r_eff"] == pytest.approx(np.mean(np.hstack([ess[v].values.ravel() for v in ess.data_vars]))
                                               / n_samples, rel=1e-12)
    assert attrs["target_accept"] == 0.99  # the spec's "auto" at 1,600 z-scores reached the sampler
    accept = tree["sample_stats"]["mean_tree_accept"].values  # nutpie adapted to it
    assert accept.mean() > 0.9, accept.mean()
    np.testing.assert_array_equal(back["posterior"]["xi"].values, tree["posterior"]["xi"].values)
    # observed data: the input z-scores, each with its original row
    obs = back["observed_data"]
    np.testing.assert_array_equal(np.sort(obs["row"].values), np.arange(len(table)))
    np.testing.assert_array_equal(obs["z"].values, table["z"].to_numpy()[obs["row"].values])
    # stored pointwise log-likelihood equals an independent scipy computation
    params = evt_fit.cell_parameters(back)
    i = 123
    c = int(obs["cell"].values[i])
    ref = stats.genextreme.logpdf(obs["z"].values[i], -params["xi"].values[..., c], loc=params["mu"].values[..., c],
                                  scale=params["sigma"].values[..., c])
    np.testing.assert_allclose(back["log_likelihood"]["z"].values[..., i], ref, rtol=1e-9)
    # ... and so does every z-score at one draw (the log-likelihood is computed cell by cell)
    cells = obs["cell"].values
    ref_all = stats.genextreme.logpdf(obs["z"].values, -params["xi"].values[1, 7, cells],
                                      loc=params["mu"].values[1, 7, cells], scale=params["sigma"].values[1, 7, cells])
    np.testing.assert_allclose(back["log_likelihood"]["z"].values[1, 7], ref_all, rtol=1e-9)


def test_initial_point_is_inside_support_and_off_zero():
    table = evt_model.simulate_zscore_table(TRUTH, 300, seed=2)
    for name in ("gev-hier-gpu-precision", "frechet"):
        spec = load_spec(MODELS / f"{name}.toml")
        built = evt_model.build_model(spec, evt_model.prepare_data(table, spec))
        logp = built.model.compile_logp()(built.model.initial_point())
        assert np.isfinite(logp), name
        for key in ("xi", "xi0"):
            if key in built.initial_point:
                assert np.all(np.abs(built.initial_point[key]) >= 1e-3)


def test_centred_chosen_for_large_levels_and_overridable():
    table = evt_model.simulate_zscore_table(TRUTH, [1200, 1200, 1200, 50], seed=3)
    spec = load_spec(MODELS / "gev-hier-gpu-precision.toml")
    built = evt_model.build_model(spec, evt_model.prepare_data(table, spec))
    # precision fp32 has 1250 z-scores, bf16 2400; gpu B200 has 1250, H200 2400: all >= 1000;
    # mu sees the 50-z-score cell (< 100) and the cell coefficient has 3650 / 4 = 912 effective
    # z-scores (< 1000): non-centred
    assert built.parametrization == {"mu": "noncentred", "gpu": "centred", "precision": "centred",
                                     "cell": "noncentred"}
    assert "xi_delta_gpu" in built.model.named_vars and "xi_delta_gpu_raw" not in built.model.named_vars
    from dataclasses import replace

    forced = replace(spec, xi=replace(spec.xi, parametrization="noncentred"))
    assert evt_model.build_model(forced, evt_model.prepare_data(table, forced)).parametrization["gpu"] == "noncentred"


def test_same_seed_same_numbers_and_short_chain_flagged(tmp_path):
    table = evt_model.simulate_zscore_table(TRUTH.iloc[:1], 200, seed=4)
    spec = load_spec(MODELS / "gumbel.toml")
    a = evt_fit.fit_table(table, spec, draws=40, tune=40, chains=2, seed=3)
    b = evt_fit.fit_table(table, spec, draws=40, tune=40, chains=2, seed=3)
    np.testing.assert_array_equal(a["posterior"]["mu"].values, b["posterior"]["mu"].values)
    # 80 draws cannot reach a bulk ESS of 400: the fit must say it is not converged
    assert not evt_fit.is_converged(a)
    assert "NOT CONVERGED" in a.attrs["convergence"]
    assert not evt_fit.is_converged(evt_fit.load_fit(evt_fit.save_fit(a, tmp_path / "g")))


def test_pymc_sampler_fallback_gives_the_same_posterior():
    table = evt_model.simulate_zscore_table(TRUTH.iloc[:1], 300, seed=5)
    spec = load_spec(MODELS / "gev.toml")
    tree = evt_fit.fit_table(table, spec, draws=200, tune=200, chains=1, seed=1, sampler="pymc", target_accept=0.9)
    assert tree.attrs["sampler"] == "pymc" and tree.attrs["target_accept"] == 0.9
    xi = tree["posterior"]["xi"].values.ravel()
    # maximum likelihood with its asymptotic sd ~ 0.045 at n = 300: posterior within 3 sd of 0.15
    assert abs(xi.mean() - 0.15) < 3 * max(xi.std(), 0.03)


def test_bad_input_is_refused(tmp_path):
    spec = load_spec(MODELS / "gev-hier-gpu-precision.toml")
    with pytest.raises(InputError, match="missing column"):
        evt_model.prepare_data(pd.DataFrame({"y": [1.0, 2.0, 3.0]}), spec, "t.csv")
    table = evt_model.simulate_zscore_table(TRUTH, 50, seed=6)
    table.loc[:4, "y"] = np.nan
    data = evt_model.prepare_data(table, spec)
    assert data.n_skipped == 5 and len(data.z) == len(table) - 5
    with pytest.raises(FitError, match="no such fit"):
        evt_fit.load_fit(tmp_path / "nothing")
    with pytest.raises(InputError, match="sampler"):
        evt_fit.fit_table(table, spec, sampler="numpyro")


def test_cli_fit_writes_the_file_and_reports(tmp_path, capsys):
    table = evt_model.simulate_zscore_table(TRUTH.iloc[:1], 150, seed=8)
    data = tmp_path / "z.csv"
    table.to_csv(data, index=False)
    out = tmp_path / "fit"
    rc = main(["-q", "fit", str(data), "--model", str(MODELS / "gumbel.toml"), "--out", str(out),
               "--draws", "30", "--tune", "30", "--chains", "2", "--seed", "1", "--json"])
    record = json.loads(capsys.readouterr().out)
    assert rc == 1 and record["converged"] is False  # 60 draws: ESS < 400
    assert record["n_obs"] == 150 and {p["parameter"] for p in record["parameters"]} == {"mu", "sigma"}
    tree = evt_fit.load_fit(out)
    assert tree.attrs["input_sha256"] and tree.attrs["seed"] == 1
    # the log-likelihood of the stored posterior is the GEV density at the stored parameters
    ll = tree["log_likelihood"]["z"].values
    post = tree["posterior"]
    np.testing.assert_allclose(ll[0, 0, :3], gev.logpdf(tree["observed_data"]["z"].values[:3],
                                                           float(post["mu"][0, 0]), float(post["sigma"][0, 0]), 0.0))


WEAK_GEV = """
name = "gev-weak"
family = "gev"
description = "pooled GEV with weak priors, for the classic data sets"
[data]
column = "z"
[mu]
prior = { dist = "normal", mu = 0.0, sigma = 100.0 }
[sigma]
prior = { dist = "halfnormal", sigma = 100.0 }
[xi]
prior = { dist = "uniform", lower = -1.0, upper = 1.0 }
"""

# Coles (2001), Port Pirie annual maximum sea levels: GEV MLE and standard errors.
PORT_PIRIE_MLE = {"mu": (3.87, 0.028), "sigma": (0.198, 0.020), "xi": (-0.050, 0.098)}


def test_port_pirie_posterior_agrees_with_published_mle():
    """With weak priors and n = 65 the posterior is close to the likelihood: its median lies
    within half a standard error of the MLE (the rest is posterior skewness, O(n^-1/2) of an
    SE) and its sd within 30% of the asymptotic standard error."""
    from evtsync.evt.spec import parse_spec

    z = pd.read_csv(SHARED_DATA / "evt" / "portpirie.csv")["SeaLevel"].to_numpy()
    tree = evt_fit.fit_table(pd.DataFrame({"z": z}), parse_spec(WEAK_GEV, "weak.toml"), draws=2000, tune=500, chains=2,
                     seed=1)
    assert tree.attrs["sigma_support_transform"] == 1  # n = 65: sampled above the support bound
    assert evt_fit.is_converged(tree), tree.attrs["convergence"]
    for name, (mle, se) in PORT_PIRIE_MLE.items():
        draws = tree["posterior"][name].values.ravel()
        assert abs(np.median(draws) - mle) < 0.5 * se, (name, np.median(draws), mle)
        assert abs(draws.std() / se - 1) < 0.3, (name, draws.std(), se)


def test_prior_predictive_check_flags_priors_that_exclude_the_data():
    from dataclasses import replace

    from evtsync.evt.model import prior_predictive_check
    from evtsync.evt.spec import Prior

    table = evt_model.simulate_zscore_table(TRUTH, 500, seed=9)
    spec = load_spec(MODELS / "gev-hier-gpu-precision.toml")
    data = evt_model.prepare_data(table, spec)
    weak = prior_predictive_check(spec, data, draws=300)
    assert weak["inside"].all() and len(weak) == 4 * 4
    # a location prior far from the data (z-score medians are ~0.9): every median is flagged
    narrow = replace(spec, mu=replace(spec.mu, prior=Prior("normal", {"mu": 5.0, "sigma": 0.1})))
    bad = prior_predictive_check(narrow, data, draws=300)
    assert not bad[bad["quantile"] == 0.5]["inside"].any()
    assert (bad[bad["quantile"] == 0.5]["share_below"] < 0.01).all()


def test_compare_aligns_pooled_and_cell_sorted_fits_by_input_row(hier_fit):
    """The hierarchical fit stores z sorted by cell, the pooled one in input order: the LOO
    differences must pair each observation with itself."""
    import arviz as az

    from evtsync.evt.compare import compare_fits

    table, hier, _ = hier_fit
    pooled = evt_fit.fit_table(table, load_spec(MODELS / "gumbel.toml"), draws=150, tune=150, chains=2, seed=2)
    assert not np.array_equal(hier["observed_data"]["row"].values, pooled["observed_data"]["row"].values)
    result, _ = compare_fits([pooled, hier])
    a = az.loo(hier, pointwise=True, var_name="z")
    b = az.loo(pooled, pointwise=True, var_name="z")
    ea = pd.Series(a.elpd_i.values, index=hier["observed_data"]["row"].values).sort_index()
    eb = pd.Series(b.elpd_i.values, index=pooled["observed_data"]["row"].values).sort_index()
    diff = (ea - eb).to_numpy() if a.elpd > b.elpd else (eb - ea).to_numpy()
    assert result["diff_se"].iloc[1] == pytest.approx(np.sqrt(len(diff) * np.var(diff, ddof=1)), rel=1e-8)
    assert result["elpd_diff"].iloc[1] == pytest.approx(abs(a.elpd - b.elpd), rel=1e-8)
