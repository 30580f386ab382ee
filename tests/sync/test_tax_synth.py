"""The tax on synthetic traces equals the generator's ground truth, in both formats."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from evtsync.sync.collectives import align_collectives
from evtsync.sync.tax import compute_tax
from evtsync.synth import SynthConfig, synthesize
from evtsync.trace.traceset import load_traces

NUMERIC = ["tau_max_us", "tau_med_us", "mean_delay_us", "straggler_rank", "n_ranks"]


def _study(tmp_path: Path, fmt: str, **layout) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    config = SynthConfig.build(format=fmt, seed=11, iterations=4, **layout)
    result = synthesize(config, tmp_path / fmt)
    alignment = align_collectives(load_traces(result.traces_dir))
    return compute_tax(alignment).collectives, result.truth, alignment.groups


def _truth_table(truth: dict) -> pd.DataFrame:
    rows = []
    for c in truth["collectives"]:
        rows.append({"pg_ranks": ",".join(map(str, c["ranks"])), "index": c["index"],
                     "tau_max_us": float(c["tau_max_us"]), "tau_med_us": float(c["tau_med_us"]),
                     "mean_delay_us": float(c["mean_delay_us"]),
                     "straggler_rank": c["straggler_rank"], "n_ranks": c["n_ranks"],
                     "tie": c["straggler_tie"]})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("fmt", ["modern", "legacy"])
def test_tax_equals_ground_truth(tmp_path: Path, fmt: str) -> None:
    table, truth, groups = _study(tmp_path, fmt, ranks=16, tp=4, fsdp=2)
    expected = _truth_table(truth)
    merged = expected.merge(table, on=["pg_ranks", "index"], suffixes=("_truth", ""),
                            how="outer", indicator=True)
    assert (merged["_merge"] == "both").all(), "every true collective found, nothing extra"
    for col in ["tau_max_us", "tau_med_us", "mean_delay_us", "n_ranks"]:
        assert (merged[col] == merged[f"{col}_truth"]).all(), col
    clear = ~merged["tie"]
    assert clear.sum() > 0.9 * len(merged)
    assert (merged.loc[clear, "straggler_rank"] == merged.loc[clear, "straggler_rank_truth"]).all()
    # 16 ranks on two hosts with a clock offset: every group found with its true members
    true_groups = {",".join(map(str, g["ranks"])) for g in truth["process_groups"]
                   if g["kind"] != "default"}
    assert set(groups["pg_ranks"]) == true_groups
    assert (groups["pg_source"] == ("trace" if fmt == "modern" else "inferred")).all()


def test_modern_and_legacy_give_identical_tables(tmp_path: Path) -> None:
    modern, _, _ = _study(tmp_path, "modern", ranks=8, tp=4)
    legacy, _, _ = _study(tmp_path, "legacy", ranks=8, tp=4)
    key = ["pg_ranks", "index"]
    a = modern.sort_values(key).reset_index(drop=True)
    b = legacy.sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[key + NUMERIC + ["collective", "end_spread_us"]],
                                  b[key + NUMERIC + ["collective", "end_spread_us"]])
    # the modern format also knows sizes and dtypes; the legacy one cannot
    assert (a["bytes"] > 0).all() and (b["bytes"] == -1).all()
