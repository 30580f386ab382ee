"""The synchronization tax of every aligned collective instance (methodology §3).

For instance l of a PG with member ranks R and NCCL kernel durations d_r:
tau_max = max d - min d, tau_med = median d - min d, mean straggler delay = mean d - min d,
straggler = argmin d (the last rank to arrive), wait share of rank r = (d_r - min d) / d_r.
Ties for the straggler go to the lowest rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd

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


def tax_segments(dur_ns: np.ndarray, rank: np.ndarray, starts: np.ndarray, ts_ns: np.ndarray,
                 end_ns: np.ndarray, *, shares: bool = False) -> dict[str, np.ndarray]:
    """The tax of collective instances in NumPy: the one home of the formulas (methodology §3).

    Parameters
    ----------
    dur_ns, rank, ts_ns, end_ns : numpy.ndarray
        One row per (instance, rank): the rank's duration (ns; for NCCL Inspector logs its
        execution time), its rank, start and end (ns; negative or NaN where unknown). Rows are
        sorted by instance, then rank.
    starts : numpy.ndarray
        The first row of each instance (its rows are contiguous).
    shares : bool, default False
        Also each instance's largest and median wait share (``share_max``, ``share_median``).

    Returns
    -------
    dict of numpy.ndarray
        Per instance: ``n_ranks``, ``min_dur_us``, ``max_dur_us``, ``tau_max_us`` = max - min,
        ``tau_med_us`` = median - min, ``mean_delay_us`` = mean - min (a plain sum in row order),
        ``straggler_rank`` (the rank of the shortest duration: the last to arrive; the lowest rank
        on ties), ``fastest_rank`` (of the longest), ``end_spread_us`` (NaN where an end is
        unknown), ``start_ns``. Per row: ``dur_us``, ``wait_us`` = duration - the shortest,
        ``wait_share`` = wait / duration (0 where the duration is 0), ``is_straggler``.
    """
    n = len(dur_ns)
    counts = np.diff(np.append(starts, n))
    seg = np.repeat(np.arange(len(starts)), counts)
    dur_us = dur_ns / 1000.0
    low = np.minimum.reduceat(dur_us, starts)
    high = np.maximum.reduceat(dur_us, starts)
    median = _segment_median(dur_us, starts, counts)
    mean = np.add.reduceat(dur_us, starts) / counts
    straggler = rank[_first_where(dur_us == low[seg], seg)].astype(np.int64)
    fastest = rank[_first_where(dur_us == high[seg], seg)].astype(np.int64)
    end_low = np.fmin.reduceat(end_ns, starts)
    with np.errstate(invalid="ignore"):
        end_spread = np.where(end_low >= 0, (np.fmax.reduceat(end_ns, starts) - end_low) / 1000.0, np.nan)
    wait = dur_us - low[seg]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(dur_us > 0, wait / dur_us, 0.0)
    out = {"n_ranks": counts.astype(np.int64), "min_dur_us": low, "max_dur_us": high, "tau_max_us": high - low,
           "tau_med_us": median - low, "mean_delay_us": mean - low, "straggler_rank": straggler,
           "fastest_rank": fastest, "end_spread_us": end_spread, "start_ns": np.fmin.reduceat(ts_ns, starts),
           "dur_us": dur_us, "wait_us": wait, "wait_share": share, "is_straggler": rank == straggler[seg]}
    if shares:
        out["share_max"] = np.maximum.reduceat(share, starts)
        out["share_median"] = _segment_median(share, starts, counts)
    return out


def segment_starts(*keys: np.ndarray) -> np.ndarray:
    """The first row of each run of equal ``keys`` (rows sorted by them)."""
    new = np.ones(len(keys[0]), dtype=bool)
    new[1:] = np.logical_or.reduce([key[1:] != key[:-1] for key in keys])
    return np.flatnonzero(new)


def _segment_median(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The median of each segment of ``values`` (contiguous, from ``starts``, ``counts`` long):
    the middle value, or the mean of the two middle ones, as pandas' grouped median computes it.
    Segments of one length at a time, as rows of a 2-D array (a batch holds a few communicator
    sizes; a two-key sort of the whole batch cost ~14 ms per call)."""
    out = np.empty(len(starts), dtype=np.float64)
    for length in np.unique(counts).tolist():
        which = np.flatnonzero(counts == length)
        out[which] = np.median(values[starts[which, None] + np.arange(length)], axis=1)
    return out


