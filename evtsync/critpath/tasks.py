"""Attribution as per-rank tasks: bounded memory at any trace size.

A collective's attribution needs two ranks' DAGs (its straggler's and its fastest rank's),
but never at once: the straggler's side (walk its path, tile its time into segments,
name every event by its cross-rank key) needs only the straggler's DAG, and the fastest
rank's side (find those keys there and measure the same segments, walk its own path)
only the fastest rank's, given the straggler's keys. So attribution runs in two rounds of
one task per rank — round 1 the straggler sides of every collective a rank straggled in,
round 2 the fastest sides of every collective it was fastest in — and each task holds one
rank's tables and DAG; the caller holds the tax table and the per-collective sides (a few
arrays per collective), and :func:`combine` turns each pair into the collective's row.

A task gets either the rank's tables (in-process: the trace set is loaded already) or the
path of its trace file, which it reads itself (a process pool or a Dask cluster, see
:mod:`evtsync.core.parallel`); the result does not depend on where it ran.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from evtsync.critpath.dag import (
    EDGE_LAUNCH,
    KIND_GPU,
    KIND_NAMES,
    KIND_SYNC,
    SAME_STREAM_TOLERANCE_NS,
    RankDAG,
    Vocabulary,
    build_rank_dag,
)
from evtsync.critpath.walk import (
    BOTTOM_CYCLE,
    BOTTOM_NO_PARENT,
    BOTTOM_PREVIOUS,
    BOTTOM_WINDOW,
    GPU_SEGMENTS,
    NO_WINDOW,
    SEG_CPU,
    SEG_CPU_WAIT,
    SEG_KERNEL,
    SEG_LAUNCH_GAP,
    SEG_QUEUE,
    SEG_SYNC,
    SEGMENT_NAMES,
    THREAD_SLOTS,
    KeyIndex,
    Walker,
    Window,
    net_cpu_runs,
    segment_category,
)

log = logging.getLogger(__name__)

#: (pg, index) of a collective; (node, start ns, end ns) of one rank's instance of it.
CollectiveKey = tuple[str, int]


@dataclass
class RankWork:
    """One task: a rank, where its tables come from, and the collectives it works on.

    ``instances``: this rank's aligned collective instances (pg, index, stream, ts_ns,
    end_ns, correlation). ``straggler_of``: collectives whose straggler side to compute;
    ``fastest_of``: collectives whose fastest side to compute, with their straggler sides.
    """

    rank: int
    instances: pd.DataFrame
    path: str | None = None
    tables: tuple[pd.DataFrame, ...] | None = None
    read_options: dict[str, Any] = field(default_factory=dict)
    straggler_of: list[CollectiveKey] = field(default_factory=list)
    fastest_of: list[tuple[CollectiveKey, StragglerSide]] = field(default_factory=list)
    same_stream_tolerance_ns: int = SAME_STREAM_TOLERANCE_NS
    keep_paths: bool = False
    #: in-process only: the rank setups kept from round 1 for round 2 (never sent to a worker)
    setups: SetupCache | None = None


@dataclass
class PathRows:
    """One rank's critical path of one collective, node by node: the rows of
    :attr:`evtsync.critpath.AttributionResult.paths` before the collective's columns are added
    (plain arrays: the table is built once, from every path, by the caller)."""

    names: list[str]
    kinds: list[str]
    start_ns: np.ndarray
    end_ns: np.ndarray
    occurrence: np.ndarray

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class StragglerSide:
    """The straggler's path of one collective, tiled into segments (see :func:`_tile`).

    Chain position 0 is the collective's node, position j its (j-1)-th path node (newest
    first). ``names``/``threads``/``occurrence`` are the cross-rank keys of the path nodes.
    """

    key: CollectiveKey
    rank: int
    found: bool
    names: list[str] = field(default_factory=list)
    threads: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    occurrence: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    kinds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    seg_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    seg_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    start_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    has_launch: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    #: per chain position, the user's annotation around a GPU node's launch (``RankDAG.launch_note``)
    notes: list[str | None] = field(default_factory=list)
    bottom: str = ""
    here_start_ns: int = 0
    prev_end_ns: int | None = None
    rows: PathRows | None = None

    @property
    def path_len(self) -> int:
        """Nodes on the path (the collective excluded)."""
        return max(len(self.names) - 1, 0)


@dataclass
class FastestSide:
    """The fastest rank's counterparts of one straggler path, and its own path."""

    key: CollectiveKey
    rank: int
    found: bool
    matched: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    seg_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    path_keys: list[tuple[str, int, int]] = field(default_factory=list)
    path_us: float = float("nan")
    here_start_ns: int = 0
    prev_end_ns: int | None = None
    rows: PathRows | None = None


