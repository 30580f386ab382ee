"""Attribution of CPU-side collectives (gloo): the straggler's main thread against the fastest rank's.

On gloo a collective runs on a worker thread of its process group (``gloo:<op>``, whose
duration includes the wait for the other members, docs/gloo.md); the rank *arrives* at it
when its main thread enqueues it (``c10d::<op>``). Nothing runs on a GPU, so the event DAG of
:mod:`evtsync.critpath.dag` has no node for it. What made a rank late is on its main thread,
between the end of the previous collective of the same group and the enqueue of this one
(docs/critical-path.md, "CPU-side collectives").

Per rank, the main thread (the thread of the ``ProfilerStep#N`` annotations) is tiled into
exclusive slices, each owned by the innermost event that covers it:

- ``cpu_op``: an operator's own time (e.g. ``aten::mm``);
- ``enqueue``: a ``c10d::*`` op's own time (preparing and enqueuing a collective), and for the
  collective being attributed, from its enqueue to its start on the worker thread;
- ``python``: a ``record_function`` annotation's or Python function's own time;
- ``python_gap``: time covered by no event but a ``ProfilerStep#N`` (or none): Python that no
  profiler event records — a bare ``sleep``, an unannotated data loader — named
  ``(python gap)`` rather than lost;
- ``collective_wait``: the main thread blocked on a collective it enqueued: from the
  collective's start on the worker thread (or the ``c10d::*`` op's end, if that is earlier) to
  the end of its ``gloo:*`` event, cut at the next main-thread event (the ``work.wait()`` is
  not profiled; on a busy CPU the main thread is often still inside the ``c10d::*`` op). It links the main thread to the worker thread's
  collective, ``(wait) <collective>``, and names it (``cause_pg``, ``cause_index``).

The straggler's slices from the previous same-group collective's end (on that rank) to this
collective's start on the worker are summed per (kind, name) and compared with the fastest
rank's (a wait in another collective against the same rank's wait in that same collective,
by its (pg, index)); the differences (``extra``) sum exactly to the straggler's lateness over the fastest
rank counted from the previous collective's end. The principal cause is the largest. Matching
by name totals rather than by occurrence keeps an extra event (a planted matmul) from shifting
every later match.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from evtsync.critpath.names import (  # noqa: F401 (names re-exported for the CPU side)
    GAP_NAME,
    JOIN_NAME,
    NAME_SEPARATOR,
    STEP_ANNOTATION,
    WAIT_PREFIX,
    user_names,
)
from evtsync.critpath.p2p import PeerCause, pair_transfers, peer_cause, peer_column, transfers
from evtsync.critpath.tasks import exact_times
from evtsync.sync.collectives import Alignment
from evtsync.sync.tax import TaxTables
from evtsync.trace.tables import C10D_P2P_NAMES, GLOO_P2P_NAMES
from evtsync.trace.traceset import TraceSet

log = logging.getLogger(__name__)

ENQUEUE_PREFIX = "(enqueue) "
#: Kinds of main-thread slices; each is also the cause category of a CPU-side collective.
CPU_SIDE_CATEGORIES = ("cpu_op", "enqueue", "python", "python_gap", "collective_wait")
_STEP = STEP_ANNOTATION
_KIND_CODE = {k: i for i, k in enumerate(CPU_SIDE_CATEGORIES)}


def collectives_are_cpu_side(traces: TraceSet) -> bool:
    """Whether the trace set's collectives are CPU-side (gloo annotations, no communication kernel)."""
    kernels = traces.kernels
    comm = traces.comm_kernels if "is_comm" in kernels.columns else traces.nccl_kernels
    if len(comm):
        return False
    names = traces.cpu_ops["name"].astype(str)
    return bool(names.str.startswith("gloo:").any())


