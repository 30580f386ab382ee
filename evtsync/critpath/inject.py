"""Delay injection (methodology §4 b): copy a trace set with a known delay before one CPU launch.

The delay is inserted on the CPU thread just before the chosen launch call (the time is
added to the slice that precedes it: the enclosing op's own time, or a Python gap). Every
event that depends on it moves consistently, by propagation over the event DAG of each
rank (:mod:`evtsync.critpath.dag`): a node starts ``max(0, max over parents of (parent's
shift - slack))`` later, where the slack is how long it already waited after that
parent was ready — so a later launch on the same thread moves by the full delay, while a
kernel whose launch came well ahead of a busy stream moves only by what the queue could
not absorb. A blocking sync returns when the GPU work it waited for does. A collective
ends, on every member rank, when its last member arrives: its end moves by
``max(0, max_r(start shift_r - wait_r))``, and that shift propagates on every rank. Ranks
are iterated until the collective shifts no longer change.

The JSON is then rewritten event by event (kernels, memcpy/memset, CPU ops, runtime calls,
``cuda_sync`` events, flow arrows, GPU annotations), read and written with orjson (gzip
kept), every file atomically, into ``OUT_DIR/traces/``, plus ``OUT_DIR/injection.json``
describing what was done.
"""

from __future__ import annotations

import bisect
import gzip
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from evtsync.core.errors import InputError
from evtsync.core.tableio import write_bytes_atomic
from evtsync.critpath.attribution import build_dags
from evtsync.critpath.dag import (
    EDGE_LAUNCH,
    EDGE_SYNC,
    KIND_GPU,
    KIND_SYNC,
    SRC_KERNELS,
    RankDAG,
    Vocabulary,
)
from evtsync.sync.collectives import align_collectives
from evtsync.trace.schema import CPU_CATEGORIES, GPU_CATEGORIES, RUNTIME_CATEGORIES
from evtsync.trace.traceset import TraceSet, load_traces

log = logging.getLogger(__name__)

MAX_DELAY_US = 20_000
#: What a delay is inserted into: before the launch call, or into the launched GPU event.
INJECT_TARGETS = ("launch", "kernel")
MANIFEST = "injection.json"
#: Traces go to OUT_DIR/traces/ (as ``evtsync synth`` does), the manifest beside that folder,
#: so that OUT_DIR/traces can be given to any command as a folder of traces.
TRACES_SUBDIR = "traces"


@dataclass
class InjectResult:
    """What an injection did: output files, the launch chosen, and how far things moved."""

    out_dir: Path
    files: dict[int, Path]
    manifest: dict[str, Any]


@dataclass
class _Target:
    rank: int
    node: int
    runtime_row: int
    launch_name: str
    correlation: int
    kernel_name: str
    kernel_node: int
    step: str


def _iteration_bounds(traces: TraceSet, rank: int, iteration: int | None) -> tuple[int, int, str]:
    if iteration is None:
        return np.iinfo(np.int64).min, np.iinfo(np.int64).max, ""
    ops = traces.cpu_ops
    steps = ops[(ops["rank"] == rank) & ops["name"].astype(str).str.startswith("ProfilerStep#")]
    steps = steps.sort_values("ts_ns")
    if not 0 <= iteration < len(steps):
        raise InputError(f"inject: rank {rank} has {len(steps)} ProfilerStep annotation(s); "
                         f"iteration {iteration} is not among them (0-based)")
    row = steps.iloc[iteration]
    return int(row["ts_ns"]), int(row["end_ns"]), str(row["name"])


