"""What-if without stragglers: a counterfactual replay of the job (docs/critical-path.md §8).

Every rank's program is a *lane*: its main thread's exclusive slices (CPU-side collectives,
:func:`evtsync.critpath.cpu.rank_timeline`), or its GPU's events tiled into exclusive slices
(GPU collectives). Three things on a lane touch other ranks:

- an *arrival* at a collective (the ``c10d::*`` enqueue's start on gloo, the communication
  kernel's start on a GPU);
- a *blocking wait* for a collective: a slice that lasts until the collective ends (the main
  thread's ``(wait) …`` slice that reaches the ``gloo:*`` end; the communication kernel itself
  on a GPU lane, which the next event of the lane follows);
- everything else runs for its own duration.

A gloo point-to-point transfer whose two ends are paired (:func:`pair_p2p`, docs/critical-path.md §8,
assumption 3) is replayed as a two-member collective: arrivals at the ``c10d::send`` /
``c10d::recv_`` starts, the ``(wait) send`` / ``(wait) recv`` slices its blocking waits.

The replay moves every lane forward in time: a slice lasts its (possibly replaced) duration, a
blocking wait ends when its collective ends, and a collective ends, on each member, when its
last member has arrived plus that member's measured time from the last arrival to its end (the
transfer itself, unchanged). With the measured durations it reproduces the measured times
exactly (``replayed_step_time_ms`` = ``step_time_ms``: a check, not an assumption).

*Without stragglers*, each straggler op runs for its typical duration: the median of the same op
over all ranks and steps. *The same op* is (slice kind, name, segment), where the segment is the
ordinal of the rank's next collective within the step (0 before the step's first arrival, k after
its k-th); its value per (rank, step) is the total of its slices there (0 where it does not
occur). An op instance is a straggler op when it exceeds its typical value by more than
``max(K_SCALE × 1.4826 × MAD, FLOOR_SHARE × step time)`` (the job's own spread of that op;
the floor keeps jitter of a few µs, present everywhere, from being "fixed").
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.errors import InputError
from evtsync.core.parallel import Backend
from evtsync.critpath.cpu import CPU_SIDE_CATEGORIES, collectives_are_cpu_side, rank_timeline
from evtsync.critpath.cpushare import HostLayout, classify, parse_host_cores, replay_shared
from evtsync.critpath.members import slice_factors, window_members
from evtsync.critpath.names import notes_around, user_notes
from evtsync.critpath.p2p import pair_transfers, peer_column, transfers
from evtsync.sync.collectives import Alignment
from evtsync.trace.traceset import TraceSet

log = logging.getLogger(__name__)

#: An op instance is a straggler op above typical + max(K_SCALE × robust SD, FLOOR_SHARE × step).
K_SCALE = 5.0
FLOOR_SHARE = 0.05
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
GPU_IDLE = "(gpu idle)"
WHATIF_COLUMNS = ["rank", "cause", "annotation", "category", "n_ops", "excess_ms", "saving_ms_per_step", "saving_share"]
#: the duration model a what-if used (``WhatIfResult.durations``, docs/critical-path.md §8)
INDEPENDENT_GPU = "independent durations (GPU lanes, assumption 1)"
INDEPENDENT_CPU = ("independent durations (assumption 1): no host layout given (--host-cores), ranks sharing a core "
                   "are not modelled")
SHARED_CPU = "processor sharing between the ranks of a core (host layout: {layout})"


@dataclass
class Lane:
    """One rank's program: slices per window and the collectives it arrives at and waits for."""

    rank: int
    #: start_ns, end_ns, kind (str), name, ref (collective key index or -1), blocking (bool), window,
    #: step, segment — sorted by window, then time
    slices: pd.DataFrame
    #: collective key -> (window, arrival_ns, end_ns) on this rank
    arrivals: dict[tuple[Any, int], tuple[int, int, int]]
    #: window -> (start_ns, end_ns, n_steps) of the recorded steps on this rank
    windows: dict[int, tuple[int, int, int]]
    #: collective instances of the rank with no arrival found (no ``c10d::*`` enqueue): not replayed
    n_unpaired: int = 0
    #: the user's ``record_function`` annotations on the lane's thread (start_ns, end_ns, name), if any
    annotations: pd.DataFrame | None = None
    #: point-to-point transfers of the main thread (P2P_COLUMNS), paired across lanes by :func:`pair_p2p`
    p2p: pd.DataFrame | None = None
    #: point-to-point ops of the lane not made transfers, by reason (counts)
    p2p_not_used: dict[str, int] = field(default_factory=dict)
    #: gloo collectives: key -> (the ``c10d::*`` enqueue op's end, the ``gloo:*`` event's start on the
    #: worker), for the processor-sharing replay's hand-off (docs/critical-path.md §8)
    handoff: dict[tuple[Any, int], tuple[int, int]] = field(default_factory=dict)


