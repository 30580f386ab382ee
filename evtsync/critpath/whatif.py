"""What-if without stragglers on CPU-side (gloo) jobs: replay the cross-rank collective DAG with the
stragglers' delaying ops at their typical duration (issue 46, item 2; docs/critical-path.md §8).

Each rank's main thread (:func:`evtsync.critpath.cpu.rank_timeline`) is cut at its collectives into
*segments* of local work: segment i runs from the end of the rank's (i-1)-th collective of the
window (or the window start) to its i-th enqueue, and a last segment to the window's end. The
replay walks the collectives in dependency order: a rank arrives at collective c at its clock plus
its segment's work plus its measured hand-off to the worker thread; c ends when the last member has
arrived plus its communication time (the shortest member duration: the one that did not wait); each
member's clock moves to that end plus its own measured lag in seeing it. The window's predicted
time is the largest clock after the last segment.

Counterfactual: a root cause of the attribution (``root_rank``, ``root_cause`` of a collective that
is its own root) is "fixed" by setting that op's total in the straggler's segments before that
collective to the typical value: the median over the other ranks' totals of the same op name in
the same segment position of the same window (0 where a rank has none). Everything else keeps its
measured duration, so noise is not removed, only the named causes.

Assumptions (stated in docs/critical-path.md §8): synchronous collectives (the main thread waits
for each; an asynchronous one is replayed as if waited for at once), the same sequence of
collectives per rank in a window (SPMD positions), point-to-point waits replayed as local work
(fixed), and a fixed communication time per collective.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from evtsync.critpath.cpu import CPU_SIDE_CATEGORIES, RankTimeline

_WAIT = CPU_SIDE_CATEGORIES.index("collective_wait")


@dataclass
class RankSegments:
    """One rank's window cut at its collectives: per window, the collectives in program order
    (pg, index, handoff_ns, dur_ns, end_ns) and per segment the work per op name (ns)."""

    rank: int
    collectives: dict[int, list[tuple[Any, int, int, int, int]]]
    work: dict[int, list[dict[str, int]]]


def rank_segments(tl: RankTimeline) -> RankSegments:
    """Cut a rank's main-thread timeline into segments at its collectives (see the module docstring).
    A wait slice inside a segment (point-to-point, or a collective's wait the rank did not block on
    at once) counts as local work."""
    arr = tl.arrivals[tl.arrivals["enqueue_ns"] >= 0].sort_values("enqueue_ns", kind="stable")
    coll: dict[int, list[tuple[Any, int, int, int, int]]] = {}
    work: dict[int, list[dict[str, int]]] = {}
    for w, sub in arr.groupby("window", sort=True):
        first, last = tl.window_rows.get(int(w), (0, 0))
        sl = tl.slices.iloc[first:last]
        starts, ends = sl["start_ns"].to_numpy(np.int64), sl["end_ns"].to_numpy(np.int64)
        names, kinds, refs = sl["name"].tolist(), sl["kind"].to_numpy(), sl["ref"].to_numpy()
        bounds = [int(tl.window_start.get(int(w), starts.min() if len(starts) else 0))]
        items = []
        for h in sub.itertuples(index=False):
            items.append((h.pg, int(h.index), max(0, int(h.start_ns) - int(h.enqueue_ns)),
                          int(h.end_ns) - int(h.start_ns), int(h.end_ns)))
            bounds += [int(h.enqueue_ns), int(h.end_ns)]
        bounds.append(int(ends.max()) if len(ends) else bounds[-1])
        segs = []
        for lo, hi in zip(bounds[0::2], bounds[1::2], strict=True):
            totals: dict[str, int] = defaultdict(int)
            a = np.clip(starts, lo, hi)
            b = np.clip(ends, lo, hi)
            for k in np.flatnonzero(b > a).tolist():
                if kinds[k] == _WAIT and refs[k] >= 0:
                    continue  # waiting for a collective: the replay's to compute, not local work
                totals[names[k]] += int(b[k] - a[k])
            segs.append(dict(totals))
        coll[int(w)] = items
        work[int(w)] = segs
    return RankSegments(tl.rank, coll, work)


def replay_window(segs: dict[int, RankSegments], window: int,
                  fixes: dict[tuple[int, int], dict[str, int]] | None = None) -> float:
    """Predicted duration (ns) of one window: the collectives replayed in dependency order over
    the ranks' segments; ``fixes`` replaces (rank, segment) op totals by the given values."""
    fixes = fixes or {}
    ranks = [r for r in sorted(segs) if window in segs[r].collectives]
    members: dict[tuple[Any, int], list[int]] = defaultdict(list)
    for r in ranks:
        for pg, idx, *_ in segs[r].collectives[window]:
            members[(pg, idx)].append(r)
    clock = {r: 0.0 for r in ranks}
    pos = {r: 0 for r in ranks}

    def work(r: int, i: int) -> float:
        totals = dict(segs[r].work[window][i])
        totals.update(fixes.get((r, i), {}))
        return float(sum(totals.values()))

    pending = sum(len(segs[r].collectives[window]) for r in ranks)
    while pending:
        fired = False
        for r in ranks:
            items = segs[r].collectives[window]
            if pos[r] >= len(items):
                continue
            key = (items[pos[r]][0], items[pos[r]][1])
            who = members[key]
            if not all(pos[m] < len(segs[m].collectives[window])
                       and segs[m].collectives[window][pos[m]][:2] == key for m in who):
                continue
            got = {m: segs[m].collectives[window][pos[m]] for m in who}
            arrive = {m: clock[m] + work(m, pos[m]) + got[m][2] for m in who}
            end = max(arrive.values()) + min(g[3] for g in got.values())
            first_end = min(g[4] for g in got.values())
            for m in who:
                clock[m] = end + (got[m][4] - first_end)
                pos[m] += 1
                pending -= 1
            fired = True
        if not fired:
            raise ValueError(f"what-if replay: window {window}: the ranks' collective orders cannot be replayed "
                             "together (a rank waits for a collective another has not reached)")
    return max(clock[r] + work(r, pos[r]) for r in ranks)


