"""Per-rank event DAG for critical-path analysis (methodology §4).

One DAG is built per rank over the whole trace; the window between two consecutive
collectives of a process group is a time range on it (the walk stops at the previous
collective), so the DAG of every window is the induced sub-graph and nothing is built twice.

Nodes (numpy arrays, one entry per node):

- GPU nodes: every kernel, memcpy and memset, on its lane (device, stream).
- CPU nodes: the nested CPU events of each thread (``cpu_op``, ``user_annotation``,
  ``python_function`` and the CUDA runtime/driver calls) cut into exclusive time slices: a
  parent's time not covered by its children becomes a slice of its own, and time between
  top-level events becomes a ``python gap`` slice. The slices of a thread tile its timeline.

Edges (a CSR list sorted by destination; ``ready`` = when the edge's source let the
destination go):

- thread order: consecutive slices of one CPU thread;
- stream order: previous event on the same GPU stream;
- cross-stream: for each event and each other stream of its device, the latest event of
  that stream completed at or before the event's start, unless the event's stream
  predecessor already saw that completion (the min-heap of in-flight completions of the
  paper, kept per stream: one global heap would hand a completion only to the first event
  that starts after it, usually its own stream successor, and lose the edge to the other
  stream that waited for it);
- launch: the launch call (``cudaLaunchKernel``, ``cudaLaunchKernelExC``,
  ``cuLaunchKernelEx``, ``hipExtLaunchKernel``, memcpy/memset calls, ...) -> the GPU event with
  the same correlation id; ready = min(call end, GPU start);
- synchronization: for ``cudaStreamSynchronize`` / ``cudaDeviceSynchronize`` /
  ``cudaEventSynchronize`` (and the HIP ones), the GPU event waited for -> the sync call's
  slice. With ``cuda_sync`` events the waited stream (Stream Sync) or the recorded event
  (Event Sync: the last GPU event launched on ``wait_on_stream`` before the matching
  ``cudaEventRecord``) is known; otherwise (and for Context Sync) it is the most recently
  completed GPU event of the device before the call returned. The edge goes to the sync
  call rather than to the slice after it, so that the blocked time is a node of its own
  that the walk can leave through the GPU.

Every node also gets its *critical parent*: the parent with the latest ready time, where a
same-stream predecessor wins when it is within ``same_stream_tolerance_ns`` of the latest
(back-to-back kernels leave gaps of a few µs). Building costs O(E log E) time and O(E)
memory with no Python object per edge; the only Python loop is the nesting stack over CPU
events (one pass, integers only).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from evtsync.critpath.names import GAP_NAME, notes_around, user_names, user_notes
from evtsync.trace.schema import LAUNCH_NAMES

log = logging.getLogger(__name__)

#: Node kinds.
KIND_GPU, KIND_CPU_OP, KIND_PYTHON, KIND_GAP, KIND_LAUNCH, KIND_SYNC, KIND_RUNTIME = range(7)
KIND_NAMES = ("gpu", "cpu_op", "python", "python_gap", "launch", "sync", "runtime")
#: Edge kinds (also the tie-break priority: a higher code wins a tie in ready time).
EDGE_SYNC, EDGE_LAUNCH, EDGE_CROSS, EDGE_THREAD, EDGE_STREAM = range(5)
EDGE_NAMES = ("sync", "launch", "cross_stream", "thread", "stream")
#: Source table of a node.
SRC_NONE, SRC_KERNELS, SRC_CPU_OPS, SRC_RUNTIME = -1, 0, 1, 2

#: CPU calls that block the calling thread until the GPU has finished something.
BLOCKING_SYNC_NAMES = frozenset(
    {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
     "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize"})
#: Launch calls: every name of the schema's launch list (kernels, graphs, copies, memsets).
LAUNCH_CALL_NAMES = LAUNCH_NAMES
PYTHON_CATEGORIES = frozenset({"user_annotation", "python_function"})
SAME_STREAM_TOLERANCE_NS = 3_000


class Vocabulary:
    """Event names shared by the DAGs of all ranks, so a name id means the same on every rank."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self.names: list[str] = []

    def id(self, name: str) -> int:
        """Id of one name (added when new)."""
        found = self._ids.get(name)
        if found is None:
            found = self._ids[name] = len(self.names)
            self.names.append(name)
        return found

    def ids(self, values: pd.Series) -> np.ndarray:
        """Ids of a column of names, through its categories (one dict lookup per distinct name)."""
        cat = values.astype("category") if not isinstance(values.dtype, pd.CategoricalDtype) else values
        table = np.array([self.id(str(c)) for c in cat.cat.categories] + [self.id("")],
                         dtype=np.int64)
        codes = cat.cat.codes.to_numpy()
        return table[np.where(codes < 0, len(table) - 1, codes)]