def main_thread(ops: pd.DataFrame, *, fallback: bool = False) -> int | None:
    """The main thread of one rank's CPU ops: the thread of the ``ProfilerStep#N`` annotations,
    else the one that enqueues the most ``c10d::*`` collectives, else (with ``fallback``) the
    thread with the most events; None when there is none."""
    names = ops["name"].astype(str)
    masks = [names.str.match(_STEP.pattern), names.str.startswith("c10d::")]
    if fallback:
        masks.append(pd.Series(True, index=ops.index))
    for mask in masks:
        if mask.any():
            return int(ops.loc[mask, "tid"].value_counts().idxmax())
    return None


@dataclass
class RankTimeline:
    """One rank's main thread cut into exclusive slices, and its collectives' arrivals.

    ``slices``: start_ns, end_ns, kind (index into :data:`CPU_SIDE_CATEGORIES`), name,
    ref (row of ``arrivals`` a wait slice waits for, else -1), window — sorted by start.
    ``arrivals``: one row per collective instance of the rank: pg, index, window, collective,
    enqueue_ns (the ``c10d::*`` op's start: the arrival), enqueue_end_ns, start_ns, end_ns (the
    ``gloo:*`` event), enqueue_name.
    ``window_start``: first main-thread event of each window.
    """

    rank: int
    tid: int
    slices: pd.DataFrame
    arrivals: pd.DataFrame
    window_start: dict[int, int] = field(default_factory=dict)
    #: row of ``arrivals`` by (pg, index); rows [first, last) of ``slices`` by window
    arrival_row: dict[tuple[Any, int], int] = field(default_factory=dict)
    window_rows: dict[int, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.arrival_row = {(pg, int(i)): n for n, (pg, i) in
                            enumerate(zip(self.arrivals["pg"], self.arrivals["index"], strict=True))}
        windows = self.slices["window"].to_numpy(np.int64)
        for w in np.unique(windows).tolist():  # slices are in window order, each window's sorted by time
            rows = np.flatnonzero(windows == w)
            self.window_rows[int(w)] = (int(rows[0]), int(rows[-1]) + 1)
        self._starts = self.slices["start_ns"].to_numpy(np.int64)
        self._ends = self.slices["end_ns"].to_numpy(np.int64)

    def slice_rows(self, window: int, lo: int, hi: int) -> tuple[int, int]:
        """Rows [first, last) of ``slices`` of ``window`` that overlap [lo, hi): a window's slices
        tile its time in order, so both their starts and their ends are sorted."""
        first, last = self.window_rows.get(window, (0, 0))
        a = first + int(np.searchsorted(self._ends[first:last], lo, side="right"))
        b = first + int(np.searchsorted(self._starts[first:last], hi, side="left"))
        return a, max(a, b)


def pair_enqueues(c10d: pd.DataFrame, instances: pd.DataFrame) -> np.ndarray:
    """For each instance (sorted by start), the row of ``c10d`` (sorted by start) that enqueued it:
    in order, the first unused enqueue that started at or before it (-1 where none). Each
    ``c10d::*`` op enqueues one collective, which starts after it (docs/gloo.md §5)."""
    out = np.full(len(instances), -1, dtype=np.int64)
    c_start = c10d["ts_ns"].to_numpy(np.int64)
    j = 0
    for i, ts in enumerate(instances["ts_ns"].to_numpy(np.int64)):
        if j < len(c_start) and c_start[j] <= ts:
            out[i] = j
            j += 1
    return out


def _tile(starts: np.ndarray, ends: np.ndarray, owner_kind: list[int], owner_name: list[str],
          owner_ref: list[int], lo: int, hi: int) -> list[tuple[int, int, int, str, int]]:
    """Exclusive slices of nested events (sorted by start, longer first) over [lo, hi]: each
    instant belongs to the innermost event covering it, or to none (a Python gap)."""
    out: list[tuple[int, int, int, str, int]] = []
    gap = _KIND_CODE["python_gap"]
    stack: list[int] = []
    cursor = lo

    def emit(end: int) -> None:
        nonlocal cursor
        if end > cursor:
            if stack:
                top = stack[-1]
                out.append((cursor, end, owner_kind[top], owner_name[top], owner_ref[top]))
            else:
                out.append((cursor, end, gap, GAP_NAME, -1))
            cursor = end

    for i in range(len(starts)):
        s = int(starts[i])
        while stack and int(ends[stack[-1]]) <= s:
            emit(int(ends[stack[-1]]))
            stack.pop()
        emit(s)
        e = int(ends[i])
        if stack and e > int(ends[stack[-1]]):  # improperly nested: clip to the parent
            ends[i] = e = int(ends[stack[-1]])
        if e > s:
            stack.append(i)
    while stack:
        emit(int(ends[stack[-1]]))
        stack.pop()
    emit(hi)
    return out


#: How soon after an asynchronous collective's end (on its worker thread) the main thread must
#: run again for the uninstrumented time before it to count as the ``work.wait()`` for it
#: (docs/critical-path.md §6, "Asynchronous collectives").
WAKE_NS = 1_000_000


def _async_waits(tiles: list[tuple[int, int, int, str, int]], arrivals: pd.DataFrame,
                 rows: np.ndarray) -> list[tuple[int, int, int, str, int]]:
    """Name the ``work.wait()`` of asynchronous collectives: a Python gap that holds the end of
    collectives the rank enqueued before it, and that ends within :data:`WAKE_NS` of the last of
    those ends, was the main thread blocked on them. It becomes one ``(wait) <collective>`` slice
    per collective, up to its end (in end order), and the rest stays a gap (the wake-up)."""
    if not len(rows):
        return tiles
    enq = arrivals["enqueue_ns"].to_numpy(np.int64)[rows]
    end = arrivals["end_ns"].to_numpy(np.int64)[rows]
    coll = arrivals["collective"].astype(str).to_numpy()[rows]
    gap, wait = _KIND_CODE["python_gap"], _KIND_CODE["collective_wait"]
    out: list[tuple[int, int, int, str, int]] = []
    for t in tiles:
        a, b, kind, _, ref = t
        inside = np.flatnonzero((enq < a) & (end > a) & (end <= b)) if kind == gap and ref < 0 else \
            np.zeros(0, np.int64)
        if not len(inside) or b - int(end[inside].max()) > WAKE_NS:
            out.append(t)
            continue
        cursor = a
        for j in inside[np.argsort(end[inside], kind="stable")].tolist():
            if int(end[j]) > cursor:
                out.append((cursor, int(end[j]), wait, WAIT_PREFIX + str(coll[j]), int(rows[j])))
                cursor = int(end[j])
        if b > cursor:
            out.append((cursor, b, kind, t[3], ref))
    return out


def _work_wait_calls(starts: np.ndarray, names: np.ndarray, cats: np.ndarray, enq: np.ndarray,
                     ends: np.ndarray) -> np.ndarray:
    """Which events are the Python call of ``work.wait()`` (with_stack=True): a ``python_function``
    ``<built-in method wait of …>`` that starts after a collective's enqueue and before its end."""
    hit = (cats == "python_function") & np.char.startswith(names.astype(str), "<built-in method wait of ")
    if not hit.any() or not len(enq):
        return np.zeros(len(starts), bool)
    idx = np.flatnonzero(hit)
    t = starts[idx][:, None]
    inside = ((t > enq[None, :]) & (t < ends[None, :])).any(axis=1)
    out = np.zeros(len(starts), bool)
    out[idx[inside]] = True
    return out


def _close_p2p_enqueues(starts: np.ndarray, ends: np.ndarray, names: np.ndarray) -> np.ndarray:
    """Ends of one thread's events, where a point-to-point ``gloo:send`` / ``gloo:recv`` starts inside
    its ``c10d::send`` / ``c10d::recv_`` op and outlives it (torch 2.13 does, by a few µs): the op
    closed where the transfer starts, so that the transfer's wait is not clipped to the op and its
    time left to the enclosing step as a ``(python gap)`` (docs/critical-path.md §6)."""
    p2p = np.flatnonzero(np.isin(names, list(GLOO_P2P_NAMES)))
    ops = np.flatnonzero(np.isin(names, list(C10D_P2P_NAMES)))
    if not p2p.size or not ops.size:
        return ends
    ends = ends.copy()
    for i in p2p.tolist():
        inside = ops[(starts[ops] <= starts[i]) & (ends[ops] > starts[i]) & (ends[ops] < ends[i])]
        ends[inside] = starts[i]
    return ends


def rank_timeline(rank: int, ops: pd.DataFrame, instances: pd.DataFrame, *,
                  any_thread: bool = False) -> RankTimeline | None:
    """The main-thread timeline of one rank (``ops``: its CPU ops, ``instances``: its aligned
    collective instances: pg, index, window, collective, ts_ns, end_ns); None when it has no main
    thread (with ``any_thread``, the thread with the most events serves when nothing marks one)."""
    tid = main_thread(ops, fallback=any_thread)
    if tid is None:
        return None
    main = ops[ops["tid"].to_numpy() == tid]
    names = main["name"].astype(str).to_numpy()
    cats = main["cat"].astype(str).to_numpy()
    inst = instances.sort_values("ts_ns", kind="stable").reset_index(drop=True)
    # a collective's enqueue: a c10d op that is not point-to-point (c10d::send / recv_ enqueue no
    # collective; pairing them would hand a collective the wrong arrival, issue 46)
    is_c10d = (np.char.startswith(names.astype(str), "c10d::") & ~np.isin(names, list(C10D_P2P_NAMES))
               if len(names) else np.zeros(0, bool))
    c10d = main[is_c10d].sort_values("ts_ns", kind="stable")
    pairs = pair_enqueues(c10d, inst)
    ok = pairs >= 0
    enq = c10d.iloc[np.where(ok, pairs, 0)] if len(c10d) else c10d
    arrivals = pd.DataFrame({
        "pg": inst["pg"].to_numpy(), "index": inst["index"].to_numpy(np.int64),
        "window": inst["window"].to_numpy(np.int64) if "window" in inst else 0,
        "collective": inst["collective"].astype(str).to_numpy(),
        "enqueue_ns": np.where(ok, enq["ts_ns"].to_numpy(np.int64) if len(enq) else -1, -1),
        "enqueue_end_ns": np.where(ok, enq["end_ns"].to_numpy(np.int64) if len(enq) else -1, -1),
        "start_ns": inst["ts_ns"].to_numpy(np.int64), "end_ns": inst["end_ns"].to_numpy(np.int64),
        "enqueue_name": np.where(ok, enq["name"].astype(str).to_numpy() if len(enq) else "", ""),
    })
    windows = main["window"].to_numpy(np.int64) if "window" in main.columns else np.zeros(len(main), np.int64)
    starts_all = main["ts_ns"].to_numpy(np.int64)
    ends_all = main["end_ns"].to_numpy(np.int64)
    parts = []
    window_start = {}
    for w in np.unique(windows).tolist():
        sel = windows == w
        # with_stack=True records the Python call of work.wait() ("<built-in method wait of …>"):
        # it is the wait itself, not the thread's own work; dropped where it starts while one of the
        # rank's collectives is in flight, so that the wait below reaches the collective's end
        in_flight = ok & (arrivals["window"].to_numpy() == w)
        sel &= ~_work_wait_calls(starts_all, names, cats, arrivals["enqueue_ns"].to_numpy(np.int64)[in_flight],
                                 arrivals["end_ns"].to_numpy(np.int64)[in_flight])
        s, e, n, c = starts_all[sel], ends_all[sel], names[sel], cats[sel]
        e = _close_p2p_enqueues(s, e, n)
        # a point-to-point gloo:send / gloo:recv runs on this thread and holds it until the peer is
        # there: a wait, named "(wait) recv" / "(wait) send" (issue 46, docs/gloo.md)
        kind = [_KIND_CODE["enqueue"] if nm.startswith("c10d::") else _KIND_CODE["cpu_op"] if ct == "cpu_op"
                else _KIND_CODE["python_gap"] if _STEP.match(nm)
                else _KIND_CODE["collective_wait"] if nm in GLOO_P2P_NAMES else _KIND_CODE["python"]
                for nm, ct in zip(n.tolist(), c.tolist(), strict=True)]
        name = [GAP_NAME if _STEP.match(nm) else WAIT_PREFIX + nm.split(":", 1)[1] if nm in GLOO_P2P_NAMES else nm
                for nm in n.tolist()]
        ref = [-1] * len(kind)
        # the main thread blocked on a collective it enqueued: from the enqueue's end to the
        # collective's end, cut at the next main-thread event (an asynchronous op does not block)
        order = np.sort(s)
        a_sel = np.flatnonzero(ok & (arrivals["window"].to_numpy() == w))
        ws, we, wk, wn, wr = [], [], [], [], []
        for i in a_sel.tolist():
            # from the collective's start on the worker (inside the c10d op when the main thread
            # had not left it yet) or the c10d op's end, whichever is first
            start = max(int(arrivals.at[i, "enqueue_ns"]),
                        min(int(arrivals.at[i, "start_ns"]), int(arrivals.at[i, "enqueue_end_ns"])))
            nxt = order[np.searchsorted(order, start, side="right"):]
            end = min(int(arrivals.at[i, "end_ns"]), int(nxt[0]) if len(nxt) else int(arrivals.at[i, "end_ns"]))
            # cut where the events it starts inside end (the c10d op; with_stack=True also the Python
            # call that enqueued it), so that each piece nests in its parent
            cuts = {int(arrivals.at[i, "enqueue_end_ns"])}
            cuts.update(int(x) for x in e[(s <= start) & (e > start) & (e < end)].tolist())
            bounds = [start, *sorted(c for c in cuts if start < c < end), end]
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                if b > a:
                    ws.append(a)
                    we.append(b)
                    wk.append(_KIND_CODE["collective_wait"])
                    wn.append(WAIT_PREFIX + str(arrivals.at[i, "collective"]))
                    wr.append(i)
        all_s = np.concatenate([s, np.asarray(ws, np.int64)])
        all_e = np.concatenate([e, np.asarray(we, np.int64)])
        kinds, labels, refs = kind + wk, name + wn, ref + wr
        roles = c.tolist() + ["wait"] * len(wk)
        o = np.lexsort((-all_e, all_s))
        lo, hi = int(all_s.min()), int(all_e.max())
        window_start[w] = lo
        shown = user_names(all_s[o], all_e[o], [labels[i] for i in o], [roles[i] for i in o])
        tiles = _tile(all_s[o].copy(), all_e[o].copy(), [kinds[i] for i in o], shown,
                      [refs[i] for i in o], lo, hi)
        tiles = _async_waits(tiles, arrivals, a_sel)
        part = pd.DataFrame(tiles, columns=["start_ns", "end_ns", "kind", "name", "ref"])
        part["window"] = w
        parts.append(part)
    slices = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["start_ns", "end_ns", "kind", "name", "ref", "window"])
    return RankTimeline(rank, tid, slices, arrivals, window_start)


