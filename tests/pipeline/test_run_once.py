"""What the run computes once and its stages share (evtsync.pipeline.engine.Run.once): the centred
fallback's GEV MLE is fitted once for prediction and predicted-vs-measured, and again only when the
z-score table changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.pipeline.engine import Run
from evtsync.pipeline.options import RunOptions


def _z(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"gpu": "H100", "precision": "bf16", "y": rng.gumbel(1.0, 0.3, size=60),
                         "z": rng.gumbel(size=60)})


def test_once_computes_once_per_file_state(tmp_path: Path) -> None:
    run = Run(RunOptions(out=tmp_path))
    (tmp_path / "a.txt").write_text("one", encoding="utf-8")
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return len(calls)

    assert run.once("a.txt", "x", compute) == 1
    assert run.once("a.txt", "x", compute) == 1  # the same value, not computed again
    assert run.once("a.txt", "y", compute) == 2  # another value of the same file
    (tmp_path / "a.txt").write_text("a longer text", encoding="utf-8")  # rewritten: its size differs
    assert run.once("a.txt", "x", compute) == 3
    assert len(calls) == 3


def test_the_centred_fallback_is_fitted_once_for_both_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evtsync.evt import mlefit
    from evtsync.pipeline import stages

    fitted: list[int] = []
    real = mlefit.mle_cell_table

    def counted(*args, **kwargs):
        fitted.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(mlefit, "mle_cell_table", counted)
    run = Run(RunOptions(out=tmp_path))
    run.write_table("tables/zscores.parquet", _z(0))
    first, reason = stages._mle_centred_fallback(run)  # the prediction stage's
    again, _ = stages._mle_centred_fallback(run)  # predicted-vs-measured's
    assert again is first and len(fitted) == 1
    assert "GEV MLE of y" in reason
    # the fit is the MLE of the table's y: its location near the simulated Gumbel's 1.0
    row = first.table[(first.table["family"] == "gev") & (first.table["gpu"] == "H100")]
    assert float(row["mu"].iloc[0]) == pytest.approx(1.0, abs=0.15)
    run.write_table("tables/zscores.parquet", _z(1).iloc[:50])  # a new table: fitted again
    third, _ = stages._mle_centred_fallback(run)
    assert third is not first and len(fitted) == 2
