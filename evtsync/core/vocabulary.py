"""One vocabulary for collectives and data types, shared by traces and nccl-tests logs.

Traces name a collective by its kernel or ``Collective name`` argument (``AllReduce``,
``ncclDevKernel_AllReduce_Sum_bf16_RING_LL``), nccl-tests by its binary (``all_reduce_perf``).
Both are read into the canonical names of :data:`COLLECTIVES` (the traces' spelling, used in
every table of evtsync) by :func:`collective_name`; :func:`nccl_tests_name` gives the binary's
spelling that nccl-tests' own conventions (busbw factors, count semantics) are keyed by.
Element sizes of every dtype spelling met in either source are in :data:`DTYPE_BYTES`; the
GEMM precision labels of the z-score tables in :data:`PRECISIONS` and the definitions of a
compute block's time in :data:`TIME_DEFINITIONS`.

Light on purpose (no NumPy): the command line (its parsers' choices) and the trace schema import it.
"""

from __future__ import annotations

import re
from pathlib import Path

#: Canonical GEMM precision labels of the z-score tables, widest to narrowest (``--precision``;
#: evtsync.trace.kernels).
PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")
#: Definitions of a compute block's time (``--time``; evtsync.blocks): GPU busy time, first
#: start to last end, or the window between the bounding collectives.
TIME_DEFINITIONS = ("busy", "span", "window")

#: Canonical collective names (the trace schema's): each with its nccl-tests binary name, if any.
NCCL_TESTS_NAMES: dict[str, str] = {
    "AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
    "AllToAll": "alltoall", "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "sendrecv",
    "Gather": "gather", "Scatter": "scatter", "HyperCube": "hypercube",
}
COLLECTIVES = (*NCCL_TESTS_NAMES, "Barrier")
#: Other spellings of nccl-tests names (binaries, older tools, the traces' own).
_NCCL_TESTS_ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "all_to_all": "alltoall", "alltoallv": "alltoall", "bcast": "broadcast", "send_recv": "sendrecv",
    **{canonical.lower(): name for canonical, name in NCCL_TESTS_NAMES.items()},
}
_FROM_NCCL_TESTS = {name: canonical for canonical, name in NCCL_TESTS_NAMES.items()}

#: Bytes per element of every dtype spelling in traces (``args.dtype``, kernel names) and in
#: nccl-tests tables (``type``): lower case, ``c10::`` dropped.
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "fp32": 4, "half": 2, "float16": 2, "fp16": 2,
    "bfloat16": 2, "bf16": 2, "double": 8, "float64": 8, "fp64": 8, "int": 4, "int32": 4,
    "uint32": 4, "int64": 8, "uint64": 8, "long": 8, "int8": 1, "uint8": 1, "byte": 1, "char": 1,
    "bool": 1, "int16": 2, "short": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "fp8": 1,
    "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "complexfloat": 8, "complexdouble": 16,
}  # fmt: skip


def dtype_bytes(dtype: str | None) -> int:
    """Bytes per element of a dtype name from a trace or an nccl-tests log, or 0 when unknown."""
    if not dtype:
        return 0
    return DTYPE_BYTES.get(str(dtype).strip().lower().replace("c10::", ""), 0)


def nccl_tests_name(name: str) -> str:
    """nccl-tests' name of a collective (``all_reduce``, ``alltoall`` …) from a binary or test
    name (``./build/all_reduce_perf``), or from the traces' spelling (``AllReduce``); other
    names are returned lower-cased, for the caller to refuse."""
    base = Path(name.strip()).name.lower()
    base = re.sub(r"_(?:perf|test)(_mpi)?$", "", base)
    return _NCCL_TESTS_ALIASES.get(base, base)


def collective_name(name: str) -> str:
    """The canonical collective name (``AllReduce`` …) of a trace or nccl-tests spelling;
    ``"Unknown"`` when it is neither."""
    if name in NCCL_TESTS_NAMES or name == "Barrier":
        return name
    return _FROM_NCCL_TESTS.get(nccl_tests_name(name), "Unknown")


def collective_event_words(cpu_side: bool) -> str:
    """What a collective's duration d_r is measured on, in the backend's own words (issue 46: a CPU
    job's output never says NCCL): an NCCL kernel, or a gloo collective's ``gloo:<op>`` event on
    its group's worker thread (docs/gloo.md)."""
    return "gloo collective (gloo:<op> event)" if cpu_side else "NCCL kernel"
