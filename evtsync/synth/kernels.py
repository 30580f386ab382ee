"""Catalogue of realistic kernel names per GPU generation, precision and trace era.

Names follow what cuBLAS/cuBLASLt, CUTLASS, PyTorch's ATen, FlashAttention and NCCL really
emit (several are copied from the public traces in ``data/traces``): ``volta_sgemm_*`` and
``ampere_*gemm*`` from cuBLAS, ``sm90_xmma_gemm_*`` and ``nvjet_tst_*`` (cuBLASLt 12.8+,
modern traces only), ``pytorch_flash::flash_*_kernel`` for attention, ATen elementwise,
layer-norm and cat kernels, and ``ncclDevKernel_*`` (NCCL >= 2.19) or ``ncclKernel_*``
(older) collectives. The launch API differs too: cuBLASLt kernels on Hopper/Blackwell are
launched with ``cuLaunchKernelEx`` (a ``cuda_driver`` event) in modern traces.
"""

from __future__ import annotations

from dataclasses import dataclass

from evtsync.synth.config import GPU_MODELS


@dataclass(frozen=True)
class KernelSpec:
    """A kernel as the trace shows it: name, launch geometry and the launch API."""

    name: str
    role: str
    category: str
    grid: tuple[int, int, int] = (1024, 1, 1)
    block: tuple[int, int, int] = (256, 1, 1)
    registers: int = 64
    shared_memory: int = 0
    launch_api: str = "cudaLaunchKernel"


_T = {"bf16": "c10::BFloat16", "fp32": "float"}
_NCCL_DTYPE_MODERN = {"bf16": "bf16", "fp32": "f32"}
_NCCL_DTYPE_LEGACY = {"bf16": "bfloat16", "fp32": "float"}
#: torch dtype names as the NCCL kernels' and record_param_comms' ``dtype`` arg shows them
TORCH_DTYPE = {"bf16": "BFloat16", "fp32": "Float"}
DTYPE_BYTES = {"bf16": 2, "fp32": 4}


def _gemm_names(arch: str, precision: str, modern: bool) -> dict[str, str]:
    """GEMM kernel names for the four forward and two backward GEMM roles."""
    if precision == "fp32":
        if arch == "volta":
            return {
                "gemm_qkv": "volta_sgemm_128x64_tn", "gemm_out": "volta_sgemm_128x64_tn",
                "gemm_up": "volta_sgemm_128x128_tn", "gemm_down": "volta_sgemm_128x64_tn",
                "gemm_dgrad": "volta_sgemm_128x64_nn", "gemm_wgrad": "volta_sgemm_128x64_nt",
            }
        if arch == "ampere":
            return {
                "gemm_qkv": "ampere_sgemm_128x64_tn", "gemm_out": "ampere_sgemm_128x64_tn",
                "gemm_up": "ampere_sgemm_128x128_tn", "gemm_down": "ampere_sgemm_128x64_tn",
                "gemm_dgrad": "ampere_sgemm_128x64_nn", "gemm_wgrad": "ampere_sgemm_128x128_nt",
            }
        simt = "void cutlass::Kernel2<cutlass_80_simt_sgemm_{t}_8x5_{l}_align1>(cutlass_80_simt_sgemm_{t}_8x5_{l}_align1::Params)"
        return {
            "gemm_qkv": simt.format(t="128x64", l="tn"), "gemm_out": simt.format(t="128x64", l="tn"),
            "gemm_up": simt.format(t="128x128", l="tn"), "gemm_down": simt.format(t="128x64", l="tn"),
            "gemm_dgrad": simt.format(t="128x64", l="nn"), "gemm_wgrad": simt.format(t="128x128", l="nt"),
        }
    if arch == "ampere":
        g = "ampere_bf16_s16816gemm_bf16_{t}_ldg8_f2f_stages_{s}_{l}"
        return {
            "gemm_qkv": g.format(t="128x128", s="64x3", l="tn"), "gemm_out": g.format(t="128x128", s="64x3", l="tn"),
            "gemm_up": g.format(t="256x128", s="64x3", l="tn"), "gemm_down": g.format(t="128x128", s="64x3", l="tn"),
            "gemm_dgrad": g.format(t="128x128", s="64x3", l="nn"), "gemm_wgrad": g.format(t="256x128", s="32x3", l="nt"),
        }
    if arch == "hopper":
        x = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_{l}_n_tilesize{t}_warpgroupsize{w}_"
             "execute_segment_k_off_kernel__5x_cublas")
        names = {
            "gemm_qkv": x.format(l="tn", t="128x128x64", w="1x1x1"),
            "gemm_out": x.format(l="tn", t="128x128x64", w="1x1x1"),
            "gemm_up": x.format(l="tn", t="256x128x64", w="2x1x1"),
            "gemm_down": x.format(l="tn", t="128x128x64", w="1x1x1"),
            "gemm_dgrad": x.format(l="nn", t="128x128x64", w="1x1x1"),
            "gemm_wgrad": x.format(l="nt", t="256x128x64", w="2x1x1"),
        }
        if modern:
            names["gemm_up"] = "nvjet_tst_256x128_64x4_1x2_h_bz_coopB_TNT"
            names["gemm_wgrad"] = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_NTN"
        return names
    # blackwell
    return {
        "gemm_qkv": "nvjet_tst_144x128_64x6_2x1_v_bz_TNN",
        "gemm_out": "nvjet_tst_144x128_64x6_2x1_v_bz_TNN",
        "gemm_up": "nvjet_tst_256x128_64x4_2x1_2cta_v_bz_TNT",
        "gemm_down": "nvjet_tst_144x128_64x6_2x1_v_bz_TNN",
        "gemm_dgrad": "nvjet_tst_192x128_64x5_2x1_2cta_h_bz_NNN",
        "gemm_wgrad": "nvjet_tst_256x128_64x4_2x1_2cta_v_bz_NTN",
    }