@dataclass
class WhatIfResult:
    """The replay's answer (docs/critical-path.md §8)."""

    step_time_ms: float
    replayed_step_time_ms: float
    step_time_without_stragglers_ms: float
    n_steps: int
    n_ranks: int
    backend: str
    #: per (rank, cause): the step time saved by fixing that one alone (WHATIF_COLUMNS)
    table: pd.DataFrame
    #: every straggler op instance replaced: rank, window, step, segment, kind, name, duration_ms, typical_ms
    ops: pd.DataFrame
    #: what the replay could not use, by reason (counts)
    not_used: dict[str, int] = field(default_factory=dict)
    lanes: dict[int, Lane] = field(default_factory=dict, repr=False)
    #: the duration model used (INDEPENDENT_GPU, INDEPENDENT_CPU or SHARED_CPU with the layout)
    durations: str = INDEPENDENT_GPU
    #: the host layout of the processor-sharing model (None: durations independent)
    layout: HostLayout | None = None
    #: with a layout: how the slices that may sleep were judged (docs/critical-path.md §8)
    cpu_sharing: dict[str, Any] = field(default_factory=dict)

    def run(self, scale: dict[tuple[int, int, int, int, str, str], float] | None = None) -> dict[int, dict[int, int]]:
        """Replay the lanes with the result's duration model (``scale`` as in :func:`replay`)."""
        return replay(self.lanes, scale) if self.layout is None else replay_shared(self.lanes, self.layout, scale)

    def saving_of(self, ops: pd.DataFrame) -> float:
        """The step time (ms per step) saved by fixing only ``ops`` (rows of :attr:`ops`) together."""
        if ops.empty:
            return 0.0
        return self.replayed_step_time_ms - mean_step_ms(self.lanes, self.run(_scales(ops)))[0]

    @property
    def slowdown(self) -> float:
        """S = T_actual / T_without (1.0: no straggler costs anything)."""
        return self.step_time_ms / self.step_time_without_stragglers_ms \
            if self.step_time_without_stragglers_ms > 0 else float("nan")

    @property
    def saving_ms_per_step(self) -> float:
        """T_actual − T_without, ms per step."""
        return self.step_time_ms - self.step_time_without_stragglers_ms

    def summary(self) -> dict[str, Any]:
        """The per-job numbers for summary.json."""
        return {"step_time_ms": round(self.step_time_ms, 3),
                "step_time_without_stragglers_ms": round(self.step_time_without_stragglers_ms, 3),
                "slowdown": round(self.slowdown, 4), "replayed_step_time_ms": round(self.replayed_step_time_ms, 3),
                "whatif_rank_steps": self.n_steps, "whatif_backend": self.backend,
                "whatif_durations": self.durations,
                "whatif_host_cores": None if self.layout is None else self.layout.spec,
                **({"whatif_cpu_sharing": dict(self.cpu_sharing)} if self.cpu_sharing else {}),
                "whatif_not_used": dict(self.not_used)}


@dataclass
class FirstScreen:
    """The data of the report's first-screen sentence: "without its stragglers this job would take
    ``without_ms`` per step instead of ``actual_ms`` (−``reduction_pct`` %); fixing ``top_cause`` on
    rank ``top_rank`` alone saves ``top_saving_ms``"."""

    actual_ms: float
    without_ms: float
    reduction_pct: float
    slowdown: float
    top_rank: int | None
    top_cause: str | None
    #: the user's ``record_function`` around the top cause (``expert_mm`` for ``aten::mm``), or None
    top_annotation: str | None
    top_category: str | None
    top_saving_ms: float | None


def first_screen(result: WhatIfResult) -> FirstScreen:
    """The first-screen sentence's numbers (rendering is the report's)."""
    top = result.table.iloc[0] if len(result.table) else None
    pct = 100.0 * result.saving_ms_per_step / result.step_time_ms if result.step_time_ms > 0 else float("nan")
    return FirstScreen(actual_ms=result.step_time_ms, without_ms=result.step_time_without_stragglers_ms,
                       reduction_pct=pct, slowdown=result.slowdown,
                       top_rank=None if top is None else int(top["rank"]),
                       top_cause=None if top is None else str(top["cause"]),
                       top_annotation=None if top is None or pd.isna(top["annotation"]) else str(top["annotation"]),
                       top_category=None if top is None else str(top["category"]),
                       top_saving_ms=None if top is None else float(top["saving_ms_per_step"]))


# --------------------------------------------------------------------------- lanes

