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
    CPU_KIND_CATEGORY,
    NO_WINDOW,
    KeyIndex,
    Walker,
    Window,
    compare_paths,
    path_kind,
)
from evtsync.errors import InputError
from evtsync.progress import progress
from evtsync.tax import TaxTables, compute_tax
from evtsync.trace.traceset import TraceSet, load_traces

log = logging.getLogger(__name__)

COLLECTIVE_COLUMNS = [
    "pg", "index", "collective", "n_ranks", "valid", "tau_max_us", "straggler_rank", "fastest_rank",
    "status", "path_kind", "path_len", "path_cpu_nodes", "cause_name", "cause_kind", "cause_category",
    "cause_extra_us", "cause_raw_extra_us", "cause_duration_us", "cause_fastest_duration_us", "cause_occurrence",
    "cause_start_ns", "cause_on_fastest_path", "lca_name", "n_common", "path_extra_us",
    "path_raw_extra_us", "straggler_path_us",
]
PATH_COLUMNS = ["pg", "index", "rank", "role", "step", "name", "kind", "start_ns", "end_ns",
                "dur_us", "occurrence", "extra_us"]
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
        win_s = _window(dags[s_rank], prev_s, here_s[1])
        win_f = _window(dags[f_rank], prev_f, here_f[1])
        path_s = walkers[s_rank].path(here_s[0], win_s, prev_s[0] if prev_s else -1)
        path_f = walkers[f_rank].path(here_f[0], win_f, prev_f[0] if prev_f else -1)
        dag_s, dag_f = dags[s_rank], dags[f_rank]
        comp = compare_paths((dag_s, keys[s_rank]), (dag_f, keys[f_rank]), path_s, path_f, win_s, win_f,
                             (here_s[0], here_f[0]))
        row["path_len"] = len(path_s)
        row["path_cpu_nodes"] = int((dag_s.kind[path_s] != KIND_GPU).sum())
        row["straggler_path_us"] = float(comp.duration_ns.sum()) / 1000.0
        row["path_extra_us"] = float(comp.effect_ns.sum()) / 1000.0
        row["path_raw_extra_us"] = float(comp.extra_ns.sum()) / 1000.0
        row["n_common"] = comp.n_common
        row["lca_name"] = names[int(dag_s.name_id[comp.lca])] if comp.lca >= 0 else None
        if comp.principal < 0:
            row["status"] = "empty_path"
            row["path_kind"] = "gpu_only"
        else:
            k = comp.principal
            node = int(path_s[k])
            kind = int(dag_s.kind[node])
            row.update(
                status="ok", path_kind=path_kind(dag_s, comp), cause_name=names[int(dag_s.name_id[node])],
                cause_kind=KIND_NAMES[kind],
                cause_category=None if kind == KIND_GPU else CPU_KIND_CATEGORY[kind],
                cause_extra_us=float(comp.effect_ns[k]) / 1000.0,
                cause_raw_extra_us=float(comp.extra_ns[k]) / 1000.0,
                cause_duration_us=float(comp.duration_ns[k]) / 1000.0,
                cause_fastest_duration_us=float(comp.fastest_duration_ns[k]) / 1000.0,
                cause_occurrence=int(comp.occurrence[k]), cause_start_ns=int(dag_s.start[node]),
                cause_on_fastest_path=bool(comp.on_fastest_path[k]))
        rows.append(row)
        if keep_paths:
            path_parts.append(_path_frame(t.pg, index, s_rank, "straggler", dag_s, path_s, comp.occurrence,
                                          comp.extra_ns, names))
            occ_f = keys[f_rank].occurrence(path_f, win_f) if len(path_f) else np.zeros(0, np.int64)
            path_parts.append(_path_frame(t.pg, index, f_rank, "fastest", dag_f, path_f, occ_f,
                                          np.full(len(path_f), np.nan), names))
    table = pd.DataFrame(rows, columns=COLLECTIVE_COLUMNS)
    gpu_causes = (table["status"] == "ok") & (table["cause_kind"] == "gpu")
    if gpu_causes.any():
        table.loc[gpu_causes, "cause_category"] = classify_names(table.loc[gpu_causes, "cause_name"].tolist())
    summary, gpu_only = summarize(table)
    paths = pd.concat(path_parts, ignore_index=True) if path_parts else pd.DataFrame(columns=PATH_COLUMNS)
    stats = pd.DataFrame([{"rank": r, **d.stats} for r, d in dags.items()])
    return AttributionResult(collectives=table, summary=summary, validation=regress_path_on_tax(table),
                             paths=paths, gpu_only_share=gpu_only, dag_stats=stats)


def _window(dag: RankDAG, previous: tuple[int, int, int] | None, end_ns: int) -> Window:
    """Window of a collective on one rank from its previous collective (node, start, end)."""
    if previous is None or previous[0] < 0:
        return Window(NO_WINDOW, NO_WINDOW, end_ns)
    launch = dag.launch_of(previous[0])
    cpu_start = int(dag.end[launch]) if launch >= 0 else previous[2]
    return Window(previous[2], cpu_start, end_ns)


def _path_frame(pg: str, index: int, rank: int, role: str, dag: RankDAG, path: np.ndarray,
                occurrence: np.ndarray, extra_ns: np.ndarray, names: list[str]) -> pd.DataFrame:
    return pd.DataFrame({
        "pg": pg, "index": index, "rank": rank, "role": role, "step": np.arange(len(path)),
        "name": [names[i] for i in dag.name_id[path].tolist()],
        "kind": [KIND_NAMES[k] for k in dag.kind[path].tolist()],
        "start_ns": dag.start[path], "end_ns": dag.end[path],
        "dur_us": (dag.end[path] - dag.start[path]) / 1000.0, "occurrence": occurrence,
        "extra_us": np.asarray(extra_ns, dtype=np.float64) / 1000.0})


def summarize(collectives: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """Cause categories over attributed collectives, and the GPU-only path share."""
    ok = collectives[collectives["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS), float("nan")
    counts = ok["cause_category"].value_counts()
    n_gpu = int((ok["cause_kind"] == "gpu").sum())
    rows = []
    for category, count in counts.items():
        is_cpu = category in CPU_CATEGORIES
        rows.append({"category": category, "cause_class": "cpu" if is_cpu else "gpu", "count": int(count),
                     "share": count / len(ok),
                     "share_of_gpu_causes": float("nan") if is_cpu or not n_gpu else count / n_gpu})
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS).sort_values(
        ["cause_class", "count"], ascending=[False, False]).reset_index(drop=True)
    return summary, float((ok["path_kind"] == "gpu_only").mean())