#: Columns of each trace table that the DAG and the instance lookup read; a task drops the
#: rest as soon as its rank is read (the tables are freed once the DAG is built).
DAG_COLUMNS = (
    ("device", "stream", "ts_ns", "end_ns", "name", "correlation", "is_nccl"),
    ("cat", "name", "pid", "tid", "ts_ns", "end_ns"),
    ("name", "pid", "tid", "ts_ns", "end_ns", "correlation", "stream"),
    ("correlation", "sync_kind", "wait_on_stream", "wait_on_event_corr", "stream"),
)


def _dag_columns(tables: tuple[pd.DataFrame, ...]) -> tuple[pd.DataFrame, ...]:
    """Each table reduced to the columns the DAG reads (those it has; rows and index kept)."""
    return tuple(df[[c for c in cols if c in df.columns]] for df, cols in zip(tables, DAG_COLUMNS, strict=True))


def _read_rank_tables(work: RankWork) -> tuple[pd.DataFrame, ...]:
    """The rank's kernels, cpu_ops, runtime and syncs tables, reduced to what the DAG reads."""
    if work.tables is not None:
        return _dag_columns(work.tables)
    from evtsync.trace.traceset import load_traces

    if work.path is None:
        raise ValueError(f"rank {work.rank}: work item has neither tables nor a trace path")
    traces = load_traces([work.path], jobs=1, **work.read_options)
    return _dag_columns((traces.kernels, traces.cpu_ops, traces.runtime, traces.syncs))


def release_freed_memory() -> None:
    """Hand memory freed by the allocator back to the OS (glibc's ``malloc_trim``), so a
    worker's resident size follows what it holds; a no-op elsewhere."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (looked up once: ``find_library`` runs ``ldconfig``)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


@dataclass
class RankSetup:
    """What the walks of one rank need: its DAG, key index, walker and name vocabulary, and its
    collective instances' (node, start ns, end ns) by (pg, index)."""

    dag: RankDAG
    keys: KeyIndex
    walker: Walker
    vocab: Vocabulary
    by_key: dict[CollectiveKey, tuple[int, int, int]]


def _rank_setup(work: RankWork) -> RankSetup:
    """Load (when needed) and build one rank's DAG, and find its collective instances' nodes.

    Only the DAG is kept: the rank's tables are dropped once it is built and the
    instances' nodes are found, so a task's memory at its walks is the DAG's.
    """
    kernels, cpu_ops, runtime, syncs = _read_rank_tables(work)
    vocab = Vocabulary()
    dag = build_rank_dag(kernels, cpu_ops, runtime, syncs, rank=work.rank, vocab=vocab,
                         same_stream_tolerance_ns=work.same_stream_tolerance_ns)
    del cpu_ops, runtime, syncs
    nodes = rank_instance_nodes(kernels, work.instances, dag)
    del kernels
    if work.setups is None or work.tables is None:  # a worker, or tables read here: hand their memory back
        release_freed_memory()
    return RankSetup(dag, KeyIndex(dag), Walker(dag), vocab, _by_key(work.instances, nodes))


def _by_key(instances: pd.DataFrame, nodes: np.ndarray) -> dict[CollectiveKey, tuple[int, int, int]]:
    """(node, start ns, end ns) of each of a rank's collective instances by (pg, index)."""
    return {(p, int(i)): (int(n), int(s), int(e)) for p, i, n, s, e in
            zip(instances["pg"], instances["index"], nodes, instances["ts_ns"], instances["end_ns"], strict=True)}


