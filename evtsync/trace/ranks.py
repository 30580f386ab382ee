"""Which rank a trace file belongs to, and what hardware it ran on."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from evtsync.errors import TraceError

log = logging.getLogger(__name__)

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)(?!\d)", re.IGNORECASE)


def rank_from_name(path: Path) -> int | None:
    """Rank written in a file name (``rank-3``, ``rank3``, ``rank_3``, ``worker3``), or None."""
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


def detect_rank(path: Path, header: dict[str, Any], given: int | None = None) -> tuple[int, str]:
    """Rank of a trace and where it came from (``"given"``, ``"distributedInfo"`` or ``"file name"``).

    A rank ``given`` by the user (``--rank-from``, ``RANK=PATH``) wins, with a warning when
    ``distributedInfo.rank`` says otherwise; then ``distributedInfo.rank``; then the file
    name, with a warning; with none of them, a :class:`TraceError` says what to do.
    """
    info = header.get("distributedInfo")
    recorded = int(info["rank"]) if isinstance(info, dict) and isinstance(info.get("rank"), int) \
        and info["rank"] >= 0 else None
    if given is not None:
        if recorded is not None and recorded != given:
            log.warning("%s: distributedInfo.rank is %d; using rank %d as given", path, recorded, given)
        return int(given), "given"
    if recorded is not None:
        return recorded, "distributedInfo"
    from_name = rank_from_name(path)
    if from_name is not None:
        log.warning("%s: no rank in distributedInfo; using rank %d from the file name",
                    path, from_name)
        return from_name, "file name"
    raise TraceError(
        f"{path}: cannot tell which rank this trace belongs to: no distributedInfo.rank and no "
        "rank in the file name (expected e.g. rank-3, rank3 or worker3 in the name); give it with "
        "--rank-from order (ranks 0, 1, ... in the order of the files; a folder's in natural name order, "
        "trace_2 before trace_10), --rank-from file (the "
        "file name) or RANK=PATH (load_traces(rank_from=...) in Python)")


def gpu_model(header: dict[str, Any], device: int | None) -> str:
    """GPU model name from ``deviceProperties`` for ``device`` (first entry if unknown).

    Vendor prefixes are dropped ("NVIDIA H200" -> "H200"); "unknown" when absent.
    """
    props = header.get("deviceProperties")
    if not isinstance(props, list) or not props:
        return "unknown"
    chosen = props[0]
    if device is not None:
        for entry in props:
            if isinstance(entry, dict) and entry.get("id") == device:
                chosen = entry
                break
    name = str(chosen.get("name", "unknown")) if isinstance(chosen, dict) else "unknown"
    return short_gpu_name(name)


def short_gpu_name(name: str) -> str:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"H100"``; ``"AMD Instinct MI300X"`` -> ``"MI300X"``."""
    cleaned = re.sub(r"^(NVIDIA|AMD Instinct|AMD|Tesla)\s+", "", name.strip(), flags=re.I)
    cleaned = re.sub(r"^Tesla\s+", "", cleaned, flags=re.I)
    match = re.match(r"([A-Z]+\d+[A-Z]?)", cleaned)
    return match.group(1) if match else (cleaned or "unknown")
