"""GPU-trace causes in the user's words (issue 46, fix 5): the CPU op a straggler's time sits in
is named with its enclosing ``record_function`` annotation and its user-level op, as on the
CPU/gloo side (docs/critical-path.md, "Names of causes").

A synthetic GPU job (``evtsync synth``) plants a 5 ms Python gap before ``aten::linear`` on rank 1;
the test wraps the same gap on every rank in ``record_function("expert_mm")`` around
``aten::clone`` around ``aten::copy_`` (plain edits of the Kineto JSON), so that the planted time
becomes ``aten::copy_``'s own time. The expected name is written by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from evtsync.critpath import attribute
from evtsync.critpath.names import user_names
from evtsync.synth import Plant, SynthConfig, synthesize

PLANT_US = 5000


def _wrap_gap(path: Path, ordinal: int) -> None:
    """Fill the gap before the ``ordinal``-th ``aten::linear`` of the trace's main thread with
    expert_mm > aten::clone > aten::copy_ (1 us inside the gap at each end)."""
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    linears = sorted((e for e in events if e.get("ph") == "X" and e.get("name") == "aten::linear"),
                     key=lambda e: e["ts"])
    lin = linears[ordinal]
    same = [e for e in events if e.get("ph") == "X" and e.get("tid") == lin["tid"] and e.get("pid") == lin["pid"]]
    prev_end = max(e["ts"] + e["dur"] for e in same if e["ts"] + e["dur"] <= lin["ts"])
    lo, hi = prev_end + 1, lin["ts"] - 1
    base = {"ph": "X", "pid": lin["pid"], "tid": lin["tid"], "args": {}}
    events += [dict(base, cat="user_annotation", name="expert_mm", ts=lo, dur=hi - lo),
               dict(base, cat="cpu_op", name="aten::clone", ts=lo, dur=hi - lo),
               dict(base, cat="cpu_op", name="aten::copy_", ts=lo, dur=hi - lo)]
    path.write_text(json.dumps(doc))


def _largest_gap_ordinal(path: Path) -> int:
    """Which ``aten::linear`` has the largest gap before it on its thread (the planted one)."""
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    linears = sorted((e for e in events if e["name"] == "aten::linear"), key=lambda e: e["ts"])
    gaps = [lin["ts"] - max(e["ts"] + e["dur"] for e in events
                            if e.get("tid") == lin["tid"] and e["ts"] + e["dur"] <= lin["ts"]) for lin in linears]
    return int(np.argmax(gaps))


def test_gpu_cause_names_annotation_and_user_op(tmp_path):
    cfg = SynthConfig.build(ranks=4, tp=4, iterations=3, layers=1, seed=0,
                            plants=(Plant("python_gap", 1, 1, 0, "fwd-mlp", PLANT_US),))
    res = synthesize(cfg, tmp_path / "job")
    ordinal = _largest_gap_ordinal(res.traces[1])
    for path in res.traces.values():
        _wrap_gap(path, ordinal)
    table = attribute(sorted(str(p) for p in res.traces.values())).collectives
    planted = table[table["straggler_rank"] == 1].sort_values("cause_extra_us").iloc[-1]
    assert planted["cause_name"] == "expert_mm > aten::clone > aten::copy_"
    assert planted["cause_kind"] == "cpu_op"
    assert 0.8 * PLANT_US <= planted["cause_extra_us"] <= 1.2 * PLANT_US
    # no-effect: a cause outside any annotation keeps its own name, and the communication
    # annotation nccl:all_reduce is not the user's
    others = table[(table["status"] == "ok") & (table["cause_kind"] == "cpu_op")]["cause_name"].dropna()
    assert not any(n.startswith("nccl:") for n in others)


def test_user_names_tiny_cases():
    # one thread: expert_mm [0, 100) > aten::clone [10, 90) > aten::copy_ [20, 80); a bare aten::mm
    # [200, 300); nccl:all_reduce [400, 500) > record_param_comms [410, 420)
    starts = np.array([0, 10, 20, 200, 400, 410])
    ends = np.array([100, 90, 80, 300, 500, 420])
    names = ["expert_mm", "aten::clone", "aten::copy_", "aten::mm", "nccl:all_reduce", "record_param_comms"]
    cats = ["user_annotation", "cpu_op", "cpu_op", "cpu_op", "user_annotation", "cpu_op"]
    assert user_names(starts, ends, names, cats) == [
        "expert_mm", "expert_mm > aten::clone", "expert_mm > aten::clone > aten::copy_", "aten::mm",
        "nccl:all_reduce", "record_param_comms"]
    assert user_names(np.zeros(0, np.int64), np.zeros(0, np.int64), [], []) == []
