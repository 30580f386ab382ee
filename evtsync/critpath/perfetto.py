"""Attribution as a Chrome trace-event file: every rank of a window in one timeline, causes marked.

``evtsync attribute … --perfetto OUT.json`` writes, per profiling window, one JSON file in the
Chrome trace-event format (``{"traceEvents": [...]}``, complete events ``ph: "X"`` with µs
``ts``/``dur``, metadata ``ph: "M"``, instant events ``ph: "i"``, flow events ``ph: "s"/"f"``) that
Perfetto and chrome://tracing open. Each rank is a process (``pid`` = rank, named ``rank R``);
CPU threads keep their thread ids, GPU streams become threads ``stream S``. Every event of the
source traces in the window is copied (name, category, time, duration); on top:

- the straggler's instance of each attributed collective carries ``args.evtsync`` (PG, index,
  tau, status, principal cause, root);
- an instant event ``cause: NAME`` on the straggler's thread at the principal cause's start;
- a flow arrow ``root cause`` from the root collective's cause to each collective whose blame
  was routed there (``root_chain`` > 0).

With several windows the files are ``OUT.w0.json``, ``OUT.w1.json``, …; each is written
atomically. Times are µs from the window's earliest event, whose absolute time (ns, as the
reader places events) is ``otherData.time_origin_ns``.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.tableio import atomic_path
from evtsync.trace.traceset import TraceSet

log = logging.getLogger(__name__)

#: Thread ids of GPU streams in the merged file: stream S of rank R is thread STREAM_TID_BASE + S.
STREAM_TID_BASE = 1 << 40


def _us(ns: int | float) -> float:
    return round(float(ns) / 1000.0, 3)


def window_paths(out: str | Path, n_windows: int) -> list[Path]:
    """The file of each window: ``OUT`` for one window, ``OUT.w<N>.json`` for several."""
    out = Path(out)
    if n_windows <= 1:
        return [out]
    stem = out.name[:-5] if out.name.endswith(".json") else out.name
    return [out.with_name(f"{stem}.w{w}.json") for w in range(n_windows)]


def _origin(traces: TraceSet, window: int) -> int:
    """The earliest event start of the window (ns): the file's time zero, so that µs times stay
    exact in a double (absolute epoch µs would lose the sub-µs digits)."""
    starts = []
    for table in (traces.cpu_ops, traces.runtime, traces.kernels):
        if len(table):
            sel = table["window"].to_numpy() == window if "window" in table else np.ones(len(table), bool)
            if sel.any():
                starts.append(int(table["ts_ns"].to_numpy(np.int64)[sel].min()))
    return min(starts) if starts else 0


def _events_of(traces: TraceSet, window: int, origin: int) -> tuple[list[dict[str, Any]], pd.DataFrame]:
    """The window's events of every rank as trace events (µs from ``origin``), and a lookup table
    of them (rank, tid, ts_ns, end_ns) for placing the marks."""
    out: list[dict[str, Any]] = []
    places = []
    ranks = sorted(int(r) for r in traces.ranks.loc[traces.ranks["window"] == window, "rank"].unique()) \
        if "window" in traces.ranks else traces.rank_ids
    for r in ranks:
        out.append({"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0, "args": {"sort_index": r}})
    for table, is_gpu in ((traces.cpu_ops, False), (traces.runtime, False), (traces.kernels, True)):
        if table.empty:
            continue
        sel = table["window"].to_numpy() == window if "window" in table else np.ones(len(table), bool)
        t = table[sel]
        rank = t["rank"].to_numpy(np.int64)
        tid = (STREAM_TID_BASE + t["stream"].to_numpy(np.int64)) if is_gpu else t["tid"].to_numpy(np.int64)
        ts, end = t["ts_ns"].to_numpy(np.int64), t["end_ns"].to_numpy(np.int64)
        cats = t["cat"].astype(str).tolist() if "cat" in t else ["kernel" if is_gpu else "cuda_runtime"] * len(t)
        for name, cat, r, th, s, e in zip(t["name"].astype(str).tolist(), cats, rank.tolist(), tid.tolist(),
                                          ts.tolist(), end.tolist(), strict=True):
            out.append({"ph": "X", "name": name, "cat": cat, "pid": r, "tid": th, "ts": _us(s - origin), "dur": _us(e - s)})
        places.append(pd.DataFrame({"rank": rank, "tid": tid, "ts_ns": ts, "end_ns": end,
                                    "event": np.arange(len(out) - len(t), len(out))}))
        if is_gpu:
            for r, s in {(int(a), int(b)) for a, b in zip(rank, t["stream"].to_numpy(np.int64), strict=True)}:
                out.append({"ph": "M", "name": "thread_name", "pid": r, "tid": STREAM_TID_BASE + s,
                            "args": {"name": f"stream {s}"}})
    lookup = pd.concat(places, ignore_index=True) if places else pd.DataFrame(
        columns=["rank", "tid", "ts_ns", "end_ns", "event"])
    return out, lookup


def _enclosing(lookup: pd.DataFrame, rank: int, ts_ns: int, tid: int | None = None) -> pd.Series | None:
    """The shortest event of ``rank`` (on ``tid`` when given) that contains ``ts_ns``."""
    sel = (lookup["rank"].to_numpy() == rank) & (lookup["ts_ns"].to_numpy() <= ts_ns) & \
        (lookup["end_ns"].to_numpy() > ts_ns)
    if tid is not None:
        sel &= lookup["tid"].to_numpy() == tid
    hits = lookup[sel]
    if hits.empty:
        return None
    return hits.iloc[int(np.argmin((hits["end_ns"] - hits["ts_ns"]).to_numpy()))]


def _clean(value: Any) -> Any:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return value


MARK_FIELDS = ("pg", "index", "tau_max_us", "status", "straggler_rank", "fastest_rank", "cause_name",
               "cause_category", "cause_extra_us", "explained_share", "unexplained_reason", "root_rank",
               "root_pg", "root_index", "root_cause", "root_chain")


def write_perfetto(result: Any, traces: TraceSet, out: str | Path) -> list[Path]:
    """Write the attribution ``result`` of ``traces`` as Chrome trace-event files (module
    docstring); returns the paths written."""
    inst = result.instances
    coll = result.collectives
    n_windows = traces.n_windows if hasattr(traces, "n_windows") else 1
    paths = window_paths(out, n_windows)
    ts_of = {}  # (pg, index, rank) -> (tid, ts_ns, window)
    if len(inst):
        windows = inst["window"].to_numpy() if "window" in inst else np.zeros(len(inst), np.int64)
        for pg, idx, r, stream, ts, w in zip(inst["pg"], inst["index"], inst["rank"], inst["stream"], inst["ts_ns"],
                                             windows, strict=True):
            tid = int(stream) if result.cpu_side else STREAM_TID_BASE + int(stream)
            ts_of[(pg, int(idx), int(r))] = (tid, int(ts), int(w))
    rows = coll[coll["status"].isin(["ok", "unexplained"])]
    written = []
    for w, path in enumerate(paths):
        origin = _origin(traces, w)
        events, lookup = _events_of(traces, w, origin)
        marked = 0
        cause_at: dict[tuple[Any, int], tuple[int, int, float]] = {}  # (pg, index) -> (rank, tid, ts µs)
        for row in rows.itertuples(index=False):
            key = (row.pg, int(row.index), int(row.straggler_rank))
            if key not in ts_of or ts_of[key][2] != w:
                continue
            tid, ts, _ = ts_of[key]
            hit = _enclosing(lookup, key[2], ts, tid)
            if hit is None:
                continue
            mark = {f: _clean(getattr(row, f)) for f in MARK_FIELDS}
            events[int(hit["event"])].setdefault("args", {})["evtsync"] = mark
            marked += 1
            start = _clean(row.cause_start_ns)
            if row.cause_name is not None and start is not None and start >= 0:
                cause = _enclosing(lookup, key[2], int(start))
                if cause is not None:
                    at = (key[2], int(cause["tid"]), _us(int(start) - origin))
                    cause_at[(row.pg, int(row.index))] = at
                    events.append({"ph": "i", "s": "t", "name": f"cause: {row.cause_name}", "cat": "evtsync",
                                   "pid": at[0], "tid": at[1], "ts": at[2],
                                   "args": {"collective": f"{row.pg}:{int(row.index)}",
                                            "extra_us": _clean(row.cause_extra_us)}})
        flow = 0
        for row in rows.itertuples(index=False):
            chain = _clean(row.root_chain)
            key = (row.pg, int(row.index), int(row.straggler_rank))
            root = (row.root_pg, _clean(row.root_index))
            if not chain or key not in ts_of or ts_of[key][2] != w or root not in cause_at:
                continue
            flow += 1
            src = cause_at[root]
            tid, ts, _ = ts_of[key]
            events.append({"ph": "s", "id": flow, "name": "root cause", "cat": "evtsync", "pid": src[0],
                           "tid": src[1], "ts": src[2]})
            events.append({"ph": "f", "bp": "e", "id": flow, "name": "root cause", "cat": "evtsync", "pid": key[2],
                           "tid": tid, "ts": _us(ts - origin)})
        with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms",
                       "otherData": {"producer": "evtsync attribute --perfetto", "window": w,
                                     "time_origin_ns": origin}}, fh)
        log.info("Perfetto trace of window %d: %s (%d events, %d collectives marked, %d root-cause arrows)",
                 w, path, len(events), marked, flow)
        written.append(path)
    return written
