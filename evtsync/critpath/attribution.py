"""Critical-path attribution of every collective: which event made the straggler late.

``attribute(traces)`` aligns the collectives (methodology §2), computes their tax (methodology §3),
builds one event DAG per member rank, walks the straggler's and the fastest rank's
critical paths back to the previous collective of the PG and names the principal cause
(methodology §4). Results are pandas tables; see :class:`AttributionResult`.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.display import TablesDisplay
from evtsync.core.errors import InputError
from evtsync.core.parallel import Backend, DaskCluster, InProcess, ProcessPool
from evtsync.core.progress import progress
from evtsync.critpath.categories import CPU_CATEGORIES, classify_names
from evtsync.critpath.cpu import CPU_SIDE_CATEGORIES, attribute_cpu_side, collectives_are_cpu_side
from evtsync.critpath.dag import (
    SAME_STREAM_TOLERANCE_NS,
    RankDAG,
    Vocabulary,
    build_rank_dag,
)
from evtsync.critpath.names import NAME_SEPARATOR
from evtsync.critpath.p2p import PeerCause
from evtsync.critpath.tasks import (
    DAG_COLUMNS,
    FastestSide,
    RankWork,
    SetupCache,
    StragglerSide,
    combine,
    exact_times,
    fastest_task,
    rank_instance_nodes,
    straggler_task,
)
from evtsync.critpath.validate import regress_path_on_tax
from evtsync.sync.collectives import Alignment, align_collectives
from evtsync.sync.tax import TaxTables, compute_tax
from evtsync.trace.traceset import RANK_HOOK, TraceSet, load_traces

log = logging.getLogger(__name__)

COLLECTIVE_COLUMNS = [
    "pg", "index", "collective", "n_ranks", "valid", "tau_max_us", "straggler_rank", "fastest_rank",
    "status", "unexplained_reason", "explained_share", "path_kind", "path_len", "path_cpu_nodes",
    "path_unmatched", "path_bottom", "cause_name", "cause_kind", "cause_segment", "cause_category",
    "cause_extra_us", "cause_raw_extra_us", "cause_duration_us", "cause_fastest_duration_us", "cause_occurrence",
    "cause_start_ns", "cause_on_fastest_path", "lca_name", "n_common", "path_extra_us",
    "path_gpu_extra_us", "path_cpu_extra_us", "straggler_path_us", "fastest_path_us", "fastest_matched_us",
    "unplaced_us", "cause_pg", "cause_index", "root_rank", "root_pg", "root_index", "root_cause",
    "root_category", "root_chain", "root_cycle", "root_reason",
]
#: A root reached through other collectives must account for at least this share of the tax routed
#: to it (its principal cause's extra time against the tau of the collective the chain starts at);
#: otherwise the chain stops at "propagated from rank R, not explained" (issue 46, item 3).
ROOT_MIN_SHARE = 0.5
#: ``root_category`` of a chain whose root does not account for the tax routed to it.
NOT_EXPLAINED = "not_explained"
RANK_COLUMNS = ["rank", "collectives", "straggled", "wait_suffered_us", "wait_caused_us", "wait_caused_root_us"]
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
      on the communication-time difference (slope, intercept, R², n) — methodology §4 (a).
    - ``paths``: the straggler's and fastest rank's paths event by event (when kept).
    - ``gpu_only_share``: share of attributed collectives whose straggler path is GPU-only.
    - ``ranks``: per rank, the wait it suffered (its own waiting in collectives) against the
      wait it caused (the other members' waiting where it straggled, and where it is the root
      after routing across process groups, see :func:`route_blame`).
    - ``cpu_side``: the collectives are CPU-side (gloo): attributed on the main threads
      (:mod:`evtsync.critpath.cpu`).
    - ``instances``: the aligned collective instances attributed (one row per pg, index, rank).
    - ``n_invalid``: collectives the alignment flagged invalid (end times apart, type or size
      mismatch): kept in ``collectives`` with ``valid`` False, left out of ``summary``,
      ``gpu_only_share`` and ``validation`` (their durations do not measure a tax).
    """

    collectives: pd.DataFrame
    summary: pd.DataFrame
    validation: pd.DataFrame
    paths: pd.DataFrame
    gpu_only_share: float
    dag_stats: pd.DataFrame = field(default_factory=pd.DataFrame)
    ranks: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=RANK_COLUMNS))
    cpu_side: bool = False
    instances: pd.DataFrame = field(default_factory=pd.DataFrame)
    n_invalid: int = 0


