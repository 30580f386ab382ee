"""CPU-side attribution on hand-built main-thread timelines whose answers are counted by hand
(issue 46, items 2 and 3): waits are paired by the collective they wait for, not by their position
in the program; a root must account for the tax routed to it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.critpath.cpu import combine_sides, rank_timeline, side_of

MS = 1_000_000


def _ops(rows: list[tuple[str, str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"name": n, "cat": c, "tid": 1, "ts_ns": int(a * MS), "end_ns": int(b * MS), "window": 0}
                         for n, c, a, b in rows])


def _inst(rows: list[tuple[str, int, float, float]]) -> pd.DataFrame:
    return pd.DataFrame([{"pg": pg, "index": i, "window": 0, "collective": "AllReduce", "ts_ns": int(a * MS),
                          "end_ns": int(b * MS)} for pg, i, a, b in rows])


STEP = ("ProfilerStep#1", "user_annotation", 0, 100)


def _user_names(rows: list[tuple[str, str, float, float]]) -> list[str]:
    """user_names over (name, cat, start, end) rows, sorted by start, longer first."""
    from evtsync.critpath.cpu import user_names

    return user_names(np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
                      [r[0] for r in rows], [r[1] for r in rows])
ENQ = "c10d::allreduce_"


def _two_programs():
    """Rank 0 (fastest) and rank 1 (straggler) of group g run different code between g's collectives
    0 (ends at 2 ms) and 1: rank 0 adds (3 ms) then waits in p#0 from 5.1 to 30 ms (24.9 ms); rank 1 waits in
    q#0 (a group without rank 0) from 2.1 to 12 ms (9.9 ms), then in p#0 from 12.1 to 30 ms (17.9 ms), then
    multiplies 10 ms. Rank 1 enqueues g#1 at 40 ms, rank 0 at 31 ms: 9 ms late."""
    fast = rank_timeline(0, _ops([STEP, (ENQ, "cpu_op", 1, 1.1), ("aten::add", "cpu_op", 2, 5), (ENQ, "cpu_op", 5, 5.1),
                                  (ENQ, "cpu_op", 31, 31.1)]),
                         _inst([("g", 0, 1.1, 2), ("p", 0, 5.1, 30), ("g", 1, 31.1, 60)]))
    slow = rank_timeline(1, _ops([STEP, (ENQ, "cpu_op", 1, 1.1), (ENQ, "cpu_op", 2, 2.1), (ENQ, "cpu_op", 12, 12.1),
                                  ("aten::mm", "cpu_op", 30, 40), (ENQ, "cpu_op", 40, 40.1)]),
                         _inst([("g", 0, 1.1, 2), ("q", 0, 2.1, 12), ("p", 0, 12.1, 30), ("g", 1, 40.1, 60)]))
    return fast, slow


def test_waits_pair_by_the_collective_waited_for_not_by_position():
    fast, slow = _two_programs()
    assert fast is not None and slow is not None
    row = {"tau_max_us": 9000.0}
    extra = combine_sides(side_of(slow, "g", 1), side_of(fast, "g", 1), slow, row, (0.8, 1.25))
    by_name = {(name, waited): v / MS for (_kind, name, waited), v in extra.items()}
    # hand count: both waited in p#0 (17.9 against 24.9 ms: -7.0), rank 1 alone in q#0 (+9.9), and its
    # own 10 ms matmul is the largest extra; by position the p#0 wait of rank 1 (its 2nd) met nothing
    # on rank 0 (+17.9 ms) and became the cause
    assert by_name[("(wait) AllReduce", ("p", 0))] == pytest.approx(-7.0)
    assert by_name[("(wait) AllReduce", ("q", 0))] == pytest.approx(9.9)
    assert by_name[("aten::mm", -1)] == pytest.approx(10.0)
    assert row["cause_name"] == "aten::mm" and row["cause_extra_us"] == pytest.approx(10_000.0)
    assert row.get("cause_pg") is None
    # the extras still add up to the lateness (9 ms): nothing lost by the pairing
    assert sum(extra.values()) / MS == pytest.approx(9.0) and row["unplaced_us"] == pytest.approx(0.0)