def _find_target(traces: TraceSet, dag: RankDAG, vocab: Vocabulary, rank: int, iteration: int | None,
                 kernel: str | None, occurrence: int, correlation: int | None) -> _Target:
    lo, hi, step = _iteration_bounds(traces, rank, iteration)
    launch_edges = np.flatnonzero(dag.parent_kind == EDGE_LAUNCH)
    dst = np.repeat(np.arange(dag.n_nodes), np.diff(dag.parent_ptr))[launch_edges]
    src = dag.parent[launch_edges]
    order = np.argsort(dag.start[src], kind="stable")
    src, dst = src[order], dst[order]
    kernels = traces.kernels
    rows = dag.row[dst]
    corr = kernels.loc[rows, "correlation"].to_numpy() if len(rows) else np.zeros(0, np.int64)
    names = [vocab.names[i] for i in dag.name_id[dst].tolist()]
    keep = (dag.start[src] >= lo) & (dag.start[src] < hi)
    if correlation is not None:
        keep &= corr == correlation
    if kernel is not None:
        try:
            rx = re.compile(kernel)
        except re.error as exc:
            raise InputError(f"inject: --kernel {kernel!r} is not a valid regular expression ({exc})") from exc
        keep &= np.array([bool(rx.search(n)) for n in names], dtype=bool)
    hits = np.flatnonzero(keep)
    where = f"rank {rank}" + (f", {step}" if step else "") + (f", kernel ~ {kernel!r}" if kernel else "") + \
        (f", correlation {correlation}" if correlation is not None else "")
    if not 0 <= occurrence < len(hits):
        raise InputError(f"inject: {where}: {len(hits)} matching launch(es); occurrence {occurrence} "
                         "is not among them (0-based)")
    k = hits[occurrence]
    node = int(src[k])
    return _Target(rank=rank, node=node, runtime_row=int(dag.row[node]),
                   launch_name=vocab.names[int(dag.name_id[node])], correlation=int(corr[k]),
                   kernel_name=names[k], kernel_node=int(dst[k]), step=step)


class _Propagation:
    """Start and end shifts (ns) of every node of every rank, iterated to a fixed point."""

    def __init__(self, dags: dict[int, RankDAG], instances: list[dict[str, Any]]) -> None:
        self.dags = dags
        self.instances = instances
        self.node_instance: dict[int, dict[int, int]] = {r: {} for r in dags}
        for i, inst in enumerate(instances):
            for r, node in inst["nodes"].items():
                self.node_instance[r][node] = i
        self.lists = {r: (d.start.tolist(), d.end.tolist(), d.kind.tolist(), d.parent_ptr.tolist(),
                          d.parent.tolist(), d.parent_ready.tolist(), d.parent_kind.tolist(),
                          np.argsort(d.start, kind="stable").tolist()) for r, d in dags.items()}
        self.sorted_starts = {r: np.sort(d.start, kind="stable").tolist() for r, d in dags.items()}

    def run(self, seed_rank: int, seed_end: dict[int, int], seed_start: dict[int, int],
            max_passes: int) -> tuple[dict[int, tuple[np.ndarray, np.ndarray]], list[int], int]:
        coll_end = [0] * len(self.instances)
        shifts: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for n_pass in range(1, max_passes + 1):
            for r in self.dags:
                shifts[r] = self._rank_pass(r, seed_end if r == seed_rank else {},
                                            seed_start if r == seed_rank else {}, coll_end)
            new_end = []
            for inst in self.instances:
                late = [int(shifts[r][0][node]) - inst["wait"][r] for r, node in inst["nodes"].items()]
                new_end.append(max(0, *late) if late else 0)
            if new_end == coll_end:
                return shifts, coll_end, n_pass
            coll_end = new_end
        raise InputError(f"inject: shifts did not settle after {max_passes} passes")

    def _rank_pass(self, r: int, seed_end: dict[int, int], seed_start: dict[int, int],
                   coll_end: list[int]) -> tuple[np.ndarray, np.ndarray]:
        start, end, kind, ptr, par, ready, pkind, order = self.lists[r]
        inst_of = self.node_instance[r]
        n = len(start)
        s_shift = [0] * n
        e_shift: list[int | None] = [0] * n

        def end_shift(p: int) -> int:
            value = e_shift[p]
            if value is None:  # a sync call: returns when the GPU work it waited for does
                new_start = start[p] + s_shift[p]
                gpu_end, own = new_start, 0
                for e in range(ptr[p], ptr[p + 1]):
                    if pkind[e] == EDGE_SYNC:
                        g = par[e]
                        gpu_end = max(gpu_end, end[g] + end_shift(g))
                        own = end[p] - max(start[p], end[g])
                value = max(new_start, gpu_end) + max(own, 0) - end[p]
                e_shift[p] = value
            return value

        # nothing moves before the first seed or the first collective whose end moved
        moved_from = [start[n] for n in (*seed_end, *seed_start)]
        moved_from += [start[node] for node, i in inst_of.items() if coll_end[i] > 0]
        if not moved_from:
            return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        first = bisect.bisect_left(self.sorted_starts[r], min(moved_from))
        for node in order[first:]:
            s = seed_start.get(node, 0)
            for e in range(ptr[node], ptr[node + 1]):
                if pkind[e] == EDGE_SYNC:
                    continue
                slack = start[node] - ready[e]
                moved = end_shift(par[e]) - (slack if slack > 0 else 0)
                if moved > s:
                    s = moved
            s_shift[node] = s
            inst = inst_of.get(node)
            if inst is not None:
                e_shift[node] = max(coll_end[inst], s - self.instances[inst]["wait"][r])
            elif kind[node] == KIND_SYNC and any(pkind[e] == EDGE_SYNC for e in range(ptr[node], ptr[node + 1])):
                e_shift[node] = None
            else:
                e_shift[node] = s + seed_end.get(node, 0)
        ends = np.array([end_shift(i) for i in range(n)], dtype=np.int64)
        return np.asarray(s_shift, dtype=np.int64), ends