class RankTables:
    """A trace set's kernels, cpu_ops, runtime and syncs tables split by rank once: ``of(rank)``
    gives each table's rows of one rank (in table order, row labels kept: what a boolean mask
    on the rank column gives) without a pass over every table for every rank. With
    ``columns`` (one tuple per table) only those of its columns that a table has are kept,
    chosen per rank: no copy of the whole set's tables is made."""

    def __init__(self, traces: TraceSet, columns: tuple[tuple[str, ...], ...] | None = None) -> None:
        tables = (traces.kernels, traces.cpu_ops, traces.runtime, traces.syncs)
        self._order = []
        for df in tables:
            ranks = df["rank"].to_numpy()
            order = np.argsort(ranks, kind="stable")
            self._order.append((order, ranks[order]))
        self._tables = tables
        self._columns = (tuple(df.columns.get_indexer([c for c in cols if c in df.columns])
                               for df, cols in zip(tables, columns, strict=True))
                         if columns is not None else tuple(None for _ in tables))

    def of(self, rank: int) -> tuple[pd.DataFrame, ...]:
        """Each table's rows of ``rank``."""
        out = []
        for df, cols, (order, sorted_ranks) in zip(self._tables, self._columns, self._order, strict=True):
            lo, hi = np.searchsorted(sorted_ranks, rank, side="left"), np.searchsorted(sorted_ranks, rank, side="right")
            out.append(df.take(order[lo:hi]) if cols is None else df.iloc[order[lo:hi], cols])
        return tuple(out)