def typical_fixes(segs: dict[int, RankSegments], window: int, rank: int, name: str,
                  segments: list[int]) -> dict[tuple[int, int], dict[str, int]]:
    """The fix of one cause: ``name`` in ``rank``'s ``segments`` set to the median over the other
    ranks of the same op in the same segment position (0 where they have none), never above its
    measured value."""
    out: dict[tuple[int, int], dict[str, int]] = {}
    others = [r for r in segs if r != rank and window in segs[r].work]
    for i in segments:
        own = segs[rank].work[window][i].get(name, 0)
        vals = [segs[r].work[window][i].get(name, 0) for r in others if i < len(segs[r].work[window])]
        typical = int(np.median(vals)) if vals else 0
        out[(rank, i)] = {name: min(own, typical)}
    return out


def segments_before(seg: RankSegments, window: int, pg: Any, index: int) -> list[int]:
    """The segments of a rank that lie between its previous collective of group ``pg`` and its
    collective ``(pg, index)`` (where the attribution looked for the cause)."""
    items = seg.collectives.get(window, [])
    at = next((i for i, c in enumerate(items) if c[0] == pg and c[1] == index), None)
    if at is None:
        return []
    prev = max((i for i, c in enumerate(items[:at]) if c[0] == pg), default=-1)
    return list(range(prev + 1, at + 1))


def what_if(timelines: dict[int, RankTimeline], collectives: pd.DataFrame,
            steps_per_window: dict[int, int]) -> tuple[dict[str, float], pd.DataFrame]:
    """Measured-replay and without-stragglers step times, and the saving of each root cause alone.

    ``collectives``: the attribution's table (pg, index, straggler_rank, root_chain, root_cause,
    root_category, status) with the window of each collective (``window``); ``steps_per_window``:
    ProfilerSteps in each window. Returns ({step_time_replay_ms, step_time_without_stragglers_ms,
    slowdown}, per-cause table rank, cause, saving_ms_per_step, saving_share)."""
    segs = {r: rank_segments(tl) for r, tl in timelines.items()}
    windows = sorted({w for s in segs.values() for w in s.collectives})
    own = collectives[(collectives["root_chain"].fillna(0).astype(int) == 0)
                      & collectives["status"].isin(["ok", "unexplained"]) & collectives["root_cause"].notna()
                      & ~collectives["root_category"].isin(["collective_wait", "not_explained"])]
    causes: dict[tuple[int, str], dict[tuple[int, int], int]] = defaultdict(dict)
    for row in own.itertuples(index=False):
        rank, name, w = int(row.root_rank), str(row.root_cause), int(row.window)
        if rank not in segs:
            continue
        fix = typical_fixes(segs, w, rank, name, segments_before(segs[rank], w, row.pg, int(row.index)))
        for (_, i), v in fix.items():
            causes[(rank, name)][(w, i)] = v[name]
    n_steps = sum(steps_per_window.get(w, 1) for w in windows)

    def total(fixed: dict[tuple[int, str], dict[tuple[int, int], int]]) -> float:
        out = 0.0
        for w in windows:
            f: dict[tuple[int, int], dict[str, int]] = {}
            for (rank, name), by in fixed.items():
                for (fw, i), v in by.items():
                    if fw == w:
                        f.setdefault((rank, i), {})[name] = v
            out += replay_window(segs, w, f)
        return out / n_steps / 1e6

    base = total({})
    without = total(causes)
    rows = []
    for key, by in causes.items():
        saving = base - total({key: by})
        rows.append({"rank": key[0], "cause": key[1], "saving_ms_per_step": saving,
                     "saving_share": saving / (base - without) if base > without else float("nan")})
    table = pd.DataFrame(rows, columns=["rank", "cause", "saving_ms_per_step", "saving_share"])
    table = table.sort_values("saving_ms_per_step", ascending=False, kind="stable").reset_index(drop=True)
    return {"step_time_replay_ms": base, "step_time_without_stragglers_ms": without,
            "slowdown": base / without if without > 0 else float("nan")}, table