def inject_delay(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], out_dir: str | os.PathLike[str],
                 *, rank: int, delay_us: float, iteration: int | None = None, kernel: str | None = None,
                 occurrence: int = 0, correlation: int | None = None, on: str = "launch",
                 **align_options: Any) -> InjectResult:
    """Write a copy of a trace set with ``delay_us`` inserted before one CPU launch.

    Parameters
    ----------
    paths : path or iterable of paths
        The trace files and/or folders of the job.
    out_dir : path
        Folder for the copy (not the folder of the inputs).
    rank : int
        The rank whose launch is delayed.
    delay_us : float
        The delay (µs), 0 to 20 ms.
    iteration : int or None, default None
        The ``iteration``-th ``ProfilerStep`` annotation of ``rank`` to look in (whole trace
        when None).
    kernel : str or None, default None
        Regular expression the launched GPU event's name must match (any when None).
    occurrence : int, default 0
        Which matching launch (0-based).
    correlation : int or None, default None
        The launch's correlation id, if given.
    on : {"launch", "kernel"}, default "launch"
        ``"kernel"``: the launched GPU event itself (kernel, copy) runs ``delay_us`` longer
        instead: a slow kernel rather than a late launch.
    **align_options
        Passed to :func:`evtsync.align_collectives`.

    Returns
    -------
    InjectResult
        The output folder, the file written per rank and a manifest of the launch chosen and how
        far events moved.

    Raises
    ------
    InputError
        An unknown ``on``, a delay out of range, a rank not in the set, an invalid ``kernel``
        pattern, no such step or launch, or ``out_dir`` holding the inputs.
    TraceError
        The traces cannot be read.
    """
    if on not in INJECT_TARGETS:
        raise InputError(f"inject: --on {on!r}: expected one of {', '.join(INJECT_TARGETS)}")
    if not 0 <= delay_us <= MAX_DELAY_US:
        raise InputError(f"inject: delay {delay_us} us is outside 0..{MAX_DELAY_US} us (0-20 ms)")
    paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    traces = load_traces(paths, jobs=1)
    if rank not in traces.rank_ids:
        raise InputError(f"inject: rank {rank} is not in the trace set (ranks {traces.rank_ids})")
    out = Path(out_dir)
    sources = {int(r): Path(p) for r, p in zip(traces.ranks["rank"], traces.ranks["path"], strict=True)}
    if any(p.resolve().parent in (out.resolve(), (out / TRACES_SUBDIR).resolve()) for p in sources.values()):
        raise InputError(f"inject: output folder {out} holds the input traces; choose another folder")
    alignment = align_collectives(traces, **align_options)
    vocab = Vocabulary()
    dags = build_dags(traces, traces.rank_ids, vocab=vocab)
    target = _find_target(traces, dags[rank], vocab, rank, iteration, kernel, occurrence, correlation)
    instances = _collective_instances(alignment.instances, traces, dags)
    delay_ns = int(round(delay_us * 1000))
    dag = dags[rank]
    pred = target.node - 1
    seed_end, seed_start = {}, {}
    if on == "kernel":
        seed_end[target.kernel_node] = delay_ns
    elif pred >= 0 and dag.lane[pred] == dag.lane[target.node] and dag.kind[pred] != KIND_GPU:
        seed_end[pred] = delay_ns
    else:
        seed_start[target.node] = delay_ns
    shifts, coll_end, passes = _Propagation(dags, instances).run(rank, seed_end, seed_start,
                                                                 max_passes=len(instances) + 3)
    files = {}
    for r, src_path in sources.items():
        dest = out / TRACES_SUBDIR / src_path.name
        _rewrite(src_path, dest, dags[r], *shifts[r], int(traces.ranks.set_index("rank").loc[r, "base_time_ns"]))
        files[r] = dest
    k_shift = int(shifts[rank][0][target.kernel_node])
    kernel_end = int(dag.end[target.kernel_node])
    following = sorted((int(dag.start[inst["nodes"][rank]]), inst["pg"], inst["index"]) for inst in instances
                       if rank in inst["nodes"] and dag.start[inst["nodes"][rank]] >= kernel_end)
    moved = [{"pg": inst["pg"], "index": inst["index"], "end_shift_us": e / 1000.0}
             for inst, e in zip(instances, coll_end, strict=True) if e > 0]
    manifest = {
        "rank": rank, "iteration": iteration, "step": target.step, "delay_us": delay_us, "on": on,
        "launch": {"name": target.launch_name, "correlation": target.correlation,
                   "ts_ns": int(dag.start[target.node])},
        "kernel": {"name": target.kernel_name, "start_shift_us": k_shift / 1000.0,
                   "lead_us": (int(dag.start[target.kernel_node]) - int(dag.end[target.node])) / 1000.0},
        "next_collective": {"pg": following[0][1], "index": following[0][2]} if following else None,
        "first_collective_moved": moved[0] if moved else None,
        "collectives_moved": len(moved), "passes": passes,
        "sources": {str(r): str(p) for r, p in sources.items()},
    }
    write_bytes_atomic(out / MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))
    log.info("injected %.0f us before %s (correlation %d) on rank %d: kernel %s starts %.0f us later, "
             "%d collective(s) end later", delay_us, target.launch_name, target.correlation, rank,
             target.kernel_name[:60], k_shift / 1000.0, len(moved))
    return InjectResult(out, files, manifest)


