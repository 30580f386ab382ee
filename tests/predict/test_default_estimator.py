"""The default estimator of tau(n), the rank model (issue 45; ranktail's before it, issue 29, which
stays as a labelled comparator), and its labelled fallback (docs/methodology.md "Predicting tau(n)"),
against truths computed outside the package: the exact mean straggler delay
of normal ranks by numerical integration, and ``synth``'s Monte-Carlo truth of a job simulated from
a stated parent (its ground_truth.json), read through the user's path (traces -> z-score table)."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from evtsync.blocks.zscores import pooled_zscores
from evtsync.core.defaults import DEFAULT_ESTIMATOR
from evtsync.core.errors import InputError
from evtsync.evt.mlefit import MleCellFit, mle_cell_table
from evtsync.predict.estimator import choose_estimator, predict_table
from evtsync.predict.tables import bandwidth_table, predicted_vs_measured, tau_table
from tests._lazy import lazy_module

integrate = lazy_module("scipy.integrate")
stats = lazy_module("scipy.stats")

M = 4


def _times(x: np.ndarray, gpu: str = "H100") -> pd.DataFrame:
    """Per-rank block times of one identity from an array (instance, sample, rank)."""
    j, s, r = np.meshgrid(*(np.arange(d) for d in x.shape), indexing="ij")
    return pd.DataFrame({"pg": "0", "block": f"b-{gpu}", "instance": j.ravel(), "sample": s.ravel(),
                         "rank": (M * s + r).ravel(), "busy_us": x.ravel(), "gpu": gpu, "precision": "bf16",
                         "position": 0, "signature": "gemm", "index": 2 * j.ravel(), "n_kernels": 2,
                         "n_gemm_kernels": 1})


def _normal_delay(n: int) -> float:
    """E[max_n X] - E[X] of a standard normal (integrated; independent of the package)."""
    upper = integrate.quad(lambda v: 1 - stats.norm.cdf(v) ** n, 0, 12)[0]
    lower = integrate.quad(lambda v: stats.norm.cdf(v) ** n, -12, 0)[0]
    return upper - lower


@pytest.fixture(scope="module")
def ranks() -> tuple[pd.DataFrame, float]:
    """Normal ranks, sd 20 µs, in 8-rank groups of two 4-rank samples (2,560 rank values)."""
    rng = np.random.default_rng(11)
    table, _ = pooled_zscores(_times(1000.0 + 20.0 * rng.standard_normal((320, 2, M))), m=M)
    return table, float(table["block_sd_us"].iloc[0])


def _gev(table: pd.DataFrame) -> MleCellFit:
    return MleCellFit(mle_cell_table(table, ("gpu", "precision"), column="y"), "gev")


@pytest.fixture(scope="module")
def default_choice(ranks):
    """The default choice of the module's table with its GEV fallback: one fit of the rank model."""
    table, _ = ranks
    return choose_estimator(None, gev=_gev(table), zscores=table)


def test_the_default_is_the_rank_model_and_meets_the_true_delay(ranks, default_choice) -> None:
    table, b = ranks
    assert DEFAULT_ESTIMATOR == "rankmodel"
    tau = predict_table(default_choice, tau_table, [8, 64, 512], b, M).set_index("n")
    assert (tau["estimator"] == "rankmodel").all() and (tau["estimator_note"] == "").all()
    # its point is the posterior median (docs/methodology.md, "The point estimate": the mean of the
    # draws is pushed up by the shape's uncertainty, E[max_n] being convex in xi)
    assert (tau["point_estimate"] == "posterior median").all()
    for n in (8, 64, 512):
        true = 20.0 * _normal_delay(n)
        assert tau.loc[n, "tau_point_us"] == pytest.approx(true, rel=0.08), n
        assert tau.loc[n, "tau_lo_us"] <= true <= tau.loc[n, "tau_hi_us"], n
    assert default_choice.describe()["estimator"] == "rankmodel" and default_choice.describe()["fallback"] == "centred"


def test_ranktail_asked_for_meets_the_true_delay(ranks) -> None:
    table, b = ranks
    choice = choose_estimator("ranktail", gev=_gev(table), zscores=table)
    tau = predict_table(choice, tau_table, [8, 64, 512], b, M).set_index("n")
    assert (tau["estimator"] == "ranktail").all() and (tau["estimator_note"] == "").all()
    for n in (8, 64, 512):
        true = 20.0 * _normal_delay(n)
        assert tau.loc[n, "tau_mean_us"] == pytest.approx(true, rel=0.08), n
        assert tau.loc[n, "tau_lo_us"] <= true <= tau.loc[n, "tau_hi_us"], n
    assert choice.describe()["estimator"] == "ranktail" and choice.describe()["fallback"] is None


