"""The default backend's cost model (issue 30, item 4): the local pool only where it pays.

Expected decisions are worked out by hand from the model's documented constants (a 2-process
pool costs 0.4 + 2 x 0.15 = 0.7 s of CPU to start; it may add at most 10% of the work's CPU and
must save at least 20% of its wall time), not read back from the code under test.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from evtsync.core import parallel
from evtsync.core.parallel import InProcess, ProcessPool, Work, backend_for, idle_cores, pool_pays
from evtsync.trace import decode

MB = 1_000_000


def test_idle_cores_subtract_the_others_load() -> None:
    # the 1-minute load counts this process: 2 cores at load 1.0 -> both usable
    assert idle_cores(2, load=1.0) == 2
    assert idle_cores(2, load=0.1) == 2  # never more than the cores
    assert idle_cores(2, load=2.0) == 1
    assert idle_cores(2, load=9.0) == 1  # at least this process's own core
    assert idle_cores(16, load=4.4) == 13  # 16 + 1 - 4.4 = 12.6 -> 13


def test_small_work_stays_in_one_process_whatever_the_cores() -> None:
    # 256 ranks of 1 MB read by the scanner: ~1 s of CPU; moving 256 results back ~0.25 s.
    # start 0.7 s + 0.25 s = 0.95 s extra > 10% of 1 s: one process
    small = Work(items=256, cpu_s=1.0, transfer_cpu_s=0.25)
    assert not pool_pays(small, processes=2, cores=2)
    assert not pool_pays(small, processes=16, cores=16)  # more cores do not make it cheaper


def test_large_work_uses_the_pool_only_on_idle_cores() -> None:
    # 64 ranks x 200 MB for `tax` (collectives): ~32 s of CPU, ~0.7 s to move the results.
    # extra = 0.7 + 0.7 = 1.4 s <= 3.2 s; wall = 0.7 + 32.7 / 2 = 17.05 s <= 0.8 x 32 = 25.6 s
    large = Work(items=64, cpu_s=32.0, transfer_cpu_s=0.7)
    assert pool_pays(large, processes=2, cores=2)
    assert not pool_pays(large, processes=2, cores=1)  # the machine is busy: no gain
    assert not pool_pays(large, processes=1, cores=2)
    # moving every table back (3.9 s) is more than 10% of the work: one process
    assert not pool_pays(Work(items=64, cpu_s=32.0, transfer_cpu_s=3.9), processes=2, cores=2)


def test_backend_for_follows_the_model_unless_jobs_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "idle_cores", lambda cores=None, load=None: 2)
    monkeypatch.setattr(parallel.os, "cpu_count", lambda: 2)
    small = Work(items=256, cpu_s=1.0, transfer_cpu_s=0.25)
    large = Work(items=64, cpu_s=32.0, transfer_cpu_s=0.7)
    with backend_for(256, work=small) as backend:
        assert isinstance(backend, InProcess)
    with backend_for(64, work=large) as backend:
        assert isinstance(backend, ProcessPool) and backend.jobs == 2
    with backend_for(256, jobs=2, work=small) as backend:  # an explicit --jobs wins
        assert isinstance(backend, ProcessPool) and backend.jobs == 2
    with backend_for(64, jobs=1, work=large) as backend:
        assert isinstance(backend, InProcess)


def test_reading_work_counts_files_bytes_and_what_is_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    """256 files of 1 MB with msgspec: 256 x 6 ms + 256 MB x 5 ms/MB = 2.816 s; moving every
    table back: 256 x 0.7 ms + 256 MB x 0.3 ms/MB = 0.256 s (0.192 s for the collectives)."""
    monkeypatch.setenv(decode.DECODER_ENV, "msgspec")
    work = decode.reading_work([MB] * 256, "all")
    assert work.items == 256
    assert work.cpu_s == pytest.approx(2.816)
    assert work.transfer_cpu_s == pytest.approx(0.256)
    assert decode.reading_work([MB] * 256, "collectives").transfer_cpu_s == pytest.approx(0.192)
    monkeypatch.setenv(decode.DECODER_ENV, "scanner")  # 256 x 1.5 ms + 256 MB x 2.5 ms/MB
    assert decode.reading_work([MB] * 256, "all").cpu_s == pytest.approx(1.024)


def test_load_traces_reads_a_small_study_in_one_process(shared_data: Path, caplog: pytest.LogCaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The 8 DLRM ranks (~7 MB of JSON) by default: the model says one process even on idle
    cores (start alone, 0.7 s, is more than 10% of their ~0.1 s of reading)."""
    from evtsync.trace.traceset import load_traces

    monkeypatch.setattr(parallel, "idle_cores", lambda cores=None, load=None: 8)
    with caplog.at_level(logging.DEBUG, logger="evtsync"):
        traces = load_traces(shared_data / "traces" / "dlrm-8rank-v100", scope="collectives")
    assert len(traces.ranks) == 8
    assert any("reading 8 trace file(s) on in-process" in r.getMessage() for r in caplog.records)
