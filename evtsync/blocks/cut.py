"""Compute blocks between the collectives of one process group (methodology §5), and their z-scores.

For a chosen PG and each member rank r, block i is the GPU work between two consecutive
collectives of that PG: every kernel that **starts** in the window from the end of
collective i to the start of collective i+1 on rank r. Counted are GPU kernels (category
``kernel``) that are not communication kernels (NCCL, DeepEP, ...); copies and memsets are not compute, and the NCCL
kernels of *other* PGs are left out because their duration includes waiting for the ranks of
that other group, which is not compute noise of this one. All streams are counted, so a
block also holds compute on side streams. Kernels that start while a collective of the PG
is running belong to no block (counted and logged).

Block i delays collective i+1, so it takes that collective's iteration and position:

- iterations come from the ``ProfilerStep#N`` annotations of the PG's lowest member rank
  (a collective belongs to the step whose CPU range holds its launch); instance = N;
- without them, from the repetition of the sequence (collective type, message size, kernel
  signature of the block before it): the smallest period P with at least two repetitions;
  instance = i // P, position = i mod P, phase counted from the first collective in the
  trace. Without a period the whole trace is one iteration.

Block identity c = (PG, position, kernel signature); the signature is a hash of the
normalised kernel names in start order on each stream, the per-stream sequences combined
independently of stream ids and of how concurrent streams interleave. Every rank of the PG
must show the same signature for the same block, or the block is dropped.

Block time per rank (``time``):

- ``busy`` (default): GPU busy time, the length of the union of the block's kernel
  intervals (overlapping kernels on several streams counted once);
- ``span``: from the first kernel's start to the last kernel's end (idle gaps included);
- ``window``: from the end of collective i to the start of collective i+1 (adds launch
  latency and host gaps around the kernels).

Samples: the PG's member ranks, sorted, at positions p = 0..n-1 (the group-local rank); with
n = k·m, rank position p goes to sample p mod k (even/odd for n = 8, m = 4). With n = k·m + r
(0 < r < m, e.g. 6 ranks and m = 4) block j draws its k samples of m ranks without replacement:
position p moves to q = (p + j·r) mod n, q < k·m goes to sample q mod k and the r others sit out
that block (:func:`sample_of`), so every rank takes part in turn and m stays the requested size. The pooled
z-scores are computed in :mod:`evtsync.blocks.zscores`. Nothing is dropped silently: the result
lists every block sample left out and why.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import DEFAULT_M
from evtsync.core.display import TablesDisplay
from evtsync.core.errors import InputError
from evtsync.core.vocabulary import TIME_DEFINITIONS
from evtsync.sync.collectives import Alignment, align_collectives
from evtsync.trace.kernels import (
    KernelClassifier,
    canonical_precision,
    name_precisions,
    normalise_kernel_name,
    precision_from_dtype,
)
from evtsync.trace.schema import PROFILER_STEP_RE
from evtsync.trace.traceset import TraceSet

if TYPE_CHECKING:
    from evtsync.core.parallel import Backend

log = logging.getLogger(__name__)

_TP_RE = re.compile(r"(?<![a-z])(?:tp|tensor)", re.IGNORECASE)

TIME_COLUMNS = ["pg", "index", "window", "rank", "group_rank", "sample", "position", "instance", "block",
                "signature", "n_kernels", "n_gemm_kernels", "gemm_us", "busy_us", "span_us",
                "window_us", "gpu"]
DROP_COLUMNS = ["pg", "index", "sample", "block", "instance", "reason", "detail"]

# Drop reasons (one row per block sample in ``BlockSet.dropped``).
DROP_INVALID = "collective flagged by alignment"
DROP_OVERLAP = "collectives overlap"
DROP_OUTSIDE = "outside ProfilerStep ranges"
DROP_WINDOWS = "spans two profiling windows"
DROP_INCOMPLETE = "incomplete across ranks"
DROP_SIGNATURE = "signature differs across ranks"
DROP_EMPTY = "no compute kernels"
DROP_NO_GEMM = "no GEMM"
DROP_ZERO_SD = "zero pooled sd"


@dataclass(repr=False)
class BlockSet(TablesDisplay):
    """Per-rank block times of one or more PGs, and the block samples left out.

    ``times``: one row per (pg, index, rank) of every usable block (see ``TIME_COLUMNS``),
    with ``precision`` per block identity. ``dropped``: one row per (pg, index, sample) left
    out, with its reason. ``groups``: the alignment rows of the PGs used; ``iterations``:
    how iterations were found per PG; ``unassigned_kernels``: compute kernels in no block.
    """

    times: pd.DataFrame
    dropped: pd.DataFrame
    groups: pd.DataFrame
    m: int
    iterations: dict[str, str] = field(default_factory=dict)
    unassigned_kernels: dict[str, int] = field(default_factory=dict)


# --- choosing the process group ----------------------------------------------------------

def select_groups(groups: pd.DataFrame, pg: str | None, m: int) -> pd.DataFrame:
    """The alignment rows of the PG(s) to cut blocks by.

    ``pg`` matches a PG label, ``pg_name`` or ``pg_desc`` exactly (all matches are used: every
    TP group of a job when they share a description). Without ``pg``: the PGs whose
    description or name says tp/tensor; else, among the smallest groups with at least ``m``
    ranks, the one with the most collectives, together with the other groups of that size,
    description and number of collectives (the other replicas of the same group).
    """
    if groups.empty:
        raise InputError("no process group with NCCL collectives in the traces: no blocks to cut")
    if pg is not None:
        hit = groups[(groups["pg"].astype(str) == pg) | (groups["pg_name"].astype(str) == pg)
                     | (groups["pg_desc"].astype(str) == pg)]
        if hit.empty:
            raise InputError(f"--pg {pg}: no such process group; known: "
                             + ", ".join(f"{g.pg} ({g.pg_desc}, ranks {g.pg_ranks})"
                                         for g in groups.itertuples()))
        chosen = hit
    else:
        text = groups["pg_desc"].astype(str) + " " + groups["pg_name"].astype(str)
        tp = groups[text.str.contains(_TP_RE)]
        if len(tp):
            chosen = tp[tp["n_ranks"] == tp["n_ranks"].min()]
        else:
            usable = groups[groups["n_ranks"] >= m]
            if usable.empty:
                raise InputError(f"no process group has at least m={m} ranks (largest: "
                                 f"{int(groups['n_ranks'].max())}); lower --m")
            small = usable[usable["n_ranks"] == usable["n_ranks"].min()]
            best = small.sort_values(["n_collectives", "pg"], ascending=[False, True]).iloc[0]
            chosen = small[(small["n_collectives"] == best["n_collectives"])
                           & (small["pg_desc"].astype(str) == str(best["pg_desc"]))]
        log.info("process group(s) chosen: %s", ", ".join(chosen["pg"].astype(str)))
    for g in chosen.itertuples():
        if g.n_ranks < m:
            raise InputError(f"PG {g.pg} has {g.n_ranks} ranks, fewer than the sample size m={m}")
        if g.n_ranks % m:
            log.warning("PG %s has %d ranks, not a multiple of the sample size m=%d: each block gives %d "
                        "sample(s) of m=%d ranks drawn without replacement, rotating which %d rank(s) sit out "
                        "(docs/blocks.md)", g.pg, g.n_ranks, m, g.n_ranks // m, m, g.n_ranks % m)
    return chosen.reset_index(drop=True)


def _ranks(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in str(text).split(",") if x != "")


# --- iterations --------------------------------------------------------------------------

def _step_ranges(traces: TraceSet, rank: int) -> pd.DataFrame | None:
    """The CPU-side ``ProfilerStep#N`` ranges of one rank (``ts_ns, end_ns, step``, in time
    order); None without steps."""
    ops = traces.cpu_ops
    # the CPU-side step only: real traces also hold the step as a gpu_user_annotation on GPU
    # time, which lags the CPU and would put launches into the previous step
    ops = ops[(ops["rank"] == rank) & (ops["cat"].astype(str) != "gpu_user_annotation")]
    names = ops["name"].astype(str)
    steps = names.str.extract(PROFILER_STEP_RE, expand=False)
    found = ops[steps.notna()]
    if found.empty:
        return None
    found = found.assign(step=steps[steps.notna()].astype(np.int64)).sort_values("ts_ns")
    return found[["ts_ns", "end_ns", "step"]].reset_index(drop=True)


def _launch_times(traces: TraceSet, rank: int, correlations: np.ndarray) -> pd.Series:
    """CPU launch time (ns) of the kernels with these correlation ids on one rank."""
    runtime = traces.runtime
    launches = runtime[(runtime["rank"] == rank) & (runtime["correlation"] >= 0)]
    launch_ts = launches.drop_duplicates("correlation").set_index("correlation")["ts_ns"]
    return launch_ts[launch_ts.index.isin(correlations)]


def _steps_of(ranges: pd.DataFrame, launch_ts: pd.Series, rank: int, inst: pd.DataFrame) -> np.ndarray:
    """Step number of each collective of ``inst`` (rows of one rank, by index), -1 outside
    every step: the step whose CPU range holds its launch (its GPU start without one)."""
    corr = inst["correlation"].to_numpy()
    t = inst["ts_ns"].to_numpy().copy()
    known = np.isin(corr, launch_ts.index.to_numpy())
    t[known] = launch_ts.loc[corr[known]].to_numpy()
    if (~known).any():
        log.info("rank %d: %d collective(s) without a launch event placed in steps by GPU start time",
                 rank, int((~known).sum()))
    starts, ends = ranges["ts_ns"].to_numpy(), ranges["end_ns"].to_numpy()
    where = np.searchsorted(starts, t, side="right") - 1
    inside = (where >= 0) & (t < ends[np.maximum(where, 0)])
    return np.where(inside, ranges["step"].to_numpy()[np.maximum(where, 0)], -1)


def _smallest_period(seq: Sequence[Any]) -> int | None:
    """Smallest P with seq[i] == seq[i + P] for all i and at least two repetitions."""
    n = len(seq)
    for p in range(1, n // 2 + 1):
        if all(seq[i] == seq[i + p] for i in range(n - p)):
            return p
    return None


# --- per-rank block tables ---------------------------------------------------------------

def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _name_hashes(names: pd.Series) -> np.ndarray:
    cat = names.astype("category")
    table = np.array([int.from_bytes(hashlib.blake2b(normalise_kernel_name(str(c)).encode(),
                                                     digest_size=8).digest(), "little")
                      for c in cat.cat.categories] + [0], dtype=np.uint64)
    codes = cat.cat.codes.to_numpy()
    return table[np.where(codes >= 0, codes, len(table) - 1)]


def _covered_ns(group: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per interval, the time it adds to the union of the intervals before it in its group.

    Rows are sorted by (group, ts). Summed per group this is the length of the union of the
    group's intervals (overlaps counted once). Integer arithmetic throughout: nanosecond
    timestamps near 1.7e18 do not survive a trip through float64.
    """
    if len(ts) == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.r_[True, group[1:] != group[:-1]]
    gid = np.cumsum(first) - 1
    base = ts[first][gid]
    rel_end = end - base
    big = int(rel_end.max()) + 1
    running = np.maximum.accumulate(rel_end + gid * big) - gid * big
    prev_end = np.r_[np.int64(0), running[:-1]] + base
    start = np.where(first, ts, np.maximum(ts, prev_end))
    return np.maximum(end - start, 0)


