"""Any group size gets z-scores (issue 46, item 7): a group of n = k·m + r ranks gives k samples of
exactly m ranks per block, drawn without replacement, the r left-over ranks rotating block by block.

Truth: hand-written sample tables, and the synthetic job's own ``ground_truth.json`` (per block
instance, every rank's busy time drawn by the generator), never evtsync's z-scores.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evtsync.blocks.cut import block_sampling, compute_zscores, sample_of
from evtsync.synth import synthesize
from evtsync.synth.config import SynthConfig
from evtsync.trace.traceset import load_traces


def test_sample_of_by_hand():
    # n = 8, m = 4: the paper's even/odd split, the same in every block
    assert sample_of(np.arange(8), 0, 8, 4).tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert sample_of(np.arange(8), 5, 8, 4).tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    # n = 6, m = 4 (r = 2): block 0 keeps positions 0-3; block 1 shifts by 2: q = p+2 mod 6, so
    # positions 4,5,0,1 (q 0-3) sit in, 2,3 (q 4,5) out; block 2: q = p+4 mod 6: 2,3,4,5 in, 0,1 out
    assert sample_of(np.arange(6), 0, 6, 4).tolist() == [0, 0, 0, 0, -1, -1]
    assert sample_of(np.arange(6), 1, 6, 4).tolist() == [0, 0, -1, -1, 0, 0]
    assert sample_of(np.arange(6), 2, 6, 4).tolist() == [-1, -1, 0, 0, 0, 0]
    assert sample_of(np.arange(6), 3, 6, 4).tolist() == [0, 0, 0, 0, -1, -1]
    # n = 5, m = 4 (a prime size): one rank out per block, each in turn
    outs = [int(np.flatnonzero(sample_of(np.arange(5), j, 5, 4) < 0)[0]) for j in range(5)]
    assert sorted(outs) == [0, 1, 2, 3, 4]
    # n = 9, m = 4: 2 samples of 4, one rank out
    s = sample_of(np.arange(9), 0, 9, 4)
    assert (s == 0).sum() == 4 and (s == 1).sum() == 4 and (s == -1).sum() == 1


def test_block_sampling_says_which_m_and_how():
    import pandas as pd

    rows = block_sampling(pd.DataFrame({"pg": ["1", "2"], "n_ranks": [6, 8]}), 4, "w")
    assert rows[0]["m"] == 4 and rows[0]["samples_per_block"] == 1 and rows[0]["ranks_sitting_out_per_block"] == 2
    assert "without replacement" in rows[0]["how"]
    assert rows[1]["samples_per_block"] == 2 and rows[1]["ranks_sitting_out_per_block"] == 0


@pytest.fixture(scope="module")
def six_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("six")
    # the generator's own samples are of 3 (6 = 2·3); evtsync cuts them with its default m = 4
    synthesize(SynthConfig(ranks=6, tp_groups=((0, 1, 2, 3, 4, 5),), iterations=6, sample_size=3, seed=3,
                           parent="normal", gzip=True, hidden=6144, ffn=24576), out)
    return out


def test_six_rank_group_gets_samples_of_four_every_rank_in_turn(six_ranks: Path):
    truth = json.loads((six_ranks / "ground_truth.json").read_text())
    table, blocks = compute_zscores(load_traces([six_ranks / "traces"], cache=False), m=4)
    assert blocks.m == 4 and len(table) > 0
    ranks = [tuple(int(r) for r in text.split(",")) for text in table["ranks"]]
    assert all(len(set(r)) == 4 for r in ranks)  # exactly m distinct ranks per sample
    assert {r for rs in ranks for r in rs} == set(range(6))  # every rank takes part in turn
    # the slowest rank of each sample, from the generator's busy times of those 4 ranks
    busy: dict[tuple[int, int], dict[int, float]] = {}
    for b in truth["blocks"]:
        for inst in b["instances"]:
            busy.setdefault((b["position"], inst["iteration"]), {}).update(zip(inst["ranks"], inst["busy_us"], strict=True))
    first = truth["config"]["first_step"]
    checked = 0
    for row, rs in zip(table.itertuples(), ranks, strict=True):
        times = busy.get((int(row.position), int(row.instance) - first))
        if times is None:
            continue
        vals = [times[r] for r in rs]
        if sorted(vals)[-1] - sorted(vals)[-2] > 2:  # a clear maximum (the trace rounds to 1 µs)
            assert int(row.max_rank) == rs[int(np.argmax(vals))]
            assert abs(float(row.max_us) - max(vals)) <= 2
            checked += 1
    assert checked >= len(table) // 2


@pytest.mark.slow
def test_run_on_a_six_rank_job_fits_its_zscores(six_ranks: Path, tmp_path: Path):
    """`evtsync run` on 6 ranks with the default m = 4 (before: "PG … has 6 ranks, not a multiple of the
    sample size m=4", nothing fitted): z-scores, a fit, and the manifest says which m and how."""
    from evtsync.cli import main

    out = tmp_path / "run"
    assert main(["-q", "run", str(six_ranks / "traces"), "--out", str(out), "--no-cache", "--model", "gumbel"]) == 0
    import pandas as pd

    z = pd.read_parquet(out / "tables" / "zscores.parquet")
    assert len(z) and all(len(r.split(",")) == 4 for r in z["ranks"])
    assert (out / "fits" / "gumbel.nc").is_file()
    manifest = json.loads((out / "manifest.json").read_text())
    sampling = manifest["stages"]["zscores"]["summary"]["sampling"]
    assert sampling[0]["n_ranks"] == 6 and sampling[0]["m"] == 4 and sampling[0]["ranks_sitting_out_per_block"] == 2
