"""Attribution as per-rank tasks: a process pool (each task reading its own rank) gives the
same tables as the in-process run, and the caller then reads only the collectives."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import DATA as SHARED_DATA

from evtsync.critpath import attribute
from evtsync.parallel import ProcessPool

DLRM = SHARED_DATA / "traces" / "dlrm-8rank-v100"


def test_process_pool_matches_in_process(tmp_path):
    here = attribute(DLRM)
    pooled = attribute(DLRM, backend=ProcessPool(2), read_options={"cache": str(tmp_path / "cache")})
    pd.testing.assert_frame_equal(pooled.collectives, here.collectives)
    pd.testing.assert_frame_equal(pooled.paths.reset_index(drop=True), here.paths.reset_index(drop=True))
    pd.testing.assert_frame_equal(pooled.validation, here.validation)
    assert set(pooled.dag_stats["rank"]) == set(here.dag_stats["rank"])


def test_dask_matches_in_process():
    distributed = pytest.importorskip("distributed")
    from evtsync.parallel import DaskCluster

    here = attribute(DLRM, keep_paths=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        remote = attribute(DLRM, keep_paths=False, backend=DaskCluster(client, "test cluster"))
    pd.testing.assert_frame_equal(remote.collectives, here.collectives)
