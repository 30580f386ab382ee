"""Shocks, drift and persistently slow ranks in simulated rank times (``evtsync synth``, issue 45).

The truth ``ground_truth.json`` states for a job with slow ranks ("a job of n ranks from the same
fleet") is checked against a brute-force simulation written here; the shock and the drift are
checked in the raw trace numbers the truth lists (each collective's per-rank busy times): they
move every rank of a collective alike, so max − mean is unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

from evtsync.cli import main
from evtsync.core.errors import InputError
from evtsync.synth import SynthConfig, synthesize
from evtsync.synth.config import parse_slow_rank
from tests._lazy import lazy_module

# SciPy (and evtsync.synth.parents, which imports it) on first use, not at collection (issue 48)
stats = lazy_module("scipy.stats")
parents = lazy_module("evtsync.synth.parents")

SMALL = {"ranks": 8, "tp": 8, "iterations": 12, "layers": 1, "cpu_delay_rate": 0.0}


def _brute_force(draw, shifts: np.ndarray, n: int, jobs: int, seed: int) -> tuple[float, float]:
    """(mean, standard error) of max_n V − mean_n V, V = eps + rho, rho drawn uniformly from ``shifts``."""
    rng = np.random.default_rng(seed)
    v = draw(rng, (jobs, n)) + shifts[rng.integers(0, shifts.size, (jobs, n))]
    d = v.max(axis=1) - v.mean(axis=1)
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(jobs))


@pytest.mark.parametrize("n", [8, 64])
def test_fleet_truth_matches_a_brute_force_simulation(n: int) -> None:
    fleet = np.array([1.5, 0, 0, 0, 0, 0, 0, 0.0])  # one rank of 8 persistently 1.5 sd slow
    mean, se = _brute_force(lambda rng, shape: rng.standard_normal(shape), fleet, n, 200_000, seed=n)
    assert parents.true_delay_sd("normal", n, tuple(fleet)) == pytest.approx(mean, abs=4 * se)
    # and it differs from the iid truth by far more than that error: the slow rank matters
    assert parents.true_delay_sd("normal", n, tuple(fleet)) - parents.true_delay_sd("normal", n) > 20 * se


def test_gamma_parent_truth_matches_a_brute_force_simulation() -> None:
    sd = np.sqrt(2.0)  # gamma(shape 2): mean 2, sd sqrt(2)
    mean, se = _brute_force(lambda rng, shape: (rng.gamma(2.0, size=shape) - 2.0) / sd, np.zeros(1), 8, 200_000, 1)
    assert parents.true_delay_sd("gamma", 8) == pytest.approx(mean, abs=4 * se)
    # a fleet of two slow ranks among 16, gamma parent
    fleet = np.zeros(16)
    fleet[[3, 11]] = 1.5
    mean, se = _brute_force(lambda rng, shape: (rng.gamma(2.0, size=shape) - 2.0) / sd, fleet, 64, 100_000, 2)
    assert parents.true_delay_sd("gamma", 64, tuple(fleet)) == pytest.approx(mean, abs=4 * se)


def test_a_fleet_without_slow_ranks_is_the_iid_truth() -> None:
    assert parents.true_delay_sd("normal", 512, (0.0,) * 8) == pytest.approx(parents.true_delay_sd("normal", 512), rel=1e-9)
    # and a shift common to every rank changes nothing (max − mean is shift-invariant)
    assert parents.true_delay_sd("normal", 64, (2.0,) * 8) == pytest.approx(parents.true_delay_sd("normal", 64), rel=1e-6)


def _busy(res) -> dict[tuple[int, int], np.ndarray]:
    """(block position, iteration) -> the 8 ranks' busy times in µs, from the truth's per-instance lists."""
    out: dict[tuple[int, int], np.ndarray] = {}
    for block in res.truth["blocks"]:
        by_iter: dict[int, dict[int, int]] = {}
        for inst in block["instances"]:
            by_iter.setdefault(inst["iteration"], {}).update(zip(inst["ranks"], inst["busy_us"], strict=True))
        for j, ranks in by_iter.items():
            out[(block["position"], j)] = np.array([ranks[r] for r in sorted(ranks)], dtype=float)
    return out


@pytest.fixture(scope="module")
def plain_and_shocked(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("departures")
    plain = synthesize(SynthConfig.build(parent="normal", seed=5, **SMALL), base / "plain")
    shocked = synthesize(SynthConfig.build(parent="normal", seed=5, shock_sd=1.0, **SMALL), base / "shock")
    return plain, shocked


def test_the_shock_moves_every_rank_of_a_collective_alike_and_cancels_in_max_minus_mean(plain_and_shocked) -> None:
    plain, shocked = plain_and_shocked
    a, b = _busy(plain), _busy(shocked)
    assert a.keys() == b.keys() and len(a) > 20
    shift = np.array([b[k] - a[k] for k in a])                  # (collectives, ranks) µs
    spread = shift.max(axis=1) - shift.min(axis=1)
    assert spread.max() <= 2                                     # the same for every rank (integer rounding)
    b_us = [blk["b_design_us"] for blk in plain.truth["blocks"]]
    per_coll_b = np.array([b_us[[blk["position"] for blk in plain.truth["blocks"]].index(p)] for p, _ in a])
    shock_sd = np.std(shift.mean(axis=1) / per_coll_b)
    assert 0.7 < shock_sd < 1.3                                  # a shock of sd b is really there (~90 collectives)
    tau_a = np.array([v.max() - v.mean() for v in a.values()])
    tau_b = np.array([v.max() - v.mean() for v in b.values()])
    assert np.abs(tau_a - tau_b).max() <= 2                      # cancels in max − mean
    assert shocked.truth["parent"]["true_straggler_delay_sd"] == plain.truth["parent"]["true_straggler_delay_sd"]
    assert shocked.truth["parent"]["departures"]["shock_sd"] == 1.0


def test_drift_spans_its_range_and_a_slow_rank_is_slow_in_every_block(tmp_path) -> None:
    plain = synthesize(SynthConfig.build(parent="normal", seed=6, **SMALL), tmp_path / "p")
    drift = synthesize(SynthConfig.build(parent="normal", seed=6, drift_sd=3.0, **SMALL), tmp_path / "d")
    slow = synthesize(SynthConfig.build(parent="normal", seed=6, slow_ranks=((2, 1.5),), **SMALL), tmp_path / "s")
    a, d, s = _busy(plain), _busy(drift), _busy(slow)
    b_of = {blk["position"]: blk["b_design_us"] for blk in plain.truth["blocks"]}
    # the drift: one shift per collective, linear in the iteration, 3 sd from the first row to the last
    # (rows 0..iterations: the simulation's J + 1 rows, of which the truth lists the profiled ones)
    per = {k: float(np.mean(d[k] - a[k])) / b_of[k[0]] for k in a}
    slope = np.polyfit([j for _, j in per], list(per.values()), 1)[0]
    assert slope * SMALL["iterations"] == pytest.approx(3.0, rel=0.05)
    assert max(np.ptp(d[k] - a[k]) for k in a) <= 2
    # the slow rank: +1.5 b on rank 2 only, in every block and iteration
    extra = np.array([(s[k] - a[k]) / b_of[k[0]] for k in a])
    assert extra[:, 2] == pytest.approx(1.5, abs=0.05)
    assert np.abs(np.delete(extra, 2, axis=1)).max() < 0.05
    truth = slow.truth["parent"]
    assert truth["departures"]["slow_ranks"] == {"2": 1.5}
    assert truth["true_straggler_delay_sd"]["64"] == pytest.approx(parents.true_delay_sd("normal", 64, (0, 0, 1.5, 0, 0, 0, 0, 0)))
    assert "same fleet" in truth["fleet"]
    blk = slow.truth["blocks"][0]
    assert blk["true_straggler_delay_us"]["8"] == pytest.approx(blk["b_design_us"] * truth["true_straggler_delay_sd"]["8"])


@pytest.mark.parametrize(("changes", "message"), [
    ({"shock_sd": 1.0, "parent": None}, "give a parent"),
    ({"shock_sd": -1.0}, "shock_sd must be a number in"),
    ({"drift_sd": float("nan")}, "drift_sd must be a number in"),
    ({"drift_shape": "zigzag"}, "unknown drift_shape"),
    ({"slow_ranks": ((8, 1.5),)}, "rank outside 0..7"),
    ({"slow_ranks": ((1, 1.5), (1, 2.0))}, "given twice"),
    ({"slow_ranks": ((1, 0.0),)}, "non-zero number"),
])
def test_bad_departures_are_refused_with_a_clear_error(changes, message) -> None:
    kwargs = {"parent": "normal", **SMALL, **changes}
    with pytest.raises(InputError, match=message):
        SynthConfig.build(**kwargs)


def test_slow_rank_flag_parses_and_cli_refuses_bad_input(tmp_path, capsys) -> None:
    assert parse_slow_rank("3:1.5") == (3, 1.5)
    for bad in ("3", "a:1", "3:1.5:2"):
        with pytest.raises(InputError, match="expected RANK:SD"):
            parse_slow_rank(bad)
    rc = main(["synth", str(tmp_path / "x"), "--parent", "normal", "--slow-rank", "9:1.5", "--ranks", "8"])
    assert rc != 0
    err = capsys.readouterr().err
    assert "rank outside 0..7" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_cli_writes_the_departures_and_the_gamma_parent(tmp_path) -> None:
    rc = main(["synth", str(tmp_path / "g"), "--parent", "gamma", "--ranks", "8", "--tp", "8", "--iterations", "6",
               "--layers", "1", "--shock-sd", "0.5", "--drift", "1", "--drift-shape", "smooth", "--slow-rank", "0:1"])
    assert rc == 0
    import json

    truth = json.loads((tmp_path / "g" / "ground_truth.json").read_text())
    assert truth["parent"]["name"] == "gamma"
    assert truth["parent"]["departures"] == {"shock_sd": 0.5, "drift_sd": 1.0, "drift_shape": "smooth",
                                             "slow_ranks": {"0": 1.0}, "unit": "b = cv·a, the sd of eps in µs"}
    # gamma(2) at n = 2: E[max_2] = 2·E[X F(X)] (the density of the larger of two is 2 f F), by scipy's
    # expectation, independent of the package's quadrature of 1 − F^n
    f = stats.gamma(2.0)
    e_max2 = 2 * f.expect(lambda x: x * f.cdf(x))
    assert parents.true_delay_sd("gamma", 2) == pytest.approx((e_max2 - 2.0) / np.sqrt(2.0), rel=1e-6)


def test_the_rank_models_input_does_not_see_the_shock_or_the_drift(plain_and_shocked, tmp_path) -> None:
    """Through the user's path (traces → z-score table → per-rank values → within-collective contrasts) a
    shock or a drift changes nothing but the integer rounding: what the issue-45 study's drift rows rely on."""
    import evtsync
    from evtsync.evt.rankmodel import decompose, rank_table_from_zscores

    plain, shocked = plain_and_shocked
    drift = synthesize(SynthConfig.build(parent="normal", seed=5, drift_sd=3.0, **SMALL), tmp_path / "d")

    def contrasts(res) -> np.ndarray:
        (cell,) = decompose(rank_table_from_zscores(evtsync.zscore_table(evtsync.load_traces(res.traces_dir))))
        return np.sort(cell.w)

    base = contrasts(plain)
    for other in (shocked, drift):
        w = contrasts(other)
        assert w.shape == base.shape
        assert np.abs(w - base).max() < 0.05          # 1 µs rounding against b ≈ 20-100 µs
    # while the raw values themselves move by about the shock's sd: the departure is real
    raw = rank_table_from_zscores(evtsync.zscore_table(evtsync.load_traces(shocked.traces_dir)))["value"]
    raw0 = rank_table_from_zscores(evtsync.zscore_table(evtsync.load_traces(plain.traces_dir)))["value"]
    assert raw.std() > 1.2 * raw0.std()
