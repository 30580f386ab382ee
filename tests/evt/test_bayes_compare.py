"""Chunked PSIS-LOO against ArviZ's own az.loo, ELPD differences and the verdict."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import FitError
from tests._lazy import lazy_module

# evtsync modules that import PyMC, PyTensor, xarray or numba: imported on first use, not at collection (issue 48)
compare = lazy_module("evtsync.evt.compare")
fit = lazy_module("evtsync.evt.fit")
az = lazy_module("arviz")
xr = lazy_module("xarray")
stats = lazy_module("scipy.stats")

CELLS = pd.DataFrame({"cell": ["all"]})


def _tree(z, mu, sigma, xi, family="gev", name="m"):
    draws = {"mu": mu, "sigma": sigma} | ({} if xi is None else {"xi": xi})
    tree = fit.tree_from_draws(draws, CELLS, z, np.zeros(len(z), dtype=int), model_name=name, family=family)
    xi_v = 0.0 if xi is None else xi[..., None]
    ll = stats.genextreme.logpdf(z[None, None, :], -xi_v, loc=mu[..., None], scale=sigma[..., None])
    tree["log_likelihood"] = xr.DataTree(xr.Dataset({"z": (("chain", "draw", "obs"), ll)},
                                                    coords={"chain": tree["posterior"]["chain"].values,
                                                            "draw": tree["posterior"]["draw"].values}))
    return tree


def _posterior(rng, shape, xi_mean=0.1):
    # an approximate posterior of n ~ 300 GEV draws: parameters scattered by their standard errors
    mu = rng.normal(0.0, 0.06, shape)
    sigma = np.exp(rng.normal(0.0, 0.05, shape))
    xi = rng.normal(xi_mean, 0.02, shape)  # keeps every z-score inside the support
    return mu, sigma, xi


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    z = stats.genextreme.rvs(-0.1, size=300, random_state=rng)
    z[:3] = [9.0, 12.0, 15.0]  # far in the tail: large Pareto k for these observations
    return rng, z


def test_chunked_loo_equals_arviz(data):
    rng, z = data
    mu, sigma, xi = _posterior(rng, (2, 500))
    tree = _tree(z, mu, sigma, xi)
    ref = az.loo(tree, pointwise=True, var_name="z")
    ours = compare.loo(tree, chunk_values=7_000)  # chunks of 7 observations
    np.testing.assert_allclose(ours.elpd_i, ref.elpd_i.values, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(ours.pareto_k, ref.pareto_k.values, rtol=1e-8, atol=1e-9)
    assert ours.elpd == pytest.approx(ref.elpd, rel=1e-12)
    assert ours.se == pytest.approx(ref.se, rel=1e-9)
    assert ours.p_loo == pytest.approx(ref.p, rel=1e-8)
    assert ours.good_k == pytest.approx(ref.good_k)
    # the planted tail observations are the most influential; chunking changes nothing
    assert ours.pareto_k[:3].min() > np.quantile(ours.pareto_k[3:], 0.95)
    compiled = compare.loo(tree, threads=2)  # the default path: one compiled pass per observation
    np.testing.assert_allclose(compiled.elpd_i, ref.elpd_i.values, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(compiled.pareto_k, ref.pareto_k.values, rtol=1e-9, atol=1e-12)
    assert compiled.p_loo == pytest.approx(ref.p, rel=1e-9)
    counts = ours.k_counts()
    assert counts["good"] + counts["bad"] + counts["very_bad"] == len(z)
    assert counts["good"] == int(np.sum(ref.pareto_k.values <= ref.good_k))


def test_pointwise_psis_with_one_chain_and_small_sample_matches_arviz():
    rng = np.random.default_rng(3)
    ll = rng.normal(-1.0, 0.3, size=(1, 150, 40)) + rng.standard_t(2, size=(1, 150, 40)) * 0.2
    tree = xr.DataTree.from_dict({
        "posterior": xr.Dataset({"a": (("chain", "draw"), rng.normal(size=(1, 150)))}),
        "log_likelihood": xr.Dataset({"z": (("chain", "draw", "obs"), ll)}),
    })
    ref = az.loo(tree, pointwise=True)
    elpd_i, p_i, k = compare.psis_loo_pointwise(ll.reshape(150, 40), r_eff=1.0)
    from evtsync.evt.compare import _psis_nb, tail_length

    compiled = np.array([_psis_nb(np.ascontiguousarray(ll[0, :, j]), tail_length(150, 1.0), np.empty(150))
                         for j in range(40)])
    np.testing.assert_allclose(compiled[:, 0], ref.elpd_i.values, rtol=1e-10)
    np.testing.assert_allclose(compiled[:, 2], ref.pareto_k.values, rtol=1e-8)
    np.testing.assert_allclose(elpd_i, ref.elpd_i.values, rtol=1e-10)
    np.testing.assert_allclose(k, ref.pareto_k.values, rtol=1e-8)
    assert np.any(k > ref.good_k)  # heavy-tailed weights: the smoothing and the k diagnostic matter here


def test_compare_differences_and_their_standard_error(data):
    rng, z = data
    mu, sigma, xi = _posterior(rng, (2, 300))
    gev_tree = _tree(z, mu, sigma, xi, name="gev")
    gum_tree = _tree(z, mu, sigma, None, family="gumbel", name="gumbel")
    table, words = compare.compare_fits([gum_tree, gev_tree])
    a = az.loo(gev_tree, pointwise=True, var_name="z")
    b = az.loo(gum_tree, pointwise=True, var_name="z")
    best, other = (a, b) if a.elpd > b.elpd else (b, a)
    diff_i = best.elpd_i.values - other.elpd_i.values
    assert table["elpd_diff"].iloc[1] == pytest.approx(best.elpd - other.elpd, rel=1e-9)
    assert table["diff_se"].iloc[1] == pytest.approx(np.sqrt(len(z) * np.var(diff_i, ddof=1)), rel=1e-9)
    assert table["elpd_diff"].iloc[0] == 0 and (table["elpd_diff"] >= 0).all()
    assert words.splitlines()[0].startswith(("gev (GEV) preferred", "gumbel (Gumbel) preferred", "no clear"))


def test_verdict_words():
    table = pd.DataFrame({"model": ["frechet", "gumbel"], "family": ["frechet", "gumbel"], "elpd_diff": [0.0, 38.0],
                          "diff_se": [0.0, 9.0], "k_good": [10, 10], "k_bad": [0, 0], "k_very_bad": [0, 0],
                          "converged": [True, True]})
    assert compare.verdict(table) == "frechet (Fréchet) preferred over gumbel (Gumbel) by ΔELPD = 38.0 ± 9.0 (4.2 SE)"
    table.loc[1, "elpd_diff"] = 10.0
    assert compare.verdict(table).startswith("no clear preference between frechet (Fréchet) and gumbel (Gumbel)")
    table.loc[1, "converged"] = False
    assert "gumbel is NOT CONVERGED" in compare.verdict(table)


def test_compare_refuses_different_data(data):
    rng, z = data
    mu, sigma, xi = _posterior(rng, (1, 100))
    with pytest.raises(FitError, match="different z-scores"):
        compare.compare_fits([_tree(z, mu, sigma, xi), _tree(z + 0.1, mu, sigma, xi)])
    with pytest.raises(FitError, match="at least two"):
        compare.compare_fits([_tree(z, mu, sigma, xi)])


def test_identical_fits_are_named_not_preferred(data):
    _, z = data
    mu, sigma, xi = _posterior(np.random.default_rng(3), (2, 200))
    a, b = _tree(z, mu, sigma, xi, name="a"), _tree(z, mu, sigma, xi, name="b")
    table, words = compare.compare_fits([a, b])
    assert table["diff_se"].iloc[1] == 0.0
    assert "identical pointwise ELPD" in words and "preferred" not in words and "inf" not in words


def test_compare_out_and_the_run_table_are_one_table(data, tmp_path, capsys):
    """`evtsync compare --out` and a run's tables/compare.parquet are built in one place (issue 31):
    the same columns and values; n_bad_k counts the Pareto k above 0.7 that ArviZ reports."""
    from evtsync.cli import main
    from evtsync.core.tableio import read_table
    from evtsync.evt.bayesfit import save_fit
    from evtsync.evt.compare import COMPARE_COLUMNS
    from evtsync.pipeline.stages import compare_fits as run_compare_table

    rng, z = data
    mu, sigma, xi = _posterior(rng, (2, 200))
    trees = {"gev": _tree(z, mu, sigma, xi, name="gev"), "gumbel": _tree(z, mu, sigma, None, family="gumbel",
                                                                          name="gumbel")}
    paths = [str(save_fit(tree, tmp_path / f"{name}.nc")) for name, tree in trees.items()]
    out = tmp_path / "compare.csv"
    main(["compare", *paths, "-o", str(out)])
    capsys.readouterr()
    written = read_table(out)
    in_run, _ = run_compare_table(trees)
    assert list(written.columns) == list(in_run.columns) == COMPARE_COLUMNS
    pd.testing.assert_frame_equal(written, in_run, check_dtype=False)
    ref = az.loo(trees[written["model"].iloc[0]], pointwise=True, var_name="z")
    assert written["n_bad_k"].iloc[0] == int((ref.pareto_k.values > 0.7).sum())
