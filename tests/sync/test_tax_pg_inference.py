"""Inferred process groups (no PG fields in the trace) are robust to one outlying kernel end.

A damaged copy of the real 8-rank DLRM set (one PG on stream 84, inferred): one rank's 4th
NCCL kernel is made to end 500 µs late. The ranks still form one group of 8; the late end
is an end-time mismatch row naming that PG, index and rank, and only that collective is
flagged invalid.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from evtsync.core.errors import AlignmentError
from evtsync.sync.collectives import align_collectives
from evtsync.trace.traceset import load_traces

DAMAGED_RANK, DAMAGED_INDEX, LATE_US = 5, 3, 500


def _damaged_copy(src: Path, dest: Path, rank: int, index: int, late_us: int, *, count: int = 1) -> Path:
    dest.mkdir()
    for path in sorted(src.glob("*.json.gz")):
        with gzip.open(path) as fh:
            doc = json.load(fh)
        if doc["distributedInfo"]["rank"] == rank:
            kernels = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"
                              and e["name"].startswith(("ncclKernel_", "ncclDevKernel_"))), key=lambda e: e["ts"])
            for e in kernels[index:index + count]:
                e["dur"] += late_us
        with gzip.open(dest / path.name, "wt") as fh:
            json.dump(doc, fh)
    return dest


def test_one_late_kernel_end_is_a_mismatch_not_a_group(traces_dir: Path, tmp_path: Path) -> None:
    folder = _damaged_copy(traces_dir / "dlrm-8rank-v100", tmp_path / "d", DAMAGED_RANK, DAMAGED_INDEX, LATE_US)
    alignment = align_collectives(load_traces(folder))
    assert len(alignment.groups) == 1
    group = alignment.groups.iloc[0]
    assert group["pg_ranks"] == "0,1,2,3,4,5,6,7" and group["pg_source"] == "inferred"
    m = alignment.mismatches
    assert len(m) == 1
    row = m.iloc[0]
    assert (row["pg"], row["index"], row["rank"], row["kind"]) == (group["pg"], DAMAGED_INDEX, DAMAGED_RANK, "end_time")
    assert alignment.invalid == {(group["pg"], DAMAGED_INDEX)}


def test_a_shifted_sequence_still_splits(traces_dir: Path, tmp_path: Path) -> None:
    """Ends that disagree at most collectives (here 6 of 8 late) are another group, not outliers:
    the strict alignment stops and names the rank."""
    folder = _damaged_copy(traces_dir / "dlrm-8rank-v100", tmp_path / "d", DAMAGED_RANK, 1, LATE_US, count=6)
    with pytest.raises(AlignmentError, match="rank\\(s\\) 5 do not end together"):
        align_collectives(load_traces(folder))
    shutil.rmtree(folder)
