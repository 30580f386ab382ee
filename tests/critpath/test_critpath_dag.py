"""The per-rank event DAG (methodology §4) against hand readings of real traces and hand-built tables.

Expected values below were read by hand from the raw JSON of the HTA test traces in
``data/traces/critical-path/`` (timestamps in µs as written in the files), not from the code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import evtsync
from evtsync.critpath.dag import (
    EDGE_NAMES,
    KIND_NAMES,
    SRC_KERNELS,
    SRC_RUNTIME,
    RankDAG,
    Vocabulary,
    build_rank_dag,
)
from tests.conftest import DATA as SHARED_DATA  # the public data copied into tests/data/public

DATA = SHARED_DATA / "traces"
CRIT = DATA / "critical-path"


def _dag(path: Path, **kwargs) -> tuple[evtsync.TraceSet, RankDAG, Vocabulary]:
    traces = evtsync.load_traces(path)
    rank = traces.rank_ids[0]
    sel = [df[df["rank"] == rank] for df in (traces.kernels, traces.cpu_ops, traces.runtime, traces.syncs)]
    vocab = Vocabulary()
    return traces, build_rank_dag(*sel, rank=rank, vocab=vocab, **kwargs), vocab


def _gpu(traces: evtsync.TraceSet, dag: RankDAG, correlation: int) -> int:
    rows = traces.kernels.index[traces.kernels["correlation"] == correlation]
    assert len(rows) == 1
    return dag.nodes_of(SRC_KERNELS, int(rows[0]))[0]


def _call(traces: evtsync.TraceSet, dag: RankDAG, correlation: int) -> int:
    rows = traces.runtime.index[traces.runtime["correlation"] == correlation]
    assert len(rows) == 1
    nodes = dag.nodes_of(SRC_RUNTIME, int(rows[0]))
    assert len(nodes) == 1  # a runtime call without children is one slice
    return int(nodes[0])


def _us(dag: RankDAG, node: int, base_us: int) -> tuple[int, int]:
    return int(dag.start[node] // 1000 - base_us), int(dag.end[node] // 1000 - base_us)


@pytest.fixture(scope="module")
def event_sync():
    return _dag(CRIT / "cuda_event_sync.json.gz")


def test_event_sync_launch_edge_of_the_spin_kernel(event_sync):
    traces, dag, vocab = event_sync
    # raw: cudaLaunchKernel ts 1707417525512362 dur 9, correlation 1526 ->
    #      spin_kernel ts 1707417525512372 dur 36 on stream 7, correlation 1526
    spin, launch = _gpu(traces, dag, 1526), _call(traces, dag, 1526)
    assert vocab.names[dag.name_id[spin]] == "at::cuda::(anonymous namespace)::spin_kernel(long)"
    assert (launch, "launch") in dag.parents_of(spin)
    assert _us(dag, launch, 1707417525512000) == (362, 371)
    assert _us(dag, spin, 1707417525512000) == (372, 408)
    # the stream was idle (the memcpy before it ended at 512272): the launch is critical
    assert dag.critical[spin] == launch


def test_event_sync_sync_edge_of_the_event_sync(event_sync):
    traces, dag, _ = event_sync
    # raw: cuda_sync "Event Sync" correlation 1536, wait_on_stream 7, waits on the event
    # recorded by cudaEventRecord correlation 1533 (ts 512376); the last kernel launched on
    # stream 7 before that is spin_kernel (launched at 512362): spin -> cudaEventSynchronize
    # (ts 512382 dur 34), which it blocked until 512408, so it is the critical parent.
    spin, event_sync_call = _gpu(traces, dag, 1526), _call(traces, dag, 1536)
    assert (spin, "sync") in dag.parents_of(event_sync_call)
    assert dag.critical[event_sync_call] == spin
    assert KIND_NAMES[dag.kind[event_sync_call]] == "sync"


def test_event_sync_stream_and_context_sync_edges(event_sync):
    traces, dag, _ = event_sync
    memcpy, spin = _gpu(traces, dag, 1511), _gpu(traces, dag, 1526)
    # Stream Sync (correlation 1512) on stream 7: last GPU op done by its return (512288) is
    # the Memcpy DtoH (512270 + 2); it ended before the call started (512282), so the
    # thread predecessor, not the copy, is critical
    stream_sync = _call(traces, dag, 1512)
    assert (memcpy, "sync") in dag.parents_of(stream_sync)
    assert dag.critical[stream_sync] != memcpy
    assert EDGE_NAMES[dag.critical_kind[stream_sync]] == "thread"
    # Context Sync (correlation 1549): last completion before 512482 is spin (ends 512408)
    device_sync = _call(traces, dag, 1549)
    assert (spin, "sync") in dag.parents_of(device_sync)
    assert dag.stats["sync_edges"] == 3  # three blocking calls; cudaEventQuery is not one


def test_event_sync_stream_order_and_no_cross_stream(event_sync):
    traces, dag, _ = event_sync
    # five GPU events on stream 7, in this order (correlations from the raw file)
    chain = [_gpu(traces, dag, c) for c in (1482, 1495, 1505, 1511, 1526)]
    for prev, nxt in zip(chain, chain[1:], strict=False):
        assert (prev, "stream") in dag.parents_of(nxt)
    assert dag.stats["cross_stream_edges"] == 0
    assert dag.stats["launch_edges"] == 5  # 4 cudaLaunchKernel + 1 cudaMemcpyAsync


def test_event_sync_exclusive_cpu_slices(event_sync):
    traces, dag, vocab = event_sync
    base = 1707417525509000
    cpu = dag.kind != 0
    names = np.array(vocab.names, dtype=object)[dag.name_id]
    # aten::ones 509905+2245 holds aten::empty 509909-512096 and aten::fill_ 512099-512149:
    # its own time is three slices of 4, 3 and 1 µs
    ones = sorted(_us(dag, int(n), base) for n in np.flatnonzero(cpu & (names == "aten::ones")))
    assert ones == [(905, 909), (3096, 3099), (3149, 3150)]
    # aten::fill_ holds cudaLaunchKernel 512110+36: own slices 512099-512110 and 512146-512149;
    # it is named after its user-level op, aten::ones (issue 46: the user's words)
    fill = sorted(_us(dag, int(n), base) for n in np.flatnonzero(cpu & (names == "aten::ones > aten::fill_")))
    assert fill == [(3099, 3110), (3146, 3149)]
    # ProfilerStep#100 (509335+3154) before its first child (aten::ones at 509905): 570 µs of
    # Python time outside any recorded op
    step = sorted(_us(dag, int(n), base) for n in np.flatnonzero(cpu & (names == "ProfilerStep#100")))
    assert step[0] == (335, 905)
    # the slices tile the thread: their lengths add up to the step annotation's 3154 µs
    assert int((dag.end[cpu] - dag.start[cpu]).sum()) == 3154 * 1000


def test_multi_stream_cross_stream_and_sync_edges():
    traces, dag, _ = _dag(CRIT / "cuda_event_sync_multi_stream.json.gz")
    # raw: stream 20: sgemm corr 27 at 348700+123 (ends 348823); stream 28: memset corr 55 at
    # 349081, sgemm corr 57 at 349097+123 (ends 349220); stream 24: memset corr 1411 at
    # 368034, sgemm corr 1413 at 368050+123 (ends 368173)
    sg20, ms28, sg28 = _gpu(traces, dag, 27), _gpu(traces, dag, 55), _gpu(traces, dag, 57)
    ms24, sg24 = _gpu(traces, dag, 1411), _gpu(traces, dag, 1413)
    assert (sg20, "cross_stream") in dag.parents_of(ms28)
    assert (sg20, "cross_stream") in dag.parents_of(ms24)
    assert (sg28, "cross_stream") in dag.parents_of(ms24)
    # sgemm on 28 saw no completion its stream predecessor had not already seen
    assert all(kind != "cross_stream" for _, kind in dag.parents_of(sg28))
    assert dag.stats["cross_stream_edges"] == 3
    # Context Sync corr 1424 -> cudaDeviceSynchronize 368166+20, blocked by sgemm 24 (ends 368173)
    device_sync = _call(traces, dag, 1424)
    assert (sg24, "sync") in dag.parents_of(device_sync)
    assert dag.critical[device_sync] == sg24
    # the Event Syncs of this trace belong to cudaEventQuery calls, which do not block
    assert dag.stats["sync_edges"] == 1
    assert dag.stats["launch_edges"] == 6


def _tables(kernels: list[dict], cpu: list[dict], runtime: list[dict]) -> tuple[pd.DataFrame, ...]:
    def frame(rows: list[dict], cols: dict) -> pd.DataFrame:
        df = pd.DataFrame([{**cols, **r} for r in rows], columns=list(cols))
        for c, v in cols.items():
            if isinstance(v, int):
                df[c] = df[c].astype(np.int64)
        df["end_ns"] = df["ts_ns"] + df["dur_ns"]
        return df

    k = frame(kernels, {"name": "k", "device": 0, "stream": 7, "ts_ns": 0, "dur_ns": 0, "correlation": -1})
    c = frame(cpu, {"cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts_ns": 0, "dur_ns": 0})
    r = frame(runtime, {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts_ns": 0,
                        "dur_ns": 0, "correlation": -1, "stream": -1})
    s = pd.DataFrame(columns=["name", "ts_ns", "end_ns", "stream", "correlation", "wait_on_stream",
                              "wait_on_event_corr", "sync_kind"])
    return k, c, r, s


US = 1000


def test_cross_stream_edge_survives_a_same_stream_successor():
    # A on stream 1 ends at 10; D on stream 1 starts at 11; B on stream 2 starts at 12.
    # One global min-heap would hand A's completion to D only; B must still see A.
    k, c, r, s = _tables(
        [{"name": "A", "stream": 1, "ts_ns": 0, "dur_ns": 10 * US},
         {"name": "D", "stream": 1, "ts_ns": 11 * US, "dur_ns": 10 * US},
         {"name": "B", "stream": 2, "ts_ns": 12 * US, "dur_ns": 5 * US},
         {"name": "C", "stream": 2, "ts_ns": 18 * US, "dur_ns": 5 * US}], [], [])
    dag = build_rank_dag(k, c, r, s, rank=0)
    a, d, b, cc = 0, 1, 2, 3  # GPU nodes in (lane, start) order: stream 1: A, D; stream 2: B, C
    assert (a, "cross_stream") in dag.parents_of(b)
    assert dag.critical[b] == a
    # C starts at 18, when D (ends 21) is still running: nothing new on stream 1 for C
    assert all(kind != "cross_stream" for _, kind in dag.parents_of(cc))
    assert (a, "stream") in dag.parents_of(d)


@pytest.mark.parametrize(("tolerance_us", "critical"), [(3.0, "stream"), (0.0, "launch")])
def test_same_stream_tolerance(tolerance_us, critical):
    # K1 ends at 100; K2's launch call ends at 101.5 and K2 starts at 102: within 3 µs the
    # same-stream predecessor is preferred, with no tolerance the later launch wins
    k, c, r, s = _tables(
        [{"name": "K1", "ts_ns": 0, "dur_ns": 100 * US, "correlation": 1},
         {"name": "K2", "ts_ns": 102 * US, "dur_ns": 10 * US, "correlation": 2}],
        [],
        [{"ts_ns": 0, "dur_ns": 5 * US, "correlation": 1},
         {"ts_ns": 95 * US, "dur_ns": 6500, "correlation": 2}])
    dag = build_rank_dag(k, c, r, s, rank=0, same_stream_tolerance_ns=int(tolerance_us * 1000))
    assert EDGE_NAMES[dag.critical_kind[1]] == critical


def test_nested_slices_and_gaps():
    # op A [0, 100) holds B [10, 30) and C [50, 60); op D [120, 130) after a 20 µs gap; B and C
    # are named after their user-level op A (issue 46)
    k, c, r, s = _tables(
        [], [{"name": "A", "ts_ns": 0, "dur_ns": 100 * US}, {"name": "B", "ts_ns": 10 * US, "dur_ns": 20 * US},
             {"name": "C", "ts_ns": 50 * US, "dur_ns": 10 * US}, {"name": "D", "ts_ns": 120 * US, "dur_ns": 10 * US}],
        [])
    vocab = Vocabulary()
    dag = build_rank_dag(k, c, r, s, rank=0, vocab=vocab)
    got = [(vocab.names[n], int(a // US), int(b // US)) for n, a, b in zip(dag.name_id, dag.start, dag.end,
                                                                             strict=True)]
    assert got == [("A", 0, 10), ("A > B", 10, 30), ("A", 30, 50), ("A > C", 50, 60), ("A", 60, 100),
                   ("(python gap)", 100, 120), ("D", 120, 130)]
    # thread order chains them
    assert all((i - 1, "thread") in dag.parents_of(i) for i in range(1, 7))


def test_dlrm_ranks_build():
    traces = evtsync.load_traces(DATA / "dlrm-8rank-v100")
    from evtsync.critpath import build_dags

    dags = build_dags(traces, traces.rank_ids)
    for rank, dag in dags.items():
        n_gpu = int((traces.kernels["rank"] == rank).sum())
        assert dag.stats["gpu_nodes"] == n_gpu
        # every kernel launch of the rank has its launch edge (CPU -> GPU)
        launches = traces.runtime[(traces.runtime["rank"] == rank)
                                  & traces.runtime["name"].astype(str).isin(["cudaLaunchKernel", "cudaMemcpyAsync",
                                                                             "cudaMemsetAsync"])]
        assert dag.stats["launch_edges"] == int(launches["correlation"].isin(
            traces.kernels.loc[traces.kernels["rank"] == rank, "correlation"]).sum())
        # following critical parents from any node ends (no cycle): after 2^k >= n steps of
        # pointer doubling every node's ancestor is "none"
        anc = dag.critical.copy()
        for _ in range(int(np.ceil(np.log2(dag.n_nodes))) + 1):
            anc = np.where(anc >= 0, anc[np.maximum(anc, 0)], -1)
        assert (anc == -1).all()


LAUNCH_CALLS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx", "cudaMemcpyAsync",
                "cudaMemsetAsync", "hipExtLaunchKernel", "hipLaunchKernel"}
BLOCKING = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize"}


@pytest.mark.parametrize("name", ["simple_add.json.gz", "alexnet.json.gz", "cuda_event_sync_multi_stream.json.gz"])
def test_edge_counts_match_a_plain_reading_of_the_raw_json(name):
    """Counted straight from the JSON (json module, no evtsync): every GPU event is a node,
    every launch call whose correlation names a GPU event has a launch edge, every blocking
    sync call that returns after some GPU event completed has a sync edge."""
    import gzip
    import json

    with gzip.open(CRIT / name) as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    gpu_corr = {e["args"]["correlation"] for e in gpu}
    first_gpu_end = min(e["ts"] + e["dur"] for e in gpu)
    calls = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    n_launch = sum(1 for e in calls if e["name"] in LAUNCH_CALLS and e["args"].get("correlation") in gpu_corr)
    n_sync = sum(1 for e in calls if e["name"] in BLOCKING and e["ts"] + e["dur"] >= first_gpu_end)
    _, dag, _ = _dag(CRIT / name)
    assert dag.stats["gpu_nodes"] == len(gpu)
    assert dag.stats["launch_edges"] == n_launch
    assert dag.stats["sync_edges"] == n_sync


def test_pair_codes_number_pairs_by_first_appearance():
    """Thread lanes: the codes of (pid, tid) pairs are those of factorizing the pairs themselves
    (first appearance), with and without a missing value."""
    import numpy as np

    from evtsync.critpath.dag import _pair_codes

    pid = np.array([7, 7, 3, 7, 3, 9])
    tid = np.array([1, 2, 1, 1, 1, 2])
    assert _pair_codes(pid, tid).tolist() == [0, 1, 2, 0, 2, 3]  # (7,1) (7,2) (3,1) (7,1) (3,1) (9,2)
    with_nan = np.array([1.0, np.nan, 1.0, 2.0])
    assert _pair_codes(np.array([5, 5, 5, 5]), with_nan).tolist() == \
        pd.factorize(pd.MultiIndex.from_arrays([[5, 5, 5, 5], with_nan]))[0].tolist()


def test_name_membership_by_category_matches_the_strings():
    """``_is_one_of`` on a categorical column (one test per category) gives what testing each
    row's string (``astype(str).isin``) gives, a missing value and a literal "nan" included."""
    from evtsync.critpath.dag import _is_one_of

    values = ["cudaLaunchKernel", None, "cudaMemcpyAsync", "cudaLaunchKernel", "nan"]
    col = pd.Series(values, dtype="category")
    for names in ({"cudaLaunchKernel", "nan"}, {"cudaMemcpyAsync"}, set()):
        assert _is_one_of(col, names).tolist() == col.astype(str).isin(names).tolist()
    assert _is_one_of(col, {"cudaLaunchKernel", "nan"}).tolist() == [True, False, False, True, True]
    assert _is_one_of(pd.Series(values, dtype=object), {"cudaMemcpyAsync"}).tolist() == \
        [False, False, True, False, False]
