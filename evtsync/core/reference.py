"""The paper's reference numbers, in one place (methodology §4, §6, §8).

Shown beside evtsync's own results (the attribution figure, the report) and used as the
reference point of FLOPS scaling. Import-free so that any layer may read them.
"""

from __future__ import annotations

from typing import TypedDict

#: Peak dense BF16 TFLOPS of the reference GPU of the paper (H200), methodology §8.
REFERENCE_TFLOPS = 989.0
#: The reference GPU itself.
REFERENCE_GPU = "H200"
#: The paper's breakdown of GPU causes of the straggler's delay (methodology §4).
PAPER_GPU_CAUSES = {"gemm": 0.78, "attention": 0.154, "fsdp": 0.043, "norm": 0.012, "concat_split": 0.006}
#: The paper's share of straggler paths that are GPU-only (methodology §4).
PAPER_GPU_ONLY_SHARE = 0.937
#: Per-step latency alpha of a DGX H200 (µs), the default of ``evtsync run``'s B* (methodology §8).
DGX_H200_ALPHA_US = 5.0

#: NVLink bandwidth per GPU (GB/s) by generation, the paper's Table 1 (seeds): the reference
#: lines of B* figures ("today's NVLink").
NVLINK_GBPS = {"A100": 300.0, "H100": 450.0, "H200": 450.0, "B200": 900.0}

def nvlink_reference_lines(min_gbps: float = 450.0) -> dict[str, float]:
    """Table 1's NVLink generations from ``min_gbps`` up, as label -> GB/s per GPU: the default
    reference lines of the B* figures (450 GB/s H100/H200, 900 GB/s B200)."""
    return {f"{v:g} GB/s NVLink ({'/'.join(g for g, b in NVLINK_GBPS.items() if b == v)})": v
            for v in sorted(set(NVLINK_GBPS.values())) if v >= min_gbps}


#: Named "what-if" hardware for ``predict``/``bandwidth --preset`` and the report's what-if
#: section (every field overridable by a flag). Checked against the seeds (000: the paper, 001:
#: its summary, which reproduces Table 1: NVLink GB/s per GPU A100 300, H100 450, H200 450,
#: B200 900; GPUs per domain 8, 8, 8, 72):
#:
#: - ``n`` (GPUs per scale-up domain) and ``nvlink_gbps`` are Table 1's, for every preset. Table 1
#:   gives the B200 a 72-GPU domain (the NVL72 rack; an HGX B200 board holds 8): both Blackwell
#:   presets use it.
#: - ``tflops`` (peak dense BF16) is not in Table 1. The H200's 989 is the paper's own (its FLOPS
#:   scaling paragraph: "an H200 GPU, which supports 989 BF16 peak TFLOPS"). The Blackwell values
#:   are NVIDIA datasheet values, labelled so in ``source`` and wherever a preset is shown:
#:   B200 2250 from the NVIDIA HGX B200 datasheet (FP16/BF16 Tensor Core 36 PFLOPS with sparsity
#:   per 8 GPUs, 1000 W configuration: 4.5 sparse = 2.25 dense PFLOPS per GPU); NVL72 2500 from
#:   the NVIDIA GB200 NVL72 datasheet (360 PFLOPS with sparsity per 72 GPUs, the 1200 W GB200
#:   configuration: 5 sparse = 2.5 dense PFLOPS per GPU).
class Preset(TypedDict):
    """One named what-if hardware: GPU, domain size, NVLink GB/s, dense BF16 TFLOPS and sources."""

    gpu: str
    n: int
    nvlink_gbps: float
    tflops: float
    tflops_source: str
    source: str


PRESETS: dict[str, Preset] = {
    "H200-8": {"gpu": "H200", "n": 8, "nvlink_gbps": 450.0, "tflops": 989.0, "tflops_source": "paper",
               "source": "Table 1 (8 GPUs, 450 GB/s); 989 TFLOPS from the paper (seeds)"},
    "B200": {"gpu": "B200", "n": 72, "nvlink_gbps": 900.0, "tflops": 2250.0, "tflops_source": "datasheet",
             "source": "Table 1 (B200: 72 GPUs, 900 GB/s); 2250 dense BF16 TFLOPS from the NVIDIA HGX B200 "
                       "datasheet (36 PFLOPS sparse per 8 GPUs), not the paper"},
    "NVL72": {"gpu": "B200", "n": 72, "nvlink_gbps": 900.0, "tflops": 2500.0, "tflops_source": "datasheet",
              "source": "Table 1's B200 column (72 GPUs, 900 GB/s); 2500 dense BF16 TFLOPS per GPU from the "
                        "NVIDIA GB200 NVL72 datasheet (360 PFLOPS sparse per 72 GPUs), not the paper"},
}
