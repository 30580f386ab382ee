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
    KIND_GPU,
    KIND_NAMES,
    SAME_STREAM_TOLERANCE_NS,
    RankDAG,
    Vocabulary,
    build_rank_dag,
)
from evtsync.critpath.validate import regress_path_on_tax
from evtsync.critpath.walk import (
    BOTTOM_CYCLE,
    BOTTOM_NO_PARENT,
    GPU_SEGMENTS,
    NO_WINDOW,
    SEG_KERNEL,
    SEG_QUEUE,
    SEGMENT_NAMES,
    KeyIndex,
    PathAccount,
    Walker,
    Window,
    _tile,
    account_path,
    segment_category,
)
from evtsync.errors import InputError
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


@dataclass
class AttributionResult:
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


def _rank_tables(traces: TraceSet, rank: int) -> tuple[pd.DataFrame, ...]:
    return tuple(df[df["rank"].to_numpy() == rank] for df in
                 (traces.kernels, traces.cpu_ops, traces.runtime, traces.syncs))


def build_dags(traces: TraceSet, ranks: Iterable[int], *, vocab: Vocabulary | None = None,
               same_stream_tolerance_us: float = SAME_STREAM_TOLERANCE_NS / 1000.0) -> dict[int, RankDAG]:
    """The event DAG of each given rank (names share one vocabulary)."""
    vocab = vocab if vocab is not None else Vocabulary()
    ranks = sorted(set(ranks))
    out = {}
    for r in progress(ranks, "building DAGs", len(ranks), "rank"):
        out[r] = build_rank_dag(*_rank_tables(traces, r), rank=r, vocab=vocab,
                                same_stream_tolerance_ns=int(round(same_stream_tolerance_us * 1000)))
    return out


def instance_nodes(traces: TraceSet, instances: pd.DataFrame, dags: dict[int, RankDAG]) -> np.ndarray:
    """GPU node of each aligned collective instance (-1 where not found)."""
    nccl = traces.nccl_kernels
    table = pd.DataFrame({"row": nccl.index.to_numpy(), "rank": nccl["rank"].to_numpy().astype(np.int64),
                          "stream": nccl["stream"].to_numpy(), "ts_ns": nccl["ts_ns"].to_numpy(),
                          "correlation": nccl["correlation"].to_numpy()})
    keys = pd.DataFrame({"rank": instances["rank"].to_numpy().astype(np.int64),
                         "stream": instances["stream"].to_numpy(), "ts_ns": instances["ts_ns"].to_numpy(),
                         "correlation": instances["correlation"].to_numpy()})
    merged = keys.merge(table.drop_duplicates(["rank", "stream", "ts_ns", "correlation"]),
                        on=["rank", "stream", "ts_ns", "correlation"], how="left")
    rows = merged["row"].fillna(-1).to_numpy().astype(np.int64)
    nodes = np.full(len(instances), -1, dtype=np.int64)
    for r, dag in dags.items():
        gpu = dag.kind == KIND_GPU
        lookup = pd.Series(np.flatnonzero(gpu), index=dag.row[gpu])
        sel = (keys["rank"].to_numpy() == r) & (rows >= 0)
        nodes[sel] = lookup.reindex(rows[sel]).fillna(-1).to_numpy().astype(np.int64)
    return nodes


