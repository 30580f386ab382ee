"""The paper's reference numbers, in one place (SPEC §4, §6, §8).

Shown beside evtsync's own results (the attribution figure, the report) and used as the
reference point of FLOPS scaling. Import-free so that any layer may read them.
"""

from __future__ import annotations

#: Peak dense BF16 TFLOPS of the reference GPU of the paper (H200), SPEC §8.
REFERENCE_TFLOPS = 989.0
#: The reference GPU itself.
REFERENCE_GPU = "H200"
#: The paper's breakdown of GPU causes of the straggler's delay (SPEC §4).
PAPER_GPU_CAUSES = {"gemm": 0.78, "attention": 0.154, "fsdp": 0.043, "norm": 0.012, "concat_split": 0.006}
#: The paper's share of straggler paths that are GPU-only (SPEC §4).
PAPER_GPU_ONLY_SHARE = 0.937
#: Per-step latency alpha of a DGX H200 (µs), the default of ``evtsync run``'s B* (SPEC §8).
DGX_H200_ALPHA_US = 5.0