def _steps_of(ops: pd.DataFrame) -> pd.DataFrame:
    """The ``ProfilerStep#N`` annotations of one rank: window, step, ts_ns, end_ns (sorted)."""
    names = ops["name"].astype(str)
    hit = names.str.match(_STEP.pattern).to_numpy()
    st = ops[hit]
    out = pd.DataFrame({"window": st["window"].to_numpy(np.int64) if "window" in st else 0,
                        "step": names[hit].str.extract(_STEP.pattern)[0].astype(np.int64).to_numpy(),
                        "ts_ns": st["ts_ns"].to_numpy(np.int64), "end_ns": st["end_ns"].to_numpy(np.int64)})
    return out.sort_values("ts_ns", kind="stable").drop_duplicates("step").reset_index(drop=True)


def _label_steps(slices: pd.DataFrame, steps: pd.DataFrame, arrival_ns: np.ndarray) -> pd.DataFrame:
    """Add each slice's step (the ProfilerStep its start lies in, -1 outside) and segment (arrivals
    of the rank in that step before the slice's start)."""
    s = slices["start_ns"].to_numpy(np.int64)
    i = np.searchsorted(steps["ts_ns"].to_numpy(np.int64), s, side="right") - 1
    inside = (i >= 0) & (s < steps["end_ns"].to_numpy(np.int64)[np.clip(i, 0, None)]) if len(steps) else \
        np.zeros(len(s), bool)
    step = np.where(inside, steps["step"].to_numpy(np.int64)[np.clip(i, 0, None)] if len(steps) else -1, -1)
    step_start = np.where(inside, steps["ts_ns"].to_numpy(np.int64)[np.clip(i, 0, None)] if len(steps) else 0, 0)
    arr = np.sort(arrival_ns)
    seg = np.searchsorted(arr, s, side="right") - np.searchsorted(arr, step_start, side="left")
    return slices.assign(step=step, segment=np.where(inside, seg, -1))


def _cpu_lane(rank: int, ops: pd.DataFrame, inst: pd.DataFrame) -> Lane | None:
    """A CPU-side (gloo) rank's lane: its main thread's slices."""
    tl = rank_timeline(rank, ops, inst)
    steps = _steps_of(ops)
    if tl is None or steps.empty:
        return None
    a = tl.arrivals
    keys = list(zip(a["pg"], a["index"].astype(int), strict=True))
    ok = a["enqueue_ns"].to_numpy(np.int64) >= 0
    arrivals = {k: (int(w), int(e), int(end)) for k, w, e, end, good in
                zip(keys, a["window"], a["enqueue_ns"], a["end_ns"], ok, strict=True) if good}
    handoff = {k: (int(ee), int(st)) for k, ee, st, good in
               zip(keys, a["enqueue_end_ns"], a["start_ns"], ok, strict=True) if good}
    sl = tl.slices.copy()
    ref = sl["ref"].to_numpy(np.int64)
    ends = a["end_ns"].to_numpy(np.int64)
    blocking = (ref >= 0) & (sl["end_ns"].to_numpy(np.int64) >= ends[np.clip(ref, 0, None)])
    sl["kind"] = [CPU_SIDE_CATEGORIES[k] for k in sl["kind"].tolist()]
    sl["ref_key"] = [keys[r] if r >= 0 and ok[r] else None for r in ref.tolist()]
    sl["blocking"] = blocking & np.array([k is not None for k in sl["ref_key"]], dtype=bool)
    sl = _label_steps(sl, steps, a["enqueue_ns"].to_numpy(np.int64)[ok])
    main = ops[ops["tid"].to_numpy() == tl.tid]
    notes = user_notes(main)
    p2p, p2p_not_used = transfers(main)
    return Lane(rank, sl, arrivals, _windows(steps), n_unpaired=int((~ok).sum()), annotations=notes,
                p2p=p2p, p2p_not_used=p2p_not_used, handoff=handoff)


