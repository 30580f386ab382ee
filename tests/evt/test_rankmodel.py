"""The rank model (evtsync.evt.rankmodel; docs/methodology.md, "The rank model") against truths
computed outside it: ranks simulated with NumPy and read through the user's path (pooled z-score
table → per-rank values), the true mean straggler delay by brute-force simulation of the same
generator or by numerical integration of the parent, hand-computed contrasts, and the ranktail
estimator's grid posterior as the check the issue asks for."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.blocks.zscores import pooled_zscores
from evtsync.core.errors import InputError
from evtsync.evt.ranktail import RankTailFit, expected_max_draws, fit_rank_tail
from tests._lazy import lazy_module

# imported on first use, not at collection (issue 48)
rankmodel = lazy_module("evtsync.evt.rankmodel")
integrate = lazy_module("scipy.integrate")
stats = lazy_module("scipy.stats")

M = 4
NS = [8, 64, 512, 4096]


def _times(x: np.ndarray, gpu: str = "H100", precision: str = "bf16") -> pd.DataFrame:
    """Per-rank block times (instance, sample, position) of one identity of one PG: rank = sample + S·position
    (sample 0 the even ranks of an 8-rank group, as the package splits them)."""
    j, s, r = np.meshgrid(*(np.arange(d) for d in x.shape), indexing="ij")
    return pd.DataFrame({"pg": "0", "block": "b", "instance": j.ravel(), "sample": s.ravel(),
                         "rank": (s + x.shape[1] * r).ravel(), "busy_us": x.ravel(), "gpu": gpu, "precision": precision,
                         "position": 0, "signature": "gemm", "index": 2 * j.ravel(), "n_kernels": 2,
                         "n_gemm_kernels": 1})


def _job(times_by_rank: np.ndarray, gpu: str = "H100", precision: str = "bf16") -> tuple[pd.DataFrame, float]:
    """(long rank table, pooled sd b in µs) of a job's (iterations, 8 ranks) block times, through the z-score table."""
    x = np.stack([times_by_rank[:, 0::2], times_by_rank[:, 1::2]], axis=1)
    table, _ = pooled_zscores(_times(x, gpu, precision), m=M)
    return rankmodel.rank_table_from_zscores(table), float(table["block_sd_us"].iloc[0])


def _normal_delay(n: int) -> float:
    """E[max_n Z] − E[Z] for standard normal Z, by integration (independent of the package)."""
    up = integrate.quad(lambda v: 1 - stats.norm.cdf(v) ** n, 0, 40, limit=400)[0]
    lo = integrate.quad(lambda v: stats.norm.cdf(v) ** n, -40, 0, limit=400)[0]
    return up - lo


def test_contrasts_cancel_any_shared_shift_and_rank_effects_are_read_by_hand() -> None:
    # 3 collectives of 4 ranks, no noise: u = s_i + rho_r with rho = (1, 0, 0, -1) (mean 0)
    rho = np.array([1.0, 0.0, 0.0, -1.0])
    s = np.array([0.0, 5.0, -3.0])
    long = pd.DataFrame({"value": (s[:, None] + rho[None, :]).ravel(), "collective": np.repeat(["a", "b", "c"], 4),
                         "rank": np.tile(["r0", "r1", "r2", "r3"], 3), "gpu": "G", "precision": "p",
                         "order": np.repeat([0, 1, 2], 4)})
    (cell,) = rankmodel.decompose(long)
    np.testing.assert_allclose(cell.rho_hat, rho, atol=1e-12)  # each rank's mean contrast, by hand
    np.testing.assert_allclose(cell.w, 0.0, atol=1e-12)  # nothing idiosyncratic is left
    assert cell.var_shared == pytest.approx(np.var(s, ddof=1))  # the collective means' variance, no noise to remove
    # a different shift per collective changes no contrast
    rng = np.random.default_rng(0)
    noisy = long.assign(value=long["value"] + rng.standard_normal(12))
    shifted = noisy.assign(value=noisy["value"] + np.repeat(rng.normal(0, 100, 3), 4))
    a, b = rankmodel.decompose(noisy)[0], rankmodel.decompose(shifted)[0]
    np.testing.assert_allclose(a.w, b.w, atol=1e-9)
    np.testing.assert_allclose(a.rho_hat, b.rho_hat, atol=1e-9)
    # w = contrast·K/(K−1) = e_r − mean of the other ranks' e (4 ranks: by hand for collective "a")
    e = noisy["value"].to_numpy()[:4] - rho
    loo = e - (e.sum() - e) / 3
    assert rankmodel.decompose(noisy, rank_effects=False)[0].w[:4] == pytest.approx(loo + rho * 4 / 3)