def test_a_table_without_u_falls_back_to_the_centred_estimator_labelled(ranks, caplog) -> None:
    table, b = ranks
    gev = _gev(table)
    with caplog.at_level(logging.WARNING, logger="evtsync"):
        choice = choose_estimator(None, gev=gev, zscores=table.drop(columns=["u"]), source="old.parquet")
        tau = predict_table(choice, tau_table, [8, 64], b, M)
    assert (tau["estimator"] == "centred").all()
    assert tau["estimator_note"].str.contains("no per-rank column 'u'").all()
    assert "fallback" in tau.attrs["estimator_note"] and "falls back" in caplog.text
    # the same numbers as the centred estimator of that fit: only the label is added
    plain = tau_table(gev, [8, 64], b, M)
    assert tau["tau_mean_us"].tolist() == pytest.approx(plain["tau_mean_us"].tolist())


def test_a_gev_fit_alone_falls_back_and_an_explicit_ranktail_refuses(ranks, caplog) -> None:
    table, b = ranks
    with caplog.at_level(logging.WARNING, logger="evtsync"):
        tau = predict_table(choose_estimator(None, gev=_gev(table)), tau_table, [8], b, M)
    assert tau["estimator"].tolist() == ["centred"] and "no z-score table given" in tau["estimator_note"].iloc[0]
    assert "falls back" in caplog.text
    with pytest.raises(InputError, match="needs the z-score table's per-rank values"):
        choose_estimator("ranktail", gev=_gev(table))
    with pytest.raises(InputError, match=r"no per-rank column 'u'.*rerun `evtsync blocks`"):
        choose_estimator("ranktail", gev=_gev(table), zscores=table.drop(columns=["u"]))
    with pytest.raises(InputError, match="needs a GEV fit"):
        choose_estimator("centred", zscores=table)
    # explicit centred: the GEV's rows, no note
    tau = predict_table(choose_estimator("centred", gev=_gev(table), zscores=table), tau_table, [8], b, M)
    assert tau["estimator"].tolist() == ["centred"] and tau["estimator_note"].tolist() == [""]


def test_an_unmeasured_gpu_falls_back_and_a_measured_one_stays_the_rank_model(ranks, default_choice) -> None:
    """One GPU level measured: the rank model has no population of GPU shapes to draw B200 from, so
    the GEV's pooled cell answers it, labelled (with several GPUs the rank model predicts it itself:
    tests/predict/test_rankmodel_default.py)."""
    table, b = ranks
    pooled = MleCellFit(mle_cell_table(table, (), column="y"), "gev")  # no GPU effect: one cell for every GPU
    choice = choose_estimator(None, gev=pooled, fitted=default_choice.per_rank)
    measured = predict_table(choice, tau_table, [8], b, M, gpu="H100", precision="bf16")
    assert measured["estimator"].tolist() == ["rankmodel"]
    unseen = predict_table(choice, tau_table, [8], b, M, gpu="B200", precision="bf16")
    assert unseen["estimator"].tolist() == ["centred"]
    assert "not measured" in unseen["estimator_note"].iloc[0]
    with pytest.raises(InputError, match="predicts only measured cells"):
        predict_table(choose_estimator("ranktail", gev=pooled, zscores=table), tau_table, [8], b, M, gpu="B200")


def test_a_small_cell_falls_back_alone(ranks) -> None:
    table, b = ranks
    rng = np.random.default_rng(3)
    tiny, _ = pooled_zscores(_times(1000.0 + 20.0 * rng.standard_normal((10, 2, M)), gpu="V100"), m=M)  # 80 values
    both = pd.concat([table, tiny], ignore_index=True)
    choice = choose_estimator(None, gev=_gev(both), zscores=both)
    scales = pd.DataFrame({"gpu": ["H100", "V100"], "precision": "bf16", "b_us": [b, b]})
    tau = predict_table(choice, tau_table, [8], scales, M).set_index("gpu")
    assert tau.loc["H100", "estimator"] == "rankmodel" and tau.loc["V100", "estimator"] == "centred"
    assert "80 rank value(s)" in tau.loc["V100", "estimator_note"]
    with pytest.raises(InputError, match="V100"):
        choose_estimator("ranktail", zscores=both)
    # B* carries the same labels
    bstar = predict_table(choice, bandwidth_table, ["ring"], [8], 5.0, 2**28, scales, -0.5, M)
    assert set(bstar.loc[bstar["gpu"] == "V100", "estimator"]) == {"centred"}
    assert set(bstar.loc[bstar["gpu"] == "H100", "estimator"]) == {"rankmodel"}