@dataclass
class Side:
    """One rank's part of one collective: its main-thread time per (kind, name) from the bottom
    (previous same-group collective's end, or the window start) to the collective's start."""

    totals: dict[tuple[int, str, Any], int]  # (kind, name, (pg, index) of the collective waited for or -1)
    largest: dict[tuple[int, str, Any], tuple[int, int, int]]  # key -> (start, end, ref) of its longest slice
    count: dict[tuple[int, str, Any], int]
    bottom_ns: int
    start_ns: int
    end_ns: int
    bottom: str
    n_slices: int
    slices: pd.DataFrame


def side_of(tl: RankTimeline, pg: Any, index: int) -> Side | None:
    """The rank's side of collective (pg, index), or None when it is not on this rank or its
    enqueue was not found."""
    a = tl.arrivals
    row = tl.arrival_row.get((pg, int(index)))
    if row is None or int(a["enqueue_ns"].iat[row]) < 0:
        return None
    h = a.iloc[row]
    w = int(h["window"])
    arrive, start = int(h["enqueue_ns"]), int(h["start_ns"])
    # the previous collective of the group that had ended when this one was enqueued: one still in
    # flight then (async_op=True, waited on later) bounds nothing, the one before it does
    # (docs/critical-path.md §6, "Asynchronous collectives")
    prev, k = None, int(index) - 1
    while (r := tl.arrival_row.get((pg, k))) is not None and int(a["window"].iat[r]) == w:
        if int(a["end_ns"].iat[r]) <= arrive + WAKE_NS:
            prev = r
            break
        k -= 1
    if prev is not None:
        lo, bottom = int(a["end_ns"].iat[prev]), "previous_collective"
    else:
        lo, bottom = tl.window_start.get(w, int(h["enqueue_ns"])), "window_start"
    first, last = tl.slice_rows(w, lo, arrive)
    part = tl.slices.iloc[first:last].copy()
    part["start_ns"] = part["start_ns"].clip(lower=lo)
    part["end_ns"] = part["end_ns"].clip(upper=arrive)
    enqueue = pd.DataFrame([{"start_ns": arrive, "end_ns": max(start, arrive), "kind": _KIND_CODE["enqueue"],
                             "name": ENQUEUE_PREFIX + str(h["enqueue_name"]), "ref": -1, "window": w}])
    part = pd.concat([part, enqueue], ignore_index=True)
    part = part[part["end_ns"] > part["start_ns"]]
    totals: dict[tuple[int, str, Any], int] = {}
    largest: dict[tuple[int, str, Any], tuple[int, int, int]] = {}
    count: dict[tuple[int, str, Any], int] = {}
    pgs, indices = a["pg"].tolist(), a["index"].tolist()
    for s, e, k, n, r in zip(part["start_ns"].tolist(), part["end_ns"].tolist(), part["kind"].tolist(),
                             part["name"].tolist(), part["ref"].tolist(), strict=True):
        # a wait is matched by the collective it waits for, (pg, index): the same instance on both
        # ranks whatever else each ran before it (ranks running different code, e.g. pipeline
        # stages, wait in different places; issue 46); everything else by name totals
        key = (int(k), str(n), (pgs[int(r)], int(indices[int(r)])) if r >= 0 else -1)
        totals[key] = totals.get(key, 0) + (e - s)
        count[key] = count.get(key, 0) + 1
        if key not in largest or e - s > largest[key][1] - largest[key][0]:
            largest[key] = (s, e, int(r))
    return Side(totals, largest, count, lo, start, int(h["end_ns"]), bottom, len(part), part)


