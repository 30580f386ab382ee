"""Critical-path attribution of every collective: which event made the straggler late.

``attribute(traces)`` aligns the collectives (SPEC §2), computes their tax (SPEC §3),
builds one event DAG per member rank, walks the straggler's and the fastest rank's
critical paths back to the previous collective of the PG and names the principal cause
(SPEC §4). Results are pandas tables; see :class:`AttributionResult`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from evtsync.collectives import Alignment, align_collectives
from evtsync.critpath.categories import CPU_CATEGORIES, classify_names
from evtsync.critpath.dag import (
    SAME_STREAM_TOLERANCE_NS,
    RankDAG,
    Vocabulary,
    build_rank_dag,
)
from evtsync.critpath.tasks import (
    DAG_COLUMNS,
    FastestSide,
    RankWork,
    SetupCache,
    StragglerSide,
    combine,
    fastest_task,
    rank_instance_nodes,
    straggler_task,
)
from evtsync.critpath.validate import regress_path_on_tax
from evtsync.display import TablesDisplay
from evtsync.errors import InputError
from evtsync.parallel import Backend, DaskCluster, InProcess, ProcessPool
from evtsync.progress import progress
from evtsync.tax import TaxTables, compute_tax
from evtsync.trace.traceset import TraceSet, load_traces

log = logging.getLogger(__name__)

COLLECTIVE_COLUMNS = [
    "pg", "index", "collective", "n_ranks", "valid", "tau_max_us", "straggler_rank", "fastest_rank",
    "status", "unexplained_reason", "explained_share", "path_kind", "path_len", "path_cpu_nodes",
    "path_unmatched", "path_bottom", "cause_name", "cause_kind", "cause_segment", "cause_category",
    "cause_extra_us", "cause_raw_extra_us", "cause_duration_us", "cause_fastest_duration_us", "cause_occurrence",
    "cause_start_ns", "cause_on_fastest_path", "lca_name", "n_common", "path_extra_us",
    "path_gpu_extra_us", "path_cpu_extra_us", "straggler_path_us", "fastest_path_us", "fastest_matched_us",
    "unplaced_us",
]
PATH_COLUMNS = ["pg", "index", "rank", "role", "step", "name", "kind", "start_ns", "end_ns",
                "dur_us", "occurrence", "own_us", "wait_us", "own_fastest_us", "wait_fastest_us", "extra_us"]
#: A collective is explained when its path's extra time is within this band of its tax
#: (``explained_share`` = path extra / tau_max); outside it, it is flagged ``unexplained``.
EXPLAINED_SHARE_MIN = 0.8
EXPLAINED_SHARE_MAX = 1.25  # keep evtsync.cli.attribute.EXPLAINED_BAND equal
SUMMARY_COLUMNS = ["category", "cause_class", "count", "share", "share_of_gpu_causes"]


@dataclass(repr=False)
class AttributionResult(TablesDisplay):
    """Attribution tables.

    - ``collectives``: one row per (pg, index): straggler and fastest rank, path kind
      (gpu_only / launch_delay / python_gap / synchronization), principal cause (name, kind,
      category, extra µs over the fastest rank), the LCA of the two paths, the summed extra
      time on the straggler's path; ``status`` is ``ok``, ``no_tax`` (one rank or no
      difference) or ``empty_path`` (the collective's critical parent is the previous one).
    - ``summary``: cause categories over the attributed collectives (share of all, share
      among GPU causes) — the paper's GEMM / FlashAttention / FSDP / norm / concat table.
    - ``validation``: per PG and in total, the regression of the path's compute difference
      on the communication-time difference (slope, intercept, R², n) — SPEC §4 (a).
    - ``paths``: the straggler's and fastest rank's paths event by event (when kept).
    - ``gpu_only_share``: share of attributed collectives whose straggler path is GPU-only.
    """

    collectives: pd.DataFrame
    summary: pd.DataFrame
    validation: pd.DataFrame
    paths: pd.DataFrame
    gpu_only_share: float
    dag_stats: pd.DataFrame = field(default_factory=pd.DataFrame)


class RankTables:
    """A trace set's kernels, cpu_ops, runtime and syncs tables split by rank once: ``of(rank)``
    gives each table's rows of one rank (in table order, row labels kept: what a boolean mask
    on the rank column gives) without a pass over every table for every rank. With
    ``columns`` (one tuple per table) only those of its columns that a table has are kept."""

    def __init__(self, traces: TraceSet, columns: tuple[tuple[str, ...], ...] | None = None) -> None:
        tables = (traces.kernels, traces.cpu_ops, traces.runtime, traces.syncs)
        self._order = []
        for df in tables:
            ranks = df["rank"].to_numpy()
            order = np.argsort(ranks, kind="stable")
            self._order.append((order, ranks[order]))
        if columns is not None:
            tables = tuple(df[[c for c in cols if c in df.columns]] for df, cols in zip(tables, columns, strict=True))
        self._tables = tables

    def of(self, rank: int) -> tuple[pd.DataFrame, ...]:
        """Each table's rows of ``rank``."""
        out = []
        for df, (order, sorted_ranks) in zip(self._tables, self._order, strict=True):
            lo, hi = np.searchsorted(sorted_ranks, rank, side="left"), np.searchsorted(sorted_ranks, rank, side="right")
            out.append(df.take(order[lo:hi]))
        return tuple(out)


