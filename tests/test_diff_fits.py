"""Fit-level comparison of two runs: Δξ and Δτ(n) per GPU × precision cell (issue 17)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from evtsync.diff import diff_fits
from evtsync.evt.fit import tree_from_draws


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