def test_bad_input_is_named() -> None:
    with pytest.raises(InputError, match="missing column"):
        rankmodel.decompose(pd.DataFrame({"value": [1.0]}))
    long = pd.DataFrame({"value": [1.0, np.nan], "collective": "a", "rank": ["0", "1"], "gpu": "G", "precision": "p",
                         "order": 0})
    with pytest.raises(InputError, match="not finite"):
        rankmodel.decompose(long)
    with pytest.raises(InputError, match="centring"):
        rankmodel.decompose(long.fillna(0.0), centring="median")


def test_the_delay_integrator_matches_ranktails_on_the_same_draws() -> None:
    # ranktail's exact body sum and tail quadrature against the rank model's grid integral of 1 − F^n,
    # the same GPD draws and the same values (Bayesian-bootstrap weights drawn independently)
    rng = np.random.default_rng(3)
    values = np.sort(rng.gumbel(size=3000))
    tail = fit_rank_tail(values, seed=2)
    t = tail.threshold
    body = values[values <= t]
    comp = {"pop_shift": np.zeros((tail.xi.size, 1)), "pop_w": np.ones((tail.xi.size, 1)),
            "own": np.zeros((tail.xi.size, 0))}
    ours = rankmodel._delay_draws(body, np.ones(body.size), int(values.size - body.size), t, np.exp(tail.log_sigma), tail.xi,
                        comp, np.array(NS, dtype=float), np.random.default_rng(9))
    theirs = expected_max_draws(tail, NS)
    for j in range(len(NS)):
        assert np.median(ours[:, j]) == pytest.approx(np.median(theirs[:, j]), rel=0.01), NS[j]
    # n = 1: no straggler in any draw
    one = rankmodel._delay_draws(body, np.ones(body.size), int(values.size - body.size), t, np.exp(tail.log_sigma[:50]),
                       tail.xi[:50], {k: v[:50] for k, v in comp.items()}, np.array([1.0]), np.random.default_rng(1))
    assert np.abs(one).max() < 2e-3


@pytest.mark.slow  # ~35 s on the shared 2-core machine (one fit with its first compilation, and ranktail's)
def test_one_cell_without_effects_agrees_with_ranktails_grid_posterior() -> None:
    # the check: one cell, no rank or sample effects, the model switched to the same
    # assumptions (no centring, no rank effects): the same threshold, prior and tail, NUTS in place of
    # the grid; the two posteriors of tau(n) agree within their Monte Carlo error
    rng = np.random.default_rng(20261206)
    x = 500.0 + 10.0 * rng.standard_normal((320, 2, M))
    table, _ = pooled_zscores(_times(x), m=M)
    ranktail = RankTailFit.from_table(table, seed=1).expected_max(NS)[:, 0, :]
    fit = rankmodel.fit_rank_model(rankmodel.rank_table_from_zscores(table), centring="none", rank_effects=False, seed=1)
    assert fit.converged, fit.convergence_note
    assert fit.cells["threshold"].iloc[0] == pytest.approx(ranktail_threshold(table))
    ours = fit.tau_draws(NS, "H100|bf16")
    for j, n in enumerate(NS):
        a, b = ours[:, j], ranktail[:, j]
        # Monte Carlo se of a median: 1.2533 sd / sqrt(effective draws); 1000 independent grid draws, and
        # the NUTS draws' effective number taken as 400 (the convergence rule's floor)
        se = 1.2533 * np.std(b) * np.sqrt(1 / b.size + 1 / 400)
        assert abs(np.median(a) - np.median(b)) <= 4 * se, (n, np.median(a), np.median(b), se)
        wa, wb = np.subtract(*np.quantile(a, [0.95, 0.05])), np.subtract(*np.quantile(b, [0.95, 0.05]))
        assert wa == pytest.approx(wb, rel=0.2), n


def ranktail_threshold(table: pd.DataFrame) -> float:
    """ranktail's threshold of the table's one cell."""
    return RankTailFit.from_table(table, seed=1).tails["H100|bf16"].threshold


