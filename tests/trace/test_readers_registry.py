"""The reader seam: every file goes to its reader by content, whatever its name."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from evtsync.core.errors import TraceError
from evtsync.trace.readers import all_suffixes, read_rank, reader_for, readers
from evtsync.trace.traceset import load_traces, trace_files_in

DATA = Path(__file__).parents[1] / "data"
KINETO = DATA / "gloo-torch2.13" / "rank-0.json.gz"
NSYS = DATA / "nsys" / "perlmutter-cloverleaf-cuda.sqlite"
INSPECTOR_LINE = ('{"header": {"id": "0x7f8c496ae9f661", "rank": 0, "n_ranks": 1, "nnodes": 1}, "metadata": '
                  '{"hostname": "h", "pid": 1}, "coll_perf": {"coll": "AllReduce", "coll_sn": 1, '
                  '"coll_msg_size_bytes": 8192, "coll_exec_time_us": 12}}\n')


def test_registry() -> None:
    names = [r.name for r in readers()]
    assert names == ["nsys", "nccl-inspector", "kineto"]  # the sniffing order
    assert {".json", ".json.gz", ".sqlite", ".log", ".jsonl", ".log.gz", ".jsonl.gz"} <= set(all_suffixes())
    for reader in readers():
        assert reader.produces in ("ranks", "collectives") and reader.cost(KINETO) > 0


def test_content_decides_not_the_name(tmp_path: Path) -> None:
    kineto = tmp_path / "rank0.log.gz"  # a Kineto trace with an Inspector suffix
    shutil.copy(KINETO, kineto)
    nsys = tmp_path / "rank1.db"  # an nsys export with no known suffix
    shutil.copy(NSYS, nsys)
    inspector = tmp_path / "host-pid1.json.gz"  # an Inspector log with Kineto's suffix
    inspector.write_bytes(gzip.compress(INSPECTOR_LINE.encode()))
    assert [reader_for(p).name for p in (kineto, nsys, inspector)] == ["kineto", "nsys", "nccl-inspector"]
    assert read_rank(kineto).info["n_events"] == read_rank(KINETO).info["n_events"]
    assert read_rank(nsys).info["n_kernels"] == 1312
    assert load_traces(inspector, jobs=1).logged["dur_ns"].tolist() == [12000]


def test_unknown_content_and_name(tmp_path: Path) -> None:
    odd = tmp_path / "notes.txt"
    odd.write_text("hello\n")
    with pytest.raises(TraceError, match="notes.txt: not a trace evtsync can read"):
        reader_for(odd)
    # in a folder, a .log that no reader recognises (a training job's stdout) is left out
    (tmp_path / "train.log").write_text("step 1 loss 2.3\n")
    shutil.copy(KINETO, tmp_path / "rank-0.json.gz")
    assert [p.name for p in trace_files_in(tmp_path)] == ["rank-0.json.gz"]
