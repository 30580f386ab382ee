"""Point-to-point transfers as edges of the what-if replay (docs/critical-path.md §8, assumption 3;
issue 46). Truth: the transfers counted in the raw JSON with gzip + json, the job's own clocks
(``pp3.truth.json``: the plant's measured duration, the calls per rank), and hand counts."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

import evtsync
from evtsync.critpath.replay import lane_of, pair_p2p, what_if
from evtsync.sync.tax import tax_from_traces
from evtsync.trace.traceset import load_traces

DATA = Path(__file__).resolve().parents[1] / "data" / "gloo-pipeline"


def _truth(job: str) -> dict:
    return json.loads((DATA / f"{job}.truth.json").read_text())


def _raw_pairs(job: str) -> Counter:
    """(src, dst) -> transfers, read from the raw files: each c10d::send's peer."""
    out: Counter = Counter()
    for rank in range(3):
        with gzip.open(DATA / job / f"rank-{rank}.json.gz", "rt") as fh:
            for e in json.load(fh)["traceEvents"]:
                if e.get("name") == "c10d::send":
                    out[(rank, int(e["args"]["Concrete Inputs"][2]))] += 1
    return out


def _lanes(job: str) -> dict:
    traces = load_traces([DATA / job], cache=False)
    alignment, _ = tax_from_traces(traces)
    inst = alignment.instances
    return {r: lane_of(r, traces, inst[inst["rank"] == r], True) for r in range(3)}


def test_every_pp3_transfer_is_paired_with_its_peer():
    lanes = _lanes("pp3")
    assert pair_p2p(lanes) == {}
    pairs = Counter()
    for lane in lanes.values():
        for key in lane.arrivals:
            if isinstance(key[0], tuple) and key[0][0] == "p2p" and key[0][1] == lane.rank:
                pairs[(key[0][1], key[0][2])] += 1
    raw = _raw_pairs("pp3")
    assert pairs == raw
    # the job's own log: 16 sends in all over the 4 recorded steps
    assert sum(raw.values()) == sum(c["send"] for c in _truth("pp3")["calls_per_rank"].values()) == 16


def test_unpaired_transfers_are_counted_by_reason():
    lanes = _lanes("pp3")
    # rank 2 not in the traces: rank 1's 4 sends to 2 and 4 recvs from 2 have no peer
    del lanes[2]
    # one recv of rank 1 from rank 0 lost: rank 0's 4 sends to 1 meet 3 recvs
    p2p = lanes[1].p2p
    drop = p2p[(p2p["kind"] == "recv") & (p2p["peer"] == 0)].index[-1]
    lanes[1].p2p = p2p.drop(index=drop)
    got = pair_p2p(lanes)
    assert got["point-to-point transfers whose peer rank is not in the traces"] == 8
    assert got["point-to-point sends without a matching recv on the peer (more sends than recvs)"] == 1
    assert sum(got.values()) == 9


@pytest.mark.parametrize("job", ["pp3", "pp3-clean"])
def test_replay_with_p2p_edges_reproduces_the_measured_step(job: str) -> None:
    traces = load_traces([DATA / job], cache=False)
    w = what_if(traces, evtsync.align_collectives(traces))
    assert w.replayed_step_time_ms == pytest.approx(w.step_time_ms, abs=0.005)
    assert w.not_used == {}


def test_pp3_plant_saving_follows_the_pipeline():
    """The 25 ms expert_mm plant on rank 1 (step 3) held up stage 2's recv and stage 0's backward
    recv; with the transfers as edges, fixing it saves its duration per step (before: 0.09 ms)."""
    plant = _truth("pp3")["plants"][0]
    traces = load_traces([DATA / "pp3"], cache=False)
    w = what_if(traces, evtsync.align_collectives(traces))
    ops = w.ops[(w.ops["rank"] == plant["rank"]) & (w.ops["step"] == plant["step"])
                & (w.ops["name"] == f"{plant['annotation']} > {plant['leaf_op']}")]
    assert len(ops) == 1
    effect = plant["measured_us"] / 1000.0 / len(_truth("pp3")["recorded_steps"])
    assert w.saving_of(ops) == pytest.approx(effect, rel=0.25)
