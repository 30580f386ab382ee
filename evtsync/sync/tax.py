"""The synchronization tax of every aligned collective instance (methodology §3).

For instance l of a PG with member ranks R and NCCL kernel durations d_r:
tau_max = max d - min d, tau_med = median d - min d, mean straggler delay = mean d - min d,
straggler = argmin d (the last rank to arrive), wait share of rank r = (d_r - min d) / d_r.
Ties for the straggler go to the lowest rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.display import TablesDisplay
from evtsync.core.intervals import median_interval, median_interval_kind
from evtsync.core.parallel import Backend
from evtsync.sync.collectives import (
    MISMATCH_COLUMNS,
    Alignment,
    GroupAlignment,
    GroupTask,
    align_collectives,
    align_group,
    merge_alignments,
    plan_alignment,
)
from evtsync.trace.traceset import TraceSet

TAX_COLUMNS = ["pg", "pg_desc", "pg_ranks", "pg_source", "index", "window", "collective", "bytes", "dtype",
               "n_ranks", "tau_max_us", "tau_med_us", "mean_delay_us", "straggler_rank",
               "fastest_rank", "min_dur_us", "max_dur_us", "end_spread_us", "start_ns", "valid"]
RANK_COLUMNS = ["pg", "index", "window", "rank", "collective", "dur_us", "wait_us", "wait_share",
                "is_straggler", "ts_ns", "end_ns"]


@dataclass(repr=False)
class TaxTables(TablesDisplay):
    """The tax per collective instance (``collectives``) and per rank (``ranks``).

    The streaming tax of NCCL Inspector logs (:func:`evtsync.sync.logtax.stream_tax` with
    ``keep_ranks=False``) leaves ``ranks`` empty and keeps what the summaries read of it:
    ``instance_shares`` (per ``pg`` and ``index``, the ``max`` and ``median`` wait share
    over its ranks) and ``members`` (per PG, the ranks seen in its collectives).
    """

    collectives: pd.DataFrame
    ranks: pd.DataFrame
    instance_shares: pd.DataFrame | None = None
    members: dict[str, list[int]] | None = None


def compute_tax(alignment: Alignment) -> TaxTables:
    """Tax tables from aligned collectives; instances flagged by a mismatch get valid=False.

    Parameters
    ----------
    alignment : Alignment
        The matched collectives of :func:`evtsync.align_collectives`.

    Returns
    -------
    TaxTables
        ``collectives``: one row per collective instance (tau_max, straggler, fastest rank,
        ``valid``); ``ranks``: one row per rank of each instance (its wait). Empty tables (with
        their columns) when the alignment has no instance.
    """
    inst = alignment.instances
    if inst.empty:
        return TaxTables(pd.DataFrame(columns=TAX_COLUMNS), pd.DataFrame(columns=RANK_COLUMNS))
    inst = inst.sort_values(["pg", "index", "rank"], kind="stable").reset_index(drop=True)
    dur_us = inst["dur_ns"].to_numpy() / 1000.0
    keys = inst[["pg", "index"]]
    grouped = pd.DataFrame({"pg": keys["pg"], "index": keys["index"], "rank": inst["rank"],
                            "dur_us": dur_us, "end_ns": inst["end_ns"], "ts_ns": inst["ts_ns"]})
    g = grouped.groupby(["pg", "index"], sort=True)
    stats = g["dur_us"].agg(["min", "max", "median", "mean", "size"])
    # straggler: the rank of the minimum duration (lowest rank on ties: rows are rank-sorted)
    straggler = grouped.loc[g["dur_us"].idxmin(), ["pg", "index", "rank"]].set_index(["pg", "index"])["rank"]
    fastest = grouped.loc[g["dur_us"].idxmax(), ["pg", "index", "rank"]].set_index(["pg", "index"])["rank"]
    first = inst.groupby(["pg", "index"], sort=True).first()
    groups = alignment.groups.set_index("pg")
    table = pd.DataFrame({
        "pg": stats.index.get_level_values(0),
        "pg_desc": groups.loc[stats.index.get_level_values(0), "pg_desc"].to_numpy(),
        "pg_ranks": groups.loc[stats.index.get_level_values(0), "pg_ranks"].to_numpy(),
        "pg_source": groups.loc[stats.index.get_level_values(0), "pg_source"].to_numpy(),
        "index": stats.index.get_level_values(1).astype(np.int64),
        "window": first["window"].to_numpy() if "window" in first.columns else 0,  # profiling window
        "collective": first["collective"].to_numpy(),
        "bytes": first["msg_bytes"].to_numpy().astype(np.int64),
        "dtype": first["dtype"].to_numpy(),
        "n_ranks": stats["size"].to_numpy().astype(np.int64),
        "tau_max_us": (stats["max"] - stats["min"]).to_numpy(),
        "tau_med_us": (stats["median"] - stats["min"]).to_numpy(),
        "mean_delay_us": (stats["mean"] - stats["min"]).to_numpy(),
        "straggler_rank": straggler.to_numpy().astype(np.int64),
        "fastest_rank": fastest.to_numpy().astype(np.int64),
        "min_dur_us": stats["min"].to_numpy(),
        "max_dur_us": stats["max"].to_numpy(),
        # NaN where a rank's end time is unknown (NCCL Inspector logs without kernel times)
        "end_spread_us": ((g["end_ns"].max() - g["end_ns"].min()) / 1000.0).where(g["end_ns"].min() >= 0).to_numpy(),
        "start_ns": g["ts_ns"].min().to_numpy(),
    })
    table["valid"] = [(p, int(i)) not in alignment.invalid for p, i in zip(table["pg"], table["index"], strict=True)]
    table["valid"] &= table["n_ranks"] > 1  # one rank present: no tax measured (tau = 0 by construction)
    min_per_row = grouped.groupby(["pg", "index"])["dur_us"].transform("min").to_numpy()
    wait = dur_us - min_per_row
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(dur_us > 0, wait / dur_us, 0.0)
    # each row's instance straggler, by index alignment (a dict lookup per row cost ~3 µs
    # with pandas' Arrow strings, most of the tax at a million rows)
    strag_per_row = straggler.reindex(pd.MultiIndex.from_arrays([inst["pg"], inst["index"]])).to_numpy()
    ranks = pd.DataFrame({
        "pg": inst["pg"], "index": inst["index"], "window": inst.get("window", 0),
        "rank": inst["rank"],
        "collective": inst["collective"], "dur_us": dur_us, "wait_us": wait, "wait_share": share,
        "is_straggler": inst["rank"].to_numpy() == strag_per_row,
        "ts_ns": inst["ts_ns"], "end_ns": inst["end_ns"]})
    return TaxTables(table.reset_index(drop=True), ranks)


def tax_summary(tax: TaxTables) -> pd.DataFrame:
    """Per PG × collective type: count, median / P90 / max tau_max, median wait shares, over
    the **valid** collectives only.

    The median comes with its distribution-free interval (:func:`evtsync.core.intervals.median_interval`,
    ``_lo_us`` / ``_hi_us``) and what that interval is (``tau_median_interval``: the level, or
    "range of n" where the collectives are too few for it).

    ``count`` is the number of valid collectives the statistics are computed from;
    ``n_invalid`` the number left out because the alignment flagged them (end times apart,
    type or size mismatch, one rank present): a flagged collective's durations do not measure
    a tax, so it never enters a statistic (the statistics are NaN when none is valid).

    ``fastest_wait_share`` is the wait share of the rank that waited longest (the first to
    arrive) in each instance; ``median_rank_wait_share`` the median over ranks; both are
    summarised by their median over instances.

    Parameters
    ----------
    tax : TaxTables
        The tables of :func:`compute_tax`.

    Returns
    -------
    pandas.DataFrame
        One row per PG and collective type.
    """
    cols = ["pg", "pg_desc", "collective", "count", "tau_median_us", "tau_median_lo_us", "tau_median_hi_us",
            "tau_median_interval", "tau_p90_us", "tau_max_us",
            "tau_med_median_us", "fastest_wait_share", "median_rank_wait_share", "n_invalid"]
    if tax.collectives.empty:
        return pd.DataFrame(columns=cols)
    if tax.instance_shares is not None:
        per_instance = tax.instance_shares.set_index(["pg", "index"])[["max", "median"]]
        merged = tax.collectives.assign(pg=tax.collectives["pg"].astype(str)).join(per_instance, on=["pg", "index"])
        merged["pg"] = tax.collectives["pg"]
    else:
        per_instance = tax.ranks.groupby(["pg", "index"])["wait_share"].agg(["max", "median"])
        merged = tax.collectives.join(per_instance, on=["pg", "index"])
    rows = []
    nan = float("nan")
    # one sort, then NumPy slices per (PG, collective type): a pandas group per PG cost ~2 ms,
    # ~1 s at the 513 communicators of 4,096 Inspector logs (issue 48)
    valid_all = merged["valid"].astype(bool).to_numpy()
    tau_all = merged["tau_max_us"].to_numpy(dtype=float)
    tau_med, fastest, median_share = (merged[c].to_numpy(dtype=float) for c in ("tau_med_us", "max", "median"))
    desc = merged["pg_desc"].to_numpy()
    for (pg, coll), at in _groups(merged["pg"], merged["collective"]):
        valid = at[valid_all[at]]
        tau = tau_all[valid]
        median, lo, hi = median_interval(tau)
        rows.append({
            "pg": pg, "pg_desc": desc[at[0]], "collective": coll, "count": len(valid),
            "tau_median_us": median, "tau_median_lo_us": lo, "tau_median_hi_us": hi,
            "tau_median_interval": median_interval_kind(len(tau)),
            "tau_p90_us": float(np.percentile(tau, 90)) if tau.size else nan,
            "tau_max_us": float(tau.max()) if tau.size else nan,
            "tau_med_median_us": _median_skipna(tau_med[valid]) if tau.size else nan,
            "fastest_wait_share": _median_skipna(fastest[valid]) if tau.size else nan,
            "median_rank_wait_share": _median_skipna(median_share[valid]) if tau.size else nan,
            "n_invalid": len(at) - len(valid)})
    return pd.DataFrame(rows, columns=cols)


def _groups(*keys: pd.Series) -> list[tuple[tuple[Any, ...], np.ndarray]]:
    """The row positions of each group of ``keys``, as ``DataFrame.groupby(keys, sort=True)``
    forms them (sorted keys, observed combinations only, missing keys dropped; rows in their
    order within a group)."""
    codes, names = [], []
    for key in keys:
        code, uniques = pd.factorize(key, sort=True)
        codes.append(code)
        names.append(list(uniques))
    keep = np.flatnonzero(np.logical_and.reduce([c >= 0 for c in codes]))
    order = keep[np.lexsort(tuple(c[keep] for c in reversed(codes)))]
    if not len(order):
        return []
    stacked = np.stack([c[order] for c in codes])
    cut = np.flatnonzero(np.r_[True, (stacked[:, 1:] != stacked[:, :-1]).any(axis=0)])
    out = []
    for a, b in zip(cut, [*cut[1:], len(order)], strict=True):
        out.append((tuple(n[int(c[a])] for n, c in zip(names, stacked, strict=True)), order[a:b]))
    return out


def _median_skipna(values: np.ndarray) -> float:
    """The median of the values that are not NaN (NaN if none), as ``Series.median``."""
    values = values[~np.isnan(values)]
    return float(np.median(values)) if values.size else float("nan")


def tax_of_group(task: GroupTask) -> tuple[GroupAlignment, TaxTables]:
    """Align one PG and compute its tax: the unit of work of a parallel backend."""
    part = align_group(task)
    alone = Alignment(pd.DataFrame([part.group]), part.instances,
                      pd.DataFrame(columns=MISMATCH_COLUMNS), part.invalid)
    return part, compute_tax(alone)


def tax_from_traces(traces: TraceSet, *, backend: Backend | None = None,
                    **align_options: Any) -> tuple[Alignment, TaxTables]:
    """Align the collectives of a trace set and compute its tax tables in one call.

    Parameters
    ----------
    traces : TraceSet
        A loaded trace set (scope ``"collectives"`` is enough).
    backend : Backend or None, default None
        A process pool or Dask cluster (:mod:`evtsync.core.parallel`): each process group is aligned
        and taxed as a task of its own; the tables are the same as without one.
    **align_options
        Passed to :func:`evtsync.align_collectives`.

    Returns
    -------
    tuple of (Alignment, TaxTables)
        The alignment and the tax tables of :func:`compute_tax`.

    Raises
    ------
    TraceError
        The rank set is not one complete job.
    AlignmentError, InputError
        As for :func:`evtsync.align_collectives`.
    """
    from evtsync.sync.collectives import note_missing_ranks

    if traces.logged is not None:  # NCCL Inspector logs: matched by (communicator, sequence number)
        alignment = align_collectives(traces, **align_options)
        tables = compute_tax(alignment)
        note_missing_ranks(traces, tables.collectives, tables.ranks)
        return alignment, tables
    if backend is None:
        alignment = align_collectives(traces, **align_options)
        tables = compute_tax(alignment)
        note_missing_ranks(traces, tables.collectives, tables.ranks)
        return alignment, tables
    tasks = plan_alignment(traces, **align_options)
    results = backend.map(tax_of_group, tasks, "tax per process group")
    alignment = merge_alignments([part for part, _ in results])
    if not results:
        return alignment, compute_tax(alignment)
    tables = TaxTables(
        pd.concat([t.collectives for _, t in results], ignore_index=True),
        pd.concat([t.ranks for _, t in results], ignore_index=True))
    note_missing_ranks(traces, alignment.groups, alignment.instances, tables.collectives, tables.ranks)
    return alignment, tables


STRAGGLER_COLUMNS = ["pg", "pg_desc", "n_ranks", "n_collectives", "n_pairs", "change_rate", "n_distinct",
                     "top_rank", "top_share", "uniform_share", "n_skipped"]
STRAGGLER_RANK_COLUMNS = ["pg", "rank", "n_straggled", "share", "uniform_share"]


def straggler_identity(tax: TaxTables) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Who straggles, per PG (methodology §3): the paper's "the identity of the slowest rank shifts".

    Over each PG's valid collectives with a tax (tau_max > 0), in index order:
    ``change_rate`` = share of consecutive pairs (l-1, l) whose stragglers differ (pairs
    whose members are both counted; ``n_pairs``), ``n_distinct`` = number of ranks that
    straggled at least once, ``top_rank`` / ``top_share`` = the most frequent straggler and
    its share, ``uniform_share`` = 1/|R| to compare with; ``n_skipped`` counts the
    collectives left out (flagged invalid, or no tax: one rank or equal durations).
    The second table has one row per (PG, member rank): how often it straggled, including
    members that never did.
    """
    coll = tax.collectives
    if coll.empty:
        return pd.DataFrame(columns=STRAGGLER_COLUMNS), pd.DataFrame(columns=STRAGGLER_RANK_COLUMNS)
    if tax.members is not None:
        members = pd.Series({pg: np.asarray(m) for pg, m in tax.members.items()}, dtype=object)
    else:
        members = tax.ranks.groupby("pg")["rank"].unique() if len(tax.ranks) else pd.Series(dtype=object)
    rows, rank_rows = [], []
    # one sort, then NumPy slices per PG (a pandas group per PG cost ~7 ms: issue 48)
    index_all = coll["index"].to_numpy().astype(np.int64)
    used_all = (coll["valid"].astype(bool) & (coll["tau_max_us"] > 0)).to_numpy()
    strag_all = coll["straggler_rank"].to_numpy()
    desc = coll["pg_desc"].to_numpy()
    for (pg,), at in _groups(coll["pg"]):
        at = at[np.argsort(index_all[at], kind="stable")]  # in index order
        used = at[used_all[at]]
        strag = strag_all[used].astype(np.int64)
        ranks = sorted(int(r) for r in members.get(pg, pd.unique(strag)))
        n_ranks = len(ranks)
        consecutive = np.diff(index_all[used]) == 1
        changes = (strag[1:] != strag[:-1])[consecutive]
        # how often each rank straggled; the top one: the most often, the first to straggle on ties
        # (as Series.value_counts orders them)
        seen, first, times = np.unique(strag, return_index=True, return_counts=True)
        counts = dict(zip(seen.tolist(), times.tolist(), strict=True))
        top = int(seen[np.argmin(np.where(times == times.max(), first, len(strag)))]) if len(strag) else -1
        rows.append({
            "pg": pg, "pg_desc": desc[at[0]], "n_ranks": n_ranks, "n_collectives": len(used),
            "n_pairs": int(consecutive.sum()),
            "change_rate": float(changes.mean()) if changes.size else float("nan"),
            "n_distinct": len(seen),
            "top_rank": top,
            "top_share": float(counts[top] / len(strag)) if len(strag) else float("nan"),
            "uniform_share": 1.0 / n_ranks if n_ranks else float("nan"),
            "n_skipped": len(at) - len(used)})
        for r in ranks:
            n = int(counts.get(r, 0))
            rank_rows.append({"pg": pg, "rank": r, "n_straggled": n,
                              "share": n / len(strag) if len(strag) else float("nan"),
                              "uniform_share": 1.0 / n_ranks})
    return (pd.DataFrame(rows, columns=STRAGGLER_COLUMNS),
            pd.DataFrame(rank_rows, columns=STRAGGLER_RANK_COLUMNS))
