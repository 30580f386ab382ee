"""Backend-true words for the report (issue 46, item 6): a CPU-only (gloo) job's report says what
its collectives are measured on, and never calls its ranks GPUs, NCCL kernels or "unknown".

The device label of a rank is the ``gpu`` column of the run's tables: a GPU model, or
:data:`evtsync.trace.ranks.CPU_DEVICE_LABEL` for a rank with no GPU at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from evtsync.core.vocabulary import collective_event_words
from evtsync.trace.ranks import is_cpu_label


def all_cpu(labels: Iterable[Any]) -> bool:
    """Whether every device label given is a CPU-only rank's (False for none)."""
    seen = [str(v) for v in labels]
    return bool(seen) and all(is_cpu_label(v) for v in seen)


def device_word(cpu: bool) -> str:
    """"device" for CPU-only runs (their label is CPU), else "GPU"."""
    return "device" if cpu else "GPU"


def tau_words(cpu: bool) -> str:
    """What tau is the max − min of."""
    return f"{collective_event_words(cpu)} duration"


def straggler_words(cpu: bool) -> str:
    """How the straggler is found (the last to arrive)."""
    return f"shortest {collective_event_words(cpu)}"
