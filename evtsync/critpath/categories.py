"""Cause categories of critical-path events: one extendable table of name patterns.

GPU events are classified by kernel name, first matching row wins (attention before GEMM,
because FlashAttention and fused-MHA kernels often carry ``cutlass``/``gemm`` in their names;
FSDP before concat/split, because its copy-in/out kernels are split/cat kernels). CPU events
are classified by node kind: launch delay (op overhead and launch calls), Python gap (time
outside recorded ops, annotation/python self time) and synchronization (blocking syncs).

Add patterns with :func:`add_pattern` (``evtsync attribute --category NAME=REGEX``), or
pass a table of your own to :func:`classify_names`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from evtsync.core.errors import InputError

#: Marker pattern of the default GEMM row: GEMMs are recognised by
#: :class:`evtsync.trace.kernels.KernelClassifier`, the one GEMM detector of the package (shared
#: with the compute blocks), not by a regex of this table.
GEMM_ROW = "<evtsync.trace.kernels GEMM detection>"

#: CPU cause categories (not name-based).
CPU_CATEGORIES = ("launch_delay", "python_gap", "synchronization")


@dataclass(frozen=True)
class CategoryPattern:
    """Kernel names matching ``pattern`` (case-insensitive search) belong to ``category``."""

    category: str
    pattern: str


#: The default table, in match order. ``other`` catches everything left.
DEFAULT_PATTERNS: list[CategoryPattern] = [
    CategoryPattern("attention", r"flash|fmha|attention|attn|sdpa|softmax|mha_|xformers|cudnn.*mha"),
    CategoryPattern("fsdp", r"fsdp|all_gather_copy|chunk_cat|split_with_sizes_copy|foreach_copy|"
                            r"nccl(?:Dev)?Kernel_AllGather|nccl(?:Dev)?Kernel_ReduceScatter"),
    CategoryPattern("gemm", GEMM_ROW),
    CategoryPattern("communication", r"nccl|rccl"),
    CategoryPattern("norm", r"norm"),
    CategoryPattern("concat_split", r"\bcat\b|concat|CatArray|split|chunk|stack"),
    CategoryPattern("memcpy", r"^memcpy|^memset|memcpy ?[dh]to[dh]|^memset"),
    CategoryPattern("elementwise", r"elementwise|vectorized|unrolled|pointwise|reduce_kernel|"
                                   r"fill|copy|memcpy|memset|triton_poi|triton_red|activation|gelu|"
                                   r"silu|relu|add|mul"),
]

_patterns: list[CategoryPattern] = list(DEFAULT_PATTERNS)
_compiled: list[tuple[str, re.Pattern[str] | _GemmMatcher]] = []


class _GemmMatcher:
    """Regex-like ``search`` that answers with the package's GEMM detector."""

    def __init__(self) -> None:
        from evtsync.trace.kernels import KernelClassifier

        self._classifier = KernelClassifier()

    def search(self, name: str) -> bool:
        return self._classifier.is_gemm(name)


def _compile() -> None:
    _compiled.clear()
    for p in _patterns:
        matcher = _GemmMatcher() if p.pattern == GEMM_ROW else re.compile(p.pattern, re.IGNORECASE)
        _compiled.append((p.category, matcher))


_compile()


def add_pattern(category: str, pattern: str, *, first: bool = True) -> None:
    """Add a name pattern (before the defaults unless ``first=False``)."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InputError(f"category {category}: invalid regular expression {pattern!r} ({exc})") from exc
    entry = CategoryPattern(category, pattern)
    if first:
        _patterns.insert(0, entry)
    else:
        _patterns.append(entry)
    _compile()


def reset_patterns() -> None:
    """Restore the default table."""
    _patterns[:] = DEFAULT_PATTERNS
    _compile()


def patterns() -> list[CategoryPattern]:
    """The table in use, in match order."""
    return list(_patterns)


def parse_category_option(text: str) -> tuple[str, str]:
    """``NAME=REGEX`` (the CLI's ``--category``) -> (name, regex)."""
    name, sep, regex = text.partition("=")
    if not sep or not name.strip() or not regex:
        raise InputError(f"--category {text!r}: expected NAME=REGEX, e.g. moe=grouped_gemm|moe_")
    return name.strip(), regex


def classify_gpu(name: str) -> str:
    """Category of one GPU event name."""
    for category, rx in _compiled:
        if rx.search(name):
            return category
    return "other"


def classify_names(names: list[str]) -> list[str]:
    """Categories of several GPU event names (memoised per distinct name)."""
    cache: dict[str, str] = {}
    out = []
    for n in names:
        c = cache.get(n)
        if c is None:
            c = cache[n] = classify_gpu(n)
        out.append(c)
    return out
