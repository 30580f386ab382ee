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

#: NVLink bandwidth per GPU (GB/s) by generation, the paper's Table 1 (seeds): the reference
#: lines of B* figures ("today's NVLink").
NVLINK_GBPS = {"A100": 300.0, "H100": 450.0, "H200": 450.0, "B200": 900.0}

def nvlink_reference_lines(min_gbps: float = 450.0) -> dict[str, float]:
    """Table 1's NVLink generations from ``min_gbps`` up, as label -> GB/s per GPU: the default
    reference lines of the B* figures (450 GB/s H100/H200, 900 GB/s B200)."""
    return {f"{v:g} GB/s NVLink ({'/'.join(g for g, b in NVLINK_GBPS.items() if b == v)})": v
            for v in sorted(set(NVLINK_GBPS.values())) if v >= min_gbps}


#: Named "what-if" hardware for ``predict``/``bandwidth --preset`` (every field overridable by a
#: flag). ``n``: GPUs per scale-up domain and ``nvlink_gbps``: NVLink GB/s per GPU, both from
#: the paper's Table 1 (seeds: A100/H100/H200 8 GPUs, B200 72 GPUs at 900 GB/s); ``tflops``:
#: peak dense BF16 TFLOPS, which Table 1 does not list: H200 989 is the paper's (§6), B200 2250
#: and GB200 2500 are NVIDIA's datasheet values (HGX B200: 36 PFLOPS sparse per 8 GPUs;
#: GB200 NVL72: 360 PFLOPS sparse per 72 GPUs; dense = half) and are marked so in ``source``.
PRESETS: dict[str, dict[str, object]] = {
    "H200-8": {"gpu": "H200", "n": 8, "nvlink_gbps": 450.0, "tflops": 989.0,
               "source": "Table 1 (8 GPUs, 450 GB/s); 989 TFLOPS from the paper §6"},
    "B200": {"gpu": "B200", "n": 72, "nvlink_gbps": 900.0, "tflops": 2250.0,
             "source": "Table 1 (72 GPUs, 900 GB/s); 2250 dense BF16 TFLOPS from NVIDIA's HGX B200 datasheet, "
                       "not the paper"},
    "NVL72": {"gpu": "B200", "n": 72, "nvlink_gbps": 900.0, "tflops": 2500.0,
              "source": "Table 1's B200 column (72 GPUs, 900 GB/s); 2500 dense BF16 TFLOPS per GB200 GPU from "
                        "NVIDIA's GB200 NVL72 datasheet, not the paper"},
}