def test_same_program_waits_pair_as_before():
    """No effect where both ranks run the same code: one wait each in p#0, compared with each other."""
    fast = rank_timeline(0, _ops([STEP, (ENQ, "cpu_op", 1, 1.1), (ENQ, "cpu_op", 3, 3.1), (ENQ, "cpu_op", 21, 21.1)]),
                         _inst([("g", 0, 1.1, 2), ("p", 0, 3.1, 20), ("g", 1, 21.1, 40)]))
    slow = rank_timeline(1, _ops([STEP, (ENQ, "cpu_op", 1, 1.1), (ENQ, "cpu_op", 3, 3.1), (ENQ, "cpu_op", 26, 26.1)]),
                         _inst([("g", 0, 1.1, 2), ("p", 0, 3.1, 25), ("g", 1, 26.1, 40)]))
    row = {"tau_max_us": 5000.0}
    combine_sides(side_of(slow, "g", 1), side_of(fast, "g", 1), slow, row, (0.8, 1.25))
    # waited 21.9 against 16.9 ms in the same p#0: +5 ms, routed to p#0
    assert row["cause_name"] == "(wait) AllReduce" and row["cause_extra_us"] == pytest.approx(5000.0)
    assert (row["cause_pg"], row["cause_index"]) == ("p", 0)


def _chain(root_extra_us: float) -> pd.DataFrame:
    """Hand-made: a 15 ms tax on a#0 whose straggler (rank 1) waited in b#0, whose straggler (rank 2)
    waited in c#3, whose straggler (rank 5) has its own cause aten::copy_ of ``root_extra_us``."""
    from evtsync.critpath.attribution import route_blame

    wait = dict(status="ok", cause_name="(wait) AllReduce", cause_category="collective_wait")
    return route_blame(pd.DataFrame([
        dict(wait, pg="a", index=0, straggler_rank=1, tau_max_us=15_000.0, cause_extra_us=14_800.0,
             cause_pg="b", cause_index=0),
        dict(wait, pg="b", index=0, straggler_rank=2, tau_max_us=14_000.0, cause_extra_us=13_900.0,
             cause_pg="c", cause_index=3),
        dict(pg="c", index=3, straggler_rank=5, status="unexplained", tau_max_us=13_000.0,
             cause_extra_us=root_extra_us, cause_name="aten::copy_", cause_category="cpu_op",
             cause_pg=None, cause_index=None),
    ]))


def test_a_root_that_does_not_account_for_the_routed_tax_is_not_named():
    """Issue 46, item 3: 15 ms routed in 2 hops to a 92 µs cause (less than half): the chain stops at
    'propagated from rank 5, not explained' with the reason; the root's own row keeps its cause."""
    out = _chain(92.0)
    first = out.iloc[0]
    assert first["root_rank"] == 5 and first["root_chain"] == 2
    assert first["root_cause"] == "propagated from rank 5, not explained"
    assert first["root_category"] == "not_explained"
    assert "92 µs of the 15,000 µs" in first["root_reason"] and "unexplained" in first["root_reason"]
    assert out.iloc[2]["root_cause"] == "aten::copy_" and pd.isna(out.iloc[2]["root_reason"])  # its own root


def test_a_root_that_accounts_for_half_is_named():
    # 7,600 µs of a 15,000 µs tax (> half) and of b's 14,000 (> half): named on both chains
    out = _chain(7_600.0)
    assert out["root_cause"].tolist() == ["aten::copy_"] * 3 and out["root_reason"].isna().all()
    # 7,200 µs: more than half of b's 14,000 but less than half of a's 15,000
    out = _chain(7_200.0)
    assert out["root_cause"].tolist()[1:] == ["aten::copy_"] * 2
    assert out["root_cause"].iat[0] == "propagated from rank 5, not explained"


