"""One vocabulary for collectives and dtypes, shared by traces and nccl-tests (issue 31)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evtsync.core.vocabulary import (
    COLLECTIVES,
    NCCL_TESTS_NAMES,
    collective_name,
    dtype_bytes,
    nccl_tests_name,
)
from evtsync.nccltests.parse import busbw_factor, normalise_collective, parse_log
from evtsync.trace.schema import canonical_collective, dtype_size

NCCL = Path(__file__).resolve().parents[1] / "data" / "nccltests"


@pytest.mark.parametrize("trace_text, binary, canonical", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "./build/all_reduce_perf", "AllReduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "all_gather_perf_mpi", "AllGather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reduce_scatter_perf", "ReduceScatter"),
    ("ncclBroadcastTreeLLKernel_copy_i8", "broadcast_perf", "Broadcast"),
    ("ncclDevKernel_SendRecv", "sendrecv_perf", "SendRecv"),
    ("all_to_all", "alltoall_perf", "AllToAll"),
])
def test_traces_and_nccl_tests_name_a_collective_alike(trace_text: str, binary: str, canonical: str) -> None:
    assert canonical_collective(trace_text) == canonical == collective_name(binary)
    assert nccl_tests_name(canonical) == normalise_collective(binary) == NCCL_TESTS_NAMES[canonical]


def test_every_name_the_trace_schema_gives_is_in_the_vocabulary() -> None:
    from evtsync.trace import schema

    assert {name for _, name in schema._COLLECTIVE_PATTERNS} <= set(COLLECTIVES)
    assert collective_name("gloo:all_reduce?") == "Unknown"


@pytest.mark.parametrize("spelling, size", [
    ("bf16", 2), ("bfloat16", 2), ("c10::BFloat16", 2), ("float", 4), ("fp32", 4), ("double", 8), ("int8", 1),
    ("f8e4m3", 1), ("float8_e4m3fn", 1), ("uint64", 8), ("half", 2), ("nonsense", 0), (None, 0),
])
def test_one_dtype_table(spelling: str | None, size: int) -> None:
    assert dtype_bytes(spelling) == size == dtype_size(spelling)


def test_nccl_tests_accept_the_traces_spelling() -> None:
    """`--collective AllReduce` (a trace's name) reads a log as `all_reduce` would."""
    log = NCCL / "replay_all_reduce_A100-80GB_1x8.txt"
    assert busbw_factor("AllReduce", 8) == busbw_factor("all_reduce", 8) == 2 * 7 / 8
    assert parse_log(log, collective="AllReduce").runs[0].collective == "all_reduce"
