"""Per-rank time breakdown of a profiled window: where each rank's GPU time went.

The synchronization tax is a share of something: this module gives the something. For each
rank (and profiling window, when the set has several) the GPU span — from the first GPU
event's start to the last one's end, on any stream — is cut into disjoint parts, so that

    compute_only + compute_comm_overlap + sync_wait + comm_only + cpu_bound_idle + idle = span

holds exactly (up to float rounding of nanoseconds to µs). At each instant, in this order:

- ``compute_comm_overlap``: a compute event (kernel, memcpy, memset that is not a collective)
  and a collective kernel run at once, on different streams;
- ``compute_only``: compute runs, no collective;
- ``sync_wait``: only collectives run, and the instant lies inside a collective's *waiting
  part* — its first ``d_r − min d`` of duration (methodology §3: a rank whose kernel is longer
  arrived earlier and waits inside it for the straggler). This is the exposed tax;
- ``comm_only``: only collectives run, outside their waiting parts (the transfer itself);
- ``cpu_bound_idle``: no GPU work, while the host runs an operator or a CUDA runtime call
  (``cpu_op``, ``cuda_runtime``, ``cuda_driver``): the GPU waits for the CPU;
- ``idle``: neither.

``tax_wait_us`` is the union of all waiting parts, exposed or hidden behind compute, so
``sync_wait_us <= tax_wait_us``; ``sync_wait_share`` is ``sync_wait_us / span_us``. Only
collectives aligned across ranks have a waiting part: a collective the alignment could not
match counts as ``comm`` and the row says how many there were (``unaligned_collectives``).
Python annotations (``user_annotation``, ``python_function``, ``ProfilerStep#N``) do not count
as CPU work, since they enclose the idle time as well.

**Without GPU events** (a CPU-only gloo job, a trace without a device activity; ``timeline =
"cpu"``) the span is the main thread's (the thread of the ``ProfilerStep#N`` annotations, see
:mod:`evtsync.critpath.cpu`), from its first event to its last, tiled into exclusive slices;
the same parts then mean: ``compute`` — operators' own time (``cpu_op``), overlapping a
collective of the rank (asynchronous) or not; ``sync_wait`` — a collective of the rank runs
(its ``gloo:*`` event or its ``c10d::*`` enqueue) inside its waiting part; ``comm_only`` — the
rest of the collective's time; ``cpu_bound_idle`` — annotated Python (``record_function`` or
Python function self time); ``idle`` — uninstrumented Python, time no event covers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

#: The parts of the span, in the order they are assigned (see the module docstring).
PARTS = ("compute_comm_overlap", "compute_only", "sync_wait", "comm_only", "cpu_bound_idle", "idle")
BREAKDOWN_COLUMNS = [
    "rank", "window", "start_ns", "end_ns", "span_us",
    *(f"{p}_us" for p in PARTS),
    "tax_wait_us", "sync_wait_share", "compute_share", "comm_share", "idle_share",
    "n_compute_events", "n_collectives", "unaligned_collectives", "n_profiler_steps", "timeline",
]
#: CPU categories that mean the host is busy (annotations enclose idle time too).
CPU_BUSY_CATEGORIES = frozenset({"cpu_op", "cuda_runtime", "cuda_driver"})


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[start_i, end_i)`` as sorted, disjoint intervals."""
    start = np.asarray(start, dtype=np.int64)
    end = np.asarray(end, dtype=np.int64)
    keep = end > start
    start, end = start[keep], end[keep]
    if start.size == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    # a new interval begins where the start lies beyond everything seen so far
    new = np.empty(start.size, dtype=bool)
    new[0] = True
    new[1:] = start[1:] > reach[:-1]
    idx = np.flatnonzero(new)
    merged_end = reach[np.r_[idx[1:] - 1, start.size - 1]]
    return start[idx], merged_end


