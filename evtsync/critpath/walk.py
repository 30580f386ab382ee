"""The critical-path walk and the comparison of the straggler's path with the fastest rank's.

From a collective's GPU node the walk follows each node's critical parent (the parent
whose completion let it go last; same-stream predecessors win within a tolerance, see
:mod:`evtsync.critpath.dag`) back to the previous collective of the process group, or to
the first node that ended before that collective did on this rank (the point where all
ranks were last aligned). Following precomputed parent pointers makes a walk one list
lookup per step.

Events are matched across ranks by *key*: (event name — with its thread's ordinal for CPU
events —, occurrence index among the rank's window nodes with that key). The path of a
collective tiles the straggler's time into *own* and *wait* segments (:meth:`Walker.tile_path`);
measured the same way on the fastest rank's matched events, their differences sum to the
straggler's lateness (see :mod:`evtsync.critpath.tasks` and docs/critical-path.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from evtsync.critpath.dag import (
    KIND_CPU_OP,
    KIND_GAP,
    KIND_GPU,
    KIND_LAUNCH,
    KIND_PYTHON,
    KIND_RUNTIME,
    KIND_SYNC,
    RankDAG,
)

log = logging.getLogger(__name__)

NO_WINDOW = np.iinfo(np.int64).min
#: Thread ordinals in a node key (see :meth:`KeyIndex._thread_keys`); later threads share the last.
THREAD_SLOTS = 64
#: CPU node kinds -> cause category of a CPU path.
CPU_KIND_CATEGORY = {
    KIND_CPU_OP: "launch_delay", KIND_LAUNCH: "launch_delay", KIND_RUNTIME: "launch_delay",
    KIND_PYTHON: "python_gap", KIND_GAP: "python_gap", KIND_SYNC: "synchronization",
}


class KeyIndex:
    """Finds nodes of one rank by (name id, occurrence in a window): the cross-rank key.

    A window holds the nodes that end after its start (a node that began before the
    previous collective ended but finished after it belongs to the window, e.g. the
    iteration-end synchronization). The occurrence index of a node is its position, in
    start order, among the window's nodes of the same name.
    """

    def __init__(self, dag: RankDAG) -> None:
        n = dag.n_nodes
        self.dag = dag
        self.base = np.int64(n + 1)
        self.key = self._thread_keys(dag)
        by_start = np.argsort(dag.start, kind="stable")
        by_end = np.argsort(dag.end, kind="stable")
        self.sorted_ends = dag.end[by_end]
        self.sorted_starts = dag.start[by_start]
        start_rank = np.empty(n, dtype=np.int64)
        start_rank[by_start] = np.arange(n, dtype=np.int64)
        end_rank = np.empty(n, dtype=np.int64)
        end_rank[by_end] = np.arange(n, dtype=np.int64)
        keys = self.key * self.base + start_rank
        self.order = np.argsort(keys, kind="stable")
        self.sorted_keys = keys[self.order]
        self.sorted_end_keys = np.sort(self.key * self.base + end_rank)
        self.position = np.empty(n, dtype=np.int64)
        self.position[self.order] = np.arange(n, dtype=np.int64)

    @staticmethod
    def _thread_keys(dag: RankDAG) -> np.ndarray:
        """Name id of each node, combined for CPU nodes with its thread's ordinal among the
        rank's CPU threads by first event (the main thread first, the autograd thread next):
        the same op on another thread is another event. Thread ids differ across ranks, the
        order in which threads start does not."""
        cpu = dag.kind != KIND_GPU
        ordinal = np.zeros(dag.n_nodes, dtype=np.int64)
        if cpu.any():
            lanes = dag.lane[cpu]
            uniq, first = np.unique(lanes, return_index=True)
            first_start = dag.start[cpu][first]
            rank_of = np.empty(len(uniq), dtype=np.int64)
            rank_of[np.argsort(first_start, kind="stable")] = np.arange(len(uniq))
            ordinal[cpu] = 1 + np.minimum(rank_of[np.searchsorted(uniq, lanes)], THREAD_SLOTS - 2)
        return dag.name_id.astype(np.int64) * THREAD_SLOTS + ordinal

    def key_of(self, nodes: np.ndarray) -> np.ndarray:
        """The cross-rank key (name and thread ordinal) of each node."""
        return self.key[nodes]

    def _first_in_window(self, name_ids: np.ndarray, window_start: np.ndarray,
                         by_start: np.ndarray | None = None) -> np.ndarray:
        """Index in ``sorted_keys`` of the first window node of each name (start order): the
        first that ended after ``window_start``, or, where ``by_start``, started at or after it."""
        name_lo = np.searchsorted(self.sorted_keys, name_ids * self.base)
        w_end_rank = np.searchsorted(self.sorted_ends, window_start, side="right")
        ended_before = (np.searchsorted(self.sorted_end_keys, name_ids * self.base + w_end_rank)
                        - np.searchsorted(self.sorted_end_keys, name_ids * self.base))
        first = name_lo + ended_before
        if by_start is not None and by_start.any():
            w_start_rank = np.searchsorted(self.sorted_starts, window_start, side="left")
            first = np.where(by_start, np.searchsorted(self.sorted_keys, name_ids * self.base + w_start_rank), first)
        return first

    def window_starts(self, nodes_or_gpu: np.ndarray, window: Window, *, is_gpu: bool = False) -> np.ndarray:
        """Per node, where its occurrences are counted from: the GPU window start for GPU nodes
        (nodes ending after it), the CPU anchor for CPU nodes (nodes starting at or after it)."""
        gpu = nodes_or_gpu if is_gpu else self.dag.kind[nodes_or_gpu] == KIND_GPU
        anchor = window.cpu_anchor if window.cpu_anchor != NO_WINDOW else window.cpu_start
        return np.where(gpu, window.gpu_start, anchor)

    def occurrence(self, nodes: np.ndarray, window: Window) -> np.ndarray:
        """Occurrence index of each node's name among the window's nodes."""
        gpu = self.dag.kind[nodes] == KIND_GPU
        starts = self.window_starts(gpu, window, is_gpu=True)
        return self.position[nodes] - self._first_in_window(self.key[nodes], starts, self._by_start(gpu, window))

    @staticmethod
    def _by_start(gpu: np.ndarray, window: Window) -> np.ndarray | None:
        return None if window.cpu_anchor == NO_WINDOW else ~gpu

    def lookup(self, name_ids: np.ndarray, gpu: np.ndarray, occurrences: np.ndarray,
               window: Window) -> np.ndarray:
        """Node with each (key — see :meth:`key_of` —, occurrence) in the window (starting before its end), or -1."""
        if not len(self.order):
            return np.full(len(name_ids), -1, dtype=np.int64)
        starts = self.window_starts(gpu, window, is_gpu=True)
        pos = self._first_in_window(name_ids, starts, self._by_start(gpu, window)) + occurrences
        ok = (occurrences >= 0) & (pos < len(self.sorted_keys))
        safe = np.where(ok, pos, 0)
        node = self.order[safe]
        ok &= self.sorted_keys[safe] // self.base == name_ids
        ok &= self.dag.start[node] < window.end
        return np.where(ok, node, -1)


@dataclass(frozen=True)
class Window:
    """The window of one collective on one rank.

    GPU nodes belong to it when they end after the previous collective of the PG ended
    (``gpu_start``); CPU nodes when they end after the CPU launched that collective
    (``cpu_start``): the CPU runs ahead of the GPU by a different amount on every rank, so
    CPU events are counted from the CPU's own mark. ``end`` is the collective's start.
    ``cpu_anchor`` (the start of that launch call) is where CPU occurrences are counted
    from, by start: program order, which a launch call blocked for a different time on
    each rank (a full launch queue) does not shift.
    """

    gpu_start: int
    cpu_start: int
    end: int
    cpu_anchor: int = NO_WINDOW


class Walker:
    """Walks of one rank's DAG.

    The walk indexes the DAG's arrays through memoryviews: an item is a plain Python int
    or bool, about as fast as a list's, without a Python object per node held for the
    whole task (lists of every node cost ~90 bytes a node, ~0.5 GB for a 1 GB trace).
    """

    def __init__(self, dag: RankDAG) -> None:
        self.dag = dag
        self.critical = memoryview(np.ascontiguousarray(dag.critical, dtype=np.int64))
        self.start = memoryview(np.ascontiguousarray(dag.start, dtype=np.int64))
        self.end = memoryview(np.ascontiguousarray(dag.end, dtype=np.int64))
        self.is_gpu = memoryview(dag.kind == KIND_GPU)
        self.parent_ptr = memoryview(np.ascontiguousarray(dag.parent_ptr, dtype=np.int64))
        self.parent = memoryview(np.ascontiguousarray(dag.parent, dtype=np.int64))
        self.parent_ready = memoryview(np.ascontiguousarray(dag.parent_ready, dtype=np.int64))
        self._stamp = memoryview(np.zeros(dag.n_nodes, dtype=np.int64))
        self._walk_id = 0
        self.cycles = 0

    def path(self, node: int, window: Window, stop_node: int = -1) -> np.ndarray:
        """Nodes on the critical path before ``node`` (newest first), down to the window start.

        The walk stops at ``stop_node`` (the previous collective, excluded), at a node that
        ended at or before its window start (GPU or CPU, see :class:`Window`), or at a node
        without parents.
        """
        self._walk_id += 1
        wid = self._walk_id
        crit, end, stamp, gpu = self.critical, self.end, self._stamp, self.is_gpu
        ws_gpu, ws_cpu = window.gpu_start, window.cpu_start
        out: list[int] = []
        n = crit[node]
        stamp[node] = wid
        while n >= 0 and n != stop_node and end[n] > (ws_gpu if gpu[n] else ws_cpu):
            if stamp[n] == wid:
                self.cycles += 1
                log.warning("rank %d: critical-parent cycle at node %d; walk stopped", self.dag.rank, n)
                break
            stamp[n] = wid
            out.append(n)
            n = crit[n]
        return np.asarray(out, dtype=np.int64)

    def edge_ready(self, src: int, dst: int) -> int | None:
        """Ready time of the edge src -> dst (the latest if several), or None when there is none."""
        parent, ready = self.parent, self.parent_ready
        best = None
        for e in range(self.parent_ptr[dst], self.parent_ptr[dst + 1]):
            if parent[e] == src and (best is None or ready[e] > best):
                best = ready[e]
        return best

    def critical_ready(self, node: int) -> int | None:
        """Ready time of a node's critical edge (None without parents)."""
        lo, hi = self.parent_ptr[node], self.parent_ptr[node + 1]
        return self.parent_ready[hi - 1] if hi > lo else None

    def tile_path(self, chain: list[int], window: Window, *, fastest: bool,
                  whole_syncs: frozenset[int] = frozenset()) -> tuple[list[int], list[int], int]:
        """Own and wait segment lengths of each chain position (0 = the collective).

        ``chain`` lists nodes newest first. On the straggler (``fastest=False``) consecutive
        entries are linked by critical edges and the segments tile its time from the returned
        bottom to the collective's start. On the fastest rank entries are the matches of the
        straggler's nodes, -1 where there is none: a node's segments follow the same rules,
        through the edges to its matched neighbours when the fastest rank has them, else from
        its own end and its own critical parent. A wait is counted from the window start of
        the side (GPU or CPU) that let the node go. Positions in ``whole_syncs``
        (straggler-only syncs) keep their whole blocked time as their own.
        Returns own, wait and the bottom (start of the oldest segment).
        """
        k = len(chain)
        own, wait = [0] * k, [0] * k
        start, end, is_gpu, critical = self.start, self.end, self.is_gpu, self.critical
        edge_ready = self.edge_ready
        lo_child: int | None = None
        child = -1
        bottom = 0
        for j in range(k):
            n = chain[j]
            if n < 0:
                lo_child, child = None, -1
                continue
            ws = window.gpu_start if is_gpu[n] else window.cpu_start
            s_n, e_n = start[n], end[n]
            if j == 0:
                hi = s_n
            else:
                r = edge_ready(n, child) if child >= 0 else None
                if r is None:
                    r = e_n
                hi = min(r, lo_child) if lo_child is not None else r
            parent = chain[j + 1] if j + 1 < k else -1
            rp = edge_ready(parent, n) if parent >= 0 else None
            if rp is None and (j + 1 == k or fastest):
                rp = self.critical_ready(n)
                parent = critical[n]
            if j in whole_syncs:
                rp = None
            floor = min(rp, hi) if rp is not None else s_n
            lo = min(max(s_n, floor, ws), hi) if j else hi
            own[j] = max(hi - lo, 0)
            # a wait is counted from the window start of the side that let the node go
            ws_parent = ws if parent < 0 else (window.gpu_start if is_gpu[parent] else window.cpu_start)
            base = max(min(rp, lo), ws_parent) if rp is not None else lo
            wait[j] = max(lo - base, 0)
            bottom = base
            lo_child, child = lo, n
        return own, wait, bottom


