"""GEMM detection and precision from kernel names, on names taken from the real public traces.

Each case names a trace in ../shared/data/traces and the start of a kernel name in it; the
test reads the full name from the trace, so every name classified here was written by a real
profiler. Expected labels come from the vendor naming conventions (documented per case).
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest

from evtsync.core.errors import InputError
from evtsync.trace.kernels import (
    KernelClassifier,
    canonical_precision,
    name_precisions,
    precision_from_dtype,
    precision_from_name,
)
from tests.conftest import full_data_file

SR = "single-rank"


@cache
def _kernel_names(path: Path) -> tuple[str, ...]:
    with gzip.open(path) as fh:
        raw = json.load(fh)
    return tuple(sorted({e["name"] for e in raw["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel"}))


def real_name(traces_dir: Path, trace: str, prefix: str) -> str:
    path = traces_dir / trace if (traces_dir / trace).is_file() else full_data_file(f"traces/{trace}")
    names = [n for n in _kernel_names(path) if n.startswith(prefix)]
    assert names, f"no kernel starting {prefix!r} in {trace}"
    return names[0]


# (trace, name prefix, is GEMM, precision of a GEMM or None): why
CASES = [
    # cuBLAS, Volta / Ampere SIMT SGEMM: fp32
    ("dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz", "volta_sgemm_128x32_nn", True, "fp32"),
    (f"{SR}/hta_rank3of8.json.gz", "ampere_sgemm_64x64_nn", True, "fp32"),
    # cuBLAS small-shape GEMM paths and split-K reduction (parts of a GEMM call)
    ("dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz", "void gemmSN_TN_kernel<float", True, "fp32"),
    ("dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz", "void gemmk1_kernel<int, float", True, "fp32"),
    (f"{SR}/hta_rank1of2.json.gz", "void gemv2T_kernel_val<", True, "fp32"),
    (f"{SR}/hta_v100_allreduce_rank1of2.json.gz", "void magma_sgemmEx_kernel<", True, "fp32"),
    (f"{SR}/hta_v100_allreduce_rank1of2.json.gz", "void splitKreduce_kernel<float", True, "fp32"),
    (f"{SR}/hta_nccl_pg_fields_rank0of2.json.gz", "void cublasLt::splitKreduce_kernel<", True, "fp32"),
    # cuBLAS on Hopper: xmma GEMM with bf16 inputs
    (f"{SR}/tracelens_h100_qwen.json.gz", "sm90_xmma_gemm_bf16bf16_bf16f32", True, "bf16"),
    # cuBLAS nvjet on Blackwell: "tst" = bf16 A/B, fp32 compute, bf16 out
    (f"{SR}/tracelens_b200_rank0of8_pg_fields.json.gz", "nvjet_tst_144x128", True, "bf16"),
    # CUTLASS: SIMT sgemm (fp32) and tensor-op s1688 (fp32 data on TF32 tensor cores)
    (f"{SR}/hta_nccl_pg_fields_rank0of2.json.gz", "void cutlass::Kernel<cutlass_80_simt_sgemm", True, "fp32"),
    (f"{SR}/hta_rank3of8.json.gz", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm", True, "tf32"),
    # TensorRT-LLM batched GEMM of an FP4 x FP8 MoE on B200
    (f"{SR}/tracelens_b200_rank0of8_pg_fields.json.gz", "bmm_Bfloat16_MxE2m1MxE4m3", True, "fp4"),
    # AMD Tensile (hipBLASLt on MI300: BBS = bf16 in/out, fp32 compute; rocBLAS on MI250: S = fp32)
    (f"{SR}/tracelens_mi300_rccl_rank0of8.json.gz", "Cijk_Ailk_Bjlk_BBS_BH_Bias", True, "bf16"),
    (f"{SR}/tracelens_mi300_rccl_rank0of8.json.gz", "Cijk_Alik_Bljk_BBS_BH", True, "bf16"),
    ("edge-cases/amd_mi250_rocm.json.gz", "Cijk_Ailk_Bjlk_SB_", True, "fp32"),
    # not GEMMs: convolutions as implicit GEMM (cuDNN/xmma, CUTLASS conv, MIOpen, CK)
    (f"{SR}/hta_nccl_pg_fields_rank0of2.json.gz", "sm80_xmma_fprop_implicit_gemm", False, None),
    (f"{SR}/hta_nccl_pg_fields_rank0of2.json.gz", "sm80_xmma_wgrad_implicit_gemm", False, None),
    (f"{SR}/hta_nccl_pg_fields_rank0of2.json.gz", "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad", False, None),
    (f"{SR}/hta_nccl_pg_fields_rank0of2.json.gz", "_ZN19cutlass_cudnn_train6KernelINS_4conv", False, None),
    (f"{SR}/tracelens_mi300_rccl_rank0of8.json.gz", "igemm_fwd_gtcx3_nhwc_bf16", False, None),
    (f"{SR}/tracelens_mi300_rccl_rank0of8.json.gz", "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv", False, None),
    ("critical-path/alexnet.json.gz", "cudnn_ampere_scudnn_128x64_relu", False, None),
    # not GEMMs: attention and MoE kernels with CUTLASS types, FBGEMM utilities, BLAS-1, NCCL
    (f"{SR}/tracelens_h100_qwen.json.gz", "void pytorch_flash::flash_fwd_kernel<", False, None),
    (f"{SR}/tracelens_b200_rank0of8_pg_fields.json.gz", "void moe::dev::finalize::finalizeKernelVecLoad<", False, None),
    (f"{SR}/hta_a100_sendrecv_rank0of16.json.gz", "void fbgemm_gpu::permute_2D_data_kernel<", False, None),
    ("dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz", "void dot_kernel<float", False, None),
    ("dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz", "void reduce_1Block_kernel<", False, None),
    ("dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz", "ncclKernel_AllReduce_RING_LL_Sum_float", False, None),
    ("dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz", "void at::native::vectorized_elementwise_kernel<", False, None),
]


@pytest.mark.parametrize(("trace", "prefix", "gemm", "precision"), CASES)
def test_real_kernel_names(traces_dir: Path, trace: str, prefix: str, gemm: bool, precision: str | None) -> None:
    name = real_name(traces_dir, trace, prefix)
    assert KernelClassifier().is_gemm(name) is gemm
    if gemm:
        assert precision_from_name(name) == precision


def test_every_tensile_and_nvjet_kernel_in_the_real_traces_is_a_gemm(full_traces_dir: Path) -> None:
    classifier = KernelClassifier()
    seen = 0
    for path in sorted(full_traces_dir.rglob("*.json.gz")):
        for name in _kernel_names(path) if path.stat().st_size < 4 << 20 else ():
            if name.startswith(("Cijk_", "nvjet_", "volta_sgemm", "ampere_sgemm")):
                seen += 1
                assert classifier.is_gemm(name), name
                assert precision_from_name(name) is not None, name
            if "flash" in name.lower() or name.startswith(("ncclKernel_", "ncclDevKernel_")):
                assert not classifier.is_gemm(name), name
    assert seen >= 30


def test_constructed_names_of_other_vendor_conventions() -> None:
    """Names following documented conventions that the shared traces lack."""
    cases = {
        "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn": ("fp16"),
        "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn": ("bf16"),
        "volta_h884gemm_64x64_ldg8_nn": ("fp16"),
        "nvjet_hsh_64x8_64x16_4x1_v_bz_TNT": ("fp16"),
        "nvjet_sss_128x64_64x8_2x1_v_bz_NNN": ("fp32"),
        "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0": ("fp16"),
        "Cijk_Ailk_Bljk_F8BS_BH_MT128x128x64_MI32x32x16x1_SN": ("fp8"),
        "sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128": ("fp8"),
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
        "cutlass::gemm::collective::CollectiveMma<cutlass::bfloat16_t>>>(Params)": ("bf16"),
        "triton_tem_fused_addmm_3": (None),
    }
    classifier = KernelClassifier()
    for name, precision in cases.items():
        assert classifier.is_gemm(name), name
        assert precision_from_name(name) == precision, name
    for name in ("void cutlass::device_kernel<flash::FlashAttnFwdSm90<cutlass::bfloat16_t>>(Params)",
                 "fmha_cutlassF_f16_aligned_64x64_rf_sm80", "triton_poi_fused_add_mul_0",
                 "triton_red_fused_mm_backward_helper", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop"):
        assert not classifier.is_gemm(name), name


def test_user_patterns_extend_and_override() -> None:
    name = "my_team_fused_matmul_kernel"
    assert not KernelClassifier().is_gemm(name)
    assert KernelClassifier(("fused_matmul",)).is_gemm(name)
    # a user pattern wins over a built-in exclusion (here: convolutions)
    conv = "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nhwc"
    assert not KernelClassifier().is_gemm(conv)
    assert KernelClassifier((r"implicit_gemm",)).is_gemm(conv)
    with pytest.raises(InputError, match="--gemm-pattern"):
        KernelClassifier(("gemm[",)).is_gemm(name)
    mask = KernelClassifier().gemm_mask(["volta_sgemm_128x32_nn", "elementwise", "volta_sgemm_128x32_nn"])
    assert mask.tolist() == [True, False, True]


def test_precision_from_dtype_and_user_override() -> None:
    assert precision_from_dtype("BFloat16") == "bf16"
    assert precision_from_dtype("c10::Half") == "fp16"
    assert precision_from_dtype("Float") == "fp32"
    assert precision_from_dtype("Float8_e4m3fn") == "fp8"
    assert precision_from_dtype(None) is None and precision_from_dtype("Long") is None
    assert canonical_precision("BF16") == "bf16" and canonical_precision("bfloat16") == "bf16"
    assert canonical_precision("half") == "fp16"
    with pytest.raises(InputError, match="unknown precision"):
        canonical_precision("fp12")
    assert name_precisions(["volta_sgemm_128x32_nn", "no_type_here"]).tolist() == ["fp32", None]
