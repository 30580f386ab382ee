"""What the rank model says, as tables and sentences (issue 45 item 4; docs/methodology.md, "The rank
model"): the persistently slow ranks with their effect and interval, the variance shares, the shape
xi with its verdict, and tau(n) under a stated fleet assumption, per cell. ``evtsync ranks`` prints
these; :func:`slow_rank_sentences` gives the sentence the report's first screen shows
(``slow_rank_text`` of a summary row).

Units: the model works in the block's pooled sd; ``b_us`` (per cell, µs: b = mean r × mean a,
:func:`evtsync.predict.tables.block_scale`) converts to µs where it is known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL
from evtsync.evt.rankmodel import FLEET_WORDING, SLOW_LEVEL, SLOW_MIN_SD, RankModelFit

#: The domain size of the "without it tau(n) would be ..." clause, when it is among those asked.
WITHOUT_N = 512
#: Interval level of every table here (the model's own, the project's 90%).
LEVEL = INTERVAL_LEVEL
#: Predictive draws of the with/without medians of a slow rank's clause (a median only: 400 draws hold its
#: Monte Carlo error well below the effect of a rank named slow).
WITHOUT_DRAWS = 400


def slow_rule(fit: RankModelFit) -> str:
    """The rule by which a rank is named persistently slow, in words."""
    return (f"a rank is named persistently slow when P(effect > 0) ≥ 1 − {SLOW_LEVEL:g}/R (R the cell's ranks) and "
            f"its posterior median effect is ≥ {SLOW_MIN_SD:g} sd")


def _cell_words(fit: RankModelFit, cell: str) -> str:
    row = fit.cells.set_index("cell").loc[cell]
    return f"{row['gpu']} {row['precision']}"


def _rank_words(label: str) -> str:
    """``workload|pg|rank`` -> "rank R (PG pg, workload W)" (the parts that are not empty)."""
    parts = str(label).split("|")
    rank = parts[-1]
    extra = []
    if len(parts) >= 2 and parts[-2]:
        extra.append(f"PG {parts[-2]}")
    if len(parts) >= 3 and parts[0]:
        extra.append(f"workload {parts[0]}")
    return f"rank {rank}" + (f" ({', '.join(extra)})" if extra else "")


def tau_table(fit: RankModelFit, ns: Sequence[int], fleet: str = "new", b_us: Mapping[str, float] | None = None,
              draws: int = 1000, seed: int = 0) -> pd.DataFrame:
    """tau(n) per cell and n: the posterior median and 90% interval of D(n) (sd units) and, with ``b_us``,
    of tau(n) = b·D(n) in µs; ``point`` says the point is the posterior median, ``fleet_assumption`` the fleet."""
    rows = []
    for cell in fit.cells["cell"]:
        d = fit.tau_draws(list(ns), cell, fleet=fleet, draws=draws, seed=seed)
        b = (b_us or {}).get(cell)
        for j, n in enumerate(ns):
            lo, med, hi = np.quantile(d[:, j], [(1 - LEVEL) / 2, 0.5, (1 + LEVEL) / 2])
            rows.append({"cell": cell, "n": int(n), "d_median_sd": float(med), "d_lo_sd": float(lo),
                         "d_hi_sd": float(hi), "b_us": float(b) if b is not None else np.nan,
                         "tau_median_us": float(b * med) if b is not None else np.nan,
                         "tau_lo_us": float(b * lo) if b is not None else np.nan,
                         "tau_hi_us": float(b * hi) if b is not None else np.nan, "level": LEVEL,
                         "point": "posterior median", "fleet": fleet, "fleet_assumption": FLEET_WORDING[fleet],
                         "model": fit.name, "converged": fit.converged})
    return pd.DataFrame(rows)


def slow_rank_table(fit: RankModelFit, ns: Sequence[int] = (WITHOUT_N,), fleet: str = "new",
                    b_us: Mapping[str, float] | None = None, draws: int = WITHOUT_DRAWS, seed: int = 0) -> pd.DataFrame:
    """Every rank's effect (``rank_effects``) with µs columns where ``b_us`` gives b, and for each credibly
    slow rank tau(n*) with and without it (n* = 512 when asked, else the largest n asked; medians)."""
    effects = fit.rank_effects()
    n_star = WITHOUT_N if WITHOUT_N in ns else int(max(ns))
    for col in ("vs_others_mean", "vs_others_lo", "vs_others_hi"):
        effects[col.replace("vs_others", "effect") + "_us"] = [
            v * (b_us or {}).get(c, np.nan) for v, c in zip(effects[col], effects["cell"], strict=True)]
    effects["n_without"] = n_star
    effects["tau_with_median_sd"] = np.nan
    effects["tau_without_median_sd"] = np.nan
    for i, row in effects[effects["slow"]].iterrows():
        cell = row["cell"]
        with_ = fit.tau_draws([n_star], cell, fleet=fleet, draws=draws, seed=seed)[:, 0]
        without = fit.tau_draws([n_star], cell, fleet=fleet, draws=draws, seed=seed, exclude_ranks=[row["rank"]])[:, 0]
        effects.loc[i, "tau_with_median_sd"] = float(np.median(with_))
        effects.loc[i, "tau_without_median_sd"] = float(np.median(without))
    effects["fleet_assumption"] = FLEET_WORDING[fleet]
    return effects


def _us(value: float, b: float | None, signed: bool = False) -> str:
    if b is None or not np.isfinite(b):
        return ""
    return f"{value * b:+.3g} µs" if signed else f"{value * b:.4g} µs"


def slow_rank_sentence(row: Mapping[str, Any], cell_words: str, b: float | None) -> str:
    """One slow rank in words: its effect against the cell's other ranks (sd, µs per block) with its 90%
    interval, and tau(n*) without it (posterior medians)."""
    per_block = _us(row["vs_others_mean"], b, signed=True)
    lo, hi = row["vs_others_lo"], row["vs_others_hi"]
    interval = f"[90% interval {lo:+.2f} to {hi:+.2f} sd" + (
        f", {_us(lo, b, True)} to {_us(hi, b, True)}]" if per_block else "]")
    n = int(row["n_without"])
    unit = (lambda v: _us(v, b)) if per_block else (lambda v: f"{v:.3g} sd")
    without = (f"; without it tau({n}) would be {unit(row['tau_without_median_sd'])} instead of "
               f"{unit(row['tau_with_median_sd'])} (posterior medians, {row['fleet_assumption']})"
               if np.isfinite(row["tau_without_median_sd"]) else "")
    return (f"{_rank_words(row['rank'])} of {cell_words} is persistently slow: {row['vs_others_mean']:+.2f} sd"
            + (f" ({per_block} per block)" if per_block else "") + f" against the cell's other ranks {interval}"
            + without)


def slow_rank_sentences(fit: RankModelFit, b_us: Mapping[str, float] | None = None, n: int = WITHOUT_N,
                        fleet: str = "new", table: pd.DataFrame | None = None) -> dict[str, str]:
    """cell -> the sentence naming its persistently slow ranks (one sentence per rank, joined), for the
    cells that have one: what a summary row's ``slow_rank_text`` holds (the report's first screen). A
    fit that did not converge says so in the sentence. ``table``: :func:`slow_rank_table`'s, when already made."""
    if table is None:
        table = slow_rank_table(fit, [n], fleet=fleet, b_us=b_us)
    out: dict[str, str] = {}
    for cell, part in table[table["slow"]].groupby("cell", sort=False):
        text = "; ".join(slow_rank_sentence(r, _cell_words(fit, str(cell)), (b_us or {}).get(str(cell)))
                         for r in part.to_dict("records"))
        note = fit.convergence_note if fit.convergence_note.startswith("NOT CONVERGED") else \
            f"NOT CONVERGED: {fit.convergence_note}"
        out[str(cell)] = text + ("" if fit.converged else f" ({note})")
    return out
