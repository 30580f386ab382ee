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
import pandas as pd

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


# ------------------------------------------------------------------ a kernel cause on a real GPU trace

DLRM = Path(__file__).resolve().parents[1] / "data" / "public" / "traces" / "dlrm-8rank-v100"
#: rank 1's first volta_sgemm_128x32_tn (correlation 42350), launched inside the user's
#: ``DistributedDataParallel.forward`` annotation (read from worker1_step_12...json.gz below)
GEMM_CORRELATION = 42350


def _hand_read_launch_note(path: Path, correlation: int) -> tuple[str, str | None]:
    """The kernel of ``correlation`` and the innermost user annotation (latest start) around its
    launch call on the launching thread, read with gzip + json."""
    import gzip

    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    kernel = next(e for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") == correlation)
    launch = next(e for e in events if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == correlation)
    around = [e for e in events if e.get("cat") == "user_annotation" and e["tid"] == launch["tid"]
              and e["ts"] <= launch["ts"] <= e["ts"] + e["dur"] and not e["name"].startswith(("ProfilerStep#", "nccl:"))]
    return kernel["name"], max(around, key=lambda e: e["ts"])["name"] if around else None


def _strip_annotations(path: Path) -> None:
    import gzip

    with gzip.open(path, "rt") as fh:
        doc = json.load(fh)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "user_annotation"
                          or str(e.get("name", "")).startswith(("ProfilerStep#", "nccl:"))]
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


def test_kernel_cause_named_with_the_annotation_around_its_launch_on_a_real_trace(tmp_path):
    # DLRM (8 x V100, a real trace): rank 1's GEMM made 5 ms slower (evtsync inject --on kernel)
    from evtsync.critpath.attribution import root_cause_table
    from evtsync.critpath.inject import inject_delay

    rank1 = next(DLRM.glob("worker1_*.json.gz"))
    kernel, note = _hand_read_launch_note(rank1, GEMM_CORRELATION)
    assert (kernel, note) == ("volta_sgemm_128x32_tn", "DistributedDataParallel.forward")  # read by hand too
    res = inject_delay(sorted(DLRM.glob("*.json.gz")), tmp_path / "slow", rank=1, delay_us=5000, on="kernel",
                       correlation=GEMM_CORRELATION)
    target = res.manifest["next_collective"]
    table = attribute(sorted(str(p) for p in res.files.values())).collectives
    row = table[(table["pg"] == target["pg"]) & (table["index"] == target["index"])].iloc[0]
    assert row["straggler_rank"] == 1 and row["cause_segment"] == "kernel"
    assert row["cause_name"] == f"{note} > {kernel}"
    assert row["cause_category"] == "gemm"  # the kernel's own category, not the annotation's
    assert 0.8 * 5000 <= row["cause_extra_us"] <= 1.2 * 5000
    roots = root_cause_table(table.assign(workload="dlrm"))
    assert f"{note} > {kernel}" in set(roots.loc[roots["root_rank"] == 1, "root_cause"])
    # no-effect: the same slow kernel with no annotation in the trace keeps its own name
    _strip_annotations(res.files[1])
    bare = attribute(sorted(str(p) for p in res.files.values())).collectives
    row = bare[(bare["pg"] == target["pg"]) & (bare["index"] == target["index"])].iloc[0]
    assert (row["straggler_rank"], row["cause_name"]) == (1, kernel)


def test_notes_around_tiny_cases():
    from evtsync.critpath.names import notes_around

    # thread 1: outer [0, 100) > inner [10, 50); thread 2: other [0, 100)
    notes = pd.DataFrame({"start_ns": [0, 10, 0], "end_ns": [100, 50, 100], "name": ["outer", "inner", "other"],
                          "tid": [1, 1, 2]})
    at = np.array([20, 60, 20, 200, 20])
    to = np.array([20, 60, 60, 200, 20])
    # a point inside both on thread 1, a point after inner, an interval leaving inner, a point after all,
    # a point on thread 2
    assert notes_around(notes, at, to, [1, 1, 1, 1, 2]) == ["inner", "outer", "outer", None, "other"]
    # one thread's notes, no thread given (the CPU side's main thread): the interval's own event is not
    # its annotation
    one = notes[notes["tid"] == 1]
    assert notes_around(one, np.array([20, 20]), np.array([30, 30]), None, own=["inner", "x"]) == ["outer", "inner"]
    assert notes_around(notes.iloc[:0], at, to, [1] * 5) == [None] * 5
