"""`evtsync blocks` on synthetic traces whose compute noise was drawn from a known GEV.

The generator (evtsync.synth) builds per-rank block run times whose pooled z-scores (methodology §5)
are GEV draws it records in ground_truth.json. Here the traces go through the reader, the
PG alignment and the block cutting, and the z-scores that come out must be the recorded ones
(to floating-point rounding: the generator's times are integer µs) and fit back to the GEV
within the fit's standard errors.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.blocks.cut import zscore_table
from evtsync.cli import main
from evtsync.evt.mle import fit_gev
from evtsync.synth import SynthConfig, synthesize
from evtsync.trace.traceset import TraceSet, load_traces


def truth_table(truth: dict, offset: int) -> pd.DataFrame:
    rows = []
    for block in truth["blocks"]:
        for inst in block["instances"]:
            rows.append({"position": block["position"], "instance": inst["iteration"] + offset,
                         "ranks": ",".join(map(str, inst["ranks"])), "z_truth": inst["z"],
                         "z_span_truth": inst["z_span"], "z_design": inst["z_design"],
                         "max_rank_truth": inst["max_rank"], "sd_truth": block["s_pooled_us"],
                         "mean_truth": block["mean_us"], "has_gemm": block["has_gemm"]})
    return pd.DataFrame(rows)


def run_blocks(paths: list[Path], out: Path, *extra: str) -> pd.DataFrame:
    assert main(["-q", "blocks", *map(str, paths), "-o", str(out), *extra]) == 0
    return pd.read_parquet(out)


@pytest.fixture(scope="module")
def tp8(tmp_path_factory: pytest.TempPathFactory):
    """8 ranks in one TP group (samples: even and odd ranks), H200 bf16, 20 iterations."""
    cfg = SynthConfig.build(ranks=8, tp=8, iterations=20, layers=4, seed=11, gpu="H200", precision="bf16")
    result = synthesize(cfg, tmp_path_factory.mktemp("synth-tp8"))
    return cfg, result


@pytest.fixture(scope="module")
def tp8_traces(tp8) -> TraceSet:
    return load_traces(list(tp8[1].traces.values()))


def test_zscores_equal_the_generators(tp8, tmp_path: Path) -> None:
    cfg, result = tp8
    truth = result.truth
    table = run_blocks(list(result.traces.values()), tmp_path / "z.parquet", "--workload", "llm")
    expected = truth_table(truth, cfg.first_step)
    assert set(expected["ranks"]) == {"0,2,4,6", "1,3,5,7"}
    gemm = expected[expected["has_gemm"]]
    assert len(table) == len(gemm) > 500
    merged = table.merge(gemm, on=["position", "instance", "ranks"], how="inner", validate="one_to_one")
    assert len(merged) == len(table)
    np.testing.assert_allclose(merged["z"], merged["z_truth"], rtol=0, atol=1e-9)
    # the design z before the generator rounded times to integer µs: rounding error only
    assert np.abs(merged["z"] - merged["z_design"]).max() < 0.05
    assert (merged["max_rank"] == merged["max_rank_truth"]).all()
    np.testing.assert_allclose(merged["block_sd_us"], merged["sd_truth"], rtol=1e-12)
    np.testing.assert_allclose(merged["block_mean_us"], merged["mean_truth"], rtol=1e-12)
    assert (table["gpu"] == "H200").all() and (table["precision"] == "bf16").all()
    assert (table["workload"] == "llm").all()
    assert table["block"].nunique() == truth_table(truth, 0)["position"].nunique()
    assert np.allclose(table["cv"], cfg.cv, rtol=0.05)


def test_span_zscores_equal_the_generators(tp8, tp8_traces: TraceSet) -> None:
    cfg, result = tp8
    table = zscore_table(tp8_traces, time="span")
    merged = table.merge(truth_table(result.truth, cfg.first_step), on=["position", "instance", "ranks"])
    assert len(merged) == len(table) > 500
    np.testing.assert_allclose(merged["z"], merged["z_span_truth"], rtol=0, atol=1e-9)


def test_zscores_fit_back_to_the_generating_gev(tp8, tp8_traces: TraceSet) -> None:
    cfg, _ = tp8
    table = zscore_table(tp8_traces)
    mu, sigma, xi = cfg.gev_params
    fit = fit_gev(table["z"].to_numpy())
    assert fit.converged
    # each parameter within 3 standard errors (observed information) of the truth
    for name, value in (("mu", mu), ("sigma", sigma), ("xi", xi)):
        assert abs(getattr(fit, name) - value) < 3 * fit.se[name], (name, getattr(fit, name), value, fit.se)


def test_two_tp_groups_legacy_format_pool_over_replicas(tmp_path: Path) -> None:
    """Legacy traces (no PG fields: groups inferred) with two TP groups of 4 and FSDP pairs:
    the default PG choice takes both TP groups and pools each block over them."""
    cfg = SynthConfig.build(ranks=8, tp=4, fsdp=2, iterations=5, layers=2, seed=5, format="legacy",
                            gpu="A100", precision="fp32")
    result = synthesize(cfg, tmp_path / "legacy")
    table = run_blocks(list(result.traces.values()), tmp_path / "zl.parquet")
    assert table["pg"].nunique() == 2 and (table["gpu"] == "A100").all() and (table["precision"] == "fp32").all()
    expected = truth_table(result.truth, cfg.first_step)
    assert set(table["ranks"]) == {"0,1,2,3", "4,5,6,7"}
    merged = table.merge(expected, on=["position", "instance", "ranks"], validate="one_to_one")
    assert len(merged) == len(table) == int(expected["has_gemm"].sum())
    np.testing.assert_allclose(merged["z"], merged["z_truth"], rtol=0, atol=1e-9)


def test_blocks_scope_gives_the_same_zscores(traces_dir, tmp_path) -> None:  # noqa: ANN001
    """``scope="blocks"`` (what ``evtsync blocks`` reads) keeps every row the blocks need:
    z-scores, block times, drops and iteration sources equal those of the full tables, on
    a synthetic study with ProfilerStep annotations and on the real 8-rank DLRM traces."""
    import pandas as pd

    from evtsync.blocks.cut import compute_zscores
    from evtsync.synth import SynthConfig, synthesize
    from evtsync.trace.traceset import load_traces

    synthetic = synthesize(SynthConfig.build(ranks=8, tp=4, iterations=3, layers=1, seed=9), tmp_path).traces_dir
    checked = 0
    for folder, options in ((synthetic, {}), (traces_dir / "dlrm-8rank-v100", {"m": 2, "keep_all": True})):
        full = load_traces(folder, jobs=1)
        reduced = load_traces(folder, jobs=1, scope="blocks")
        assert len(reduced.cpu_ops) + len(reduced.runtime) < len(full.cpu_ops) + len(full.runtime)
        table, blocks = compute_zscores(full, **options)
        other, other_blocks = compute_zscores(reduced, **options)
        pd.testing.assert_frame_equal(other, table)
        pd.testing.assert_frame_equal(other_blocks.times, blocks.times)
        pd.testing.assert_frame_equal(other_blocks.dropped, blocks.dropped)
        assert other_blocks.iterations == blocks.iterations
        checked += len(table) > 0
    assert checked == 2