def _rank_blocks(k: pd.DataFrame, ts: np.ndarray, end: np.ndarray
                 ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    """Assign one rank's compute kernels to blocks and aggregate them per block.

    ``ts``/``end``: start and end of the PG's collectives on this rank, by index. Returns
    one row per non-empty block (column ``index`` = i, the collective the block follows),
    the GEMM time per block and precision (``index, precision, dur_ns``) and counts of
    kernels in no block.
    """
    n = len(ts)
    kts = k["ts_ns"].to_numpy()
    run_end = np.maximum.accumulate(end)
    idx = np.searchsorted(run_end, kts, side="right") - 1
    ok = (idx >= 0) & (idx < n - 1)
    safe = np.clip(idx, 0, max(n - 2, 0))
    in_window = ok & (kts >= end[safe]) & (kts < ts[np.minimum(safe + 1, n - 1)])
    counts = {"before the first collective": int((idx < 0).sum()),
              "after the last collective": int((idx >= n - 1).sum()),
              "during a collective": int((ok & ~in_window).sum())}
    sel = k[in_window].assign(index=idx[in_window])
    if sel.empty:
        return (pd.DataFrame(columns=["index", "n_kernels", "n_gemm_kernels", "gemm_us", "busy_us",
                                      "span_us", "signature"]),
                pd.DataFrame(columns=["index", "precision", "dur_ns"]), counts)
    sel = sel.sort_values(["index", "ts_ns", "end_ns"], kind="stable")
    g = sel.groupby("index", sort=True)
    covered = _covered_ns(sel["index"].to_numpy(), sel["ts_ns"].to_numpy(), sel["end_ns"].to_numpy())
    # signature: ordered per stream, streams combined by a commutative sum
    pos = sel.groupby(["index", "stream"], sort=False).cumcount().to_numpy().astype(np.uint64)
    elem = _mix64(sel["name_hash"].to_numpy() + _mix64(pos + np.uint64(1)))
    skey = sel.groupby(["index", "stream"], sort=False).ngroup().to_numpy()
    stream_hash = np.zeros(skey.max() + 1, dtype=np.uint64)
    np.add.at(stream_hash, skey, elem)
    stream_index = sel.groupby(["index", "stream"], sort=False)["index"].first().to_numpy()
    blocks = np.unique(sel["index"].to_numpy())
    block_hash = np.zeros(len(blocks), dtype=np.uint64)
    np.add.at(block_hash, np.searchsorted(blocks, stream_index), _mix64(stream_hash))
    agg = pd.DataFrame({
        "index": blocks,
        "n_kernels": g.size().to_numpy(),
        "n_gemm_kernels": g["is_gemm"].sum().to_numpy().astype(np.int64),
        "gemm_us": (sel["dur_ns"] * sel["is_gemm"]).groupby(sel["index"]).sum().to_numpy() / 1000.0,
        "busy_us": pd.Series(covered, index=sel.index).groupby(sel["index"]).sum().to_numpy() / 1000.0,
        "span_us": (g["end_ns"].max() - g["ts_ns"].min()).to_numpy() / 1000.0,
    })
    agg["signature"] = [format(int(h), "016x")[:12]
                        for h in _mix64(block_hash + agg["n_kernels"].to_numpy().astype(np.uint64))]
    gemm = sel[sel["is_gemm"] & sel["precision"].notna()]
    prec = gemm.groupby(["index", "precision"], sort=True)["dur_ns"].sum().reset_index()
    return agg, prec, counts


def _check_inputs(traces: TraceSet, m: Any) -> None:
    if not isinstance(m, int | np.integer) or m < 2:
        raise InputError(f"--m {m}: the sample size must be an integer >= 2")
    traces.require(("all", "blocks"), "cutting compute blocks")


@dataclass
class GroupBlocksTask:
    """What the blocks of one PG need, cut out of the trace set: the unit of parallel work.

    Only the PG's own rows travel (its aligned collectives, its member ranks' compute
    kernels, the step ranges and launch times of its first present rank), so a task is
    small next to the trace set and can run in another process or on a Dask worker.
    """

    pg: str
    members: tuple[int, ...]
    present: tuple[int, ...]
    n_collectives: int
    m: int
    instances: pd.DataFrame
    invalid: frozenset[int]
    compute: pd.DataFrame
    step_ranges: pd.DataFrame | None
    launch_ts: pd.Series
    gpu_of: dict[int, str]
    user_precision: str | None


@dataclass
class GroupBlocks:
    """The blocks of one PG: per-rank rows of the usable blocks, drop rows, how iterations
    were found, and the number of compute kernels in no block."""

    pg: str
    times: pd.DataFrame
    drops: list[list[Any]]
    iterations: str
    unassigned: int


def plan_blocks(traces: TraceSet, alignment: Alignment | None = None, *, pg: str | None = None,
                m: int = DEFAULT_M, gemm_patterns: Iterable[str] = (), precision: str | None = None,
                **align_options: Any) -> tuple[pd.DataFrame, list[GroupBlocksTask]]:
    """The chosen PG rows and one :class:`GroupBlocksTask` per PG (see :func:`cut_blocks`)."""
    _check_inputs(traces, m)
    user_precision = canonical_precision(precision) if precision else None
    classifier = KernelClassifier(tuple(gemm_patterns))
    if alignment is None:
        alignment = align_collectives(traces, **align_options)
    chosen = select_groups(alignment.groups, pg, int(m))
    kernels = traces.kernels
    comm = kernels["is_comm" if "is_comm" in kernels.columns else "is_nccl"]  # DeepEP etc. are not compute
    compute = kernels[(kernels["cat"].astype(str) == "kernel") & ~comm]
    is_gemm = classifier.gemm_mask(compute["name"])
    compute = compute[["rank", "name", "stream", "ts_ns", "dur_ns", "end_ns"]].assign(
        is_gemm=is_gemm, name_hash=_name_hashes(compute["name"]),
        precision=np.where(is_gemm, name_precisions(compute["name"]), np.array(None, dtype=object)))
    gpu_of = dict(zip(traces.ranks["rank"].astype(int), traces.ranks["gpu"].astype(str), strict=True))
    instances = alignment.instances
    tasks = []
    for group in chosen.itertuples():
        label = str(group.pg)
        members = tuple(sorted(_ranks(group.pg_ranks)))
        present = set(_ranks(group.present_ranks))
        here = tuple(r for r in members if r in present)
        inst = instances[instances["pg"] == label].sort_values(["rank", "index"])
        first = here[0]
        tasks.append(GroupBlocksTask(
            pg=label, members=members, present=here, n_collectives=int(group.n_collectives), m=int(m),
            instances=inst, invalid=frozenset(i for (p, i) in alignment.invalid if p == label),
            compute=compute[compute["rank"].isin(here)], step_ranges=_step_ranges(traces, first),
            launch_ts=_launch_times(traces, first, inst.loc[inst["rank"] == first, "correlation"].to_numpy()),
            gpu_of={r: gpu_of[r] for r in here if r in gpu_of}, user_precision=user_precision))
    return chosen, tasks


def cut_blocks(traces: TraceSet, alignment: Alignment | None = None, *, pg: str | None = None,
               m: int = DEFAULT_M, gemm_patterns: Iterable[str] = (), keep_all: bool = False,
               precision: str | None = None, backend: Backend | None = None,
               **align_options: Any) -> BlockSet:
    """Cut every member rank's timeline into blocks between the collectives of the chosen PG(s).

    ``alignment`` defaults to :func:`evtsync.align_collectives` with ``align_options``;
    ``gemm_patterns`` extend the GEMM name patterns; ``keep_all`` keeps blocks without GEMMs;
    ``precision`` overrides the precision read from kernel names / dtypes. With a
    ``backend`` (e.g. a Dask cluster from :mod:`evtsync.core.parallel`) each PG is aligned and
    cut as a task of its own; the result is the same as without one.
    """
    traces.require_timeline("compute blocks")
    _check_inputs(traces, m)  # before aligning: a bad --m is the error to report, not alignment's
    if alignment is None:
        alignment = align_collectives(traces, backend=backend, **align_options)
    chosen, tasks = plan_blocks(traces, alignment, pg=pg, m=m, gemm_patterns=gemm_patterns,
                                precision=precision)
    if backend is None or len(tasks) < 2:
        results = [blocks_of_group(task) for task in tasks]
    else:
        results = backend.map(blocks_of_group, tasks, "blocks per process group")
    times = (pd.concat([r.times for r in results], ignore_index=True) if results
             else pd.DataFrame(columns=TIME_COLUMNS))
    dropped = pd.DataFrame([row for r in results for row in r.drops], columns=DROP_COLUMNS)
    if not keep_all and len(times):
        block_gemm = times.groupby(["pg", "index", "sample"])["n_gemm_kernels"].transform("min")
        no_gemm = times[block_gemm == 0]
        for (pgl, index, sample), sub in no_gemm.groupby(["pg", "index", "sample"], sort=True):
            dropped.loc[len(dropped)] = [pgl, int(index), int(sample), sub["block"].iloc[0],
                                         int(sub["instance"].iloc[0]), DROP_NO_GEMM,
                                         f"{int(sub['n_kernels'].iloc[0])} kernels, none a GEMM"]
        times = times[block_gemm > 0].reset_index(drop=True)
    return BlockSet(times=times, dropped=dropped, groups=chosen, m=int(m),
                    iterations={r.pg: r.iterations for r in results},
                    unassigned_kernels={r.pg: r.unassigned for r in results})


def blocks_of_group(task: GroupBlocksTask) -> GroupBlocks:
    """Blocks of one PG (runs wherever the backend puts it)."""
    label, members, n, inst = task.pg, task.members, task.n_collectives, task.instances
    present = set(task.present)
    k = len(members) // task.m
    first = task.present[0]
    compute = task.compute
    per_rank, gemm_prec, lost = {}, [], 0
    for r in task.present:
        rows = inst[inst["rank"] == r]
        ts, end = rows["ts_ns"].to_numpy(), rows["end_ns"].to_numpy()
        agg, prec, counts = _rank_blocks(compute[compute["rank"] == r], ts, end)
        gemm_prec.append(prec.assign(rank=r))
        lost += sum(counts.values())
        if sum(counts.values()):
            log.debug("PG %s rank %d: compute kernels in no block: %s", label, r, counts)
        full = pd.DataFrame({"index": np.arange(max(n - 1, 0), dtype=np.int64)}).merge(agg, on="index", how="left")
        full["window_us"] = (ts[1:] - end[:-1]) / 1000.0 if n > 1 else np.empty(0)
        per_rank[r] = full
    # iterations: from ProfilerStep annotations, else from the repetition of the sequence
    rows0 = inst[inst["rank"] == first]
    steps = None if task.step_ranges is None else _steps_of(task.step_ranges, task.launch_ts, first, rows0)
    if steps is not None:
        source = f"ProfilerStep annotations of rank {first}"
        instance = steps
        position = np.zeros(n, dtype=np.int64)
        for s in np.unique(steps):
            where = np.flatnonzero(steps == s)
            position[where] = np.arange(len(where))
    else:
        sig0 = per_rank[first]["signature"].fillna("").tolist()
        seq = [(str(c), int(b), sig0[i - 1] if i else "")
               for i, (c, b) in enumerate(zip(rows0["collective"], rows0["msg_bytes"], strict=True))]
        period = _smallest_period(seq[1:]) if n > 2 else None
        if period is None:
            source = "one iteration (no ProfilerStep annotations, no repeating collective sequence)"
            instance, position = np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64)
        else:
            source = f"repetition of the collective sequence (period {period})"
            offs = np.arange(n) - 1
            instance, position = np.where(offs >= 0, offs // period, -1), np.where(offs >= 0, offs % period, -1)
    log.info("PG %s: iterations from %s", label, source)
    windows = rows0["window"].to_numpy() if "window" in rows0.columns else np.zeros(n, dtype=np.int64)
    times, drops = _judge_blocks(label, members, present, k, per_rank, instance, position,
                                 set(task.invalid), steps is not None, task.gpu_of, windows, m=task.m)
    times["precision"] = _precisions(times, pd.concat(gemm_prec, ignore_index=True), rows0,
                                     task.user_precision)
    if lost:
        log.info("PG %s: %d compute kernel(s) lie in no block (before the first / after the last "
                 "collective, or during a collective)", label, lost)
    return GroupBlocks(pg=label, times=times, drops=drops, iterations=source, unassigned=lost)


def _judge_blocks(label: str, members: tuple[int, ...], present: set[int], k: int,
                  per_rank: dict[int, pd.DataFrame], instance: np.ndarray, position: np.ndarray,
                  invalid: set[int], from_steps: bool, gpu_of: dict[int, str],
                  windows: np.ndarray | None = None, m: int | None = None) -> tuple[pd.DataFrame, list[list[Any]]]:
    """Keep or drop every block sample of one PG (vectorised over blocks).

    Whole blocks are dropped when a bracketing collective is flagged, the collectives
    overlap, lie in two profiling windows (``windows``: the window of each collective), the
    block lies outside the ProfilerSteps or no rank ran a kernel in it; a sample
    is dropped when one of its ranks has no trace or ran other kernels than the majority.
    """
    frame = pd.concat([f.assign(rank=r) for r, f in per_rank.items()], ignore_index=True)
    n_blocks = len(next(iter(per_rank.values())))
    samples = np.arange(k)
    idx = np.arange(n_blocks)
    inst_of, pos_of = instance[idx + 1].astype(np.int64), position[idx + 1].astype(np.int64)
    sig = frame.dropna(subset=["signature"])
    counts = sig.groupby(["index", "signature"]).size().rename("n").reset_index()
    counts = counts.sort_values(["index", "n", "signature"], ascending=[True, False, True])
    majority = pd.Series(None, index=idx, dtype=object)
    best = counts.drop_duplicates("index")
    majority[best["index"].to_numpy()] = best["signature"].to_numpy()
    block = pd.Series([f"{p}:{m}" if isinstance(m, str) else f"{p}:-" for p, m in zip(pos_of, majority, strict=True)],
                      index=idx)
    first = min(per_rank)
    window0 = per_rank[first]["window_us"].to_numpy()
    reason = np.full(n_blocks, None, dtype=object)
    detail = np.full(n_blocks, "", dtype=object)
    for i in sorted(invalid):
        for j in (i - 1, i):
            if 0 <= j < n_blocks and reason[j] is None:
                reason[j], detail[j] = DROP_INVALID, f"collective {i}"
    if windows is None:
        windows = np.zeros(n_blocks + 1, dtype=np.int64)
    block_window = windows[idx + 1].astype(np.int64)  # a block belongs to the collective it delays
    rules = ((windows[idx] != windows[idx + 1], DROP_WINDOWS,
              "collectives {i} and {n} lie in different profiling windows"),
             (window0 < 0, DROP_OVERLAP, "collective {n} starts before collective {i} ends"),
             ((inst_of < 0) & from_steps, DROP_OUTSIDE, "collective {n} launched outside every ProfilerStep"),
             (majority.isna().to_numpy(), DROP_EMPTY, "no compute kernel between the collectives on any rank"))
    for mask, why, text in rules:
        for j in np.flatnonzero(mask & (reason == None)).tolist():  # noqa: E711 - elementwise on objects
            reason[j], detail[j] = why, text.format(i=j, n=j + 1)
    drops: list[list[Any]] = [[label, int(j), int(s), block[j], int(inst_of[j]), reason[j], detail[j]]
                              for j in np.flatnonzero(reason != None) for s in samples]  # noqa: E711
    n_members = len(members)
    m = n_members // k if m is None else m
    position_of = {r: p for p, r in enumerate(members)}
    missing = [r for r in members if r not in present]
    ok_blocks = np.flatnonzero(reason == None)  # noqa: E711
    incomplete: set[tuple[int, int]] = set()
    if missing:
        miss_pos = np.array([position_of[r] for r in missing], dtype=np.int64)
        for j in ok_blocks.tolist():
            s_of = sample_of(miss_pos, j, n_members, m)
            for s in samples:
                gone = [r for r, sm in zip(missing, s_of.tolist(), strict=True) if sm == s]
                if gone:
                    incomplete.add((int(j), int(s)))
                    drops.append([label, int(j), int(s), block[j], int(inst_of[j]), DROP_INCOMPLETE,
                                  f"no trace for rank(s) {','.join(map(str, gone))}"])
    frame = frame[frame["index"].isin(ok_blocks)].copy()
    frame["sample"] = sample_of(frame["rank"].map(position_of).to_numpy(np.int64),
                                frame["index"].to_numpy(np.int64), n_members, m)
    frame = frame[frame["sample"].to_numpy() >= 0]  # sits out this block (n not a multiple of m)
    if incomplete:
        pairs = list(zip(frame["index"].tolist(), frame["sample"].tolist(), strict=True))
        frame = frame[[p not in incomplete for p in pairs]]
    frame["block"] = block[frame["index"].to_numpy()].to_numpy()
    frame["odd"] = frame["signature"].to_numpy() != majority[frame["index"].to_numpy()].to_numpy()
    frame["odd"] |= frame["signature"].isna().to_numpy()
    bad = frame.groupby(["index", "sample"])["odd"].transform("any")
    for (j, s), sub in frame[bad].groupby(["index", "sample"], sort=True):
        per = ", ".join(f"rank {r}: {0 if pd.isna(c) else int(c)}" for r, c in zip(sub["rank"], sub["n_kernels"],
                                                                                     strict=True))
        odd = ",".join(str(r) for r in sub.loc[sub["odd"], "rank"])
        drops.append([label, int(j), int(s), block[j], int(inst_of[j]), DROP_SIGNATURE,
                      f"rank(s) {odd} ran other kernels ({per} kernels)"])
    kept = frame[~bad].sort_values(["index", "rank"], kind="stable")
    kept_index = kept["index"].to_numpy(dtype=np.int64)
    group_rank = {r: p for p, r in enumerate(members)}
    times = pd.DataFrame({
        "pg": label, "index": kept["index"].astype(np.int64), "window": block_window[kept_index],
        "rank": kept["rank"].astype(np.int64),
        "group_rank": kept["rank"].map(group_rank).astype(np.int64), "sample": kept["sample"],
        "position": pos_of[kept_index], "instance": inst_of[kept_index],
        "block": kept["block"], "signature": kept["signature"].astype(str),
        "n_kernels": kept["n_kernels"].astype(np.int64), "n_gemm_kernels": kept["n_gemm_kernels"].astype(np.int64),
        "gemm_us": kept["gemm_us"].astype(float), "busy_us": kept["busy_us"].astype(float),
        "span_us": kept["span_us"].astype(float), "window_us": kept["window_us"].astype(float),
        "gpu": kept["rank"].map(lambda r: gpu_of.get(int(r), "unknown")),
    }, columns=TIME_COLUMNS).reset_index(drop=True)
    return times, drops


def block_sampling(groups: pd.DataFrame, m: int, workload: str | None = None) -> list[dict[str, Any]]:
    """How each chosen PG (``groups``: pg, n_ranks) was cut into samples of ``m`` ranks per block: the
    m used, samples per block, ranks sitting out each block and how (for the run's outputs)."""
    out = []
    for g in groups.itertuples():
        n = int(g.n_ranks)
        k, r = divmod(n, m)
        out.append({**({"workload": workload} if workload is not None else {}), "pg": str(g.pg), "n_ranks": n,
                     "m": int(m), "samples_per_block": k, "ranks_sitting_out_per_block": r,
                     "how": "position p to sample p mod k" if not r else
                            f"without replacement: {k} sample(s) of {m} per block, the {r} rank(s) left over rotating"})
    return out


def sample_of(position: np.ndarray, block: np.ndarray | int, n: int, m: int) -> np.ndarray:
    """The sample of each group-local rank ``position`` in block ``block`` for a group of ``n`` ranks
    cut into k = n // m samples of ``m`` ranks (-1: the rank sits out that block). With n = k·m it is
    p mod k; with n = k·m + r the positions rotate by r per block, q = (p + block·r) mod n, and
    q < k·m goes to sample q mod k: samples of exactly m ranks, drawn without replacement, every rank
    in turn (docs/blocks.md)."""
    position = np.asarray(position, dtype=np.int64)
    k = n // m
    r = n - k * m
    q = (position + np.asarray(block, dtype=np.int64) * r) % n if r else position
    return np.where(q < k * m, q % k, -1).astype(np.int64)


def _precisions(times: pd.DataFrame, gemm_prec: pd.DataFrame, rows0: pd.DataFrame,
                user: str | None) -> pd.Series:
    """Precision per block identity: the user's; else the precision with the most GEMM time
    over the identity's kernels (all ranks and instances); else the dtype of the collectives
    that close the identity's blocks; else ``unknown``."""
    if user or times.empty:
        return pd.Series(user or "unknown", index=times.index, dtype=object)
    block_of = times[["index", "rank", "block"]]
    g = gemm_prec.merge(block_of, on=["index", "rank"], how="inner")
    best: dict[str, str] = {}
    if len(g):
        sums = g.groupby(["block", "precision"])["dur_ns"].sum().reset_index()
        sums = sums.sort_values(["block", "dur_ns", "precision"], ascending=[True, False, True])
        best = dict(zip(sums.drop_duplicates("block")["block"], sums.drop_duplicates("block")["precision"],
                        strict=True))
    dtypes = rows0.set_index("index")["dtype"]
    for block, sub in times.groupby("block", sort=False):
        if block not in best:
            labels = {p for p in (precision_from_dtype(dtypes.get(i + 1)) for i in sub["index"].unique())
                      if p is not None}
            best[block] = labels.pop() if len(labels) == 1 else "unknown"
    return times["block"].map(best).astype(object)


# --- the z-score table -------------------------------------------------------------------

#: Folder names that say nothing about the workload; the folder above them names it.
GENERIC_FOLDERS = frozenset({"traces", "trace", "profile", "profiles", "profiler", "logs", "log",
                             "tb", "tensorboard", "kineto"})


def default_workload(traces: TraceSet) -> str:
    """Name of the folder that holds the trace files (the one above it when that folder is
    called ``traces``, ``profiler``, ``logs``…), or ``unknown`` when the files are spread out."""
    parents = {Path(str(p)).resolve().parent for p in traces.ranks["path"]}
    if len(parents) != 1:
        return "unknown"
    folder = next(iter(parents))
    if folder.name.lower() in GENERIC_FOLDERS and folder.parent.name:
        folder = folder.parent
    return folder.name or "unknown"


def compute_zscores(traces: TraceSet | str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
                    pg: str | None = None, m: int = DEFAULT_M, time: str = "busy",
                    workload: str | None = None, precision: str | None = None,
                    gemm_patterns: Iterable[str] = (), keep_all: bool = False,
                    alignment: Alignment | None = None, backend: Backend | None = None,
                    **align_options: Any) -> tuple[pd.DataFrame, BlockSet]:
    """The pooled z-score table and the :class:`BlockSet` it came from (with the drop list).

    Parameters
    ----------
    traces : TraceSet, path or iterable of paths
        A loaded :class:`~evtsync.trace.traceset.TraceSet`, or trace files and/or folders,
        read by :func:`evtsync.load_traces`.
    pg, m, time, workload, precision, gemm_patterns, keep_all, alignment, backend, **align_options
        As for :func:`zscore_table`.

    Returns
    -------
    tuple of (pandas.DataFrame, BlockSet)
        The z-score table of :func:`zscore_table` and the blocks with every dropped sample and
        its reason.

    Raises
    ------
    InputError, TraceError, AlignmentError
        As for :func:`zscore_table`.
    """
    from evtsync.blocks.zscores import ZSCORE_COLUMNS, pooled_zscores
    from evtsync.trace.traceset import load_traces

    if time not in TIME_DEFINITIONS:
        raise InputError(f"--time {time!r}: expected one of {', '.join(TIME_DEFINITIONS)}")
    if not isinstance(traces, TraceSet):
        traces = load_traces(traces, scope="blocks")  # the rows blocks read, nothing more
    blocks = cut_blocks(traces, alignment, pg=pg, m=m, gemm_patterns=gemm_patterns,
                        keep_all=keep_all, precision=precision, backend=backend, **align_options)
    table, zero_sd = pooled_zscores(blocks.times, m=blocks.m, value=f"{time}_us")
    if len(zero_sd):
        blocks.dropped = pd.concat([blocks.dropped, zero_sd.assign(reason=DROP_ZERO_SD)[DROP_COLUMNS]],
                                   ignore_index=True)
    table["workload"] = workload or default_workload(traces)
    table = table[ZSCORE_COLUMNS]
    _log_drops(blocks, len(table))
    return table, blocks


def zscore_table(traces: TraceSet | str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
                 pg: str | None = None, m: int = DEFAULT_M, time: str = "busy",
                 workload: str | None = None, precision: str | None = None,
                 gemm_patterns: Iterable[str] = (), keep_all: bool = False,
                 alignment: Alignment | None = None, backend: Backend | None = None,
                 **align_options: Any) -> pd.DataFrame:
    """Pooled z-scores of the block maxima (docs/methodology.md), one row per block instance and sample.

    Dropped block samples are logged with their reasons.

    Parameters
    ----------
    traces : TraceSet, path or iterable of paths
        A loaded :class:`~evtsync.trace.traceset.TraceSet`, or trace files and/or folders,
        read by :func:`evtsync.load_traces`.
    pg : str or None, default None
        PG label, name or description (default: the TP group, see :func:`select_groups`).
    m : int, default 4
        Sample size: the number of ranks whose blocks give one maximum (an integer >= 2
        dividing the PG's size).
    time : {"busy", "span", "window"}, default "busy"
        Which duration of a block is used (module docstring).
    workload : str or None, default None
        Label of the workload (default: the traces' folder name).
    precision : str or None, default None
        Override of the precision read from the GEMM kernels.
    gemm_patterns : iterable of str, default ()
        Extra regular expressions that name GEMM kernels.
    keep_all : bool, default False
        Keep blocks without GEMMs.
    alignment : Alignment or None, default None
        A ready alignment (computed here when None).
    backend : Backend or None, default None
        Run each PG's blocks as a task there (:mod:`evtsync.core.parallel`).
    **align_options
        Passed to :func:`evtsync.align_collectives` when ``alignment`` is None.

    Returns
    -------
    pandas.DataFrame
        One row per block instance and sample: the z-score ``z`` with its workload, gpu,
        precision, PG and block identity.

    Raises
    ------
    InputError
        No process group with NCCL collectives, an unknown ``pg``, a PG whose size is not a
        multiple of ``m``, ``m`` < 2, or an unknown ``time``.
    TraceError, AlignmentError
        As for :func:`evtsync.load_traces` and :func:`evtsync.align_collectives`.
    """
    table, _ = compute_zscores(traces, pg=pg, m=m, time=time, workload=workload, precision=precision,
                               gemm_patterns=gemm_patterns, keep_all=keep_all, alignment=alignment,
                               backend=backend, **align_options)
    return table


def drop_summary(blocks: BlockSet) -> pd.DataFrame:
    """Counts of dropped block samples per PG and reason (``pg, reason, count``)."""
    if blocks.dropped.empty:
        return pd.DataFrame(columns=["pg", "reason", "count"])
    return (blocks.dropped.groupby(["pg", "reason"], sort=True).size().rename("count").reset_index())


def _log_drops(blocks: BlockSet, n_kept: int) -> None:
    summary = drop_summary(blocks)
    total = int(summary["count"].sum()) if len(summary) else 0
    log.info("%d block sample(s) kept, %d dropped", n_kept, total)
    for row in summary.itertuples():
        log.info("  dropped %d block sample(s) of PG %s: %s", row.count, row.pg, row.reason)
