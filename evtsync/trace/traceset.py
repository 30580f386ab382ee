"""A set of per-rank traces of one job, loaded into columnar tables.

``load_traces`` expands folders, reads ranks in parallel (a process pool by default when
there is enough work to pay for it), checks that ranks agree on the world size, groups the
files of each rank into profiling windows by time, and concatenates the per-rank tables.
Nothing is dropped silently: events skipped for bad fields are counted per rank and reason
in ``TraceSet.skipped``, events that go to no table (metadata, flows, unknown categories)
per rank, phase and category in ``TraceSet.untabulated``, and what makes the rank set
incomplete or foreign in ``TraceSet.problems`` (checked before any tax, see
:meth:`TraceSet.check_complete`).

Windows: a rank may have several files (a flat ``tensorboard_trace_handler`` folder with
``worker0.<ts1>.pt.trace.json``, ``worker0.<ts2>…``; torchtitan's ``iteration_N/rank0_trace.json``
subfolders; any mix). The files of all ranks are put in windows by time: files whose time
spans overlap (through any rank) form one window, numbered from 0 in time order; every
table carries the ``window`` column. Two files of one rank that overlap in time, or fall
into one window, are an error.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import logging
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections import Counter

    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd

from evtsync.core.display import TablesDisplay
from evtsync.core.errors import InputError, TraceError, path_problem
from evtsync.core.units import format_offset
from evtsync.trace.cache import read_rank_cached
from evtsync.trace.decode import (
    decoder_mode,
    expect_json_bytes,
    json_bytes_estimate,
    reading_work,
    string_dtype,
)
from evtsync.trace.filelist import FileList, child_prefix, natural_name_key
from evtsync.trace.kernels import mark_comm_kernels, parse_comm_kernels
from evtsync.trace.ranks import nvtx_rank_pattern
from evtsync.trace.tables import (
    SCOPES,
    Columns,
    RankTables,
    format_ranks,
    n_rows,
    parse_rank_list,
    rank_ranges,
)

log = logging.getLogger(__name__)

TRACE_SUFFIXES = (".json", ".json.gz")
#: How a rank is found for each file: ``file`` (its ``distributedInfo.rank``, else its file
#: name) or ``order`` (the i-th file given, folders expanded in name order, is rank i).
RANK_FROM = ("file", "order")
#: Subfolders read as profiling windows of one job (torchtitan: ``iteration_10/rank0_trace.json``).
WINDOW_FOLDER_RE = re.compile(r"^iteration_\d+$")
_GIVEN_RANK_RE = re.compile(r"^(\d+)=(.+)$")
#: Columns of ``TraceSet.untabulated``.
UNTABULATED_COLUMNS = ["rank", "window", "phase", "category", "count", "reason"]


@dataclass(repr=False)
class TraceSet(TablesDisplay):
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
    - ``untabulated``: events that went to no table, per rank, window, phase and category,
      with the reason (metadata, flow, instant, not tabulated by design, unknown category).
    - ``problems``: one line per reason the rank set is incomplete or foreign (a missing
      rank, another job's file, an empty or kernel-less rank, a rank without collective
      kernels while others have them, kernels without ``dur``),
      naming rank and file; :meth:`check_complete` refuses them unless partial sets are
      allowed, and ``missing_ranks`` lists the ranks without a file.
    - every event table and ``ranks`` carry ``window``, the profiling window (0, 1, ...).

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
    untabulated: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=UNTABULATED_COLUMNS))
    problems: list[str] = field(default_factory=list)
    missing_ranks: tuple[int, ...] = ()
    #: the reader of the files (:mod:`evtsync.trace.readers`): ``kineto``, ``nsys``,
    #: ``nccl-inspector``, or several joined by ``+``
    source: str = "kineto"
    #: NCCL Inspector logs only: one row per logged collective and rank (the event tables
    #: are then empty: the logs hold no timeline), see :mod:`evtsync.trace.readers.inspector`
    logged: pd.DataFrame | None = None

    def check_complete(self, allow_partial: bool = False, purpose: str = "the tax") -> None:
        """Refuse an incomplete or foreign rank set before ``purpose`` is computed.

        Raises :class:`TraceError` with every problem on one line; with ``allow_partial``
        logs each as a warning instead (the tables then say which ranks are missing, see
        ``missing_ranks``).
        """
        if not self.problems:
            return
        if not allow_partial:
            raise TraceError(f"the rank set is not one complete job, refusing {purpose}: "
                             + "; ".join(self.problems) + " (pass --allow-partial, or allow_partial=True, "
                             "to go on with the ranks present)")
        for problem in self.problems:
            log.warning("going on as asked (--allow-partial): %s", problem)

    @property
    def n_windows(self) -> int:
        """Number of profiling windows."""
        return int(self.ranks["window"].max()) + 1 if len(self.ranks) else 0

    def require(self, scopes: tuple[str, ...], purpose: str) -> None:
        """Raise a clear error when ``purpose`` needs rows this set was not loaded with."""
        self.require_timeline(purpose)
        if self.scope not in scopes:
            raise InputError(f"{purpose} needs the rows of scope {' or '.join(map(repr, scopes))}, but these "
                             f"traces were loaded with scope={self.scope!r}; load them again with "
                             f"scope={scopes[0]!r}")

    def require_timeline(self, purpose: str) -> None:
        """Raise a clear error when ``purpose`` needs a kernel timeline and these are NCCL
        Inspector logs (one execution time per collective and rank, nothing else)."""
        if self.logged is not None:
            raise InputError(f"{purpose} needs a kernel timeline, but these are NCCL Inspector logs: they hold "
                             "the execution time of each collective on each rank (the tax and straggler identity), "
                             "no compute kernels or CPU ops; capture Kineto or Nsight Systems traces for it")

    @property
    def nccl_kernels(self) -> pd.DataFrame:
        """The NCCL/RCCL collective kernels only."""
        return self.kernels[self.kernels["is_nccl"]]

    @property
    def comm_kernels(self) -> pd.DataFrame:
        """Every communication kernel: NCCL/RCCL and those of the registry (DeepEP, NVSHMEM,
        all-to-all kernels, user patterns; :data:`~evtsync.trace.schema.COMM_KERNEL_PATTERNS`)."""
        return self.kernels[self.kernels["is_comm"]]

    @property
    def rank_ids(self) -> list[int]:
        """Sorted ranks present (each once, whatever the number of windows)."""
        return sorted(set(self.ranks["rank"].tolist()))

    def rank_info(self, rank: int) -> dict[str, Any]:
        """Metadata row of one rank as a dict."""
        row = self.ranks[self.ranks["rank"] == rank]
        if row.empty:
            raise KeyError(rank)
        return row.iloc[0].to_dict()


def natural_key(path: Path) -> str:
    """Sort key of a file name with its numbers compared as numbers (``trace_2`` before
    ``trace_10``): :func:`~evtsync.trace.filelist.natural_name_key` of its name."""
    return natural_name_key(path.name)


def _check_given_order(files: Iterable[Path]) -> None:
    """``--rank-from order``: files named one by one (a shell glob sorts ``trace_10`` before
    ``trace_2``) must not contradict the numbers in their names, or ranks would be wrong."""
    for before, after in itertools.pairwise(files):
        if before.parent == after.parent and natural_key(before) > natural_key(after):
            raise InputError(
                f"--rank-from order: {before.name} is given before {after.name}, against the numbers in "
                "their names (a shell glob sorts names as text: trace_10 before trace_2), so the ranks "
                "would be wrong; give the folder instead (its files are taken in natural name order), "
                "list the files in rank order, or name each rank with RANK=PATH")


#: The key of a ``sniffed`` count (:func:`trace_files_in`) for a Kineto-named file no reader recognises.
NOT_RECOGNISED = "(not recognised)"


def _trace_names_in(folder: Path, sniffed: Counter[str] | None = None) -> list[str]:
    """The names of a folder's files that some reader reads, in natural name order
    (:func:`trace_files_in`), listed as names (no ``Path`` per entry: issue 48)."""
    from evtsync.trace.readers import all_suffixes, sniff_reader

    suffixes = all_suffixes()
    prefix = child_prefix(folder)
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            lower = name.lower()
            if not lower.endswith(suffixes) or not entry.is_file():
                continue
            if lower.endswith(TRACE_SUFFIXES):  # Kineto's names: taken without a sniff...
                found.append(name)
                if sniffed is not None:  # ...unless the caller counts the readers: then sniffed too
                    kineto_named = sniff_reader(prefix + name)
                    sniffed[kineto_named.name if kineto_named is not None else NOT_RECOGNISED] += 1
                continue
            reader = sniff_reader(prefix + name)
            if reader is not None:
                found.append(name)
                if sniffed is not None:
                    sniffed[reader.name] += 1
    found.sort(key=natural_name_key)
    return found


def trace_files_in(folder: Path, sniffed: Counter[str] | None = None) -> list[Path]:
    """A folder's files that some reader reads: Kineto's suffixes, or another reader's
    suffix with content it recognises (a ``.log`` of stdout next to traces is not one), in
    natural name order. ``sniffed``, if given, counts every file listed by the reader its
    content calls for (by reader name; :data:`NOT_RECOGNISED`: a Kineto-named file whose content
    no reader recognises), so that its caller need not read the files' first bytes again (issue
    48, 4,096 Inspector logs): Kineto-named files, otherwise taken by name, are sniffed then."""
    return [folder / name for name in _trace_names_in(folder, sniffed)]


def unrecognised_note(folder: Path) -> str:
    """What the files of a folder that bear a trace suffix hold instead of a trace (a zeroed
    header, text in a ``.sqlite``): the reason none of them was taken, for the error message."""
    from evtsync.core.errors import describe_start
    from evtsync.trace.readers import all_suffixes, head_bytes, suffix_reader

    named = [p for p in sorted(folder.iterdir(), key=natural_key)
             if p.is_file() and p.name.lower().endswith(all_suffixes())]
    if not named:
        return ""
    first = named[0]
    reader = suffix_reader(first)
    expected = reader.description if reader is not None else "traces"
    more = f"; {len(named) - 1} more file(s) so named" if len(named) > 1 else ""
    return (f"; {len(named)} file(s) have a trace file's name but not its content: {first.name} "
            f"{describe_start(head_bytes(first, 64))}, which is none of {expected}{more}")


def expand_inputs(paths: Iterable[str | os.PathLike[str]], rank_from: str = "file",
                  sniffed: Counter[str] | None = None) -> list[tuple[Path, int | None]]:
    """Trace files named directly or found in named folders, each with the rank the user
    gave it (None: read from the file): :func:`list_inputs` as a list."""
    return list(list_inputs(paths, rank_from, sniffed))


def list_inputs(paths: Iterable[str | os.PathLike[str]], rank_from: str = "file",
                sniffed: Counter[str] | None = None) -> FileList:
    """Trace files named directly or found in named folders, each with the rank the user
    gave it (None: read from the file), as a compact :class:`~evtsync.trace.filelist.FileList`
    (issue 48: no ``Path`` held per file).

    A folder's trace files are taken in natural name order (``trace_2`` before ``trace_10``); a folder holding no trace files but
    ``iteration_N`` subfolders (torchtitan) gives the files of those, in N order. An
    argument ``RANK=PATH`` (e.g. ``3=trace.json``) gives the rank of that file; with
    ``rank_from="order"`` the i-th file is rank i. ``sniffed``: as for :func:`trace_files_in`.
    """
    if rank_from not in RANK_FROM and nvtx_rank_pattern(rank_from) is None:
        raise InputError(f"--rank-from {rank_from!r}: expected one of {', '.join(RANK_FROM)} or nvtx:REGEX")
    names: list[str] = []
    ranks: list[int | None] = []
    runs: list[tuple[int, str | None]] = []
    given_as: list[tuple[int, str]] = []  # (first file, the argument) of each argument

    def add(prefix: str | None, found: list[str], given: int | None) -> None:
        if not runs or runs[-1][1] != prefix:
            runs.append((len(names), prefix))
        names.extend(found)
        ranks.extend([given] * len(found))

    for item in paths:
        given_as.append((len(names), str(item)))
        given: int | None = None
        path = Path(item)
        match = _GIVEN_RANK_RE.match(str(item))
        if match and not path.exists():
            given, path = int(match.group(1)), Path(match.group(2))
        if path.is_dir():
            groups = [(path, _trace_names_in(path, sniffed))]
            if not groups[0][1]:
                windows = sorted((p for p in path.iterdir() if p.is_dir() and WINDOW_FOLDER_RE.match(p.name)),
                                 key=lambda p: int(p.name.split("_")[1]))
                groups = [(w, _trace_names_in(w, sniffed)) for w in windows]
            n_found = sum(len(found) for _, found in groups)
            if not n_found:
                from evtsync.trace.readers import all_suffixes

                raise TraceError(f"{path}: folder holds no trace files ({', '.join('*' + s for s in all_suffixes())}"
                                 f"), nor iteration_N subfolders of them{unrecognised_note(path)}")
            if log.isEnabledFor(logging.DEBUG):
                kept = set(groups[0][1]) if groups[0][0] is path else set()  # a set: linear at 2,048 ranks
                ignored = [p.name for p in path.iterdir() if p.is_file() and p.name not in kept]
                if ignored:
                    log.debug("%s: ignoring non-trace files %s", path, ", ".join(sorted(ignored)))
            if given is not None and n_found > 1:
                raise InputError(f"{item}: RANK=PATH names one file, but {path} is a folder of "
                                 f"{n_found} trace files")
            for folder, found in groups:
                add(child_prefix(folder), found, given)
        elif path.is_file():
            add(None, [str(path)], given)
        else:
            raise TraceError(f"{path}: {path_problem(path, 'file or folder')}")
    if not names:
        raise TraceError("no trace files given")
    out = FileList(names, ranks, runs)
    _refuse_repeats(out, given_as)
    if rank_from == "order":
        if any(g is not None for g in ranks):
            raise InputError("--rank-from order numbers the files itself: do not also give RANK=PATH")
        _check_given_order(out.paths)
        out = FileList(names, range(len(names)), runs)
    return out


def _refuse_repeats(files: FileList, given_as: list[tuple[int, str]]) -> None:
    """A file listed twice is refused, naming both arguments: the same argument given twice, a
    folder and a file in it, a symlink or hard link to a listed file (the same ``(st_dev,
    st_ino)``). Read twice, its records would be another rank's, or make two logs claim one rank
    (a streamed Inspector tax keeps every record until the end, then reads the job again)."""
    import bisect

    n = len(files)
    if n < 2:
        return
    dev, ino = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint64)  # ~16 bytes a file, while listing
    for i in range(n):
        path = files.path_str(i)
        try:
            st = os.stat(path)
        except OSError:
            raise TraceError(f"{path}: {path_problem(path, 'file')}") from None
        dev[i], ino[i] = st.st_dev, st.st_ino
    order = np.lexsort((ino, dev))  # stable: of two equal keys the earlier file first
    same = np.flatnonzero((dev[order][1:] == dev[order][:-1]) & (ino[order][1:] == ino[order][:-1]))
    if not len(same):
        return
    k = int(same[np.argmin(order[same + 1])])  # the first file (in the listing) that repeats one before it
    first, again = int(order[k]), int(order[k + 1])
    starts = [s for s, _ in given_as]
    arg_a, arg_b = (bisect.bisect_right(starts, i) - 1 for i in (first, again))
    where = (f"both found in argument {arg_a + 1} ({given_as[arg_a][1]})" if arg_a == arg_b else
             f"arguments {arg_a + 1} ({given_as[arg_a][1]}) and {arg_b + 1} ({given_as[arg_b][1]})")
    raise InputError(f"{files.path_str(first)} and {files.path_str(again)} are the same file, {where}: "
                     "give each file once")


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Trace files named directly or found in named folders (see :func:`expand_inputs`);
    a ``RANK=PATH`` entry is refused here (its rank would be lost: pass the entries to
    :func:`load_traces`, or use ``rank_from="order"``)."""
    inputs = expand_inputs(paths)
    given = [str(f) for f, rank in inputs if rank is not None]
    if given:
        raise InputError(f"RANK=PATH ({given[0]}) is read by load_traces and the tax, blocks and attribute "
                         "commands; here give the files plainly and use --rank-from order")
    return [f for f, _ in inputs]


