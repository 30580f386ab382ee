"""Hypothesis fuzzing of the trace reader and of the CLI's argument parsing (issue 18): any input
either loads or raises the package's own error (one line for the CLI), never another exception."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evtsync.core.errors import EvtsyncError
from evtsync.sync.collectives import PGOverride


def _seed_events() -> list[dict]:
    return [
        {"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 7,
         "ts": 1000, "dur": 50, "args": {"device": 0, "stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 7, "ts": 900, "dur": 80,
         "args": {"device": 0, "stream": 7, "correlation": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 880, "dur": 5,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 870, "dur": 20, "args": {}},
    ]


values = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                   st.text(max_size=12), st.lists(st.integers(), max_size=3))


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["ph", "cat", "name", "ts", "dur", "tid", "pid",
                                                                     "args"]), values), max_size=4),
       header=st.dictionaries(st.sampled_from(["distributedInfo", "displayTimeUnit", "baseTimeNanoseconds",
                                               "schemaVersion", "deviceProperties"]), values, max_size=3))
def test_mutated_trace_loads_or_raises_our_error(tmp_path_factory, edits, header):
    from evtsync.trace.traceset import load_traces

    events = _seed_events()
    for i, key, value in edits:
        events[i][key] = value
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, **header, "traceEvents": events}
    path = tmp_path_factory.mktemp("fuzz") / "rank0.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh, allow_nan=True)
    try:
        load_traces([path], cache=None, jobs=1)
    except EvtsyncError as exc:
        assert str(exc) and "\n" not in str(exc).strip()


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.binary(max_size=200))
def test_random_bytes_are_refused_with_our_error(tmp_path_factory, data):
    from evtsync.trace.traceset import load_traces

    path = tmp_path_factory.mktemp("bytes") / "rank0.json"
    path.write_bytes(data)
    with pytest.raises(EvtsyncError):
        load_traces([path], cache=None, jobs=1)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet="tp=0123456789-,@ x", max_size=16))
def test_pg_option_parses_or_says_why(text):
    try:
        pg = PGOverride.parse(text)
    except EvtsyncError as exc:
        assert "--pg" in str(exc)
    else:
        assert pg.ranks and len(set(pg.ranks)) == len(pg.ranks)
