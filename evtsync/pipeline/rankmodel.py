"""The rank model's tables of the ``rankmodel`` stage (issue 45; docs/methodology.md, "The rank
model"): the fit of xi free and of xi ≡ 0 on the same data, and what the summary and the report
read of them.

==============================  ================================================================
table                           rows
==============================  ================================================================
``tables/rank_effects``         one per rank: :meth:`RankModelFit.rank_effects` in sd units and in
                                µs (× the cell's block sd ``b_us``); for a credibly slow rank
                                tau(``tau_without_n``) without it and with it (µs)
``tables/rank_variance``        one per cell: :meth:`RankModelFit.variance_shares`
``tables/rank_xi``              per cell (``kind`` "cell") the rank model's xi with its verdict,
                                and the pooled xi0 + delta per GPU (``kind`` "gpu") and per
                                precision (``kind`` "precision")
``tables/rank_loo``             PSIS-LOO of xi free against xi ≡ 0 on the same excesses
==============================  ================================================================
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

#: The domain size of the "without this slow rank" prediction (issue 45, item 4).
N_WITHOUT = 512
#: The labels of the two fits in ``tables/rank_loo`` (the summary and the report read them).
LOO_FREE = "xi free"
LOO_GUMBEL = "xi = 0 (Gumbel domain)"
#: The group columns of every table here.
_GROUPS = ("gpu", "precision")


def _b_of(scales: pd.DataFrame, cells: pd.DataFrame) -> dict[str, float]:
    """Each cell's block sd b (µs) by label, from the run's block-scale table (NaN when it has none)."""
    lookup = {f"{g}|{p}": float(b) for g, p, b in zip(scales["gpu"].astype(str), scales["precision"].astype(str),
                                                      scales["b_us"], strict=True)}
    return {str(c): lookup.get(str(c), float("nan")) for c in cells["cell"]}


def rank_effects_table(fit: Any, scales: pd.DataFrame, n_without: int = N_WITHOUT,
                       draws: int = 1000) -> pd.DataFrame:
    """``tables/rank_effects``: :func:`evtsync.evt.rankreport.slow_rank_table` of the fit (every rank's
    effect in sd and µs; for a credibly slow rank tau(``n_without``) without it and with it, fleet "a job
    of n ranks from the same fleet") with each cell's b from the run's block-scale table ``scales``."""
    from evtsync.evt.rankreport import slow_rank_table

    return slow_rank_table(fit, [n_without], b_us=_b_of(scales, fit.cells), draws=draws, seed=0)


def rank_variance_table(fit: Any) -> pd.DataFrame:
    """:meth:`~evtsync.evt.rankmodel.RankModelFit.variance_shares` with ``gpu`` and ``precision``."""
    shares = fit.variance_shares()
    cells = fit.cells.set_index("cell")
    for g in _GROUPS:
        shares[g] = shares["cell"].map(cells[g]).astype(str)
    return shares


def rank_xi_table(fit: Any) -> pd.DataFrame:
    """Per cell the rank model's xi (``kind`` "cell", :meth:`RankModelFit.xi_summary`, with ``gpu`` and
    ``precision``), then the pooled xi0 + delta per GPU level (``kind`` "gpu": ``gpu`` the level,
    ``cell`` and ``precision`` empty) and per precision (``kind`` "precision")
    (:meth:`RankModelFit.xi_pooled`); each row with xi_mean, xi_median, xi_lo, xi_hi, level,
    p_xi_positive and verdict."""
    cells = fit.cells.set_index("cell")
    per_cell = fit.xi_summary()
    per_cell.insert(0, "kind", "cell")
    for g in _GROUPS:
        per_cell[g] = per_cell["cell"].map(cells[g]).astype(str)
    pooled = fit.xi_pooled()
    rows = []
    for r in pooled.to_dict(orient="records"):
        level_name = r.pop("level_name")
        rows.append({"kind": r["kind"], "cell": "", "gpu": level_name if r["kind"] == "gpu" else "",
                     "precision": level_name if r["kind"] == "precision" else "",
                     **{k: v for k, v in r.items() if k != "kind"}})
    columns = ["kind", "cell", "gpu", "precision", "xi_mean", "xi_median", "xi_lo", "xi_hi", "level",
               "p_xi_positive", "verdict"]
    return pd.concat([per_cell[columns], pd.DataFrame(rows, columns=columns)], ignore_index=True)


def rank_loo_table(free: Any, gumbel: Any) -> pd.DataFrame:
    """PSIS-LOO of the two fits on the same excesses (:func:`evtsync.evt.rankmodel.loo_table`)."""
    from evtsync.evt.rankmodel import loo_table

    return loo_table([(LOO_FREE, free), (LOO_GUMBEL, gumbel)])


def convergence_info(fit: Any) -> dict[str, Any]:
    """A fit's convergence as the manifest records it: max R-hat, min bulk ESS, divergences, converged,
    its line, and the CPU seconds of its fit."""
    attrs = fit.attrs
    return {"converged": bool(int(attrs.get("converged", 0))), "max_rhat": float(attrs.get("max_rhat", np.nan)),
            "min_ess_bulk": float(attrs.get("min_ess_bulk", np.nan)), "divergences": int(attrs.get("divergences", 0)),
            "convergence": str(attrs.get("convergence", "")), "draws": int(attrs.get("draws", 0)),
            "chains": int(attrs.get("chains", 0)), "fit_cpu_seconds": round(float(attrs.get("fit_cpu_seconds", 0.0)), 3)}