#: Most DAG nodes (all ranks together) whose setups an in-process attribution keeps in memory from
#: round 1 for round 2, about 150 bytes a node with the key index (~0.6 GB); the setups of further
#: ranks are written to a temporary file (:class:`SetupCache`) and read back in round 2.
SETUP_CACHE_NODES = 4_000_000


class SetupCache:
    """Rank setups kept between the two rounds when both run in the calling process, so that a
    rank that is a straggler in some collectives and the fastest in others has its DAG built
    once: round 1 keeps the setups of the ranks round 2 will need (``wanted``) in memory while
    their nodes stay within ``max_nodes`` (default :data:`SETUP_CACHE_NODES`), and writes the
    others to a temporary folder (``spill``, pickled arrays: reading one back costs a fraction
    of reading the rank's trace and building its DAG again); round 2 takes each one (and drops
    it). A setup is the same whichever round built it, so the results do not depend on the cache.

    ``within_largest_rank``: the setups kept in memory never hold more nodes than the largest
    rank's DAG built so far (instead of ``max_nodes``), so that memory stays bounded by the
    largest rank whatever the number of ranks: for tasks that read their own rank, where the
    set's tables are never all in memory. ``spill=False``: a setup that does not fit is built
    again in round 2 (as a worker of a pool does). :meth:`close` removes the folder."""

    def __init__(self, wanted: set[int], max_nodes: int | None = None, *, within_largest_rank: bool = False,
                 spill: bool = True) -> None:
        self.wanted = set(wanted)
        self.max_nodes = SETUP_CACHE_NODES if max_nodes is None else max_nodes
        self.within_largest_rank = within_largest_rank
        self.spill = spill
        self.largest = 0
        self.nodes = 0
        self._kept: dict[int, RankSetup] = {}
        self._spilled: dict[int, str] = {}
        self._prebuilt: dict[str, str] = {}
        self._folder: str | None = None

    def __contains__(self, rank: int) -> bool:
        return rank in self._kept or rank in self._spilled

    def prebuild(self, tables: Any, *, same_stream_tolerance_ns: int = SAME_STREAM_TOLERANCE_NS) -> None:
        """Build the DAG (and key index) of one rank file from its whole tables while they are read
        for the collectives (the reading's hook, :data:`evtsync.trace.traceset.RANK_HOOK`), and
        write it to the folder: the rounds then take it by the file's path instead of reading the
        file again and building its DAG (each rank read once, its DAG built once). ``tables``: the
        reader's :class:`~evtsync.trace.tables.RankTables`, the DAG's columns taken as
        ``load_traces`` of the file alone would give them (same rows, same order)."""
        frames = []
        for name, wanted in zip(("kernels", "cpu_ops", "runtime", "syncs"), DAG_COLUMNS, strict=True):
            columns = tables.columns[name]
            frames.append(pd.DataFrame({c: columns[c] for c in wanted if c in columns}, copy=False))
        kernels, cpu_ops, runtime, syncs = frames
        vocab = Vocabulary()
        dag = build_rank_dag(kernels, cpu_ops, runtime, syncs, rank=int(tables.rank), vocab=vocab,
                             same_stream_tolerance_ns=same_stream_tolerance_ns)
        nccl = kernels[kernels["is_nccl"]] if "is_nccl" in kernels else kernels
        nccl = nccl[["stream", "ts_ns", "correlation"]]  # what finds the instances' nodes later
        del frames, kernels, cpu_ops, runtime, syncs
        path = str(tables.info["path"])
        self.largest = max(self.largest, dag.n_nodes)
        self._prebuilt[path] = self._dump(f"file{len(self._prebuilt)}", (dag, KeyIndex(dag), vocab, nccl))

    def forget_prebuilt(self) -> None:
        """Remove the DAGs built while reading (the rounds will not use them)."""
        for path in self._prebuilt.values():
            _unlink(path)
        self._prebuilt.clear()

    @property
    def n_spilled(self) -> int:
        """Setups written to the temporary folder and not yet taken back."""
        return len(self._spilled)

    def get(self, work: RankWork, *, keep: bool) -> RankSetup:
        """The setup of ``work``'s rank: a kept or written one (dropped from the cache), else
        built (and, with ``keep``, kept or written when a later round wants it)."""
        kept = self._kept.pop(work.rank, None)
        if kept is not None:
            self.nodes -= kept.dag.n_nodes
            return kept
        path = self._spilled.pop(work.rank, None)
        if path is not None:
            return _read_setup(path)
        built = self._prebuilt.pop(str(work.path), None) if work.path is not None and work.tables is None else None
        budget = min(self.largest, self.max_nodes) if self.within_largest_rank else self.max_nodes
        if built is not None:
            again = keep and work.rank in self.wanted   # round 2 wants it too
            setup = _read_prebuilt(built, work, remove=not again)
            if again:
                self.wanted.discard(work.rank)
                if self.nodes + setup.dag.n_nodes <= budget:  # kept in memory (the file goes)
                    _unlink(built)
                    self._kept[work.rank] = setup
                    self.nodes += setup.dag.n_nodes
                else:  # read again from the file in round 2
                    self._prebuilt[str(work.path)] = built
            return setup
        setup = _rank_setup(work)
        self.largest = max(self.largest, setup.dag.n_nodes)
        budget = min(self.largest, self.max_nodes) if self.within_largest_rank else self.max_nodes
        if keep and work.rank in self.wanted:
            self.wanted.discard(work.rank)
            if self.nodes + setup.dag.n_nodes <= budget:
                self._kept[work.rank] = setup
                self.nodes += setup.dag.n_nodes
            elif self.spill:
                self._spilled[work.rank] = self._write(work.rank, setup)
        return setup

    def _write(self, rank: int, setup: RankSetup) -> str:
        # the walker is rebuilt from the DAG when read back
        return self._dump(f"rank{rank}", (setup.dag, setup.keys, setup.vocab, setup.by_key))

    def _dump(self, name: str, value: Any) -> str:
        import os
        import pickle
        import tempfile

        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="evtsync-setups-")
        path = os.path.join(self._folder, f"{name}.pickle")
        with open(path, "wb") as fh:
            pickle.dump(value, fh, protocol=5)
        return path

    def close(self) -> None:
        """Remove the temporary folder and forget every setup."""
        import shutil

        self._kept.clear()
        self._spilled.clear()
        self._prebuilt.clear()
        self.nodes = 0
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def _load(path: str, *, remove: bool) -> Any:
    import pickle

    with open(path, "rb") as fh:
        value = pickle.load(fh)
    if remove:
        _unlink(path)
    return value


