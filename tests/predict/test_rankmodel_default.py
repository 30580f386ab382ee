"""The hierarchical rank model as THE estimator of tau(n) (issue 45, items 2 and 5): the default of
every prediction table, for any n, an unseen GPU from its population (labelled population-level), a
cell too small for it falling back labelled, and ranktail still there when asked for. Truths are
computed outside the package: the exact mean straggler delay of iid normal ranks by numerical
integration, and rank-value counts by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.blocks.zscores import pooled_zscores
from evtsync.core.defaults import DEFAULT_ESTIMATOR
from evtsync.core.errors import InputError
from evtsync.evt.mlefit import MleCellFit, mle_cell_table
from evtsync.predict.estimator import choose_estimator, predict_table
from evtsync.predict.tables import bandwidth_table, predicted_vs_measured, tau_table
from tests.predict.test_default_estimator import (  # iid ranks' times; the normal truth
    _normal_delay,
    _times,
)

M = 4
SD = 20.0


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    """iid normal ranks (sd 20 µs) in 8-rank groups of two 4-rank samples: H100 and H200 with 300
    groups each (2,400 rank values), and V100 with 10 groups (80 rank values, too few for a tail)."""
    rng = np.random.default_rng(5)
    parts = [pooled_zscores(_times(1000.0 + SD * rng.standard_normal((g, 2, M)), gpu), m=M)[0]
             for gpu, g in (("H100", 300), ("H200", 300), ("V100", 10))]
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def choice(table: pd.DataFrame):
    """The default choice with a per-cell GEV MLE of the centred maxima as its fallback (one rank-model fit)."""
    gev = MleCellFit(mle_cell_table(table, ("gpu", "precision"), column="y"), "gev")
    return choose_estimator(None, gev=gev, zscores=table)


def _scales(table: pd.DataFrame) -> pd.DataFrame:
    from evtsync.predict.tables import block_scale

    return block_scale(table)


def test_the_default_is_the_rank_model_and_meets_the_normal_truth_at_any_n(table, choice) -> None:
    assert DEFAULT_ESTIMATOR == "rankmodel"
    assert choice.asked == "rankmodel" and choice.describe()["fallback"] == "centred"
    assert set(choice.describe()["per_rank_cells"]) == {"H100|bf16", "H200|bf16"}
    # n = 6 and 100 are not multiples of m = 4: a per-rank estimator predicts them
    tau = predict_table(choice, tau_table, [6, 8, 100], _scales(table), M)
    fitted = tau[tau["gpu"] != "V100"]
    assert len(fitted) == 6 and (fitted["estimator"] == "rankmodel").all() and (fitted["estimator_note"] == "").all()
    assert (fitted["point_estimate"] == "posterior median").all() and (fitted["prediction_kind"] == "cell").all()
    assert (fitted["n_values"] == 2400).all()  # 300 groups x 2 samples x 4 ranks, by hand
    for row in fitted.itertuples():
        true = SD * _normal_delay(int(row.n))  # b ~ 20 µs estimates SD; the interval holds the truth
        assert row.tau_lo_us <= true <= row.tau_hi_us, (row.cell, row.n, row.tau_lo_us, true, row.tau_hi_us)
        assert row.tau_point_us == pytest.approx(true, rel=0.08), (row.cell, row.n)


def test_a_cell_too_small_falls_back_labelled(table, choice) -> None:
    tau = predict_table(choice, tau_table, [8], _scales(table), M).set_index("gpu")
    assert tau.loc["V100", "estimator"] == "centred"
    assert "80 rank value(s)" in tau.loc["V100", "estimator_note"]  # 10 groups x 2 x 4, by hand
    assert tau.loc["V100", "estimator_note"].startswith("fallback to the centred estimator")
    assert tau.loc["H100", "estimator"] == "rankmodel"
    bstar = predict_table(choice, bandwidth_table, ["ring"], [8], 5.0, 2**28, _scales(table), -0.5, M)
    assert set(bstar.loc[bstar["gpu"] == "V100", "estimator"]) == {"centred"}
    assert set(bstar.loc[bstar["gpu"] == "H200", "estimator"]) == {"rankmodel"}
    # asked for by name, the rank model is strict: the small cell is refused, naming it
    with pytest.raises(InputError, match="V100"):
        choose_estimator("rankmodel", zscores=table)


def test_an_unseen_gpu_is_predicted_from_the_population_labelled(table, choice) -> None:
    unseen = predict_table(choice, tau_table, [8], SD, M, gpu="B200", precision="bf16")
    assert unseen["estimator"].tolist() == ["rankmodel"] and unseen["prediction_kind"].tolist() == ["population"]
    assert "population-level" in unseen["ranktail_note"].iloc[0]
    # the note says how the rank model draws it, not the hierarchical GEV's recipe
    assert "by the rank model" in unseen.attrs["population_note"]
    assert "sqrt(1 + 1/L)" not in unseen.attrs["population_note"]
    # the population of two normal cells: near the normal truth, with a wider interval than a measured cell
    true = SD * _normal_delay(8)
    assert unseen["tau_lo_us"].iloc[0] <= true <= unseen["tau_hi_us"].iloc[0]
    measured = predict_table(choice, tau_table, [8], SD, M, gpu="H100", precision="bf16")
    assert measured["prediction_kind"].tolist() == ["cell"]
    width = (unseen["tau_hi_us"] - unseen["tau_lo_us"]).iloc[0]
    assert width > (measured["tau_hi_us"] - measured["tau_lo_us"]).iloc[0]
    # one precision level only: no population of precision shapes, so the GEV fallback (a pooled fit: one
    # cell for every GPU and precision) answers, labelled
    pooled = MleCellFit(mle_cell_table(table, (), column="y"), "gev")
    fallback = choose_estimator(None, gev=pooled, fitted=choice.per_rank)
    fp8 = predict_table(fallback, tau_table, [8], SD, M, gpu="H100", precision="fp8")
    assert set(fp8["estimator"]) <= {"centred"}
    assert all("not measured" in note for note in fp8["estimator_note"])


def test_predicted_vs_measured_at_n_not_a_multiple_of_m(table, choice) -> None:
    b = float(table.loc[table["gpu"] == "H100", "block_sd_us"].iloc[0])
    # n = 3 <= m and n = 6 > m, neither a multiple of m = 4
    measured = pd.DataFrame({"workload": "w", "gpu": "H100", "precision": "bf16", "n_ranks": [3, 3, 6, 6],
                             "block_sd_us": b, "mean_delay_us": [SD * _normal_delay(3)] * 2 + [SD * _normal_delay(6)] * 2})
    pvm = predict_table(choice, predicted_vs_measured, measured, M).set_index("n")
    assert sorted(pvm.index) == [3, 6] and (pvm["estimator"] == "rankmodel").all()
    assert not pvm.loc[3, "beyond_m"] and pvm.loc[6, "beyond_m"]
    assert pvm["ratio"].to_numpy() == pytest.approx([1.0, 1.0], abs=0.08)
    assert pvm.attrs["skipped"]["n not a multiple of m"] == 0


def test_explicit_ranktail_still_works_and_is_labelled(table) -> None:
    two = table[table["gpu"] != "V100"]
    tau = predict_table(choose_estimator("ranktail", zscores=two), tau_table, [8, 64], _scales(two), M)
    assert (tau["estimator"] == "ranktail").all() and (tau["model"] == "ranktail").all()
    for row in tau.itertuples():
        assert row.tau_point_us == pytest.approx(SD * _normal_delay(int(row.n)), rel=0.08)
    with pytest.raises(InputError, match="predicts only measured cells"):
        predict_table(choose_estimator("ranktail", zscores=two), tau_table, [8], SD, M, gpu="B200", precision="bf16")


def test_the_registry_knows_the_rank_model() -> None:
    from evtsync.predict import registry

    rm = registry.get(None)
    assert rm.name == "rankmodel" and rm.per_rank and rm.column == "u" and rm.fallback == "centred"
    assert "a job of n ranks from the same fleet" in rm.meaning
    assert "posterior of the rank model" in rm.interval and "credible interval" in rm.interval
    assert registry.get("ranktail").per_rank  # the comparator stays
