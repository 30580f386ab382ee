"""The per-rank tail estimator of tau(n) (``ranktail``, docs/methodology.md "Predicting tau(n)")
against truths computed outside the package: the exact mean straggler delay of normal and
Student-t₅ ranks by numerical integration of the parent's CDF, from ranks simulated with NumPy
and read through the user's path (pooled z-score table → per-rank values u → estimator)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from evtsync.blocks.zscores import pooled_zscores
from evtsync.core.defaults import RANKTAIL_TAIL_SHARE
from evtsync.core.errors import InputError
from evtsync.evt.ranktail import (
    RankTailFit,
    expected_max_draws,
    fit_rank_tail,
    rank_values,
    tail_exceedances,
)
from evtsync.predict.tables import check_estimator, tau_table
from tests._lazy import lazy_module

integrate = lazy_module("scipy.integrate")
stats = lazy_module("scipy.stats")

M = 4
NS = [4, 8, 64, 512, 4096]


def _times(x: np.ndarray, gpu: str = "H100") -> pd.DataFrame:
    """Per-rank block times of one identity from an array (instance, sample, rank), vectorised."""
    j, s, r = np.meshgrid(*(np.arange(d) for d in x.shape), indexing="ij")
    return pd.DataFrame({"pg": "0", "block": "b", "instance": j.ravel(), "sample": s.ravel(),
                         "rank": (M * s + r).ravel(), "busy_us": x.ravel(), "gpu": gpu, "precision": "bf16",
                         "position": 0, "signature": "gemm", "index": 2 * j.ravel(), "n_kernels": 2,
                         "n_gemm_kernels": 1})


def _true_delay(dist: stats.rv_continuous, n: int) -> float:
    """E[max_n X] - E[X] in units of the parent's sd (integrated; independent of the package)."""
    mean, sd = dist.mean(), dist.std()
    upper = integrate.quad(lambda v: 1 - dist.cdf(v) ** n, mean, mean + 300 * sd, limit=400)[0]
    lower = integrate.quad(lambda v: dist.cdf(v) ** n, mean - 40 * sd, mean, limit=400)[0]
    return (upper - lower) / sd


@pytest.mark.parametrize("name", ["normal", "student-t5"])
def test_ranktail_meets_the_true_delay_of_simulated_ranks_up_to_4096(name) -> None:
    dist = stats.norm() if name == "normal" else stats.t(5)  # built here: collection imports no SciPy
    # 320 instances of an 8-rank group: 2,560 rank values, as the study's 40-iteration jobs
    rng = np.random.default_rng(20261202)
    x = 500.0 + 10.0 * dist.rvs(size=(320, 2, M), random_state=rng)
    table, _ = pooled_zscores(_times(x), m=M)
    fit = RankTailFit.from_table(table, seed=1)
    b = float(table["block_sd_us"].iloc[0])
    tau = tau_table(fit, NS, b, M, 0.99, estimator="ranktail")
    assert (tau["estimator"] == "ranktail").all() and (tau["model"] == "ranktail").all()
    for row, n in zip(tau.itertuples(), NS, strict=True):
        true = 10.0 * dist.std() * _true_delay(dist, n)
        # the estimator's own 99% interval holds the truth, and its mean is within that interval's half-width
        assert row.tau_lo_us <= true <= row.tau_hi_us, (name, n, row.tau_lo_us, true, row.tau_hi_us)
        assert abs(row.tau_mean_us - true) <= (row.tau_hi_us - row.tau_lo_us) / 2, (name, n)
    # at n = 8 the body holds it: within 5% (the spread of 2,560 values is small there)
    assert tau["tau_mean_us"].iloc[1] == pytest.approx(10.0 * dist.std() * _true_delay(dist, 8), rel=0.05)


