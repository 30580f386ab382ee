"""The critical-path walk and the comparison of the straggler's path with the fastest rank's.

From a collective's GPU node the walk follows each node's critical parent (the parent
whose completion let it go last; same-stream predecessors win within a tolerance, see
:mod:`evtsync.critpath.dag`) back to the previous collective of the process group, or to
the first node that ended before that collective did on this rank (the point where all
ranks were last aligned). Following precomputed parent pointers makes a walk one list
lookup per step.

Events are matched across ranks by *key*: (event name, occurrence index of that name
among the rank's nodes that start inside the window). The paths of the straggler and of
the fastest rank are aligned at their lowest common ancestor: read backwards from the
collectives, the two key sequences agree up to some node (the LCA) and diverge before it.
Every event of the straggler's path — in the common part and in its own branch before the
LCA — is compared with the same key on the fastest rank (on its path or not): extra time
= straggler duration - fastest duration, or the whole duration when the fastest rank has
no such event in the window. The event with the largest extra time is the principal cause.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from evtsync.critpath.dag import (
    EDGE_SYNC,
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
        by_start = np.argsort(dag.start, kind="stable")
        by_end = np.argsort(dag.end, kind="stable")
        self.sorted_ends = dag.end[by_end]
        start_rank = np.empty(n, dtype=np.int64)
        start_rank[by_start] = np.arange(n, dtype=np.int64)
        end_rank = np.empty(n, dtype=np.int64)
        end_rank[by_end] = np.arange(n, dtype=np.int64)
        keys = dag.name_id * self.base + start_rank
        self.order = np.argsort(keys, kind="stable")
        self.sorted_keys = keys[self.order]
        self.sorted_end_keys = np.sort(dag.name_id * self.base + end_rank)
        self.position = np.empty(n, dtype=np.int64)
        self.position[self.order] = np.arange(n, dtype=np.int64)

    def _first_in_window(self, name_ids: np.ndarray, window_start: np.ndarray) -> np.ndarray:
        """Index in ``sorted_keys`` of the first window node of each name (start order)."""
        name_lo = np.searchsorted(self.sorted_keys, name_ids * self.base)
        w_end_rank = np.searchsorted(self.sorted_ends, window_start, side="right")
        ended_before = (np.searchsorted(self.sorted_end_keys, name_ids * self.base + w_end_rank)
                        - np.searchsorted(self.sorted_end_keys, name_ids * self.base))
        return name_lo + ended_before

    def window_starts(self, nodes_or_gpu: np.ndarray, window: Window, *, is_gpu: bool = False) -> np.ndarray:
        """Per node, the start of its window: the GPU one for GPU nodes, the CPU one otherwise."""
        gpu = nodes_or_gpu if is_gpu else self.dag.kind[nodes_or_gpu] == KIND_GPU
        return np.where(gpu, window.gpu_start, window.cpu_start)

    def occurrence(self, nodes: np.ndarray, window: Window) -> np.ndarray:
        """Occurrence index of each node's name among the window's nodes."""
        starts = self.window_starts(nodes, window)
        return self.position[nodes] - self._first_in_window(self.dag.name_id[nodes], starts)

    def lookup(self, name_ids: np.ndarray, gpu: np.ndarray, occurrences: np.ndarray,
               window: Window) -> np.ndarray:
        """Node with each (name id, occurrence) in the window (starting before its end), or -1."""
        if not len(self.order):
            return np.full(len(name_ids), -1, dtype=np.int64)
        starts = self.window_starts(gpu, window, is_gpu=True)
        pos = self._first_in_window(name_ids, starts) + occurrences
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
    """

    gpu_start: int
    cpu_start: int
    end: int


class Walker:
    """Walks of one rank's DAG (pointer lists converted once)."""

    def __init__(self, dag: RankDAG) -> None:
        self.dag = dag
        self.critical = dag.critical.tolist()
        self.end = dag.end.tolist()
        self.is_gpu = (dag.kind == KIND_GPU).tolist()
        self._stamp = np.zeros(dag.n_nodes, dtype=np.int64).tolist()
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