def pair_p2p(lanes: dict[int, Lane]) -> dict[str, int]:
    """Pair the lanes' point-to-point transfers (:func:`evtsync.critpath.p2p.pair_transfers`) and
    make each pair an edge of the replay (docs/critical-path.md §8, assumption 3). Each pair is a
    two-member "collective" of the replay, keyed ``(("p2p", src, dst, window), k)``: its arrivals are
    the ``c10d::send`` / ``c10d::recv_`` starts, and each end's ``(wait) send`` / ``(wait) recv``
    slice that reaches its transfer's end is a blocking wait — except an end that finished before the
    peer arrived (measured: it did not wait for the peer, e.g. an eager send), which keeps its own
    duration. Returns the transfers left unpaired, by reason (counts); they stay slices of their
    measured duration."""
    pairs, not_used = pair_transfers({r: lane.p2p for r, lane in lanes.items()},
                                     [lane.p2p_not_used for lane in lanes.values()])
    marks: dict[int, list[tuple[int, int, tuple[Any, int], bool]]] = {r: [] for r in lanes}
    for pair in pairs:
        sent, got = lanes[pair.src].p2p, lanes[pair.dst].p2p
        assert sent is not None and got is not None  # paired: both ends hold transfers
        a, b = sent.iloc[pair.send_row], got.iloc[pair.recv_row]
        key = (("p2p", pair.src, pair.dst, pair.window), pair.k)
        last = max(int(a["arrival_ns"]), int(b["arrival_ns"]))
        for r, t in ((pair.src, a), (pair.dst, b)):
            lanes[r].arrivals[key] = (pair.window, int(t["arrival_ns"]), int(t["end_ns"]))
            # the transfer starts where its gloo:send / gloo:recv starts (the op is closed there)
            lanes[r].handoff[key] = (int(t["start_ns"]), int(t["start_ns"]))
            marks[r].append((int(t["start_ns"]), int(t["end_ns"]), key, int(t["end_ns"]) >= last))
    for r, ms in marks.items():
        if not ms:
            continue
        sl = lanes[r].slices
        s, e = sl["start_ns"].to_numpy(np.int64), sl["end_ns"].to_numpy(np.int64)
        wait = (sl["kind"].to_numpy() == "collective_wait") & sl["ref_key"].isna().to_numpy()
        ref = sl["ref_key"].tolist()
        blocking = sl["blocking"].to_numpy(bool).copy()
        for t0, t1, key, waits in ms:
            hit = np.flatnonzero(wait & (s >= t0) & (e <= t1))
            for i in hit.tolist():
                ref[i] = key
                blocking[i] = waits and e[i] >= t1
        lanes[r].slices = sl.assign(ref_key=ref, blocking=blocking)
    return not_used


def annotation_of(lane: Lane, rows: pd.DataFrame) -> str | None:
    """The user's annotation around straggler op instances ``rows`` of one lane: per slice the
    innermost ``record_function`` covering it (not the slice's own event), the one holding the most
    time; None when none covers them (docs/critical-path.md §8)."""
    notes = lane.annotations
    if notes is None or notes.empty or rows.empty:
        return None
    sl = lane.slices.merge(rows[["window", "step", "segment", "kind", "name"]].drop_duplicates(),
                           on=["window", "step", "segment", "kind", "name"])
    # a kernel (GPU lane): the annotation around its launch, on the launching thread
    gpu = "launch_ns" in sl
    if gpu:
        sl = sl[sl["launch_ns"].to_numpy(np.int64) >= 0]
        at = sl["launch_ns"].to_numpy(np.int64)
        found = notes_around(notes, at, at, sl["launch_tid"].tolist())
    else:
        found = notes_around(notes, sl["start_ns"].to_numpy(np.int64), sl["end_ns"].to_numpy(np.int64),
                             own=sl["name"].astype(str).tolist())
    held: dict[str, int] = {}
    for note, t0, t1 in zip(found, sl["start_ns"].to_numpy(np.int64), sl["end_ns"].to_numpy(np.int64), strict=True):
        if note is not None:
            held[note] = held.get(note, 0) + int(t1 - t0)
    return max(held, key=lambda k: held[k]) if held else None


def _windows(steps: pd.DataFrame) -> dict[int, tuple[int, int, int]]:
    return {int(w): (int(g["ts_ns"].min()), int(g["end_ns"].max()), len(g)) for w, g in steps.groupby("window")}