def build_dags(traces: TraceSet, ranks: Iterable[int], *, vocab: Vocabulary | None = None,
               same_stream_tolerance_us: float = SAME_STREAM_TOLERANCE_NS / 1000.0) -> dict[int, RankDAG]:
    """The event DAG of each given rank (names share one vocabulary)."""
    vocab = vocab if vocab is not None else Vocabulary()
    ranks = sorted(set(ranks))
    tables = RankTables(traces)
    out = {}
    for r in progress(ranks, "building DAGs", len(ranks), "rank"):
        kernels, cpu_ops, runtime, syncs = tables.of(r)
        out[r] = build_rank_dag(kernels, cpu_ops, runtime, syncs, rank=r, vocab=vocab,
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

    The work runs as two rounds of per-rank tasks (:mod:`evtsync.critpath.tasks`). Given
    paths, this process reads only the collectives (for the alignment and the tax) and every
    task reads its own rank's trace (``read_options`` go to its :func:`load_traces`, e.g. the
    cache, ``salvage`` or ``comm_kernels``) and drops its tables once the rank's DAG is built,
    so no process holds more than one rank's tables: memory is bounded by the largest rank,
    not by the set. The tasks run on ``backend`` (:mod:`evtsync.core.parallel`: a process pool or
    a Dask cluster) or, without one, one after the other in this process, where a rank's DAG
    built in round 1 serves its round 2 too (:class:`~evtsync.critpath.tasks.SetupCache`).
    Given a loaded :class:`TraceSet`, everything runs here on the caller's tables.

    Parameters
    ----------
    traces : TraceSet, path or iterable of paths
        A loaded :class:`~evtsync.trace.traceset.TraceSet`, or trace files and/or folders,
        read by :func:`evtsync.load_traces`.
    pg : str or None, default None
        A PG label of the alignment (``evtsync tax`` lists them) or a ``pg_name``; None: every PG.
    same_stream_tolerance_us : float, default 3.0
        The walk's preference for same-stream predecessors (µs).
    keep_paths : bool, default True
        Keep every collective's critical path (``AttributionResult.paths``).
    alignment : Alignment or None, default None
        A ready alignment (computed here when None).
    tax : TaxTables or None, default None
        Ready tax tables of that alignment (computed here when None).
    backend : Backend or None, default None
        A process pool or Dask cluster (:mod:`evtsync.core.parallel`).
    read_options : dict or None, default None
        Options for each task's :func:`evtsync.load_traces` (e.g. ``cache``, ``salvage``).
    **align_options
        Passed to :func:`evtsync.align_collectives`.

    Returns
    -------
    AttributionResult
        One row per collective with its straggler, fastest rank, principal cause and the
        explained share; collectives that could not be attributed say why (``status``,
        ``unexplained_reason``).

    Raises
    ------
    InputError
        An unknown ``pg``, or traces without a kernel timeline (e.g. NCCL Inspector logs).
    TraceError
        The files cannot be read, or the rank set is not one complete job.
    AlignmentError
        The collectives do not match across ranks.
    """
    read_options = dict(read_options or {})
    # in this process, each rank's DAG is built from the read that gives its collectives (written to
    # a temporary file until the rounds take it): every rank is read once and its DAG built once
    prebuilt = (SetupCache(set(), within_largest_rank=True)
                if not isinstance(traces, TraceSet) and (backend is None or isinstance(backend, InProcess)) else None)
    try:
        return _attribute(traces, pg, same_stream_tolerance_us, keep_paths, alignment, tax, backend, read_options,
                          prebuilt, align_options)
    finally:
        if prebuilt is not None:
            prebuilt.close()


def _attribute(traces: TraceSet | str | os.PathLike[str] | Iterable[str | os.PathLike[str]], pg: str | None,
               same_stream_tolerance_us: float, keep_paths: bool, alignment: Alignment | None, tax: TaxTables | None,
               backend: Backend | None, read_options: dict[str, Any], prebuilt: SetupCache | None,
               align_options: dict[str, Any]) -> AttributionResult:
    """:func:`attribute`'s work; ``prebuilt``: where the in-process reading writes each rank's DAG."""
    per_rank_reads = not isinstance(traces, TraceSet)   # each task reads (and drops) its own rank
    inputs = traces
    if not isinstance(traces, TraceSet):
        where: dict[str, Any] = {}
        if isinstance(backend, ProcessPool):   # the caller reads nothing itself either
            where["jobs"] = backend.jobs
        elif isinstance(backend, DaskCluster):
            where["client"] = backend.client
        hook = None
        if prebuilt is not None:  # read here, one rank after the other, each DAG built as its rank is read
            where["jobs"] = 1
            tol_ns = int(round(same_stream_tolerance_us * 1000))
            hook = RANK_HOOK.set(functools.partial(prebuilt.prebuild, same_stream_tolerance_ns=tol_ns))
        try:
            traces = load_traces(traces, scope="collectives", **{**read_options, **where})
        finally:
            if hook is not None:
                RANK_HOOK.reset(hook)
    traces.require_timeline("critical-path attribution")
    alignment = alignment if alignment is not None else align_collectives(traces, **align_options)
    tax = tax if tax is not None else compute_tax(alignment)
    cpu_side = alignment.instances["correlation"].eq(-1).all() and collectives_are_cpu_side(traces) \
        if len(alignment.instances) else False
    if cpu_side and per_rank_reads:  # CPU-side collectives: small traces, read everything here
        assert not isinstance(inputs, TraceSet)  # per-rank reads: the inputs are paths
        traces = load_traces(inputs, scope="all", **read_options)
        per_rank_reads = False
        if prebuilt is not None:
            prebuilt.forget_prebuilt()
            prebuilt = None
    if not per_rank_reads:
        traces.require(("all",), "critical-path attribution")
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
    if cpu_side:
        table, paths_table, p2p = attribute_cpu_side(
            traces, alignment, tax, set(inst["pg"].unique()), columns=COLLECTIVE_COLUMNS,
            share_band=(EXPLAINED_SHARE_MIN, EXPLAINED_SHARE_MAX), keep_paths=keep_paths)
        _refuse_when_nothing_attributed(table, "CPU-side (gloo) collectives")
        table = route_blame(table, p2p)
        valid, n_invalid = valid_collectives(table)
        summary, _ = summarize(valid)
        return AttributionResult(collectives=table, summary=summary, validation=regress_path_on_tax(valid),
                                 paths=paths_table if len(paths_table) else pd.DataFrame(columns=PATH_COLUMNS),
                                 gpu_only_share=float("nan"),  # no GPU: the share does not apply
                                 ranks=rank_blame(table, tax.ranks), cpu_side=True,
                                 instances=inst, n_invalid=n_invalid)
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
    runner: Backend = backend if backend is not None else InProcess()
    # both rounds in this process: a rank's DAG built in round 1 serves its round 2 too, kept in
    # memory or written to a temporary file (reading rank by rank, it keeps no more than the
    # largest rank's DAG in memory: memory stays bounded by it)
    setups = SetupCache(set(fastest_of.values()), within_largest_rank=per_rank_reads) \
        if isinstance(runner, InProcess) and prebuilt is None else prebuilt
    if setups is not None:
        setups.wanted = set(fastest_of.values())
    try:
        return _attribute_rounds(traces, inst, tax, runner, setups, rows, roles, fastest_of, per_rank_reads,
                                 read_options, same_stream_tolerance_us, keep_paths)
    finally:
        if setups is not None:
            setups.close()


def _attribute_rounds(traces: TraceSet, inst: pd.DataFrame, tax: TaxTables, runner: Backend,
                      setups: SetupCache | None, rows: dict[tuple[str, int], dict[str, Any]],
                      roles: dict[int, list[tuple[str, int]]], fastest_of: dict[tuple[str, int], int],
                      per_rank_reads: bool, read_options: dict[str, Any], same_stream_tolerance_us: float,
                      keep_paths: bool) -> AttributionResult:
    """The two rounds of per-rank tasks of :func:`attribute` and the tables from their sides."""
    paths = dict(zip(traces.ranks["rank"].astype(int), traces.ranks["path"].astype(str), strict=True))
    tol_ns = int(round(same_stream_tolerance_us * 1000))
    inst_cols = ["pg", "index", "stream", "ts_ns", "end_ns", "correlation"]
    by_rank = {int(r): g[inst_cols].reset_index(drop=True) for r, g in inst.groupby("rank")}
    split = None if per_rank_reads else RankTables(traces, DAG_COLUMNS)

    def work(rank: int) -> RankWork:
        # (a rank whose setup is kept from round 1 needs no tables)
        tables = None if split is None or (setups is not None and rank in setups) else split.of(rank)
        return RankWork(rank=rank, instances=by_rank.get(rank, pd.DataFrame(columns=inst_cols)),
                        path=paths.get(rank) if per_rank_reads else None, tables=tables, read_options=read_options,
                        same_stream_tolerance_ns=tol_ns, keep_paths=keep_paths, setups=setups)

    round1 = []
    for rank, keys in sorted(roles.items()):
        w = work(rank)
        w.straggler_of = keys
        round1.append(w)
    sides_s: dict[tuple[str, int], StragglerSide] = {}
    stats: dict[int, dict[str, float]] = {}
    for result, st in runner.map(straggler_task, round1, "critical paths: straggler sides"):
        stats[int(st["rank"])] = st
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
    for fastest_sides, st in runner.map(fastest_task, [round2[r] for r in sorted(round2)],
                                        "critical paths: fastest sides"):
        rank = int(st["rank"])
        if rank in stats:
            stats[rank]["peak_rss_mb"] = max(stats[rank]["peak_rss_mb"], st["peak_rss_mb"])
        else:
            stats[rank] = st
        for fastest in fastest_sides:
            sides_f[fastest.key] = fastest
    path_parts: list[tuple[StragglerSide, FastestSide, np.ndarray, np.ndarray]] = []
    n_missing = 0
    for key, row in rows.items():
        if row["status"] == "no_tax":
            continue
        s_side, f_side = sides_s[key], sides_f.get(key)
        if not s_side.found or f_side is None or not f_side.found:
            row["status"] = "no_node"
            row["unexplained_reason"] = (f"rank {s_side.rank if not s_side.found else row['fastest_rank']}: "
                                         "the collective has no GPU node in the rank's event DAG")
            n_missing += 1
            continue
        seg_s, extra = combine(s_side, f_side, row, share_band=(EXPLAINED_SHARE_MIN, EXPLAINED_SHARE_MAX))
        if keep_paths and s_side.rows is not None:
            path_parts.append((s_side, f_side, seg_s, extra))
    if n_missing:
        log.warning("%d collective(s) have no GPU node for their straggler or fastest rank in the DAG "
                    "(status no_node)", n_missing)
    table = exact_times(pd.DataFrame(list(rows.values()), columns=COLLECTIVE_COLUMNS), list(rows.values()))
    gpu_causes = table["cause_segment"] == "kernel"
    if gpu_causes.any():
        table.loc[gpu_causes, "cause_category"] = classify_names(table.loc[gpu_causes, "cause_name"].tolist())
    _refuse_when_nothing_attributed(table, "collectives")
    _name_collective_causes(table, inst)
    _name_kernel_causes(table, [r.get("cause_note") for r in rows.values()])
    table = route_blame(table)
    valid, n_invalid = valid_collectives(table)
    summary, gpu_only = summarize(valid)
    paths_table = paths_table_of(path_parts) if path_parts else pd.DataFrame(columns=PATH_COLUMNS)
    return AttributionResult(collectives=table, summary=summary, validation=regress_path_on_tax(valid),
                             paths=paths_table, gpu_only_share=gpu_only,
                             dag_stats=pd.DataFrame([stats[r] for r in sorted(stats)]), ranks=rank_blame(table, tax.ranks),
                             instances=inst, n_invalid=n_invalid)


def _refuse_when_nothing_attributed(table: pd.DataFrame, what: str) -> None:
    """Raise when collectives have a tax but none could be attributed: the trace lacks what the
    walk needs (an empty table would read as 'nothing to explain')."""
    taxed = table[table["status"] != "no_tax"]
    if len(taxed) and (taxed["status"] == "no_node").all():
        reasons = taxed["unexplained_reason"].dropna()
        why = reasons.iloc[0] if len(reasons) else (
            "no GPU event of the collective kernels in the event DAG of the straggler or the fastest rank")
        raise InputError(f"attribution cannot run on these traces: none of {len(taxed)} {what} with a tax could be "
                         f"attributed ({why})")


def _name_collective_causes(table: pd.DataFrame, instances: pd.DataFrame) -> None:
    """Where a GPU principal cause is a collective kernel of the straggler (another PG's, or an
    earlier one of its own), fill ``cause_pg`` / ``cause_index`` with that collective."""
    if table.empty or "cause_start_ns" not in table:
        return
    lookup = {(int(r), int(ts)): (pg, int(i)) for r, ts, pg, i in
              zip(instances["rank"], instances["ts_ns"], instances["pg"], instances["index"], strict=True)}
    for i, rank, start, seg in zip(table.index, table["straggler_rank"], table["cause_start_ns"],
                                   table["cause_segment"], strict=True):
        if seg != "kernel" or start is None or pd.isna(start):
            continue
        hit = lookup.get((int(rank), int(start)))
        if hit is not None:
            table.at[i, "cause_pg"], table.at[i, "cause_index"] = hit


def _name_kernel_causes(table: pd.DataFrame, notes: list[str | None]) -> None:
    """A kernel cause (not a collective) goes by the user's annotation around its launch, as a CPU
    op does and as the what-if table names it: ``expert_mm > <kernel>`` (issue 46, item 5; the
    annotation: :func:`evtsync.critpath.names.notes_around` on the launching thread). ``notes``:
    per row, in the table's order; the category stays the kernel's own."""
    if table.empty:
        return
    for i, note in zip(table.index, notes, strict=True):
        if note is None or table.at[i, "cause_segment"] != "kernel" or not pd.isna(table.at[i, "cause_pg"]):
            continue
        table.at[i, "cause_name"] = f"{note}{NAME_SEPARATOR}{table.at[i, 'cause_name']}"


def route_blame(table: pd.DataFrame, p2p: dict[tuple[Any, int], PeerCause] | None = None) -> pd.DataFrame:
    """Route each collective's blame to its root (issue 28, item 4).

    A straggler whose principal cause is a collective (it waited in, or arrived late from,
    collective ``cause_pg``/``cause_index``, of its own or another process group) passes the
    blame to that collective's straggler and its cause, recursively: ``root_rank``, ``root_pg``,
    ``root_index``, ``root_cause``, ``root_category`` are where the chain ends (a cause that is
    not a collective, or a collective without a row or cause), ``root_chain`` the number of
    hops (0: the collective is its own root). A chain that comes back to a collective already
    on it is cut there: ``root_cycle`` is True and the root is the last collective before the
    repeat (logged). Rows without a named cause keep their own straggler as the root.

    A root reached through other collectives must account for the tax routed to it: its principal
    cause's extra time at least :data:`ROOT_MIN_SHARE` of the tau of the collective the chain starts
    at. Otherwise the root rank stays (the delay did come from it) but the cause is
    ``propagated from rank R, not explained`` (category :data:`NOT_EXPLAINED`) and ``root_reason``
    says why (how much its cause accounts for, and its own row's status).

    A chain that ends in a point-to-point wait (``(wait) send`` / ``(wait) recv``, gloo) goes on to
    the peer's cause where ``p2p`` (per collective, :func:`evtsync.critpath.cpu.p2p_routes`) found it
    — the transfers paired, its hops added to ``root_chain``, the same share rule on the peer cause's
    time — and stops with the reason otherwise (docs/critical-path.md §7).
    """
    p2p = p2p or {}
    table = table.copy()
    if table.empty:
        return table
    key_of = {(pg, int(i)): n for n, (pg, i) in enumerate(zip(table["pg"], table["index"], strict=True))}
    cause_pg, cause_index = table["cause_pg"].tolist(), table["cause_index"].tolist()
    out: dict[str, list[Any]] = {c: [] for c in ("root_rank", "root_pg", "root_index", "root_cause", "root_category",
                           "root_chain", "root_cycle", "root_reason")}
    tau = table["tau_max_us"].astype(float).tolist()
    cause_extra = pd.to_numeric(table["cause_extra_us"], errors="coerce").fillna(0.0).tolist()
    n_cycles = 0
    for n in range(len(table)):
        seen, here, cycle, hops = {n}, n, False, 0
        while True:
            pg, idx = cause_pg[here], cause_index[here]
            if pg is None or idx is None or (isinstance(idx, float) and np.isnan(idx)):
                break
            nxt = key_of.get((pg, int(idx)))
            if nxt is None or table["status"].iat[nxt] in ("no_tax", "no_node"):
                break
            if nxt in seen:
                cycle = True
                break
            seen.add(nxt)
            here = nxt
        n_cycles += cycle
        rank = table["straggler_rank"].iat[here]
        cause, category, reason = table["cause_name"].iat[here], table["cause_category"].iat[here], None
        if here != n and cause_extra[here] < ROOT_MIN_SHARE * tau[n]:
            status = table["status"].iat[here]
            reason = (f"the chain reaches {table['pg'].iat[here]}:{int(table['index'].iat[here])}, whose straggler "
                      f"(rank {rank}) has {'no principal cause' if cause is None or pd.isna(cause) else repr(cause)} "
                      f"accounting for {cause_extra[here]:,.0f} µs of the {tau[n]:,.0f} µs routed to it (less than "
                      f"{ROOT_MIN_SHARE:.0%}); its own row is {status}")
            cause, category = f"propagated from rank {rank}, not explained", NOT_EXPLAINED
        elif category == "collective_wait" and _missing(cause_pg[here]):
            # a wait for no aligned collective: a point-to-point send/recv (gloo); its blame goes to the
            # peer's cause where the transfer is paired, else it stops here (docs/critical-path.md §7)
            peer = p2p.get((table["pg"].iat[here], int(table["index"].iat[here])))
            if peer is None or peer.rank is None:
                why = "its peer is not followed (no pairing given)" if peer is None else str(peer.reason)
                reason = f"the chain ends in {cause!r} on rank {rank}: a point-to-point wait; {why}"
            elif peer.extra_us < ROOT_MIN_SHARE * tau[n]:
                reason = (f"the chain follows {cause!r} on rank {rank} to rank {peer.rank} ({peer.hops} point-to-point "
                          f"hop(s)), whose largest cause before it arrived, {peer.cause!r}, accounts for "
                          f"{peer.extra_us:,.0f} µs of the {tau[n]:,.0f} µs routed to it (less than "
                          f"{ROOT_MIN_SHARE:.0%})")
                rank, cause, category = peer.rank, f"propagated from rank {peer.rank}, not explained", NOT_EXPLAINED
                hops = peer.hops
            else:
                rank, cause, category, hops = peer.rank, peer.cause, peer.category, peer.hops
        out["root_rank"].append(rank)
        out["root_pg"].append(table["pg"].iat[here])
        out["root_index"].append(int(table["index"].iat[here]))
        out["root_cause"].append(cause)
        out["root_category"].append(category)
        out["root_reason"].append(reason)
        out["root_chain"].append(len(seen) - 1 + hops)
        out["root_cycle"].append(cycle)
    for c, v in out.items():
        table[c] = v
    if n_cycles:
        log.warning("blame routing: %d collective(s) reach a cycle of collectives waiting for each other; "
                    "cut at the repeat (root_cycle)", n_cycles)
    return table


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value)) or value is pd.NA


def rank_blame(table: pd.DataFrame, ranks: pd.DataFrame) -> pd.DataFrame:
    """Per rank: collectives it took part in, how often it straggled, the wait it suffered (its
    own ``wait_us`` over all its collectives), the wait it caused as the straggler (the other
    members' waiting in the collectives it straggled in) and as the root after routing.
    ``table``: the attribution's collectives; ``ranks``: the tax's per-rank table (pg, index,
    rank, wait_us)."""
    if ranks.empty:
        return pd.DataFrame(columns=RANK_COLUMNS)
    wait = ranks.groupby(["pg", "index"], observed=True)["wait_us"].sum()
    suffered = ranks.groupby("rank")["wait_us"].sum()
    n = ranks.groupby("rank").size()
    rows = {int(r): {"rank": int(r), "collectives": int(n[r]), "straggled": 0, "wait_suffered_us": float(suffered[r]),
                     "wait_caused_us": 0.0, "wait_caused_root_us": 0.0} for r in n.index}
    for pg, idx, s, root in zip(table["pg"], table["index"], table["straggler_rank"], table["root_rank"], strict=True):
        w = float(wait.get((pg, int(idx)), 0.0))
        if s is not None and not pd.isna(s) and int(s) in rows:
            rows[int(s)]["straggled"] += 1
            rows[int(s)]["wait_caused_us"] += w
        if root is not None and not pd.isna(root) and int(root) in rows:
            rows[int(root)]["wait_caused_root_us"] += w
    return pd.DataFrame(list(rows.values()), columns=RANK_COLUMNS)


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


def valid_collectives(collectives: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The rows the alignment did not flag invalid, and how many it did (issue 33: a flagged
    collective's durations do not measure a tax, so it enters no summary)."""
    if "valid" not in collectives or collectives.empty:
        return collectives, 0
    valid = collectives["valid"].fillna(False).astype(bool).to_numpy()
    return collectives[valid], int((~valid).sum())


def summarize(collectives: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Cause categories over attributed collectives, and the GPU-only path share."""
    ok = collectives[collectives["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS), float("nan")
    counts = ok["cause_category"].value_counts()
    n_gpu = int((ok["path_kind"] == "gpu_only").sum())
    rows = []
    for category, count in counts.items():
        is_cpu = category in CPU_CATEGORIES or category in CPU_SIDE_CATEGORIES
        rows.append({"category": category, "cause_class": "cpu" if is_cpu else "gpu", "count": int(count),
                     "share": count / len(ok),
                     "share_of_gpu_causes": float("nan") if is_cpu or not n_gpu else count / n_gpu})
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS).sort_values(
        ["cause_class", "count"], ascending=[False, False]).reset_index(drop=True)
    return summary, float((ok["path_kind"] == "gpu_only").mean())


# --------------------------------------------------------------------------- who and why (the run's tables)

#: Kinds of ``unexplained_reason`` (matched by their wording in evtsync.critpath: every word of
#: an entry), each with what to change in the profiling so that the next trace explains it.
REASON_KINDS: list[tuple[str, tuple[str, ...], str]] = [
    ("first collective in the profiling window", ("first collective of its group",),
     "record more steps per window (torch.profiler.schedule(active=…) larger) so that a previous collective "
     "of the group bounds the path"),
    ("kernel without a launch link", ("no launch/correlation edge",),
     "record the CUDA runtime too (activities=[CPU, CUDA]) so that every kernel links to its launch"),
    ("delay carried over from before the window", ("already", "behind"),
     "start the profiling window earlier (schedule(wait=…) smaller, active=… larger) so that the delay's "
     "origin is inside it"),
    ("fastest rank lost time off the path", ("ahead of the fastest rank",),
     "annotate the phases of the step with record_function(...) so that the ranks' events match"),
    ("critical-parent cycle", ("cycle",), "report it: the trace's dependencies form a loop (a clock or "
                                          "correlation problem)"),
    ("path reaches the trace start", ("no parent in the trace",),
     "record a longer window so that the path reaches a previous collective"),
    ("ranks ran different work", ("no counterpart",),
     "annotate the phases with record_function(...) (or with_stack=True) so that the ranks' events match"),
    ("end times disagree (CPU-side, busy host)", ("descheduled",),
     "give each rank its own cores (fewer ranks or threads per host) or record a longer window; on an "
     "oversubscribed CPU the collective's end moves by milliseconds"),
    *(("events missing from the trace", (needle,),
       "keep record_shapes and the default CPU activity on; a trace without the collective's enqueue or kernel "
       "cannot be walked") for needle in ("no GPU node", "no c10d", "no main thread")),
]
OTHER_REASON = ("rest off the critical path",
                "record with_stack=True or more record_function(...) annotations to name the off-path time")
#: What to do about a root cause of each category.
CATEGORY_ADVICE = {
    "python_gap": "uninstrumented Python: wrap the code (data loading, logging, …) in "
                  "torch.profiler.record_function('…') to name it (with_stack=True names thread joins; with "
                  "experimental_config=_ExperimentalConfig(record_python_gc_info=True) too, GC pauses)",
    "python": "annotated Python on the straggler: the named region itself",
    "cpu_op": "an operator ran longer on the straggler (extra or slower work)",
    "enqueue": "the collective's enqueue was slow (the thread descheduled inside it?)",
    "launch_delay": "CPU-side launch delay: the kernel was launched late",
    "synchronization": "a blocking synchronisation on the straggler",
    "collective_wait": "the straggler waited in another collective whose own root is not attributed",
    NOT_EXPLAINED: "the delay came from this rank through other collectives, but its own path does not account for "
                   "it: see root_reason in tables/attribution_collectives.parquet and the unexplained table",
}


def reason_kind(reason: Any) -> tuple[str, str]:
    """(kind, what to change in the profiling) of one ``unexplained_reason``."""
    text = "" if reason is None or (isinstance(reason, float) and pd.isna(reason)) else str(reason)
    for kind, needles, advice in REASON_KINDS:
        if all(n in text for n in needles):
            return kind, advice
    return OTHER_REASON


def root_cause_table(coll: pd.DataFrame) -> pd.DataFrame:
    """Per workload, every root cause (rank, cause, category) by the tax it accounts for (sum of
    tau over the collectives routed to it), with how many were reached through other groups. All
    pairs are kept (the report shows the first :data:`ROOT_CAUSES_SHOWN` and says how many more)."""
    rows = coll[coll["status"].isin(["ok", "unexplained"]) & coll["root_cause"].notna()]
    if rows.empty:
        return pd.DataFrame()
    unexplained = (rows["status"] == "unexplained").to_numpy() | (
        rows["root_reason"].notna().to_numpy() if "root_reason" in rows else False)
    rows = rows.assign(routed=rows["root_chain"].fillna(0).astype(float) > 0,
                       cycle=rows["root_cycle"].fillna(False).astype(bool),
                       unexplained_tax=np.where(unexplained, rows["tau_max_us"].to_numpy(np.float64), 0.0))
    grouped = rows.groupby(["workload", "root_rank", "root_cause", "root_category"], dropna=False, sort=False)
    out = grouped.agg(collectives=("index", "size"), tax_us=("tau_max_us", "sum"),
                      unexplained_tax_us=("unexplained_tax", "sum"),
                      through_other_collectives=("routed", "sum"), cycles_cut=("cycle", "sum")).reset_index()
    out["flag"] = root_cause_flags(out)
    out["advice"] = out["root_category"].map(lambda c: CATEGORY_ADVICE.get(str(c), ""))
    return out.sort_values(["workload", "tax_us"], ascending=[True, False], kind="stable").reset_index(drop=True)


#: a root cause flagged ``scheduling``: its category (docs/critical-path.md, "Flags of root causes")
SCHEDULING_CATEGORIES = frozenset({"enqueue"})


def root_cause_flags(roots: pd.DataFrame) -> list[str | None]:
    """Per (workload, root rank, cause) row of :func:`root_cause_table`, why its tax should not be
    read as a straggler's cause in the program, or None (docs/critical-path.md, "Flags of root causes"):
    ``unexplained`` when at least half of its tax sits on collectives that are unexplained or
    whose chain stopped with a ``root_reason``; else ``scheduling`` when the root is the main
    thread's time inside a ``c10d::*`` call outside its collective's run (category ``enqueue``:
    handing the collective to the gloo worker, or returning after it ended), tens of µs of work:
    beyond that the thread waited for a core (or the GIL). (A rule for "consistent with the job's
    noise" was tried and dropped: on the real recordings every variant that flags the clean twins'
    causes also flags planted stragglers, see the docs.)"""
    tax = roots["tax_us"].to_numpy(np.float64)
    unexpl = roots["unexplained_tax_us"].to_numpy(np.float64)
    cats = roots["root_category"].astype(str).tolist() if "root_category" in roots else [""] * len(roots)
    return ["unexplained" if t > 0 and u >= 0.5 * t else "scheduling" if t > 0 and c in SCHEDULING_CATEGORIES
            else None for t, u, c in zip(tax, unexpl, cats, strict=True)]


def unexplained_table(coll: pd.DataFrame) -> pd.DataFrame:
    """Per workload and kind of reason, the unexplained (or unattributed) collectives, the tax
    they hold and what to change in the profiling."""
    rows = coll[coll["status"].isin(["unexplained", "no_node"])]
    if rows.empty:
        return pd.DataFrame()
    kinds = [reason_kind(r) for r in rows["unexplained_reason"]]
    rows = rows.assign(reason=[k for k, _ in kinds], change=[a for _, a in kinds])
    out = rows.groupby(["workload", "reason", "change"], sort=False).agg(
        collectives=("index", "size"), tax_us=("tau_max_us", "sum")).reset_index()
    return out.sort_values(["workload", "tax_us"], ascending=[True, False]).reset_index(drop=True)[
        ["workload", "reason", "collectives", "tax_us", "change"]]


def rank_blame_table(coll: pd.DataFrame, tax_ranks: pd.DataFrame | None) -> pd.DataFrame:
    """Per workload and rank: how often it straggled, the wait it suffered against the wait it
    caused (as the straggler, and as the root after routing), from the run's tables."""
    if tax_ranks is None or tax_ranks.empty or "workload" not in coll.columns:
        return pd.DataFrame()
    parts = []
    for workload, sub in coll.groupby("workload", sort=True):
        ranks = tax_ranks[tax_ranks["workload"].astype(str) == str(workload)]
        if len(ranks):
            parts.append(rank_blame(sub, ranks).assign(workload=workload))
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, ignore_index=True)
    return out[["workload", "rank", "collectives", "straggled", "wait_suffered_us", "wait_caused_us",
                "wait_caused_root_us"]]


def why_tables(collectives: pd.DataFrame, tax_ranks: pd.DataFrame | None) -> dict[str, pd.DataFrame]:
    """The attribution stage's "who and why" tables of a run (issue 28, item 6), each with the
    ``workload`` and ``gpu`` of its rows: ``root_causes`` (:func:`root_cause_table`),
    ``rank_blame`` (:func:`rank_blame_table`) and ``unexplained`` (:func:`unexplained_table`).
    ``collectives`` holds the attributed collectives of every workload, tagged with its workload
    and GPU; ``tax_ranks`` the tax's per-rank table (None: no per-rank blame)."""
    gpu_of = dict(zip(collectives["workload"].astype(str), collectives["gpu"], strict=True)) \
        if {"workload", "gpu"} <= set(collectives.columns) else {}
    out = {"root_causes": root_cause_table(collectives), "rank_blame": rank_blame_table(collectives, tax_ranks),
           "unexplained": unexplained_table(collectives)}
    for name, table in out.items():
        if len(table) and "gpu" not in table:
            table.insert(1, "gpu", table["workload"].astype(str).map(gpu_of))
        elif not len(table):
            out[name] = pd.DataFrame(columns=["workload", "gpu"])
    return out
