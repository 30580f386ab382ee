"""Attribution as per-rank tasks: a process pool (each task reading its own rank) gives the
same tables as the in-process run, and the caller then reads only the collectives."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from evtsync.core.parallel import ProcessPool
from evtsync.critpath import attribute
from evtsync.trace.traceset import load_traces
from tests.conftest import DATA as SHARED_DATA

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
    from evtsync.core.parallel import DaskCluster

    here = attribute(DLRM, keep_paths=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        remote = attribute(DLRM, keep_paths=False, backend=DaskCluster(client, "test cluster"))
    pd.testing.assert_frame_equal(remote.collectives, here.collectives)


@pytest.mark.parametrize("layout", [
    pytest.param(({"ranks": 4, "tp": 4, "iterations": 4, "layers": 2, "seed": 3}, False), id="small"),
    pytest.param(({"ranks": 8, "seed": 5}, True), id="issue15", marks=pytest.mark.slow),
])
def test_pool_matches_in_process_on_synth_and_its_injection(tmp_path, layout):
    """A synthetic set (issue 15's: 8 ranks, seed 5; and a small one) and its 20 ms injection
    on rank 3: the per-rank tasks on a pool give the in-process tables, and the injected
    collective keeps the planted delay as its cause (the injection's own truth, not the code's)."""
    from evtsync.critpath.inject import inject_delay
    from evtsync.synth import SynthConfig, synthesize

    config, with_base = layout
    base = synthesize(SynthConfig.build(**config), tmp_path / "S")
    injected = inject_delay(sorted(str(p) for p in base.traces.values()), tmp_path / "I", rank=3, delay_us=20_000)
    pool = ProcessPool(2)
    for files in ((base.traces, injected.files) if with_base else (injected.files,)):
        paths = sorted(str(p) for p in files.values())
        here = attribute(paths)
        pooled = attribute(paths, backend=pool, read_options={"cache": str(tmp_path / "cache")})
        pd.testing.assert_frame_equal(pooled.collectives, here.collectives)
        pd.testing.assert_frame_equal(pooled.paths.reset_index(drop=True), here.paths.reset_index(drop=True))
        pd.testing.assert_frame_equal(pooled.validation, here.validation)
    first = injected.manifest["first_collective_moved"]
    row = pooled.collectives.set_index(["pg", "index"]).loc[(first["pg"], first["index"])]
    assert row["straggler_rank"] == 3
    assert abs(row["cause_extra_us"] - 20_000) <= 0.05 * 20_000


def _parents_by_hand(lane, start, end):
    """Enclosing event of each properly nested event (sorted by lane, start, -end): the
    latest earlier event of its lane that is still open at its start and ends at or after its end."""
    out = []
    for i in range(len(start)):
        enclosing = [j for j in range(i) if lane[j] == lane[i] and end[j] > start[i] and end[j] >= end[i]]
        out.append(enclosing[-1] if enclosing else -1)
    return out


@pytest.mark.parametrize("chunk", [1, 2, 5, 1 << 18])
def test_nesting_sweep_in_chunks_finds_the_enclosing_events(chunk):
    """The nesting sweep reads its events a chunk at a time (bounded memory); whatever the
    chunk, each event's parent is the one a plain reading of the intervals gives."""
    import numpy as np

    from evtsync.critpath.dag import _nesting_parents

    # two threads: a step holding ops holding launches, zero-gap siblings, an empty event
    rows = [(0, 0, 100), (0, 0, 40), (0, 5, 10), (0, 10, 30), (0, 40, 60), (0, 40, 40), (0, 60, 100),
            (0, 70, 80), (0, 120, 130), (1, 3, 50), (1, 3, 20), (1, 20, 50), (1, 25, 26), (1, 60, 61)]
    lane, start, end = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    parent, partial = _nesting_parents(lane, start, end, chunk=chunk)
    assert partial == 0
    assert parent.tolist() == _parents_by_hand(lane.tolist(), start.tolist(), end.tolist())
    assert parent.tolist()[:4] == [-1, 0, 1, 1]  # the hand count for the first thread's first events


def test_in_process_builds_each_rank_dag_once_with_the_same_tables(monkeypatch, tmp_path):
    """In one process, a rank that straggles in some collectives and is the fastest in others
    has its DAG built once for both rounds: kept in memory, or, with no room in memory, written
    to a temporary file and read back (issue 30: no DAG built twice); with neither (built again
    for round 2, as a worker does) the tables are the same, and the temporary folder is gone."""
    import glob
    import tempfile

    from evtsync.critpath import tasks

    built: list[int] = []
    plain = tasks.build_rank_dag

    def counting(*args, **kwargs):
        built.append(kwargs["rank"])
        return plain(*args, **kwargs)

    monkeypatch.setattr(tasks, "build_rank_dag", counting)
    cached = attribute(load_traces(DLRM))   # the whole set in memory: setups kept within SETUP_CACHE_NODES
    sides = cached.collectives[cached.collectives["status"] != "no_tax"]
    involved = set(sides["straggler_rank"]) | set(sides["fastest_rank"])
    both = set(sides["straggler_rank"]) & set(sides["fastest_rank"])
    assert both, "the set must have ranks in both roles for this test to mean anything"
    assert sorted(built) == sorted(involved)  # once per rank, by a count of the table itself
    built.clear()
    monkeypatch.setattr(tasks, "SETUP_CACHE_NODES", 0)   # no room in memory: written and read back
    spilled: list[int] = []
    plain_read = tasks._read_setup

    def reading(path):
        spilled.append(path)
        return plain_read(path)

    monkeypatch.setattr(tasks, "_read_setup", reading)
    # the temporary folder is looked for in this test's own folder, not the shared one, where
    # another test process may be making its own (issue 47, item 12)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    written = attribute(load_traces(DLRM))
    assert sorted(built) == sorted(involved) and len(spilled) == len(both)
    assert all(Path(p).parent.parent == tmp_path for p in spilled)  # it was made here ...
    assert glob.glob(f"{tmp_path}/evtsync-setups-*") == []   # ... and removed
    built.clear()
    plain_init = tasks.SetupCache.__init__

    def no_spill(self, *args, **kwargs):
        plain_init(self, *args, **{**kwargs, "spill": False})

    monkeypatch.setattr(tasks.SetupCache, "__init__", no_spill)
    rebuilt = attribute(load_traces(DLRM))
    assert len(built) == len(set(sides["straggler_rank"])) + len(set(sides["fastest_rank"]))
    for other in (written, rebuilt):
        pd.testing.assert_frame_equal(other.collectives, cached.collectives)
        pd.testing.assert_frame_equal(other.paths, cached.paths)
        pd.testing.assert_frame_equal(other.validation, cached.validation)


def test_in_process_from_paths_reads_one_rank_at_a_time_and_matches_the_whole_set(monkeypatch):
    """Given paths and no pool (issue 30, items 2 and 5), this process reads the set once, one rank
    file at a time for the collectives, and builds each rank's DAG from that same read (written to a
    temporary file until the rounds take it): no rank file is read a second time, no DAG built
    twice, and the DAGs kept in memory between the rounds never hold more nodes than the largest
    rank has: memory is bounded by the largest rank, not by the set. The tables equal those of the
    whole set loaded at once."""
    from evtsync.critpath import attribution, tasks
    from evtsync.trace import traceset

    whole = attribute(load_traces(DLRM))
    scopes: list[tuple[str, object]] = []
    plain_set = attribution.load_traces

    def set_read(*args, **kwargs):
        scopes.append((kwargs.get("scope", "all"), kwargs.get("jobs")))
        return plain_set(*args, **kwargs)

    rank_reads: list[str] = []
    plain_file = traceset.read_rank_cached

    def file_read(path, *args, **kwargs):
        rank_reads.append(str(path))
        return plain_file(path, *args, **kwargs)

    built: list[int] = []
    plain_build = tasks.build_rank_dag

    def counting(*args, **kwargs):
        built.append(kwargs["rank"])
        return plain_build(*args, **kwargs)

    kept: list[int] = []
    plain_get = tasks.SetupCache.get

    def get(self, work, *, keep):
        setup = plain_get(self, work, keep=keep)
        kept.append(self.nodes)
        return setup

    monkeypatch.setattr(attribution, "load_traces", set_read)
    monkeypatch.setattr(traceset, "read_rank_cached", file_read)
    monkeypatch.setattr(tasks, "build_rank_dag", counting)
    monkeypatch.setattr(tasks.SetupCache, "get", get)
    by_rank = attribute(DLRM)
    assert scopes == [("collectives", 1)]   # the caller never loads every rank's tables
    # each of the folder's eight trace files read once (listed by hand: worker0..7), each DAG built once
    assert sorted(Path(p).name.split("_")[0] for p in rank_reads) == [f"worker{i}" for i in range(8)]
    assert sorted(built) == list(range(8))
    largest = int(by_rank.dag_stats["nodes"].max())
    assert kept and max(kept) <= largest
    pd.testing.assert_frame_equal(by_rank.collectives, whole.collectives)
    pd.testing.assert_frame_equal(by_rank.paths.reset_index(drop=True), whole.paths.reset_index(drop=True))
    pd.testing.assert_frame_equal(by_rank.validation, whole.validation)


def test_instance_nodes_without_a_merge_match_the_merge():
    """The collective instances' GPU nodes found by integer keys (the readers' dtypes) equal those
    of the pandas merge (the path for other key dtypes), on every rank of the DLRM set, with an
    instance whose key matches no kernel (-1) and the instances shuffled."""
    from evtsync.critpath.attribution import RankTables
    from evtsync.critpath.dag import Vocabulary, build_rank_dag
    from evtsync.critpath.tasks import rank_instance_nodes
    from evtsync.sync.collectives import align_collectives

    traces = load_traces(DLRM)
    instances = align_collectives(traces).instances
    split = RankTables(traces)
    for rank in sorted(instances["rank"].unique()):
        kernels, cpu_ops, runtime, syncs = split.of(rank)
        dag = build_rank_dag(kernels, cpu_ops, runtime, syncs, rank=int(rank), vocab=Vocabulary())
        mine = instances[instances["rank"] == rank].sample(frac=1, random_state=int(rank)).copy()
        mine.iloc[0, mine.columns.get_loc("ts_ns")] += 7   # no kernel starts there
        fast = rank_instance_nodes(kernels, mine, dag)
        merged = rank_instance_nodes(kernels, mine.astype({"stream": "float64"}), dag)   # exact in float
        assert fast[list(mine.index).index(mine.index[0])] == -1
        assert (fast >= 0).sum() == len(mine) - 1
        assert fast.tolist() == merged.tolist()