@dataclass
class RankDAG:
    """The event DAG of one rank: node arrays, parent CSR and critical parents."""

    rank: int
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    name_id: np.ndarray
    lane: np.ndarray
    source: np.ndarray
    row: np.ndarray
    parent_ptr: np.ndarray
    parent: np.ndarray
    parent_ready: np.ndarray
    parent_kind: np.ndarray
    critical: np.ndarray
    critical_kind: np.ndarray
    gpu_ready: np.ndarray
    lanes: list[tuple[str, int, int]] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    #: GPU node -> the user's ``record_function`` annotation around its launch on the launching
    #: thread (:func:`evtsync.critpath.names.notes_around`); absent where none
    launch_note: dict[int, str] = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return len(self.start)

    @property
    def n_edges(self) -> int:
        """Number of edges."""
        return len(self.parent)

    def parents_of(self, node: int) -> list[tuple[int, str]]:
        """(parent node, edge kind) of one node: for inspection and tests, not the hot path."""
        lo, hi = self.parent_ptr[node], self.parent_ptr[node + 1]
        return [(int(p), EDGE_NAMES[int(k)]) for p, k in zip(self.parent[lo:hi], self.parent_kind[lo:hi],
                                                             strict=True)]

    def launch_of(self, node: int) -> int:
        """The launch-call node of a GPU node (its parent through a launch edge, the last in
        parent order if several), or -1."""
        return int(self._launch_node[node])

    @functools.cached_property
    def _launch_node(self) -> np.ndarray:
        """:meth:`launch_of` of every node, found once (a walk asks for it at every step)."""
        launch = np.full(self.n_nodes, -1, dtype=np.int64)
        edges = np.flatnonzero(self.parent_kind == EDGE_LAUNCH)
        if edges.size:
            dst = np.searchsorted(self.parent_ptr, edges, side="right") - 1
            last = np.ones(edges.size, dtype=bool)  # the last launch edge of each destination
            last[:-1] = dst[1:] != dst[:-1]
            launch[dst[last]] = self.parent[edges[last]]
        return launch

    def gpu_node(self, row: int) -> int:
        """Node id of the GPU event at ``row`` of the trace set's kernels table (-1 when absent)."""
        hit = np.flatnonzero((self.source == SRC_KERNELS) & (self.row == row))
        return int(hit[0]) if hit.size else -1

    def nodes_of(self, source: int, row: int) -> np.ndarray:
        """All node ids made from one table row (a CPU event has one slice per piece of own time)."""
        return np.flatnonzero((self.source == source) & (self.row == row))