@dataclass
class PathComparison:
    """The straggler's path against the fastest rank's for one collective.

    ``extra_ns`` is each event's raw extra time; ``effect_ns`` the part of it that reached
    the collective: a run of CPU events on the path (and everything before it) can delay
    the GPU only by how much longer the kernel that leaves the run (launched from it)
    waited for the CPU than the same kernel on the fastest rank did, so positive extras
    there are scaled down to that wait (a CPU far ahead of its GPU absorbs a delay). GPU
    events after the last CPU run keep their extra time.
    """

    path: np.ndarray
    occurrence: np.ndarray
    duration_ns: np.ndarray
    fastest_duration_ns: np.ndarray
    extra_ns: np.ndarray
    effect_ns: np.ndarray
    on_fastest_path: np.ndarray
    n_common: int
    lca: int
    principal: int


def compare_paths(straggler: tuple[RankDAG, KeyIndex], fastest: tuple[RankDAG, KeyIndex],
                  path_s: np.ndarray, path_f: np.ndarray, window_s: Window,
                  window_f: Window, here_nodes: tuple[int, int]) -> PathComparison:
    """Compare the straggler's path with the fastest rank's by event name and occurrence.

    ``here_nodes`` are the collective's nodes on the straggler and on the fastest rank.
    """
    dag_s, keys_s = straggler
    dag_f, keys_f = fastest
    occ_s = keys_s.occurrence(path_s, window_s) if len(path_s) else np.zeros(0, np.int64)
    occ_f = keys_f.occurrence(path_f, window_f) if len(path_f) else np.zeros(0, np.int64)
    names_s = dag_s.name_id[path_s]
    match = (keys_f.lookup(names_s, dag_s.kind[path_s] == KIND_GPU, occ_s, window_f) if len(path_s)
             else np.zeros(0, np.int64))
    found = match >= 0
    # a sync that the fastest rank also made is compared by its own time after the GPU work
    # it waited for (that work is on the path already); an extra sync counts whole
    dur_s = np.where(found, own_time(dag_s, path_s), dag_s.end[path_s] - dag_s.start[path_s])
    dur_f = np.where(found, own_time(dag_f, np.maximum(match, 0)), 0)
    extra = dur_s - dur_f
    effect = _cpu_effect(straggler, fastest, path_s, extra, found, window_s, window_f, here_nodes)
    key_s = names_s * (1 << 32) + occ_s
    key_f = dag_f.name_id[path_f] * (1 << 32) + occ_f
    on_fastest = np.isin(key_s, key_f)
    m = min(len(key_s), len(key_f))
    differ = np.flatnonzero(key_s[:m] != key_f[:m])
    n_common = int(differ[0]) if differ.size else m
    lca = int(path_s[n_common - 1]) if n_common else -1
    principal = int(np.argmax(effect)) if len(effect) else -1
    return PathComparison(path=path_s, occurrence=occ_s, duration_ns=dur_s, fastest_duration_ns=dur_f,
                          extra_ns=extra, effect_ns=effect, on_fastest_path=on_fastest, n_common=n_common,
                          lca=lca, principal=principal)


def gpu_wait(dag: RankDAG, nodes: np.ndarray, gpu_window_start: int) -> np.ndarray:
    """How long each GPU node waited after its stream predecessor (or the window start) let it go."""
    ready = np.maximum(dag.gpu_ready[nodes], gpu_window_start)
    return np.maximum(dag.start[nodes] - ready, 0)