def test_one_rank_has_no_straggler_delay_and_the_estimate_scales_with_b() -> None:
    rng = np.random.default_rng(5)
    u = rng.standard_normal(4000)
    u = (u - u.mean()) / u.std()
    draws = expected_max_draws(fit_rank_tail(u, seed=0), [1, 64])
    # n = 1: max_1 u = u, so D(1) = E[u] − E[u] = 0 in every draw (each is measured from its own
    # mean, as u is from the identity's): no straggler, no tax, not even a bootstrap wobble
    assert np.abs(draws[:, 0]).max() < 1e-6  # the tail by quadrature, its mean analytic
    # the draws' own means vary (a Bayesian bootstrap): what is subtracted is each draw's, not one number
    shifted = expected_max_draws(fit_rank_tail(u + 3.0, seed=0), [1, 64])
    np.testing.assert_allclose(shifted, draws, atol=1e-6)  # a shift of all values changes no delay
    x = 800.0 + 25.0 * rng.standard_normal((300, 2, M))
    t1, _ = pooled_zscores(_times(x), m=M)
    t2, _ = pooled_zscores(_times(3.0 * x + 7.0), m=M)  # an affine change of units changes nothing in u
    f1, f2 = RankTailFit.from_table(t1), RankTailFit.from_table(t2)
    a, b = (tau_table(f, [64], 1.0, M, estimator="ranktail")["tau_mean_us"].iloc[0] for f in (f1, f2))
    assert a == pytest.approx(b, rel=1e-5)


def test_the_body_sum_leaves_out_only_powers_below_1e20(monkeypatch: pytest.MonkeyPatch) -> None:
    # the body's sum by parts skips the atoms whose C^n is below 1e-20 in every draw (issue 48): against
    # the whole sum (nothing skipped), the same draws agree to rounding at n = 2, 3 (nothing to skip),
    # 64 and 4096 (most of the body skipped), and a hand sum of one draw's body agrees too
    from evtsync.evt import ranktail

    u = np.random.default_rng(8).gumbel(size=3000)
    tail = fit_rank_tail(u, seed=1)
    ns = [2, 3, 64, 4096]
    skipped = expected_max_draws(tail, ns)
    monkeypatch.setattr(ranktail, "_NEGLIGIBLE_LOG", -np.inf)
    whole = expected_max_draws(tail, ns)
    np.testing.assert_allclose(skipped, whole, rtol=1e-12, atol=1e-12)
    # n = 4096 by hand for draw 0 (its gamma weights drawn again, as the function draws them): the body's
    # part of E[max] is sum_i v_i (C_i^n − C_(i−1)^n), here ~0 (the body holds at most ~96% of the mass)
    body = np.sort(tail.values[tail.values <= tail.threshold])
    rng = np.random.default_rng(tail.weights_seed)
    g = rng.standard_gamma(np.ones(body.size), size=(200, body.size))
    total = g.sum(axis=1) + rng.standard_gamma(float(tail.values.size - body.size), size=200)
    cum = np.cumsum(g[0]) / total[0]
    hand = float(np.sum(body * np.diff(np.concatenate([[0.0], cum ** 4096]))))
    assert abs(hand) < 1e-20


def test_the_per_rank_values_are_each_ranks_time_over_the_robust_scale() -> None:
    # by hand: two instances of one 4-rank sample, overall mean 4.5, pooled sd s = sqrt(10/6).
    # Pair differences per sample: 1, 2, 3, 1, 2, 1 -> 12 values, six 1s, four 2s, two 3s; their 90%
    # quantile (linear) is 2.9, so the inner ones are the 1s and 2s: mean square (6 + 16) / 10 = 2.2;
    # r = sqrt(2.2 / (2 c)), c = E[Z^2 | |Z| <= z_0.95] of a standard normal
    x = np.array([[[1.0, 2.0, 3.0, 4.0]], [[5.0, 6.0, 7.0, 8.0]]])
    table, _ = pooled_zscores(_times(x), m=M)
    q = stats.norm.ppf(0.95)
    c = (stats.norm.cdf(q) - stats.norm.cdf(-q) - 2 * q * stats.norm.pdf(q)) / 0.9
    r, s = np.sqrt(2.2 / (2 * c)), np.sqrt(10 / 6)
    got = [[float(v) for v in text.split(",")] for text in table["u"]]
    assert got == [pytest.approx([(v - 4.5) / r for v in row], rel=1e-6) for row in ([1, 2, 3, 4], [5, 6, 7, 8])]
    assert table["u_scale"].to_numpy() == pytest.approx([r / s, r / s])
    # the estimator's values are in units of the sd: the cell's one ratio r / s puts them back
    assert rank_values(table) == pytest.approx([(v - 4.5) / s for v in range(1, 9)], rel=1e-6)


