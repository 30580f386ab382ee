"""The Kineto trace format as evtsync reads it: categories, NCCL names, API names.

The event structs themselves live with the decoder (:mod:`evtsync.trace.decode`). Their
argument values are declared as :data:`Scalar`, a loose union, because real traces
disagree on types (e.g. a process-group name is a string in one trace and an integer in
another).
"""

from __future__ import annotations

import functools
import re

from evtsync.core.vocabulary import dtype_bytes

Scalar = int | float | str | None


#: GPU-side categories that occupy a stream.
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: CPU-side categories of host work (the CPU ops table).
CPU_CATEGORIES = frozenset({"cpu_op", "user_annotation", "python_function", "gpu_user_annotation"})
#: CUDA/HIP API calls (the runtime table): launches, copies, synchronisations. The runtimes
#: of other accelerators that Kineto names (XPU, MTIA, PrivateUse1 backends) are API calls too.
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "xpu_runtime", "mtia_runtime",
                                "privateuse1_runtime", "privateuse1_driver"})
#: Explicit synchronisation events (``enable_cuda_sync_events``).
SYNC_CATEGORIES = frozenset({"cuda_sync"})
#: Categories evtsync does not tabulate by design (flows, metadata, instants, overhead,
#: the profiler's own range), in their canonical spelling (see :func:`canonical_category`).
IGNORED_CATEGORIES = frozenset(
    {"ac2g", "fwdbwd", "trace", "overhead", "cpu_instant_event", "cuda_profiler_range",
     "async_cpu_to_gpu", "async", "external_correlation"}
)
#: Category spellings of older profilers -> the canonical (current Kineto) name. PyTorch
#: 1.8's Kineto (early 2021) wrote ``Kernel``, ``Memcpy``, ``Memset``, ``Runtime`` and
#: ``Operator``, and ``async`` for its flow events; one Kineto version wrote
#: ``gpu_user_Annotation``. Case, surrounding blanks and inner spaces do not matter.
CATEGORY_ALIASES: dict[str, str] = {
    "memcpy": "gpu_memcpy", "memset": "gpu_memset", "runtime": "cuda_runtime",
    "driver": "cuda_driver", "operator": "cpu_op", "concurrent_kernel": "kernel",
}


@functools.lru_cache(maxsize=1024)
def canonical_category(category: str | None) -> str | None:
    """A trace category in its canonical spelling: lower case, spaces as ``_``, old names
    mapped (``"Kernel"`` -> ``"kernel"``, ``"Memcpy"`` -> ``"gpu_memcpy"``,
    ``"Operator"`` -> ``"cpu_op"``); None stays None."""
    if category is None:
        return None
    key = "_".join(str(category).strip().lower().split())
    return CATEGORY_ALIASES.get(key, key)


#: The profiler's iteration annotation (``ProfilerStep#12``), on the CPU and mirrored on the GPU.
PROFILER_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
#: NCCL/RCCL kernel names: ``ncclKernel_*`` (NCCL 2.8 to 2.18), ``ncclDevKernel_*`` (2.19 on),
#: RCCL's ``ncclDevKernel_Generic``, and the NCCL 2.4-2.7 names of PyTorch 1.x traces
#: (``ncclAllReduceRingLLKernel_sum_f32``, ``ncclBroadcastTreeLLKernel_copy_i8``,
#: ``ncclSendRecvKernel_copy_i8``); some toolchains prefix ``void``.
NCCL_KERNEL_RE = re.compile(
    r"^(?:void\s+)?nccl(?:(?:Dev)?Kernel_|(?:AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|"
    r"SendRecv|Send|Recv)\w*Kernel)", re.IGNORECASE)

#: Canonical collective names, from kernel names or the ``Collective name`` argument.
_COLLECTIVE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"reduce_?scatter", re.I), "ReduceScatter"),
    (re.compile(r"all_?gather", re.I), "AllGather"),
    (re.compile(r"all_?reduce", re.I), "AllReduce"),
    (re.compile(r"all_?to_?all", re.I), "AllToAll"),
    (re.compile(r"send_?recv|sendrecv|^_?send$|^_?recv$|\bsend\b|\brecv\b", re.I), "SendRecv"),
    (re.compile(r"broadcast", re.I), "Broadcast"),
    (re.compile(r"^_?reduce(?:_|$|\b)|kernel_reduce_|\breduce\b", re.I), "Reduce"),
    (re.compile(r"barrier", re.I), "Barrier"),
)


