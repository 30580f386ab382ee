"""Dask and the process pool give exactly the tables of the in-process path (issue 7)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from evtsync.core.errors import InputError
from evtsync.core.parallel import SCHEDULER_ENV, dask_backend, scheduler_address
from evtsync.sync.tax import tax_from_traces
from evtsync.synth import SynthConfig, synthesize
from evtsync.trace.traceset import TraceSet, load_traces
from tests._lazy import lazy_module

# imported on first use, not at collection (issue 48); skipped where it is not installed
distributed = lazy_module("distributed")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="distributed not installed")


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A synthetic 8-rank study (two TP groups of 4), two iterations."""
    out = tmp_path_factory.mktemp("scale-study")
    result = synthesize(SynthConfig.build(ranks=8, tp=4, iterations=2, layers=1, seed=7), out)
    return result.traces_dir


@pytest.fixture(scope="module")
def local_tables(study: Path) -> tuple[TraceSet, pd.DataFrame, pd.DataFrame]:
    traces = load_traces(study, jobs=1)
    _, tax = tax_from_traces(traces)
    assert len(tax.collectives) > 0
    return traces, tax.collectives, tax.ranks


def _check_same(traces: TraceSet, local: tuple[TraceSet, pd.DataFrame, pd.DataFrame]) -> None:
    ref, collectives, ranks = local
    for name in ("kernels", "cpu_ops", "runtime", "syncs", "ranks", "process_groups"):
        pd.testing.assert_frame_equal(getattr(traces, name), getattr(ref, name))
    _, tax = tax_from_traces(traces)
    pd.testing.assert_frame_equal(tax.collectives, collectives)
    pd.testing.assert_frame_equal(tax.ranks, ranks)


def test_dask_local_cluster_gives_the_local_tables(study: Path, local_tables) -> None:  # noqa: ANN001
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        traces = load_traces(study, client=client)
    _check_same(traces, local_tables)