def _cpu_effect(straggler: tuple[RankDAG, KeyIndex], fastest: tuple[RankDAG, KeyIndex], path: np.ndarray,
                extra: np.ndarray, found: np.ndarray, window_s: Window, window_f: Window,
                here_nodes: tuple[int, int]) -> np.ndarray:
    """Extra time that reached the collective (see :class:`PathComparison`).

    Walking from the oldest run of CPU nodes to the newest, the effects of the run and of
    everything older than it (which can reach the collective only through it) are clipped
    at zero and scaled down to what the run let through: how much later its exit kernel
    (launched from the run) started than the same kernel on the fastest rank, counted from
    the ranks' last alignment (a CPU far ahead of its GPU absorbs a delay). A sync the fastest rank did not make
    holds, in its duration, the GPU work it waited for: nodes older than it get no effect
    of their own.
    """
    dag_s, keys_s = straggler
    dag_f, keys_f = fastest
    effect = extra.astype(np.float64)
    is_cpu = dag_s.kind[path] != KIND_GPU
    if not is_cpu.any():
        return effect
    extra_sync = np.flatnonzero((dag_s.kind[path] == KIND_SYNC) & ~found)
    if extra_sync.size:
        effect[extra_sync[0] + 1:] = np.minimum(effect[extra_sync[0] + 1:], 0.0)
    run_start = np.flatnonzero(is_cpu & np.concatenate([[True], ~is_cpu[:-1]]))
    for lo in reversed(run_start.tolist()):
        if lo == 0:
            exit_s, exit_f = here_nodes
        else:
            exit_s = int(path[lo - 1])
            node = np.array([exit_s])
            occ = keys_s.occurrence(node, window_s)
            exit_f = int(keys_f.lookup(dag_s.name_id[node], np.array([True]), occ, window_f)[0])
        allowed = _lateness(dag_s, dag_f, exit_s, exit_f, window_s, window_f)
        upstream = effect[lo:]
        np.maximum(upstream, 0.0, out=upstream)
        total = upstream.sum()
        if total > allowed:
            upstream *= allowed / total
    return effect


def _lateness(dag_s: RankDAG, dag_f: RankDAG, exit_s: int, exit_f: int, window_s: Window,
              window_f: Window) -> float:
    """How much later the kernel ``exit_s`` started on the straggler than on the fastest rank,
    both measured from their window's GPU start (where the ranks were aligned); without a
    window (first collective), how much longer it waited after its stream predecessor."""
    if exit_f < 0:
        return float(gpu_wait(dag_s, np.array([exit_s]), window_s.gpu_start)[0])
    if window_s.gpu_start == NO_WINDOW or window_f.gpu_start == NO_WINDOW:
        wait_s = gpu_wait(dag_s, np.array([exit_s]), window_s.gpu_start)[0]
        wait_f = gpu_wait(dag_f, np.array([exit_f]), window_f.gpu_start)[0]
        return float(max(wait_s - wait_f, 0))
    late = (dag_s.start[exit_s] - window_s.gpu_start) - (dag_f.start[exit_f] - window_f.gpu_start)
    return float(max(late, 0))


def own_time(dag: RankDAG, nodes: np.ndarray) -> np.ndarray:
    """Time of each node that is its own: the duration, except for a sync call blocked by a
    GPU event (its critical parent through a sync edge), whose own time starts when that
    GPU event completed."""
    dur = dag.end[nodes] - dag.start[nodes]
    crit = dag.critical[nodes]
    blocked = (dag.kind[nodes] == KIND_SYNC) & (dag.critical_kind[nodes] == EDGE_SYNC) & (crit >= 0)
    if blocked.any():
        tail = dag.end[nodes] - np.maximum(dag.start[nodes], dag.end[np.maximum(crit, 0)])
        dur = np.where(blocked, np.maximum(tail, 0), dur)
    return dur


def path_kind(dag: RankDAG, comparison: PathComparison) -> str:
    """``gpu_only`` when the straggler's path holds GPU events only, else the CPU cause class
    of its CPU event with the largest extra time (launch_delay, python_gap, synchronization)."""
    kinds = dag.kind[comparison.path]
    cpu = np.flatnonzero(kinds != KIND_GPU)
    if not cpu.size:
        return "gpu_only"
    worst = cpu[int(np.argmax(comparison.extra_ns[cpu]))]
    return CPU_KIND_CATEGORY[int(kinds[worst])]