_OLD_NCCL_NAME_RE = re.compile(r"^(?:void\s+)?nccl(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|"
                               r"Send|Recv)(?=[A-Z]\w*Kernel)")


@functools.lru_cache(maxsize=4096)
def canonical_collective(text: str | None) -> str:
    """Map a kernel name or a ``Collective name`` value to a canonical collective type.

    Returns ``"Unknown"`` when nothing matches (e.g. RCCL's ``ncclDevKernel_Generic``
    without a ``Collective name`` argument).
    """
    if not text:
        return "Unknown"
    core = text
    match = re.match(r"^(?:void\s+)?nccl(?:Dev)?Kernel_([A-Za-z]+)", text)
    if match:
        core = match.group(1)
        if core.lower() == "generic":
            return "Unknown"
    else:
        old_name = _OLD_NCCL_NAME_RE.match(text)
        if old_name:
            core = old_name.group(1)
    for pattern, name in _COLLECTIVE_PATTERNS:
        if pattern.search(core):
            return name
    return "Unknown"


def dtype_size(dtype: str | None) -> int:
    """Bytes per element of a trace dtype name, or 0 when unknown (:func:`evtsync.core.vocabulary.dtype_bytes`,
    the table shared with nccl-tests logs)."""
    return dtype_bytes(dtype)


#: CUDA/HIP API names that launch work on a stream (the launch edge of the DAG).
LAUNCH_NAMES = frozenset(
    {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
     "cudaLaunchCooperativeKernel", "hipLaunchKernel", "hipExtLaunchKernel",
     "hipModuleLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy",
     "cudaMemset", "hipMemcpyAsync", "hipMemsetAsync", "cudaMemcpy2DAsync",
     "cudaGraphLaunch", "hipGraphLaunch"}
)
#: CUDA/HIP API names that block the calling CPU thread on the GPU.
SYNC_NAMES = frozenset(
    {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
     "cudaStreamWaitEvent", "hipStreamSynchronize", "hipDeviceSynchronize",
     "hipEventSynchronize", "hipStreamWaitEvent", "cudaMemcpy", "hipMemcpy"}
)


#: Communication kernels other than NCCL's, by name: (regular expression, kind). Searched
#: case-insensitively in the kernel name after NCCL/RCCL (:data:`NCCL_KERNEL_RE`, whose kind
#: is the collective read from the name or the launching op); the first match wins. The
#: kind becomes the kernel's ``collective``. Users add patterns (``--comm-kernel REGEX=KIND``,
#: ``load_traces(comm_kernels=...)``), which are tried before these.
#:
#: - DeepEP (DeepSeek's expert-parallel all-to-all): ``deep_ep::internode::dispatch<…>``,
#:   ``…::combine``, ``…::notify_dispatch`` and ``cached_notify_*`` in the ``intranode``,
#:   ``internode`` and low-latency ``internode_ll`` namespaces; its ``layout::`` kernels
#:   are local compute and stay out.
#: - NVSHMEM device collectives and kernels named after NVSHMEM (``nvshmem``,
#:   ``nvshmemi_…``), and other all-to-all kernels named so (``alltoall``, ``all_to_all``,
#:   ``a2a_dispatch`` / ``a2a_combine``, as in pplx-kernels and custom MoE kernels).
#: - MSCCL++ kernels (``mscclpp``).
COMM_KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(?:^|[\s:])(?:deep_)?ep::(?:intranode|internode|internode_ll)::(?:cached_)?notify_\w*", "EPNotify"),
    (r"(?:^|[\s:])(?:deep_)?ep::(?:intranode|internode|internode_ll)::dispatch\b", "EPDispatch"),
    (r"(?:^|[\s:])(?:deep_)?ep::(?:intranode|internode|internode_ll)::combine\b", "EPCombine"),
    (r"(?:^|[\s:])(?:deep_)?ep::(?:intranode|internode|internode_ll)::\w+", "EPOther"),
    (r"nvshmem", "NVSHMEM"),
    (r"mscclpp", "MSCCL++"),
    (r"all_?to_?all|(?:^|_)a2a_(?:dispatch|combine)", "AllToAll"),
)