def combine_sides(s: Side, f: Side, s_tl: RankTimeline, row: dict[str, Any],
                  share_band: tuple[float, float]) -> dict[tuple[int, str, Any], float]:
    """Fill a collective's row from the straggler's and the fastest rank's sides; return the
    extra time (ns) per (kind, name)."""
    keys = set(s.totals) | set(f.totals)
    extra = {k: float(s.totals.get(k, 0) - f.totals.get(k, 0)) for k in keys}
    total = sum(extra.values())
    tau = float(row["tau_max_us"])
    late = (s.start_ns - s.bottom_ns) - (f.start_ns - f.bottom_ns)
    row.update(
        path_len=s.n_slices, path_cpu_nodes=s.n_slices, path_unmatched=sum(1 for k in s.totals if k not in f.totals),
        path_bottom=s.bottom, straggler_path_us=sum(s.totals.values()) / 1000.0,
        path_extra_us=total / 1000.0, path_gpu_extra_us=0.0, path_cpu_extra_us=total / 1000.0,
        explained_share=total / 1000.0 / tau if tau > 0 else float("nan"), n_common=0, lca_name=None,
        fastest_path_us=sum(f.totals.values()) / 1000.0,
        fastest_matched_us=sum(v for k, v in f.totals.items() if k in s.totals) / 1000.0,
        unplaced_us=(late - total) / 1000.0)
    if extra:
        key = max(extra, key=lambda k: extra[k])
        if extra[key] > 0:
            kind = CPU_SIDE_CATEGORIES[key[0]]
            start, end, ref = s.largest.get(key, (-1, -1, -1))
            row.update(path_kind=kind, cause_name=key[1], cause_kind=kind,
                       cause_segment="collective_wait" if kind == "collective_wait" else "cpu_slice",
                       cause_category=kind, cause_extra_us=extra[key] / 1000.0, cause_raw_extra_us=extra[key] / 1000.0,
                       cause_duration_us=s.totals.get(key, 0) / 1000.0,
                       cause_fastest_duration_us=f.totals.get(key, 0) / 1000.0,
                       cause_occurrence=s.count.get(key, 0), cause_start_ns=start, cause_on_fastest_path=key in f.totals)
            if ref >= 0:
                row.update(cause_pg=s_tl.arrivals.at[ref, "pg"], cause_index=int(s_tl.arrivals.at[ref, "index"]))
    share = row["explained_share"]
    if share_band[0] <= share <= share_band[1]:
        row["status"] = "ok"
    else:
        row["status"] = "unexplained"
        head = f"path extra {total / 1000.0:.0f} us of tau {tau:.0f} us"
        end_skew = (f.end_ns - s.end_ns) / 1000.0
        start_skew = (s.bottom_ns - f.bottom_ns) / 1000.0
        if s.bottom == "window_start":
            row["unexplained_reason"] = (
                f"{head}: first collective of its group in the profiling window, counted from each rank's "
                f"window start, which lie {start_skew:+.0f} us apart (the straggler's minus the fastest's); "
                "record a longer window (schedule(active=...)) so that a previous collective bounds it")
        else:
            row["unexplained_reason"] = (
                f"{head}: the collective ended {end_skew:+.0f} us later on the fastest rank than on the straggler "
                f"and the previous one {start_skew:+.0f} us later on the straggler (worker threads descheduled on "
                "a busy CPU): the tax counts durations, the path the time since the previous end")
    return extra


