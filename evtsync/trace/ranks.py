"""Which rank a trace file belongs to, and what hardware it ran on."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from evtsync.core.errors import InputError, TraceError

log = logging.getLogger(__name__)

_RANK_IN_NAME = re.compile(r"(?:^|[^a-z])(?:rank|worker)[-_]?(\d+)(?!\d)", re.IGNORECASE)


def rank_from_name(path: Path) -> int | None:
    """Rank written in a file name (``rank-3``, ``rank3``, ``rank_3``, ``worker3``), or None."""
    match = _RANK_IN_NAME.search(path.name)
    return int(match.group(1)) if match else None


#: A rank named in an NVTX range or mark: "rank 3", "Rank: 3", "rank=3" (torch's "NCCL ... rank=3"),
#: not "local_rank=1" or "ranks 0-7".
NVTX_RANK_RE = re.compile(r"(?:^|[^A-Za-z0-9_])rank\s*[:=]?\s*(\d+)(?!\d)", re.IGNORECASE)
#: ``--rank-from`` value prefix of a user pattern over NVTX texts: ``nvtx:REGEX`` (one group: the rank).
NVTX_PREFIX = "nvtx:"


def nvtx_rank_pattern(rank_from: str | None) -> re.Pattern[str] | None:
    """The compiled REGEX of ``--rank-from nvtx:REGEX`` (None for other values); one clear error
    when it does not compile or has no group (its first group, or the one named ``rank``, is
    the rank)."""
    if not rank_from or not rank_from.startswith(NVTX_PREFIX):
        return None
    text = rank_from[len(NVTX_PREFIX):]
    try:
        pattern = re.compile(text)
    except re.error as exc:
        raise InputError(f"--rank-from {rank_from!r}: not a regular expression ({exc})") from None
    if pattern.groups < 1:
        raise InputError(f"--rank-from {rank_from!r}: the pattern needs a group that captures the rank, e.g. "
                         r"'nvtx:worker (\d+)'")
    return pattern


def nvtx_rank_claims(texts: list[str], pattern: re.Pattern[str] | None = None) -> dict[int, str]:
    """The ranks the NVTX ``texts`` name (``pattern``, else :data:`NVTX_RANK_RE`), each with
    the first text that names it."""
    rx = pattern or NVTX_RANK_RE
    claims: dict[int, str] = {}
    for text in texts:
        for match in rx.finditer(text):
            value = match.groupdict().get("rank") or match.group(1)
            if value is not None and str(value).isdigit():
                claims.setdefault(int(value), text)
    return claims


def _nvtx_rank(path: Path, header: dict[str, Any]) -> int | None:
    """The one rank the file's NVTX texts name (``header["nvtxRanks"]``, filled by the Nsight
    Systems reader), checked against the file name; None when they name none."""
    claims = header.get("nvtxRanks")
    if not claims:
        return None
    user = bool(header.get("nvtxRankPattern"))
    how = f"--rank-from nvtx:{header['nvtxRankPattern']}" if user else "NVTX ranges/marks"
    if len(claims) > 1:
        examples = "; ".join(f"rank {r}: {t!r}" for r, t in sorted(claims.items())[:4])
        if not user and rank_from_name(path) is not None:
            log.warning("%s: NVTX texts name several ranks (%s): using the file name's rank", path, examples)
            return None
        raise TraceError(f"{path}: {how} name {len(claims)} different ranks ({examples}): give a pattern that "
                         "matches only this process's rank (--rank-from nvtx:REGEX), --rank-from order or "
                         "RANK=PATH")
    rank, text = next(iter(claims.items()))
    from_name = rank_from_name(path)
    if from_name is not None and from_name != rank:
        raise TraceError(f"{path}: the file name says rank {from_name}, {how} say rank {rank} ({text!r}): which is "
                         "it? give the rank with RANK=PATH or --rank-from order")
    return int(rank)


def detect_rank(path: Path, header: dict[str, Any], given: int | None = None) -> tuple[int, str]:
    """Rank of a trace and where it came from (``"given"``, ``"distributedInfo"``, ``"NVTX"`` or
    ``"file name"``).

    A rank ``given`` by the user (``--rank-from``, ``RANK=PATH``) wins, with a warning when
    ``distributedInfo.rank`` says otherwise; then ``distributedInfo.rank``; then the rank
    that an Nsight Systems export's NVTX ranges or marks name (``header["nvtxRanks"]``: one
    rank, else an error; an error too when the file name names another); then the file
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
    from_nvtx = _nvtx_rank(path, header)
    if from_nvtx is not None:
        return from_nvtx, "NVTX"
    if header.get("nvtxRankPattern"):
        raise TraceError(f"{path}: no NVTX range or mark matches --rank-from nvtx:{header['nvtxRankPattern']}")
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


#: The device label of a rank whose trace has no GPU at all (no ``deviceProperties``, no GPU
#: event): a CPU-only job (e.g. gloo), described as such instead of as an "unknown" GPU (issue 46).
CPU_DEVICE_LABEL = "CPU"


def is_cpu_label(label: Any) -> bool:
    """Whether a device label (the ``gpu`` column of rank, tax and z-score tables) is a CPU-only rank's."""
    return str(label) == CPU_DEVICE_LABEL


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