def _is_one_of(values: pd.Series, names: frozenset[str] | set[str]) -> np.ndarray:
    """Whether each value, as a string (``astype(str)``; a missing value is none of them), is one
    of ``names``: for a categorical column one test per category, not per row."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        hit = np.array([str(c) in names for c in values.cat.categories] + [False], dtype=bool)
        codes = values.cat.codes.to_numpy()
        return hit[np.where(codes < 0, len(hit) - 1, codes)]
    return values.astype(str).isin(names).to_numpy()


def _op_user_names(ops: pd.DataFrame) -> pd.Series:
    """The name each CPU op goes by in the DAG, in the user's words (``expert_mm > aten::mm``,
    issue 46): :func:`evtsync.critpath.names.user_names` per thread, as on the CPU side
    (docs/critical-path.md, "Names of causes")."""
    if not len(ops):
        return ops["name"]
    start, end = ops["ts_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    lane = _pair_codes(ops["pid"].to_numpy(), ops["tid"].to_numpy())
    order = np.lexsort((-end, start, lane))
    start, end = start[order], end[order]
    names = ops["name"].astype(str).to_numpy()[order].tolist()
    cats = ops["cat"].astype(str).to_numpy()[order].tolist()
    bounds = np.flatnonzero(np.diff(lane[order])) + 1
    shown: list[str] = []
    for lo, hi in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(order)].tolist(), strict=True):
        shown += user_names(start[lo:hi], end[lo:hi], names[lo:hi], cats[lo:hi])
    out = np.empty(len(order), dtype=object)
    out[order] = shown
    return pd.Series(out, index=ops.index, dtype="category")


def _cpu_events(cpu_ops: pd.DataFrame, runtime: pd.DataFrame, vocab: Vocabulary) -> dict[str, np.ndarray]:
    """The CPU events of one rank as columns: thread, times, kind, name id, source row, sort priority
    (plain arrays: a DataFrame would copy them into one block)."""
    ops = cpu_ops[~_is_one_of(cpu_ops["cat"], {"gpu_user_annotation"})]
    op_names = _op_user_names(ops)
    op_kind = np.where(_is_one_of(ops["cat"], PYTHON_CATEGORIES), KIND_PYTHON, KIND_CPU_OP)
    rt_kind = np.where(_is_one_of(runtime["name"], LAUNCH_CALL_NAMES), KIND_LAUNCH,
                       np.where(_is_one_of(runtime["name"], BLOCKING_SYNC_NAMES), KIND_SYNC, KIND_RUNTIME))
    frame = {
        "pid": np.concatenate([ops["pid"].to_numpy(), runtime["pid"].to_numpy()]),
        "tid": np.concatenate([ops["tid"].to_numpy(), runtime["tid"].to_numpy()]),
        "start": np.concatenate([ops["ts_ns"].to_numpy(), runtime["ts_ns"].to_numpy()]),
        "end": np.concatenate([ops["end_ns"].to_numpy(), runtime["end_ns"].to_numpy()]),
        "kind": np.concatenate([op_kind, rt_kind]).astype(np.int8),
        "name_id": np.concatenate([vocab.ids(op_names), vocab.ids(runtime["name"])]),
        "source": np.concatenate([np.full(len(ops), SRC_CPU_OPS), np.full(len(runtime), SRC_RUNTIME)]),
        "row": np.concatenate([ops.index.to_numpy(), runtime.index.to_numpy()]),
    }
    # runtime calls sort after cpu ops with identical times, so they nest inside them
    frame["prio"] = (frame["source"] == SRC_RUNTIME).astype(np.int8)
    return frame


def _nesting_parents(lane: np.ndarray, start: np.ndarray, end: np.ndarray,
                     chunk: int = 1 << 18) -> tuple[np.ndarray, int]:
    """Parent (enclosing event) of each event, events sorted by (lane, start, -end).

    A stack sweep: events that closed before the current one starts are popped, and so
    are events that only partly overlap it (they cannot enclose it). Returns the parent
    index per event (-1 = top level) and the number of partial overlaps seen. The sweep
    reads ``chunk`` events at a time as Python lists (the stack carries over), so its
    Python objects stay bounded whatever the trace's size.
    """
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    stack: list[int] = []
    stack_end: list[int] = []
    current_lane = None
    partial = 0
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        lane_l, start_l, end_l = lane[lo:hi].tolist(), start[lo:hi].tolist(), end[lo:hi].tolist()
        out = [-1] * (hi - lo)
        for k in range(hi - lo):
            if lane_l[k] != current_lane:
                stack.clear()
                stack_end.clear()
                current_lane = lane_l[k]
            s, e = start_l[k], end_l[k]
            while stack_end and stack_end[-1] <= s:
                stack.pop()
                stack_end.pop()
            while stack_end and stack_end[-1] < e:
                stack.pop()
                stack_end.pop()
                partial += 1
            if stack:
                out[k] = stack[-1]
            stack.append(lo + k)
            stack_end.append(e)
        parent[lo:hi] = out
    return parent, partial


def _pair_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Code of each (a, b) pair, numbered by first appearance (``pd.factorize`` of the pairs),
    from the codes of each column: no MultiIndex of tuples."""
    code_a, uniq_a = pd.factorize(a)
    code_b, uniq_b = pd.factorize(b)
    if (code_a < 0).any() or (code_b < 0).any():  # a missing value: the pairs as they are
        return pd.factorize(pd.MultiIndex.from_arrays([a, b]))[0].astype(np.int64)
    return pd.factorize(code_a.astype(np.int64) * len(uniq_b) + code_b)[0].astype(np.int64)


