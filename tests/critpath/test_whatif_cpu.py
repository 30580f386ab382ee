"""What-if without stragglers on CPU-side jobs (issue 46, item 2, first part): the replay of the
cross-rank collective DAG (evtsync.critpath.whatif).

Truth: hand counts on a hand-built pair of timelines; on the real planted gloo recordings the
ProfilerStep#N durations read from the raw files with gzip + json, and the plants' durations the
recording script measured with perf_counter_ns (tests/data/gloo-planted/*.truth.json).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

import evtsync.critpath as cp
from evtsync.critpath.cpu import rank_timeline
from evtsync.critpath.whatif import rank_segments, replay_window, what_if
from evtsync.trace.traceset import load_traces

DATA = Path(__file__).parents[1] / "data" / "gloo-planted"
MS = 1_000_000


def _raw_step_time_ms(job: str) -> tuple[float, dict[int, int]]:
    """Mean over recorded steps of the longest rank's ProfilerStep#N, and steps per window, from the raw files."""
    per_step: dict[str, float] = {}
    for f in sorted((DATA / job).glob("*.json.gz")):
        with gzip.open(f, "rt") as fh:
            for e in json.load(fh)["traceEvents"]:
                name = str(e.get("name", ""))
                if e.get("ph") == "X" and name.startswith("ProfilerStep#") and e.get("cat") == "user_annotation":
                    per_step[name] = max(per_step.get(name, 0.0), float(e["dur"]) / 1000.0)
    steps = sorted(int(n.split("#")[1]) for n in per_step)
    windows: dict[int, int] = {}
    for s in steps:  # two windows of consecutive steps
        windows.setdefault(0 if s <= steps[0] + 1 else 1, 0)
        windows[0 if s <= steps[0] + 1 else 1] += 1
    return sum(per_step.values()) / len(per_step), windows


def _setup(job: str):
    traces = load_traces([DATA / job], cache=False)
    result = cp.attribute(traces)
    inst, ops = result.instances, traces.cpu_ops
    timelines = {int(r): rank_timeline(int(r), ops[ops["rank"] == r], inst[inst["rank"] == r])
                 for r in sorted(inst["rank"].unique())}
    windows = inst.drop_duplicates(["pg", "index"])[["pg", "index", "window"]]
    return timelines, result.collectives.merge(windows, on=["pg", "index"], how="left")


def test_replay_by_hand():
    """Rank 0 works 2 ms, rank 1 stalls 10 ms then works 2 ms; one collective of 1 ms communication.
    Replay: 12 + 1 = 13 ms; with the stall at its typical value (rank 0 has none: 0) 2 + 1 = 3 ms."""
    from evtsync.critpath.cpu import RankTimeline

    def tl(rank: int, work: list[tuple[str, float, float]], enq: float) -> RankTimeline:
        slices = pd.DataFrame([{"start_ns": int(a * MS), "end_ns": int(b * MS), "kind": 0, "name": n, "ref": -1,
                                "window": 0} for n, a, b in work])
        arrivals = pd.DataFrame([{"pg": "g", "index": 0, "window": 0, "collective": "AllReduce",
                                  "enqueue_ns": int(enq * MS), "enqueue_end_ns": int(enq * MS),
                                  "start_ns": int(enq * MS), "end_ns": int(13 * MS), "enqueue_name": "c10d::allreduce_"}])
        return RankTimeline(rank, 1, slices, arrivals, {0: 0})

    t0 = tl(0, [("aten::mm", 0, 2)], 2)  # waits 11 ms in the collective
    t1 = tl(1, [("stall", 0, 10), ("aten::mm", 10, 12)], 12)
    t1.arrivals.loc[0, "start_ns"] = 12 * MS  # its collective ran 1 ms (12 -> 13): the communication
    segs = {0: rank_segments(t0), 1: rank_segments(t1)}
    assert replay_window(segs, 0) == pytest.approx(13 * MS)
    assert replay_window(segs, 0, {(1, 0): {"stall": 0}}) == pytest.approx(3 * MS)
    coll = pd.DataFrame([{"pg": "g", "index": 0, "window": 0, "status": "ok", "root_chain": 0, "root_rank": 1,
                          "root_cause": "stall", "root_category": "python"}])
    summary, table = what_if({0: t0, 1: t1}, coll, {0: 1})
    assert summary["step_time_replay_ms"] == pytest.approx(13.0)
    assert summary["step_time_without_stragglers_ms"] == pytest.approx(3.0)
    assert table.iloc[0][["rank", "cause"]].tolist() == [1, "stall"]
    assert table.iloc[0]["saving_ms_per_step"] == pytest.approx(10.0) and table.iloc[0]["saving_share"] == 1.0


@pytest.mark.parametrize("job", ["ddp", "ddp-clean", "tpdp", "tpdp-clean"])
def test_replay_of_the_measured_job_reproduces_its_step_time(job):
    """No effect: replaying every measured duration gives the measured step time (within 6 %)."""
    timelines, coll = _setup(job)
    measured, windows = _raw_step_time_ms(job)
    summary, _ = what_if(timelines, coll, windows)
    assert summary["step_time_replay_ms"] == pytest.approx(measured, rel=0.06), (summary, measured)


def test_fixing_the_annotated_stall_alone_saves_its_share_of_the_step():
    """ddp: rank 1's data_loader_stall (measured by the job) in 1 of the 4 recorded steps: fixing it
    alone saves its duration / 4 per step, within 25 %."""
    truth = json.loads((DATA / "ddp.truth.json").read_text())
    stall = next(p for p in truth["plants"] if p["cause"] == "data_loader_stall")
    timelines, coll = _setup("ddp")
    _, windows = _raw_step_time_ms("ddp")
    _, table = what_if(timelines, coll, windows)
    row = table[(table["rank"] == stall["rank"]) & (table["cause"] == "data_loader_stall")].iloc[0]
    expected = stall["measured_us"] / 1000.0 / 4
    assert row["saving_ms_per_step"] == pytest.approx(expected, rel=0.25), (row.to_dict(), expected)