def attribute_cpu_side(traces: TraceSet, alignment: Alignment, tax: TaxTables, pgs: set[Any], *,
                       columns: list[str], share_band: tuple[float, float], keep_paths: bool
                       ) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[Any, int], PeerCause]]:
    """Rows of the collectives table (``columns``) and the paths table for CPU-side collectives, and
    per collective whose principal cause is a point-to-point wait where its blame goes
    (:func:`p2p_routes`)."""
    inst = alignment.instances
    inst = inst[inst["pg"].isin(pgs)]
    ops = traces.cpu_ops
    ranks = ops["rank"].to_numpy()
    timelines: dict[int, RankTimeline | None] = {}

    def timeline(rank: int) -> RankTimeline | None:
        if rank not in timelines:
            timelines[rank] = rank_timeline(rank, ops[ranks == rank], inst[inst["rank"] == rank])
        return timelines[rank]

    rows, path_rows = [], []
    tax_rows = tax.collectives[tax.collectives["pg"].isin(pgs)]
    for t in tax_rows.itertuples(index=False):
        s_rank, f_rank, index = int(t.straggler_rank), int(t.fastest_rank), int(t.index)
        row: dict[str, Any] = {c: None for c in columns}
        row.update(pg=t.pg, index=index, collective=t.collective, n_ranks=int(t.n_ranks), valid=bool(t.valid),
                   tau_max_us=float(t.tau_max_us), straggler_rank=s_rank, fastest_rank=f_rank)
        rows.append(row)
        if s_rank == f_rank or t.tau_max_us <= 0:
            row["status"] = "no_tax"
            continue
        s_tl, f_tl = timeline(s_rank), timeline(f_rank)
        s = side_of(s_tl, t.pg, index) if s_tl else None
        f = side_of(f_tl, t.pg, index) if f_tl else None
        if s is None or f is None:
            row["status"] = "no_node"
            missing = s_rank if s is None else f_rank
            tl = s_tl if s is None else f_tl
            row["unexplained_reason"] = (
                f"rank {missing}: no main thread (no ProfilerStep#N annotation and no c10d::* op)" if tl is None
                else f"rank {missing}: no c10d::* enqueue on the main thread before its {t.collective} of PG {t.pg}")
            continue
        assert s_tl is not None  # s was found on it
        extra = combine_sides(s, f, s_tl, row, share_band)
        if keep_paths:
            for role, side, rank in (("straggler", s, s_rank), ("fastest", f, f_rank)):
                for step, (key, total) in enumerate(sorted(side.totals.items(), key=lambda kv: -kv[1])):
                    start, end, _ = side.largest[key]
                    other = (f if role == "straggler" else s).totals.get(key, 0)
                    path_rows.append({
                        "pg": t.pg, "index": index, "rank": rank, "role": role, "step": step, "name": key[1],
                        "kind": CPU_SIDE_CATEGORIES[key[0]], "start_ns": start, "end_ns": end,
                        "dur_us": (end - start) / 1000.0, "occurrence": side.count[key], "own_us": total / 1000.0,
                        "wait_us": 0.0, "own_fastest_us": (other if role == "straggler" else total) / 1000.0,
                        "wait_fastest_us": 0.0,
                        "extra_us": extra[key] / 1000.0 if role == "straggler" else float("nan")})
    no_main = sorted(r for r, tl in timelines.items() if tl is None)
    if no_main:
        log.warning("CPU-side attribution: rank(s) %s have no main thread (no ProfilerStep#N, no c10d::* op)", no_main)
    routes = p2p_routes(traces, rows, timeline)
    return exact_times(pd.DataFrame(rows, columns=columns), rows), pd.DataFrame(path_rows), routes