def _brute_force_delay(n: int, rho: np.ndarray, own: np.ndarray | None, reps: int, rng: np.random.Generator) -> float:
    """E[max_n − mean_n] of n ranks of the generator, by simulation: ``own`` ranks with their effects,
    the rest each one of the fleet's R ranks at random (``rho``), idiosyncratic N(0, 1)."""
    out = []
    for _ in range(reps // 100):
        k = 0 if own is None else own.size
        new = rho[rng.integers(0, rho.size, size=(100, n - k))]
        eff = new if own is None else np.concatenate([np.broadcast_to(own, (100, k)), new], axis=1)
        v = eff + rng.standard_normal((100, n))
        out.append(v.max(axis=1) - v.mean(axis=1))
    return float(np.mean(np.concatenate(out)))


@pytest.mark.slow  # ~45 s: one fit of 8,000 rank values and the brute-force truth
def test_shocks_drift_and_a_slow_rank_the_physical_generator() -> None:
    # 1,000 iterations of 8 ranks, µs: a shock shared by the iteration's ranks (sd b), a drift of 3 sd
    # over the job, rank 3 persistently 1.5 sd slow, idiosyncratic N(0, b²)
    rng = np.random.default_rng(0)
    iters, ranks, b = 1000, 8, 10.0
    rho = np.zeros(ranks)
    rho[3] = 1.5
    shared = rng.standard_normal(iters) + 3.0 * np.arange(iters) / iters
    times = 1000.0 + b * (shared[:, None] + rho[None, :] + rng.standard_normal((iters, ranks)))
    long, b_hat = _job(times)
    fit = rankmodel.fit_rank_model(long, seed=1)
    assert fit.converged, fit.convergence_note
    truth_rng = np.random.default_rng(99)
    for fleet, own in (("new", None), ("these-plus-typical", rho)):
        draws = fit.tau_draws(NS, "H100|bf16", fleet=fleet) * b_hat  # µs
        for j, n in enumerate(NS):
            true = b * _brute_force_delay(n, rho, own, 20000 if n <= 512 else 3000, truth_rng)
            point = float(np.median(draws[:, j]))
            lo, hi = np.quantile(draws[:, j], [0.005, 0.995])  # 99%: eight checks of one data set
            assert lo <= true <= hi, (fleet, n, lo, true, hi)
            assert point / true == pytest.approx(1.0, abs=0.05 if n <= 512 else 0.08), (fleet, n, point, true)
    effects = fit.rank_effects("H100|bf16")
    slow = effects[effects["slow"]]
    assert list(slow["rank"]) == ["|0|3"]  # workload|pg|rank: only the slow node is named
    lo, hi = slow[["vs_others_lo", "vs_others_hi"]].iloc[0] * b_hat
    assert lo <= 1.5 * b <= hi  # +1.5 sd against the other ranks, in µs
    shares = fit.variance_shares().iloc[0]
    assert shares["share_shared"] > 0.4 and shares["drift_range_sd"] > 1.5  # shared var 1 + 0.75 of ~3.3


@pytest.fixture(scope="module")
def iid_fit():
    """iid normal ranks, 400 iterations of 8: no shock, no drift, no slow rank."""
    rng = np.random.default_rng(7)
    long, b = _job(800.0 + 20.0 * rng.standard_normal((400, 8)))
    return long, b, rankmodel.fit_rank_model(long, seed=2)


def test_no_effect_names_no_rank_and_finds_no_shared_variance(iid_fit, tmp_path) -> None:
    long, b, fit = iid_fit
    assert fit.converged, fit.convergence_note
    effects = fit.rank_effects()
    assert not effects["slow"].any()
    shares = fit.variance_shares().iloc[0]
    # the shared share's sampling sd here is sqrt(2/399)/8 = 0.009 (this data set's collective means vary
    # 1.21 times the iid value, by chance: 0.034); at most 0.05
    assert shares["share_shared"] < 0.05 and shares["share_rank"] < 0.02
    assert shares["share_idiosyncratic"] > 0.95
    draws = fit.tau_draws(NS, "H100|bf16", draws=400)
    for j, n in enumerate(NS[:3]):
        # the 99% interval holds the truth (three 90% intervals miss one of three a quarter of the time)
        lo, hi = np.quantile(draws[:, j] * b, [0.005, 0.995])
        assert lo <= 20.0 * _normal_delay(n) <= hi, n
        assert np.median(draws[:, j]) * b == pytest.approx(20.0 * _normal_delay(n), rel=0.06), n
    # save and load: the same draws
    path = fit.save(tmp_path / "rankmodel.nc")
    again = rankmodel.load_rank_model(path)
    np.testing.assert_allclose(again.tau_draws(NS, "H100|bf16", draws=400), draws)
    assert again.convergence_note == fit.convergence_note
    with pytest.raises(InputError, match="no cell"):
        fit.tau_draws([8], "B200|fp8")
    with pytest.raises(InputError, match="one gpu level"):
        fit.tau_draws([8], gpu="B200", precision="bf16")


def test_the_fit_in_memory_predicts_what_its_file_read_back_predicts_to_the_bit(iid_fit, tmp_path) -> None:
    # a run's rankmodel stage hands its fit to the prediction stages in memory (Run.rank_model(..., fit=...))
    # instead of their reading the file it wrote: the same draws, cells and notes either way
    _, _, fit = iid_fit
    again = rankmodel.load_rank_model(fit.save(tmp_path / "rankmodel.nc"))
    kept, read = (rankmodel.RankModelPrediction(f, seed=0) for f in (fit, again))
    assert np.array_equal(kept.expected_max(NS), read.expected_max(NS))
    pd.testing.assert_frame_equal(kept.cell_info(), read.cell_info(), check_exact=True)
    pd.testing.assert_frame_equal(kept.cells, read.cells, check_exact=True)


@pytest.mark.slow  # two fits
def test_gumbel_against_frechet_by_loo_on_the_same_data() -> None:
    # Gumbel ranks: their excesses over a high threshold are exponential (xi = 0 is the right tail), so
    # the xi = 0 model is not beaten beyond the difference's own error, and the verdict is Gumbel's.
    # (Normal ranks are not a fair case: above the 96.5% quantile their excesses are fitted best by a
    # negative, penultimate xi, about -0.1 to -0.2, and LOO says so.)
    rng = np.random.default_rng(5)
    long, _ = _job(600.0 + 8.0 * rng.gumbel(size=(600, 8)))
    table, free, fixed = rankmodel.compare_shape(long, seed=3)
    assert len(table) == 2 and table["d_elpd"].iloc[0] == 0.0
    assert (table["n_obs"] == int(free.cells["n_exceedances"].sum())).all()  # the same excesses in both
    assert np.isfinite(table["elpd_loo"]).all() and (table["se"] > 0).all()
    row = table[table["model"].str.startswith("xi = 0")].iloc[0]
    assert row["d_elpd"] >= -2 * row["d_se"]
    xi = free.xi_summary().iloc[0]
    assert xi["xi_lo"] < 0 < xi["xi_hi"] and xi["verdict"] == "light tail (Gumbel domain)"
    assert 0.05 < xi["p_xi_positive"] < 0.95
    assert (fixed.xi_summary()["xi_mean"] == 0).all()


@pytest.mark.slow
def test_a_tiny_cell_borrows_the_shape_of_large_cells_that_share_it() -> None:
    # five cells of 5,000 Student-t5 values (xi = 0.2) beside one of 640: alone its shape's interval is
    # wide; pooled it narrows and moves towards the others'
    rng = np.random.default_rng(11)
    parts = []
    cells = [("A", "bf16"), ("A", "fp32"), ("B", "bf16"), ("B", "fp32"), ("C", "bf16")]
    for gpu, precision in cells:
        parts.append(_job(300.0 + 5.0 * rng.standard_t(5, size=(625, 8)), gpu, precision)[0])
    tiny = _job(300.0 + 5.0 * rng.standard_t(5, size=(80, 8)), "C", "fp32")[0]
    pooled = rankmodel.fit_rank_model(pd.concat([*parts, tiny], ignore_index=True), seed=4)
    alone = rankmodel.fit_rank_model(tiny, seed=4)
    xi_pooled = pooled.xi_summary().set_index("cell").loc["C|fp32"]
    xi_alone = alone.xi_summary().iloc[0]
    assert (xi_pooled["xi_hi"] - xi_pooled["xi_lo"]) < 0.7 * (xi_alone["xi_hi"] - xi_alone["xi_lo"])
    others = pooled.xi_summary().set_index("cell").drop("C|fp32")["xi_median"].mean()
    assert abs(xi_pooled["xi_median"] - others) < abs(xi_alone["xi_median"] - others) + 0.02
    # an unseen GPU: its shape from the population of GPU deviations, labelled population-level by callers;
    # finite draws, and less certain than a measured cell of the same precision
    unseen = pooled.tau_draws([64], gpu="D", precision="bf16", draws=300)[:, 0]
    seen = pooled.tau_draws([64], "A|bf16", draws=300)[:, 0]
    assert np.isfinite(unseen).all()
    assert np.subtract(*np.quantile(unseen, [0.95, 0.05])) > np.subtract(*np.quantile(seen, [0.95, 0.05]))


def _log_sigma(fit, cell: str) -> np.ndarray:
    """Posterior draws of log sigma of one cell (the GPD scale at the cell's own threshold)."""
    return np.log(fit._post("sigma")[:, list(fit.cells["cell"]).index(cell)])


CELLS5 = [("A", "bf16"), ("A", "fp32"), ("B", "bf16"), ("B", "fp32"), ("C", "bf16")]


@pytest.mark.slow  # two fits (~6 cells of 2,400 values and one of 320): ~40 s of CPU
def test_a_small_cells_scale_is_pulled_to_the_others_when_they_share_it() -> None:
    # physical generator: block times = 300 µs + 5 µs·Gumbel noise per rank, every cell the same
    # hardware noise (so the same tail scale in sd units); five cells of 300 iterations of 8 ranks
    # and one of 40. Pooled, the small cell's scale narrows and lies near the large cells'
    rng = np.random.default_rng(21)
    parts = [_job(300.0 + 5.0 * rng.gumbel(size=(300, 8)), gpu, precision)[0] for gpu, precision in CELLS5]
    small = _job(300.0 + 5.0 * rng.gumbel(size=(40, 8)), "C", "fp32")[0]
    pooled = rankmodel.fit_rank_model(pd.concat([*parts, small], ignore_index=True), seed=5)
    alone = rankmodel.fit_rank_model(small, seed=5)
    assert pooled.converged, pooled.convergence_note
    others = np.mean([np.median(_log_sigma(pooled, f"{g}|{p}")) for g, p in CELLS5])
    ls_pooled, ls_alone = _log_sigma(pooled, "C|fp32"), _log_sigma(alone, "C|fp32")
    width = {k: np.subtract(*np.quantile(v, [0.95, 0.05])) for k, v in (("pooled", ls_pooled), ("alone", ls_alone))}
    assert width["pooled"] < 0.7 * width["alone"], width
    # pulled to the others: pooled, its median lies within a quarter of its own fit's 90% width of the
    # large cells' mean (alone, by chance, it may lie anywhere in that width)
    assert abs(np.median(ls_pooled) - others) < 0.25 * width["alone"], (np.median(ls_pooled), others, width)


@pytest.mark.slow  # two fits: ~40 s of CPU
def test_a_cell_that_truly_differs_keeps_its_own_scale() -> None:
    # misspecified for pooling: five cells of normal rank noise and one of exponential noise (a longer
    # tail: its GPD scale in sd units ~1.0 against ~0.45), each 300 iterations of 8 ranks. The odd
    # cell's scale is not pulled to the others': pooled, its median stays inside its own fit's 90%
    # interval, and the population's spread is fitted wide
    rng = np.random.default_rng(22)
    parts = [_job(300.0 + 5.0 * rng.standard_normal((300, 8)), gpu, precision)[0] for gpu, precision in CELLS5]
    odd = _job(300.0 + 5.0 * rng.exponential(size=(300, 8)), "C", "fp32")[0]
    pooled = rankmodel.fit_rank_model(pd.concat([*parts, odd], ignore_index=True), seed=6)
    alone = rankmodel.fit_rank_model(odd, seed=6)
    assert pooled.converged, pooled.convergence_note
    lo, hi = np.quantile(_log_sigma(alone, "C|fp32"), [0.05, 0.95])
    others = np.mean([np.median(_log_sigma(pooled, f"{g}|{p}")) for g, p in CELLS5])
    assert others < lo  # the generator's scales do differ, and the fits see it
    assert lo <= np.median(_log_sigma(pooled, "C|fp32")) <= hi
    assert np.median(pooled._post("log_sigma_sd")) > 0.2


def test_simex_extrapolant_recovers_a_scale_exactly() -> None:
    # a delay that is a scale (normal ranks): P(lam) = c·sqrt(1 + lam/(K − 1)), the noise adding lam/(K − 1)
    # of the variance; no noise: c. (The least-squares line in P itself gives c·1.0065 at K = 8, by hand:
    # (4·1.06904 + 1.13389 − 2·1.19523)/3 = 1.00653.)
    k, c = 8, np.array([0.7, 1.0, 3.2])
    p = [c * np.sqrt(1 + lam / (k - 1)) for lam in (1, 2, 3)]
    np.testing.assert_allclose(rankmodel.simex_extrapolate(*p), c, rtol=1e-12)
    assert (4 * p[0] + p[1] - 2 * p[2])[1] / 3 == pytest.approx(1.00653, abs=2e-5)


def _simex_point(sets: list, grid: np.ndarray) -> np.ndarray:
    """The point SIMEX factor of one data set's sets (as RankModelFit._simex_factor, no rank effects)."""
    comp = {"pop_shift": np.zeros((1, 1)), "pop_w": np.ones((1, 1)), "own": np.zeros((1, 0))}
    p = [rankmodel._delay_draws(a, n, 0, float(a[-1]), np.ones(1), np.zeros(1), comp, grid, None)[0]
         for a, n, _ in sets]
    return rankmodel.simex_extrapolate(*p) / p[0]


def test_simex_factor_is_unbiased_for_normal_ranks_and_its_bootstrap_spread_is_the_spread_over_data_sets() -> None:
    # 16 independent data sets of 2,560 iid normal values in collectives of K = 8: the residual contrasts
    # w = e_r − mean of the other 7 (variance 8/7), whose centring noise has sd sqrt(1/7). The true factor is
    # D_e/D_w = sqrt(7/8) at every n (a normal's delay is a scale); the bootstrap's sd of the log factor
    # (simex_boot) against the sd of the point factor over the data sets (simulation truth).
    k, coll, sets_n = 8, 320, 16
    rng = np.random.default_rng(11)
    grid = rankmodel.simex_grid(coll * k)
    points, boot_sd = [], []
    for _ in range(sets_n):
        e = rng.standard_normal((coll, k))
        w = ((e - e.mean(axis=1, keepdims=True)) * k / (k - 1)).ravel()
        sets = rankmodel.simex_sets(w, np.full(w.size, np.sqrt(1 / (k - 1))), rng)
        points.append(np.log(_simex_point(sets, grid)))
        g, dev = rankmodel.simex_boot(sets, w.size, rng, boot=20)
        np.testing.assert_array_equal(g, grid)
        np.testing.assert_allclose(dev.mean(axis=0), 0.0, atol=1e-12)
        boot_sd.append(dev.std(axis=0, ddof=1))
    points = np.array(points)
    # unbiased: the mean over data sets within 3 se (and 0.6%) of log sqrt(7/8) at n = 8 and at the reach
    for j in (2, grid.size - 1):
        se = points[:, j].std(ddof=1) / np.sqrt(sets_n)
        assert abs(points[:, j].mean() - 0.5 * np.log(7 / 8)) < max(3 * se, 0.006), grid[j]
    # the bootstrap's sd within a factor 2 of the spread over data sets, from n = 8 on
    spread, mean_boot = points.std(axis=0, ddof=1), np.mean(boot_sd, axis=0)
    for j in range(2, grid.size):
        assert 0.5 < mean_boot[j] / spread[j] < 2.0, (grid[j], mean_boot[j], spread[j])


@pytest.mark.slow  # eight fits: ~40 s of CPU, 140 s on the shared machine under load
def test_intervals_cover_iid_normal_ranks_over_seeds() -> None:
    # eight data sets of 320 iterations of 8 iid normal ranks through the z-score path, each fitted at the
    # defaults: the 90% intervals of tau(n) against the normal's delay by integration, at n = 8, 64, 512
    truth = np.array([_normal_delay(n) for n in NS[:3]])
    covered, ratios = np.zeros(3), []
    for seed in range(8):
        long, b = _job(np.random.default_rng(100 + seed).standard_normal((320, 8)))
        fit = rankmodel.fit_rank_model(long, seed=seed)
        d = fit.tau_draws(NS[:3], "H100|bf16", draws=600, seed=seed) * b
        lo, med, hi = np.quantile(d, [0.05, 0.5, 0.95], axis=0)
        covered += (lo <= truth) & (truth <= hi)
        ratios.append(med / truth)
    # Binomial(8, 0.9): 5 or fewer of 8 has probability 0.038 per n
    assert (covered >= 6).all(), covered
    assert np.abs(np.mean(ratios, axis=0) - 1).max() < 0.03, np.mean(ratios, axis=0)