def empty_event_tables() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Kernel, CPU-op, runtime and sync tables without rows but with every column a trace's
    tables have (for sources with no timeline: code that reads a column finds it)."""
    from evtsync.trace.decode import TABLE_FIELDS

    def frame(table: str, extra: dict[str, Any]) -> pd.DataFrame:
        columns: dict[str, Any] = {"rank": np.zeros(0, np.int32), "window": np.zeros(0, np.int32)}
        for name, kind in TABLE_FIELDS[table]:
            columns[name + "_ns" if kind == "t" else name] = (
                np.zeros(0, np.int64) if kind in ("i", "t") else pd.Categorical([], categories=[]))
        columns["end_ns"] = np.zeros(0, np.int64)
        return pd.DataFrame({**columns, **extra})

    kernel_extra = {"is_nccl": np.zeros(0, bool), "collective": pd.Categorical([], categories=[]),
                    "msg_bytes": np.zeros(0, np.int64), "is_comm": np.zeros(0, bool)}
    return frame("gpu", kernel_extra), frame("cpu", {}), frame("runtime", {}), frame("sync", {})


#: Called, where set, with each rank file's whole tables as this process reads them, before they
#: are reduced to the reading's scope: in-process attribution builds each rank's DAG from the read
#: that gives its collectives, instead of reading the file again (issue 30). A context variable:
#: the workers of a pool never see it (their reads are not hooked).
RANK_HOOK: contextvars.ContextVar[Callable[[RankTables], None] | None] = contextvars.ContextVar(
    "evtsync_rank_hook", default=None)


def _read_one(item: tuple[str, int | None], salvage: bool, cache_dir: str | None, scope: str,
              comm_kernels: tuple[tuple[str, str], ...] = (), fast_decoder_bytes: int = 0,
              rank_from: str | None = None) -> RankTables:
    """One rank file's tables (from the cache when there), reduced to ``scope``: the unit
    of work of every backend, so a worker ships back only what is kept. ``fast_decoder_bytes``:
    the JSON each process of the backend reads in all, for the compiled scanner's ``auto``
    rule (:func:`evtsync.trace.decode.expect_json_bytes`)."""
    path, rank = item
    if fast_decoder_bytes:
        expect_json_bytes(fast_decoder_bytes)  # the scanner loads when a file is really decoded
    tables = read_rank_cached(path, salvage, cache_dir, rank, rank_from)
    mark_comm_kernels(tables, comm_kernels)
    hook = RANK_HOOK.get()
    if hook is not None:
        hook(tables)
    return tables.in_scope(scope)


def _read_all(files: Sequence[tuple[Path, int | None]], salvage: bool, jobs: int | None,
              workers: int | None = None, scheduler: str | None = None,
              cache: str | os.PathLike[str] | None = None, client: Any = None, scope: str = "all",
              comm_kernels: tuple[tuple[str, str], ...] = (), rank_from: str | None = None) -> list[RankTables]:
    from evtsync.core.parallel import backend_for

    json_sizes = [json_bytes_estimate(f) for f, _ in files]
    json_total = (sum(size for (f, _), size in zip(files, json_sizes, strict=True)
                      if f.name.lower().endswith(TRACE_SUFFIXES)) if decoder_mode() == "auto" else 0)
    with backend_for(len(files), jobs=jobs, workers=workers, scheduler=scheduler,
                     work=reading_work(json_sizes, scope), client=client) as backend:
        # the scanner's load is paid once per process: what one process reads decides it
        per_process = json_total // max(1, min(getattr(backend, "jobs", 1), len(files)))
        task = functools.partial(_read_one, salvage=salvage, cache_dir=None if cache is None else str(cache),
                                 scope=scope, comm_kernels=comm_kernels, fast_decoder_bytes=per_process,
                                 rank_from=rank_from if nvtx_rank_pattern(rank_from) else None)
        log.debug("reading %d trace file(s) on %s", len(files), backend.name)
        try:
            return backend.map(task, [(str(f), r) for f, r in files], "reading traces")
        finally:
            expect_json_bytes(0)  # (in-process backends) the announcement ends with the reading


def _assign_windows(parts: Sequence[RankTables]) -> list[int]:
    """The profiling window of each part (see the module docstring); raises on overlaps."""
    by_rank: dict[int, list[int]] = {}
    for i, part in enumerate(parts):
        by_rank.setdefault(part.rank, []).append(i)
    if all(len(v) == 1 for v in by_rank.values()):
        return [0] * len(parts)
    span = [(int(p.info.get("start_ns", MISSING_TIME)), int(p.info.get("end_ns", MISSING_TIME))) for p in parts]
    for rank, idx in by_rank.items():
        if len(idx) < 2:
            continue
        for i in idx:
            if span[i][0] < 0:
                raise TraceError(f"rank {rank} has {len(idx)} files, and {parts[i].info['path']} holds no "
                                 "timed event: it cannot be placed in a profiling window")
        ordered = sorted(idx, key=lambda i: span[i])
        for a, b in zip(ordered, ordered[1:], strict=False):
            if span[b][0] < span[a][1]:
                raise TraceError(
                    f"two files claim rank {rank} over the same time: {parts[a].info['path']} and "
                    f"{parts[b].info['path']} overlap by {(span[a][1] - span[b][0]) / 1e6:.3f} ms "
                    "(the same window twice, or files of two jobs?)")
    window = _time_clusters(span)
    for rank, idx in by_rank.items():
        seen: dict[int, int] = {}
        for i in idx:
            if window[i] in seen:
                raise TraceError(
                    f"rank {rank}: {parts[seen[window[i]]].info['path']} and {parts[i].info['path']} fall into "
                    f"one profiling window (other ranks' files overlap both); cannot tell the windows apart")
            seen[window[i]] = i
    return window


def _time_clusters(span: Sequence[tuple[int, int]]) -> list[int]:
    """Unions of overlapping time spans, numbered in time order (-1 spans: cluster 0)."""
    order = sorted((i for i in range(len(span)) if span[i][0] >= 0), key=lambda i: span[i])
    cluster = [0] * len(span)
    current, reach = -1, None
    for i in order:
        if reach is None or span[i][0] > reach:
            current += 1
            reach = span[i][1]
        else:
            reach = max(reach, span[i][1])
        cluster[i] = current
    return cluster


def _apart_in_time(parts: Sequence[RankTables], windows: list[int]) -> list[str]:
    """Files whose time spans overlap no other rank's file of their window: another job's?

    Only for ranks with one file each (several files per rank are put in windows by time).
    """
    if len(parts) < 2 or max(windows, default=0) > 0:
        return []
    span = [(int(p.info.get("start_ns", MISSING_TIME)), int(p.info.get("end_ns", MISSING_TIME))) for p in parts]
    cluster = _time_clusters(span)
    if max(cluster) == 0:
        return []
    sizes = {c: cluster.count(c) for c in set(cluster)}
    main = max(sizes, key=lambda c: (sizes[c], -c))
    main_start = min(span[i][0] for i in range(len(parts)) if cluster[i] == main)
    out = []
    for i, part in enumerate(parts):
        if cluster[i] != main and span[i][0] >= 0:
            offset = format_offset(span[i][0] - main_start)
            out.append(f"files of another job? rank {part.rank} ({part.info['path']}) does not overlap in time "
                       f"with the other {sizes[main]} rank(s)' traces (starts {offset} from them)")
    return out


MISSING_TIME = -1
#: Most GPU models, NCCL versions or backends one job can show (one of each).
_SIGNATURE_FIELDS = (("gpu", "GPU model"), ("nccl_version", "NCCL version"), ("backend", "backend"))


def _rank_set_problems(parts: Sequence[RankTables], windows: list[int], world: int) -> tuple[list[str], tuple[int, ...]]:
    """Why the rank set is not one complete job, one line each, and the ranks without a file."""
    problems: list[str] = []
    present = sorted({p.rank for p in parts})
    expected: set[int] = set(range(world)) if world > 0 else set(present)
    for part in parts:
        for entry in part.pg_config:
            ranks = parse_rank_list(entry.get("ranks"))
            if ranks:
                expected.update(ranks)
    missing = tuple(sorted(expected.difference(present)))
    if missing:
        source = f"world size {world}" if world > 0 else "the process groups in pg_config"
        problems.append(f"rank(s) {rank_ranges(missing)} have no trace file ({source}; "
                        f"{len(present)} rank(s) present: {rank_ranges(present)})")
    n_windows = max(windows) + 1 if windows else 0
    if n_windows > 1:
        for w in range(n_windows):
            here = {p.rank for p, pw in zip(parts, windows, strict=True) if pw == w}
            lacking = sorted(set(present).difference(here))
            if lacking:
                problems.append(f"window {w}: rank(s) {rank_ranges(lacking)} have no file in it")
    for key, label in _SIGNATURE_FIELDS:
        values: dict[str, list[RankTables]] = {}
        for part in parts:
            value = str(part.info.get(key, "") or "")
            if value and value != "unknown":
                values.setdefault(value, []).append(part)
        if len(values) > 1:
            common = max(values, key=lambda v: len(values[v]))
            odd = "; ".join(f"rank {p.rank} ({p.info['path']}): {v}" for v, ps in values.items() if v != common
                            for p in ps)
            problems.append(f"files of another job? {len(values[common])} rank(s) have {label} {common}, but {odd}")
    problems.extend(_apart_in_time(parts, windows))
    with_kernels = sum(1 for p in parts if p.info.get("n_kernels", 0) > 0)
    with_collectives = sum(1 for p in parts if p.info.get("n_nccl_kernels", 0) > 0)
    for part in parts:
        where = f"rank {part.rank} ({part.info['path']})"
        if part.info.get("n_events", 0) == 0:
            problems.append(f"{where}: empty trace (no events in traceEvents)")
        elif with_kernels and part.info.get("n_kernels", 0) == 0:
            problems.append(f"{where}: no GPU kernels, while {with_kernels} other file(s) have them")
        elif with_collectives and part.info.get("n_nccl_kernels", 0) == 0:
            # its groups would be inferred without it: the tax over the others, silently (issue 33)
            problems.append(f"{where}: {part.info['n_kernels']} GPU kernel(s) but no NCCL collective kernel, "
                            f"while {with_collectives} other file(s) have them (its process groups would be "
                            "aligned without it)")
        if part.info.get("n_kernels_without_dur", 0):
            problems.append(f"{where}: {part.info['n_kernels_without_dur']} kernel(s) without a numeric dur "
                            "(left out, so the rank cannot join its collectives)")
    return problems, missing


_UNTABULATED_REASONS = {"M": "metadata event", "s": "flow event", "f": "flow event", "t": "flow event",
                        "i": "instant event", "I": "instant event", "C": "counter event"}


def _untabulated_reason(phase: str, category: str) -> str:
    from evtsync.trace.schema import IGNORED_CATEGORIES, canonical_category

    if phase == "X":
        return ("not tabulated by design" if canonical_category(category) in IGNORED_CATEGORIES
                else "unknown category")
    return _UNTABULATED_REASONS.get(phase, f"phase {phase!r} not read")


def _untabulated_table(parts: Sequence[RankTables], windows: list[int]) -> pd.DataFrame:
    rows = [{"rank": p.rank, "window": w, "phase": ph, "category": cat, "count": int(n),
             "reason": _untabulated_reason(ph, cat)}
            for p, w in zip(parts, windows, strict=True) for ph, cat, n in p.untabulated]
    return pd.DataFrame(rows, columns=UNTABULATED_COLUMNS)


#: Ranks whose untabulated events are logged one line each; beyond, one line in total.
_LOG_RANKS = 8


def _log_load_summary(parts: Sequence[RankTables], windows: list[int], table: pd.DataFrame) -> None:
    """One line per rank file (the first few) of what was tabulated and what was not;
    complete events of unknown categories warn, on every rank."""
    unknown = table[table["reason"] == "unknown category"]
    for (rank, window), sub in unknown.groupby(["rank", "window"], sort=True):
        log.warning("rank %d window %d: %d complete event(s) of unknown categories not tabulated: %s", rank,
                    window, int(sub["count"].sum()),
                    ", ".join(f"{c!r} ({n})" for c, n in zip(sub["category"], sub["count"], strict=True)))
    for part, window in list(zip(parts, windows, strict=True))[:_LOG_RANKS]:
        sub = table[(table["rank"] == part.rank) & (table["window"] == window)]
        by_reason = sub.groupby("reason", sort=True)["count"].sum()
        info = part.info
        log.info("rank %d window %d: %d events: %d kernels, %d CPU ops, %d runtime calls, %d NCCL kernels; "
                 "not tabulated %d (%s)", part.rank, window, info.get("n_events", 0), info.get("n_kernels", 0),
                 info.get("n_cpu_ops", 0), info.get("n_runtime", 0), info.get("n_nccl_kernels", 0),
                 int(sub["count"].sum()), ", ".join(f"{n} {r}" for r, n in by_reason.items()) or "none")
    if len(parts) > _LOG_RANKS:
        rest = parts[_LOG_RANKS:]
        log.info("... and %d more rank file(s): %d kernels, %d CPU ops, %d runtime calls; %d event(s) not "
                 "tabulated (TraceSet.ranks, TraceSet.untabulated)", len(rest),
                 sum(p.info.get("n_kernels", 0) for p in rest), sum(p.info.get("n_cpu_ops", 0) for p in rest),
                 sum(p.info.get("n_runtime", 0) for p in rest),
                 sum(n for p in rest for _, _, n in p.untabulated))


def assemble(parts: Sequence[RankTables], scope: str = "all") -> TraceSet:
    """Check per-rank parts for consistency, put them in windows and concatenate them."""
    sizes = {p.info["world_size"] for p in parts if p.info["world_size"] > 0}
    if len(sizes) > 1:
        by_size: dict[int, list[RankTables]] = {}
        for p in parts:
            if p.info["world_size"] > 0:
                by_size.setdefault(p.info["world_size"], []).append(p)
        common = max(by_size, key=lambda size: len(by_size[size]))
        odd = "; ".join(f"rank {p.rank} ({p.info['path']}): {size}" for size, ps in by_size.items() if size != common
                        for p in ps)
        raise TraceError(f"ranks disagree on the world size: {len(by_size[common])} file(s) say {common}, but {odd}")
    world = next(iter(sizes)) if sizes else -1
    if world > 0:
        beyond = [p for p in parts if p.rank >= world]
        if beyond:
            raise TraceError(f"rank(s) {[p.rank for p in beyond]} not below the world size {world} "
                             f"({', '.join(p.info['path'] for p in beyond)})")
    for part in parts:
        if "is_comm" not in part.columns["kernels"]:  # tables read without the registry (read_rank)
            mark_comm_kernels(part)
    windows = _assign_windows(parts)
    order = sorted(range(len(parts)), key=lambda i: (windows[i], parts[i].rank))
    parts = [parts[i] for i in order]
    windows = [windows[i] for i in order]
    for part, w in zip(parts, windows, strict=True):
        part.info["window"] = w
    ranks = pd.DataFrame([p.info for p in parts])
    problems, missing = _rank_set_problems(parts, windows, world)
    if world > 0 and len({p.rank for p in parts}) < world:
        log.info("%d of %d ranks loaded", len({p.rank for p in parts}), world)
    if max(windows, default=0) > 0:
        log.info("%d profiling windows of %d rank(s)", max(windows) + 1, len({p.rank for p in parts}))
    skipped = pd.DataFrame(
        [{"rank": p.rank, "window": w, "reason": reason, "count": count}
         for p, w in zip(parts, windows, strict=True) for reason, count in p.skipped.items()],
        columns=["rank", "window", "reason", "count"])
    for _, row in skipped.iterrows():
        log.warning("rank %d: skipped %d events (%s)", row["rank"], row["count"], row["reason"])
    untabulated = _untabulated_table(parts, windows)
    _log_load_summary(parts, windows, untabulated)
    return TraceSet(
        kernels=_concat([p.columns["kernels"] for p in parts], windows),
        cpu_ops=_concat([p.columns["cpu_ops"] for p in parts], windows),
        runtime=_concat([p.columns["runtime"] for p in parts], windows),
        syncs=_concat([p.columns["syncs"] for p in parts], windows),
        ranks=ranks,
        process_groups=_pg_table(parts),
        skipped=skipped,
        scope=scope,
        untabulated=untabulated,
        problems=problems,
        missing_ranks=missing,
    )


def _concat(tables: list[Columns], windows: Sequence[int]) -> pd.DataFrame:
    """The rows of ``tables`` (one per rank file, same columns) as one frame, with the
    profiling window of each file's rows in a ``window`` column after ``rank``.

    Column by column with numpy: a category list is the union of the tables' lists in order
    of first appearance (as :func:`pandas.api.types.union_categoricals`), each table's codes
    remapped through a lookup array. ``pd.concat``, ``union_categoricals`` and a
    ``DataFrame.insert`` per file cost ~20-40 µs per table and column, which dominated
    reading many small ranks (issue 21).
    """
    keep = [i for i, t in enumerate(tables) if n_rows(t)] or [0]
    tables = [tables[i] for i in keep]
    lengths = np.array([n_rows(t) for t in tables], dtype=np.int64)
    window = np.repeat(np.asarray([windows[i] for i in keep], dtype=np.int32), lengths)
    out: dict[str, Any] = {}
    for j, col in enumerate(tables[0]):
        arrays = [t[col] for t in tables]
        if col != "window":
            out[col] = _concat_arrays(arrays) if len(arrays) > 1 else arrays[0]
        if j == 0 or col == "window":
            out["window"] = window
    return pd.DataFrame(out, copy=False)


def _concat_arrays(arrays: list[Any]) -> Any:
    """One column from its pieces: numpy, categorical (categories united) or extension."""
    if any(isinstance(a, pd.Categorical) for a in arrays):
        return _concat_categoricals(arrays)
    if all(isinstance(a, np.ndarray) for a in arrays):
        return np.concatenate(arrays)
    return pd.concat([pd.Series(a) for a in arrays], ignore_index=True).array


def _concat_categoricals(arrays: list[Any]) -> pd.Categorical:
    """One categorical of ``arrays`` (non-categorical ones are made categorical first)."""
    cats = [a if isinstance(a, pd.Categorical) else pd.Categorical(a) for a in arrays]
    first = cats[0].categories
    if all(c.categories is first or c.categories.equals(first) for c in cats[1:]):
        codes = np.concatenate([np.asarray(c.codes) for c in cats])
        return pd.Categorical.from_codes(codes, dtype=cats[0].dtype, validate=False)
    position: dict[Any, int] = {}
    union: list[Any] = []
    parts = []
    lookups: dict[int, np.ndarray] = {}  # per distinct category Index (ranks share them: string_dtype)
    for c in cats:
        lookup = lookups.get(id(c.categories))
        if lookup is None:
            values = c.categories.tolist()
            lookup = np.empty(len(values) + 1, dtype=np.int32)
            for i, v in enumerate(values):
                code = position.get(v)
                if code is None:
                    code = position[v] = len(union)
                    union.append(v)
                lookup[i] = code
            lookup[-1] = -1  # code -1 (missing) indexes the last entry
            lookups[id(c.categories)] = lookup
        parts.append(lookup[np.asarray(c.codes)])
    codes = np.concatenate(parts)
    index_dtype = first.dtype if all(c.categories.dtype == first.dtype for c in cats) else None
    if index_dtype == "str":
        return pd.Categorical.from_codes(codes, dtype=string_dtype(union), validate=False)
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(pd.Index(union, dtype=index_dtype)),
                                     validate=False)


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
            if part.rank not in row["seen_on_ranks"]:
                row["seen_on_ranks"].append(part.rank)
    table = pd.DataFrame(list(rows.values()),
                         columns=["pg_name", "pg_desc", "pg_size", "pg_ranks", "backend_config",
                                  "seen_on_ranks"])
    table["seen_on_ranks"] = table["seen_on_ranks"].map(format_ranks)
    return table


def load_traces(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
                salvage: bool = False, jobs: int | None = None, workers: int | None = None,
                scheduler: str | None = None, cache: str | os.PathLike[str] | None = None,
                client: Any = None, scope: str = "all", rank_from: str = "file",
                comm_kernels: Iterable[str | tuple[str, str]] = ()) -> TraceSet:
    """Load a multi-rank trace set from files and/or folders.

    The tables do not depend on how they were read (processes, Dask, cache). Nothing is
    checked away here: an incomplete or foreign rank set is listed in ``TraceSet.problems`` and
    refused before any tax (:meth:`TraceSet.check_complete`).

    Parameters
    ----------
    paths : path or iterable of paths
        Trace files and/or folders; a path written ``"RANK=PATH"`` gives that file's rank.
    salvage : bool, default False
        Keep the complete events of files cut mid-write (counting what was dropped).
    jobs : int or None, default None
        Local reader processes (default: one per core, in-process for small sets; 1: in this
        process).
    workers : int or None, default None
        Read on a local Dask cluster of that many workers.
    scheduler : str or None, default None
        Read on the Dask cluster at that address (or ``$DASK_SCHEDULER_ADDRESS``; ``"local"``
        starts one).
    cache : path or None, default None
        A folder of per-rank Parquet tables reused across runs (see
        :mod:`evtsync.trace.cache`); None or False: no cache.
    client : dask.distributed.Client or None, default None
        Read on the Dask client given.
    scope : {"all", "blocks", "collectives"}, default "all"
        Keep fewer rows (each worker drops the rest before sending its tables back):
        ``"blocks"``, what alignment, the tax and compute blocks read; ``"collectives"``, the
        communication kernels and gloo collectives alone, all that alignment and the tax need
        (:data:`~evtsync.trace.tables.SCOPES`).
    rank_from : {"file", "order"} or "nvtx:REGEX", default "file"
        ``"file"`` reads each file's ``distributedInfo.rank`` (Nsight Systems exports: the
        rank their NVTX ranges or marks name), else the rank in its file name; ``"order"``
        numbers the files 0, 1, ... in the order given; ``"nvtx:REGEX"``: an Nsight Systems
        export's rank is REGEX's first group in its NVTX texts.
    comm_kernels : iterable of str or (str, str), default ()
        Communication-kernel name patterns, ``"REGEX=KIND"`` or ``(regex, kind)``, added to the
        built-in registry (:data:`evtsync.trace.kernels.COMM_KERNEL_PATTERNS`).

    Returns
    -------
    TraceSet
        The typed tables of every rank (kernels, CPU operators, runtime calls, syncs, ranks),
        with what was skipped and the problems found.

    Raises
    ------
    TraceError
        No trace files, a missing path, a folder without traces, or a file that cannot be
        decoded (without ``salvage``).
    InputError
        Bad options: an unknown ``rank_from`` or ``scope``, ``RANK=PATH`` naming a folder or
        combined with ``rank_from="order"``.
    """
    if scope not in SCOPES:
        raise InputError(f"scope {scope!r}: expected one of {', '.join(SCOPES)}")
    if cache is False:
        cache = None
    elif cache is True:
        from evtsync.trace.cache_dir import default_cache_dir

        cache = default_cache_dir()
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    files = expand_inputs(paths, rank_from)
    sources = _sources_of(files)
    if "nccl-inspector" in sources.values():
        return _load_logs(files, sources, salvage, jobs, workers, scheduler, client)
    patterns = parse_comm_kernels(comm_kernels)
    traces = assemble(_read_all(files, salvage, jobs, workers, scheduler, cache, client, scope, patterns,
                                rank_from=rank_from), scope=scope)
    traces.source = "+".join(sorted(set(sources.values())))
    if cache is not None:
        from evtsync.trace.cache import RankCache, cache_max_bytes

        RankCache(Path(cache)).prune_if_grown(cache_max_bytes())  # capped: least recently used entries go
    return traces


def _sources_of(files: Sequence[tuple[Path, int | None]]) -> dict[Path, str]:
    """The reader of each file, by content (:func:`evtsync.trace.readers.reader_for`)."""
    from evtsync.trace.readers import reader_for

    return {f: reader_for(f).name for f, _ in files}


def _read_log(item: tuple[str, int | None], salvage: bool) -> Any:
    """One NCCL Inspector log's collective records (the unit of parallel work)."""
    from evtsync.trace.readers.inspector import read_log

    path, rank = item
    return read_log(path, salvage=salvage, rank=rank)