def test_scheduler_address_through_the_environment(study: Path, local_tables,  # noqa: ANN001
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        monkeypatch.setenv(SCHEDULER_ENV, cluster.scheduler_address)
        assert scheduler_address(None) == cluster.scheduler_address
        traces = load_traces(study)
    _check_same(traces, local_tables)


def test_process_pool_gives_the_local_tables(study: Path, local_tables) -> None:  # noqa: ANN001
    _check_same(load_traces(study, jobs=2), local_tables)


def test_trace_errors_from_dask_tasks_keep_their_message(tmp_path: Path) -> None:
    from evtsync.core.errors import TraceError

    (tmp_path / "rank-0.json").write_text('{"traceEvents": [{"ph": "X", "cat": "kernel"')
    (tmp_path / "rank-1.json").write_text("")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client, \
            pytest.raises(TraceError, match=r"rank-0.json: .*cut mid-event"):
        load_traces(tmp_path, client=client)


def test_unreachable_scheduler_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9"), \
            dask_backend("tcp://127.0.0.1:9", timeout="1s"):
        pass


def test_per_pg_tax_as_dask_tasks_equals_the_local_path(study: Path, local_tables) -> None:  # noqa: ANN001
    """Each process group is aligned and taxed as a task of its own: same tables."""
    from evtsync.core.parallel import DaskCluster

    ref, collectives, ranks = local_tables
    local_alignment, _ = tax_from_traces(ref)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        alignment, tax = tax_from_traces(ref, backend=DaskCluster(client, "test cluster"))
    assert len(alignment.groups) == 2  # two TP groups: two tasks
    pd.testing.assert_frame_equal(tax.collectives, collectives)
    pd.testing.assert_frame_equal(tax.ranks, ranks)
    pd.testing.assert_frame_equal(alignment.groups, local_alignment.groups)
    pd.testing.assert_frame_equal(alignment.instances, local_alignment.instances)


def test_cli_tax_on_a_local_dask_cluster(study: Path, local_tables, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from evtsync.cli import main

    out = tmp_path / "tax.parquet"
    assert main(["tax", str(study), "--workers", "1", "--no-cache", "-o", str(out)]) == 0
    assert "local Dask cluster (1 workers)" in capsys.readouterr().err
    pd.testing.assert_frame_equal(pd.read_parquet(out), local_tables[1])


def test_workers_means_a_local_dask_cluster_and_jobs_the_process_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    from evtsync.core.parallel import LOCAL_DASK, InProcess, ProcessPool, backend_for

    monkeypatch.delenv(SCHEDULER_ENV, raising=False)
    assert scheduler_address(None, None) is None
    assert scheduler_address(None, 3) == LOCAL_DASK
    assert scheduler_address(LOCAL_DASK, 3) == LOCAL_DASK
    monkeypatch.setenv(SCHEDULER_ENV, "tcp://10.0.0.1:8786")
    assert scheduler_address(None, 3) == LOCAL_DASK  # an explicit --workers wins over the environment
    assert scheduler_address(None, None) == "tcp://10.0.0.1:8786"
    assert scheduler_address(None, None, 1) is None  # an explicit --jobs too: the process pool
    with pytest.raises(InputError, match="cannot size the existing cluster at --scheduler tcp://h:1"):
        scheduler_address("tcp://h:1", 2)
    with pytest.raises(InputError, match="--jobs 2 sizes the local process pool and --workers 3 asks for Dask"):
        scheduler_address(None, 3, 2)
    with pytest.raises(InputError, match="--jobs 2 sizes the local process pool and --scheduler local"):
        scheduler_address(LOCAL_DASK, None, 2)
    with pytest.raises(InputError, match="--workers must be at least 1, got 0"):
        scheduler_address(None, 0)
    monkeypatch.delenv(SCHEDULER_ENV)
    with backend_for(4, jobs=2) as backend:
        assert isinstance(backend, ProcessPool) and backend.jobs == 2
    with backend_for(4, jobs=1) as backend:
        assert isinstance(backend, InProcess)
    with pytest.raises(InputError, match="--jobs must be at least 1, got 0"), backend_for(4, jobs=0):
        pass


def test_blocks_and_zscores_per_pg_tasks_equal_the_local_path(study: Path, local_tables) -> None:  # noqa: ANN001
    """Alignment and block cutting run as one task per PG, on Dask and in a process pool
    (tasks pickled to other processes): the z-scores, block times and drops are the same."""
    from evtsync.blocks.cut import compute_zscores, plan_blocks
    from evtsync.core.parallel import DaskCluster, ProcessPool

    traces = local_tables[0]
    table, blocks = compute_zscores(traces)
    _, tasks = plan_blocks(traces)
    assert len(tasks) == 2 and len(table) > 0  # two TP groups: two tasks
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        on_dask, dask_blocks = compute_zscores(traces, backend=DaskCluster(client, "test cluster"))
    on_pool, pool_blocks = compute_zscores(traces, backend=ProcessPool(2))
    for other, other_blocks in ((on_dask, dask_blocks), (on_pool, pool_blocks)):
        pd.testing.assert_frame_equal(other, table)
        pd.testing.assert_frame_equal(other_blocks.times, blocks.times)
        pd.testing.assert_frame_equal(other_blocks.dropped, blocks.dropped)
        assert other_blocks.iterations == blocks.iterations


def test_cli_blocks_on_a_local_dask_cluster(study: Path, local_tables, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from evtsync.blocks.cut import zscore_table
    from evtsync.cli import main

    out = tmp_path / "z.parquet"
    assert main(["blocks", str(study), "--workers", "1", "--no-cache", "-o", str(out)]) == 0
    assert "local Dask cluster (1 workers)" in capsys.readouterr().err
    pd.testing.assert_frame_equal(pd.read_parquet(out), zscore_table(local_tables[0]), check_dtype=False)