def build_dags(traces: TraceSet, ranks: Iterable[int], *, vocab: Vocabulary | None = None,
               same_stream_tolerance_us: float = SAME_STREAM_TOLERANCE_NS / 1000.0) -> dict[int, RankDAG]:
    """The event DAG of each given rank (names share one vocabulary)."""
    vocab = vocab if vocab is not None else Vocabulary()
    ranks = sorted(set(ranks))
    tables = RankTables(traces)
    out = {}
    for r in progress(ranks, "building DAGs", len(ranks), "rank"):
        out[r] = build_rank_dag(*tables.of(r), rank=r, vocab=vocab,
                                same_stream_tolerance_ns=int(round(same_stream_tolerance_us * 1000)))
    return out


def instance_nodes(traces: TraceSet, instances: pd.DataFrame, dags: dict[int, RankDAG]) -> np.ndarray:
    """GPU node of each aligned collective instance (-1 where not found)."""
    nodes = np.full(len(instances), -1, dtype=np.int64)
    ranks = instances["rank"].to_numpy().astype(np.int64)
    nccl = traces.nccl_kernels
    for r, dag in dags.items():
        sel = ranks == r
        if sel.any():
            nodes[sel] = rank_instance_nodes(nccl[nccl["rank"].to_numpy() == r], instances[sel], dag)
    return nodes


