"""What the rank model says, as tables and sentences (issue 45 item 4; docs/methodology.md, "The rank
model"): the persistently slow ranks with their effect and interval, the variance shares, the shape
xi with its verdict, and tau(n) under a stated fleet assumption, per cell. ``evtsync ranks`` prints
these; :func:`slow_rank_sentence` is the one wording of a slow rank (``evtsync ranks`` and the
summary row's ``slow_rank_text`` the report's first screen shows).

Units: the model works in the block's pooled sd; ``b_us`` (per cell, µs: b = mean r × mean a,
:func:`evtsync.predict.tables.block_scale`) converts to µs where it is known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL
from evtsync.evt.families import tail_verdict
from evtsync.evt.rankmodel import FLEET_WORDING, SLOW_LEVEL, SLOW_MIN_SD, RankModelFit

#: The domain size of the "without it tau(n) would be ..." clause, when it is among those asked.
WITHOUT_N = 512
#: Interval level of every table here (the model's own, the project's 90%).
LEVEL = INTERVAL_LEVEL
#: Predictive draws of the with/without medians of a slow rank's clause (a median only: 400 draws hold its
#: Monte Carlo error well below the effect of a rank named slow).
WITHOUT_DRAWS = 400


def slow_rule(fit: RankModelFit) -> str:
    """The rule by which a rank is named persistently slow, in words (the same for every fit)."""
    del fit
    return slow_rule_text()


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
                    b_us: Mapping[str, float] | None = None, draws: int = WITHOUT_DRAWS,
                    seed: int = 0) -> pd.DataFrame:
    """Every rank's effect (:meth:`RankModelFit.rank_effects`, sd units) with ``gpu``, ``precision``, the
    cell's ``b_us`` (NaN where ``b_us`` has none) and the effects in µs (``rho_*_us``, ``vs_others_*_us`` =
    sd × b); for each credibly slow rank tau(n*) of a job from the fleet (``fleet``) without it
    (``exclude_ranks``: ``tau_without_median``/``_lo``/``_hi``) and with every rank
    (``tau_with_median``), posterior medians and the 90% interval, in sd (``…_sd``) and µs (``…_us``);
    n* (``tau_without_n``) = 512 when asked, else the largest n asked; NaN for the other ranks. The one
    builder of the ``rank_effects`` table (the run's ``rankmodel`` stage and ``evtsync ranks``)."""
    effects = fit.rank_effects()
    if effects.empty:
        return effects
    n_star = WITHOUT_N if WITHOUT_N in ns else int(max(ns))
    cells = fit.cells.set_index("cell")
    effects["gpu"] = effects["cell"].map(cells["gpu"]).astype(str)
    effects["precision"] = effects["cell"].map(cells["precision"]).astype(str)
    effects["b_us"] = [float((b_us or {}).get(str(c), np.nan)) for c in effects["cell"]]
    for stem in ("rho_mean", "rho_lo", "rho_hi", "vs_others_mean", "vs_others_lo", "vs_others_hi"):
        effects[f"{stem}_us"] = effects[stem] * effects["b_us"]
    sd_cols = ["tau_without_median_sd", "tau_without_lo_sd", "tau_without_hi_sd", "tau_with_median_sd"]
    effects["tau_without_n"] = np.nan
    for column in sd_cols:
        effects[column] = np.nan
    q = ((1 - LEVEL) / 2, (1 + LEVEL) / 2)
    with_all: dict[str, float] = {}
    for i in np.flatnonzero(effects["slow"].to_numpy(dtype=bool)):
        row = effects.iloc[i]
        cell = str(row["cell"])
        without = fit.tau_draws([n_star], cell, fleet=fleet, draws=draws, seed=seed,
                                exclude_ranks=[str(row["rank"])])[:, 0]
        if cell not in with_all:
            with_all[cell] = float(np.median(fit.tau_draws([n_star], cell, fleet=fleet, draws=draws, seed=seed)[:, 0]))
        lo, hi = np.quantile(without, q)
        effects.loc[effects.index[i], ["tau_without_n", *sd_cols]] = [
            float(n_star), float(np.median(without)), float(lo), float(hi), with_all[cell]]
    for column in sd_cols:
        effects[column.removesuffix("_sd") + "_us"] = effects[column] * effects["b_us"]
    effects["fleet_assumption"] = FLEET_WORDING[fleet]
    return effects


def slow_rank_sentences(fit: RankModelFit, b_us: Mapping[str, float] | None = None, n: int = WITHOUT_N,
                        fleet: str = "new", table: pd.DataFrame | None = None) -> dict[str, str]:
    """cell -> the sentence naming its persistently slow ranks (:func:`slow_rank_sentence`, one per rank,
    joined), for the cells that have one: what ``evtsync ranks`` prints. A fit that did not converge
    says so in the sentence. ``table``: :func:`slow_rank_table`'s, when already made."""
    if table is None:
        table = slow_rank_table(fit, [n], fleet=fleet, b_us=b_us)
    out: dict[str, str] = {}
    for cell, part in table[table["slow"]].groupby("cell", sort=False):
        text = "; ".join(slow_rank_sentence(r, _cell_words(fit, str(cell)), FLEET_WORDING[fleet])
                         for r in part.to_dict("records"))
        note = fit.convergence_note if fit.convergence_note.startswith("NOT CONVERGED") else \
            f"NOT CONVERGED: {fit.convergence_note}"
        out[str(cell)] = text + ("" if fit.converged else f" ({note})")
    return out


# --------------------------------------------------------------------------------------------- run-folder tables
#: The rank model's tables in a run folder (``tables/<name>.parquet``, written by the ``rankmodel`` stage).
RANK_TABLES = ("rank_effects", "rank_variance", "rank_xi", "rank_loo")
#: The stage that writes them, and its fit files (free shape; xi ≡ 0).
RANK_STAGE = "rankmodel"
RANK_FIT_FILES = ("fits/rankmodel.nc", "fits/rankmodel-gumbel.nc")
#: A shared share (drift + shocks) of the block variance at least this large is material: the first
#: screen says that it costs nothing in the tax (it cancels in max − mean; docs/methodology.md).
MATERIAL_SHARED_SHARE = 0.2
#: The label of the xi = 0 fit in ``rank_loo`` (the other row is the free shape).
GUMBEL_LOO_MARK = "xi = 0"


def model_words(chains: int | None) -> str:
    """The rank model in words, for the methods paragraph and summary.json."""
    return f"hierarchical rank model (PyMC, nutpie, {chains if chains else '?'} chains)"


def _f(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _cell_key(row: Mapping[str, Any]) -> tuple[str, str]:
    return str(row.get("gpu")), str(row.get("precision"))


def slow_rank_sentence(row: Mapping[str, Any], cell_words: str, fleet_words: str) -> str:
    """One slow rank of :func:`slow_rank_table` (``tables/rank_effects``) in words: its effect against the
    cell's other ranks (µs per block where b is known, else sd) with its 90% interval and P(rho > 0), and
    tau(n) without it (posterior median with its 90% interval) against tau(n) with it (posterior median),
    under the fleet assumption ``fleet_words``. The one wording of a slow rank (summary, report, ``ranks``)."""
    pct = f"{_f(row.get('level', LEVEL)):.0%}"
    mean_us, lo_us, hi_us = (_f(row.get(k)) for k in ("vs_others_mean_us", "vs_others_lo_us", "vs_others_hi_us"))
    if np.isfinite(mean_us):
        effect = f"{mean_us:+.3g} µs per block [{pct} interval {lo_us:+.3g} to {hi_us:+.3g}]"
    else:
        effect = (f"{_f(row['vs_others_mean']):+.2f} sd [{pct} interval {_f(row['vs_others_lo']):+.2f} to "
                  f"{_f(row['vs_others_hi']):+.2f}]")
    text = (f"{_rank_words(str(row['rank']))} of {cell_words} is persistently slow: {effect} against the cell's "
            f"other ranks ({_f(row['vs_others_mean']):+.2f} sd; P(rho > 0) = {_f(row['p_positive']):.3f})")
    n = _f(row.get("tau_without_n"))
    keys = ("tau_without_median", "tau_without_lo", "tau_without_hi", "tau_with_median")
    for unit, fmt in (("us", "{:.4g} µs"), ("sd", "{:.3g} sd")):
        values = [_f(row.get(f"{k}_{unit}")) for k in keys]
        if np.isfinite(n) and all(np.isfinite(values)):
            text += (f"; without it tau({int(n)}) would be {fmt.format(values[0])} [{values[1]:.4g}, {values[2]:.4g}] "
                     f"instead of {fmt.format(values[3])} (posterior medians, {pct} interval; {fleet_words})")
            break
    return text


def rank_model_block(effects: pd.DataFrame | None, variance: pd.DataFrame | None, xi: pd.DataFrame | None,
                     loo: pd.DataFrame | None, converged: bool | None, convergence: str, chains: int | None,
                     fleet: str = "new") -> tuple[dict[tuple[str, str], dict[str, Any]], dict[str, Any]]:
    """What the rank model's run-folder tables say, for the answer table: (per (gpu, precision) the
    summary row's columns, the ``rank_model`` block of summary.json). Reads only the tables (no
    statistic is computed here but the selection of rows); a table that is missing leaves its part
    out (the caller says why). docs/data-model.md, "summary.json", states the block's fields."""
    fleet_words = FLEET_WORDING[fleet]
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    cells: dict[tuple[str, str], dict[str, Any]] = {}

    def cell(key: tuple[str, str]) -> dict[str, Any]:
        return cells.setdefault(key, {"gpu": key[0], "precision": key[1]})

    if xi is not None and len(xi):
        kind = xi["kind"].astype(str) if "kind" in xi else pd.Series("cell", index=xi.index)
        for r in xi[kind == "cell"].to_dict("records"):
            key = _cell_key(r)
            lo, hi = _f(r["xi_lo"]), _f(r["xi_hi"])
            verdict = tail_verdict(lo, hi)  # read from the interval here: never a verdict its interval contradicts
            cell(key)["xi"] = {"median": _f(r.get("xi_median")), "mean": _f(r["xi_mean"]), "lo": lo, "hi": hi,
                               "level": _f(r.get("level", LEVEL)), "p_positive": _f(r["p_xi_positive"]),
                               "verdict": verdict}
            rows.setdefault(key, {}).update(
                rank_xi_median=_f(r.get("xi_median")), rank_xi_mean=_f(r["xi_mean"]), rank_xi_lo=lo, rank_xi_hi=hi,
                p_xi_positive=_f(r["p_xi_positive"]), verdict=verdict,
                verdict_source="xi of the rank times' GPD tail, hierarchical rank model (posterior median, "
                               f"{_f(r.get('level', LEVEL)):.0%} interval)")
        pooled = [{"kind": str(k), "level_name": str(r.get(k) or ""),
                   **{c: _f(r.get(c)) for c in ("xi_mean", "xi_median", "xi_lo", "xi_hi", "p_xi_positive")},
                   "level": _f(r.get("level", LEVEL)),
                   "verdict": tail_verdict(_f(r["xi_lo"]), _f(r["xi_hi"]))}
                  for k in ("gpu", "precision") for r in xi[kind == k].to_dict("records")]
    else:
        pooled = []
    if variance is not None and len(variance):
        for r in variance.to_dict("records"):
            key = _cell_key(r)
            v = {k: _f(r.get(f"share_{k}")) for k in ("shared", "drift", "shocks", "rank", "rank_lo", "rank_hi",
                                                      "idiosyncratic")}
            v["drift_range_sd"] = _f(r.get("drift_range_sd"))
            cell(key)["variance_shares"] = v
            rows.setdefault(key, {}).update({f"share_{k}": val for k, val in v.items() if k != "drift_range_sd"},
                                            drift_range_sd=v["drift_range_sd"])
    if effects is not None and len(effects):
        for key, part in effects.groupby([effects["gpu"].astype(str), effects["precision"].astype(str)], sort=True):
            words = f"{key[0]} {key[1]}"
            entry = cell(key)
            entry["n_ranks"] = len(part)
            slow = part[part["slow"].astype(bool)]
            entry["slow_ranks"] = [
                {"rank": str(r["rank"]),
                 **{k: _f(r.get(k)) for k in ("vs_others_mean", "vs_others_lo", "vs_others_hi", "vs_others_mean_us",
                                              "vs_others_lo_us", "vs_others_hi_us", "p_positive", "level",
                                              "tau_without_n", "tau_without_median_us", "tau_without_lo_us",
                                              "tau_without_hi_us", "tau_with_median_us")},
                 "text": slow_rank_sentence(r, words, fleet_words)}
                for r in slow.to_dict("records")]
            if len(slow):
                text = "; ".join(s["text"] for s in entry["slow_ranks"])
                if converged is False:
                    text += f" (rank model {not_converged_words(convergence)})"
                rows.setdefault(key, {})["slow_rank_text"] = text
            rows.setdefault(key, {})["n_slow_ranks"] = len(slow)
    block: dict[str, Any] = {
        "model": model_words(chains), "level": LEVEL, "converged": converged, "convergence": convergence,
        "fleet_assumption": fleet_words, "slow_rule": slow_rule_text(),
        "cells": [cells[k] for k in sorted(cells)], "pooled_xi": pooled}
    if loo is not None and len(loo):
        block["loo"] = loo_block(loo)
    for key in rows:
        rows[key]["rank_model_converged"] = converged
    return rows, block


def not_converged_words(convergence: str) -> str:
    """"NOT CONVERGED: <why>" from a convergence line, whether or not it starts with those words."""
    why = convergence.removeprefix("NOT CONVERGED").lstrip(": ")
    return f"NOT CONVERGED: {why}" if why else "NOT CONVERGED"


def slow_rule_text() -> str:
    """:func:`slow_rule` without a fit (the rule does not depend on one)."""
    return (f"a rank is named persistently slow when P(effect > 0) ≥ 1 − {SLOW_LEVEL:g}/R (R the cell's ranks) and "
            f"its posterior median effect is ≥ {SLOW_MIN_SD:g} sd")


def loo_block(loo: pd.DataFrame) -> dict[str, Any]:
    """``tables/rank_loo.parquet`` (best first; ``d_elpd`` ≤ 0 the difference to the best, ``d_se`` its se)
    as summary.json's ``loo``: the rows, the preferred fit, the difference and whether it is clear (more
    than 2 standard errors), and the sentence. Both fits share the hierarchy, the thresholds and the data
    (the excesses), so the difference is the shape's gain alone."""
    table = loo.sort_values("elpd_loo", ascending=False).reset_index(drop=True)
    best, rival = table.iloc[0], table.iloc[-1]
    diff, se = abs(_f(rival["d_elpd"])), _f(rival["d_se"])
    clear = bool(len(table) > 1 and diff > 2 * se)
    gumbel = GUMBEL_LOO_MARK in str(best["model"])
    if len(table) < 2:
        sentence = f"Rank model LOO: one fit only ({best['model']}); nothing to compare."
    else:
        sentence = (f"Rank model, PSIS-LOO on the same excesses: {best['model']} is preferred over {rival['model']} "
                    f"by Δelpd {diff:.3g} ± {se:.2g}"
                    + (" (more than 2 standard errors)" if clear else
                       " — less than 2 standard errors: not a clear preference")
                    + "; both fits share the hierarchy, thresholds and body, so this is the shape's gain alone"
                    + (" (xi = 0: the Gumbel domain)." if gumbel else "."))
    return {"rows": table.to_dict("records"), "preferred": str(best["model"]),
            "preferred_family": "gumbel" if gumbel else "free", "d_elpd": diff, "d_se": se, "clear": clear,
            "sentence": sentence}
