"""The point estimate as a first-class column (issue 29): ``{quantity}_point{unit}`` and ``point_estimate``.

The ranktail estimator declares its posterior median as its point, the GEV fits their posterior
mean. Expected values come from the draws themselves (``np.median``/``np.mean`` of the fit's
E[max_n u] draws times b), closed forms (GEV tau, Hockney's B*) and hand-built tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.blocks.zscores import pooled_zscores
from evtsync.core.errors import InputError
from evtsync.evt.fit import tree_from_draws
from evtsync.evt.ranktail import RankTailFit
from evtsync.predict.tables import (
    PointFit,
    bandwidth_table,
    flops_scaling_table,
    given_tax_bandwidth_table,
    point_column,
    point_label,
    point_labels,
    point_summary,
    predicted_vs_measured,
    tau_table,
)

M = 4
EULER = 0.5772156649015329
S_BYTES = 2**28
ALPHA_US = 5.0


def _times(x: np.ndarray) -> pd.DataFrame:
    """Per-rank block times of one identity from an array (instance, sample, rank)."""
    j, s, r = np.meshgrid(*(np.arange(d) for d in x.shape), indexing="ij")
    return pd.DataFrame({"pg": "0", "block": "b", "instance": j.ravel(), "sample": s.ravel(),
                         "rank": (M * s + r).ravel(), "busy_us": x.ravel(), "gpu": "H100", "precision": "bf16",
                         "position": 0, "signature": "gemm", "index": 2 * j.ravel(), "n_kernels": 2,
                         "n_gemm_kernels": 1})


@pytest.fixture(scope="module")
def ranktail() -> tuple[RankTailFit, float]:
    """A ranktail fit of Student-t5 ranks (a heavy tail: a right-skewed posterior of E[max_n u]),
    999 draws (odd, so the median is one draw), and the cell's b."""
    from scipy import stats

    rng = np.random.default_rng(29)
    x = 500.0 + 10.0 * stats.t(5).rvs(size=(160, 2, M), random_state=rng)
    table, _ = pooled_zscores(_times(x), m=M)
    return RankTailFit.from_table(table, draws=999, seed=3), float(table["block_sd_us"].iloc[0])


def _gev_tree(mu: np.ndarray) -> object:
    cells = pd.DataFrame({"cell": ["H100|bf16"], "gpu": ["H100"], "precision": ["bf16"]})
    shape = mu.shape
    return tree_from_draws({"mu": mu, "sigma": np.full(shape, 0.5), "xi": np.zeros(shape)}, cells,
                           np.linspace(0, 2, 30), np.zeros(30, int))


def test_ranktail_declares_the_median_and_other_fits_the_mean(ranktail) -> None:
    fit, _ = ranktail
    assert point_summary(fit) == "median"
    assert point_summary(PointFit(0.8, 0.5)) == "mean"
    assert point_label("semi-parametric", "median") == "posterior median"
    assert point_label("bayes") == "posterior mean" and point_label("point") == "given value"


def test_ranktail_tau_point_is_the_median_of_its_draws(ranktail) -> None:
    fit, b = ranktail
    ns = [8, 4096]
    tau = tau_table(fit, ns, b, M, estimator="ranktail")
    draws = b * np.asarray(fit.expected_max(ns, [0]), dtype=float)[:, 0, :]  # (draw, n), straight from the fit
    for j, row in enumerate(tau.itertuples()):
        assert row.tau_point_us == row.tau_median_us == pytest.approx(float(np.median(draws[:, j])), rel=1e-12)
        assert row.tau_mean_us == pytest.approx(float(np.mean(draws[:, j])), rel=1e-12)
    assert (tau["point_estimate"] == "posterior median").all()
    # the skew the median avoids: at n = 4096 the heavy tail's posterior mean lies above its median
    assert tau["tau_mean_us"].iloc[1] > tau["tau_point_us"].iloc[1]