def _flash_names(arch: str, precision: str) -> dict[str, str]:
    """Attention kernels: FlashAttention-2 for 16-bit on sm80+, memory-efficient otherwise."""
    if precision == "bf16":
        traits = ("pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
                  "pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >")
        btraits = ("pytorch_flash::Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, "
                   "pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >")
        return {
            "flash_fwd": f"void pytorch_flash::flash_fwd_kernel<{traits}, false, true, false, false, false, true, false>(pytorch_flash::Flash_fwd_params)",
            "flash_bwd_dot": f"void pytorch_flash::flash_bwd_dot_do_o_kernel<true, {btraits}>(pytorch_flash::Flash_bwd_params)",
            "flash_bwd": f"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<{btraits}, true, true, false, false, false, false, false>(pytorch_flash::Flash_bwd_params)",
            "flash_bwd_convert": f"void pytorch_flash::flash_bwd_convert_dq_kernel<{btraits}>(pytorch_flash::Flash_bwd_params, int)",
        }
    sm = {"volta": "Sm70", "ampere": "Sm80", "hopper": "Sm80", "blackwell": "Sm80"}[arch]
    tag = sm.lower()
    return {
        "flash_fwd": f"fmha_cutlassF_f32_aligned_64x64_rf_{tag}(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::{sm}, true, 64, 64, 64, true, true>::Params)",
        "flash_bwd_dot": "void at::native::(anonymous namespace)::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})",
        "flash_bwd": f"fmha_cutlassB_f32_aligned_64x64_k128_{tag}(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::{sm}, float, true, false, false, 64, 64, 128, false>::Params)",
        "flash_bwd_convert": "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
    }