def test_user_names_annotation_user_level_op_and_thread_join():
    """Names as a torch 2.13 trace (with_stack=True) spells them; nesting counted by hand."""
    rows = [  # name, cat, start, end (µs); sorted by start, longer first
        ("ProfilerStep#3", "user_annotation", 0, 100),
        ("expert_mm", "user_annotation", 1, 30),
        ("aten::mm", "cpu_op", 2, 10),
        ("aten::clone", "cpu_op", 11, 20),
        ("aten::copy_", "cpu_op", 12, 19),
        ("threading.py(1087): join", "python_function", 40, 90),
        ("threading.py(1125): _wait_for_tstate_lock", "python_function", 41, 89),
        ("<built-in method acquire of _thread.lock object at 0x7f34e0526240>", "python_function", 42, 88),
        ("aten::add", "cpu_op", 95, 96),
    ]
    names = _user_names(rows)
    assert names == ["ProfilerStep#3", "expert_mm", "expert_mm > aten::mm", "expert_mm > aten::clone",
                     "expert_mm > aten::clone > aten::copy_", "(thread join)", "(thread join)", "(thread join)",
                     "aten::add"]


def test_user_names_gc_pause():
    """A pass of the garbage collector as torch 2.13 records it (with_stack=True and
    _ExperimentalConfig(record_python_gc_info=True)): a ``Python GC`` python_function event inside the
    frame that triggered it (an allocation, or ``gc.collect``); nesting counted by hand from such a trace."""
    rows = [  # name, cat, start, end (µs); sorted by start, longer first
        ("ProfilerStep#2", "user_annotation", 0, 100),
        ("record_gloo_whatif.py(57): plant", "python_function", 1, 90),
        ("Python GC", "python_function", 5, 15),  # a young-generation pass during allocation
        ("<built-in function collect>", "python_function", 40, 80),
        ("Python GC", "python_function", 41, 79),  # the gc.collect itself
        ("data_loader", "user_annotation", 91, 99),
        ("Python GC", "python_function", 92, 93),  # inside the user's annotation
    ]
    names = _user_names(rows)
    assert names == ["ProfilerStep#2", "record_gloo_whatif.py(57): plant", "(GC pause)",
                     "<built-in function collect>", "(GC pause)", "data_loader", "data_loader > (GC pause)"]
    # a frame merely named like the collector's module is not a GC pause
    assert _user_names([("gc.py(3): Python GC helper", "python_function", 0, 5)]) == ["gc.py(3): Python GC helper"]


def test_async_wait_is_named_by_its_collective():
    """``work.wait()`` is not profiled: the main thread's uninstrumented time that holds the end of
    collectives it enqueued earlier (async_op=True) and ends just after them is the wait for them.
    Hand-made tiles (ms): collective 0 enqueued at 1, ends at 30; collective 1 enqueued at 2, ends at 31.5."""
    from evtsync.critpath.cpu import _KIND_CODE, WAKE_NS, _async_waits

    ms = 1_000_000
    gap, wait, op = _KIND_CODE["python_gap"], _KIND_CODE["collective_wait"], _KIND_CODE["cpu_op"]
    arrivals = pd.DataFrame({"enqueue_ns": [1 * ms, 2 * ms], "end_ns": [30 * ms, 31.5 * ms],
                             "collective": ["AllReduce", "AllReduce"]})
    rows = np.array([0, 1])
    tiles = [(3 * ms, 5 * ms, op, "aten::add_", -1), (5 * ms, 31.6 * ms, gap, "(python gap)", -1),
             (31.6 * ms, 32 * ms, op, "aten::mul", -1)]
    tiles = [(int(a), int(b), k, n, r) for a, b, k, n, r in tiles]
    out = _async_waits(tiles, arrivals, rows)
    # the gap becomes: wait for 0 until 30, wait for 1 until 31.5, then 0.1 ms of wake-up
    assert out == [tiles[0], (5 * ms, 30 * ms, wait, "(wait) AllReduce", 0),
                   (30 * ms, int(31.5 * ms), wait, "(wait) AllReduce", 1),
                   (int(31.5 * ms), int(31.6 * ms), gap, "(python gap)", -1), tiles[2]]
    # misspecified cases stay as they are: a gap that ends more than WAKE_NS after the last end
    # (the thread was doing something else), a gap before the enqueue, an op holding the end
    late = [(5 * ms, 31 * ms + WAKE_NS + 1, gap, "(python gap)", -1)]
    assert _async_waits(late, arrivals.iloc[:1], rows[:1]) == late
    early = [(0, 30 * ms, gap, "(python gap)", -1)]
    assert _async_waits(early, arrivals.iloc[:1], rows[:1]) == early
    busy = [(5 * ms, 30 * ms, op, "aten::mm", -1)]
    assert _async_waits(busy, arrivals.iloc[:1], rows[:1]) == busy
    assert _async_waits(tiles, arrivals, np.array([], dtype=int)) == tiles