def _unlink(path: str) -> None:
    import contextlib
    import os

    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _read_setup(path: str) -> RankSetup:
    """A setup written by :meth:`SetupCache._write` (the file is removed once read)."""
    dag, keys, vocab, by_key = _load(path, remove=True)
    return RankSetup(dag, keys, Walker(dag), vocab, by_key)


def _read_prebuilt(path: str, work: RankWork, *, remove: bool) -> RankSetup:
    """The setup of ``work`` from a DAG written by :meth:`SetupCache.prebuild`: its collective
    instances' nodes found as :func:`_rank_setup` finds them."""
    dag, keys, vocab, nccl = _load(path, remove=remove)
    dag.rank = work.rank
    return RankSetup(dag, keys, Walker(dag), vocab, _by_key(work.instances, rank_instance_nodes(nccl, work.instances, dag)))


def _setup_of(work: RankWork, *, keep: bool) -> RankSetup:
    return work.setups.get(work, keep=keep) if work.setups is not None else _rank_setup(work)


def rank_instance_nodes(kernels: pd.DataFrame, instances: pd.DataFrame, dag: RankDAG) -> np.ndarray:
    """GPU node of each of one rank's aligned collective instances (-1 where not found): the
    first kernel row with the instance's (stream, ts_ns, correlation), and the first GPU node
    made from that row."""
    nccl = kernels[kernels["is_nccl"]] if "is_nccl" in kernels else kernels
    keys_k = [nccl[c].to_numpy() for c in ("stream", "ts_ns", "correlation")]
    keys_i = [instances[c].to_numpy() for c in ("stream", "ts_ns", "correlation")]
    if all(a.dtype.kind in "iu" for a in keys_k + keys_i):  # integer keys (always, from the readers): no merge
        first: dict[tuple[int, int, int], int] = {}
        for key, row in zip(zip(*(a.tolist() for a in keys_k), strict=True), nccl.index.tolist(), strict=True):
            first.setdefault(key, row)
        rows = np.array([first.get(key, -1) for key in zip(*(a.tolist() for a in keys_i), strict=True)], dtype=np.int64)
        gpu = np.flatnonzero(dag.kind == KIND_GPU)
        gpu_rows = dag.row[gpu].astype(np.int64)
        order = np.argsort(gpu_rows, kind="stable")   # equal rows keep node order: the first node first
        at = np.searchsorted(gpu_rows[order], rows)
        hit = (rows >= 0) & (at < len(order))
        hit[hit] &= gpu_rows[order[at[hit]]] == rows[hit]
        nodes = np.full(len(instances), -1, dtype=np.int64)
        nodes[hit] = gpu[order[at[hit]]]
        return nodes
    table = pd.DataFrame({"row": nccl.index.to_numpy(), "stream": nccl["stream"].to_numpy(),
                          "ts_ns": nccl["ts_ns"].to_numpy(), "correlation": nccl["correlation"].to_numpy()})
    keys = pd.DataFrame({"stream": instances["stream"].to_numpy(), "ts_ns": instances["ts_ns"].to_numpy(),
                         "correlation": instances["correlation"].to_numpy()})
    merged = keys.merge(table.drop_duplicates(["stream", "ts_ns", "correlation"]),
                        on=["stream", "ts_ns", "correlation"], how="left")
    rows = merged["row"].fillna(-1).to_numpy().astype(np.int64)
    gpu = dag.kind == KIND_GPU
    lookup = pd.Series(np.flatnonzero(gpu), index=dag.row[gpu])
    lookup = lookup[~lookup.index.duplicated()]
    nodes = np.full(len(instances), -1, dtype=np.int64)
    ok = rows >= 0
    nodes[ok] = lookup.reindex(rows[ok]).fillna(-1).to_numpy().astype(np.int64)
    return nodes