def _cpu_slices(events: dict[str, np.ndarray], gap_id: int) -> tuple[dict[str, np.ndarray], list[tuple[str, int, int]], int]:
    """Exclusive time slices of the CPU events of one rank (all threads), in (lane, start, end)
    order; the lanes (threads) in lane order; the number of partial overlaps."""
    lane = _pair_codes(events["pid"], events["tid"])
    order = np.lexsort((events["prio"], -events["end"], events["start"], lane))
    # columns are taken in sweep order one at a time (``ev(c)``), never as a copy of the frame

    def ev(column: str) -> np.ndarray:
        return events[column][order]

    lane = lane[order]
    start, end = ev("start"), ev("end")
    parent, partial = _nesting_parents(lane, start, end)
    n = len(order)
    # (the temporaries below are deleted as soon as they are used: a rank's CPU events are
    # millions, and each array of them is tens of MB)
    # siblings: events grouped by (lane, parent) in start order; the gap before each event
    # runs from the previous sibling's end (or the parent's start) to the event's start
    sib_order = np.lexsort((start, parent, lane))
    s_lane, s_parent = lane[sib_order], parent[sib_order]
    del parent
    first = np.ones(n, dtype=bool)
    first[1:] = (s_lane[1:] != s_lane[:-1]) | (s_parent[1:] != s_parent[:-1])
    group = np.cumsum(first) - 1
    s_end = end[sib_order]
    # running max of sibling ends within a group (partial overlaps make ends unsorted)
    run_max = pd.Series(s_end).groupby(group).cummax().to_numpy()
    del group
    prev_end = np.empty(n, dtype=np.int64)
    prev_end[1:] = run_max[:-1]
    del run_max
    par_start = np.where(s_parent >= 0, start[np.maximum(s_parent, 0)], np.iinfo(np.int64).min)
    before_lo = np.where(first, par_start, np.maximum(prev_end, par_start))
    del prev_end
    before_hi = start[sib_order]
    del sib_order
    keep_before = (before_hi > before_lo) & ~(first & (s_parent < 0))
    del first, par_start
    # tail of each event: from its last child's end (or its start) to its end
    last_child_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    has_parent = s_parent >= 0
    np.maximum.at(last_child_end, s_parent[has_parent], s_end[has_parent])
    del has_parent, s_end
    has_children = last_child_end > np.iinfo(np.int64).min
    tail_lo = np.where(has_children, np.maximum(last_child_end, start), start)
    del last_child_end
    tail_hi = end
    keep_tail = (tail_hi > tail_lo) | ~has_children
    del has_children
    owner = np.concatenate([s_parent[keep_before], np.flatnonzero(keep_tail)])
    del s_parent
    lo = np.concatenate([before_lo[keep_before], tail_lo[keep_tail]])
    hi = np.concatenate([before_hi[keep_before], np.maximum(tail_hi, tail_lo)[keep_tail]])
    del before_lo, before_hi, tail_lo, tail_hi
    sl_lane = np.concatenate([s_lane[keep_before], lane[keep_tail]])
    del s_lane, keep_before, keep_tail, start, end
    # slices in (lane, start, end) order (np.lexsort is stable, as a stable sort_values)
    by_lane = np.lexsort((hi, lo, sl_lane))
    owner = owner[by_lane]
    is_gap = owner < 0
    source_row = order[np.maximum(owner, 0)]
    del owner

    def owned(column: str, gap_value: int) -> np.ndarray:
        return np.where(is_gap, gap_value, events[column][source_row])

    slices = {
        "lane": sl_lane[by_lane], "start": lo[by_lane], "end": hi[by_lane],
        "kind": owned("kind", KIND_GAP).astype(np.int8), "name_id": owned("name_id", gap_id),
        "source": owned("source", SRC_NONE), "row": owned("row", -1),
    }
    del sl_lane, lo, hi, by_lane
    # one (pid, tid) per lane, in lane order (every event of a lane has the same pair)
    _, first = np.unique(lane, return_index=True)
    threads = [("thread", int(p), int(t)) for p, t in zip(ev("pid")[first], ev("tid")[first], strict=True)]
    return slices, threads, partial