def p2p_routes(traces: TraceSet, rows: list[dict[str, Any]], timeline: Any) -> dict[tuple[Any, int], PeerCause]:
    """Per collective row whose principal cause is a point-to-point ``(wait) send`` / ``(wait) recv``
    (no collective to follow): the peer's cause (:func:`evtsync.critpath.p2p.peer_cause`), with the
    transfers of every rank paired (docs/critical-path.md §7). The peers are read only when such a
    row exists. ``timeline``: rank -> its :class:`RankTimeline` (or None)."""
    waits = [r for r in rows if r.get("cause_category") == "collective_wait" and r.get("cause_pg") is None
             and str(r.get("cause_name")).split(" ", 1)[-1] in ("send", "recv")
             and r.get("cause_start_ns") is not None and int(r["cause_start_ns"]) >= 0]
    if not waits:
        return {}
    ops = traces.cpu_ops
    ranks = ops["rank"].to_numpy()
    by_rank: dict[int, pd.DataFrame] = {}
    slices: dict[int, pd.DataFrame] = {}
    counts = []
    for rank in sorted(int(r) for r in traces.ranks["rank"].unique()):
        tl = timeline(rank)
        if tl is None:
            continue
        mine, missing = peer_column(ops[ranks == rank], traces, rank)
        by_rank[rank], not_made = transfers(mine[mine["tid"].to_numpy() == tl.tid])
        counts += [missing, not_made]
        slices[rank] = tl.slices
    pairs, _ = pair_transfers(by_rank, counts)
    return {(r["pg"], int(r["index"])): peer_cause(int(r["straggler_rank"]), int(r["cause_start_ns"]), slices,
                                                   by_rank, pairs, CPU_SIDE_CATEGORIES) for r in waits}
