"""A set of per-rank traces of one job, loaded into columnar tables.

``load_traces`` expands folders, reads ranks in parallel (a process pool by default when
there is enough work to pay for it), checks that ranks are distinct and agree on the world
size, and concatenates the per-rank tables. Nothing is dropped silently: skipped events are
counted per rank and reason in ``TraceSet.skipped``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evtsync.errors import InputError, TraceError
from evtsync.trace.decode import decode_file
from evtsync.trace.tables import (
    SCOPES,
    RankTables,
    build_rank_tables,
    format_ranks,
    parse_rank_list,
)

log = logging.getLogger(__name__)

TRACE_SUFFIXES = (".json", ".json.gz")
#: Below this many bytes in total, reading in-process beats starting a process pool (the
#: pool costs 2-3 s to start and ship tables back; a 58 MB set of 256 ranks read 1.5x faster
#: in-process, docs/performance/reading.md).
PARALLEL_MIN_BYTES = 256 << 20


@dataclass
class TraceSet:
    """The tables of a multi-rank trace set (pandas DataFrames, one row per event).

    - ``kernels``: GPU events (kernels, memcpy, memset) with rank, device, stream, ts_ns,
      dur_ns, end_ns, name, correlation, external_id, is_nccl, collective and the NCCL /
      process-group fields (pg_name, pg_desc, pg_ranks, group_size, dtype, in/out_nelems,
      msg_bytes; -1 or missing where a trace lacks them).
    - ``cpu_ops``: cpu_op, user_annotation, python_function, gpu_user_annotation events.
    - ``runtime``: cuda_runtime / cuda_driver calls (launches, copies, synchronisations).
    - ``syncs``: cuda_sync events (present with ``enable_cuda_sync_events``).
    - ``ranks``: one row per rank: file, rank source, world size, GPU model, host, counts.
    - ``process_groups``: the ``pg_config`` entries seen in the traces, one row per PG.
    - ``skipped``: counts of events that could not be tabulated, per rank and reason.

    ``scope`` says which rows were kept when reading (:data:`~evtsync.trace.tables.SCOPES`):
    ``"all"``; ``"blocks"``, enough for alignment, the tax and compute blocks; or
    ``"collectives"``, enough for alignment and the tax. What needs more says so.
    """

    kernels: pd.DataFrame
    cpu_ops: pd.DataFrame
    runtime: pd.DataFrame
    syncs: pd.DataFrame
    ranks: pd.DataFrame
    process_groups: pd.DataFrame
    skipped: pd.DataFrame
    scope: str = "all"

    def require(self, scopes: tuple[str, ...], purpose: str) -> None:
        """Raise a clear error when ``purpose`` needs rows this set was not loaded with."""
        if self.scope not in scopes:
            raise InputError(f"{purpose} needs the rows of scope {' or '.join(map(repr, scopes))}, but these "
                             f"traces were loaded with scope={self.scope!r}; load them again with "
                             f"scope={scopes[0]!r}")

    @property
    def nccl_kernels(self) -> pd.DataFrame:
        """The NCCL/RCCL collective kernels only."""
        return self.kernels[self.kernels["is_nccl"]]

    @property
    def rank_ids(self) -> list[int]:
        """Sorted ranks present."""
        return sorted(self.ranks["rank"].tolist())

    def rank_info(self, rank: int) -> dict[str, Any]:
        """Metadata row of one rank as a dict."""
        row = self.ranks[self.ranks["rank"] == rank]
        if row.empty:
            raise KeyError(rank)
        return row.iloc[0].to_dict()


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Trace files named directly or found (non-recursively) in named folders, sorted."""
    files: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.iterdir()
                           if p.is_file() and p.name.lower().endswith(TRACE_SUFFIXES))
            if not found:
                raise TraceError(f"{path}: folder holds no trace files (*.json, *.json.gz)")
            ignored = [p.name for p in path.iterdir() if p.is_file() and p not in found]
            if ignored:
                log.debug("%s: ignoring non-trace files %s", path, ", ".join(sorted(ignored)))
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise TraceError(f"{path}: no such file or folder")
    if not files:
        raise TraceError("no trace files given")
    return files


def read_rank(path: str | os.PathLike[str], salvage: bool = False) -> RankTables:
    """Decode one trace file into its rank's tables (the unit of parallel work)."""
    return build_rank_tables(decode_file(path, salvage=salvage))


def _read_one(path: str, salvage: bool, cache_dir: str | None, scope: str) -> RankTables:
    """One rank file's tables (from the cache when there), reduced to ``scope``: the unit
    of work of every backend, so a worker ships back only what is kept."""
    from evtsync.trace.cache import read_rank_cached

    return read_rank_cached(path, salvage, cache_dir).in_scope(scope)


def _read_all(files: Sequence[Path], salvage: bool, jobs: int | None, workers: int | None = None,
              scheduler: str | None = None, cache: str | os.PathLike[str] | None = None,
              client: Any = None, scope: str = "all") -> list[RankTables]:
    from evtsync.parallel import backend_for

    total = sum(f.stat().st_size for f in files)
    task = functools.partial(_read_one, salvage=salvage, cache_dir=None if cache is None else str(cache),
                             scope=scope)
    with backend_for(len(files), jobs=jobs, workers=workers, scheduler=scheduler, total_bytes=total,
                     parallel_min_bytes=PARALLEL_MIN_BYTES, client=client) as backend:
        log.debug("reading %d trace file(s) on %s", len(files), backend.name)
        return backend.map(task, [str(f) for f in files], "reading traces")