def window_of(dag: RankDAG, previous: tuple[int, int, int] | None, end_ns: int) -> Window:
    """Window of a collective on one rank from its previous collective (node, start, end)."""
    if previous is None or previous[0] < 0:
        return Window(NO_WINDOW, NO_WINDOW, end_ns)
    launch = dag.launch_of(previous[0])
    if launch < 0:
        return Window(previous[2], previous[2], end_ns)
    return Window(previous[2], int(dag.end[launch]), end_ns, int(dag.start[launch]))


def _previous(by_key: dict[CollectiveKey, tuple[int, int, int]], key: CollectiveKey) -> tuple[int, int, int] | None:
    prev = by_key.get((key[0], key[1] - 1))
    return prev if prev is not None and prev[0] >= 0 else None


def straggler_task(work: RankWork) -> tuple[list[StragglerSide], dict[str, float]]:
    """Round 1: the straggler side of every collective in ``work.straggler_of``."""
    setup = _setup_of(work, keep=True)
    dag, keys, walker, vocab, by_key = setup.dag, setup.keys, setup.walker, setup.vocab, setup.by_key
    names = vocab.names
    out = []
    for key in work.straggler_of:
        here = by_key.get(key)
        if here is None or here[0] < 0:
            out.append(StragglerSide(key, work.rank, False))
            continue
        prev = _previous(by_key, key)
        win = window_of(dag, prev, here[1])
        path = walker.path(here[0], win, prev[0] if prev else -1)
        chain = [here[0], *path.tolist()]
        kinds = dag.kind[np.asarray(chain, dtype=np.int64)]
        occ = keys.occurrence(path, win) if len(path) else np.zeros(0, np.int64)
        pkeys = keys.key_of(path)
        # a sync the fastest rank did not make keeps its whole blocked time; whether it did is
        # known in round 2, so both tilings are kept (row 0: syncs after their GPU work, row 1: whole)
        own, wait, _ = walker.tile_path(chain, win, fastest=False)
        syncs = frozenset(j for j in range(1, len(chain)) if kinds[j] == KIND_SYNC)
        own_w, wait_w, _ = walker.tile_path(chain, win, fastest=False, whole_syncs=syncs) if syncs \
            else (own, wait, 0)
        k = len(chain)
        seg_kind = np.empty(2 * k, dtype=np.int8)
        for j in range(k):
            kd = int(kinds[j])
            seg_kind[2 * j] = SEG_KERNEL if kd == KIND_GPU else (SEG_SYNC if kd == KIND_SYNC else SEG_CPU)
            seg_kind[2 * j + 1] = (SEG_LAUNCH_GAP if dag.critical_kind[chain[j]] == EDGE_LAUNCH else SEG_QUEUE) \
                if kd == KIND_GPU else SEG_CPU_WAIT
        seg = np.empty((2, 2 * k), dtype=np.int64)
        seg[0, 0::2], seg[0, 1::2] = own, wait
        seg[1, 0::2], seg[1, 1::2] = own_w, wait_w
        oldest = chain[-1]
        parent = int(dag.critical[oldest])
        bottom = (BOTTOM_NO_PARENT if parent < 0 else BOTTOM_PREVIOUS if prev is not None and parent == prev[0]
                  else BOTTOM_CYCLE if parent in set(chain) else BOTTOM_WINDOW)
        side = StragglerSide(
            key=key, rank=work.rank, found=True,
            names=[names[i] for i in dag.name_id[np.asarray(chain, dtype=np.int64)].tolist()],
            threads=np.concatenate([[0], pkeys % THREAD_SLOTS]).astype(np.int64),
            occurrence=occ.astype(np.int64), kinds=kinds.astype(np.int8), seg_kind=seg_kind, seg_ns=seg,
            start_ns=dag.start[np.asarray(chain, dtype=np.int64)].astype(np.int64),
            has_launch=np.array([kinds[j] != KIND_GPU or dag.launch_of(c) >= 0 for j, c in enumerate(chain)]),
            notes=[dag.launch_note.get(int(c)) if kinds[j] == KIND_GPU else None for j, c in enumerate(chain)],
            bottom=bottom, here_start_ns=here[1], prev_end_ns=prev[2] if prev else None)
        if work.keep_paths:
            side.rows = _path_rows(dag, path, occ, names)
        out.append(side)
    return out, {"rank": work.rank, **dag.stats, "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (MB; NaN where the OS does not say)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return float("nan")
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def fastest_task(work: RankWork) -> tuple[list[FastestSide], dict[str, float]]:
    """Round 2: the fastest side of every collective in ``work.fastest_of``."""
    setup = _setup_of(work, keep=False)
    dag, keys, walker, vocab, by_key = setup.dag, setup.keys, setup.walker, setup.vocab, setup.by_key
    names = vocab.names
    out = []
    for key, s in work.fastest_of:
        here = by_key.get(key)
        if here is None or here[0] < 0 or not s.found:
            out.append(FastestSide(key, work.rank, False))
            continue
        prev = _previous(by_key, key)
        win = window_of(dag, prev, here[1])
        ids = np.array([vocab._ids.get(n, -1) for n in s.names[1:]], dtype=np.int64)
        gpu = s.kinds[1:] == KIND_GPU
        if len(ids):
            match = keys.lookup(np.where(ids >= 0, ids * THREAD_SLOTS + s.threads[1:], -1), gpu, s.occurrence, win)
            match = np.where(ids >= 0, match, -1)
        else:
            match = np.zeros(0, np.int64)
        chain_f = [here[0], *match.tolist()]
        own_f, wait_f, _ = walker.tile_path(chain_f, win, fastest=True)
        seg = np.empty(2 * len(chain_f), dtype=np.int64)
        seg[0::2], seg[1::2] = own_f, wait_f
        path_f = walker.path(here[0], win, prev[0] if prev else -1)
        occ_f = keys.occurrence(path_f, win) if len(path_f) else np.zeros(0, np.int64)
        pk = keys.key_of(path_f)
        path_keys = [(names[int(i) // THREAD_SLOTS], int(i) % THREAD_SLOTS, int(o))
                     for i, o in zip(pk.tolist(), occ_f.tolist(), strict=True)]
        own_p, wait_p, _ = walker.tile_path([here[0], *path_f.tolist()], win, fastest=False)
        side = FastestSide(key=key, rank=work.rank, found=True, matched=np.concatenate([[True], match >= 0]),
                           seg_ns=seg, path_keys=path_keys, path_us=(sum(own_p) + sum(wait_p)) / 1000.0,
                           here_start_ns=here[1], prev_end_ns=prev[2] if prev else None)
        if work.keep_paths:
            side.rows = _path_rows(dag, path_f, occ_f, names)
        out.append(side)
    return out, {"rank": work.rank, **dag.stats, "peak_rss_mb": peak_rss_mb()}


def _path_rows(dag: RankDAG, path: np.ndarray, occurrence: np.ndarray, names: list[str]) -> PathRows:
    return PathRows(names=[names[i] for i in dag.name_id[path].tolist()],
                    kinds=[KIND_NAMES[k] for k in dag.kind[path].tolist()],
                    start_ns=dag.start[path], end_ns=dag.end[path], occurrence=occurrence)


def combine(s: StragglerSide, f: FastestSide, row: dict[str, Any], *, share_band: tuple[float, float]
            ) -> tuple[np.ndarray, np.ndarray]:
    """Fill a collective's ``row`` from its two sides; returns (straggler segments, extras).

    Extras = straggler segment − fastest counterpart, CPU runs netted (see
    :func:`evtsync.critpath.walk.net_cpu_runs`); the principal cause is the largest.
    """
    k = len(s.names)
    matched = f.matched
    unmatched_sync = np.array([j > 0 and s.kinds[j] == KIND_SYNC and not matched[j] for j in range(k)])
    # straggler-only syncs keep their whole blocked time (the GPU work they waited for counts through them)
    if unmatched_sync.any():
        use_whole = _positions_covered(unmatched_sync)
        seg_s = np.where(np.repeat(use_whole, 2), s.seg_ns[1], s.seg_ns[0])
    else:
        seg_s = s.seg_ns[0]
    seg_f = np.where(np.repeat(matched, 2), f.seg_ns, 0)
    raw = (seg_s - seg_f).astype(np.float64)
    extra = net_cpu_runs(raw, s.kinds != KIND_GPU)
    tau = float(row["tau_max_us"])
    extra_us = float(extra.sum()) / 1000.0
    is_gpu_seg = np.isin(s.seg_kind, list(GPU_SEGMENTS))
    key_s = [(s.names[j + 1], int(s.threads[j + 1]), int(s.occurrence[j])) for j in range(k - 1)]
    n_common = 0
    for a, b in zip(key_s, f.path_keys, strict=False):
        if a != b:
            break
        n_common += 1
    unplaced = float("nan")
    if s.prev_end_ns is not None and f.prev_end_ns is not None:
        late = (s.here_start_ns - s.prev_end_ns) - (f.here_start_ns - f.prev_end_ns)
        unplaced = (late - float(extra.sum())) / 1000.0
    row.update(
        path_len=k - 1, path_cpu_nodes=int((s.kinds[1:] != KIND_GPU).sum()),
        path_unmatched=int((~matched[1:]).sum()), path_bottom=s.bottom,
        straggler_path_us=float(seg_s.sum()) / 1000.0, path_extra_us=extra_us,
        path_gpu_extra_us=float(extra[is_gpu_seg].sum()) / 1000.0,
        path_cpu_extra_us=float(extra[~is_gpu_seg].sum()) / 1000.0,
        explained_share=extra_us / tau if tau > 0 else float("nan"), n_common=n_common,
        lca_name=s.names[n_common] if n_common else None, fastest_path_us=f.path_us,
        fastest_matched_us=float(seg_f.sum()) / 1000.0, unplaced_us=unplaced)
    p = int(np.argmax(extra)) if len(extra) else -1
    if p >= 0 and extra[p] > 0:
        j = p // 2
        kind = int(s.kinds[j])
        seg = int(s.seg_kind[p])
        cls = segment_category(seg, kind)
        row.update(
            path_kind="gpu_only" if cls == "gpu" else cls, cause_name=s.names[j], cause_kind=KIND_NAMES[kind],
            cause_segment=SEGMENT_NAMES[seg],
            cause_category=(None if seg == SEG_KERNEL else "stream_queue") if cls == "gpu" else cls,
            cause_extra_us=float(extra[p]) / 1000.0, cause_raw_extra_us=float(raw[p]) / 1000.0,
            cause_duration_us=float(seg_s[p]) / 1000.0, cause_fastest_duration_us=float(seg_f[p]) / 1000.0,
            cause_occurrence=int(s.occurrence[j - 1]) if j else 0, cause_start_ns=int(s.start_ns[j]),
            cause_on_fastest_path=bool(j == 0 or key_s[j - 1] in set(f.path_keys)),
            # not a column: attribution names a kernel cause with it once its category is known
            cause_note=s.notes[j] if seg == SEG_KERNEL and j < len(s.notes) else None)
    share = row["explained_share"]
    if share_band[0] <= share <= share_band[1]:
        row["status"] = "ok"
    else:
        row["status"] = "unexplained"
        row["unexplained_reason"] = why_unexplained(s, seg_s, extra, row, share_band[0])
    return seg_s, extra


def exact_times(table: pd.DataFrame, rows: list[dict[str, Any]]) -> pd.DataFrame:
    """``cause_start_ns`` as exact integers (nullable): built from dicts with None, pandas makes it
    float64, which rounds epoch nanoseconds (~1.7e18) to 256 ns."""
    table["cause_start_ns"] = pd.array([r.get("cause_start_ns") for r in rows], dtype="Int64")
    return table


def _positions_covered(unmatched_sync: np.ndarray) -> np.ndarray:
    """Chain positions whose segments come from the whole-sync tiling: each straggler-only
    sync and its critical parent (whose own time ends where the sync began)."""
    out = unmatched_sync.copy()
    out[1:] |= unmatched_sync[:-1]
    return out


def why_unexplained(s: StragglerSide, seg_s: np.ndarray, extra: np.ndarray, row: dict[str, Any],
                    share_min: float) -> str:
    """One line on why a collective's path does not account for its tax (``row``: its table row)."""
    tau, extra_us = float(row["tau_max_us"]), float(row["path_extra_us"])
    head = f"path extra {extra_us:.0f} us of tau {tau:.0f} us"
    name = s.names[-1][:60]
    if s.bottom == BOTTOM_NO_PARENT and s.kinds[-1] == KIND_GPU and not s.has_launch[-1]:
        return f"{head}: the path stops at kernel {name}, which has no launch/correlation edge to the CPU"
    queued = (s.seg_kind == SEG_QUEUE) & (extra > 0.5 * max(tau, 0.0) * 1000.0)
    for p in np.flatnonzero(queued).tolist():
        if not s.has_launch[p // 2]:
            return (f"{head}: kernel {s.names[p // 2][:60]} waited {seg_s[p] / 1000.0:.0f} us after its stream "
                    "predecessor and has no launch/correlation edge to say why")
    if s.bottom == BOTTOM_CYCLE:
        return f"{head}: the critical-parent walk met a cycle at {name}"
    unplaced = float(row["unplaced_us"])
    if not np.isnan(unplaced) and abs(unplaced) > (1.0 - share_min) * tau:
        if unplaced > 0:
            return (f"{head}: the straggler was already {unplaced:.0f} us behind the fastest rank, counted from the "
                    "previous collective's end, when its path began (time carried over from before the window)")
        return (f"{head}: the straggler's path began {-unplaced:.0f} us ahead of the fastest rank's same events, "
                "counted from the previous collective's end (the fastest rank lost that time before them, "
                "or off the straggler's path)")
    if s.bottom == BOTTOM_NO_PARENT:
        return f"{head}: the path stops at {name}, which has no parent in the trace"
    n = s.path_len
    unmatched = int(row["path_unmatched"])
    if n and unmatched > n // 2:
        return (f"{head}: {unmatched} of {n} events on the straggler's path have no counterpart "
                "on the fastest rank (the ranks ran different work)")
    return f"{head}: the rest lies off the straggler's critical path"