def attribute(traces: TraceSet | str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
              pg: str | None = None, *, same_stream_tolerance_us: float = 3.0,
              keep_paths: bool = True, alignment: Alignment | None = None,
              tax: TaxTables | None = None, backend: Backend | None = None,
              read_options: dict[str, Any] | None = None, **align_options: Any) -> AttributionResult:
    """Critical-path attribution of every collective (of PG ``pg``, or of every PG).

    ``pg`` is a PG label of the alignment (``evtsync tax`` lists them) or a ``pg_name``.
    ``same_stream_tolerance_us`` is the walk's preference for same-stream predecessors.
    ``align_options`` go to :func:`evtsync.align_collectives`.

    The work runs as two rounds of per-rank tasks (:mod:`evtsync.critpath.tasks`). Given
    paths and a ``backend`` (:mod:`evtsync.parallel`: a process pool or a Dask cluster),
    this process reads only the collectives (for the alignment and the tax) and every task
    reads its own rank's trace (``read_options`` go to its :func:`load_traces`, e.g. the
    cache), so no process holds more than one rank's tables; without a backend everything
    is read and run here, and a rank's DAG built in round 1 serves its round 2 too
    (:class:`~evtsync.critpath.tasks.SetupCache`).
    """
    read_options = dict(read_options or {})
    distributed = backend is not None and not isinstance(traces, TraceSet)
    if not isinstance(traces, TraceSet):
        where: dict[str, Any] = {}
        if isinstance(backend, ProcessPool):   # the caller reads nothing itself either
            where["jobs"] = backend.jobs
        elif isinstance(backend, DaskCluster):
            where["client"] = backend.client
        traces = load_traces(traces, scope="collectives" if distributed else "all", **read_options, **where)
    traces.require_timeline("critical-path attribution")
    if not distributed:
        traces.require(("all",), "critical-path attribution")
    alignment = alignment if alignment is not None else align_collectives(traces, **align_options)
    tax = tax if tax is not None else compute_tax(alignment)
    inst = alignment.instances
    groups = alignment.groups
    if pg is not None:
        chosen = groups[(groups["pg"] == pg) | (groups["pg_name"].astype(str) == pg)]
        if chosen.empty:
            known = ", ".join(groups["pg"].astype(str)) or "none"
            raise InputError(f"--pg {pg}: no such process group (known: {known})")
        inst = inst[inst["pg"].isin(chosen["pg"])]
    if inst.empty:
        empty = pd.DataFrame(columns=COLLECTIVE_COLUMNS)
        return AttributionResult(empty, pd.DataFrame(columns=SUMMARY_COLUMNS),
                                 regress_path_on_tax(empty), pd.DataFrame(columns=PATH_COLUMNS), float("nan"))
    tax_rows = tax.collectives
    tax_rows = tax_rows[tax_rows["pg"].isin(inst["pg"].unique())]
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    roles: dict[int, list[tuple[str, int]]] = {}
    fastest_of: dict[tuple[str, int], int] = {}
    for t in tax_rows.itertuples(index=False):
        s_rank, f_rank, index = int(t.straggler_rank), int(t.fastest_rank), int(t.index)
        row: dict[str, Any] = {c: None for c in COLLECTIVE_COLUMNS}
        row.update(pg=t.pg, index=index, collective=t.collective, n_ranks=int(t.n_ranks), valid=bool(t.valid),
                   tau_max_us=float(t.tau_max_us), straggler_rank=s_rank, fastest_rank=f_rank)
        rows[(t.pg, index)] = row
        if s_rank == f_rank or t.tau_max_us <= 0:
            row["status"] = "no_tax"
            continue
        roles.setdefault(s_rank, []).append((t.pg, index))
        fastest_of[(t.pg, index)] = f_rank
    paths = dict(zip(traces.ranks["rank"].astype(int), traces.ranks["path"].astype(str), strict=True))
    tol_ns = int(round(same_stream_tolerance_us * 1000))
    inst_cols = ["pg", "index", "stream", "ts_ns", "end_ns", "correlation"]
    by_rank = {int(r): g[inst_cols].reset_index(drop=True) for r, g in inst.groupby("rank")}

    runner: Backend = backend if backend is not None else InProcess()
    # both rounds in this process: a rank's DAG built in round 1 serves its round 2 too
    setups = SetupCache(set(fastest_of.values())) if isinstance(runner, InProcess) else None
    split = None if distributed else RankTables(traces, DAG_COLUMNS)

    def work(rank: int) -> RankWork:
        # (a rank whose setup is kept from round 1 needs no tables)
        tables = None if split is None or (setups is not None and rank in setups) else split.of(rank)
        return RankWork(rank=rank, instances=by_rank.get(rank, pd.DataFrame(columns=inst_cols)),
                        path=paths.get(rank) if distributed else None, tables=tables, read_options=read_options,
                        same_stream_tolerance_ns=tol_ns, keep_paths=keep_paths, setups=setups)

    round1 = []
    for rank, keys in sorted(roles.items()):
        w = work(rank)
        w.straggler_of = keys
        round1.append(w)
    sides_s: dict[tuple[str, int], StragglerSide] = {}
    stats: dict[int, dict[str, int]] = {}
    for result, st in runner.map(straggler_task, round1, "critical paths: straggler sides"):
        stats[st["rank"]] = st
        for side in result:
            sides_s[side.key] = side
    round2: dict[int, RankWork] = {}
    for key, f_rank in fastest_of.items():
        side = sides_s[key]
        if not side.found:
            continue
        if f_rank not in round2:
            round2[f_rank] = work(f_rank)
        round2[f_rank].fastest_of.append((key, side))
    sides_f: dict[tuple[str, int], FastestSide] = {}
    for result, st in runner.map(fastest_task, [round2[r] for r in sorted(round2)], "critical paths: fastest sides"):
        if st["rank"] in stats:
            stats[st["rank"]]["peak_rss_mb"] = max(stats[st["rank"]]["peak_rss_mb"], st["peak_rss_mb"])
        else:
            stats[st["rank"]] = st
        for side in result:
            sides_f[side.key] = side
    path_parts: list[tuple[StragglerSide, FastestSide, np.ndarray, np.ndarray]] = []
    n_missing = 0
    for key, row in rows.items():
        if row["status"] == "no_tax":
            continue
        s_side, f_side = sides_s[key], sides_f.get(key)
        if not s_side.found or f_side is None or not f_side.found:
            row["status"] = "no_node"
            n_missing += 1
            continue
        seg_s, extra = combine(s_side, f_side, row, share_band=(EXPLAINED_SHARE_MIN, EXPLAINED_SHARE_MAX))
        if keep_paths and s_side.rows is not None:
            path_parts.append((s_side, f_side, seg_s, extra))
    if n_missing:
        log.warning("%d collective(s) have no GPU node for their straggler or fastest rank in the DAG "
                    "(status no_node)", n_missing)
    table = pd.DataFrame(list(rows.values()), columns=COLLECTIVE_COLUMNS)
    gpu_causes = table["cause_segment"] == "kernel"
    if gpu_causes.any():
        table.loc[gpu_causes, "cause_category"] = classify_names(table.loc[gpu_causes, "cause_name"].tolist())
    summary, gpu_only = summarize(table)
    paths_table = paths_table_of(path_parts) if path_parts else pd.DataFrame(columns=PATH_COLUMNS)
    return AttributionResult(collectives=table, summary=summary, validation=regress_path_on_tax(table),
                             paths=paths_table, gpu_only_share=gpu_only,
                             dag_stats=pd.DataFrame([stats[r] for r in sorted(stats)]))