def _load_logs(files: Sequence[tuple[Path, int | None]], sources: dict[Path, str], salvage: bool,
               jobs: int | None, workers: int | None, scheduler: str | None, client: Any) -> TraceSet:
    """The TraceSet of a folder of NCCL Inspector logs (nothing else may be mixed in)."""
    from evtsync.core.parallel import backend_for
    from evtsync.trace.readers import reader_named

    others = [f"{f} ({sources[f]})" for f, _ in files if sources[f] != "nccl-inspector"]
    if others:
        raise InputError(f"NCCL Inspector logs cannot be mixed with traces of other sources in one job: "
                         f"{', '.join(others[:3])}{' ...' if len(others) > 3 else ''}")
    from evtsync.trace.readers.inspector import inspector_work

    reader = reader_named("nccl-inspector")
    sizes = [reader.cost(f) for f, _ in files]
    # the pool only where the cost model says it pays, as for every other reader
    with backend_for(len(files), jobs=jobs, workers=workers, scheduler=scheduler, total_bytes=sum(sizes),
                     work=inspector_work(sizes), client=client) as backend:
        task = functools.partial(_read_log, salvage=salvage)
        logs = backend.map(task, [(str(f), r) for f, r in files], "reading NCCL Inspector logs")
    return logs_traceset(logs)


def logs_traceset(logs: Sequence[Any]) -> TraceSet:
    """The TraceSet of read NCCL Inspector logs (:func:`~evtsync.trace.readers.inspector.read_log` results)."""
    from evtsync.trace.readers.inspector import assemble_logs

    kernels, cpu_ops, runtime, syncs = empty_event_tables()
    return TraceSet(kernels=kernels, cpu_ops=cpu_ops, runtime=runtime, syncs=syncs, **assemble_logs(list(logs)))