def build_rank_dag(kernels: pd.DataFrame, cpu_ops: pd.DataFrame, runtime: pd.DataFrame,
                   syncs: pd.DataFrame, rank: int, vocab: Vocabulary | None = None, *,
                   same_stream_tolerance_ns: int = SAME_STREAM_TOLERANCE_NS) -> RankDAG:
    """Build the DAG of one rank from its rows of the trace tables (index = table row)."""
    vocab = vocab if vocab is not None else Vocabulary()
    gap_id = vocab.id(GAP_NAME)
    # ---- GPU nodes, grouped by lane (device, stream) in start order
    gpu_lane_key = pd.MultiIndex.from_arrays([kernels["device"], kernels["stream"]])
    gpu_lane_codes, gpu_lane_uniques = pd.factorize(gpu_lane_key, sort=True)
    g_order = np.lexsort((kernels["end_ns"].to_numpy(), kernels["ts_ns"].to_numpy(), gpu_lane_codes))
    # only the columns the DAG reads: a copy of the whole table would double its memory
    g = kernels[["ts_ns", "end_ns", "name", "correlation"]].iloc[g_order]
    g_lane = gpu_lane_codes[g_order].astype(np.int64)
    n_gpu = len(g)
    # ---- CPU slices
    events = _cpu_events(cpu_ops, runtime, vocab)
    if len(events["start"]):
        slices, cpu_lanes, partial = _cpu_slices(events, gap_id)
    else:
        slices = {c: np.zeros(0, np.int64) for c in ("lane", "start", "end", "kind", "name_id", "source", "row")}
        cpu_lanes, partial = [], 0
    del events
    if partial:
        log.info("rank %d: %d CPU events overlap a neighbour without nesting in it", rank, partial)
    n_lanes_gpu = len(gpu_lane_uniques)
    start = np.concatenate([g["ts_ns"].to_numpy(), slices["start"]]).astype(np.int64)
    end = np.concatenate([g["end_ns"].to_numpy(), slices["end"]]).astype(np.int64)
    kind = np.concatenate([np.full(n_gpu, KIND_GPU, np.int8), slices["kind"].astype(np.int8)])
    name_id = np.concatenate([vocab.ids(g["name"]) if n_gpu else np.zeros(0, np.int64),
                              slices["name_id"].astype(np.int64)])
    lane = np.concatenate([g_lane, slices["lane"].astype(np.int64) + n_lanes_gpu])
    source = np.concatenate([np.full(n_gpu, SRC_KERNELS), slices["source"]]).astype(np.int8)
    row = np.concatenate([g.index.to_numpy(), slices["row"]]).astype(np.int64)
    del slices  # its columns are in the node arrays now
    n = len(start)
    src_parts, dst_parts, ready_parts, kind_parts = [], [], [], []

    def add(src: np.ndarray, dst: np.ndarray, ready: np.ndarray, ekind: int) -> None:
        src_parts.append(src.astype(np.int64))
        dst_parts.append(dst.astype(np.int64))
        ready_parts.append(ready.astype(np.int64))
        kind_parts.append(np.full(len(src), ekind, np.int8))

    # ---- stream order and thread order: consecutive nodes of one lane
    same_lane = lane[1:] == lane[:-1]
    pairs = np.flatnonzero(same_lane)
    is_gpu_pair = kind[pairs] == KIND_GPU
    add(pairs[is_gpu_pair], pairs[is_gpu_pair] + 1, end[pairs[is_gpu_pair]], EDGE_STREAM)
    add(pairs[~is_gpu_pair], pairs[~is_gpu_pair] + 1, end[pairs[~is_gpu_pair]], EDGE_THREAD)
    # ---- cross-stream: latest completion on each other stream of the same device
    lane_bounds = np.searchsorted(g_lane, np.arange(n_lanes_gpu + 1))
    lane_device = np.array([u[0] for u in gpu_lane_uniques], dtype=np.int64) if n_lanes_gpu else np.zeros(0)
    for a in range(n_lanes_gpu):
        a_lo, a_hi = lane_bounds[a], lane_bounds[a + 1]
        a_start = start[a_lo:a_hi]
        for b in range(n_lanes_gpu):
            if a == b or lane_device[a] != lane_device[b]:
                continue
            b_lo, b_hi = lane_bounds[b], lane_bounds[b + 1]
            b_end = np.maximum.accumulate(end[b_lo:b_hi])
            j = np.searchsorted(b_end, a_start, side="right") - 1
            fresh = j >= 0
            fresh[1:] &= j[1:] != j[:-1]
            src = b_lo + j[fresh]
            add(src, a_lo + np.flatnonzero(fresh), end[src], EDGE_CROSS)
    # ---- CPU lookups: the slice of a thread that ends at a call's end
    cpu_lo = n_gpu
    cpu_lane = lane[cpu_lo:]
    cpu_end = end[cpu_lo:]

    def slice_ending_at(lanes_: np.ndarray, times: np.ndarray) -> np.ndarray:
        # slices are sorted by (lane, start); within a lane their ends are non-decreasing
        out = np.full(len(times), -1, dtype=np.int64)
        for ln in np.unique(lanes_):
            sel = lanes_ == ln
            lo_, hi_ = np.searchsorted(cpu_lane, [ln, ln + 1])
            k = np.searchsorted(np.maximum.accumulate(cpu_end[lo_:hi_]), times[sel], side="right") - 1
            out[sel] = np.where(k >= 0, cpu_lo + lo_ + k, -1)
        return out

    rt_source = source[cpu_lo:]
    # the node of each runtime call = its last slice (the one ending at the call's end)
    rt_calls = runtime
    call_lane_of_row = pd.Series(dtype=float)
    if len(rt_calls):
        mask = rt_source == SRC_RUNTIME
        node_ids = np.flatnonzero(mask) + cpu_lo
        call_lane_of_row = pd.Series(lane[node_ids], index=row[node_ids]).groupby(level=0).first()
    # ---- launch edges by correlation
    n_launch = 0
    launch_note: dict[int, str] = {}
    if len(rt_calls) and n_gpu:
        is_launch = _is_one_of(rt_calls["name"], LAUNCH_CALL_NAMES) & \
            (rt_calls["correlation"].to_numpy() >= 0)
        launches = rt_calls[is_launch]
        g_corr = g["correlation"].to_numpy()
        valid_g = np.flatnonzero(g_corr >= 0)
        corr_sorted = np.argsort(g_corr[valid_g], kind="stable")
        gc = g_corr[valid_g][corr_sorted]
        pos = np.searchsorted(gc, launches["correlation"].to_numpy())
        pos_c = np.minimum(pos, max(len(gc) - 1, 0))
        hit = (pos < len(gc)) & (gc[pos_c] == launches["correlation"].to_numpy()) if len(gc) else np.zeros(len(launches), bool)
        if hit.any():
            gpu_dst = valid_g[corr_sorted[pos_c[hit]]]
            l_rows = launches.index.to_numpy()[hit]
            l_lane = call_lane_of_row.reindex(l_rows).to_numpy()
            ok = ~pd.isna(l_lane)
            src = slice_ending_at(l_lane[ok].astype(np.int64), launches["end_ns"].to_numpy()[hit][ok])
            dst = gpu_dst[ok]
            good = src >= 0
            add(src[good], dst[good], np.minimum(end[src[good]], start[dst[good]]), EDGE_LAUNCH)
            n_launch = int(good.sum())
            launch_note = _launch_notes(cpu_ops, launches[hit][ok][good], dst[good])
    # ---- synchronization edges
    n_sync = 0
    if len(rt_calls) and n_gpu:
        is_sync = _is_one_of(rt_calls["name"], BLOCKING_SYNC_NAMES)
        sync_calls = rt_calls[is_sync]
        if len(sync_calls):
            src_list, dst_rows, dst_ends = _sync_sources(g, g_lane, gpu_lane_uniques, start[:n_gpu],
                                                        end[:n_gpu], sync_calls, syncs, rt_calls)
            if len(src_list):
                s_lane_ = call_lane_of_row.reindex(dst_rows).to_numpy()
                ok = ~pd.isna(s_lane_)
                dst = slice_ending_at(s_lane_[ok].astype(np.int64), dst_ends[ok])
                src = src_list[ok]
                good = dst >= 0
                add(src[good], dst[good], end[src[good]], EDGE_SYNC)
                n_sync = int(good.sum())
    src_all = np.concatenate(src_parts) if src_parts else np.zeros(0, np.int64)
    dst_all = np.concatenate(dst_parts) if dst_parts else np.zeros(0, np.int64)
    ready_all = np.concatenate(ready_parts) if ready_parts else np.zeros(0, np.int64)
    ekind_all = np.concatenate(kind_parts) if kind_parts else np.zeros(0, np.int8)
    for parts in (src_parts, dst_parts, ready_parts, kind_parts):
        parts.clear()
    self_loop = src_all == dst_all
    if self_loop.any():
        src_all, dst_all = src_all[~self_loop], dst_all[~self_loop]
        ready_all, ekind_all = ready_all[~self_loop], ekind_all[~self_loop]
    # ---- CSR by destination, parents ordered by (score, edge priority): last = critical
    score = ready_all + np.where(ekind_all == EDGE_STREAM, same_stream_tolerance_ns, 0)
    order = np.lexsort((ekind_all, score, dst_all))
    del score
    src_all, dst_all, ready_all, ekind_all = src_all[order], dst_all[order], ready_all[order], ekind_all[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst_all, minlength=n), out=ptr[1:])
    critical = np.full(n, -1, dtype=np.int64)
    critical_kind = np.full(n, -1, dtype=np.int8)
    has = ptr[1:] > ptr[:-1]
    last = ptr[1:][has] - 1
    critical[has] = src_all[last]
    critical_kind[has] = ekind_all[last]
    # when each node's stream predecessor let it go: what a kernel would have waited for had
    # its launch been on time (cross-stream edges are possible, not certain, dependencies)
    gpu_ready = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    on_gpu = ekind_all == EDGE_STREAM
    np.maximum.at(gpu_ready, dst_all[on_gpu], ready_all[on_gpu])
    lanes = [("stream", int(d), int(s)) for d, s in gpu_lane_uniques] + cpu_lanes
    stats = {"nodes": n, "gpu_nodes": n_gpu, "cpu_slices": n - n_gpu, "edges": len(src_all),
             "launch_edges": n_launch, "sync_edges": n_sync,
             "cross_stream_edges": int((ekind_all == EDGE_CROSS).sum()), "partial_overlaps": partial}
    return RankDAG(rank=rank, start=start, end=end, kind=kind, name_id=name_id, lane=lane,
                   source=source, row=row, parent_ptr=ptr, parent=src_all, parent_ready=ready_all,
                   parent_kind=ekind_all, critical=critical, critical_kind=critical_kind,
                   gpu_ready=gpu_ready, lanes=lanes, stats=stats, launch_note=launch_note)


