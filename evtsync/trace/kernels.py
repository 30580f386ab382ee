"""Kernel-name classification: which GPU kernels are GEMMs, and at what precision.

The z-scores of methodology §5 are fitted on compute blocks that contain GEMMs, labelled with the
precision of those GEMMs. Neither fact is recorded in a Kineto trace; both are read from
kernel names, whose conventions differ by vendor library:

- cuBLAS / cuBLASLt: ``volta_sgemm_128x64_nn``, ``ampere_fp16_s16816gemm_fp16_…``,
  ``sm90_xmma_gemm_bf16bf16_bf16f32_f32_…_cublas``, ``nvjet_tst_128x256_…`` (Hopper and
  Blackwell; the letters after ``nvjet_`` are the A/B, compute and output types:
  ``t`` bf16, ``h`` fp16, ``s`` fp32), small-shape paths ``gemmSN_*``, ``gemmk1_kernel``,
  ``gemv2T_kernel``, and split-K helpers ``splitKreduce_kernel`` and cuBLASLt's epilogue;
- CUTLASS: ``cutlass::Kernel<cutlass_80_tensorop_s1688gemm_…>``,
  ``cutlass::device_kernel<…GemmUniversal…>``;
- TensorRT-LLM batched GEMMs: ``bmm_Bfloat16_MxE2m1MxE4m3_Fp32_…``;
- AMD: Tensile kernels of rocBLAS / hipBLASLt ``Cijk_Ailk_Bjlk_BBS_BH_…`` (the token after the
  index letters is the data type: ``B`` bf16, ``H`` fp16, ``S`` fp32, ``D`` fp64, ``F8``/``B8``
  fp8, ``I8`` int8), Composable Kernel ``…GridwiseGemm…``, ``rocblas_*gemm*``;
- PyTorch Inductor matmul templates ``triton_tem_fused_mm_…`` / ``…addmm…`` / ``…bmm…``.

What is *not* a GEMM here, although the name contains a GEMM word: convolutions computed as
implicit GEMMs (cuDNN ``scudnn``, xmma ``fprop``/``dgrad``/``wgrad``, CUTLASS conv, MIOpen
``igemm_fwd/bwd/wrw``, CK ``grouped_conv``/``bwd_weight``), attention kernels (FlashAttention,
``fmha``, cuDNN SDPA — they use CUTLASS types), FBGEMM's utility kernels (``fbgemm_gpu::``),
and BLAS-1 kernels (``dot_kernel``, ``scal_kernel``, ``reduce_1Block_kernel``), whose template
arguments name cuBLAS's GEMV tensor types. A bare ``cutlass`` in a name is not
enough either: FlashAttention-3 and MoE kernels are ``cutlass::device_kernel<…>`` or carry
``cutlass::bfloat16_t`` in their template arguments.

Users extend the GEMM patterns (``extra_patterns`` / ``--gemm-pattern REGEX``); a kernel that
matches a user pattern is a GEMM even when a built-in exclusion also matches.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd

from evtsync.core.errors import InputError
from evtsync.core.vocabulary import PRECISIONS
from evtsync.trace.schema import COMM_KERNEL_PATTERNS
from evtsync.trace.tables import category_flags, category_strings, is_kernel_category, string_values

log = logging.getLogger(__name__)

#: Built-in GEMM name patterns (case-insensitive ``re.search``).
GEMM_PATTERNS: tuple[str, ...] = (
    r"(?<!fb)gemm",                 # sgemm, hgemm, xmma_gemm, s1688gemm, GridwiseGemm, gemmSN, gemmk1
    r"gemv",                        # cuBLAS/rocBLAS matrix-vector paths of GEMM calls
    r"^nvjet_",                     # cuBLAS on Hopper/Blackwell
    r"^cijk_",                      # Tensile (rocBLAS, hipBLASLt)
    r"^bmm_",                       # TensorRT-LLM batched GEMMs
    r"splitkreduce|cublaslt",       # cuBLAS split-K reduction and cuBLASLt epilogue of a GEMM
    r"^triton_tem_fused_(?:\w+_)?(?:add|b)?mm(?:_|\d|$)",  # Inductor matmul templates
)
#: Built-in exclusions: GEMM words in kernels that are not matrix products of a layer.
NOT_GEMM_PATTERNS: tuple[str, ...] = (
    r"conv|fprop|dgrad|wgrad|winograd|scudnn|cudnn|igemm_(?:fwd|bwd|wrw)|bwd_weight",
    r"flash|fmha|attention|sdpa",
    r"fbgemm",
    r"(?:^|[\s:])(?:dot|scal|axpy|nrm2|asum|swap|rot|reduce_1block)_kernel",
)


def _compile(patterns: Iterable[str], what: str) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for text in patterns:
        try:
            compiled.append(re.compile(text, re.IGNORECASE))
        except re.error as exc:
            raise InputError(f"{what} {text!r}: not a valid regular expression ({exc})") from exc
    return tuple(compiled)


def normalise_kernel_name(name: str) -> str:
    """Kernel name without a leading ``void`` and with runs of whitespace collapsed."""
    text = " ".join(str(name).split())
    return text[5:] if text.startswith("void ") else text


# --- precision ---------------------------------------------------------------------------

_TENSILE_TYPE = re.compile(r"^cijk_a[a-z]+_b[a-z]+_(?:c[a-z]+_d[a-z]+_)?([a-z][a-z0-9]*)_", re.IGNORECASE)
_TENSILE_CHARS = {"b": "bf16", "h": "fp16", "s": "fp32", "d": "fp64", "i": "int8"}
_NVJET_TYPE = re.compile(r"^nvjet_(?:sm\d+_)?([a-z])[a-z]", re.IGNORECASE)
_NVJET_CHARS = {"t": "bf16", "h": "fp16", "s": "fp32", "d": "fp64", "q": "fp8", "e": "fp8"}
#: Precision words in kernel names, tried in order (narrowest types first: a mixed FP4 x FP8
#: GEMM is labelled fp4, a bf16 GEMM with an fp32 split-K reduction bf16).
_NAME_PRECISION: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), label) for p, label in (
        (r"e2m1|nvfp4|fp4|float4", "fp4"),
        (r"e4m3|e5m2|fp8|float8|f8f8", "fp8"),
        (r"bf16|bfloat16", "bf16"),
        (r"tf32|s1688gemm|s1688(?:fprop|dgrad|wgrad)", "tf32"),
        (r"fp16|f16f16|half|hgemm|h\d{3,5}gemm", "fp16"),
        (r"int8|i8i8", "int8"),
        (r"dgemm|double|fp64|f64", "fp64"),
        (r"sgemm|fp32|f32f32|(?<![a-z0-9_])float(?![a-z0-9_])|gcgemm", "fp32"),
    ))

_DTYPE_PRECISION = {
    "bfloat16": "bf16", "bf16": "bf16", "half": "fp16", "float16": "fp16", "fp16": "fp16",
    "float": "fp32", "float32": "fp32", "fp32": "fp32", "tf32": "tf32", "double": "fp64",
    "float64": "fp64", "fp64": "fp64", "int8": "int8", "char": "int8", "fp8": "fp8",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8", "e4m3": "fp8", "e5m2": "fp8", "fp4": "fp4", "float4_e2m1fn_x2": "fp4",
}


def precision_from_name(name: str) -> str | None:
    """Precision of a GEMM kernel read from its name, or None when the name does not say."""
    text = normalise_kernel_name(name)
    tensile = _TENSILE_TYPE.match(text)
    if tensile:
        token = tensile.group(1).lower()
        if token.startswith(("f8", "b8")):
            return "fp8"
        if token.startswith("i8"):
            return "int8"
        return _TENSILE_CHARS.get(token[0])
    nvjet = _NVJET_TYPE.match(text)
    if nvjet:
        return _NVJET_CHARS.get(nvjet.group(1).lower())
    for pattern, label in _NAME_PRECISION:
        if pattern.search(text):
            return label
    return None


def precision_from_dtype(dtype: object) -> str | None:
    """Precision label of a trace ``dtype`` value (``BFloat16``, ``c10::Half``, ``Float``), or None."""
    if dtype is None or (isinstance(dtype, float) and np.isnan(dtype)):
        return None
    text = str(dtype).strip().lower().replace("c10::", "").replace("torch.", "")
    return _DTYPE_PRECISION.get(text)


def canonical_precision(text: str) -> str:
    """A user-given precision (``bf16``, ``BFloat16``, ``half``, ``fp8``…) as a canonical label.

    Raises :class:`InputError` naming the accepted labels when the text is not a precision.
    """
    key = str(text).strip().lower()
    if key in PRECISIONS:
        return key
    label = precision_from_dtype(key)
    if label is None:
        raise InputError(f"--precision {text!r}: unknown precision; expected one of "
                         f"{', '.join(PRECISIONS)} (or a dtype name such as bfloat16)")
    return label


# --- classification ----------------------------------------------------------------------

@dataclass(frozen=True)
class KernelClassifier:
    """GEMM detection with the built-in patterns plus ``extra_patterns`` (regular expressions).

    A name is a GEMM when it matches a user pattern, or a built-in GEMM pattern and no
    built-in exclusion. Patterns are searched case-insensitively in the normalised name.
    """

    extra_patterns: Sequence[str] = field(default_factory=tuple)

    @cached_property
    def _user(self) -> tuple[re.Pattern[str], ...]:
        return _compile(self.extra_patterns, "--gemm-pattern")

    @cached_property
    def _gemm(self) -> tuple[re.Pattern[str], ...]:
        return _compile(GEMM_PATTERNS, "built-in GEMM pattern")

    @cached_property
    def _not_gemm(self) -> tuple[re.Pattern[str], ...]:
        return _compile(NOT_GEMM_PATTERNS, "built-in exclusion")

    def is_gemm(self, name: str) -> bool:
        """Whether the kernel ``name`` is a GEMM (matrix product)."""
        text = normalise_kernel_name(name)
        if any(p.search(text) for p in self._user):
            return True
        return any(p.search(text) for p in self._gemm) and not any(p.search(text) for p in self._not_gemm)

    def gemm_mask(self, names: pd.Series | Sequence[str]) -> np.ndarray:
        """Boolean array: which of ``names`` are GEMMs (each distinct name classified once)."""
        series = names if isinstance(names, pd.Series) else pd.Series(list(names), dtype=object)
        cat = series.astype("category")
        flags = np.array([self.is_gemm(str(c)) for c in cat.cat.categories], dtype=bool)
        codes = cat.cat.codes.to_numpy()
        return np.where(codes >= 0, flags[np.maximum(codes, 0)] if flags.size else False, False)


def name_precisions(names: pd.Series | Sequence[str]) -> np.ndarray:
    """Object array of the precision read from each name (None where the name does not say)."""
    series = names if isinstance(names, pd.Series) else pd.Series(list(names), dtype=object)
    cat = series.astype("category")
    labels = np.array([precision_from_name(str(c)) for c in cat.cat.categories] + [None], dtype=object)
    codes = cat.cat.codes.to_numpy()
    return labels[np.where(codes >= 0, codes, len(labels) - 1)]


# --- communication kernels -----------------------------------------------------------------

def parse_comm_kernels(specs: Iterable[str | tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """User communication-kernel patterns, ``"REGEX=KIND"`` or ``(regex, kind)``, checked.

    The last ``=`` separates the kind, so a regular expression may contain ``=``.
    """
    out = []
    for spec in specs:
        if isinstance(spec, str):
            regex, sep, kind = spec.rpartition("=")
            if not sep or not regex or not kind.strip():
                raise InputError(f"--comm-kernel {spec!r}: expected REGEX=KIND, e.g. 'my_a2a_kernel=AllToAll'")
        else:
            regex, kind = spec
        _compile([regex], "--comm-kernel")
        out.append((str(regex), str(kind).strip()))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _comm_patterns(extra: tuple[tuple[str, str], ...]) -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(p, re.IGNORECASE), kind) for p, kind in (*extra, *COMM_KERNEL_PATTERNS))


@functools.lru_cache(maxsize=1 << 16)
def comm_kind(name: str, extra: tuple[tuple[str, str], ...] = ()) -> str | None:
    """The kind of a non-NCCL communication kernel from its name (user patterns first, then
    :data:`~evtsync.trace.schema.COMM_KERNEL_PATTERNS`), or None when it is not one.
    Memoised: the same kernel names recur in every rank file of a job."""
    for pattern, kind in _comm_patterns(extra):
        if pattern.search(name):
            return kind
    return None


@functools.lru_cache(maxsize=1 << 16)
def _user_kind(name: str, extra: tuple[tuple[str, str], ...]) -> str | None:
    """The kind a user pattern gives ``name`` (None when no user pattern matches it)."""
    if any(p.search(name) for p, _ in _comm_patterns(extra)[: len(extra)]):
        return comm_kind(name, extra)
    return None


def mark_comm_kernels(tables: Any, extra: tuple[tuple[str, str], ...] = ()) -> None:
    """Add ``is_comm`` to one rank's kernels (NCCL/RCCL kernels and those of the registry)
    and give the registry's kernels their kind as ``collective``; in place.

    ``tables`` is a :class:`~evtsync.trace.tables.RankTables`. A user pattern (``extra``)
    also wins over the collective read for an NCCL kernel. Each distinct kernel name is
    classified once.
    """
    kernels = tables.columns["kernels"]
    names = kernels["name"]
    if not isinstance(names, pd.Categorical):
        names = pd.Categorical(names)
    categories = category_strings(names.dtype)
    kinds = [comm_kind(c, extra) for c in categories]
    user = [_user_kind(c, extra) for c in categories] if extra else [None] * len(categories)
    codes = np.asarray(names.codes)
    at = np.where(codes >= 0, codes, len(categories))  # missing names take the final False
    is_kernel = category_flags(kernels["cat"], is_kernel_category)
    registry = np.array([k is not None for k in kinds] + [False], dtype=bool)[at] & is_kernel
    is_nccl = np.asarray(kernels["is_nccl"], dtype=bool)
    forced = np.array([u is not None for u in user] + [False], dtype=bool)[at] & is_kernel
    relabel = (registry & ~is_nccl) | forced
    tables.set_column("kernels", "is_comm", is_nccl | registry)
    if relabel.any():
        label_of = [u if u is not None else k for u, k in zip(user, kinds, strict=True)]
        new = np.array([label_of[c] if c >= 0 else None for c in codes[relabel]], dtype=object)
        collective = string_values(kernels["collective"])
        collective[relabel] = new
        tables.set_column("kernels", "collective", pd.Categorical(collective, categories=pd.Index(
            sorted({c for c in collective if isinstance(c, str)}), dtype="str")))