def _gpu_lane(rank: int, ops: pd.DataFrame, kernels: pd.DataFrame, inst: pd.DataFrame,
              runtime: pd.DataFrame | None = None) -> Lane | None:
    """A GPU rank's lane: its GPU events in start order tiled into exclusive slices (overlapping time
    belongs to the event that started first; one wholly inside another is dropped; uncovered time is
    ``(gpu idle)``), communication kernels as blocking waits. Each kernel slice keeps its launch's
    CPU time and thread (``launch_ns``, ``launch_tid``; -1 where no launch pairs by correlation), so
    that the user's annotation around the launch names it."""
    steps = _steps_of(ops)
    if steps.empty or kernels.empty:
        return None
    launch: dict[tuple[int, int], tuple[int, Any]] = {}
    if runtime is not None and len(runtime) and "correlation" in runtime:
        r_win = runtime["window"].to_numpy(np.int64) if "window" in runtime else np.zeros(len(runtime), np.int64)
        for w_, c_, t_, tid_ in zip(r_win, runtime["correlation"].to_numpy(np.int64),
                                    runtime["ts_ns"].to_numpy(np.int64), runtime["tid"].to_numpy(), strict=True):
            if c_ >= 0:
                launch[(int(w_), int(c_))] = (int(t_), tid_)
    key_of = {(int(s), int(t)): (pg, int(i)) for pg, i, s, t in
              zip(inst["pg"], inst["index"], inst["stream"], inst["ts_ns"], strict=True)}
    arrivals = {(pg, int(i)): (int(w), int(t), int(e)) for pg, i, w, t, e in
                zip(inst["pg"], inst["index"], inst["window"], inst["ts_ns"], inst["end_ns"], strict=True)}
    rows: list[tuple[int, int, str, str, tuple[Any, int] | None, bool, int, int, Any]] = []
    for (w, g) in steps.groupby("window"):
        lo, hi = int(g["ts_ns"].min()), int(g["end_ns"].max())
        k = kernels[(kernels["window"].to_numpy() == w) if "window" in kernels else slice(None)]
        k = k.sort_values(["ts_ns", "end_ns"], kind="stable")
        cursor = lo
        flag = k["is_comm"] if "is_comm" in k else k["is_nccl"]
        corr = k["correlation"].to_numpy(np.int64) if "correlation" in k else np.full(len(k), -1, np.int64)
        for s, e, name, stream, is_c, c in zip(k["ts_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64),
                                              k["name"].astype(str).tolist(), k["stream"].to_numpy(),
                                              flag.fillna(False).to_numpy(bool), corr, strict=True):
            s, e = max(int(s), cursor), int(e)
            if e <= cursor or s >= hi:
                continue
            if s > cursor:
                rows.append((cursor, s, "gpu_idle", GPU_IDLE, None, False, int(w), -1, None))
            key = key_of.get((int(stream), int(s))) if is_c else None
            at, tid = launch.get((int(w), int(c)), (-1, None))
            rows.append((s, min(e, hi), "communication" if is_c else "kernel", name, key, key is not None, int(w),
                         at, tid))
            cursor = min(e, hi)
        if cursor < hi:
            rows.append((cursor, hi, "gpu_idle", GPU_IDLE, None, False, int(w), -1, None))
    sl = pd.DataFrame(rows, columns=["start_ns", "end_ns", "kind", "name", "ref_key", "blocking", "window",
                                     "launch_ns", "launch_tid"])
    arr = np.array([v[1] for v in arrivals.values()], dtype=np.int64)
    sl = _label_steps(sl, steps, arr)
    return Lane(rank, sl, arrivals, _windows(steps), annotations=user_notes(ops))


def _cpu_side(traces: TraceSet, instances: pd.DataFrame) -> bool:
    """Whether the collectives are CPU-side (gloo), as attribution decides it."""
    return bool(len(instances)) and bool(instances["correlation"].eq(-1).all()) and collectives_are_cpu_side(traces)


def lane_of(rank: int, traces: TraceSet, instances: pd.DataFrame, cpu: bool) -> Lane | None:
    """One rank's lane from a trace set holding that rank (``instances``: its aligned collectives)."""
    ops = traces.cpu_ops
    ops = ops[ops["rank"].to_numpy() == rank] if traces.ranks["rank"].nunique() > 1 else ops
    if cpu:
        ops, missing = peer_column(ops, traces, rank)
        lane = _cpu_lane(rank, ops, instances)
        if lane is not None:
            for k, v in missing.items():
                lane.p2p_not_used[k] = lane.p2p_not_used.get(k, 0) + v
        return lane
    kernels = traces.kernels
    runtime = traces.runtime
    if traces.ranks["rank"].nunique() > 1:
        kernels = kernels[kernels["rank"].to_numpy() == rank]
        runtime = runtime[runtime["rank"].to_numpy() == rank]
    return _gpu_lane(rank, ops, kernels, instances, runtime)


@dataclass
class LaneWork:
    """A per-rank task (Dask or a process pool): read one rank's trace and build its lane."""

    rank: int
    paths: list[str]
    instances: pd.DataFrame
    cpu: bool
    read_options: dict[str, Any] = field(default_factory=dict)


def lane_task(work: LaneWork) -> Lane | None:
    """Build one rank's lane from its own trace file (runs on a worker)."""
    from evtsync.trace.traceset import load_traces

    traces = load_traces(list(work.paths), jobs=1, **work.read_options)
    return lane_of(work.rank, traces, work.instances, work.cpu)


def build_lanes(traces: TraceSet, instances: pd.DataFrame, *, backend: Backend | None = None,
                paths: dict[int, list[str]] | None = None, read_options: dict[str, Any] | None = None,
                cpu: bool | None = None) -> tuple[dict[int, Lane], str, dict[str, int]]:
    """Every rank's lane, the backend kind (``cpu`` / ``gpu``) and the ranks left out by reason.

    With ``backend`` and ``paths`` (rank -> its trace files, one per profiling window) each lane is built by a task that reads
    its own rank; else from ``traces`` here.
    """
    cpu = _cpu_side(traces, instances) if cpu is None else cpu
    ranks = sorted(int(r) for r in traces.ranks["rank"])
    by_rank = {r: instances[instances["rank"].to_numpy() == r] for r in ranks}
    if backend is not None and paths:
        works = [LaneWork(r, paths[r], by_rank[r], cpu, dict(read_options or {})) for r in ranks]
        built = dict(zip(ranks, backend.map(lane_task, works, "what-if: lanes"), strict=True))
    else:
        built = {r: lane_of(r, traces, by_rank[r], cpu) for r in ranks}
    lanes = {r: lane for r, lane in built.items() if lane is not None}
    not_used: dict[str, int] = {}
    if len(lanes) < len(built):
        not_used["ranks without ProfilerStep#N steps or a main thread / GPU events"] = len(built) - len(lanes)
    not_used.update(pair_p2p(lanes))
    return lanes, "cpu" if cpu else "gpu", not_used


# --------------------------------------------------------------------------- typical durations

def op_instances(lanes: dict[int, Lane]) -> pd.DataFrame:
    """Per (rank, window, step, segment, kind, name): the total of its slices (ns), with 0 rows for
    ops of a segment that do not occur in it on some (rank, step); waits and idle-for-collective
    slices are not ops (their time is the others' doing)."""
    parts = []
    for lane in lanes.values():
        sl = lane.slices
        # (a wait with no collective to wait for — a point-to-point send/recv, a collective whose
        # enqueue was not found — is still a wait)
        sl = sl[(sl["step"] >= 0) & sl["ref_key"].isna() & (sl["kind"] != "collective_wait")]
        if sl.empty:
            continue
        cols = ["dur", "amount"] if "amount" in sl else ["dur"]
        g = sl.assign(dur=sl["end_ns"] - sl["start_ns"]).groupby(
            ["window", "step", "segment", "kind", "name"], sort=False)[cols].sum().reset_index()
        g["rank"] = lane.rank
        parts.append(g)
    if not parts:
        return pd.DataFrame(columns=["rank", "window", "step", "segment", "kind", "name", "dur"])
    found = pd.concat(parts, ignore_index=True)
    # every (rank, step) that has the segment holds every op of that segment (0 where absent)
    where = found[["rank", "window", "step", "segment"]].drop_duplicates()
    ops = found[["segment", "kind", "name"]].drop_duplicates()
    full = where.merge(ops, on="segment")
    out = full.merge(found, on=["rank", "window", "step", "segment", "kind", "name"], how="left")
    out["dur"] = out["dur"].fillna(0).astype(np.int64)
    if "amount" in out:
        out["amount"] = out["amount"].fillna(0.0).astype(np.float64)
    return out


def straggler_ops(instances: pd.DataFrame, step_ns: float, *, k_scale: float = K_SCALE,
                  floor_share: float = FLOOR_SHARE) -> pd.DataFrame:
    """The op instances above their typical duration by more than the threshold (module doc), with
    ``typical`` (ns) and ``excess`` (ns). With an ``amount`` column (the processor-sharing model: an
    op's CPU work where it is busy, else its wall time) the amount is compared instead of the
    duration, and ``typical_amount`` is its median (``typical`` stays the median wall time)."""
    if instances.empty:
        return instances.assign(typical=[], excess=[])
    keys = [instances["segment"], instances["kind"], instances["name"]]
    value = "amount" if "amount" in instances else "dur"
    typical = instances.groupby(keys)[value].transform("median")
    mad = (instances[value] - typical).abs().groupby(keys).transform("median")
    threshold = np.maximum(k_scale * 1.4826 * mad, floor_share * step_ns)
    out = instances.assign(typical=instances.groupby(keys)["dur"].transform("median"), excess=instances[value] - typical)
    if value == "amount":
        out["typical_amount"] = typical
    return out[out["excess"] > threshold].reset_index(drop=True)


# --------------------------------------------------------------------------- replay



def replay(lanes: dict[int, Lane], scale: dict[tuple[int, int, int, int, str, str], float] | None = None,
           record: dict[str, Any] | None = None) -> dict[int, dict[int, int]]:
    """Replay the lanes; ``scale`` maps (rank, window, step, segment, kind, name) to the factor on
    those slices' durations (1 where absent). Returns per rank per window the replayed end (ns);
    ``record`` (a dict) receives the replayed ``arrived`` and ``ended`` times per collective."""
    scale = scale or {}
    out: dict[int, dict[int, int]] = {r: {} for r in lanes}
    windows = sorted({w for lane in lanes.values() for w in lane.windows})
    for w in windows:
        members = window_members(lanes, w)
        state = {}
        for r, lane in lanes.items():
            if w not in lane.windows:
                continue
            sl = lane.slices[lane.slices["window"].to_numpy() == w]
            arr_keys = sorted(((t, k) for k, (win, t, _) in lane.arrivals.items() if win == w), key=lambda x: x[0])
            starts = sl["start_ns"].to_numpy(np.int64)
            # the arrival happens before the first slice starting at or after it
            arr_at: dict[int, list[tuple[Any, int]]] = {}
            for t, k in arr_keys:
                arr_at.setdefault(int(np.searchsorted(starts, t, side="left")), []).append(k)
            f = slice_factors(sl, r, w, scale)
            state[r] = {"i": 0, "t": int(lane.windows[w][0]), "n": len(sl), "arr_at": arr_at,
                        "dur": (sl["end_ns"] - sl["start_ns"]).to_numpy(np.float64) * f,
                        "ref": sl["ref_key"].tolist(), "blocking": sl["blocking"].to_numpy(bool),
                        "start": starts, "end": sl["end_ns"].to_numpy(np.int64)}
        arrived: dict[tuple[Any, int], dict[int, float]] = {}
        ended: dict[tuple[Any, int], dict[int, float]] = {}
        last_arrival: dict[tuple[Any, int], int] = {}  # measured last arrival of each collective
        for key, ranks in members.items():
            last_arrival[key] = max(lanes[r].arrivals[key][1] for r in ranks)
        progress = True
        while progress:
            progress = False
            for r, s in state.items():
                while True:
                    for key in s["arr_at"].pop(s["i"], []):
                        arrived.setdefault(key, {})[r] = s["t"]
                        if len(arrived[key]) == len(members[key]):
                            t_last = max(arrived[key].values())
                            ended[key] = {m: t_last + (lanes[m].arrivals[key][2] - last_arrival[key])
                                          for m in members[key]}
                        progress = True
                    if s["i"] >= s["n"]:
                        break
                    i = s["i"]
                    ref = s["ref"][i]
                    if ref is not None and s["blocking"][i]:
                        if ref not in ended:
                            break  # blocked until the collective's last member arrives
                        s["t"] = max(s["t"], ended[ref][r])
                    else:
                        s["t"] += s["dur"][i]
                    s["i"] += 1
                    progress = True
        if record is not None:
            record.setdefault("arrived", {}).update(arrived)
            record.setdefault("ended", {}).update(ended)
        for r, s in state.items():
            if s["i"] < s["n"]:
                if record is not None:
                    record.setdefault("blocked", []).append((r, w))
                log.warning("what-if replay: rank %d window %d blocked at slice %d of %d (a collective whose "
                            "members never all arrive); its window is counted from there", r, w, s["i"], s["n"])
            out[r][w] = int(s["t"])
    return out


def mean_step_ms(lanes: dict[int, Lane], ends: dict[int, dict[int, int]] | None) -> tuple[float, int]:
    """Mean step time (ms) over ranks and recorded steps: per rank per window (end − start) / steps,
    the end measured (``ends`` None) or replayed."""
    total, steps = 0.0, 0
    for r, lane in lanes.items():
        for w, (start, end, n) in lane.windows.items():
            stop = end if ends is None else ends[r].get(w, end)
            total += stop - start
            steps += n
    return (total / steps / 1e6 if steps else float("nan")), steps


_OP_KEYS = ("rank", "window", "step", "segment", "kind", "name")


def _scales(rows: pd.DataFrame) -> dict[tuple[int, int, int, int, str, str], float]:
    """Replay factors that bring each op instance of ``rows`` to its typical duration (its typical
    amount under the processor-sharing model)."""
    if "amount_ms" in rows or "amount" in rows:
        dur = rows["amount_ms"] if "amount_ms" in rows else rows["amount"]
        typ = rows["typical_amount_ms"] if "typical_amount_ms" in rows else rows["typical_amount"]
    else:
        dur = rows["duration_ms"] if "duration_ms" in rows else rows["dur"]
        typ = rows["typical_ms"] if "typical_ms" in rows else rows["typical"]
    return {(int(r), int(w), int(st), int(sg), str(k), str(n)): (t / d if d > 0 else 1.0)
            for r, w, st, sg, k, n, t, d in zip(*(rows[c] for c in _OP_KEYS), typ, dur, strict=True)}


def what_if(traces: TraceSet, instances: pd.DataFrame | Alignment, *, k_scale: float = K_SCALE,
            floor_share: float = FLOOR_SHARE, backend: Backend | None = None,
            paths: dict[int, list[str]] | None = None, read_options: dict[str, Any] | None = None,
            cpu: bool | None = None, host_cores: HostLayout | str | None = None) -> WhatIfResult:
    """Replay the job with its straggler ops at their typical duration (module doc).

    ``instances``: the aligned collective instances (``Alignment.instances`` or the alignment).
    ``backend`` + ``paths``: build each rank's lane in a task reading its own file (Dask, a pool);
    ``traces`` then needs only the collectives. ``host_cores`` (a CPU-side job only): the host's
    layout (:func:`evtsync.critpath.cpushare.parse_host_cores` spec or a :class:`HostLayout`): the
    replay then models the ranks of a core sharing it (docs/critical-path.md §8, "Ranks sharing
    cores"); without it durations are independent (assumption 1). Raises :class:`InputError` when no
    rank has recorded steps to replay, or for a layout on a GPU job or one that does not fit the ranks.
    """
    inst = instances.instances if isinstance(instances, Alignment) else instances
    lanes, kind, not_used = build_lanes(traces, inst, backend=backend, paths=paths, read_options=read_options,
                                        cpu=cpu)
    if not lanes:
        raise InputError("what-if: no rank has ProfilerStep#N steps and a main thread or GPU events to replay")
    layout: HostLayout | None = None
    sharing: dict[str, Any] = {}
    durations = INDEPENDENT_CPU if kind == "cpu" else INDEPENDENT_GPU
    if host_cores is not None:
        if kind != "cpu":
            raise InputError("--host-cores: the CPU-sharing model applies to CPU-side (gloo) collectives; these "
                             "traces' collectives run on the GPU")
        layout = host_cores if isinstance(host_cores, HostLayout) else parse_host_cores(host_cores, sorted(lanes))
        missing = sorted(set(lanes) - set(layout.group_of()))
        if missing:
            raise InputError(f"--host-cores {layout.spec!r}: rank(s) {missing} of the traces are in no group")
        judged = classify(lanes, layout)
        for r, lane in lanes.items():
            lane.slices = lane.slices.assign(busy=judged.busy[r], amount=judged.work[r])
        durations = SHARED_CPU.format(layout=layout.describe())
        sharing = {"undecided_slices": judged.n_undecided, "judged_by_core_mates": judged.n_decided,
                   "judged_not_busy": judged.n_idle, "not_busy_ms": round(judged.idle_ms, 3)}

    def run(scale: dict[tuple[int, int, int, int, str, str], float] | None = None,
            record: dict[str, Any] | None = None) -> dict[int, dict[int, int]]:
        return replay(lanes, scale, record) if layout is None else replay_shared(lanes, layout, scale, record)

    measured, n_steps = mean_step_ms(lanes, None)
    check: dict[str, Any] = {}
    base = mean_step_ms(lanes, run(record=check))[0]
    unpaired = sum(lane.n_unpaired for lane in lanes.values())
    if unpaired:
        not_used["collective instances without a c10d::* enqueue on the main thread (no arrival replayed)"] = unpaired
    if check.get("blocked"):
        not_used["rank-windows whose replay stopped at a collective whose members never all arrived"] = \
            len(check["blocked"])
    inst = op_instances(lanes)
    strag = straggler_ops(inst, measured * 1e6, k_scale=k_scale, floor_share=floor_share)
    without = mean_step_ms(lanes, run(_scales(strag)))[0]
    saving_all = base - without
    rows = []
    for (rank, category, name), g in strag.groupby(["rank", "kind", "name"], sort=False):
        alone = mean_step_ms(lanes, run(_scales(g)))[0]
        rows.append({"rank": int(rank), "cause": str(name), "annotation": annotation_of(lanes[int(rank)], g),
                     "category": str(category), "n_ops": len(g),
                     "excess_ms": float(g["excess"].sum()) / 1e6, "saving_ms_per_step": base - alone})
    table = pd.DataFrame(rows, columns=WHATIF_COLUMNS[:-1])
    table["saving_share"] = table["saving_ms_per_step"] / saving_all if saving_all > 0 else float("nan")
    table = table.sort_values("saving_ms_per_step", ascending=False, kind="stable").reset_index(drop=True)
    ops = strag.assign(duration_ms=strag["dur"] / 1e6, typical_ms=strag["typical"] / 1e6)
    extra = []
    if layout is not None:  # the CPU work (ms of one core; the wall time where not busy) that the replay scales
        ops = ops.assign(amount_ms=ops["amount"] / 1e6, typical_amount_ms=ops["typical_amount"] / 1e6)
        extra = ["amount_ms", "typical_amount_ms"]
    ops = ops[list(_OP_KEYS) + ["duration_ms", "typical_ms", *extra]]
    if abs(base - measured) > 1e-3 * max(measured, 1.0):
        log.warning("what-if replay: the replay with measured durations gives %.3f ms per step against %.3f ms "
                    "measured", base, measured)
    # the saving applies to the measured step: T_without = T_actual − (replayed − replayed without)
    return WhatIfResult(step_time_ms=measured, replayed_step_time_ms=base,
                        step_time_without_stragglers_ms=measured - saving_all, n_steps=n_steps,
                        n_ranks=len(lanes), backend=kind, table=table, ops=ops, not_used=not_used, lanes=lanes,
                        durations=durations, layout=layout, cpu_sharing=sharing)
