"""Test helper: the rank model's tables of a run folder (the ``rankmodel`` stage's schema, issue 45)
written from a fit by the stage's own table builders (:mod:`evtsync.pipeline.rankmodel`), so that
the summary and the report are exercised on the real columns without running the whole pipeline.
Tests only; writes into the given run folder (a tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from evtsync.evt.rankmodel import RankModelFit, loo_table
from evtsync.pipeline import rankmodel as stage


def write_rank_tables(run: Path, fit: RankModelFit, gumbel: RankModelFit | None, b_us: dict[str, float],
                      draws: int = 200) -> None:
    """tables/rank_effects, rank_variance, rank_xi, rank_loo and fits/rankmodel*.nc of ``fit``
    (``b_us``: each cell's block sd by label ``gpu|precision``)."""
    tables = run / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    scales = pd.DataFrame([(*c.split("|"), b) for c, b in b_us.items()], columns=["gpu", "precision", "b_us"])
    stage.rank_effects_table(fit, scales, draws=draws).to_parquet(tables / "rank_effects.parquet")
    stage.rank_variance_table(fit).to_parquet(tables / "rank_variance.parquet")
    stage.rank_xi_table(fit).to_parquet(tables / "rank_xi.parquet")
    loo = stage.rank_loo_table(fit, gumbel) if gumbel is not None else loo_table([("xi free", fit)])
    loo.to_parquet(tables / "rank_loo.parquet")
    fit.save(run / "fits" / "rankmodel.nc")
    if gumbel is not None:
        gumbel.save(run / "fits" / "rankmodel-gumbel.nc")