#: Segments of the straggler's time along its path (see :meth:`Walker.tile_path` and :mod:`evtsync.critpath.tasks`).
SEGMENT_NAMES = ("kernel", "cpu_slice", "sync_wait", "launch_gap", "stream_queue", "cpu_wait")
SEG_KERNEL, SEG_CPU, SEG_SYNC, SEG_LAUNCH_GAP, SEG_QUEUE, SEG_CPU_WAIT = range(6)
#: Segments spent on the GPU (the others are the CPU's, or the GPU waiting for the CPU).
GPU_SEGMENTS = frozenset({SEG_KERNEL, SEG_QUEUE})
#: How the tiling of the straggler's path ends (the oldest node's parent).
BOTTOM_PREVIOUS, BOTTOM_WINDOW, BOTTOM_NO_PARENT, BOTTOM_CYCLE = (
    "previous_collective", "window_start", "no_parent", "cycle")


def net_cpu_runs(raw: np.ndarray, cpu_position: np.ndarray) -> np.ndarray:
    """Net the negative extras of a CPU run, and of the launch wait of the kernel it launched,
    against the run's positive extras (proportionally; the sum is kept).

    ``cpu_position[j]`` says whether chain position ``j`` is a CPU node; the run that
    position ``j0`` (a GPU node, or the collective) leaves is ``j0 + 1 ..`` up to the next
    GPU position; the wait segment of ``j0`` is ``2 j0 + 1``.
    """
    extra = raw.copy()
    k = len(cpu_position)
    j = 0
    while j < k:
        if cpu_position[j] or j + 1 >= k or not cpu_position[j + 1]:
            j += 1
            continue
        hi = j + 1
        while hi < k and cpu_position[hi]:
            hi += 1
        w = 2 * j + 1
        run = extra[2 * (j + 1):2 * hi]
        pos, neg = run > 0, run < 0
        positive = float(run[pos].sum())
        negative = -float(run[neg].sum()) - min(float(extra[w]), 0.0)
        take = min(positive, negative)
        if take > 0:
            run[pos] *= (positive - take) / positive
            scale = (negative - take) / negative
            run[neg] *= scale
            if extra[w] < 0:
                extra[w] *= scale
        j = hi
    return extra


def segment_category(seg_kind: int, node_kind: int) -> str:
    """Cause class of a segment: ``gpu`` (kernel time, queueing on the GPU) or its CPU category."""
    if seg_kind in GPU_SEGMENTS:
        return "gpu"
    if seg_kind == SEG_SYNC:
        return "synchronization"
    if seg_kind == SEG_LAUNCH_GAP:
        return "launch_delay"
    if seg_kind == SEG_CPU_WAIT:
        return "python_gap"
    return CPU_KIND_CATEGORY[node_kind]