def _covered(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each point, whether it lies in one of the disjoint sorted intervals [s, e)."""
    if starts.size == 0:
        return np.zeros(points.size, dtype=bool)
    i = np.searchsorted(starts, points, side="right") - 1
    ok = i >= 0
    out = np.zeros(points.size, dtype=bool)
    out[ok] = points[ok] < ends[i[ok]]
    return out


def partition_span(span: tuple[int, int], compute: tuple[np.ndarray, np.ndarray],
                   comm: tuple[np.ndarray, np.ndarray], wait: tuple[np.ndarray, np.ndarray],
                   cpu: tuple[np.ndarray, np.ndarray]) -> dict[str, int]:
    """Nanoseconds of each part in ``span`` given the four interval sets (any order, overlapping).

    The span is cut at every interval boundary; each elementary segment is classified by
    which unions cover it, with the precedence of :data:`PARTS`.
    """
    lo, hi = span
    sets = [merge_intervals(np.clip(s, lo, hi), np.clip(e, lo, hi)) for s, e in (compute, comm, wait, cpu)]
    cuts = np.unique(np.concatenate([np.array([lo, hi], dtype=np.int64), *(a for s in sets for a in s)]))
    cuts = cuts[(cuts >= lo) & (cuts <= hi)]
    seg_start, seg_len = cuts[:-1], np.diff(cuts)
    c, k, w, u = (_covered(seg_start, s, e) for s, e in sets)
    masks = {
        "compute_comm_overlap": c & k,
        "compute_only": c & ~k,
        "sync_wait": ~c & k & w,
        "comm_only": ~c & k & ~w,
        "cpu_bound_idle": ~c & ~k & u,
        "idle": ~c & ~k & ~u,
    }
    return {part: int(seg_len[mask].sum()) for part, mask in masks.items()}


def _comm_mask(kernels: pd.DataFrame) -> np.ndarray:
    """Which GPU events are communication kernels (``is_comm`` where the reader gives it)."""
    column = "is_comm" if "is_comm" in kernels.columns else "is_nccl"
    return kernels[column].fillna(False).to_numpy(dtype=bool)


def step_breakdown(traces, rank_tax: pd.DataFrame | None = None, **align_options) -> pd.DataFrame:
    """One row per rank (and window): the GPU span cut into compute, communication, exposed
    synchronisation wait, CPU-bound idle and idle time (see the module docstring).

    Parameters
    ----------
    traces : TraceSet
        A loaded trace set of scope ``"all"`` (the CPU operators are needed).
    rank_tax : pandas.DataFrame or None, default None
        The per-rank tax table (``evtsync.tax_table(traces, per_rank=True)``), computed here
        when None.
    **align_options
        Passed to the alignment when ``rank_tax`` is computed here.

    Returns
    -------
    pandas.DataFrame
        One row per rank (and window): ``span_us`` and each part's ``*_us``.

    Raises
    ------
    InputError
        Traces read with a smaller scope than ``"all"``.
    """
    traces.require(("all",), "the per-rank time breakdown")
    if rank_tax is None:
        rank_tax = _rank_tax(traces, **align_options)
    kernels = traces.kernels
    if kernels.empty:
        return cpu_breakdown(traces, rank_tax)
    by_window = "window" in kernels.columns
    keys = ["rank", "window"] if by_window else ["rank"]
    ops = traces.cpu_ops
    cats = ops["cat"].astype(str)
    cpu = pd.concat([ops[cats.isin(CPU_BUSY_CATEGORIES)], traces.runtime], ignore_index=True)
    steps = ops[(cats == "user_annotation") & ops["name"].astype(str).str.match(r"^ProfilerStep#\d+$")]
    waits = rank_tax[rank_tax["wait_us"].notna()]
    is_comm = _comm_mask(kernels)
    rows = []
    for key, gpu in kernels.groupby(keys, sort=True, observed=True):
        key = key if isinstance(key, tuple) else (key,)
        rank, window = key[0], (key[1] if by_window else 0)

        def mine(table: pd.DataFrame, rank=rank, window=window) -> pd.DataFrame:
            sel = table["rank"] == rank
            if by_window and "window" in table.columns:
                sel &= table["window"] == window
            return table[sel]

        comm_rows = is_comm[kernels.index.get_indexer(gpu.index)]
        start_ns, end_ns = gpu["ts_ns"].to_numpy(np.int64), gpu["end_ns"].to_numpy(np.int64)
        lo, hi = int(start_ns.min()), int(end_ns.max())
        my_waits, my_cpu = mine(waits), mine(cpu)
        w_start = my_waits["ts_ns"].to_numpy(np.int64)
        w_end = w_start + np.rint(my_waits["wait_us"].to_numpy(float) * 1000.0).astype(np.int64)
        row = _span_row(rank, window, (lo, hi), (start_ns[~comm_rows], end_ns[~comm_rows]),
                        (start_ns[comm_rows], end_ns[comm_rows]), (w_start, w_end),
                        (my_cpu["ts_ns"].to_numpy(np.int64), my_cpu["end_ns"].to_numpy(np.int64)))
        row["n_compute_events"] = int((~comm_rows).sum())
        row["n_collectives"] = int(comm_rows.sum())
        row["unaligned_collectives"] = max(int(comm_rows.sum()) - len(my_waits), 0)
        row["n_profiler_steps"] = int(mine(steps)["name"].nunique())
        row["timeline"] = "gpu"
        rows.append(row)
    table = pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)
    missing = sorted(set(traces.ranks["rank"]) - set(table["rank"])) if len(traces.ranks) else []
    if missing:
        log.warning("time breakdown: rank(s) %s have no GPU events and get no row", missing)
    table.attrs["ranks_without_gpu_events"] = missing
    table.attrs["missing_ranks"] = list(getattr(traces, "missing_ranks", ()))  # without a file (--allow-partial)
    return table


Intervals = tuple[np.ndarray, np.ndarray]


def _span_row(rank: int, window: int, span: tuple[int, int], compute: Intervals, comm: Intervals,
              wait: Intervals, cpu: Intervals) -> dict:
    """The common columns of one breakdown row: the parts of ``span`` (µs), the whole waiting
    time and the shares (see :func:`partition_span` for the four interval sets)."""
    lo, hi = span
    parts = partition_span(span, compute, comm, wait, cpu)
    ws, we = merge_intervals(np.clip(wait[0], lo, hi), np.clip(wait[1], lo, hi))
    width = hi - lo
    row = {"rank": rank, "window": window, "start_ns": lo, "end_ns": hi, "span_us": width / 1000.0}
    row.update({f"{p}_us": v / 1000.0 for p, v in parts.items()})
    row["tax_wait_us"] = float((we - ws).sum()) / 1000.0
    for name, num in (("sync_wait_share", parts["sync_wait"]),
                      ("compute_share", parts["compute_only"] + parts["compute_comm_overlap"]),
                      ("comm_share", parts["sync_wait"] + parts["comm_only"]),
                      ("idle_share", parts["cpu_bound_idle"] + parts["idle"])):
        row[name] = num / width if width > 0 else float("nan")
    return row


def _rank_tax(traces, **align_options) -> pd.DataFrame:  # noqa: ANN001 - a TraceSet
    """The per-rank tax table, or an empty one when the traces hold no collective (then no
    time is a waiting part: said in the log)."""
    from evtsync.sync.collectives import _collective_events
    from evtsync.sync.tax import RANK_COLUMNS, tax_from_traces

    events, _ = _collective_events(traces)
    if events.empty:
        log.warning("time breakdown: no collective on any rank; no time counts as synchronisation wait")
        return pd.DataFrame(columns=RANK_COLUMNS)
    _, tables = tax_from_traces(traces, **align_options)
    return tables.ranks


def cpu_breakdown(traces, rank_tax: pd.DataFrame) -> pd.DataFrame:  # noqa: ANN001 - a TraceSet
    """One row per rank and window of a trace set without GPU events: the main thread's span
    cut into the parts of the module docstring (``timeline = "cpu"``)."""
    from evtsync.critpath.cpu import CPU_SIDE_CATEGORIES, rank_timeline

    code = {k: i for i, k in enumerate(CPU_SIDE_CATEGORIES)}
    ops = traces.cpu_ops
    names = ops["name"].astype(str)
    is_gloo = names.str.startswith("gloo:").to_numpy()
    is_step = names.str.match(r"^ProfilerStep#\d+$").to_numpy()
    ranks_col = ops["rank"].to_numpy()
    windows_col = ops["window"].to_numpy() if "window" in ops else np.zeros(len(ops), np.int64)
    is_op = (ops["cat"].astype(str) == "cpu_op").to_numpy()
    tids = ops["tid"].to_numpy()
    waits = rank_tax[rank_tax["wait_us"].notna()] if len(rank_tax) else rank_tax
    rows = []
    for rank in sorted(int(r) for r in np.unique(ranks_col)):
        mine = ranks_col == rank
        inst = rank_tax[rank_tax["rank"] == rank] if len(rank_tax) else pd.DataFrame(
            columns=["pg", "index", "window", "collective", "ts_ns", "end_ns"])
        tl = rank_timeline(rank, ops[mine], inst, any_thread=True)
        if tl is None:
            continue
        for window in sorted(tl.window_start):
            sl = tl.slices[tl.slices["window"] == window]
            if sl.empty:
                continue
            lo, hi = int(sl["start_ns"].min()), int(sl["end_ns"].max())
            kind = sl["kind"].to_numpy()

            def of(*kinds: str, sl: pd.DataFrame = sl, kind: np.ndarray = kind) -> tuple[np.ndarray, np.ndarray]:
                sel = np.isin(kind, [code[k] for k in kinds])
                return sl["start_ns"].to_numpy(np.int64)[sel], sl["end_ns"].to_numpy(np.int64)[sel]

            here = inst[inst["window"] == window] if "window" in inst else inst
            enq_s, enq_e = of("enqueue")
            comm = (np.concatenate([here["ts_ns"].to_numpy(np.int64), enq_s]),
                    np.concatenate([here["end_ns"].to_numpy(np.int64), enq_e]))
            w = waits[(waits["rank"] == rank) & (waits["window"] == window)] if len(waits) else waits
            w_start = w["ts_ns"].to_numpy(np.int64) if len(w) else np.zeros(0, np.int64)
            w_end = w_start + (np.rint(w["wait_us"].to_numpy(float) * 1000.0).astype(np.int64) if len(w)
                               else np.zeros(0, np.int64))
            row = _span_row(rank, window, (lo, hi), of("cpu_op"), comm, (w_start, w_end), of("python"))
            in_window = mine & (windows_col == window)
            row["n_compute_events"] = int((in_window & (tids == tl.tid) & is_op).sum())
            row["n_collectives"] = len(here)
            row["unaligned_collectives"] = max(int((in_window & is_gloo).sum()) - len(here), 0)
            row["n_profiler_steps"] = int(names[in_window & is_step].nunique())
            row["timeline"] = "cpu"
            rows.append(row)
    table = pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)
    log.info("time breakdown: no GPU events in the trace set; main-thread (CPU) time of %d rank(s)",
             table["rank"].nunique())
    table.attrs["ranks_without_gpu_events"] = []
    table.attrs["cpu_timeline"] = True
    table.attrs["missing_ranks"] = list(getattr(traces, "missing_ranks", ()))
    return table


def summarise_breakdown(table: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Sum the parts over ranks (and windows) and give each as a share of the total span.

    Parameters
    ----------
    table : pandas.DataFrame
        The table of :func:`step_breakdown`.
    by : sequence of str, default ()
        Columns to sum within (e.g. ``("workload",)``); empty: one row for everything.

    Returns
    -------
    pandas.DataFrame
        The summed ``*_us`` columns and each part's ``*_share`` of ``span_us`` (NaN where the
        span is 0).
    """
    cols = ["span_us", *(f"{p}_us" for p in PARTS), "tax_wait_us"]
    total = table.groupby(list(by))[cols].sum() if by else table[cols].sum().to_frame().T
    span = total["span_us"].astype(float).replace(0.0, np.nan)  # no span (no row): shares are NaN, not 0/0
    for p in PARTS:
        total[f"{p}_share"] = total[f"{p}_us"].astype(float) / span
    return total.reset_index(drop=not by)