def _collective_instances(inst: Any, traces: TraceSet, dags: dict[int, RankDAG]) -> list[dict[str, Any]]:
    from evtsync.critpath.attribution import instance_nodes

    nodes = instance_nodes(traces, inst, dags)
    frame = inst.assign(node=nodes)
    out = []
    for (pg, index), grp in frame.groupby(["pg", "index"], sort=True):
        grp = grp[grp["node"] >= 0]
        if grp.empty:
            continue
        dmin = int(grp["dur_ns"].min())
        out.append({"pg": pg, "index": int(index),
                    "nodes": {int(r): int(n) for r, n in zip(grp["rank"], grp["node"], strict=True)},
                    "wait": {int(r): int(d) - dmin for r, d in zip(grp["rank"], grp["dur_ns"], strict=True)}})
    return out


def _ts_ns(value: Any, base_ns: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        return value * 1000 + base_ns
    return int(np.rint(value * 1000.0)) + base_ns


def _shifted(value: int | float, shift_ns: int) -> int | float:
    if shift_ns == 0:
        return value
    if isinstance(value, int) and shift_ns % 1000 == 0:
        return value + shift_ns // 1000
    return value + shift_ns / 1000.0


class _LaneIndex:
    """Node lookups by lane and time for rewriting raw events."""

    def __init__(self, dag: RankDAG, s_shift: np.ndarray, e_shift: np.ndarray) -> None:
        self.dag = dag
        self.s_shift, self.e_shift = s_shift, e_shift
        self.lane_of = {key: i for i, key in enumerate(dag.lanes)}
        order = np.lexsort((dag.start, dag.lane))
        self.by_lane_start = order
        self.lane_sorted = dag.lane[order]
        self.start_sorted = dag.start[order]
        order_e = np.lexsort((dag.end, dag.lane))
        self.by_lane_end = order_e
        self.lane_sorted_e = dag.lane[order_e]
        self.end_sorted = dag.end[order_e]

    def lane(self, kind: str, a: Any, b: Any) -> int:
        try:
            return self.lane_of.get((kind, int(a), int(b)), -1)
        except (TypeError, ValueError):
            return -1

    def start_shift(self, lane: int, t: int) -> int:
        lo, hi = np.searchsorted(self.lane_sorted, [lane, lane + 1])
        if lo == hi:
            return 0
        k = lo + np.searchsorted(self.start_sorted[lo:hi], t, side="left")
        if k >= hi or self.start_sorted[k] != t:
            k = max(lo, k - 1)  # inside a node: move with it
        return int(self.s_shift[self.by_lane_start[k]])

    def end_shift(self, lane: int, t: int) -> int:
        lo, hi = np.searchsorted(self.lane_sorted_e, [lane, lane + 1])
        if lo == hi:
            return 0
        k = lo + np.searchsorted(self.end_sorted[lo:hi], t, side="right") - 1
        if k < lo:
            return self.start_shift(lane, t)
        return int(self.e_shift[self.by_lane_end[k]])


def _rewrite(src: Path, dest: Path, dag: RankDAG, s_shift: np.ndarray, e_shift: np.ndarray,
             base_ns: int) -> None:
    raw = src.read_bytes()
    is_gz = raw[:2] == b"\x1f\x8b"
    doc = orjson.loads(gzip.decompress(raw) if is_gz else raw)
    index = _LaneIndex(dag, s_shift, e_shift)
    gpu_corr: dict[int, int] = {}
    gpu = (dag.source == SRC_KERNELS)
    events = doc.get("traceEvents", [])
    cpu_corr: dict[int, tuple[int, int]] = {}
    # first pass: GPU events and CPU events (by lane and time)
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = ev.get("cat")
        ts, dur = ev.get("ts"), ev.get("dur")
        t0 = _ts_ns(ts, base_ns)
        if t0 is None or not isinstance(ts, int | float) or not isinstance(dur, int | float):
            continue
        t1 = t0 + (_ts_ns(dur, 0) or 0)
        args = raw_args if isinstance(raw_args := ev.get("args"), dict) else {}
        if cat in GPU_CATEGORIES:
            lane = index.lane("stream", args.get("device", ev.get("pid")), args.get("stream", ev.get("tid")))
            if lane < 0:
                continue
            s0, s1 = index.start_shift(lane, t0), index.end_shift(lane, t1)
            if isinstance(args.get("correlation"), int):
                gpu_corr[args["correlation"]] = s0
        elif cat in CPU_CATEGORIES or cat in RUNTIME_CATEGORIES:
            if cat == "gpu_user_annotation":
                lane = index.lane("stream", ev.get("pid"), ev.get("tid"))
            else:
                lane = index.lane("thread", ev.get("pid"), ev.get("tid"))
            if lane < 0:
                continue
            s0 = index.start_shift(lane, t0)
            s1 = index.end_shift(lane, t1) if t1 > t0 else s0
            if cat in RUNTIME_CATEGORIES and isinstance(args.get("correlation"), int):
                cpu_corr[args["correlation"]] = (s0, s1)
        else:
            continue
        ev["ts"] = _shifted(ts, s0)
        ev["dur"] = _shifted(dur, s1 - s0)
    # second pass: cuda_sync events and flow arrows follow the event they belong to
    for ev in events:
        if not isinstance(ev, dict):
            continue
        ph, cat = ev.get("ph"), ev.get("cat")
        args = raw_args if isinstance(raw_args := ev.get("args"), dict) else {}
        if ph == "X" and cat == "cuda_sync" and isinstance(args.get("correlation"), int):
            s0, s1 = cpu_corr.get(args["correlation"], (0, 0))
            if isinstance(ev.get("ts"), int | float) and isinstance(ev.get("dur"), int | float):
                ev["ts"] = _shifted(ev["ts"], s0)
                ev["dur"] = _shifted(ev["dur"], s1 - s0)
        elif ph in ("s", "f") and isinstance(ev.get("id"), int) and isinstance(ev.get("ts"), int | float):
            on_cpu = index.lane("thread", ev.get("pid"), ev.get("tid")) >= 0
            shift = cpu_corr.get(ev["id"], (0, 0))[0] if on_cpu else gpu_corr.get(ev["id"], 0)
            ev["ts"] = _shifted(ev["ts"], shift)
    del gpu
    data = orjson.dumps(doc)
    write_bytes_atomic(dest, gzip.compress(data, compresslevel=6) if is_gz else data)


SWEEP_COLUMNS = ["delay_ms", "lead_us", "kernel_shift_us", "collectives_moved", "pg", "index", "tau_max_us",
                 "straggler_rank", "status", "path_kind", "cause_name", "cause_category", "cause_extra_us",
                 "expected_extra_us", "extra_minus_delay_us", "cause_moved", "within_lead", "explained_share"]
#: Slack of the sweep's "within the launch lead" check: 2% of the delay plus 50 µs (the
#: fastest rank's own lead, against which the delay is netted, differs by that much).
SWEEP_SLACK = (0.02, 50.0)


def inject_sweep(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], out_dir: str | os.PathLike[str],
                 *, delays_ms: Iterable[float], rank: int, iteration: int | None = None, kernel: str | None = None,
                 occurrence: int = 0, correlation: int | None = None, on: str = "launch",
                 **align_options: Any) -> Any:
    """Validation (b) of methodology §4 as one call: inject each delay (ms) into its own copy
    (``OUT_DIR/delay-<D>ms/``), attribute it, and return one row per delay for the
    collective that follows the delayed kernel on ``rank`` (straggler, cause, its extra µs
    against the delay and against what reached the GPU, ``expected_extra_us`` = the kernel's
    shift = delay − the launch's lead over its kernel when positive). ``cause_moved``: the
    straggler is ``rank`` and its principal cause is on the CPU; then ``within_lead`` checks
    delay − lead ≤ cause extra ≤ delay (with :data:`SWEEP_SLACK`)."""
    import pandas as pd

    from evtsync.critpath.attribution import attribute

    paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    rows = []
    for delay in delays_ms:
        sub = Path(out_dir) / f"delay-{delay:g}ms"
        res = inject_delay(paths, sub, rank=rank, delay_us=float(delay) * 1000.0, iteration=iteration, kernel=kernel,
                           occurrence=occurrence, correlation=correlation, on=on, **align_options)
        m = res.manifest
        target = m["next_collective"]
        row: dict[str, Any] = {c: None for c in SWEEP_COLUMNS}
        lead = float(m["kernel"]["lead_us"])
        row.update(delay_ms=float(delay), lead_us=lead, kernel_shift_us=m["kernel"]["start_shift_us"],
                   collectives_moved=m["collectives_moved"], expected_extra_us=m["kernel"]["start_shift_us"])
        if target is not None:
            table = attribute(sorted(str(p) for p in res.files.values()), keep_paths=False,
                              **align_options).collectives.set_index(["pg", "index"])
            hit = table.loc[(target["pg"], target["index"])]
            row.update(pg=target["pg"], index=target["index"], tau_max_us=float(hit["tau_max_us"]),
                       straggler_rank=int(hit["straggler_rank"]), status=hit["status"], path_kind=hit["path_kind"],
                       cause_name=hit["cause_name"], cause_category=hit["cause_category"],
                       cause_extra_us=hit["cause_extra_us"], explained_share=hit["explained_share"])
            row["cause_moved"] = bool(int(hit["straggler_rank"]) == rank and hit["path_kind"] not in (None, "gpu_only"))
            if row["cause_moved"] and not pd.isna(hit["cause_extra_us"]):
                delay_us = float(delay) * 1000.0
                slack = SWEEP_SLACK[0] * delay_us + SWEEP_SLACK[1]
                row["extra_minus_delay_us"] = float(hit["cause_extra_us"]) - delay_us
                row["within_lead"] = bool(-lead - slack <= row["extra_minus_delay_us"] <= slack)
        rows.append(row)
    return pd.DataFrame(rows, columns=SWEEP_COLUMNS)