def attribute(traces: TraceSet | str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
              pg: str | None = None, *, same_stream_tolerance_us: float = 3.0,
              keep_paths: bool = True, alignment: Alignment | None = None,
              tax: TaxTables | None = None, **align_options: Any) -> AttributionResult:
    """Critical-path attribution of every collective (of PG ``pg``, or of every PG).

    ``pg`` is a PG label of the alignment (``evtsync tax`` lists them) or a ``pg_name``.
    ``same_stream_tolerance_us`` is the walk's preference for same-stream predecessors.
    ``align_options`` go to :func:`evtsync.align_collectives`.
    """
    if not isinstance(traces, TraceSet):
        traces = load_traces(traces)
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
    vocab = Vocabulary()
    dags = build_dags(traces, inst["rank"].unique().tolist(), vocab=vocab,
                      same_stream_tolerance_us=same_stream_tolerance_us)
    keys = {r: KeyIndex(d) for r, d in dags.items()}
    walkers = {r: Walker(d) for r, d in dags.items()}
    inst = inst.assign(node=instance_nodes(traces, inst, dags))
    missing = inst[inst["node"] < 0]
    if len(missing):
        log.warning("%d collective instance(s) have no GPU node in the DAG; skipped", len(missing))
    by_key = {(p, int(i), int(r)): (int(n), int(s), int(e)) for p, i, r, n, s, e in
              inst[["pg", "index", "rank", "node", "ts_ns", "end_ns"]].itertuples(index=False)}
    tax_rows = tax.collectives
    if pg is not None:
        tax_rows = tax_rows[tax_rows["pg"].isin(inst["pg"].unique())]
    rows: list[dict[str, Any]] = []
    path_parts: list[pd.DataFrame] = []
    names = vocab.names
    for t in progress(list(tax_rows.itertuples(index=False)), "walking critical paths", len(tax_rows),
                      "collective"):
        s_rank, f_rank, index = int(t.straggler_rank), int(t.fastest_rank), int(t.index)
        row: dict[str, Any] = {c: None for c in COLLECTIVE_COLUMNS}
        row.update(pg=t.pg, index=index, collective=t.collective, n_ranks=int(t.n_ranks), valid=bool(t.valid),
                   tau_max_us=float(t.tau_max_us), straggler_rank=s_rank, fastest_rank=f_rank)
        here_s, here_f = by_key.get((t.pg, index, s_rank)), by_key.get((t.pg, index, f_rank))
        if s_rank == f_rank or t.tau_max_us <= 0:
            row["status"] = "no_tax"
            rows.append(row)
            continue
        if here_s is None or here_f is None or here_s[0] < 0 or here_f[0] < 0:
            row["status"] = "no_node"
            rows.append(row)
            continue
        prev_s, prev_f = by_key.get((t.pg, index - 1, s_rank)), by_key.get((t.pg, index - 1, f_rank))
        account, parts = attribute_collective(
            (dags[s_rank], keys[s_rank], walkers[s_rank]), (dags[f_rank], keys[f_rank], walkers[f_rank]),
            here_s, here_f, prev_s, prev_f, row, names, keep_paths=keep_paths)
        rows.append(row)
        path_parts.extend(parts)
    table = pd.DataFrame(rows, columns=COLLECTIVE_COLUMNS)
    gpu_causes = table["cause_segment"] == "kernel"
    if gpu_causes.any():
        table.loc[gpu_causes, "cause_category"] = classify_names(table.loc[gpu_causes, "cause_name"].tolist())
    summary, gpu_only = summarize(table)
    paths = pd.concat(path_parts, ignore_index=True) if path_parts else pd.DataFrame(columns=PATH_COLUMNS)
    stats = pd.DataFrame([{"rank": r, **d.stats} for r, d in dags.items()])
    return AttributionResult(collectives=table, summary=summary, validation=regress_path_on_tax(table),
                             paths=paths, gpu_only_share=gpu_only, dag_stats=stats)