def test_gev_tau_point_is_the_posterior_mean() -> None:
    rng = np.random.default_rng(1)
    mu = rng.lognormal(-0.5, 0.6, size=(2, 400, 1))  # a skewed posterior: its mean and median differ
    tau = tau_table(_gev_tree(mu), [16], 10.0, M).iloc[0]
    closed = 10.0 * (float(mu.mean()) + 0.5 * (np.log(16 / M) + EULER))  # Gumbel: linear in mu
    assert tau["tau_point_us"] == tau["tau_mean_us"] == pytest.approx(closed, rel=1e-12)
    assert tau["tau_point_us"] != pytest.approx(tau["tau_median_us"], rel=1e-3)
    assert tau["point_estimate"] == "posterior mean"


def test_ranktail_bstar_point_is_bstar_of_the_median_tau(ranktail) -> None:
    """B* falls as tau grows, so the median of the B* draws is B* at the median tau (Hockney's
    closed form; an odd number of draws makes both medians single draws)."""
    fit, b = ranktail
    ns = [8, 512]
    table = bandwidth_table(fit, ["ring"], ns, ALPHA_US, S_BYTES, b, eps=-0.5, m=M, estimator="ranktail")
    for row in table.itertuples():
        p, q = 2.0 * (row.n - 1), 2.0 * (row.n - 1) / row.n
        floor = p * ALPHA_US + row.tau_point_us
        assert row.tau_point_us == row.tau_median_us
        assert row.bstar_point_gbps == pytest.approx(q * S_BYTES / floor * 1e6 / 1e9, rel=1e-12)
        assert row.bstar_point_gbps == row.bstar_median_gbps != row.bstar_mean_gbps
        assert row.reduction_point == pytest.approx(row.tau_point_us / floor, rel=1e-12)
    assert (table["point_estimate"] == "posterior median").all()
    scaling = flops_scaling_table(fit, ["ring"], [512], ALPHA_US, S_BYTES, b, [1.0, 4.0], m=M, estimator="ranktail")
    assert (scaling["growth_point"] == scaling["growth_median"]).all()


def test_ranktail_predicted_vs_measured_ratio_is_point_over_measured(ranktail) -> None:
    fit, b = ranktail
    measured = pd.DataFrame({"workload": ["w"] * 3, "gpu": ["H100"] * 3, "precision": ["bf16"] * 3,
                             "n_ranks": [64] * 3, "block_sd_us": [b] * 3, "mean_delay_us": [20.0, 22.0, 24.0]})
    row = predicted_vs_measured(fit, measured, M, estimator="ranktail").iloc[0]
    median = b * float(np.median(np.asarray(fit.expected_max([64], [0]), dtype=float)))
    assert row["predicted_point_us"] == pytest.approx(median, rel=1e-12)
    assert row["ratio"] == pytest.approx(median / 22.0, rel=1e-12)
    assert row["point_estimate"] == "posterior median"


def test_a_given_value_is_its_own_point() -> None:
    table = given_tax_bandwidth_table(300.0, ["full"], [8], ALPHA_US, S_BYTES)
    assert (table["tau_point_us"] == 300.0).all() and (table["point_estimate"] == "given value").all()
    point = tau_table(PointFit(0.8, 0.5), [8], 20.0, M).iloc[0]
    assert point["tau_point_us"] == pytest.approx(20.0 * (0.8 + 0.5 * (np.log(2) + EULER)), rel=1e-12)
    assert point["point_estimate"] == "given value"


def test_an_older_table_without_point_columns_reads_its_mean() -> None:
    rng = np.random.default_rng(2)
    tau = tau_table(_gev_tree(rng.lognormal(-0.5, 0.6, size=(1, 300, 1))), [8, 64], 10.0, M)
    old = tau.drop(columns=[c for c in tau.columns if "_point" in c] + ["point_estimate"])
    assert point_column(old, "tau", "_us").tolist() == old["tau_mean_us"].tolist()
    assert point_labels(old).tolist() == ["posterior mean"] * 2
    with pytest.raises(KeyError, match="tau_point_us nor tau_mean_us"):
        point_column(old.drop(columns=["tau_mean_us"]), "tau", "_us")


def test_a_fit_naming_an_unknown_point_is_refused() -> None:
    fit = PointFit(0.8, 0.5)
    fit.point_estimate = "mode"  # type: ignore[attr-defined]
    with pytest.raises(InputError, match="point_estimate 'mode'"):
        tau_table(fit, [8], 1.0, M)
