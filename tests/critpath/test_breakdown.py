"""The per-rank time breakdown against independent computations.

- A hand-built two-rank timeline whose parts are counted by hand in the test.
- The real DLRM set, recomputed here from a plain ``json`` reading of the files on a 1-µs
  raster (the traces have integer µs): every part of every rank must agree exactly.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from evtsync.critpath.breakdown import (
    PARTS,
    merge_intervals,
    partition_span,
    step_breakdown,
    summarise_breakdown,
)


def test_merge_intervals_by_hand():
    s, e = merge_intervals(np.array([5, 0, 2, 10, 10]), np.array([7, 3, 4, 12, 10]))
    assert s.tolist() == [0, 5, 10] and e.tolist() == [4, 7, 12]


def test_partition_by_hand():
    # span 0..100; compute 0-30 and 50-60; comm 20-80; waiting part of the collective 20-70;
    # host busy 85-90 and 95-100.
    # 0-20 compute only (20), 20-30 overlap (10), 30-50 sync wait (20), 50-60 overlap (10),
    # 60-70 sync wait (10), 70-80 comm only (10), 80-85 idle (5), 85-90 cpu-bound (5),
    # 90-95 idle (5), 95-100 cpu-bound (5).
    parts = partition_span((0, 100), (np.array([0, 50]), np.array([30, 60])),
                           (np.array([20]), np.array([80])), (np.array([20]), np.array([70])),
                           (np.array([85, 95]), np.array([90, 100])))
    assert parts == {"compute_comm_overlap": 20, "compute_only": 20, "sync_wait": 30,
                     "comm_only": 10, "cpu_bound_idle": 10, "idle": 10}


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def _raster(n: int, lo: int, intervals) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    for s, e in intervals:
        mask[max(s - lo, 0):max(e - lo, 0)] = True
    return mask


@pytest.fixture(scope="module")
def dlrm(traces_dir):
    import evtsync

    folder = traces_dir / "dlrm-8rank-v100"
    return folder, evtsync.load_traces(folder)


def test_dlrm_breakdown_equals_plain_raster(dlrm):
    folder, traces = dlrm
    table = step_breakdown(traces).set_index("rank")
    files = sorted(folder.glob("*.json.gz"))
    raw = {int(f.name.split("_")[0].removeprefix("worker")): _events(f) for f in files}
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset"}
    nccl = {r: sorted((e["ts"], e["dur"]) for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"
                      and e["name"].startswith(("ncclKernel", "ncclDevKernel"))) for r, ev in raw.items()}
    n_coll = {len(v) for v in nccl.values()}
    assert n_coll == {8}  # the README: 8 NCCL kernels per rank, all on one stream
    # the i-th collective on every rank is one instance: its shortest duration is the straggler's
    min_dur = [min(nccl[r][i][1] for r in nccl) for i in range(8)]
    assert len(table) == 8
    for rank, events in raw.items():
        gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in gpu_cats]
        comm = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if e["name"].startswith(("ncclKernel", "ncclDevKernel"))]
        compute = [(e["ts"], e["ts"] + e["dur"]) for e in gpu if not e["name"].startswith(("ncclKernel", "ncclDevKernel"))]
        waits = [(ts, ts + dur - min_dur[i]) for i, (ts, dur) in enumerate(nccl[rank])]
        cpu = [(e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("ph") == "X" and e.get("cat") in {"cpu_op", "cuda_runtime", "cuda_driver"}]
        lo = min(e["ts"] for e in gpu)
        hi = max(e["ts"] + e["dur"] for e in gpu)
        n = hi - lo
        c, k, w, u = (_raster(n, lo, iv) for iv in (compute, comm, waits, cpu))
        expected = {
            "compute_comm_overlap": (c & k).sum(), "compute_only": (c & ~k).sum(),
            "sync_wait": (~c & k & w).sum(), "comm_only": (~c & k & ~w).sum(),
            "cpu_bound_idle": (~c & ~k & u).sum(), "idle": (~c & ~k & ~u).sum(),
        }
        row = table.loc[rank]
        assert row["span_us"] == n
        for part in PARTS:
            assert row[f"{part}_us"] == pytest.approx(float(expected[part]), abs=1e-9), (rank, part)
        assert row["tax_wait_us"] == pytest.approx(float(w.sum()))
        # the parts add up to the span (the "totals equal the step time" promise)
        assert sum(row[f"{p}_us"] for p in PARTS) == pytest.approx(row["span_us"])


def test_dlrm_summary_shares_sum_to_one(dlrm):
    _, traces = dlrm
    total = summarise_breakdown(step_breakdown(traces))
    assert sum(total[f"{p}_share"].iloc[0] for p in PARTS) == pytest.approx(1.0)
    assert (total["sync_wait_us"] <= total["tax_wait_us"]).all()


def test_breakdown_needs_cpu_rows(traces_dir):
    import evtsync
    from evtsync.core.errors import EvtsyncError

    traces = evtsync.load_traces(traces_dir / "dlrm-8rank-v100", scope="collectives")
    with pytest.raises(EvtsyncError, match="scope"):
        step_breakdown(traces)


def test_api_exports_breakdown():
    import evtsync

    assert evtsync.step_breakdown is step_breakdown


def test_cli_breakdown_json(traces_dir, tmp_path):
    import json as _json
    import subprocess
    import sys

    out = tmp_path / "breakdown.csv"
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", "breakdown", str(traces_dir / "dlrm-8rank-v100"),
                           "--no-cache", "--json", "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    doc = _json.loads(proc.stdout)
    rows = doc["rows"]
    assert doc["missing_ranks"] == [] and doc["ranks_without_gpu_events"] == []
    assert sorted(r["rank"] for r in rows) == list(range(8))
    assert out.is_file()