def test_user_names_annotation_that_outlives_the_profilers_frames():
    """with_stack=True (torch 2.13, tests/data/gloo-twins/ddpws rank 2 step 6, times in µs from the
    raw file): record_function("expert_mm") starts inside the profiler's ``__enter__`` frame and
    outlives it; the op inside is still named with the annotation."""
    rows = [
        ("record_gloo_whatif.py(61): plant", "python_function", 10, 42126),
        ("torch/autograd/profiler.py(918): __enter__", "python_function", 23, 40),
        ("<built-in method _record_function_enter_new of pybind11_builtins", "python_function", 25, 37),
        ("expert_mm", "user_annotation", 30, 42114),
        ("record_gloo_whatif.py(50): _mm_until", "python_function", 43, 41997),
        ("<built-in method mm of type object at 0x7f0a34ccea40>", "python_function", 130, 569),
        ("aten::mm", "cpu_op", 147, 567),
    ]
    names = _user_names(rows)
    assert names[3:] == ["expert_mm", "expert_mm > record_gloo_whatif.py(50): _mm_until",
                         "expert_mm > <built-in method mm of type object>", "expert_mm > aten::mm"]


def test_async_collective_bounded_by_the_last_one_ended_before_it():
    """Two buckets issued with async_op=True, back to back, waited on together (hand-made, ms). Rank 1
    sleeps 30 ms in a data_loader_stall first; both of its buckets are late by it. Bucket 1's path
    starts where the last collective *ended before its enqueue* ended (here the window start: bucket 0
    was still in flight), not at bucket 0's end, which lies after bucket 1's enqueue."""
    stall = ("data_loader_stall", "user_annotation", 1, 31)
    # gloo runs each on its own worker thread as soon as it is enqueued; both end when rank 1's are done
    slow = rank_timeline(1, _ops([STEP, stall, (ENQ, "cpu_op", 32, 32.1), (ENQ, "cpu_op", 32.2, 32.3)]),
                         _inst([("g", 0, 32.1, 35), ("g", 1, 32.3, 36)]))
    fast = rank_timeline(0, _ops([STEP, (ENQ, "cpu_op", 2, 2.1), (ENQ, "cpu_op", 2.2, 2.3)]),
                         _inst([("g", 0, 2.1, 35), ("g", 1, 2.3, 36)]))
    s1, f1 = side_of(slow, "g", 1), side_of(fast, "g", 1)
    assert (s1.bottom, f1.bottom) == ("window_start", "window_start")
    row = {"tau_max_us": 30_200.0}
    extra = combine_sides(s1, f1, slow, row, (0.8, 1.25))
    # hand count: rank 1 enqueues bucket 1 at 32.2 ms, rank 0 at 2.2 ms: 30 ms late, 30 of it the stall
    assert row["cause_name"] == "data_loader_stall" and row["cause_extra_us"] == pytest.approx(30_000.0)
    assert sum(extra.values()) / MS == pytest.approx(30.0)
    # a synchronous job: bucket 0 had ended (35 ms) before bucket 1's enqueue (36 ms): it bounds bucket 1
    sync = rank_timeline(1, _ops([STEP, stall, (ENQ, "cpu_op", 32, 32.1), (ENQ, "cpu_op", 36, 36.1)]),
                         _inst([("g", 0, 32.1, 35), ("g", 1, 36.1, 37)]))
    assert side_of(sync, "g", 1).bottom == "previous_collective" and side_of(sync, "g", 1).bottom_ns == 35 * MS