def assemble(parts: Sequence[RankTables], scope: str = "all") -> TraceSet:
    """Check per-rank parts for consistency and concatenate them into a TraceSet."""
    seen: dict[int, str] = {}
    for part in parts:
        if part.rank in seen:
            raise TraceError(f"two files claim rank {part.rank}: {seen[part.rank]} and "
                             f"{part.info['path']}")
        seen[part.rank] = part.info["path"]
    sizes = {p.info["world_size"] for p in parts if p.info["world_size"] > 0}
    if len(sizes) > 1:
        detail = "; ".join(f"rank {p.rank}: {p.info['world_size']}" for p in parts)
        raise TraceError(f"ranks disagree on the world size ({detail})")
    parts = sorted(parts, key=lambda p: p.rank)
    ranks = pd.DataFrame([p.info for p in parts])
    world = next(iter(sizes)) if sizes else -1
    if world > 0:
        beyond = [p.rank for p in parts if p.rank >= world]
        if beyond:
            raise TraceError(f"rank(s) {beyond} not below the world size {world} "
                             f"({', '.join(seen[r] for r in beyond)})")
        if len(parts) < world:
            log.info("%d of %d ranks loaded", len(parts), world)
    skipped = pd.DataFrame(
        [{"rank": p.rank, "reason": reason, "count": count}
         for p in parts for reason, count in p.skipped.items()],
        columns=["rank", "reason", "count"])
    for _, row in skipped.iterrows():
        log.warning("rank %d: skipped %d events (%s)", row["rank"], row["count"], row["reason"])
    return TraceSet(
        kernels=_concat([p.kernels for p in parts]),
        cpu_ops=_concat([p.cpu_ops for p in parts]),
        runtime=_concat([p.runtime for p in parts]),
        syncs=_concat([p.syncs for p in parts]),
        ranks=ranks,
        process_groups=_pg_table(parts),
        skipped=skipped,
        scope=scope,
    )


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    from pandas.api.types import union_categoricals

    frames = [f for f in frames if len(f)] or frames[:1]
    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    out = {}
    for col in frames[0].columns:
        series = [f[col] for f in frames]
        if isinstance(series[0].dtype, pd.CategoricalDtype):
            out[col] = pd.Series(union_categoricals([s.astype("category") for s in series]))
        else:
            out[col] = pd.concat(series, ignore_index=True)
    return pd.DataFrame(out)


def _pg_table(parts: Sequence[RankTables]) -> pd.DataFrame:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for part in parts:
        for entry in part.pg_config:
            ranks = parse_rank_list(entry.get("ranks"))
            if ranks is None:
                continue
            key = (str(entry.get("pg_name", "")), format_ranks(ranks))
            row = rows.setdefault(key, {
                "pg_name": key[0], "pg_desc": str(entry.get("pg_desc", "")),
                "pg_size": int(entry.get("pg_size", len(ranks)) or len(ranks)),
                "pg_ranks": key[1], "backend_config": str(entry.get("backend_config", "")),
                "seen_on_ranks": []})
            row["seen_on_ranks"].append(part.rank)
    table = pd.DataFrame(list(rows.values()),
                         columns=["pg_name", "pg_desc", "pg_size", "pg_ranks", "backend_config",
                                  "seen_on_ranks"])
    table["seen_on_ranks"] = table["seen_on_ranks"].map(format_ranks)
    return table


def load_traces(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
                salvage: bool = False, jobs: int | None = None, workers: int | None = None,
                scheduler: str | None = None, cache: str | os.PathLike[str] | None = None,
                client: Any = None, scope: str = "all") -> TraceSet:
    """Load a multi-rank trace set from files and/or folders.

    ``salvage`` keeps the complete events of files cut mid-write (counting what was
    dropped); ``jobs`` sets the local reader processes (default: one per core, in-process
    for small sets; 1: in this process); ``workers`` reads on a local Dask cluster of that
    many workers, ``scheduler`` (or ``$DASK_SCHEDULER_ADDRESS``) on the Dask cluster at that
    address (``"local"`` starts one) and ``client`` on the Dask client given; ``cache`` is a
    folder of per-rank Parquet tables reused across runs (see :mod:`evtsync.trace.cache`).
    The tables do not depend on any of these choices.

    ``scope`` keeps fewer rows (each worker drops the rest before sending its tables back):
    ``"blocks"``, what alignment, the tax and compute blocks read; ``"collectives"``, the
    NCCL kernels and gloo collectives alone, all that alignment and the tax need
    (:data:`~evtsync.trace.tables.SCOPES`).
    """
    if scope not in SCOPES:
        raise InputError(f"scope {scope!r}: expected one of {', '.join(SCOPES)}")
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    files = expand_paths(paths)
    return assemble(_read_all(files, salvage, jobs, workers, scheduler, cache, client, scope), scope=scope)
