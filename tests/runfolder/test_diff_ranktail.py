"""diff with the default estimator (issue 29): two ranktail fits compared on Δτ(n) and ΔB*, against
what the simulated parents imply (independent of the package): the same parent gives no
difference, a heavier-tailed parent with the same sd a higher tau at large n; a ranktail fit
against a GEV fit is refused (two different estimators)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.blocks.zscores import pooled_zscores
from evtsync.core.errors import InputError
from evtsync.evt.mlefit import MleCellFit, mle_cell_table
from evtsync.evt.ranktail import RankTailFit
from evtsync.runfolder.diff import BandwidthInputs, diff_bstar, diff_fits
from tests._lazy import lazy_module

stats = lazy_module("scipy.stats")

M = 4


def _table(eps: np.ndarray) -> pd.DataFrame:
    x = 1000.0 + 20.0 * eps
    j, s, r = np.meshgrid(*(np.arange(d) for d in x.shape), indexing="ij")
    times = pd.DataFrame({"pg": "0", "block": "b", "instance": j.ravel(), "sample": s.ravel(),
                          "rank": (M * s + r).ravel(), "busy_us": x.ravel(), "gpu": "H100", "precision": "bf16",
                          "position": 0, "signature": "gemm", "index": 2 * j.ravel(), "n_kernels": 2,
                          "n_gemm_kernels": 1})
    return pooled_zscores(times, m=M)[0]


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(5)
    shape = (400, 2, M)
    t3 = stats.t(3).rvs(size=shape, random_state=rng) / np.sqrt(3.0)  # sd 1, heavy tail
    return {"a": _table(rng.standard_normal(shape)), "a2": _table(rng.standard_normal(shape)), "t": _table(t3)}


def test_same_parent_no_difference_heavier_tail_higher(tables) -> None:
    fa, fa2, ft = (RankTailFit.from_table(tables[k], seed=i) for i, k in enumerate(("a", "a2", "t")))
    same = diff_fits(fa, fa2, n=[8, 512], block_sd_us=20.0, m=M)
    assert same.attrs["estimator"] == "ranktail" and set(same["quantity"]) == {"tau_us"}  # no GEV xi
    assert (same["verdict"] == "no difference").all()
    heavy = diff_fits(fa, ft, n=[512], block_sd_us=20.0, m=M)
    assert heavy["verdict"].tolist() == ["higher"]  # t3 with the same sd: a longer tail, a larger max at n = 512
    inputs = BandwidthInputs(["ring"], {"ring": 5.0}, 2.0**28, [-0.5], M)
    bstar = diff_bstar(fa, ft, inputs, n=[512], block_sd_us=20.0)
    assert bstar["verdict"].tolist() == ["lower"] and bstar.attrs["estimator"] == "ranktail"


def test_ranktail_against_a_gev_fit_is_refused(tables) -> None:
    gev = MleCellFit(mle_cell_table(tables["a"], ("gpu", "precision"), column="y"), "gev")
    with pytest.raises(InputError, match="estimator"):
        diff_fits(RankTailFit.from_table(tables["a"]), gev, n=[8], block_sd_us=20.0, m=M)


def test_n_beyond_the_rank_values_of_either_side_is_labelled(tables) -> None:
    """400 groups × 2 samples × 4 ranks = 3,200 rank values on each side (counted by hand): n = 512
    is within, 4096 beyond; both the Δτ and the ΔB* rows say so, with N in the note; xi-less
    ranktail rows only, so a GEV pair has no such label."""
    fa, fa2 = (RankTailFit.from_table(tables[k], seed=i) for i, k in enumerate(("a", "a2")))
    table = diff_fits(fa, fa2, n=[512, 4096], block_sd_us=20.0, m=M).set_index("n")
    assert table.loc[512, "beyond_data"] == False and table.loc[4096, "beyond_data"] == True  # noqa: E712
    assert "beyond the data" in table.attrs["beyond_data_note"] and "H100|bf16 3200" in table.attrs["beyond_data_note"]
    inputs = BandwidthInputs(["ring"], {"ring": 5.0}, 2.0**28, [-0.5], M)
    bstar = diff_bstar(fa, fa2, inputs, n=[512, 4096], block_sd_us=20.0).set_index("n")
    assert bstar["beyond_data"].tolist() == [False, True] and "beyond_data_note" in bstar.attrs
    within = diff_fits(fa, fa2, n=[8, 512], block_sd_us=20.0, m=M)
    assert not within["beyond_data"].any() and "beyond_data_note" not in within.attrs
    gev = [MleCellFit(mle_cell_table(tables[k], ("gpu", "precision"), column="y"), "gev") for k in ("a", "a2")]
    assert not diff_fits(*gev, n=[4096], block_sd_us=20.0, m=M)["beyond_data"].any()
