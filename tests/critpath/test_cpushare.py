"""The what-if replay with ranks sharing cores (evtsync.critpath.cpushare, docs/critical-path.md §8,
"Ranks sharing cores").

Truth: hand-built jobs whose processor-sharing schedule is worked out by hand in the comments, and
the step times read plainly from the raw trace files — never numbers produced by the replay.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import evtsync
from evtsync.core.errors import InputError
from evtsync.critpath.cpushare import HostLayout, classify, parse_host_cores, replay_shared
from evtsync.critpath.replay import INDEPENDENT_CPU, Lane, mean_step_ms, replay, what_if
from tests.critpath.test_critpath_replay import (
    TWIN_JOBS,
    TWINS,
    _folder,
    _plant_ops,
    _raw_step_ms,
    _synth,
    _truth,
)

MS = 1_000_000


# ------------------------------------------------------------------ the layout option

def test_layout_forms() -> None:
    # N: pinned in contiguous blocks, the k-th of W ranks on core k * N // W (the twins' recording)
    assert parse_host_cores("2", [0, 1, 2, 3]).groups == ((1, (0, 1)), (1, (2, 3)))
    assert parse_host_cores("2", [0, 1, 2]).groups == ((1, (0, 1)), (1, (2,)))  # pp3: 0-1 on core 0, 2 on core 1
    assert parse_host_cores("2", list(range(8))).groups == ((1, (0, 1, 2, 3)), (1, (4, 5, 6, 7)))
    assert parse_host_cores("4", [0, 1]).groups == ((1, (0,)), (1, (1,)))  # more cores than ranks: one each
    assert parse_host_cores("2:shared", [0, 1, 2]).groups == ((2, (0, 1, 2)),)
    lay = parse_host_cores("0-1:1; 2,3:2", [0, 1, 2, 3])
    assert lay.groups == ((1, (0, 1)), (2, (2, 3)))
    assert lay.describe() == "ranks 0-1 on 1 core; ranks 2-3 on 2 cores"
    assert lay.spec == "0-1:1; 2,3:2"


@pytest.mark.parametrize(("spec", "said"), [
    ("0-1:1", "missing [2, 3]"),
    ("0-1:1;1-3:1", "rank(s) [1] listed in more than one group"),
    ("0-4:1", "not in the traces [4]"),
    ("0-1;2-3", "expected N, N:shared or RANKS:CORES"),
    ("0", "expected at least 1 core"),
    ("0-3:0", "expected at least 1 core per group"),
    ("a-b:1", "expected N, N:shared or RANKS:CORES"),
    ("0-3:1;,:1", "expected at least one rank before each ':'; found ','"),
    ("3-0:1", "expected a range from low to high such as 0-3; found '3-0'"),
])
def test_layout_errors_say_what_was_expected(spec: str, said: str) -> None:
    with pytest.raises(InputError, match=re.escape(said)):
        parse_host_cores(spec, [0, 1, 2, 3])


# ------------------------------------------------------------------ hand-built jobs

def _hand_lane(rank: int, parts: list[tuple[str, str, float, bool]], end_ms: float) -> Lane:
    """One step: ``parts`` (kind, name, wall ms, busy) back to back from 0, then the arrival at
    collective ("g", 0) and a blocking wait until ``end_ms``. ``amount`` is filled by the caller."""
    rows, t = [], 0
    for kind, name, ms, busy in parts:
        rows.append((t, t + int(ms * MS), kind, name, None, False, busy))
        t += int(ms * MS)
    arrival = t
    rows.append((t, int(end_ms * MS), "collective_wait", "(wait) AllReduce", ("g", 0), True, False))
    sl = pd.DataFrame(rows, columns=["start_ns", "end_ns", "kind", "name", "ref_key", "blocking", "busy"])
    sl = sl.assign(window=0, step=1, segment=[0] * len(parts) + [1])
    return Lane(rank, sl, {("g", 0): (0, arrival, int(end_ms * MS))}, {0: (0, int(end_ms * MS), 1)})


def _one_core_pair() -> dict[int, Lane]:
    # two ranks on one core. Rank 0: op A, 20 ms wall. Rank 1: op B, 10 ms, then a sleep of 10 ms.
    # Both arrive at 20 ms; the collective ends at 22.
    # By hand: 0-10 ms both busy (rate 1/2 each), 10-20 only A (rate 1): B's work 5 ms, A's 5 + 10 = 15.
    return {0: _hand_lane(0, [("cpu_op", "A", 20.0, True)], 22.0),
            1: _hand_lane(1, [("cpu_op", "B", 10.0, True), ("python_gap", "(python gap)", 10.0, False)], 22.0)}


ONE_CORE = HostLayout(((1, (0, 1)),), "0-1:1")


def _with_work(lanes: dict[int, Lane], work: dict[int, list[float]]) -> dict[int, Lane]:
    for r, lane in lanes.items():
        lane.slices = lane.slices.assign(amount=[w * MS for w in work[r]])
    return lanes


def test_work_under_sharing_by_hand() -> None:
    lanes = _one_core_pair()
    from evtsync.critpath.cpushare import _works

    work, _ = _works(lanes, ONE_CORE, {r: lane.slices["busy"].to_numpy(bool) for r, lane in lanes.items()})
    assert work[0][0] == pytest.approx(15.0 * MS)  # A
    assert work[1][0] == pytest.approx(5.0 * MS)   # B
    assert work[1][1] == pytest.approx(10.0 * MS)  # the sleep keeps its wall time


def test_shared_replay_by_hand() -> None:
    lanes = _with_work(_one_core_pair(), {0: [15.0, 0.0], 1: [5.0, 10.0, 0.0]})
    # measured work reproduces the measured 22 ms
    assert mean_step_ms(lanes, replay_shared(lanes, ONE_CORE))[0] == pytest.approx(22.0)
    # A at 5 ms of work: A and B share 0-10 ms and both end at 10; rank 1 still sleeps to 20: 22
    assert mean_step_ms(lanes, replay_shared(lanes, ONE_CORE, {(0, 0, 1, 0, "cpu_op", "A"): 1 / 3}))[0] == \
        pytest.approx(22.0)
    # A at 5 and no sleep: both arrive at 10, the collective ends at 12
    both = {(0, 0, 1, 0, "cpu_op", "A"): 1 / 3, (1, 0, 1, 0, "python_gap", "(python gap)"): 0.0}
    assert mean_step_ms(lanes, replay_shared(lanes, ONE_CORE, both))[0] == pytest.approx(12.0)
    # B twice its work and no sleep: 0-20 ms shared (B done at 20 with 10 ms of work, A has 10 of its
    # 15), then A alone for 5 ms: arrives at 25, the collective ends at 27 — A is slowed by B, which an
    # independent-durations replay cannot say (there A would still end at 20: 22)
    slower = {(1, 0, 1, 0, "cpu_op", "B"): 2.0, (1, 0, 1, 0, "python_gap", "(python gap)"): 0.0}
    assert mean_step_ms(lanes, replay_shared(lanes, ONE_CORE, slower))[0] == pytest.approx(27.0)
    # no-effect: the same job with each rank on its own core runs as measured durations say
    apart = HostLayout(((1, (0,)), (1, (1,))), "2")
    lanes = _with_work(_one_core_pair(), {0: [20.0, 0.0], 1: [10.0, 10.0, 0.0]})
    assert mean_step_ms(lanes, replay_shared(lanes, apart, slower))[0] == pytest.approx(22.0)


def _sleep_or_busy(mate_ms: float) -> dict[int, Lane]:
    # first 20 ms: both ranks run ten "mm" of 2 ms side by side (1 ms of work each: the typical);
    # then rank 1 spends 5 × ``mate_ms`` in a "python" annotation while rank 0 runs five "mm" of
    # ``mate_ms`` each
    both = [("cpu_op", "mm", 2.0, True)] * 10
    return {0: _hand_lane(0, both + [("cpu_op", "mm", mate_ms, True)] * 5, 40.0),
            1: _hand_lane(1, both + [("python", "load", 5 * mate_ms, True)], 40.0)}


def test_a_sleep_is_told_from_a_busy_loop_by_its_core_mate() -> None:
    # rank 0's "mm" ran at 1 ms beside the annotation: had the annotation held the core, each would
    # have had half of it (0.5 ms of work against the typical 1 ms); alone, 1 ms of work: a sleep
    judged = classify(_sleep_or_busy(1.0), ONE_CORE)
    assert judged.busy[1].tolist() == [True] * 10 + [False, False]
    assert (judged.n_decided, judged.n_idle, judged.idle_ms) == (1, 1, pytest.approx(5.0))
    assert judged.work[0][10:15] == pytest.approx([1.0 * MS] * 5)
    assert judged.work[1][10] == pytest.approx(5.0 * MS)  # not busy: its wall time
    # the same at 2 ms each: the core was shared (1 ms of work each, the typical): busy
    judged = classify(_sleep_or_busy(2.0), ONE_CORE)
    assert judged.busy[1].tolist() == [True] * 11 + [False]
    assert (judged.n_decided, judged.n_idle) == (1, 0)
    assert judged.work[0][10:15] == pytest.approx([1.0 * MS] * 5)
    # no core-mate: nothing to judge by, it stays busy
    alone = classify(_sleep_or_busy(1.0), HostLayout(((1, (0,)), (1, (1,))), "2"))
    assert alone.busy[1].tolist() == [True] * 11 + [False] and alone.n_decided == 0


def _handoff_lane(rank: int, enqueue_ms: float) -> Lane:
    # 5 ms of work, then the enqueue op (its own time: the main thread until the gloo worker starts
    # the collective), then a blocking wait until the collective ends at 30 ms
    e = 5.0 + enqueue_ms
    sl = pd.DataFrame({"start_ns": [0, 5 * MS, int(e * MS)], "end_ns": [5 * MS, int(e * MS), 30 * MS],
                       "kind": ["cpu_op", "enqueue", "collective_wait"], "name": ["A", "c10d::allreduce_",
                                                                           "(wait) AllReduce"],
                       "ref_key": [None, None, ("g", 0)], "blocking": [False, False, True], "busy": [True, True, False],
                       "window": 0, "step": 1, "segment": [0, 0, 1]})
    lane = Lane(rank, sl, {("g", 0): (0, 5 * MS, 30 * MS)}, {0: (0, 30 * MS, 1)})
    lane.handoff = {("g", 0): (int(e * MS), int(e * MS))}  # (enqueue op's end, worker's start)
    return lane


def test_a_collective_starts_when_the_last_worker_starts_it() -> None:
    # rank 1's enqueue lasted 20 ms (descheduled inside it), rank 0's 1 ms; both workers start the
    # collective when their enqueue ends (6 and 25 ms) and it ends 5 ms after the last start: 30 ms
    lanes = {0: _handoff_lane(0, 1.0), 1: _handoff_lane(1, 20.0)}
    for lane in lanes.values():
        lane.slices = lane.slices.assign(amount=(lane.slices["end_ns"] - lane.slices["start_ns"]).astype(float))
    apart = HostLayout(((1, (0,)), (1, (1,))), "2")
    assert mean_step_ms(lanes, replay_shared(lanes, apart))[0] == pytest.approx(30.0)
    # rank 1's enqueue at 1 ms: its worker starts at 6 ms, the collective ends at 11
    fix = {(1, 0, 1, 0, "enqueue", "c10d::allreduce_"): 1 / 20}
    assert mean_step_ms(lanes, replay_shared(lanes, apart, fix))[0] == pytest.approx(11.0)
    # the replay without a layout counts the collective from the enqueues' starts (5 ms): the 20 ms
    # enqueue is inside the collective's measured time after that, and fixing it saves nothing
    assert mean_step_ms(lanes, replay(lanes, fix))[0] == pytest.approx(30.0)


# ------------------------------------------------------------------ real recordings

def _load(folder: Path):  # noqa: ANN202
    traces = evtsync.load_traces(folder, cache=False)
    return traces, evtsync.align_collectives(traces)


def test_shared_replay_reproduces_a_real_job_and_says_its_assumption() -> None:
    traces, alignment = _load(TWINS / "ddp")
    w = what_if(traces, alignment, host_cores="2")
    assert w.step_time_ms == pytest.approx(_raw_step_ms(TWINS / "ddp"), abs=0.01)
    assert w.replayed_step_time_ms == pytest.approx(w.step_time_ms, abs=0.01)
    s = w.summary()
    assert s["whatif_host_cores"] == "2"
    assert s["whatif_durations"].startswith("processor sharing") and "ranks 0-1 on 1 core; ranks 2-3 on 1 core" \
        in s["whatif_durations"]
    c = s["whatif_cpu_sharing"]
    # every annotation / Python-gap slice of the main threads is counted, judged or not
    n_undecided = sum(int(lane.slices["kind"].isin(["python", "python_gap"]).sum()) for lane in w.lanes.values())
    assert c["undecided_slices"] == n_undecided and 0 <= c["judged_not_busy"] <= c["judged_by_core_mates"] <= n_undecided
    # without a layout the output says the durations were independent
    plain = what_if(traces, alignment)
    assert plain.summary()["whatif_durations"] == INDEPENDENT_CPU and plain.summary()["whatif_host_cores"] is None
    assert "whatif_cpu_sharing" not in plain.summary()


def test_a_layout_on_a_gpu_job_is_refused(tmp_path: Path) -> None:
    traces, alignment = _load(_synth(tmp_path / "s"))
    with pytest.raises(InputError, match="CPU-side"):
        what_if(traces, alignment, host_cores="2")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evtsync", "attribute", *args], capture_output=True, text=True,
                          check=False)


def test_cli_host_cores(tmp_path: Path) -> None:
    folder = str(TWINS / "pp3")
    done = _cli(folder, "--what-if", "--host-cores", "0-1:1;2:1", "--json")
    assert done.returncode == 0, done.stderr
    w = json.loads(done.stdout)["what_if"]
    assert w["whatif_host_cores"] == "0-1:1;2:1" and "ranks 0-1 on 1 core; ranks 2 on 1 core" in w["whatif_durations"]
    assert w["step_time_ms"] == pytest.approx(_raw_step_ms(TWINS / "pp3"), abs=0.01)
    printed = _cli(folder, "--what-if")
    assert printed.returncode == 0 and f"durations: {INDEPENDENT_CPU}" in printed.stdout
    # bad layouts and a layout without --what-if: one line, non-zero, no traceback
    for args in (("--what-if", "--host-cores", "0-1:1"), ("--host-cores", "2")):
        bad = _cli(folder, *args)
        assert bad.returncode != 0 and "Traceback" not in bad.stderr
        assert len([ln for ln in bad.stderr.splitlines() if "error" in ln]) == 1, bad.stderr
    assert "missing [2]" in _cli(folder, "--what-if", "--host-cores", "0-1:1").stderr
    # a malformed layout is refused before any trace is read: the error names the layout, not the path
    early = _cli(str(tmp_path / "no-such-folder"), "--what-if", "--host-cores", "3-0:1")
    assert early.returncode != 0 and "Traceback" not in early.stderr
    assert "expected a range from low to high" in early.stderr and "no-such-folder" not in early.stderr
    assert np.isfinite(w["slowdown"])


# ------------------------------------------------------------------ the twins with their host's layout

#: the host the twins were recorded on: 2 cores (tests/data/gloo-twins/README.md), every rank pinned to
#: one of them in contiguous blocks (the truth files' ``twins.pinned``): ``--host-cores 2``
TWIN_HOST = "2"
#: measured with TWIN_HOST (docs/critical-path.md §8, "Ranks sharing cores"): where the saving misses
#: the issue's ±15 % against the twins' planted − clean step time
PLANTS_OFF = {
    "twins/ddp": "-27%: 23.30 against 32.10 ms: after each computing plant its rank's next enqueue lasts 17.2 "
                 "and 16.7 ms (median 0.08) alone on its core, a straggler op of its own that fixing the plants "
                 "does not fix",
    "twins/tpdp8": "+24%: 17.93 against 14.41 ms: the replay packs the job's CPU work tighter than the clean "
                   "twin ran it (fixed, step 2 ends at 29.4 ms; the clean twin's step 2 spans 36.7-39.6 ms)",
    "twins/pp3": "-18%: 7.90 against 9.61 ms: rank 1's c10d::recv_ / c10d::send enqueues of steps 2-4 last "
                 "1.98-4.69 ms (median 0.01-0.04) alone on its core, straggler ops of their own",
}
JOB_OFF = {
    "twins/tpdp8": "+30%: 18.74 against 14.41 ms (see PLANTS_OFF)",
}
#: each plant alone against its own clock (the issue's ±25 %), measured with TWIN_HOST
PLANT_OFF = {
    ("twins/tpdp8", 5): "-37% (4.76 of 7.54 ms per step)",
    ("twins/tpdp8", 2): "-34% (4.14 of 6.27 ms per step)",
    ("twins/tpdp8", 7): "-27% (3.66 of 5.02 ms per step)",
}
_SHARED: dict[str, object] = {}


def _shared(job: str):  # noqa: ANN202
    if job not in _SHARED:
        truth = _truth(job)
        assert "contiguous blocks per core" in truth["twins"]["pinned"]
        traces, alignment = _load(_folder(job))
        _SHARED[job] = what_if(traces, alignment, host_cores=TWIN_HOST)
    return _SHARED[job]


def _twin_params(off: dict[str, str]) -> list:
    return [pytest.param(j, marks=([pytest.mark.xfail(strict=True, reason=off[j])] if j in off else [])
                         + ([pytest.mark.slow] if j in ("twins/tpdp8", "twins/ddpws") else []))
            for j in TWIN_JOBS]


@pytest.mark.parametrize("job", _twin_params(PLANTS_OFF))
def test_twins_all_plants_with_their_host_layout(job: str) -> None:
    w = _shared(job)
    # the replay with measured work gives the measured step time
    assert w.replayed_step_time_ms == pytest.approx(_raw_step_ms(_folder(job)), abs=0.001)
    stack = _truth(job)["twins"].get("with_stack", False)
    ops = pd.concat([_plant_ops(w, {**p, "with_stack": stack}) for p in _truth(job)["plants"]])
    measured = _raw_step_ms(_folder(job)) - _raw_step_ms(_folder(f"{job}-clean"))
    assert w.saving_of(ops) == pytest.approx(measured, rel=0.15)


@pytest.mark.parametrize("job", _twin_params(JOB_OFF))
def test_twins_every_straggler_op_with_their_host_layout(job: str) -> None:
    # the job-level answer (step_time_without_stragglers_ms: every straggler op fixed, the plants'
    # after-effects on their own rank included) against the twins' planted − clean
    w = _shared(job)
    measured = _raw_step_ms(_folder(job)) - _raw_step_ms(_folder(f"{job}-clean"))
    assert w.saving_ms_per_step == pytest.approx(measured, rel=0.15)


def _plant_params() -> list:
    out = []
    for job in TWIN_JOBS:
        for p in _truth(job)["plants"]:
            marks = [pytest.mark.xfail(strict=True, reason=PLANT_OFF[(job, p["rank"])])] \
                if (job, p["rank"]) in PLANT_OFF else []
            if job in ("twins/tpdp8", "twins/ddpws"):
                marks.append(pytest.mark.slow)
            out.append(pytest.param(job, p, id=f"{job}-rank{p['rank']}-{p['kind']}", marks=marks))
    return out


@pytest.mark.parametrize(("job", "plant"), _plant_params())
def test_twins_each_plant_with_their_host_layout(job: str, plant: dict) -> None:
    w = _shared(job)
    ops = _plant_ops(w, {**plant, "with_stack": _truth(job)["twins"].get("with_stack", False)})
    assert len(ops) >= 1
    effect = plant["measured_us"] / 1000.0 / (w.n_steps / w.n_ranks)
    assert w.saving_of(ops) == pytest.approx(effect, rel=0.25)


@pytest.mark.parametrize("job", ["twins/pp3", pytest.param("twins/ddpws", marks=pytest.mark.slow)])
def test_every_slice_is_replayed_at_its_measured_end(job: str) -> None:
    # pp3: transfers and a collective on 2 cores shared unevenly; ddpws: with_stack, whose Python
    # frames begin before the first step (the replay without a layout is 0.6 % off there)
    w = _shared(job)
    record: dict = {"trace": []}
    replay_shared(w.lanes, w.layout, None, record)
    ran = 0
    for r, win, i, end in record["trace"]:
        sl = w.lanes[r].slices
        measured = int(sl["end_ns"].to_numpy()[sl["window"].to_numpy() == win][i])
        assert abs(end - measured) < 1000, (r, win, i, end - measured)
        ran += 1
    assert ran == sum(len(lane.slices) for lane in w.lanes.values())