def paths_table_of(parts: list[tuple[StragglerSide, FastestSide, np.ndarray, np.ndarray]]) -> pd.DataFrame:
    """The ``paths`` table: per collective (its straggler side, fastest side, the straggler's
    segments and their extras over the fastest rank, see :func:`combine`), the straggler's path
    with its own and wait times against the fastest rank's, then the fastest rank's own path."""
    pg: list[str] = []
    index: list[int] = []
    rank: list[int] = []
    role: list[str] = []
    name: list[str] = []
    kind: list[str] = []
    step, start, end, occurrence, timed = [], [], [], [], []
    for s_side, f_side, seg_s, extra in parts:
        seg_f = np.where(np.repeat(f_side.matched, 2), f_side.seg_ns, 0)
        for side, who in ((s_side, "straggler"), (f_side, "fastest")):
            rows = side.rows
            assert rows is not None  # kept for both sides or neither
            n = len(rows)
            pg += [side.key[0]] * n
            index += [side.key[1]] * n
            rank += [side.rank] * n
            role += [who] * n
            name += rows.names
            kind += rows.kinds
            step.append(np.arange(n))
            start.append(rows.start_ns)
            end.append(rows.end_ns)
            occurrence.append(rows.occurrence)
        # own and wait times of the straggler's path nodes (chain positions 1..), the fastest
        # rank's counterparts, and the extra time of each node; none on the fastest rank's path
        timed.append(np.stack([seg_s[2::2] / 1000.0, seg_s[3::2] / 1000.0, seg_f[2::2] / 1000.0,
                               seg_f[3::2] / 1000.0, extra.reshape(-1, 2).sum(axis=1)[1:] / 1000.0], axis=1))
        timed.append(np.full((len(step[-1]), 5), np.nan))
    start_ns, end_ns = np.concatenate(start), np.concatenate(end)
    times = np.concatenate(timed)
    return pd.DataFrame({
        "pg": pg, "index": index, "rank": rank, "role": role, "step": np.concatenate(step), "name": name,
        "kind": kind, "start_ns": start_ns, "end_ns": end_ns, "dur_us": (end_ns - start_ns) / 1000.0,
        "occurrence": np.concatenate(occurrence), "own_us": times[:, 0], "wait_us": times[:, 1],
        "own_fastest_us": times[:, 2], "wait_fastest_us": times[:, 3], "extra_us": times[:, 4]},
        columns=PATH_COLUMNS)


def summarize(collectives: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Cause categories over attributed collectives, and the GPU-only path share."""
    ok = collectives[collectives["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS), float("nan")
    counts = ok["cause_category"].value_counts()
    n_gpu = int((ok["path_kind"] == "gpu_only").sum())
    rows = []
    for category, count in counts.items():
        is_cpu = category in CPU_CATEGORIES
        rows.append({"category": category, "cause_class": "cpu" if is_cpu else "gpu", "count": int(count),
                     "share": count / len(ok),
                     "share_of_gpu_causes": float("nan") if is_cpu or not n_gpu else count / n_gpu})
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS).sort_values(
        ["cause_class", "count"], ascending=[False, False]).reset_index(drop=True)
    return summary, float((ok["path_kind"] == "gpu_only").mean())