def _launch_notes(cpu_ops: pd.DataFrame, launches: pd.DataFrame, gpu_nodes: np.ndarray) -> dict[int, str]:
    """GPU node -> the user's annotation around its launch call (``launches``: the calls, in the
    order of ``gpu_nodes``), as the what-if table names a kernel (docs/critical-path.md §6)."""
    notes = user_notes(cpu_ops)
    if notes.empty or not len(launches):
        return {}
    at = launches["ts_ns"].to_numpy(np.int64)
    found = notes_around(notes, at, at, launches["tid"].tolist())
    return {int(node): note for node, note in zip(gpu_nodes.tolist(), found, strict=True) if note is not None}


def _sync_sources(g: pd.DataFrame, g_lane: np.ndarray, lane_uniques: pd.Index, g_start: np.ndarray,
                  g_end: np.ndarray, sync_calls: pd.DataFrame, syncs: pd.DataFrame,
                  runtime: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each blocking sync call: the GPU node it waited for (node ids are GPU positions)."""
    by_corr = syncs[syncs["correlation"] >= 0].drop_duplicates("correlation").set_index("correlation") \
        if len(syncs) else None
    record_ts = runtime[_is_one_of(runtime["name"], {"cudaEventRecord", "hipEventRecord",
                                                     "cudaEventRecordWithFlags"})]
    record_ts = record_ts[record_ts["correlation"] >= 0].drop_duplicates("correlation") \
        .set_index("correlation")["ts_ns"]
    # launch time of each GPU node (for Event Sync: what was launched before the record)
    launch_ts = np.full(len(g), np.iinfo(np.int64).max, dtype=np.int64)
    launches = runtime[runtime["correlation"] >= 0].drop_duplicates("correlation").set_index("correlation")["ts_ns"]
    g_corr = g["correlation"].to_numpy()
    known = g_corr >= 0
    if known.any():
        found = launches.reindex(g_corr[known])
        launch_ts[np.flatnonzero(known)[found.notna().to_numpy()]] = found.dropna().to_numpy().astype(np.int64)
    end_order = np.argsort(g_end, kind="stable")
    ends_sorted = g_end[end_order]
    stream_of_lane = np.array([s for _, s in lane_uniques], dtype=np.int64) if len(lane_uniques) else np.zeros(0)
    lane_pos = {int(s): int(i) for i, s in enumerate(stream_of_lane)}
    lane_bounds = np.searchsorted(g_lane, np.arange(len(lane_uniques) + 1))
    srcs, rows, ends = [], [], []
    for call in sync_calls.itertuples():
        t_end = int(call.end_ns)
        info = by_corr.loc[call.correlation] if by_corr is not None and call.correlation in by_corr.index else None
        target = -1
        kind_ = str(info["sync_kind"]) if info is not None and not pd.isna(info["sync_kind"]) else ""
        if info is not None and kind_ == "Event Sync" and int(info["wait_on_stream"]) in lane_pos \
                and int(info["wait_on_event_corr"]) in record_ts.index:
            ln = lane_pos[int(info["wait_on_stream"])]
            lo, hi = lane_bounds[ln], lane_bounds[ln + 1]
            rec = int(record_ts.loc[int(info["wait_on_event_corr"])])
            before = np.flatnonzero(launch_ts[lo:hi] < rec)
            if before.size:
                target = lo + int(before[np.argmax(launch_ts[lo:hi][before])])
        elif info is not None and kind_ == "Stream Sync" and int(info["stream"]) in lane_pos:
            ln = lane_pos[int(info["stream"])]
            lo, hi = lane_bounds[ln], lane_bounds[ln + 1]
            k = np.searchsorted(np.maximum.accumulate(g_end[lo:hi]), t_end, side="right") - 1
            if k >= 0:
                target = lo + int(k)
        elif int(getattr(call, "stream", -1)) in lane_pos:
            ln = lane_pos[int(call.stream)]
            lo, hi = lane_bounds[ln], lane_bounds[ln + 1]
            k = np.searchsorted(np.maximum.accumulate(g_end[lo:hi]), t_end, side="right") - 1
            if k >= 0:
                target = lo + int(k)
        if target < 0:
            k = np.searchsorted(ends_sorted, t_end, side="right") - 1
            if k >= 0:
                target = int(end_order[k])
        if target >= 0:
            srcs.append(target)
            rows.append(call.Index)
            ends.append(t_end)
    return (np.asarray(srcs, dtype=np.int64), np.asarray(rows, dtype=np.int64),
            np.asarray(ends, dtype=np.int64))