def _first_where(mask: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Per segment, the position of its first True of ``mask`` (every segment has one)."""
    at = np.flatnonzero(mask)
    first = np.ones(len(at), dtype=bool)
    first[1:] = seg[at[1:]] != seg[at[:-1]]
    return at[first]


def compute_tax(alignment: Alignment) -> TaxTables:
    """Tax tables from aligned collectives; instances flagged by a mismatch get valid=False.

    The pandas frame around :func:`tax_segments`, which computes every number.

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
    pg_code = pd.factorize(inst["pg"])[0]  # rows sorted by pg: one code per run
    index = inst["index"].to_numpy()
    starts = segment_starts(pg_code, index)
    rank = inst["rank"].to_numpy()
    got = tax_segments(inst["dur_ns"].to_numpy(), rank, starts, inst["ts_ns"].to_numpy(), inst["end_ns"].to_numpy())
    # the first non-missing value of each instance's descriptive columns, as groupby().first() gives them
    first = inst.groupby(["pg", "index"], sort=True, observed=True)[
        [c for c in ("window", "collective", "msg_bytes", "dtype") if c in inst.columns]].first()
    pg = inst["pg"].take(starts).reset_index(drop=True)
    groups = alignment.groups.set_index("pg")
    per_pg = groups.loc[pg.to_numpy(), ["pg_desc", "pg_ranks", "pg_source"]]
    table = pd.DataFrame({
        "pg": pg,
        "pg_desc": per_pg["pg_desc"].to_numpy(),
        "pg_ranks": per_pg["pg_ranks"].to_numpy(),
        "pg_source": per_pg["pg_source"].to_numpy(),
        "index": index[starts].astype(np.int64),
        "window": first["window"].to_numpy() if "window" in first.columns else 0,  # profiling window
        "collective": first["collective"].to_numpy(),
        "bytes": first["msg_bytes"].to_numpy().astype(np.int64),
        "dtype": first["dtype"].to_numpy(),
        **{c: got[c] for c in ("n_ranks", "tau_max_us", "tau_med_us", "mean_delay_us", "straggler_rank",
                               "fastest_rank", "min_dur_us", "max_dur_us", "end_spread_us", "start_ns")},
    })
    table["valid"] = [(p, int(i)) not in alignment.invalid for p, i in zip(table["pg"], table["index"], strict=True)]
    table["valid"] &= table["n_ranks"] > 1  # one rank present: no tax measured (tau = 0 by construction)
    ranks = pd.DataFrame({
        "pg": inst["pg"], "index": inst["index"], "window": inst.get("window", 0),
        "rank": inst["rank"],
        "collective": inst["collective"], "dur_us": got["dur_us"], "wait_us": got["wait_us"],
        "wait_share": got["wait_share"], "is_straggler": got["is_straggler"],
        "ts_ns": inst["ts_ns"], "end_ns": inst["end_ns"]})
    return TaxTables(table, ranks)


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
    if tax.collectives.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    if tax.instance_shares is not None:
        per_instance = tax.instance_shares.set_index(["pg", "index"])[["max", "median"]]
        merged = tax.collectives.assign(pg=tax.collectives["pg"].astype(str)).join(per_instance, on=["pg", "index"])
        merged["pg"] = tax.collectives["pg"]
    else:
        per_instance = tax.ranks.groupby(["pg", "index"])["wait_share"].agg(["max", "median"])
        merged = tax.collectives.join(per_instance, on=["pg", "index"])
    rows = summary_rows(
        _groups(merged["pg"], merged["collective"]), merged["pg_desc"].to_numpy(),
        merged["valid"].astype(bool).to_numpy(), merged["tau_max_us"].to_numpy(dtype=float),
        *(merged[c].to_numpy(dtype=float) for c in ("tau_med_us", "max", "median")))
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


#: The columns of :func:`tax_summary`.
SUMMARY_COLUMNS = ["pg", "pg_desc", "collective", "count", "tau_median_us", "tau_median_lo_us", "tau_median_hi_us",
                   "tau_median_interval", "tau_p90_us", "tau_max_us",
                   "tau_med_median_us", "fastest_wait_share", "median_rank_wait_share", "n_invalid"]


def summary_rows(groups: list[tuple[tuple[Any, ...], np.ndarray]], desc: np.ndarray, valid_all: np.ndarray,
                 tau_all: np.ndarray, tau_med: np.ndarray, fastest: np.ndarray,
                 median_share: np.ndarray) -> list[dict[str, Any]]:
    """The rows of :func:`tax_summary` from its columns as arrays (one per collective) and the row
    positions of each (PG, collective type) group (:func:`code_groups`): the one home of its
    statistics, for the pandas table and the Inspector tax's arrays (issue 48)."""
    rows = []
    nan = float("nan")
    # one sort, then NumPy slices per (PG, collective type): a pandas group per PG cost ~2 ms,
    # ~1 s at the 513 communicators of 4,096 Inspector logs (issue 48)
    for (pg, coll), at in groups:
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
    return rows


def _groups(*keys: pd.Series) -> list[tuple[tuple[Any, ...], np.ndarray]]:
    """The row positions of each group of ``keys``, as ``DataFrame.groupby(keys, sort=True)``
    forms them (sorted keys, observed combinations only, missing keys dropped; rows in their
    order within a group)."""
    codes, names = [], []
    for key in keys:
        code, uniques = pd.factorize(key, sort=True)
        codes.append(code)
        names.append(list(uniques))
    return code_groups(codes, names)


def code_groups(codes: list[np.ndarray], names: list[list[Any]]) -> list[tuple[tuple[Any, ...], np.ndarray]]:
    """The row positions of each group of keys given as codes into sorted ``names`` (-1: missing,
    the row dropped): the groups in key order, observed combinations only, rows in their order
    within a group (what :func:`_groups` makes of pandas columns)."""
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
        members: dict[Any, Any] = dict(tax.members)
    else:
        members = dict(tax.ranks.groupby("pg")["rank"].unique().items()) if len(tax.ranks) else {}
    rows, rank_rows = straggler_rows(
        _groups(coll["pg"]), coll["index"].to_numpy().astype(np.int64),
        (coll["valid"].astype(bool) & (coll["tau_max_us"] > 0)).to_numpy(), coll["straggler_rank"].to_numpy(),
        coll["pg_desc"].to_numpy(), members)
    return (pd.DataFrame(rows, columns=STRAGGLER_COLUMNS),
            pd.DataFrame(rank_rows, columns=STRAGGLER_RANK_COLUMNS))


def straggler_rows(groups: list[tuple[tuple[Any, ...], np.ndarray]], index_all: np.ndarray, used_all: np.ndarray,
                   strag_all: np.ndarray, desc: np.ndarray, members: Mapping[Any, Any], *,
                   rank_rows: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows of both tables of :func:`straggler_identity` from its columns as arrays (one per
    collective; ``used_all``: valid with a tax), the row positions of each PG (:func:`code_groups`)
    and each PG's member ranks (a PG not in ``members``: the ranks that straggled): the one home
    of its statistics, for the pandas tables and the Inspector tax's arrays (issue 48).
    ``rank_rows=False``: the second table left empty (a printed report does not show it)."""
    rows: list[dict[str, Any]] = []
    per_rank: list[dict[str, Any]] = []
    # one sort, then NumPy slices per PG (a pandas group per PG cost ~7 ms: issue 48)
    for (pg,), at in groups:
        at = at[np.argsort(index_all[at], kind="stable")]  # in index order
        used = at[used_all[at]]
        strag = strag_all[used].astype(np.int64)
        ranks = sorted(int(r) for r in (members[pg] if pg in members else np.unique(strag)))
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
        for r in ranks if rank_rows else ():
            n = int(counts.get(r, 0))
            per_rank.append({"pg": pg, "rank": r, "n_straggled": n,
                              "share": n / len(strag) if len(strag) else float("nan"),
                              "uniform_share": 1.0 / n_ranks})
    return rows, per_rank
