"""The one MLE-per-cell table (with the likelihood-ratio test) and its fit object.

Expected values come from scipy's own GEV/Gumbel log densities at the table's estimates,
from the row counts written here, and from the normal approximation's definition.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.evt.mlefit import MleCellFit, mle_cell_table
from tests._lazy import lazy_module

stats = lazy_module("scipy.stats")


def _table() -> pd.DataFrame:
    rng = np.random.default_rng(4)
    parts = [pd.DataFrame({"gpu": "H200", "precision": "bf16",
                           "z": stats.genextreme.rvs(-0.2, loc=0.8, scale=0.5, size=600, random_state=rng)}),
             pd.DataFrame({"gpu": "A100", "precision": "fp32", "z": rng.gumbel(0.7, 0.4, size=400)}),
             pd.DataFrame({"gpu": "B200", "precision": "bf16", "z": rng.gumbel(size=10)})]  # too few
    return pd.concat(parts, ignore_index=True)


def test_table_rows_likelihoods_and_test() -> None:
    z = _table()
    t = mle_cell_table(z, level=0.9)
    assert set(t["cell"]) == {"all|all", "H200|bf16", "A100|fp32", "B200|bf16"}
    small = t[t["cell"] == "B200|bf16"]
    assert len(small) == 1 and "fewer than 20" in small["note"].iloc[0] and small["n"].iloc[0] == 10
    assert int(t.loc[(t["cell"] == "all|all") & (t["family"] == "gev"), "n"].iloc[0]) == 1010
    for cell, sub in z.groupby(["gpu", "precision"]):
        label = "|".join(cell)
        rows = t[t["cell"] == label].set_index("family")
        if label == "B200|bf16":
            continue
        x = sub["z"].to_numpy()
        gev, gum = rows.loc["gev"], rows.loc["gumbel"]
        ll_gev = stats.genextreme.logpdf(x, -gev["xi"], gev["mu"], gev["sigma"]).sum()
        ll_gum = stats.gumbel_r.logpdf(x, gum["mu"], gum["sigma"]).sum()
        assert gev["loglik"] == pytest.approx(ll_gev, rel=1e-9)
        assert gum["loglik"] == pytest.approx(ll_gum, rel=1e-9)
        assert gev["lrt_deviance"] == pytest.approx(2 * (ll_gev - ll_gum), abs=1e-6)
        assert gev["lrt_pvalue"] == pytest.approx(stats.chi2.sf(gev["lrt_deviance"], 1))
        assert gev["xi_lo"] < gev["xi"] < gev["xi_hi"] and gev["level"] == 0.9
    # xi = -0.2 in H200 is detected; the Gumbel cell is not rejected at 1%
    assert t.loc[(t["cell"] == "H200|bf16") & (t["family"] == "gev"), "lrt_pvalue"].iloc[0] < 1e-3
    assert t.loc[(t["cell"] == "A100|fp32") & (t["family"] == "gev"), "lrt_pvalue"].iloc[0] > 0.01


def test_fit_object_draws_follow_the_normal_approximation() -> None:
    t = mle_cell_table(_table())
    fit = MleCellFit(t, "gev", n_draws=20000, seed=1)
    assert fit.kind == "mle" and fit.name == "mle-gev" and fit.converged
    assert list(fit.cells["cell"]) == ["A100|fp32", "H200|bf16"]  # pooled and unfitted cells left out
    mu, sigma, xi = fit.cell_draws()
    assert mu.shape == (20000, 2) and (sigma > 0).all()
    rows = t[(t["family"] == "gev") & t["cell"].isin(["A100|fp32", "H200|bf16"])].set_index("cell")
    for c, label in enumerate(fit.cells["cell"]):
        assert xi[:, c].mean() == pytest.approx(rows.loc[label, "xi"], abs=4 * rows.loc[label, "xi_se"] / 141)
        assert xi[:, c].std() == pytest.approx(rows.loc[label, "xi_se"], rel=0.03)
        assert mu[:, c].std() == pytest.approx(rows.loc[label, "mu_se"], rel=0.03)
    gumbel = MleCellFit(t, "gumbel", n_draws=100)
    assert (gumbel.cell_draws()[2] == 0).all()


def test_a_boundary_fit_is_flagged_in_the_table() -> None:
    """Six values whose GEV likelihood rises to xi = -1 (a bounded parent, seed 2; the same sample
    as tests/evt/test_mle.py): the GEV row says boundary, not converged, and why; the fit object
    reports the cell as not converged."""
    z = pd.DataFrame({"gpu": "H200", "precision": "bf16",
                      "z": stats.genextreme.rvs(0.3, size=6, random_state=2)})
    t = mle_cell_table(z, min_n=6, pooled=False)
    gev = t[t["family"] == "gev"].iloc[0]
    assert bool(gev["boundary"]) and not bool(gev["converged"]) and "xi reached -1" in gev["note"]
    assert not bool(t[t["family"] == "gumbel"].iloc[0]["boundary"])
    fit = MleCellFit(t, "gev")
    assert not fit.converged and "H200|bf16" in fit.convergence_note
