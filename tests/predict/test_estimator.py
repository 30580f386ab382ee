"""The centred estimator of tau(n) (docs/methodology.md, "Predicting tau(n)") against truths
computed outside the package: a hand count of y, and the exact mean straggler delay of normal
ranks by numerical integration."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.blocks.zscores import pooled_zscores
from evtsync.core.errors import InputError
from evtsync.evt.mlefit import MleCellFit, mle_cell_table
from evtsync.predict.tables import check_estimator, tau_table
from tests._lazy import lazy_module

integrate = lazy_module("scipy.integrate")
stats = lazy_module("scipy.stats")

M = 4


def _times(x: np.ndarray) -> pd.DataFrame:
    """Rows of per-rank block times for an array (instance, sample, rank) of one block identity."""
    rows = []
    for j, s, r in np.ndindex(x.shape):
        rows.append({"pg": "0", "block": "b", "instance": j, "sample": s, "rank": M * s + r, "busy_us": x[j, s, r],
                     "gpu": "H100", "precision": "bf16", "position": 0, "signature": "gemm", "index": 2 * j,
                     "n_kernels": 2, "n_gemm_kernels": 1})
    return pd.DataFrame(rows)


def test_y_is_the_sample_maximum_from_the_identity_mean_in_pooled_sds() -> None:
    # two instances of one 4-rank sample, by hand: means 2.5 and 6.5, overall mean 4.5;
    # squared deviations 5 + 5 = 10 over 2·3 dof: s = sqrt(10/6)
    x = np.array([[[1.0, 2.0, 3.0, 4.0]], [[5.0, 6.0, 7.0, 8.0]]])
    table, _ = pooled_zscores(_times(x), m=M)
    s = np.sqrt(10 / 6)
    assert table["y"].tolist() == pytest.approx([(4 - 4.5) / s, (8 - 4.5) / s])
    assert table["z"].tolist() == pytest.approx([(4 - 2.5) / s, (8 - 6.5) / s])
    # sample means 2.5 and 6.5: variance 8, times m / s² = 4·8/(10/6)
    assert table["mean_var_ratio"].iloc[0] == pytest.approx(4 * 8 / (10 / 6))


def _normal_delay(n: int, sd: float) -> float:
    """E[max_n X] - E[X] for X ~ Normal(·, sd), integrated (independent of the package)."""
    upper = integrate.quad(lambda v: 1 - stats.norm.cdf(v) ** n, 0, 12)[0]
    lower = integrate.quad(lambda v: stats.norm.cdf(v) ** n, -12, 0)[0]
    return sd * (upper - lower)


@pytest.fixture(scope="module")
def normal_ranks() -> tuple[pd.DataFrame, float]:
    rng = np.random.default_rng(7)
    x = 1000.0 + 20.0 * rng.standard_normal((800, 2, M))  # 800 instances of an 8-rank group
    table, _ = pooled_zscores(_times(x), m=M)
    return table, float(table["block_sd_us"].iloc[0])


def test_centred_estimator_meets_the_true_mean_straggler_delay_of_normal_ranks(normal_ranks) -> None:
    table, b = normal_ranks
    fit = MleCellFit(mle_cell_table(table, (), column="y"), "gev")
    tau = tau_table(fit, [4, 8, 64, 512], b, M)
    assert (tau["estimator"] == "centred").all()
    for row in tau.itertuples():
        truth = _normal_delay(row.n, 20.0)
        assert row.tau_mean_us / truth == pytest.approx(1.0, abs=0.05), row.n
        assert row.tau_lo_us <= truth <= row.tau_hi_us, row.n


def test_paper_estimator_is_biased_low_beyond_m_and_labelled(normal_ranks) -> None:
    table, b = normal_ranks
    fit = MleCellFit(mle_cell_table(table, (), column="z"), "gev")
    tau = tau_table(fit, [4, 64], b, M, estimator="paper").set_index("n")
    assert (tau["estimator"] == "paper").all() and "biased low" in tau.attrs["estimator"]
    assert tau.loc[4, "tau_mean_us"] / _normal_delay(4, 20.0) == pytest.approx(1.0, abs=0.05)
    assert tau.loc[64, "tau_mean_us"] / _normal_delay(64, 20.0) < 0.95  # the paper's bias (~12% at n = 64)


def test_a_fit_of_the_other_column_is_refused_with_what_to_do(normal_ranks) -> None:
    table, _ = normal_ranks
    z_fit = MleCellFit(mle_cell_table(table, (), column="z"), "gev")
    y_fit = MleCellFit(mle_cell_table(table, (), column="y"), "gev")
    with pytest.raises(InputError, match="estimator paper"):
        check_estimator(z_fit, "centred")
    with pytest.raises(InputError, match="column = 'z'"):
        check_estimator(y_fit, "paper")
    with pytest.raises(InputError, match="expected one of"):
        check_estimator(y_fit, "other")


def test_a_z_table_without_y_says_to_rerun_blocks(normal_ranks) -> None:
    from evtsync.evt.model import prepare_data
    from evtsync.evt.spec import load_spec

    table, _ = normal_ranks
    spec = load_spec("models/gev.toml")
    with pytest.raises(InputError, match="(?i)rerun `evtsync blocks`"):
        prepare_data(table.drop(columns=["y"]), spec)


def test_a_drifting_block_mean_is_flagged_a_stationary_one_not() -> None:
    from evtsync.blocks.zscores import drifting_identities

    rng = np.random.default_rng(3)
    steady = 1000.0 + 20.0 * rng.standard_normal((300, 1, M))
    drift = steady + np.linspace(0, 200, 300)[:, None, None]  # the whole block slows by 10 sd over the run
    assert drifting_identities(pooled_zscores(_times(steady), m=M)[0]).empty
    flagged = drifting_identities(pooled_zscores(_times(drift), m=M)[0])
    assert flagged["block"].tolist() == ["b"] and flagged["mean_var_ratio"].iloc[0] > 10