def catalogue(gpu: str, precision: str, modern: bool) -> dict[str, KernelSpec]:
    """Kernel specs by role for one GPU model, precision and trace era."""
    arch = GPU_MODELS[gpu]["arch"]
    t = _T[precision]
    arr = "std::array<char*, {n}ul>" if modern else "at::detail::Array<char*, {n}>"
    a2, a3 = arr.format(n=2), arr.format(n=3)
    sms = GPU_MODELS[gpu]["props"]["numSms"]
    specs: dict[str, KernelSpec] = {}
    driver = modern and arch in ("hopper", "blackwell")
    for role, name in _gemm_names(arch, precision, modern).items():
        api = "cuLaunchKernelEx" if driver and (name.startswith("sm90") or name.startswith("nvjet")) else "cudaLaunchKernel"
        specs[role] = KernelSpec(name, role, "gemm", grid=(sms, 1, 1) if name.startswith("nvjet") else (64, 16, 1),
                                 block=(384, 1, 1) if arch in ("hopper", "blackwell") else (256, 1, 1),
                                 registers=168, shared_memory=213248 if arch != "volta" else 49152, launch_api=api)
    for role, name in _flash_names(arch, precision).items():
        specs[role] = KernelSpec(name, role, "attention", grid=(64, 32, 4), block=(128, 1, 1),
                                 registers=255, shared_memory=49152)
    specs["norm_fwd"] = KernelSpec(
        f"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<{t}, float>(int, float, {t} const*, {t} const*, {t} const*, float*, float*, {t}*)",
        "norm_fwd", "norm", grid=(8192, 1, 1), block=(32, 4, 1), registers=40)
    specs["norm_bwd"] = KernelSpec(
        f"void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<{t}, float>({t} const*, {t} const*, float const*, float const*, {t} const*, {t}*, int)",
        "norm_bwd", "norm", grid=(8192, 1, 1), block=(128, 1, 1), registers=48)
    specs["add"] = KernelSpec(
        f"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<{t}>, {a3} >(int, at::native::CUDAFunctor_add<{t}>, {a3})",
        "add", "elementwise", grid=(65536, 1, 1), block=(128, 1, 1), registers=26)
    lam = "c10::BFloat16" if precision == "bf16" else "float"
    specs["silu"] = KernelSpec(
        f"void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{{lambda()#1}}::operator()() const::{{lambda()#6}}::operator()() const::{{lambda({lam})#1}}, {a2} >(int, at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{{lambda()#1}}::operator()() const::{{lambda()#6}}::operator()() const::{{lambda({lam})#1}}, {a2})",
        "silu", "elementwise", grid=(65536, 1, 1), block=(128, 1, 1), registers=24)
    specs["mul"] = KernelSpec(
        f"void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<{t}, {t}, {t}, at::native::binary_internal::MulFunctor<float> >, {a3} >(int, at::native::BinaryFunctor<{t}, {t}, {t}, at::native::binary_internal::MulFunctor<float> >, {a3})",
        "mul", "elementwise", grid=(65536, 1, 1), block=(128, 1, 1), registers=26)
    specs["silu_bwd"] = KernelSpec(
        f"void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::silu_backward_kernel(at::TensorIteratorBase&)::{{lambda()#1}}::operator()() const::{{lambda()#6}}::operator()() const::{{lambda({lam}, {lam})#1}}, {a3} >(int, at::native::(anonymous namespace)::silu_backward_kernel(at::TensorIteratorBase&)::{{lambda()#1}}::operator()() const::{{lambda()#6}}::operator()() const::{{lambda({lam}, {lam})#1}}, {a3})",
        "silu_bwd", "elementwise", grid=(65536, 1, 1), block=(128, 1, 1), registers=30)
    opaque = "2u" if precision == "bf16" else "4u"
    specs["cat"] = KernelSpec(
        f"void at::native::(anonymous namespace)::CatArrayBatchedCopy_contig<at::native::(anonymous namespace)::OpaqueType<{opaque}>, unsigned int, 3, 64, 64>(at::native::(anonymous namespace)::OpaqueType<{opaque}>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<{opaque}>, unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)"
        if modern else
        f"void at::native::(anonymous namespace)::CatArrayBatchedCopy<{t}, unsigned int, 3, 64, 64>({t}*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<{t}, unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
        "cat", "concat", grid=(4096, 3, 1), block=(512, 1, 1), registers=32)
    specs["embedding"] = KernelSpec(
        f"void at::native::(anonymous namespace)::indexSelectLargeIndex<{t}, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<{t}, unsigned int>, at::cuda::detail::TensorInfo<{t} const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
        "embedding", "other", grid=(65536, 1, 1), block=(128, 1, 1), registers=32)
    specs["optimizer"] = KernelSpec(
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, bool*, float const*, double, double, double, double, double, bool, float const*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, bool*, float const*, double, double, double, double, double, bool, float const*, float*)",
        "optimizer", "elementwise", grid=(320, 1, 1), block=(512, 1, 1), registers=72)
    return specs


_NCCL_OP = {"allreduce": "AllReduce", "reduce_scatter": "ReduceScatter", "allgather": "AllGather",
            "alltoall": "SendRecv"}


def nccl_kernel(collective: str, precision: str, nbytes: int, modern: bool) -> KernelSpec:
    """The NCCL kernel for one collective: protocol by message size, name by era."""
    protocol = "LL" if nbytes < 64 * 1024 else ("LL128" if nbytes < 4 * 1024 * 1024 else "SIMPLE")
    op = _NCCL_OP[collective]
    if modern:
        dt = _NCCL_DTYPE_MODERN[precision]
        if collective == "allgather":
            name = f"ncclDevKernel_AllGather_RING_{protocol}(ncclDevKernelArgsStorage<4096ul>)"
        elif collective == "alltoall":
            name = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
        else:
            name = f"ncclDevKernel_{op}_Sum_{dt}_RING_{protocol}(ncclDevKernelArgsStorage<4096ul>)"
    else:
        dt = _NCCL_DTYPE_LEGACY[precision]
        if collective in ("allgather", "alltoall"):
            name = f"ncclKernel_{op}_RING_{'SIMPLE' if collective == 'alltoall' else protocol}_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
        else:
            name = f"ncclKernel_{op}_RING_{protocol}_Sum_{dt}(ncclDevComm*, unsigned long, ncclWork*)"
    return KernelSpec(name, f"nccl_{collective}", "nccl", grid=(24, 1, 1), block=(544 if protocol != "SIMPLE" else 640, 1, 1),
                      registers=96, shared_memory=87568)