def test_a_far_rank_keeps_its_distance_in_the_tail() -> None:
    # one identity of 20 samples of 4 normal ranks (sd 1) and one rank 25 sd out: divided by the
    # pooled sd, that rank would be ~16 sd (the rank itself inflates s to ~1.5); its u keeps ~25
    rng = np.random.default_rng(11)
    x = rng.standard_normal((20, 1, M))
    x[7, 0, 2] += 25.0
    table, _ = pooled_zscores(_times(x), m=M)
    u = np.array([float(v) for v in ",".join(table["u"]).split(",")])
    a = x.mean()
    assert u.max() == pytest.approx(x[7, 0, 2] - a, rel=0.15)
    assert float(table["block_sd_us"].iloc[0]) > 1.4  # the far rank's weight in the pooled sd


def test_many_small_identities_keep_the_tail_of_the_ranks() -> None:
    # 400 identities (kernels) of 20 samples of 4 lognormal ranks each, every identity on its own
    # scale: pooled through the robust scale, the values' empirical mean maximum of 512 ranks is the
    # parent's (integrated here) within 3%; divided by each identity's pooled sd it is ~15% short
    rng = np.random.default_rng(12)
    dist = stats.lognorm(0.5)
    parts = []
    for i in range(400):
        x = 100.0 * (i + 1) + (1 + i % 7) * dist.rvs(size=(20, 1, M), random_state=rng)
        parts.append(_times(x).assign(block=f"b{i}", position=i))
    table, _ = pooled_zscores(pd.concat(parts, ignore_index=True), m=M)

    def mean_max(values: np.ndarray, n: int) -> float:  # E[max_n] of the empirical distribution
        v = np.sort(values)
        cdf = np.arange(1, v.size + 1) / v.size
        return float(np.sum(v * (cdf ** n - (cdf - 1 / v.size) ** n)))

    true = _true_delay(dist, 512)
    assert mean_max(rank_values(table), 512) == pytest.approx(true, rel=0.03)
    by_sd = np.array([float(v) for v in ",".join(table["u"]).split(",")]) * np.repeat(
        (table["u_scale"]).to_numpy(), M)  # (X - a_c) / s_c, the values before the robust scale
    assert mean_max(by_sd, 512) < 0.9 * true


def test_a_tiny_cell_is_refused_naming_it() -> None:
    rng = np.random.default_rng(1)
    table, _ = pooled_zscores(_times(100.0 + rng.standard_normal((10, 2, M)), gpu="V100"), m=M)  # 80 values
    with pytest.raises(InputError, match=r"V100\|bf16 has 80 rank value\(s\).*at least"):
        RankTailFit.from_table(table)
    # 40 instances × 8 ranks = 320 values: predicted, and every row says the cell is small
    table, _ = pooled_zscores(_times(100.0 + rng.standard_normal((40, 2, M)), gpu="V100"), m=M)
    tau = tau_table(RankTailFit.from_table(table), [8, 4096], 1.0, M, estimator="ranktail")
    assert (tau["n_values"] == 320).all() and tau["ranktail_note"].str.startswith("small cell: 320").all()
    assert "small cell" in tau.attrs["ranktail_note"]


def test_an_old_table_without_u_says_to_rerun_blocks() -> None:
    rng = np.random.default_rng(2)
    table, _ = pooled_zscores(_times(100.0 + rng.standard_normal((50, 2, M))), m=M)
    with pytest.raises(InputError, match=r"no per-rank column 'u'.*rerun `evtsync blocks`"):
        RankTailFit.from_table(table.drop(columns=["u"]), source="old.parquet")
    # a table of the first ranktail version: u divided by the pooled sd, no u_scale
    with pytest.raises(InputError, match=r"old.parquet: no column 'u_scale'.*robustly scaled.*rerun `evtsync blocks`"):
        RankTailFit.from_table(table.drop(columns=["u_scale"]), source="old.parquet")
    with pytest.raises(InputError, match=r"'u_scale' holds 1 value\(s\) that are not positive"):
        RankTailFit.from_table(table.assign(u_scale=[0.0] + [1.0] * (len(table) - 1)))