def test_predicted_vs_measured_by_default_is_the_rank_model(ranks, default_choice) -> None:
    table, b = ranks
    true = 20.0 * _normal_delay(8)
    measured = pd.DataFrame({"workload": "w", "gpu": "H100", "precision": "bf16", "n_ranks": 8,
                             "block_sd_us": b, "mean_delay_us": [true] * 3})
    pvm = predict_table(default_choice, predicted_vs_measured, measured, M)
    assert pvm["estimator"].tolist() == ["rankmodel"] and pvm["beyond_m"].tolist() == [True]
    assert pvm["ratio"].iloc[0] == pytest.approx(1.0, abs=0.08)


def test_synth_parent_job_default_rows_meet_ground_truth(tmp_path) -> None:
    from evtsync.blocks.cut import zscore_table
    from evtsync.synth import SynthConfig, synthesize

    res = synthesize(SynthConfig.build(ranks=16, tp=16, iterations=40, parent="normal", seed=3), tmp_path / "job")
    truth = res.truth["parent"]["true_straggler_delay_sd"]  # Monte Carlo of the stated parent (ground_truth.json)
    z = zscore_table(res.traces_dir, m=4)
    gev = MleCellFit(mle_cell_table(z, (), column="y"), "gev")
    tau = predict_table(choose_estimator(None, gev=gev, zscores=z), tau_table, [4, 16, 64], 1.0, 4).set_index("n")
    assert (tau["estimator"] == "rankmodel").all()
    for n in (4, 16, 64):  # b = 1: in units of the block sd
        assert tau.loc[n, "tau_mean_us"] / truth[str(n)] == pytest.approx(1.0, abs=0.08), n


def test_cli_default_and_explicit(tmp_path, capsys, ranks) -> None:
    from evtsync.cli import main

    table, _ = ranks
    table.to_parquet(tmp_path / "z.parquet")
    table.drop(columns=["u"]).to_parquet(tmp_path / "old.parquet")
    assert main(["predict", str(tmp_path / "z.parquet"), "--n", "8", "--block-sd-us", "2", "--json"]) == 0
    assert '"estimator": "rankmodel"' in capsys.readouterr().out
    # a z-score table alone has no GEV to fall back to: the default says what is missing
    assert main(["predict", str(tmp_path / "old.parquet"), "--n", "8", "--block-sd-us", "2"]) == 2
    assert "rerun `evtsync blocks`" in capsys.readouterr().err
    # given GEV parameters cannot give the rank model: the default falls back, labelled; explicit ranktail refuses
    assert main(["bandwidth", "--topology", "ring", "--gumbel", "0.5", "0.4", "--block-sd-us", "3", "--n", "8", "--alpha-us", "2",
                 "--bytes", "1M"]) == 0
    assert "fallback to the centred estimator" in capsys.readouterr().out
    assert main(["bandwidth", "--topology", "ring", "--gumbel", "0.5", "0.4", "--block-sd-us", "3", "--n", "8", "--alpha-us", "2",
                 "--bytes", "1M", "--estimator", "ranktail"]) == 2


def test_cached_expected_max_gives_the_fits_own_draws(ranks) -> None:
    from evtsync.evt.ranktail import RankTailFit
    from evtsync.predict.estimator import cache_expected_max

    table, _ = ranks
    plain = RankTailFit.from_table(table, seed=3)
    cached = cache_expected_max(RankTailFit.from_table(table, seed=3))
    first = cached.expected_max([64], [0])  # fills (cell 0, n = 64) alone
    assert np.array_equal(first, plain.expected_max([64], [0]))
    both = cached.expected_max([8, 64, 4096])
    assert both.shape == plain.expected_max([8, 64, 4096]).shape
    assert np.array_equal(both, plain.expected_max([8, 64, 4096]))
    assert isinstance(cached, RankTailFit)


def test_n_beyond_the_cells_rank_values_is_labelled(tmp_path, capsys, ranks, default_choice) -> None:
    """A rank-model row with n above the cell's N rank values (here 320 groups × 2 samples × 4 ranks
    = 2,560, counted by hand) is the GPD's extrapolation: the table, the attrs and the printed line say so."""
    from evtsync.cli import main

    table, b = ranks
    tau = predict_table(default_choice, tau_table, [512, 2560, 4096], b, M)
    assert tau["n_values"].tolist() == [2560] * 3
    assert tau["beyond_data"].tolist() == [False, False, True]
    assert "beyond the data" in tau.attrs["beyond_data_note"]
    within = predict_table(default_choice, tau_table, [8, 512], b, M)
    assert not within["beyond_data"].any() and "beyond_data_note" not in within.attrs
    table.to_parquet(tmp_path / "z.parquet")
    assert main(["predict", str(tmp_path / "z.parquet"), "--n", "512", "4096", "--block-sd-us", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = {int(line.split("n=")[1].split()[0]): line for line in lines if " n=" in line}
    assert "[beyond the data: n > N = 2560 rank values]" in row[4096]
    assert "beyond the data" not in row[512]
    assert any(line.startswith("NOTE: beyond the data") for line in lines)