def attribute_collective(straggler: tuple[RankDAG, KeyIndex, Walker], fastest: tuple[RankDAG, KeyIndex, Walker],
                         here_s: tuple[int, int, int], here_f: tuple[int, int, int],
                         prev_s: tuple[int, int, int] | None, prev_f: tuple[int, int, int] | None,
                         row: dict[str, Any], names: list[str], *, keep_paths: bool = False,
                         ) -> tuple[PathAccount, list[pd.DataFrame]]:
    """Walk, account and judge one collective; fills ``row`` (a dict of COLLECTIVE_COLUMNS).

    ``here_*`` / ``prev_*`` are (node, start ns, end ns) of the collective and of the
    previous collective of its PG on the straggler and on the fastest rank.
    """
    dag_s, keys_s, walk_s = straggler
    dag_f, keys_f, walk_f = fastest
    win_s = _window(dag_s, prev_s, here_s[1])
    win_f = _window(dag_f, prev_f, here_f[1])
    stop_s, stop_f = (prev_s[0] if prev_s else -1), (prev_f[0] if prev_f else -1)
    path_s = walk_s.path(here_s[0], win_s, stop_s)
    path_f = walk_f.path(here_f[0], win_f, stop_f)
    acc = account_path((dag_s, keys_s), (dag_f, keys_f), path_s, path_f, win_s, win_f,
                       (here_s[0], here_f[0]), (stop_s, stop_f))
    tau = float(row["tau_max_us"])
    extra_us = float(acc.extra_ns.sum()) / 1000.0
    own_f, wait_f, bottom_f = _tile(dag_f, [here_f[0], *path_f.tolist()], win_f, fastest=False)
    fastest_us = (sum(own_f) + sum(wait_f)) / 1000.0
    unplaced = float("nan")
    if prev_s is not None and prev_f is not None:
        # lateness at the collective's start, each rank counted from the previous collective's end
        late = (here_s[1] - prev_s[2]) - (here_f[1] - prev_f[2])
        unplaced = (late - float(acc.extra_ns.sum())) / 1000.0
    row.update(fastest_path_us=fastest_us, fastest_matched_us=float(acc.seg_fastest_ns.sum()) / 1000.0,
               unplaced_us=unplaced)
    is_gpu_seg = np.isin(acc.seg_kind, list(GPU_SEGMENTS))
    row.update(
        path_len=len(path_s), path_cpu_nodes=int((dag_s.kind[path_s] != KIND_GPU).sum()),
        path_unmatched=acc.n_unmatched, path_bottom=acc.bottom,
        straggler_path_us=acc.path_time_ns / 1000.0, path_extra_us=extra_us,
        path_gpu_extra_us=float(acc.extra_ns[is_gpu_seg].sum()) / 1000.0,
        path_cpu_extra_us=float(acc.extra_ns[~is_gpu_seg].sum()) / 1000.0,
        explained_share=extra_us / tau if tau > 0 else float("nan"), n_common=acc.n_common,
        lca_name=names[int(dag_s.name_id[acc.lca])] if acc.lca >= 0 else None)
    k = acc.principal
    if k >= 0 and acc.extra_ns[k] > 0:
        node = int(acc.seg_node[k])
        kind = int(dag_s.kind[node])
        seg = int(acc.seg_kind[k])
        cls = segment_category(seg, kind)
        pos = k // 2 - 1  # position on the path (-1: the collective's own wait)
        fast_node = int(acc.chain_fastest[k // 2])
        row.update(
            path_kind="gpu_only" if cls == "gpu" else cls, cause_name=names[int(dag_s.name_id[node])],
            cause_kind=KIND_NAMES[kind], cause_segment=SEGMENT_NAMES[seg],
            cause_category=(None if seg == SEG_KERNEL else "stream_queue") if cls == "gpu" else cls,
            cause_extra_us=float(acc.extra_ns[k]) / 1000.0, cause_raw_extra_us=float(acc.raw_extra_ns[k]) / 1000.0,
            cause_duration_us=float(acc.seg_ns[k]) / 1000.0,
            cause_fastest_duration_us=float(acc.seg_fastest_ns[k]) / 1000.0,
            cause_occurrence=int(acc.occurrence[pos]) if pos >= 0 else 0, cause_start_ns=int(dag_s.start[node]),
            cause_on_fastest_path=bool(fast_node >= 0 and (pos < 0 or fast_node in set(path_f.tolist()))))
    share = row["explained_share"]
    if EXPLAINED_SHARE_MIN <= share <= EXPLAINED_SHARE_MAX:
        row["status"] = "ok"
    else:
        row["status"] = "unexplained"
        row["unexplained_reason"] = _why_unexplained(acc, dag_s, names, row)
    parts: list[pd.DataFrame] = []
    if keep_paths:
        node_extra = acc.node_extra_ns()
        parts.append(_path_frame(row["pg"], row["index"], dag_s.rank, "straggler", dag_s, path_s, acc.occurrence,
                                 node_extra, names, acc))
        occ_f = keys_f.occurrence(path_f, win_f) if len(path_f) else np.zeros(0, np.int64)
        parts.append(_path_frame(row["pg"], row["index"], dag_f.rank, "fastest", dag_f, path_f, occ_f,
                                 np.full(len(path_f), np.nan), names))
    return acc, parts


def _why_unexplained(acc: PathAccount, dag: RankDAG, names: list[str], row: dict[str, Any]) -> str:
    """One line on why a collective's path does not account for its tax (``row``: its table row)."""
    tau, extra_us = float(row["tau_max_us"]), float(row["path_extra_us"])
    head = f"path extra {extra_us:.0f} us of tau {tau:.0f} us"
    oldest = int(acc.seg_node[-1])
    name = names[int(dag.name_id[oldest])][:60]
    if acc.bottom == BOTTOM_NO_PARENT and dag.kind[oldest] == KIND_GPU and dag.launch_of(oldest) < 0:
        return f"{head}: the path stops at kernel {name}, which has no launch/correlation edge to the CPU"
    queued = (acc.seg_kind == SEG_QUEUE) & (acc.extra_ns > 0.5 * max(tau, 0.0) * 1000.0)
    for k in np.flatnonzero(queued).tolist():
        node = int(acc.seg_node[k])
        if dag.launch_of(node) < 0:
            return (f"{head}: kernel {names[int(dag.name_id[node])][:60]} waited "
                    f"{acc.seg_ns[k] / 1000.0:.0f} us after its stream predecessor and has no "
                    "launch/correlation edge to say why")
    if acc.bottom == BOTTOM_CYCLE:
        return f"{head}: the critical-parent walk met a cycle at {name}"
    unplaced = float(row["unplaced_us"])
    if not np.isnan(unplaced) and abs(unplaced) > (1.0 - EXPLAINED_SHARE_MIN) * tau:
        if unplaced > 0:
            return (f"{head}: the straggler was already {unplaced:.0f} us behind the fastest rank, counted from the "
                    "previous collective's end, when its path began (time carried over from before the window)")
        return (f"{head}: the straggler's path began {-unplaced:.0f} us ahead of the fastest rank's same events, "
                "counted from the previous collective's end (the fastest rank lost that time before them, "
                "or off the straggler's path)")
    if acc.bottom == BOTTOM_NO_PARENT:
        return f"{head}: the path stops at {name}, which has no parent in the trace"
    n = len(acc.path)
    if n and acc.n_unmatched > n // 2:
        return (f"{head}: {acc.n_unmatched} of {n} events on the straggler's path have no counterpart "
                "on the fastest rank (the ranks ran different work)")
    return f"{head}: the rest lies off the straggler's critical path"


def _window(dag: RankDAG, previous: tuple[int, int, int] | None, end_ns: int) -> Window:
    """Window of a collective on one rank from its previous collective (node, start, end)."""
    if previous is None or previous[0] < 0:
        return Window(NO_WINDOW, NO_WINDOW, end_ns)
    launch = dag.launch_of(previous[0])
    if launch < 0:
        return Window(previous[2], previous[2], end_ns)
    return Window(previous[2], int(dag.end[launch]), end_ns, int(dag.start[launch]))


def _path_frame(pg: str, index: int, rank: int, role: str, dag: RankDAG, path: np.ndarray,
                occurrence: np.ndarray, extra_ns: np.ndarray, names: list[str],
                account: PathAccount | None = None) -> pd.DataFrame:
    nan = np.full(len(path), np.nan)
    seg = (account.seg_ns[2:] / 1000.0, account.seg_fastest_ns[2:] / 1000.0) if account is not None else None
    return pd.DataFrame({
        "pg": pg, "index": index, "rank": rank, "role": role, "step": np.arange(len(path)),
        "name": [names[i] for i in dag.name_id[path].tolist()],
        "kind": [KIND_NAMES[k] for k in dag.kind[path].tolist()],
        "start_ns": dag.start[path], "end_ns": dag.end[path],
        "dur_us": (dag.end[path] - dag.start[path]) / 1000.0, "occurrence": occurrence,
        "own_us": seg[0][0::2] if seg else nan, "wait_us": seg[0][1::2] if seg else nan,
        "own_fastest_us": seg[1][0::2] if seg else nan, "wait_fastest_us": seg[1][1::2] if seg else nan,
        "extra_us": np.asarray(extra_ns, dtype=np.float64) / 1000.0})


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
