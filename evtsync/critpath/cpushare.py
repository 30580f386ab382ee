"""CPU sharing between ranks on a host: the what-if replay's processor-sharing model
(docs/critical-path.md §8, "Ranks sharing cores").

On a CPU (gloo) job whose ranks share cores, an op's wall time is not its own: a rank that computes
slows the ranks on its core, and a rank that sleeps frees the core for them. Given the host's layout
(:class:`HostLayout`: which ranks share how many cores), each main-thread slice is

- *CPU-busy* (runnable) or not: operators (``cpu_op``) and enqueues (``enqueue``) are busy; waits for
  a collective or a transfer (``collective_wait``) are not; a user annotation's own time (``python``)
  and uninstrumented Python (``python_gap``) may be either (a ``time.sleep``, I/O, or a busy loop)
  and are decided from the core-mates' ops (:func:`classify`);
- given its *work* (ns of one whole core): under processor sharing every runnable rank of a group
  with C cores and n runnable ranks progresses at ``min(1, C / n)``, so a busy slice's work is the
  integral of that rate over its measured span; a slice that is not busy keeps its wall time.

:func:`replay_shared` then replays the lanes in global time with the same rule: a busy slice ends
when its (possibly replaced) work is done at the rate its group's counterfactual runnable set allows.
With the measured work it reproduces the measured times (a check). Not modelled: the gloo worker
threads (they wait on the network; their reductions are not in the count), threads of other
programs on the host, and the scheduler's history (a rank that ran long is not paid back).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from evtsync.core.errors import InputError
from evtsync.critpath.members import slice_factors, window_members

if TYPE_CHECKING:
    from evtsync.critpath.replay import Lane

log = logging.getLogger(__name__)

#: slice kinds (``Lane.slices["kind"]``) that hold the CPU: the profiler's operators and enqueues
BUSY_KINDS = frozenset({"cpu_op", "enqueue"})
#: slice kinds decided from the trace (:func:`classify`): a sleep or a busy loop look alike
UNDECIDED_KINDS = frozenset({"python", "python_gap"})
_GROUP = re.compile(r"^\s*([0-9,\-\s]+)\s*:\s*(\d+)\s*$")


@dataclass(frozen=True)
class HostLayout:
    """Which ranks share how many cores: ``groups`` is a tuple of (cores, ranks)."""

    groups: tuple[tuple[int, tuple[int, ...]], ...]
    #: the option as the user gave it (recorded in the output)
    spec: str

    def group_of(self) -> dict[int, int]:
        """rank -> index of its group."""
        return {r: g for g, (_, ranks) in enumerate(self.groups) for r in ranks}

    def describe(self) -> str:
        """One line: ``ranks 0-1 on 1 core; ranks 2-3 on 1 core``."""
        return "; ".join(f"ranks {_ranges(ranks)} on {c} core{'s' if c != 1 else ''}" for c, ranks in self.groups)


def _ranges(ranks: tuple[int, ...]) -> str:
    out, start, prev = [], ranks[0], ranks[0]
    for r in (*ranks[1:], None):
        if r is not None and r == prev + 1:
            prev = r
            continue
        out.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return ",".join(out)


def _rank_list(text: str, spec: str) -> tuple[int, ...]:
    ranks: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise InputError(f"--host-cores {spec!r}: expected ranks such as 0-3 or 0,2,4; found {part!r}")
        if sep and int(hi) < int(lo):
            raise InputError(f"--host-cores {spec!r}: expected a range from low to high such as 0-3; found {part!r}")
        ranks.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    if not ranks:
        raise InputError(f"--host-cores {spec!r}: expected at least one rank before each ':'; found {text!r}")
    return tuple(ranks)


def parse_host_cores(spec: str, ranks: list[int] | None) -> HostLayout:
    """The host layout from ``--host-cores``:

    - ``N``: N cores, each rank pinned to one, in contiguous blocks (the k-th of the W ranks in rank
      order on core ``k * N // W``; ``taskset``-style pinning by local rank);
    - ``N:shared``: all ranks share N cores, unpinned;
    - ``RANKS:CORES;RANKS:CORES…``: explicit groups, e.g. ``0-1:1;2-3:1``.

    Every rank of the traces must be in exactly one group; raises :class:`InputError` (one line)
    otherwise. ``ranks`` None checks the form only (``evtsync run`` before it reads the traces): the
    ``N`` forms then have no groups.
    """
    text = spec.strip()
    check_only = ranks is None
    ranks = [] if ranks is None else sorted(int(r) for r in ranks)
    if text.isdigit() or re.fullmatch(r"\d+\s*:\s*shared", text):
        n = int(text.split(":")[0])
        if n < 1:
            raise InputError(f"--host-cores {spec!r}: expected at least 1 core; found {n}")
        if text.isdigit():
            blocks: dict[int, list[int]] = {}
            for k, r in enumerate(ranks):
                blocks.setdefault(k * n // len(ranks), []).append(r)
            return HostLayout(tuple((1, tuple(v)) for _, v in sorted(blocks.items())), spec)
        return HostLayout(((n, tuple(ranks)),), spec)
    groups = []
    for part in text.split(";"):
        m = _GROUP.match(part)
        if not m:
            raise InputError(f"--host-cores {spec!r}: expected N, N:shared or RANKS:CORES;RANKS:CORES (e.g. "
                             f"0-1:1;2-3:1); found {part.strip()!r}")
        cores = int(m.group(2))
        if cores < 1:
            raise InputError(f"--host-cores {spec!r}: expected at least 1 core per group; found {part.strip()!r}")
        groups.append((cores, _rank_list(m.group(1), spec)))
    listed = [r for _, g in groups for r in g]
    twice = sorted({r for r in listed if listed.count(r) > 1})
    if twice:
        raise InputError(f"--host-cores {spec!r}: rank(s) {twice} listed in more than one group")
    missing, extra = sorted(set(ranks) - set(listed)), sorted(set(listed) - set(ranks))
    if (missing or extra) and not check_only:
        raise InputError(f"--host-cores {spec!r}: expected exactly the traces' ranks {ranks}; "
                         + (f"missing {missing}" if missing else "") + ("; " if missing and extra else "")
                         + (f"not in the traces {extra}" if extra else ""))
    return HostLayout(tuple((c, tuple(sorted(g))) for c, g in groups), spec)


# --------------------------------------------------------------------------- work under sharing

@dataclass
class _Rate:
    """One group's runnable count over time: breakpoints ``t``, count ``n`` on [t_k, t_k+1), and the
    cumulative rate integrals G (rate min(1, C/n)) and G1 (rate with one runnable rank fewer)."""

    t: np.ndarray
    n: np.ndarray
    g: np.ndarray
    g1: np.ndarray

    def at(self, x: np.ndarray, one_fewer: bool = False) -> np.ndarray:
        """The cumulative integral at times ``x`` (ns)."""
        cum = self.g1 if one_fewer else self.g
        if len(self.t) == 0:
            return np.asarray(x, np.float64)  # nothing runnable: rate 1
        k = np.clip(np.searchsorted(self.t, x, side="right") - 1, 0, len(self.t) - 1)
        rate = _rate_of(self.n[k] - (1 if one_fewer else 0), self.cores)
        return cum[k] + rate * (np.asarray(x, np.float64) - self.t[k])

    cores: int = 1


def _rate_of(n: np.ndarray, cores: int) -> np.ndarray:
    n = np.asarray(n, np.float64)
    return np.where(n > cores, cores / np.maximum(n, 1.0), 1.0)


def _group_rate(lanes: dict[int, Lane], members: tuple[int, ...], cores: int, busy: dict[int, np.ndarray],
                window: int) -> _Rate:
    starts, ends = [], []
    for r in members:
        if r not in lanes:
            continue
        sl = lanes[r].slices
        m = (sl["window"].to_numpy() == window) & busy[r]
        starts.append(sl["start_ns"].to_numpy(np.int64)[m])
        ends.append(sl["end_ns"].to_numpy(np.int64)[m])
    s = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    e = np.concatenate(ends) if ends else np.zeros(0, np.int64)
    t = np.concatenate([s, e])
    d = np.concatenate([np.ones(len(s), np.int64), -np.ones(len(e), np.int64)])
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    ut, first = np.unique(t, return_index=True)
    n = np.add.reduceat(d, first).cumsum() if len(t) else np.zeros(0, np.int64)
    width = np.diff(ut).astype(np.float64)
    g = np.concatenate([[0.0], np.cumsum(_rate_of(n[:-1], cores) * width)]) if len(ut) else np.zeros(0)
    g1 = np.concatenate([[0.0], np.cumsum(_rate_of(n[:-1] - 1, cores) * width)]) if len(ut) else np.zeros(0)
    return _Rate(ut.astype(np.float64), n, g, g1, cores)


def _works(lanes: dict[int, Lane], layout: HostLayout, busy: dict[int, np.ndarray]) -> tuple[
        dict[int, np.ndarray], dict[tuple[int, int], _Rate]]:
    """Each slice's work (ns of a whole core; its wall time where not busy) and the groups' rates."""
    windows = sorted({w for lane in lanes.values() for w in lane.windows})
    rates = {(g, w): _group_rate(lanes, ranks, cores, busy, w)
             for g, (cores, ranks) in enumerate(layout.groups) for w in windows}
    group = layout.group_of()
    out = {}
    for r, lane in lanes.items():
        sl = lane.slices
        s, e = sl["start_ns"].to_numpy(np.float64), sl["end_ns"].to_numpy(np.float64)
        work = e - s
        win = sl["window"].to_numpy()
        for w in np.unique(win):
            m = (win == w) & busy[r]
            rate = rates[(group[r], int(w))]
            work[m] = rate.at(e[m]) - rate.at(s[m])
        out[r] = work
    return out, rates


@dataclass
class Classified:
    """Per lane: ``busy`` (bool per slice) and ``work`` (ns per slice), and how the undecided slices
    were decided."""

    busy: dict[int, np.ndarray]
    work: dict[int, np.ndarray]
    #: undecided slices (python / python_gap) judged not busy: count and wall ms
    n_idle: int
    idle_ms: float
    #: undecided slices with evidence from core-mates (the rest stay busy: no evidence)
    n_decided: int
    n_undecided: int


def classify(lanes: dict[int, Lane], layout: HostLayout) -> Classified:
    """Decide which slices hold the CPU and their work (module doc; docs/critical-path.md §8).

    An undecided slice S (``python``, ``python_gap``) on rank r is judged by its core-mates' operator
    slices that overlap it: their work computed with S runnable and with S not runnable is compared
    with the typical work of the same (kind, name) — the median over every rank and step, computed
    with every undecided slice runnable. S is *not busy* when the core-mates' works are closer to
    typical without it (sum over those slices of wall × |log(work / typical)|); with no such slice
    (nobody could have run beside it) it stays busy, which then changes no one's work.
    """
    group = layout.group_of()
    busy0 = {}
    undecided = {}
    for r, lane in lanes.items():
        kind = lane.slices["kind"].to_numpy()
        und = np.isin(kind, list(UNDECIDED_KINDS))
        undecided[r] = und
        busy0[r] = np.isin(kind, list(BUSY_KINDS)) | und
    work0, rates = _works(lanes, layout, busy0)
    # typical work per (kind, name) of the operators, over all ranks and steps
    ref_parts = []
    for r, lane in lanes.items():
        sl = lane.slices
        is_op = np.isin(sl["kind"].to_numpy(), list(BUSY_KINDS))
        ref_parts.append(pd.DataFrame({"kind": sl["kind"].to_numpy()[is_op], "name": sl["name"].to_numpy()[is_op],
                                       "work": work0[r][is_op]}))
    ref = pd.concat(ref_parts, ignore_index=True).groupby(["kind", "name"])["work"].median() if ref_parts else \
        pd.Series(dtype=float)
    ref_of = {r: lanes[r].slices.set_index(["kind", "name"]).index.map(ref).to_numpy(np.float64)
              if len(lanes[r].slices) else np.zeros(0) for r in lanes}
    busy = {r: b.copy() for r, b in busy0.items()}
    n_decided = n_idle = 0
    idle_ns = 0.0
    for r, lane in lanes.items():
        mates = [m for m in layout.groups[group[r]][1] if m != r and m in lanes]
        sl = lane.slices
        idx = np.flatnonzero(undecided[r] & (sl["end_ns"].to_numpy(np.int64) > sl["start_ns"].to_numpy(np.int64)))
        if not len(idx) or not mates:
            continue
        s_all, e_all = sl["start_ns"].to_numpy(np.int64), sl["end_ns"].to_numpy(np.int64)
        win = sl["window"].to_numpy()
        for i in idx.tolist():
            a, b, w = s_all[i], e_all[i], win[i]
            rate = rates[(group[r], int(w))]
            sum_busy = sum_idle = sum_ref = 0.0
            seen = False
            for m in mates:
                ms = lanes[m].slices
                ma, mb = ms["start_ns"].to_numpy(np.int64), ms["end_ns"].to_numpy(np.int64)
                lo, hi = np.searchsorted(mb, a, side="right"), np.searchsorted(ma, b, side="left")
                if hi <= lo:
                    continue
                j = np.arange(lo, hi)
                j = j[np.isin(ms["kind"].to_numpy()[j], list(BUSY_KINDS)) & (ms["window"].to_numpy()[j] == w)]
                j = j[np.isfinite(ref_of[m][j]) & (ref_of[m][j] > 0) & (work0[m][j] > 0)]
                if not len(j):
                    continue
                seen = True
                oa, ob = np.maximum(ma[j], a), np.minimum(mb[j], b)
                gain = (rate.at(ob, True) - rate.at(oa, True)) - (rate.at(ob) - rate.at(oa))
                sum_busy += float(work0[m][j].sum())
                sum_idle += float((work0[m][j] + gain).sum())
                sum_ref += float(ref_of[m][j].sum())
            if not seen:
                continue
            n_decided += 1
            if abs(np.log(sum_idle / sum_ref)) < abs(np.log(sum_busy / sum_ref)):
                busy[r][i] = False
                n_idle += 1
                idle_ns += float(b - a)
    work, _ = _works(lanes, layout, busy)
    n_und = int(sum(int(u.sum()) for u in undecided.values()))
    log.info("what-if CPU sharing: %d of %d undecided slices judged by their core-mates, %d not busy (%.1f ms)",
             n_decided, n_und, n_idle, idle_ns / 1e6)
    return Classified(busy, work, n_idle, idle_ns / 1e6, n_decided, n_und)


# --------------------------------------------------------------------------- replay

def _ready(lane: Lane, key: tuple[Any, int], first_end: int) -> int:
    """When ``lane`` handed collective ``key`` over (measured): its hand-off (the gloo worker's or the
    transfer's start), at most the earliest measured end among the members, at least its arrival."""
    arrival = lane.arrivals[key][1]
    if key not in lane.handoff:
        return arrival
    return max(arrival, min(lane.handoff[key][1], first_end))


def replay_shared(lanes: dict[int, Lane], layout: HostLayout, scale: dict[tuple[int, int, int, int, str, str],
                  float] | None = None, record: dict[str, Any] | None = None) -> dict[int, dict[int, int]]:
    """Replay the lanes in global time under processor sharing (module doc). Each lane's slices need
    the columns ``busy`` and ``amount`` (work where busy, else wall ns); ``scale`` as in
    :func:`evtsync.critpath.replay.replay` multiplies the amount. Returns per rank per window the
    replayed end (ns); ``record`` receives ``arrived``, ``ended`` and ``blocked`` as there, and, when
    it holds a ``trace`` list, (rank, window, slice row in the window, replayed end) per slice that ran."""
    scale = scale or {}
    trace = record.get("trace") if record is not None else None
    group = layout.group_of()
    cores = [c for c, _ in layout.groups]
    out: dict[int, dict[int, int]] = {r: {} for r in lanes}
    windows = sorted({w for lane in lanes.values() for w in lane.windows})
    for w in windows:
        members = window_members(lanes, w)
        # a collective starts when the last member has handed it over: where its gloo worker started it
        # (a transfer: where its gloo:send / gloo:recv started), but not after any member's measured
        # end (an eager send's event starts after the data left) nor before the member's arrival
        ready = {k: {r: _ready(lanes[r], k, min(lanes[m].arrivals[k][2] for m in rs)) for r in rs}
                 for k, rs in members.items()}
        last_ready = {k: max(v.values()) for k, v in ready.items()}
        # a lane starts at its first slice (with_stack: Python frames around the first step begin before
        # it) and its window ends where its last step ends (the slices after it are left out of the
        # step time); times run from the window's first start (float64 epoch ns would round to 256 ns)
        lane_start = {r: int(min(lane.windows[w][0], lane.slices["start_ns"].to_numpy(np.int64)[
            lane.slices["window"].to_numpy() == w].min(initial=lane.windows[w][0]))) for r, lane in lanes.items()
            if w in lane.windows}
        tail = {r: max(0, int(lane.slices["end_ns"].to_numpy(np.int64)[lane.slices["window"].to_numpy() == w].max(
            initial=0)) - lane.windows[w][1]) for r, lane in lanes.items() if w in lane.windows}
        base = min(lane_start.values(), default=0)
        st: dict[int, dict[str, Any]] = {}
        for r, lane in lanes.items():
            if w not in lane.windows:
                continue
            sl = lane.slices[lane.slices["window"].to_numpy() == w]
            starts = sl["start_ns"].to_numpy(np.int64)
            # the slice during which the lane hands each collective over (its ready time, or the enqueue
            # op's end if that came first: the main thread is inside the op until then), never before
            # the arrival nor after its own blocking wait; the ready time is an offset from its start
            arr_at: dict[int, list[tuple[Any, int]]] = {}
            offset: dict[tuple[Any, int], float] = {}
            refs = sl["ref_key"].tolist()
            blocks = sl["blocking"].to_numpy(bool)
            first_wait: dict[Any, int] = {}
            for i in np.flatnonzero(blocks).tolist():
                first_wait.setdefault(refs[i], i)
            for t, k in sorted(((min(ready[k][r], lane.handoff.get(k, (ready[k][r],))[0]), k)
                                for k, (win, _, _) in lane.arrivals.items() if win == w), key=lambda x: x[0]):
                pos = max(int(np.searchsorted(starts, t, side="right")) - 1,
                          int(np.searchsorted(starts, lane.arrivals[k][1], side="left")))
                pos = min(pos, first_wait.get(k, len(starts)))
                arr_at.setdefault(pos, []).append(k)
                at = int(starts[pos]) if pos < len(starts) else int(sl["end_ns"].to_numpy(np.int64)[-1]) \
                    if len(sl) else int(lane.windows[w][0])
                offset[k] = float(ready[k][r] - at)
            f = slice_factors(sl, r, w, scale)
            st[r] = {"i": 0, "n": len(sl), "arr_at": arr_at, "amount": sl["amount"].to_numpy(np.float64) * f,
                     "busy": sl["busy"].to_numpy(bool), "ref": sl["ref_key"].tolist(),
                     "blocking": sl["blocking"].to_numpy(bool), "mode": "until",
                     "until": float(lane_start[r] - base), "rem": 0.0, "g": group.get(r, -1), "done": None,
                     "offset": offset}
        arrived: dict[tuple[Any, int], dict[int, float]] = {}
        ended: dict[tuple[Any, int], dict[int, float]] = {}
        now = min((s["until"] for s in st.values()), default=0.0)
        while True:
            # instantaneous transitions at `now`
            changed = True
            while changed:
                changed = False
                for r, s in st.items():
                    if s["done"] is not None:
                        continue
                    if s["mode"] == "until" and s["until"] <= now:
                        s["mode"] = None
                    if s["mode"] == "blocked":
                        key = s["ref"][s["i"]]
                        if key in ended:
                            s["mode"], s["until"] = "until_wait", max(now, ended[key][r])
                    if s["mode"] == "until_wait" and s["until"] <= now:
                        if trace is not None:
                            trace.append((r, w, s["i"], base + int(round(now))))
                        s["i"] += 1
                        s["mode"] = None
                    if s["mode"] is not None:
                        continue
                    changed = True
                    i = s["i"]
                    for key in s["arr_at"].pop(i, []):
                        arrived.setdefault(key, {})[r] = now + s["offset"][key]
                        if len(arrived[key]) == len(members[key]):
                            t_last = max(arrived[key].values())
                            ended[key] = {m: t_last + (lanes[m].arrivals[key][2] - last_ready[key])
                                          for m in members[key]}
                    if i >= s["n"]:
                        s["done"] = now
                        continue
                    if s["ref"][i] is not None and s["blocking"][i]:
                        s["mode"], s["since"] = "blocked", now
                        key = s["ref"][i]
                        if key in ended:
                            s["mode"], s["until"] = "until_wait", max(now, ended[key][r])
                        continue
                    amount = float(s["amount"][i])
                    if amount <= 0:
                        if trace is not None:
                            trace.append((r, w, i, base + int(round(now))))
                        s["i"] += 1
                        continue
                    s["mode"], s["rem"] = ("busy" if s["busy"][i] else "wall"), amount
            # the next event
            runnable: dict[int, int] = {}
            for s in st.values():
                if s["done"] is None and s["mode"] == "busy":
                    runnable[s["g"]] = runnable.get(s["g"], 0) + 1
            rate = {g: (min(1.0, cores[g] / n) if g >= 0 else 1.0) for g, n in runnable.items()}
            dt, first = np.inf, None
            for r, s in st.items():
                if s["done"] is not None:
                    continue
                m = s["mode"]
                d = s["rem"] / rate[s["g"]] if m == "busy" else s["rem"] if m == "wall" else \
                    s["until"] - now if m in ("until", "until_wait") else np.inf
                if d < dt:
                    dt, first = d, r
            if first is None:
                break
            now += dt
            for r, s in st.items():
                if s["done"] is not None or s["mode"] not in ("busy", "wall"):
                    continue
                s["rem"] -= dt * (rate[s["g"]] if s["mode"] == "busy" else 1.0)
                if r == first or s["rem"] <= 1e-6 * max(1.0, s["amount"][s["i"]]):
                    if trace is not None:
                        trace.append((r, w, s["i"], base + int(round(now))))
                    s["i"] += 1
                    s["mode"] = None
        if record is not None:
            record.setdefault("arrived", {}).update({k: {m: base + t for m, t in v.items()} for k, v in arrived.items()})
            record.setdefault("ended", {}).update({k: {m: base + t for m, t in v.items()} for k, v in ended.items()})
        for r, s in st.items():
            if s["done"] is None:
                if record is not None:
                    record.setdefault("blocked", []).append((r, w))
                log.warning("what-if replay: rank %d window %d blocked at slice %d of %d (a collective whose "
                            "members never all arrive); its window is counted from there", r, w, s["i"], s["n"])
            out[r][w] = base + int(round(s["done"] - tail[r] if s["done"] is not None else s.get("since", now)))
    return out