def test_estimator_pairings_and_unseen_hardware_are_refused() -> None:
    rng = np.random.default_rng(3)
    table, _ = pooled_zscores(_times(100.0 + rng.standard_normal((100, 2, M))), m=M)
    fit = RankTailFit.from_table(table)
    assert check_estimator(fit, "ranktail") == "ranktail"
    with pytest.raises(InputError, match="does not give the 'centred' estimator"):
        check_estimator(fit, "centred")
    with pytest.raises(InputError, match="predicts only measured cells"):
        tau_table(fit, [8], 1.0, M, gpu="B200", estimator="ranktail")
    assert len(tau_table(fit, [8], 1.0, M, gpu="H100", estimator="ranktail")) == 1


def test_cli_predict_takes_the_zscore_table_and_refuses_an_old_one(tmp_path, capsys) -> None:
    from evtsync.cli import main

    rng = np.random.default_rng(4)
    table, _ = pooled_zscores(_times(100.0 + rng.standard_normal((100, 2, M))), m=M)
    table.to_parquet(tmp_path / "z.parquet")
    table.drop(columns=["u"]).to_parquet(tmp_path / "old.parquet")
    assert main(["predict", str(tmp_path / "z.parquet"), "--estimator", "ranktail", "--n", "8", "4096",
                 "--block-sd-us", "2", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"estimator": "ranktail"' in out and '"n": 4096' in out
    assert main(["predict", str(tmp_path / "old.parquet"), "--estimator", "ranktail", "--n", "8",
                 "--block-sd-us", "2"]) == 2
    assert "rerun `evtsync blocks`" in capsys.readouterr().err


def test_an_interval_reaching_infinite_draws_has_an_infinite_bound_not_nan() -> None:
    from evtsync.predict.tables import summarise

    # 90 finite draws and 10 infinite (xi >= 1): the 95% quantile lies among the infinite ones
    s = summarise(np.r_[np.arange(90.0), [np.inf] * 10], 0.9)
    assert s["hi"] == np.inf and s["median"] == pytest.approx(49.5) and s["share_infinite"] == pytest.approx(0.1)


def _mixture_delay(p: float, shift: float, n: int) -> float:
    """E[max_n X] - E[X] for X = Normal(0, 1) + shift with probability p (integrated, in raw units)."""
    cdf = lambda v: (1 - p) * stats.norm.cdf(v) + p * stats.norm.cdf(v - shift)  # noqa: E731
    upper = integrate.quad(lambda v: 1 - cdf(v) ** n, p * shift, 60, limit=400)[0]
    lower = integrate.quad(lambda v: cdf(v) ** n, -40, p * shift, limit=400)[0]
    return upper - lower


def test_the_threshold_moves_above_a_bump_of_slow_ranks_and_stays_for_a_plain_tail() -> None:
    """Threshold stability (docs/methodology.md, "The per-rank tail estimator"): 2% of ranks 6 sd slow
    put a second mode inside the default tail share (3.5%); the test must move the threshold up into the slow ranks, and
    the mean maximum of n = N ranks must then be near the mixture's true one. For plain normal ranks
    the first threshold is kept in most data sets (a false move has probability about the test's level)."""
    rng = np.random.default_rng(77)
    n_values, p, shift = 5000, 0.02, 6.0
    x = rng.standard_normal(n_values) + shift * (rng.random(n_values) < p)
    sd = float(x.std())
    tail = fit_rank_tail((x - x.mean()) / sd, seed=3)
    assert tail.n_exceedances < tail_exceedances(n_values)  # moved up from the first candidate
    assert tail.threshold * sd + x.mean() > 3.0  # above the normal ranks' top, among the slow ones
    assert any("stability test" in note for note in tail.notes)  # and the fit says so
    true = _mixture_delay(p, shift, n_values) / sd
    est = float(expected_max_draws(tail, [n_values]).mean())
    assert est == pytest.approx(true, rel=0.10)
    first = math.ceil(RANKTAIL_TAIL_SHARE * 2560)
    kept = sum(fit_rank_tail(np.random.default_rng(s).standard_normal(2560), seed=s).n_exceedances == first
               for s in range(20))
    assert kept >= 16  # 20 x (1 - 0.05) = 19 expected; 16 is below the binomial 1% point


def test_identities_whose_times_are_mostly_equal_get_the_root_mean_square_scale() -> None:
    from evtsync.blocks.zscores import robust_scale

    # 90 of 100 samples with four equal times: 540 of the 600 pair differences are 0, their 90%
    # quantile falls between the last zero and the first non-zero one, and the differences at or below
    # it are all zeros: the scale is then the root mean square difference / sqrt(2) (the sd), said by
    # the flag, never 0 (which would make every u infinite)
    x = np.zeros((100, M))
    x[90:] = np.random.default_rng(3).standard_normal((10, M))
    scale, fell_back = robust_scale(x)
    first, second = np.triu_indices(M, k=1)
    diff = (x[:, first] - x[:, second]).ravel()
    assert fell_back and scale == pytest.approx(np.sqrt(np.mean(diff ** 2) / 2))
    # every sample's times equal but one rank: a finite u for every rank, the far one far out
    x = np.full((50, 1, M), 100.0)
    x[10, 0, 3] = 130.0
    table, _ = pooled_zscores(_times(x), m=M)
    u = np.array([float(v) for v in ",".join(table["u"]).split(",")])
    assert np.isfinite(u).all() and u.argmax() == 10 * M + 3


def test_the_tail_share_holds_up_to_2560_values_and_shrinks_beyond() -> None:
    """The threshold rule (docs/methodology.md, "Choosing the threshold and the prior"), counted by
    hand: 3.5% of N up to 2,560 values (89.6 -> 90; 1,272 -> 44.52 -> 45; never below 30), beyond
    89.6 · (N/2560)^(1/2): 10,240 values -> 89.6 · 2 = 179.2 -> 180 (1.8%, not 3.5%'s 359),
    40,960 -> 89.6 · 4 = 358.4 -> 359; never above 5,000."""
    assert [tail_exceedances(n) for n in (100, 640, 1272, 2560)] == [30, 30, 45, 90]
    assert tail_exceedances(10_240) == 180
    assert tail_exceedances(40_960) == 359
    assert tail_exceedances(10 ** 9) == 5000
    assert tail_exceedances(10_240, power=1.0) == math.ceil(0.035 * 10_240)  # power 1: the share at every N
    # the fit uses it: a normal cell of 10,240 values keeps 180 above the threshold (the stability
    # test rarely moves a plain tail), not the 359 of a fixed share
    tail = fit_rank_tail(np.random.default_rng(5).standard_normal(10_240), seed=1)
    assert tail.n_exceedances == 180


def test_the_stability_test_is_computed_once_per_content_and_hands_out_copies() -> None:
    # the memo of _stable_exceedances (a pure function; the rank model tests the same cells twice
    # in a run): the same answer as the uncached test, a changed value or level is another entry,
    # and a caller that edits the returned grid does not change what the next caller gets
    from evtsync.evt import ranktail as rt

    rng = np.random.default_rng(3)
    u = np.sort(rng.standard_t(5, 600))
    k = tail_exceedances(u.size)
    plain_k, plain_grid = rt._stable_exceedances_of(u, k, 10)
    first_k, first_grid = rt._stable_exceedances(u, k, 10)
    assert first_k == plain_k and plain_grid is not None and first_grid is not None
    assert all(np.array_equal(a, b) for a, b in zip(first_grid, plain_grid, strict=True))
    first_grid[1][:] = 0.0  # the caller's copy only
    again_k, again_grid = rt._stable_exceedances(u.copy(), k, 10)
    assert again_k == plain_k and np.array_equal(again_grid[1], plain_grid[1])
    other = u.copy()
    other[-1] += 50.0  # a far larger maximum: another tail, its own entry
    other_k, other_grid = rt._stable_exceedances(other, k, 10)
    want_k, want_grid = rt._stable_exceedances_of(other, k, 10)
    assert other_k == want_k and np.array_equal(other_grid[1], want_grid[1])
    assert not np.array_equal(other_grid[1], plain_grid[1])
    assert rt._stable_exceedances(u, k, 10, alpha=0.0) == (k, None)  # the test off: no grid
