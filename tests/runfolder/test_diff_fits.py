"""Fit-level comparison of two runs: Δξ and Δτ(n) per GPU × precision cell (issue 17)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.evt.fit import tree_from_draws
from evtsync.runfolder.diff import diff_fits
from tests._lazy import lazy_module

stats = lazy_module("scipy.stats")


def _tree(cells: list[str], xi_mean: dict[str, float], converged: bool = True, seed: int = 0):
    rng = np.random.default_rng(seed)
    table = pd.DataFrame({"cell": cells, "gpu": [c.split("|")[0] for c in cells],
                          "precision": [c.split("|")[1] for c in cells]})
    n = len(cells)
    xi = np.stack([xi_mean[c] + 0.01 * rng.standard_normal((2, 2000)) for c in cells], axis=-1)
    draws = {"mu": np.full((2, 2000, n), 0.8), "sigma": np.full((2, 2000, n), 0.45), "xi": xi}
    return tree_from_draws(draws, table, rng.gumbel(size=3 * n), np.arange(3 * n) % n, converged=converged)


def test_delta_xi_and_tau_with_verdicts() -> None:
    a = _tree(["H200|bf16", "H200|fp32"], {"H200|bf16": 0.10, "H200|fp32": 0.05})
    b = _tree(["H200|bf16", "B200|bf16"], {"H200|bf16": 0.05, "B200|bf16": 0.0}, seed=1)
    table = diff_fits(a, b, n=[64], block_sd_us=20.0)
    xi = table[(table["cell"] == "H200|bf16") & (table["quantity"] == "xi")].iloc[0]
    # difference of two independent Normal(., 0.01) posteriors: Normal(-0.05, 0.01·sqrt 2)
    assert xi["d_mean"] == pytest.approx(-0.05, abs=0.002)
    half = stats.norm.ppf(0.95) * 0.01 * np.sqrt(2)
    assert xi["d_lo"] == pytest.approx(-0.05 - half, abs=0.003)
    assert xi["d_hi"] == pytest.approx(-0.05 + half, abs=0.003)
    assert xi["verdict"] == "lower" and xi["prob_lower"] > 0.99
    tau = table[(table["cell"] == "H200|bf16") & (table["quantity"] == "tau_us")].iloc[0]
    assert tau["verdict"] == "lower" and tau["n"] == 64
    only = table[table["cell"].isin(["H200|fp32", "B200|bf16"])]
    assert set(only["verdict"]) == {"no verdict"}
    assert set(only["reason"]) == {"cell only in A", "cell only in B"}


def test_non_converged_fit_gives_no_verdict() -> None:
    a = _tree(["H200|bf16"], {"H200|bf16": 0.10})
    b = _tree(["H200|bf16"], {"H200|bf16": 0.0}, converged=False)
    table = diff_fits(a, b, n=[64], block_sd_us=20.0)
    assert set(table["verdict"]) == {"no verdict"} and table["reason"].str.contains("not converged").all()


# --------------------------------------------------------------------------- ΔB*

EULER_GAMMA = 0.5772156649015329
S_BYTES = 256 * 2**20


def _gumbel_tree(mu: float, sigma: float, cells=("H200|bf16",), converged: bool = True, seed: int = 0,
                 sd: float = 1e-4, name: str = "gumbel"):
    """A Gumbel fit whose posterior is (almost) a point: mu, sigma with sd ``sd``, xi = 0."""
    rng = np.random.default_rng(seed)
    cells = list(cells)
    table = pd.DataFrame({"cell": cells, "gpu": [c.split("|")[0] for c in cells],
                          "precision": [c.split("|")[1] for c in cells]})
    shape = (2, 2000, len(cells))
    draws = {"mu": mu + sd * rng.standard_normal(shape), "sigma": sigma * np.exp(sd * rng.standard_normal(shape)),
             "xi": np.zeros(shape)}
    return tree_from_draws(draws, table, rng.gumbel(size=3 * len(cells)), np.arange(3 * len(cells)) % len(cells),
                           model_name=name, family="gumbel", converged=converged)


def _hand_bstar_gbps(mu: float, sigma: float, b: float, n: int, m: int, alpha: float, p: float, eps: float) -> float:
    """B* by hand: tau = b (mu + sigma (gamma + ln(n/m))) (the mean maximum of n/m Gumbels),
    B* = q S (1 + eps) / (-eps (p alpha + tau)) with q = 2 (n - 1)/n (AllReduce)."""
    tau_us = b * (mu + sigma * (EULER_GAMMA + np.log(n / m)))
    q = 2 * (n - 1) / n
    return q * S_BYTES * (1 + eps) / (-eps * (p * alpha + tau_us) * 1e-6) / 1e9


def test_delta_bstar_against_hand_computed_bandwidths() -> None:
    from evtsync.runfolder.diff import BandwidthInputs, diff_bstar

    a = _gumbel_tree(0.8, 0.45)
    b = _gumbel_tree(1.6, 0.45, seed=1)  # a heavier tax on B: B* must come out lower
    inputs = BandwidthInputs(["full", "ring"], {"full": 5.0, "ring": 5.0}, S_BYTES, [-0.5, -0.1])
    table = diff_bstar(a, b, inputs, n=[8, 64], block_sd_us=20.0)
    assert len(table) == 2 * 2 * 2 and set(table["verdict"]) == {"lower"}
    for r in table.itertuples():
        p = 2.0 if r.topology == "full" else 2.0 * (r.n - 1)
        want_a = _hand_bstar_gbps(0.8, 0.45, 20.0, r.n, 4, 5.0, p, r.eps)
        want_b = _hand_bstar_gbps(1.6, 0.45, 20.0, r.n, 4, 5.0, p, r.eps)
        assert r.p == p and r.alpha_us == 5.0 and r.bytes == S_BYTES
        assert r.a_median_gbps == pytest.approx(want_a, rel=1e-3)
        assert r.b_median_gbps == pytest.approx(want_b, rel=1e-3)
        assert r.d_median_gbps == pytest.approx(want_b - want_a, rel=2e-3)
        assert r.d_lo_gbps <= want_b - want_a <= r.d_hi_gbps
        assert r.d_rel_median == pytest.approx(want_b / want_a - 1, rel=2e-3)
    assert "S = 2.68435e+08 bytes" in table.attrs["inputs"] and "eps -0.5, -0.1" in table.attrs["inputs"]


def test_delta_bstar_no_effect_refusals_and_missing_b() -> None:
    from evtsync.runfolder.diff import BandwidthInputs, diff_bstar

    inputs = BandwidthInputs(["full"], {"full": 5.0}, S_BYTES)
    # no effect: two posteriors of the same tail, each with a real spread -> no difference
    same = diff_bstar(_gumbel_tree(0.8, 0.45, sd=0.05), _gumbel_tree(0.8, 0.45, seed=3, sd=0.05), inputs,
                      n=[64], block_sd_us=20.0)
    assert same["verdict"].tolist() == ["no difference"]
    assert same["d_lo_gbps"].iloc[0] < 0 < same["d_hi_gbps"].iloc[0]
    # a non-converged fit: numbers, but no verdict, with the reason
    unconv = diff_bstar(_gumbel_tree(0.8, 0.45), _gumbel_tree(1.6, 0.45, converged=False, name="late"), inputs,
                        n=[64], block_sd_us=20.0).iloc[0]
    assert unconv["verdict"] == "no verdict" and "late not converged" in unconv["reason"]
    assert np.isfinite(unconv["d_median_gbps"])
    # a cell in one fit only, and a cell without a block sd
    two = _gumbel_tree(0.8, 0.45, cells=("H200|bf16", "H100|bf16"))
    rows = diff_bstar(two, _gumbel_tree(0.8, 0.45, cells=("H200|bf16", "A100|bf16")), inputs, n=[64],
                      block_sd_us={"H200|bf16": 20.0}).set_index("cell")
    assert rows.loc["H100|bf16", "reason"] == "cell only in A" and rows.loc["A100|bf16", "reason"] == "cell only in B"
    assert rows.loc["H200|bf16", "verdict"] != "no verdict"
    table = diff_bstar(two, two, inputs, n=[64], block_sd_us={"H200|bf16": 20.0}).set_index("cell")
    assert table.loc["H100|bf16", "reason"] == "no block sd b for cell H100|bf16"


def test_delta_bstar_carries_alphas_interval() -> None:
    """With the tax fixed on both sides, the interval of ΔB* comes from alpha alone: its bounds
    are ΔB*(alpha) at alpha's quantiles (ΔB* is monotone in alpha), computed by hand."""
    from evtsync.runfolder.diff import BandwidthInputs, diff_bstar

    a, b = _gumbel_tree(0.8, 0.45, sd=0.0), _gumbel_tree(1.6, 0.45, seed=1, sd=0.0)
    point = diff_bstar(a, b, BandwidthInputs(["full"], {"full": 8.0}, S_BYTES), n=[64], block_sd_us=20.0).iloc[0]
    assert point["d_lo_gbps"] == pytest.approx(point["d_hi_gbps"], rel=1e-9)  # a point tax and a point alpha
    alpha = np.linspace(4.0, 16.0, 4001)  # uniform on [4, 16] µs: quantiles 4.6 and 15.4
    inputs = BandwidthInputs(["full"], {"full": 8.0}, S_BYTES, alpha_draws_us={"full": alpha})
    row = diff_bstar(a, b, inputs, n=[64], block_sd_us=20.0).iloc[0]
    assert row["alpha_source"] == "draws"

    def hand(al: float) -> float:
        return _hand_bstar_gbps(1.6, 0.45, 20.0, 64, 4, al, 2.0, -0.5) - _hand_bstar_gbps(0.8, 0.45, 20.0, 64, 4, al, 2.0, -0.5)

    assert row["d_lo_gbps"] == pytest.approx(hand(4.6), rel=0.01)  # the most negative: smallest alpha
    assert row["d_hi_gbps"] == pytest.approx(hand(15.4), rel=0.01)
    assert row["d_hi_gbps"] - row["d_lo_gbps"] > 0.1 * abs(point["d_median_gbps"])


def test_a_differing_configuration_refuses_every_fit_level_verdict() -> None:
    from evtsync.runfolder.diff import BandwidthInputs, diff_bstar

    a, b = _gumbel_tree(0.8, 0.45), _gumbel_tree(1.6, 0.45, seed=1)
    why = "sample size m of the z-scores differs (4 vs 8)"
    fits = diff_fits(a, b, n=[64], block_sd_us=20.0, refuse=[why])
    bstar = diff_bstar(a, b, BandwidthInputs(["full"], {"full": 5.0}, S_BYTES), n=[64], block_sd_us=20.0, refuse=[why])
    for table in (fits, bstar):
        assert set(table["verdict"]) == {"no verdict"} and set(table["reason"]) == {why}
    assert bstar["d_median_gbps"].notna().all()  # the numbers stay, only the verdict is refused
